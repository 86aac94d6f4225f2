"""The graph contract, egress and failure tests against a real SPARQL server
(``oxigraph serve`` on 127.0.0.1, started by the tests)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cleveragents.infrastructure.acms.sparql_endpoint_graph import SparqlEndpointGraphBackend
from cleveragents.testing.backend_contracts import GraphIndexContract
from remote_servers import ServerProcess, oxigraph_server

__all__ = ["oxigraph_server"]  # the fixture, re-exported so pytest finds it


def endpoint(server: ServerProcess, **kwargs: object) -> SparqlEndpointGraphBackend:
    return SparqlEndpointGraphBackend(
        server.uri + "/query",
        update_url=server.uri + "/update",
        store_url=server.uri + "/store",
        **kwargs,  # type: ignore[arg-type]
    )


def emptied(backend: SparqlEndpointGraphBackend) -> None:
    try:
        for rid in backend.resource_ids():
            backend.delete(rid)
    finally:
        backend.close()


class TestSparqlEndpointContract(GraphIndexContract):
    @pytest.fixture
    def backend(self, oxigraph_server: ServerProcess) -> Iterator[SparqlEndpointGraphBackend]:
        b = endpoint(oxigraph_server)
        yield b
        emptied(b)
