"""Scope isolation against real servers, model-based: the state machines of
``test_scope_state_machines.py`` rerun with the remote backends as the
system under test (two clients on one Milvus collection or one SPARQL
dataset, closed and reopened at will), each checked after every query
against an oracle built from only the in-scope data:

- vectors (Milvus): numpy brute force, exact top-k and scores;
- graph (Oxigraph server): a fresh in-memory rdflib store of only the
  in-scope triples, exact answers for SPARQL, ``get_triples`` and
  ``traverse``; the oracle's typed literals are written in canonical form
  (Oxigraph stores ``"010"^^xsd:integer`` by value and reads back ``"10"``);
- text (Milvus BM25): Milvus's scores depend on collection-wide statistics,
  so no engine can be an exact oracle for them; the machine checks that the
  answer is exactly the in-scope units holding a query word (all of them
  when the limit allows, else that many), in score order, with their content
  and metadata, and that what the query language cannot honour is refused.

Example counts are small and derandomized: each step is a network round trip.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import rule, run_state_machine_as_test
from test_scope_state_machines import (
    XSD_INT,
    GraphScopeMachine,
    TextScopeMachine,
    VectorScopeMachine,
    _settings,
    assert_uris_in_scope,
    canonical,
    scopes,
    text_queries,
)

from cleveragents.domain.models.acms.backends import Literal, WriteTriple
from cleveragents.domain.models.acms.errors import QueryError
from cleveragents.infrastructure.acms.milvus_text import MilvusTextBackend, code_terms, parse_query
from cleveragents.infrastructure.acms.milvus_vector import MilvusVectorBackend
from cleveragents.infrastructure.acms.rdflib_graph import RdflibGraphBackend
from cleveragents.infrastructure.acms.sparql_endpoint_graph import SparqlEndpointGraphBackend
from remote_servers import ServerProcess, milvus_server, oxigraph_server

__all__ = ["milvus_server", "oxigraph_server"]  # fixtures, re-exported for pytest


class RemoteVectorMachine(VectorScopeMachine):
    """The FAISS machine's rules and oracle, over one Milvus collection."""

    uri: ClassVar[str] = ""

    def _open(self) -> MilvusVectorBackend:
        return MilvusVectorBackend(self.uri, dimension=6, collection="sm_vectors", timeout=30)

    def teardown(self) -> None:
        self.handles[0]._coll.delete_where('id != ""')
        super().teardown()


class RemoteTextMachine(TextScopeMachine):
    """Text rules over one Milvus collection; a set oracle (module docstring)."""

    uri: ClassVar[str] = ""

    def _open(self) -> MilvusTextBackend:
        return MilvusTextBackend(self.uri, collection="sm_text", timeout=30)

    def teardown(self) -> None:
        self.handles[0]._coll.delete_where('id != ""')
        super().teardown()

    @rule(scope=scopes, query=text_queries, limit=st.integers(1, 12), handle=st.integers(0, 1))
    def search(self, scope: frozenset[str], query: str, limit: int, handle: int) -> None:
        backend = self.handles[handle]
        try:
            words = set(parse_query(query))
        except QueryError:
            with pytest.raises(QueryError):
                backend.search(query, scope=scope, max_results=limit, syntax="tantivy")
            return
        matching = {
            uri: unit
            for rid in canonical(scope)
            for uri, unit in self.model.get(rid, {}).items()
            if words & set(code_terms(f"{unit.content}\n{unit.metadata.get('path', '')}").split())
        }
        got = backend.search(query, scope=scope, max_results=limit, syntax="tantivy")
        assert_uris_in_scope((r.uko_uri for r in got), scope)
        uris = [r.uko_uri for r in got]
        assert len(set(uris)) == len(uris)
        assert set(uris) <= set(matching)
        assert len(got) == min(limit, len(matching))
        scores = [r.score for r in got]
        assert scores == sorted(scores, reverse=True)
        for r in got:
            assert r.content == matching[r.uko_uri].content
            assert r.metadata == dict(matching[r.uko_uri].metadata)


def _canonical_literal(triple: WriteTriple) -> WriteTriple:
    s, p, o = triple
    if isinstance(o, Literal) and o.datatype == XSD_INT:
        return (s, p, Literal(str(int(o.value)), XSD_INT))
    return triple


class RemoteGraphMachine(GraphScopeMachine):
    """The rdflib machine's rules, over one Oxigraph dataset; rdflib is the oracle."""

    uri: ClassVar[str] = ""

    def _open(self) -> SparqlEndpointGraphBackend:
        return SparqlEndpointGraphBackend(
            self.uri + "/query",
            update_url=self.uri + "/update",
            store_url=self.uri + "/store",
            timeout=30,
        )

    def teardown(self) -> None:
        for rid in self.handles[0].resource_ids():
            self.handles[0].delete(rid)
        super().teardown()

    def _oracle(self, scope: frozenset[str]) -> RdflibGraphBackend:
        key = canonical(scope)
        oracle = self.oracles.get(key)
        if oracle is None:
            oracle = RdflibGraphBackend()
            for rid in sorted(key):
                if self.model.get(rid):
                    triples = {_canonical_literal(t) for t in self.model[rid]}
                    oracle.upsert(rid, sorted(triples, key=repr))
            self.oracles[key] = oracle
        return oracle


def _run(machine: Any, uri: str, examples: int, steps: int) -> None:
    machine.uri = uri
    run_state_machine_as_test(machine, settings=_settings(examples=examples, steps=steps))


def test_vector_scope_machine(milvus_server: ServerProcess) -> None:
    _run(RemoteVectorMachine, milvus_server.uri, examples=25, steps=20)


def test_text_scope_machine(milvus_server: ServerProcess) -> None:
    _run(RemoteTextMachine, milvus_server.uri, examples=25, steps=20)


def test_graph_scope_machine(oxigraph_server: ServerProcess) -> None:
    _run(RemoteGraphMachine, oxigraph_server.uri, examples=12, steps=20)
