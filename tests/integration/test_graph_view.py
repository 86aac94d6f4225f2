"""SPARQL's view of the in-scope graphs (``graph_view.ScopeStore``) reads them
in place; it must answer exactly as a copy of their union would.

Oracle: an rdflib ``Memory`` graph holding the union of the members' current
triples (what every query built before the view existed).  Checked for every
triple pattern over the vocabulary (and terms no triple holds), as multisets
(a union gives each triple once, even when two members hold it), and for
SPARQL queries evaluated by rdflib over both, after writes made to the
members once the view exists (the view reads them live and keeps its
indexes up to date).
"""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from rdflib import BNode, Graph, Literal, URIRef
from rdflib.plugins.stores.memory import Memory

from cleveragents.infrastructure.acms.graph_store import Obj, ResourceGraph
from cleveragents.infrastructure.acms.graph_view import ScopeStore
from cleveragents.infrastructure.acms.rdflib_graph import RdflibGraphBackend

XSD_INT = "http://www.w3.org/2001/XMLSchema#integer"
SUBJECTS = [f"http://x/s{i}" for i in range(5)]
PREDICATES = [f"http://x/p{i}" for i in range(3)]
LITERALS: list[Obj] = [("a", None), ("1", XSD_INT), ("01", XSD_INT), ("b", None)]
OBJECTS: list[Obj] = [*SUBJECTS[:3], *LITERALS]

triple = st.tuples(st.sampled_from(SUBJECTS), st.sampled_from(PREDICATES), st.sampled_from(OBJECTS))
member = st.lists(triple, max_size=14)
# (member index, add?, triple) applied after the view was built
write = st.tuples(st.integers(0, 2), st.booleans(), triple)


def _term(o: Obj) -> URIRef | Literal:
    if isinstance(o, str):
        return URIRef(o)
    return Literal(o[0], datatype=None if o[1] is None else URIRef(o[1]), normalize=False)


def _oracle(graphs: list[ResourceGraph]) -> Graph:
    g = Graph(store=Memory())
    for res in graphs:
        for s, p, o in res.triples():
            g.add((URIRef(s), URIRef(p), _term(o)))
    return g


def _patterns() -> list[tuple[object, object, object]]:
    subjects: list[object] = [None, *map(URIRef, SUBJECTS), URIRef("http://x/none"), BNode()]
    predicates: list[object] = [None, *map(URIRef, PREDICATES), URIRef("http://x/q")]
    objects: list[object] = [
        None,
        *map(_term, OBJECTS),
        Literal("1", datatype=URIRef(XSD_INT)),  # normalised: matches "1" only
        Literal("a", lang="en"),
        BNode(),
    ]
    return list(itertools.product(subjects, predicates, objects))


PATTERNS = _patterns()

QUERIES = [
    "SELECT ?s ?p ?o WHERE { ?s ?p ?o }",
    "SELECT (COUNT(*) AS ?n) WHERE { ?s ?p ?o }",
    "SELECT ?s ?o WHERE { ?s <http://x/p0> ?m . ?m <http://x/p1> ?o }",
    'SELECT ?s WHERE { ?s ?p "a" } ',
    "SELECT ?s ?o WHERE { ?s <http://x/p2> ?o FILTER(isLiteral(?o)) }",
    "SELECT ?s WHERE { ?s <http://x/p0>/<http://x/p1>* ?o }",
    "ASK { <http://x/s1> ?p ?o }",
    "CONSTRUCT { ?o <http://x/back> ?s } WHERE { ?s <http://x/p1> ?o FILTER(isIRI(?o)) }",
    "DESCRIBE <http://x/s2>",
]


def _rows(graph: Graph, query: str) -> Counter[tuple[object, ...]]:
    result = graph.query(query)
    if result.type == "ASK":
        return Counter([(bool(result.askAnswer),)])
    if result.type in ("CONSTRUCT", "DESCRIBE"):
        assert result.graph is not None
        return Counter(tuple(t) for t in result.graph)
    return Counter(tuple(row) for row in result)


