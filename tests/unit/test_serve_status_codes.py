"""The JSON API's status codes: the caller's fault (400, 403) or the
service's (503, with Retry-After), so a load balancer or client can tell."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from cleveragents.cli.serve import ServiceTool, _arguments_model, _http_app, make_mcp_server
from cleveragents.domain.models.acms.errors import (
    BusyError,
    IndexUnavailableError,
    ModelUnavailableError,
    QueryError,
    ScopeError,
)


def _app(error: Exception) -> Any:
    from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata

    def probe(query: str) -> dict[str, Any]:
        """Raises the error under test."""
        raise error

    tools = {
        "probe": ServiceTool(
            "probe", probe, FuncMetadata(arg_model=_arguments_model("probe", probe))
        )
    }
    return _http_app(tools, make_mcp_server(None, tools))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (IndexUnavailableError("the Milvus server at http://milvus:19530 is unreachable"), 503),
        (BusyError("another reindex holds the lock"), 503),
        (ModelUnavailableError("the model file is missing"), 503),
        (ScopeError("resource X is not in this service's scope"), 403),
        (QueryError("invalid query"), 400),
        (ValueError("bad value"), 400),
    ],
)
def test_errors_map_to_whose_fault_they_are(error: Exception, status: int) -> None:
    client = TestClient(_app(error))
    r = client.post("/api/probe", json={"query": "x"})
    assert r.status_code == status
    assert r.json() == {"error": str(error)}
    assert ("retry-after" in r.headers) == (status == 503)
