"""ScopedView passes its scope everywhere and drops what a buggy backend leaks."""

from __future__ import annotations

from typing import ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from cleveragents.domain.models.acms.backends import GraphResult, TextResult, VectorResult
from cleveragents.domain.models.acms.scope import (
    ScopedView,
    _triple_in_scope,
    _triples_in_scope,
)
from cleveragents.domain.models.acms.stubs import (
    InMemoryGraphBackend,
    InMemoryTextBackend,
    InMemoryVectorBackend,
)
from cleveragents.domain.models.acms.uko import file_uri, module_uri, resource_id_of, unit_uri
from cleveragents.infrastructure.acms.memory_indexes import MemoryGraphIndex
from cleveragents.testing.backend_contracts import new_ulid

IN, OUT = new_ulid(), new_ulid()


class LeakyBackend:
    """Returns one in-scope and one out-of-scope item, and records the scope."""

    def __init__(self) -> None:
        self.scopes: list[object] = []

    def search(
        self, query: str, *, scope: frozenset[str], max_results: int = 20
    ) -> list[TextResult]:
        self.scopes.append(scope)
        return [
            TextResult(unit_uri(IN, "a.py", "L1-L2"), "in", 0.9),
            TextResult(unit_uri(OUT, "b.py", "L1-L2"), "out", 0.8),
        ]

    def similarity_search(
        self, embedding: list[float], *, scope: frozenset[str], top_k: int = 20
    ) -> list[VectorResult]:
        self.scopes.append(scope)
        return [
            VectorResult(unit_uri(OUT, "b.py", "L1-L2"), "out", 0.9),
            VectorResult(unit_uri(IN, "a.py", "L1-L2"), "in", 0.5),
        ]

    def _triples(self) -> GraphResult:
        a, b = file_uri(IN, "a.py"), file_uri(OUT, "b.py")
        return GraphResult(
            [(a, "urn:imports", module_uri("os")), (a, "urn:imports", b), (b, "urn:p", "lit")],
            {"rows": "3"},
        )

    def sparql_query(self, query: str, *, scope: frozenset[str]) -> GraphResult:
        self.scopes.append(scope)
        return self._triples()

    def get_triples(self, subject: str, *, scope: frozenset[str] | None = None) -> GraphResult:
        self.scopes.append(scope)
        return self._triples()

    def traverse(
        self, start: str, *, depth: int = 2, scope: frozenset[str] | None = None
    ) -> GraphResult:
        self.scopes.append(scope)
        return self._triples()


@pytest.fixture
def leaky() -> LeakyBackend:
    return LeakyBackend()


@pytest.fixture
def view(leaky: LeakyBackend) -> ScopedView:
    return ScopedView(leaky, leaky, leaky, frozenset({IN.lower()}))


def test_scope_is_canonical_and_passed_to_every_call(view: ScopedView, leaky: LeakyBackend) -> None:
    view.search("q")
    view.similarity_search([1.0])
    view.sparql_query("ASK {}")
    view.get_triples("urn:s")
    view.traverse("urn:s", depth=1)
    assert leaky.scopes == [frozenset({IN})] * 5
    assert view.scope == frozenset({IN})


def test_out_of_scope_results_are_dropped_and_logged(view: ScopedView) -> None:
    with capture_logs() as logs:
        text = view.search("q")
        vec = view.similarity_search([1.0])
        graph = view.traverse("urn:s")
    assert [r.content for r in text] == ["in"]
    assert [r.content for r in vec] == ["in"]
    assert graph.triples == [(file_uri(IN, "a.py"), "urn:imports", module_uri("os"))]
    assert graph.metadata == {"rows": "3"}
    events = [e for e in logs if e["event"] == "acms.scope.dropped_out_of_scope"]
    assert [(e["backend"], e["dropped"], e["log_level"]) for e in events] == [
        ("text", 1, "error"),
        ("vector", 1, "error"),
        ("graph", 2, "error"),
    ]


def test_resource_filter_predicate(view: ScopedView) -> None:
    assert view.resource_filter(unit_uri(IN, "x.py", "L1-L1"))
    assert not view.resource_filter(unit_uri(OUT, "x.py", "L1-L1"))
    assert not view.resource_filter(module_uri("os"))


def test_view_over_stubs_validates_arguments() -> None:
    view = ScopedView(
        InMemoryTextBackend(), InMemoryVectorBackend(), InMemoryGraphBackend(), frozenset()
    )
    assert view.search("x") == []
    with pytest.raises(ValueError):
        view.search("")
    with pytest.raises(ValueError):
        view.traverse("urn:x", depth=-1)
    with pytest.raises(TypeError):
        ScopedView(InMemoryTextBackend(), InMemoryVectorBackend(), InMemoryGraphBackend(), set())  # type: ignore[arg-type]


# The terms a triple filter meets: uko URIs of in- and out-of-scope resources
# in any case, with every tail, look-alikes that are not ASCII, other schemes.
_TERMS = st.one_of(
    st.builds(
        lambda scheme, rid, lower, tail: scheme + (rid.lower() if lower else rid) + tail,
        st.sampled_from(["uko://", "UKO://", "Uko://", "uko:/", "urn:"]),
        st.sampled_from([IN, OUT, IN[:-1] + "\u017f", "not-a-ulid-at-all-0123456789"]),
        st.booleans(),
        st.sampled_from(["", "/", "#", "/a.py", "#L1-L2", "x", "?q"]),
    ),
    st.sampled_from(["urn:imports", "https://cleveragents.dev/ns/uko#calls", "lit", ""]),
    st.text(max_size=40),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(_TERMS, _TERMS, _TERMS), max_size=12),
    st.sampled_from([frozenset({IN}), frozenset({IN, OUT}), frozenset()]),
)
def test_property_the_triple_filter_is_the_per_triple_rule(
    triples: list[tuple[str, str, str]], scope: frozenset[str]
) -> None:
    """The view's filter (decided once per distinct term, with fast paths)
    keeps exactly the triples the per-triple rule keeps, in order."""
    expected = [t for t in triples if _triple_in_scope(t, scope)]
    assert _triples_in_scope(triples, scope) == expected


