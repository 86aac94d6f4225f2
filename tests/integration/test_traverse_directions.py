"""``traverse`` in every direction and with predicate filters equals a naive
breadth-first walk over only the in-scope triples (the oracle), on the real
graph store and on the in-memory reference graph."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cleveragents.domain.models.acms.uko import UKO, file_uri
from cleveragents.infrastructure.acms.memory_indexes import MemoryGraphIndex
from cleveragents.infrastructure.acms.rdflib_graph import RdflibGraphBackend

A = "01JD5TD11B0000000000000000"
B = "01JD5TD11B0000000000000001"
PREDICATES = [UKO + "calls", UKO + "imports", UKO + "defines"]
NODES = {rid: [file_uri(rid, f"n{i}.py") for i in range(6)] for rid in (A, B)}


def oracle(
    triples: set[tuple[str, str, str]],
    start: str,
    depth: int,
    direction: str,
    predicates: frozenset[str] | None,
) -> list[tuple[str, str, str]]:
    kept = {t for t in triples if predicates is None or t[1] in predicates}
    out: list[tuple[str, str, str]] = []
    visited, frontier = {start}, [start]
    for _ in range(depth):
        reached = []
        for node in frontier:
            edges = set()
            if direction in ("out", "both"):
                edges |= {(t, t[2]) for t in kept if t[0] == node}
            if direction in ("in", "both"):
                edges |= {(t, t[0]) for t in kept if t[2] == node}
            for t, nxt in sorted(edges):
                if t not in out:
                    out.append(t)
                if nxt not in visited:
                    visited.add(nxt)
                    reached.append(nxt)
        if not reached:
            break
        frontier = reached
    return out


edges = st.lists(
    st.tuples(
        st.sampled_from([A, B]),
        st.integers(0, 5),
        st.sampled_from(PREDICATES),
        st.integers(0, 5),
    ),
    max_size=30,
)


@pytest.fixture(params=["rdflib", "memory"])
def make_backend(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    def make():  # type: ignore[no-untyped-def]
        if request.param == "rdflib":
            return RdflibGraphBackend(tmp_path_factory.mktemp("g"))
        return MemoryGraphIndex()

    return make


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    data=edges,
    start=st.integers(0, 5),
    depth=st.integers(0, 4),
    direction=st.sampled_from(["out", "in", "both"]),
    predicates=st.none() | st.frozensets(st.sampled_from(PREDICATES), min_size=1),
    scope=st.sampled_from([frozenset({A}), frozenset({B}), frozenset({A, B})]),
)
def test_traverse_equals_the_oracle_over_in_scope_triples(
    make_backend, data, start, depth, direction, predicates, scope
) -> None:
    triples = {(NODES[rid][s], p, NODES[rid][o]) for rid, s, p, o in data}
    backend = make_backend()
    try:
        for rid in (A, B):
            mine = [t for t in triples if t[0].startswith(f"uko://{rid}/")]
            if mine:
                backend.upsert(rid, mine)
        in_scope = {t for t in triples if any(t[0].startswith(f"uko://{r}/") for r in scope)}
        origin = NODES[sorted(scope)[0]][start]
        got = backend.traverse(
            origin, depth=depth, scope=scope, direction=direction, predicates=predicates
        ).triples
        assert got == oracle(in_scope, origin, depth, direction, predicates)
    finally:
        if hasattr(backend, "close"):
            backend.close()


def test_reverse_edges_follow_writes(tmp_path: Path) -> None:
    with RdflibGraphBackend(tmp_path) as g:
        a, b, c = NODES[A][:3]
        g.upsert(A, [(a, UKO + "calls", c)])
        scope = frozenset({A})
        assert g.traverse(c, depth=1, scope=scope, direction="in").triples == [
            (a, UKO + "calls", c)
        ]
        g.upsert(A, [(b, UKO + "calls", c)], delete_subjects=[a])
        assert g.traverse(c, depth=1, scope=scope, direction="in").triples == [
            (b, UKO + "calls", c)
        ]
        with RdflibGraphBackend(tmp_path) as other:  # another handle's view follows too
            other.upsert(A, [(a, UKO + "calls", c)])
        assert g.traverse(c, depth=1, scope=scope, direction="in").triples == [
            (a, UKO + "calls", c),
            (b, UKO + "calls", c),
        ]