@settings(max_examples=60, deadline=None)
@given(st.lists(member, min_size=1, max_size=3), st.lists(write, max_size=10))
# A subject of one member only when the view is built, written to another later.
# Two edges from one subject to one object, one of them removed later; and
# two edges of one predicate from one subject, one of them removed later.
@example(
    [[(SUBJECTS[0], PREDICATES[0], SUBJECTS[1]), (SUBJECTS[0], PREDICATES[0], SUBJECTS[2])]],
    [(0, False, (SUBJECTS[0], PREDICATES[0], SUBJECTS[1]))],
)
@example(
    [[(SUBJECTS[0], PREDICATES[0], SUBJECTS[1]), (SUBJECTS[0], PREDICATES[1], SUBJECTS[1])]],
    [(0, False, (SUBJECTS[0], PREDICATES[0], SUBJECTS[1]))],
)
@example(
    [[(SUBJECTS[0], PREDICATES[0], SUBJECTS[1])], []],
    [(1, True, (SUBJECTS[0], PREDICATES[0], SUBJECTS[1]))],
)
def test_the_view_answers_as_a_copy_of_the_union(
    members: list[list[tuple[str, str, Obj]]], writes: list[tuple[int, bool, tuple[str, str, Obj]]]
) -> None:
    graphs = [ResourceGraph() for _ in members]
    for res, triples in zip(graphs, members, strict=True):
        for s, p, o in triples:
            res.add(s, p, o)
    view = ScopeStore(graphs)
    view.prepare()
    # Built here, in the caller: a forked worker inherits them.
    assert all(g.incoming is not None and g.by_predicate is not None for g in graphs)
    for i, add, (s, p, o) in writes:
        res = graphs[i % len(graphs)]
        if add:
            if res.add(s, p, o):
                view.added(res, [s])
        else:
            res.remove(s, p, o)

    oracle = _oracle(graphs)
    for pattern in PATTERNS:
        got = Counter(t for t, _ in view.triples(pattern))
        want = Counter(t for t, _ in oracle.store.triples(pattern, context=oracle))
        assert got == want, pattern
    assert len(view) == len(oracle)

    ours = Graph(store=view)
    for query in QUERIES:
        assert _rows(ours, query) == _rows(oracle, query), query


def test_the_view_is_read_only() -> None:
    res = ResourceGraph()
    res.add(SUBJECTS[0], PREDICATES[0], SUBJECTS[1])
    graph = Graph(store=ScopeStore([res]))
    for change in (graph.add, graph.remove):
        try:
            change((URIRef(SUBJECTS[0]), URIRef(PREDICATES[0]), URIRef(SUBJECTS[2])))
        except TypeError:
            continue
        raise AssertionError("the view accepted a write")
    assert res.size == 1


def test_a_view_dropped_while_its_query_waits_gives_each_triple_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another thread can act between a query taking its view and forking
    the worker: here it evicts member B (dropping the view from the cache)
    and then writes to member A, still held and changed in place, a triple B
    also holds.  The dropped view is not told that ``s`` is now in both; the
    answer must still hold that triple once (a copy of the union would)."""
    a, b, c = (f"01J00000000000000000000{x * 3}" for x in "ABC")
    s, p, o = SUBJECTS[0], PREDICATES[0], SUBJECTS[1]
    with RdflibGraphBackend(tmp_path, cache_triples=1) as g:
        g.upsert(a, [(SUBJECTS[2], p, o)])
        g.upsert(b, [(s, p, o)])
        g.upsert(c, [(SUBJECTS[3], p, o)])
        take_view = g._union

        def interleaved(scope: frozenset[str]) -> Graph:
            union = take_view(scope)
            # The other thread: a query over {A, C} evicts B (over budget) ...
            g.get_triples(SUBJECTS[3], scope=frozenset({a, c}))
            assert b not in g._graphs and a in g._graphs
            # ... and a write changes A's held graph in place.
            g.upsert(a, [(s, p, o)])
            return union

        monkeypatch.setattr(g, "_union", interleaved)
        answer = g.sparql_select(f"SELECT ?o WHERE {{ <{s}> <{p}> ?o }}", scope=frozenset({a, b}))
    assert [row["o"]["value"] for row in answer["results"]["bindings"]] == [o]