class SeedGraph:
    """A graph backend written to the seed's signatures: ``get_triples`` and
    ``traverse`` take no scope, and answer from every graph it holds."""

    def __init__(self, inner: MemoryGraphIndex) -> None:
        self.inner = inner

    def sparql_query(self, query: str, *, scope: frozenset[str]) -> GraphResult:
        return self.inner.sparql_query(query, scope=scope)

    def get_triples(self, subject: str) -> GraphResult:
        return self.inner.get_triples(subject)

    def traverse(self, start: str, *, depth: int = 2) -> GraphResult:
        return self.inner.traverse(start, depth=depth)


class CrossLinkedSeedGraph:
    """A seed-signature backend over a store whose triples link resources:
    IN's a.py -> OUT's b.py -> IN's c.py."""

    a, b, c = file_uri(IN, "a.py"), file_uri(OUT, "b.py"), file_uri(IN, "c.py")
    triples: ClassVar[list[tuple[str, str, str]]] = [
        (a, "urn:links", b),
        (a, "urn:names", "lit-a"),
        (b, "urn:links", c),
        (c, "urn:names", "lit-c"),
        (b, "urn:secret", "out-of-scope text"),
    ]

    def sparql_query(self, query: str, *, scope: frozenset[str]) -> GraphResult:
        return GraphResult()

    def get_triples(self, subject: str) -> GraphResult:
        return GraphResult([t for t in self.triples if t[0] == subject])

    def traverse(self, start: str, *, depth: int = 2) -> GraphResult:
        out, frontier, seen = [], [start], {start}
        for _ in range(depth):
            nxt = []
            for node in frontier:
                for t in self.triples:
                    if t[0] == node:
                        out.append(t)
                        if t[2].startswith("uko://") and t[2] not in seen:
                            seen.add(t[2])
                            nxt.append(t[2])
            frontier = nxt
        return GraphResult(out)


def test_a_seed_signature_graph_backend_is_scoped_by_the_view() -> None:
    """The seed's get_triples(subject) and traverse(start, *, depth) take no
    scope: the view calls them so and keeps what the scope admits; a walk
    does not go on through an out-of-scope node."""
    g = CrossLinkedSeedGraph()
    view = ScopedView(InMemoryTextBackend(), InMemoryVectorBackend(), g, frozenset({IN}))
    assert view.get_triples(g.a).triples == [(g.a, "urn:names", "lit-a")]
    assert view.get_triples(g.b).triples == []
    assert view.traverse(g.a, depth=5).triples == [(g.a, "urn:names", "lit-a")]
    assert view.traverse(g.c, depth=1).triples == [(g.c, "urn:names", "lit-c")]
    assert view.traverse(g.a, depth=0).triples == []
    assert view.traverse(g.a, depth=3, predicates=frozenset({"urn:links"})).triples == []
    with pytest.raises(TypeError, match="seed's"):
        view.traverse(g.a, direction="in")
    both = ScopedView(InMemoryTextBackend(), InMemoryVectorBackend(), g, frozenset({IN, OUT}))
    assert both.traverse(g.a, depth=2, predicates=frozenset({"urn:links"})).triples == [
        (g.a, "urn:links", g.b),
        (g.b, "urn:links", g.c),
    ]
    assert len(both.traverse(g.a, depth=3).triples) == len(g.triples)


_NODES = [file_uri(r, f"{n}.py") for r in (IN, OUT) for n in "abc"]


@given(
    st.lists(
        st.tuples(
            st.sampled_from(_NODES),
            st.sampled_from(["urn:p", "urn:q"]),
            st.one_of(st.sampled_from(_NODES), st.sampled_from(["lit", module_uri("os")])),
        ),
        max_size=20,
    ),
    st.sampled_from([*_NODES, module_uri("os")]),
    st.integers(min_value=0, max_value=4),
    st.sampled_from([None, frozenset({"urn:p"})]),
    st.sampled_from([frozenset({IN}), frozenset({OUT}), frozenset({IN, OUT}), frozenset()]),
)
@settings(max_examples=150, deadline=None)
def test_property_a_seed_signature_backend_answers_as_a_scoped_one(
    triples: list[tuple[str, str, str]],
    start: str,
    depth: int,
    predicates: frozenset[str] | None,
    scope: frozenset[str],
) -> None:
    """Oracle: the same graphs behind a backend that takes the scope (the
    reference in-memory index), through the same view."""
    index = MemoryGraphIndex()
    for rid in (IN, OUT):
        # A resource's graph holds its own IRIs only (as the indexer writes).
        own = [t for t in triples if resource_id_of(t[0]) == rid]
        own = [t for t in own if resource_id_of(t[2]) in (None, rid)]
        index.upsert(rid, own)
    stubs = InMemoryTextBackend(), InMemoryVectorBackend()
    seed = ScopedView(*stubs, SeedGraph(index), scope)
    scoped = ScopedView(*stubs, index, scope)
    for subject in _NODES:
        assert seed.get_triples(subject).triples == scoped.get_triples(subject).triples
    got = seed.traverse(start, depth=depth, predicates=predicates).triples
    assert got == scoped.traverse(start, depth=depth, predicates=predicates).triples
