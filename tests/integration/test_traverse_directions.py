"""``traverse`` in every direction and with predicate filters equals a naive
breadth-first walk over only the in-scope triples (the oracle), on the real
graph store and on the in-memory reference graph."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cleveragents.domain.models.acms.errors import QueryLimitError
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
    return walk(triples, start, depth, direction, predicates)[0]


def walk(
    triples: set[tuple[str, str, str]],
    start: str,
    depth: int,
    direction: str,
    predicates: frozenset[str] | None,
) -> tuple[list[tuple[str, str, str]], int]:
    """The triples within ``depth`` hops, and how many hops the walk took
    (it ends early at a hop that reaches no new node)."""
    kept = {t for t in triples if predicates is None or t[1] in predicates}
    out: list[tuple[str, str, str]] = []
    visited, frontier = {start}, [start]
    hops = 0
    for _ in range(depth):
        hops += 1
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
    return out, hops


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
    def make(max_rows: int = 10_000):  # type: ignore[no-untyped-def]
        if request.param == "rdflib":
            return RdflibGraphBackend(tmp_path_factory.mktemp("g"), max_rows=max_rows)
        return MemoryGraphIndex(max_rows=max_rows)

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


@example(  # self-loops: the walk ends after hop 1, which is never stopped
    data=[(A, 0, UKO + "calls", 0), (A, 0, UKO + "imports", 0)],
    start=0,
    depth=2,
    direction="out",
    predicates=None,
    max_rows=1,
)
@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    data=edges,
    start=st.integers(0, 5),
    depth=st.integers(1, 5),
    direction=st.sampled_from(["out", "in", "both"]),
    predicates=st.none() | st.frozensets(st.sampled_from(PREDICATES), min_size=1),
    max_rows=st.integers(1, 8),
)
def test_a_walk_past_max_rows_stops_at_the_first_hop_over_it(
    make_backend, data, start, depth, direction, predicates, max_rows
) -> None:
    """The oracle's walk, hop by hop: the answer when it stays within
    ``max_rows`` after its first hop, else a QueryLimitError naming the
    first hop past it (so the depth before it is the one that answers).  The
    first hop, the start's own edges, is never stopped (as ``get_triples``)."""
    triples = {(NODES[rid][s], p, NODES[rid][o]) for rid, s, p, o in data}
    scope = frozenset({A, B})
    backend = make_backend(max_rows)
    try:
        for rid in (A, B):
            mine = [t for t in triples if t[0].startswith(f"uko://{rid}/")]
            if mine:
                backend.upsert(rid, mine)
        origin = NODES[A][start]
        expected, walked = walk(triples, origin, depth, direction, predicates)
        if len(expected) <= max_rows:
            got = backend.traverse(
                origin, depth=depth, scope=scope, direction=direction, predicates=predicates
            )
            assert got.triples == expected
            return
        first_over = min(
            (
                hop
                # A hop is taken only if the one before reached a new node.
                for hop in range(2, walked + 1)
                if len(oracle(triples, origin, hop, direction, predicates)) > max_rows
            ),
            default=None,
        )
        if (
            first_over is None
        ):  # only the start's own edges pass it, or the walk ended: never stopped
            got = backend.traverse(
                origin, depth=depth, scope=scope, direction=direction, predicates=predicates
            )
            assert got.triples == expected
            return
        with pytest.raises(QueryLimitError, match=f"at hop {first_over}: ") as caught:
            backend.traverse(
                origin, depth=depth, scope=scope, direction=direction, predicates=predicates
            )
        assert f"ask for depth {first_over - 1} or less" in str(caught.value)
        assert origin in str(caught.value)
    finally:
        if hasattr(backend, "close"):
            backend.close()


def test_a_walk_through_a_hub_stops_at_the_limit_not_at_the_graph(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file -> the resource node -> every file: depth 3 would expand all
    2,000 files; the walk stops as soon as it holds more than ``max_rows``,
    having looked up only the nodes before that (its cost follows the limit)."""
    from cleveragents.infrastructure.acms import rdflib_graph

    hub = f"uko://{A}/"
    files = [file_uri(A, f"f{i}.py") for i in range(2_000)]
    triples = [(hub, UKO + "contains", f) for f in files]
    for f in files:
        triples.append((f, UKO + "inResource", hub))
        triples += [(f, UKO + "defines", f"{f}#sym=s{j}") for j in range(5)]
    looked_up: list[str] = []
    real_get = rdflib_graph._SubjectIndex.get

    def counting_get(self, subject):  # type: ignore[no-untyped-def]
        looked_up.append(subject)
        return real_get(self, subject)

    with RdflibGraphBackend(tmp_path, max_rows=2_500) as g:
        g.upsert(A, triples)
        scope = frozenset({A})
        assert len(g.traverse(files[0], depth=2, scope=scope).triples) == 6 + 2_000
        monkeypatch.setattr(rdflib_graph._SubjectIndex, "get", counting_get)
        with pytest.raises(QueryLimitError, match="at hop 3: ask for depth 2 or less"):
            g.traverse(files[0], depth=3, scope=scope)
    with RdflibGraphBackend(tmp_path, max_rows=500) as g:
        # The hub's own edges are one node's, given whole as get_triples does.
        assert len(g.traverse(hub, depth=1, scope=frozenset({A})).triples) == 2_000
    # hop 1: the file; hop 2: its 5 symbols and the hub; hop 3: ~83 files
    # (6 triples each) until more than 2,500 -- not the hub's 1,999 files.
    assert 50 < len(looked_up) < 200
