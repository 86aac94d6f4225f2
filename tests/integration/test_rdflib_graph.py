"""rdflib graph backend: scoped SPARQL against an oracle, the sandbox, persistence."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ulid import ULID

from cleveragents.domain.models.acms.backends import GraphIndex, Literal
from cleveragents.domain.models.acms.errors import IndexUnavailableError, QueryError
from cleveragents.domain.models.acms.uko import (
    UKO,
    file_uri,
    module_uri,
    resource_id_of,
    resource_uri,
)
from cleveragents.infrastructure.acms.rdflib_graph import RdflibGraphBackend
from listening import accepted, listening_socket

XSD_INT = "http://www.w3.org/2001/XMLSchema#integer"
PREFIX = f"PREFIX uko: <{UKO}>\n"

# ------------------------------------------------------------------ audit hook
# Audit hooks cannot be removed, so one hook is registered for the module and
# records events only while ``_AUDIT["on"]`` is set.
_AUDIT: dict[str, object] = {"on": False, "events": []}
_WATCHED = ("open", "socket.connect", "socket.getaddrinfo", "urllib.Request", "subprocess.Popen")


def _audit_hook(event: str, args: tuple[object, ...]) -> None:
    if _AUDIT["on"] and event in _WATCHED:
        events = _AUDIT["events"]
        assert isinstance(events, list)
        events.append((event, args[0] if args else None))


sys.addaudithook(_audit_hook)


def new_ulid() -> str:
    return str(ULID())


# ------------------------------------------------------------------ fixtures


def _resource_triples(rid: str, files: int, module: str) -> list:
    """A resource that contains ``files`` files importing each other in a chain,
    the last one a shared module; every file has a path and some a language."""
    res = resource_uri(rid)
    uris = [file_uri(rid, f"pkg/f{i}.py") for i in range(files)]
    triples: list = []
    for i, f in enumerate(uris):
        triples.append((res, UKO + "contains", f))
        triples.append((f, UKO + "inResource", res))
        triples.append((f, UKO + "path", Literal(f"pkg/f{i}.py")))
        if i % 2 == 0:
            triples.append((f, UKO + "language", Literal("python")))
        if i + 1 < files:
            triples.append((f, UKO + "imports", uris[i + 1]))
    triples.append((uris[-1], UKO + "imports", module_uri(module)))
    triples.append((uris[-1], UKO + "lines", Literal("010", XSD_INT)))
    return triples


@pytest.fixture
def corpus() -> dict[str, list]:
    sizes = (3, 4, 2, 5, 3)
    return {
        rid: _resource_triples(rid, n, "os" if n % 2 else "sys")
        for rid, n in zip((new_ulid() for _ in sizes), sizes, strict=True)
    }


def _fill(backend: RdflibGraphBackend, corpus: dict[str, list], rids) -> RdflibGraphBackend:
    for rid in rids:
        backend.upsert(rid, corpus[rid])
    return backend


@pytest.fixture
def full(tmp_path: Path, corpus: dict[str, list]):
    b = _fill(RdflibGraphBackend(tmp_path / "full"), corpus, corpus)
    yield b
    b.close()


# ------------------------------------------------------------------ oracle

ORACLE_QUERIES = [
    "SELECT ?s ?p ?o WHERE { ?s ?p ?o }",
    "CONSTRUCT { ?f uko:dependsOn ?g } WHERE { ?f uko:imports ?g }",
    "CONSTRUCT WHERE { ?s uko:path ?o }",
    # two-hop join: a resource, a file it contains, what that file imports
    "SELECT ?r ?p ?g WHERE { ?r uko:contains ?f . ?f uko:imports ?g BIND(uko:imports AS ?p) }",
    # OPTIONAL: rows of files without a language are unbound and skipped
    "SELECT ?f ?p ?lang WHERE { ?f uko:path ?x OPTIONAL { ?f uko:language ?lang } "
    "BIND(uko:language AS ?p) }",
    "SELECT ?a ?p ?b WHERE { ?a uko:imports+ ?b BIND(uko:imports AS ?p) }",
    "SELECT ?s ?p ?o WHERE { ?s ?p ?o FILTER(isLiteral(?o)) } ORDER BY ?s ?p ?o",
    "SELECT ?s ?p ?o WHERE { ?s ?p ?o FILTER NOT EXISTS { ?o uko:imports ?x } }",
    "SELECT ?m ?p ?n WHERE { { SELECT ?m (COUNT(?f) AS ?n) WHERE { ?f uko:imports ?m } "
    "GROUP BY ?m } BIND(uko:count AS ?p) }",
]


def _oracle(corpus: dict[str, list], scope: frozenset[str]) -> RdflibGraphBackend:
    return _fill(RdflibGraphBackend(), corpus, scope)


def _assert_in_scope(triples, scope: frozenset[str]) -> None:
    for triple in triples:
        for term in triple:
            assert resource_id_of(term) in scope | {None}, (triple, scope)


@pytest.mark.parametrize("query", ORACLE_QUERIES)
def test_scoped_query_equals_oracle(full, corpus, query: str) -> None:
    rids = list(corpus)
    for scope in (frozenset(rids[:1]), frozenset(rids[1:3]), frozenset(rids)):
        oracle = _oracle(corpus, scope)
        got = full.sparql_query(PREFIX + query, scope=scope)
        want = oracle.sparql_query(PREFIX + query, scope=frozenset(oracle.resource_ids()))
        assert sorted(got.triples) == sorted(want.triples)
        assert got.metadata == want.metadata
        _assert_in_scope(got.triples, scope)
        assert got.triples, query  # every query finds something in every scope


def test_property_path_and_join_values(full, corpus) -> None:
    rid = next(iter(corpus))  # three files f0 -> f1 -> f2 -> module os
    f = [file_uri(rid, f"pkg/f{i}.py") for i in range(3)]
    got = full.sparql_query(
        PREFIX + f"SELECT ?a ?p ?b WHERE {{ <{f[0]}> uko:imports+ ?b BIND(<{f[0]}> AS ?a) "
        "BIND(uko:imports AS ?p) }",
        scope=frozenset({rid}),
    )
    assert {t[2] for t in got.triples} == {f[1], f[2], module_uri("os")}


def test_ask_answers_only_from_scope(full, corpus) -> None:
    a, b = list(corpus)[:2]
    ask = f"ASK {{ <{resource_uri(b)}> ?p ?o }}"
    assert full.sparql_query(ask, scope=frozenset({b})).metadata["boolean"] == "true"
    result = full.sparql_query(ask, scope=frozenset({a}))
    assert result.metadata["boolean"] == "false"
    assert result.triples == []
    assert full.sparql_query("ASK {}", scope=frozenset()).metadata["boolean"] == "true"
    assert full.sparql_query("ASK { ?s ?p ?o }", scope=frozenset()).metadata["boolean"] == "false"


def test_order_by_keeps_engine_order(full, corpus) -> None:
    scope = frozenset(corpus)
    q = PREFIX + "SELECT ?s ?p ?o WHERE { ?s uko:path ?o BIND(uko:path AS ?p) } ORDER BY DESC(?o)"
    got = full.sparql_query(q, scope=scope).triples
    assert [t[2] for t in got] == sorted((t[2] for t in got), reverse=True)


def test_select_star_reads_variables_in_order_of_appearance(full, corpus) -> None:
    scope = frozenset(corpus)
    star = full.sparql_query("SELECT * WHERE { ?s ?p ?o }", scope=scope)
    named = full.sparql_query("SELECT ?s ?p ?o WHERE { ?s ?p ?o }", scope=scope)
    assert star.triples == named.triples


@pytest.mark.parametrize(
    "query",
    [
        "SELECT ?s ?p WHERE { ?s ?p ?o }",
        "SELECT ?s ?p ?o ?x WHERE { ?s ?p ?o BIND(1 AS ?x) }",
        "SELECT * WHERE { ?s ?p ?o . ?o ?q ?r }",
    ],
)
def test_select_must_project_three_variables(full, corpus, query: str) -> None:
    with pytest.raises(QueryError, match="three variables"):
        full.sparql_query(query, scope=frozenset(corpus))


def test_malformed_query_reports_parser_message(full, corpus) -> None:
    with pytest.raises(QueryError, match="malformed") as info:
        full.sparql_query("SELECT ?s ?p ?o WHERE { ?s ?p", scope=frozenset(corpus))
    assert isinstance(info.value, ValueError)


def test_bnodes_and_literals(full, corpus) -> None:
    scope = frozenset(corpus)
    got = full.sparql_query(
        PREFIX + "CONSTRUCT { _:b uko:about ?f } WHERE { ?f uko:lines ?n }", scope=scope
    )
    assert got.triples and all(t[0].startswith("_:") and len(t[0]) > 2 for t in got.triples)
    rows = full.sparql_query(
        PREFIX + "SELECT ?b ?p ?n WHERE { ?f uko:lines ?n BIND(BNODE() AS ?b) "
        "BIND(uko:lines AS ?p) }",
        scope=scope,
    )
    assert rows.triples and all(t[0].startswith("_:") for t in rows.triples)
    # the lexical form is kept exactly: "010"^^xsd:integer is not normalised to "10"
    assert {t[2] for t in rows.triples} == {"010"}


def test_constant_iris_of_other_resources_are_dropped(full, corpus) -> None:
    a, b = list(corpus)[:2]
    q = f"CONSTRUCT {{ ?f <urn:seen-by> <{resource_uri(b)}> }} WHERE {{ ?f ?p ?o }}"
    got = full.sparql_query(q, scope=frozenset({a}))
    assert got.triples == []
    assert int(got.metadata["dropped_out_of_scope"]) > 0


# ------------------------------------------------------------------ property test

_PREDICATES = ["imports", "contains", "path", "defines"]
_RIDS = [new_ulid() for _ in range(4)]
_PROPERTY_QUERIES = [
    "SELECT ?s ?p ?o WHERE { ?s ?p ?o }",
    "CONSTRUCT WHERE { ?s uko:imports ?o }",
    "SELECT ?a ?p ?c WHERE { ?a uko:imports ?b . ?b uko:imports ?c BIND(uko:imports AS ?p) }",
    "SELECT ?a ?p ?b WHERE { ?a uko:imports+ ?b BIND(uko:imports AS ?p) }",
    "SELECT ?s ?p ?o WHERE { ?s uko:path ?x OPTIONAL { ?s uko:defines ?o } "
    "BIND(uko:defines AS ?p) }",
    "SELECT ?s ?p ?o WHERE { ?o ?p ?s FILTER(isIRI(?o)) }",
    "ASK { ?s uko:imports ?o . ?o uko:imports ?s }",
    "DESCRIBE ?s WHERE { ?s uko:contains ?o }",
]


@st.composite
def _graphs(draw):
    corpus: dict[str, list] = {}
    deletions: dict[str, list] = {}
    for rid in draw(st.lists(st.sampled_from(_RIDS), min_size=1, max_size=4, unique=True)):
        nodes = [resource_uri(rid)] + [file_uri(rid, f"f{i}.py") for i in range(4)]
        shared = [module_uri("m0"), module_uri("m1")]
        literals = [Literal("v0"), Literal("v1"), Literal("7", XSD_INT)]
        triple = st.tuples(
            st.sampled_from(nodes + shared[:1]),
            st.sampled_from(_PREDICATES).map(lambda p: UKO + p),
            st.sampled_from(nodes + shared + literals),
        )
        corpus[rid] = draw(st.lists(triple, min_size=1, max_size=12))
        # some subjects are deleted again after the upsert
        deletions[rid] = draw(st.lists(st.sampled_from(nodes + shared[:1]), max_size=2))
    scope = frozenset(draw(st.lists(st.sampled_from(_RIDS), max_size=4, unique=True)))
    return corpus, deletions, scope


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=_graphs(), query=st.sampled_from(_PROPERTY_QUERIES))
def test_property_scoped_queries_equal_oracle(data, query: str) -> None:
    corpus, deletions, scope = data
    full = _fill(RdflibGraphBackend(), corpus, corpus)
    oracle = _fill(RdflibGraphBackend(), corpus, scope & corpus.keys())
    for rid, subjects in deletions.items():
        full.delete(rid, subjects)
        if rid in scope:
            oracle.delete(rid, subjects)
    got = full.sparql_query(PREFIX + query, scope=scope)
    want = oracle.sparql_query(PREFIX + query, scope=frozenset(oracle.resource_ids()))
    _assert_in_scope(got.triples, scope)
    assert sorted(got.triples) == sorted(want.triples)
    assert got.metadata == want.metadata
    start = resource_uri(_RIDS[0])
    every = frozenset(oracle.resource_ids())  # the oracle holds only the in-scope graphs
    assert full.traverse(start, depth=3, scope=scope) == oracle.traverse(
        start, depth=3, scope=every
    )
    assert full.get_triples(module_uri("m0"), scope=scope) == oracle.get_triples(
        module_uri("m0"), scope=every
    )


# ------------------------------------------------------------------ sandbox

# Every SPARQL 1.1 update form: none parses as a query.
_UPDATES = [
    "INSERT DATA { <urn:a> <urn:b> <urn:c> }",
    "DELETE DATA { <urn:a> <urn:b> <urn:c> }",
    "DELETE WHERE { ?s ?p ?o }",
    "INSERT { ?s <urn:b> <urn:c> } WHERE { ?s ?p ?o }",
    "DELETE { ?s ?p ?o } WHERE { ?s ?p ?o }",
    "DELETE { ?s ?p ?o } INSERT { ?s <urn:b> ?o } WHERE { ?s ?p ?o }",
    "WITH <urn:g> DELETE { ?s ?p ?o } WHERE { ?s ?p ?o }",
    "INSERT { ?s ?p ?o } USING <{url}> WHERE { ?s ?p ?o }",
    "LOAD <file:///etc/passwd>",
    "LOAD SILENT <{url}>",
    "LOAD <{url}> INTO GRAPH <urn:g>",
    "CLEAR DEFAULT",
    "CLEAR ALL",
    "CLEAR GRAPH <urn:g>",
    "DROP ALL",
    "DROP SILENT GRAPH <urn:g>",
    "CREATE GRAPH <urn:g>",
    "ADD DEFAULT TO <urn:g>",
    "MOVE <urn:g> TO DEFAULT",
    "COPY DEFAULT TO <urn:g>",
    "insert data { <urn:a> <urn:b> <urn:c> } ; load <{url}>",
]

_HOSTILE = [
    "SELECT ?s ?p ?o WHERE { GRAPH ?g { ?s ?p ?o } }",
    "SELECT ?s ?p ?o WHERE { GRAPH <urn:x> { ?s ?p ?o } }",
    "SELECT ?s ?p ?o FROM <file:///etc/passwd> WHERE { ?s ?p ?o }",
    "SELECT ?s ?p ?o FROM <{url}> WHERE { ?s ?p ?o }",
    "SELECT ?s ?p ?o FROM NAMED <{url}> WHERE { ?s ?p ?o }",
    "ASK FROM <file:///etc/passwd> { ?s ?p ?o }",
    "DESCRIBE ?s FROM <file:///etc/passwd> WHERE { ?s ?p ?o }",
    "SELECT ?s ?p ?o WHERE { SERVICE <{url}> { ?s ?p ?o } }",
    "select ?s ?p ?o where { service <{url}> { ?s ?p ?o } }",
    "SELECT ?s ?p ?o WHERE { SERVICE SILENT <{url}> { ?s ?p ?o } }",
    "SELECT ?s ?p ?o WHERE { VALUES ?e { <{url}> } SERVICE ?e { ?s ?p ?o } }",
    "SELECT ?s ?p ?o WHERE { ?s ?p ?o OPTIONAL { SERVICE <{url}> { ?s ?p ?o } } }",
    "SELECT ?s ?p ?o WHERE { { SELECT ?s ?p ?o WHERE { SERVICE <{url}> { ?s ?p ?o } } } }",
    "SELECT ?s ?p ?o WHERE { ?s ?p ?o FILTER EXISTS { SERVICE <{url}> { ?s ?p ?o } } }",
    "SELECT ?s ?p ?o WHERE { { ?s ?p ?o } UNION { GRAPH ?g { ?s ?p ?o } } }",
    "SELECT ?s ?p ?o WHERE { ?s ?p ?o MINUS { SERVICE <{url}> { ?s ?p ?x } } }",
    "SELECT ?s ?p ?o WHERE { Service <{url}> { ?s ?p ?o } }",
    "select ?s ?p ?o where { service silent ?e { ?s ?p ?o } values ?e { <{url}> } }",
    "SELECT ?s ?p ?o WHERE { ?s ?p ?o OPTIONAL { SERVICE SILENT <{url}> { ?s ?p ?x } } }",
    "SELECT ?s ?p ?o WHERE { { SELECT ?s ?p ?o WHERE { VALUES ?e { <{url}> } "
    "SERVICE ?e { ?s ?p ?o } } } }",
    "ASK { SERVICE <{url}> { ?s ?p ?o } }",
    "CONSTRUCT { ?s ?p ?o } WHERE { SERVICE <{url}> { ?s ?p ?o } }",
    "SELECT ?s ?p ?o FROM NAMED <file:///etc/passwd> WHERE { ?s ?p ?o }",
    "SELECT ?s ?p ?o FROM <{url}> FROM NAMED <{url}> WHERE { ?s ?p ?o }",
    "CONSTRUCT { ?s ?p ?o } FROM <{url}> WHERE { ?s ?p ?o }",
    *_UPDATES,
]


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    with listening_socket() as sock:
        yield sock


_accepted = accepted


@pytest.mark.parametrize("template", _HOSTILE)
def test_hostile_queries_are_refused(full, corpus, listener, template: str) -> None:
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/sparql"
    query = template.replace("{url}", url)
    with pytest.raises(QueryError) as info:
        full.sparql_query(query, scope=frozenset(corpus))
    message = str(info.value)
    assert any(word in message for word in ("SERVICE", "GRAPH", "FROM", "update")), message
    assert _accepted(listener) == 0


def test_hostile_queries_open_no_file_and_no_socket(tmp_path, full, corpus, listener) -> None:
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/sparql"
    scope = frozenset(corpus)
    # Warm up: first use of any lazily imported code happens outside the window.
    full.sparql_query("ASK { ?s ?p ?o }", scope=scope)
    with pytest.raises(QueryError):
        full.sparql_query("DROP ALL", scope=scope)
    events = _AUDIT["events"]
    assert isinstance(events, list)
    events.clear()
    _AUDIT["on"] = True
    try:
        for template in _HOSTILE:
            with pytest.raises(QueryError):
                full.sparql_query(template.replace("{url}", url), scope=scope)
    finally:
        _AUDIT["on"] = False
    outside = [
        (event, arg)
        for event, arg in events
        if event != "open"
        or not isinstance(arg, str | bytes | os.PathLike)
        or not Path(os.fsdecode(arg)).resolve().is_relative_to(tmp_path.resolve())
    ]
    assert outside == []
    assert _accepted(listener) == 0


def test_audit_hook_and_listener_do_see_opens_and_connections(listener) -> None:
    # The two checks above prove nothing unless they can fail.
    events = _AUDIT["events"]
    assert isinstance(events, list)
    events.clear()
    _AUDIT["on"] = True
    try:
        Path(__file__).read_bytes()
        with socket.create_connection(listener.getsockname(), timeout=5):
            pass
    finally:
        _AUDIT["on"] = False
    assert ("open", __file__) in events
    assert any(event == "socket.connect" for event, _ in events)
    assert _accepted(listener) == 1


@pytest.mark.parametrize("template", _UPDATES)
def test_updates_are_refused_with_a_clear_message(full, corpus, listener, template) -> None:
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/sparql"
    before = full.sparql_query("SELECT ?s ?p ?o WHERE { ?s ?p ?o }", scope=frozenset(corpus))
    with pytest.raises(QueryError, match="updates"):
        full.sparql_query(template.replace("{url}", url), scope=frozenset(corpus))
    assert full.get_triples("urn:a", scope=frozenset(corpus)).triples == []
    after = full.sparql_query("SELECT ?s ?p ?o WHERE { ?s ?p ?o }", scope=frozenset(corpus))
    assert after == before
    assert _accepted(listener) == 0


def test_evaluated_queries_naming_urls_open_no_file_and_no_socket(
    tmp_path, full, corpus, listener
) -> None:
    """Queries that pass the sandbox and are evaluated (in a forked worker)
    may name the listener's URL and file IRIs as plain constants: nothing
    connects or opens.  The parent's audit hook cannot see the worker, so the
    listener's backlog is the proof for the worker: it counts any process."""
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/sparql"
    scope = frozenset(corpus)
    queries = [
        f"SELECT ?s ?p ?o WHERE {{ ?s ?p ?o FILTER(?o != <{url}>) }}",
        f"DESCRIBE <{url}>",
        f"CONSTRUCT {{ <{url}> ?p ?o }} WHERE {{ ?s ?p ?o }}",
        f"SELECT ?s ?p ?o WHERE {{ VALUES ?s {{ <{url}> <file:///etc/passwd> }} ?s ?p ?o }}",
        f'ASK {{ BIND(IRI("{url}") AS ?x) ?x ?p ?o }}',
        "SELECT ?s ?p ?o WHERE { ?s ?p ?o FILTER(STRSTARTS(STR(?s), 'file:///etc')) }",
    ]
    full.sparql_query("ASK { ?s ?p ?o }", scope=scope)  # warm up lazily imported code
    events = _AUDIT["events"]
    assert isinstance(events, list)
    events.clear()
    _AUDIT["on"] = True
    try:
        for query in queries:
            full.sparql_query(query, scope=scope)
    finally:
        _AUDIT["on"] = False
    outside = [
        (event, arg)
        for event, arg in events
        if event != "open"
        or not isinstance(arg, str | bytes | os.PathLike)
        or not Path(os.fsdecode(arg)).resolve().is_relative_to(tmp_path.resolve())
    ]
    assert outside == []
    assert _accepted(listener) == 0


# ------------------------------------------------------------------ traverse / get_triples


@pytest.fixture
def cycle():
    """r contains a; a -> b -> c -> a (imports); c imports module m, whose
    name is known in r and whose version only in another resource."""
    backend = RdflibGraphBackend()
    rid, other = new_ulid(), new_ulid()
    r = resource_uri(rid)
    a, b, c = (file_uri(rid, n) for n in ("a.py", "b.py", "c.py"))
    m = module_uri("m")
    imp, name = UKO + "imports", UKO + "name"
    backend.upsert(
        rid,
        [
            (r, UKO + "contains", a),
            (a, imp, b),
            (a, UKO + "path", Literal("a.py")),
            (b, imp, c),
            (c, imp, a),
            (c, imp, m),
            (m, name, Literal("m")),
        ],
    )
    backend.upsert(other, [(m, UKO + "version", Literal("2")), (resource_uri(other), imp, m)])
    yield backend, rid, other, {"r": r, "a": a, "b": b, "c": c, "m": m}
    backend.close()


def test_traverse_depths_on_a_cycle(cycle) -> None:
    backend, rid, _, n = cycle
    imp, scope = UKO + "imports", frozenset({rid})
    level1 = [(n["r"], UKO + "contains", n["a"])]
    level2 = sorted([(n["a"], imp, n["b"]), (n["a"], UKO + "path", "a.py")])
    level3 = [(n["b"], imp, n["c"])]
    level4 = sorted([(n["c"], imp, n["a"]), (n["c"], imp, n["m"])])
    level5 = [(n["m"], UKO + "name", "m")]
    assert backend.traverse(n["r"], depth=0, scope=scope).triples == []
    assert backend.traverse(n["r"], depth=1, scope=scope).triples == level1
    assert backend.traverse(n["r"], depth=2, scope=scope).triples == level1 + level2
    assert backend.traverse(n["r"], depth=3, scope=scope).triples == level1 + level2 + level3
    everything = level1 + level2 + level3 + level4 + level5
    assert backend.traverse(n["r"], depth=5, scope=scope).triples == everything
    # the cycle ends the walk; more depth adds nothing and repeats nothing
    assert backend.traverse(n["r"], depth=50, scope=scope).triples == everything
    assert backend.traverse(n["r"], depth=2, scope=scope).metadata == {"rows": "3"}


def test_traverse_follows_only_in_scope_graphs(cycle) -> None:
    backend, rid, other, n = cycle
    in_rid = backend.traverse(n["c"], depth=2, scope=frozenset({rid})).triples
    assert (n["m"], UKO + "version", "2") not in in_rid
    unrestricted = backend.traverse(n["c"], depth=2, scope=frozenset({rid, other})).triples
    assert (n["m"], UKO + "version", "2") in unrestricted
    assert backend.traverse(n["c"], depth=3, scope=frozenset({other})).triples == []


def test_get_triples_scoped_and_unscoped(cycle) -> None:
    backend, rid, other, n = cycle
    assert backend.get_triples(n["m"], scope=frozenset({rid})).triples == [
        (n["m"], UKO + "name", "m")
    ]
    assert backend.get_triples(n["m"], scope=frozenset({other})).triples == [
        (n["m"], UKO + "version", "2")
    ]
    assert backend.get_triples(n["m"], scope=frozenset({rid, other})).triples == sorted(
        [(n["m"], UKO + "name", "m"), (n["m"], UKO + "version", "2")]
    )
    assert backend.get_triples(n["m"], scope=frozenset({new_ulid()})).triples == []


# ------------------------------------------------------------------ writes


def test_writes_are_validated(cycle) -> None:
    backend, rid, other, n = cycle
    bad_value = [
        [(resource_uri(other), UKO + "x", "urn:y")],  # names another resource
        [(n["a"], UKO + "x", file_uri(other, "z.py"))],
        [("not an iri", UKO + "x", "urn:y")],
        [("urn:a", "urn:b", "urn:has space")],
        [("urn:a", "urn:b", Literal("1", "not an iri"))],
        [("", UKO + "x", "urn:y")],
    ]
    for triples in bad_value:
        with pytest.raises(ValueError):
            backend.upsert(rid, triples)
    bad_type = [[("urn:a", "urn:b", 3)], [["urn:a", "urn:b", "urn:c"]], [("urn:a", "urn:b")]]
    for triples in bad_type:
        with pytest.raises(TypeError):
            backend.upsert(rid, triples)
    with pytest.raises(TypeError):
        backend.upsert(rid, [], delete_subjects="urn:a")
    with pytest.raises(ValueError, match="ULID"):
        backend.upsert("nope", [])
    assert len(backend.get_triples(n["c"], scope=frozenset({rid})).triples) == 2  # unchanged


def test_lower_case_resource_id_is_canonicalised(tmp_path) -> None:
    rid = new_ulid()
    with RdflibGraphBackend(tmp_path) as backend:
        backend.upsert(rid.lower(), [(resource_uri(rid), UKO + "x", "urn:y")])
        assert backend.resource_ids() == {rid}
        assert backend.subjects(rid.lower()) == {resource_uri(rid)}
    assert (tmp_path / "graphs" / f"{rid}.graph").is_file()


def test_persistence_across_reopen(tmp_path: Path) -> None:
    rid, gone = new_ulid(), new_ulid()
    f = file_uri(rid, "dir/ü ber.py")
    tricky = 'line\nbreak "quoted" \\ back\ttab \udc80 surrogate \x00 nul'
    backend = RdflibGraphBackend(tmp_path)
    assert isinstance(backend, GraphIndex)
    backend.upsert(
        rid,
        [
            (f, UKO + "path", Literal(tricky)),
            (f, UKO + "lines", Literal("010", XSD_INT)),
            (f, UKO + "imports", module_uri("os.path")),
        ],
    )
    backend.upsert(gone, [(resource_uri(gone), UKO + "x", "urn:y")])
    backend.delete(gone)
    assert not (tmp_path / "graphs" / f"{gone}.graph").exists()
    before = backend.get_triples(f, scope=frozenset({rid})).triples
    backend.close()
    with pytest.raises(IndexUnavailableError):
        backend.get_triples(f, scope=frozenset({rid}))

    reopened = RdflibGraphBackend(tmp_path)
    assert reopened.resource_ids() == {rid}
    assert reopened.get_triples(f, scope=frozenset({rid})).triples == before
    assert (f, UKO + "path", tricky) in before
    assert (f, UKO + "lines", "010") in before
    assert reopened.subjects(rid) == {f}
    rows = reopened.sparql_query(
        "SELECT ?s ?p ?o WHERE { ?s ?p ?o }", scope=frozenset({rid})
    ).triples
    assert sorted(rows) == sorted(before)
    reopened.close()


def test_second_instance_sees_writes(tmp_path: Path) -> None:
    rid, other = new_ulid(), new_ulid()
    first, second = RdflibGraphBackend(tmp_path), RdflibGraphBackend(tmp_path)
    try:
        first.upsert(rid, [(resource_uri(rid), UKO + "x", "urn:one")])
        assert second.get_triples(resource_uri(rid), scope=frozenset({rid})).triples == [
            (resource_uri(rid), UKO + "x", "urn:one")
        ]
        q = "SELECT ?s ?p ?o WHERE { ?s ?p ?o }"
        assert len(second.sparql_query(q, scope=frozenset({rid})).triples) == 1
        # the second instance refreshes before writing, so it keeps the first's triple
        second.upsert(rid, [(resource_uri(rid), UKO + "x", "urn:two")])
        second.upsert(other, [(resource_uri(other), UKO + "x", "urn:three")])
        assert len(first.sparql_query(q, scope=frozenset({rid})).triples) == 2
        assert first.resource_ids() == {rid, other}
        first.delete(other)
        assert second.resource_ids() == {rid}
        assert second.sparql_query(q, scope=frozenset({other})).triples == []
    finally:
        first.close()
        second.close()


def test_upsert_delete_subjects_is_one_change(cycle) -> None:
    backend, rid, _, n = cycle
    backend.upsert(rid, [(n["a"], UKO + "imports", n["c"])], delete_subjects=[n["a"], n["b"]])
    scope = frozenset({rid})
    assert backend.get_triples(n["a"], scope=scope).triples == [(n["a"], UKO + "imports", n["c"])]
    assert backend.get_triples(n["b"], scope=scope).triples == []
    assert n["b"] not in backend.subjects(rid)


def test_corrupt_file_is_index_unavailable(tmp_path: Path) -> None:
    # Opening reads no graph, so the error comes with the first read of the
    # corrupt resource, and only for it.
    rid, other = new_ulid(), new_ulid()
    with RdflibGraphBackend(tmp_path) as backend:
        backend.upsert(other, [(resource_uri(other), UKO + "x", "urn:y")])
    (tmp_path / "graphs" / f"{rid}.graph").write_text("this is not a graph file\n")
    with RdflibGraphBackend(tmp_path) as backend:
        with pytest.raises(IndexUnavailableError, match="corrupt"):
            backend.subjects(rid)
        with pytest.raises(IndexUnavailableError, match="corrupt"):
            backend.sparql_query("ASK { ?s ?p ?o }", scope=frozenset({rid, other}))
        assert backend.subjects(other) == {resource_uri(other)}


def test_store_path_that_is_a_file_is_index_unavailable(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(IndexUnavailableError):
        RdflibGraphBackend(tmp_path / "file")


def test_deleting_the_last_subject_empties_the_resource(tmp_path: Path) -> None:
    rid = new_ulid()
    r = resource_uri(rid)
    with RdflibGraphBackend(tmp_path) as backend:
        backend.upsert(rid, [(r, UKO + "x", "urn:y")])
        backend.delete(rid, [r])
        scope = frozenset({rid})
        assert backend.get_triples(r, scope=scope).triples == []
        assert backend.traverse(r, depth=2, scope=scope).triples == []
        assert backend.resource_ids() == set()
        assert not (tmp_path / "graphs" / f"{rid}.graph").exists()
        backend.upsert(rid, [(r, UKO + "x", "urn:z")], delete_subjects=[r])
        assert backend.get_triples(r, scope=scope).triples == [(r, UKO + "x", "urn:z")]


def test_failed_write_changes_nothing(tmp_path: Path, monkeypatch) -> None:
    from cleveragents.infrastructure.acms import graph_store

    rid = new_ulid()
    r = resource_uri(rid)
    with RdflibGraphBackend(tmp_path) as backend:
        backend.upsert(rid, [(r, UKO + "x", "urn:y")])

        def broken(path, ino, data):
            raise OSError("disk full")

        monkeypatch.setattr(graph_store, "_append", broken)
        with pytest.raises(IndexUnavailableError, match="disk full"):
            backend.upsert(rid, [(r, UKO + "x", "urn:z")], delete_subjects=[r])
        assert backend.get_triples(r, scope=frozenset({rid})).triples == [(r, UKO + "x", "urn:y")]
        q = "SELECT ?s ?p ?o WHERE { ?s ?p ?o }"
        assert backend.sparql_query(q, scope=frozenset({rid})).triples == [(r, UKO + "x", "urn:y")]


def test_upsert_can_drop_single_triples(cycle) -> None:
    backend, rid, _, n = cycle
    imp = UKO + "imports"
    backend.upsert(
        rid,
        [(n["a"], imp, n["c"])],
        delete_triples=[(n["a"], imp, n["b"]), (n["b"], imp, n["c"])],
    )
    assert backend.get_triples(n["a"], scope=frozenset({rid})).triples == sorted(
        [(n["a"], imp, n["c"]), (n["a"], UKO + "path", "a.py")]
    )
    assert backend.get_triples(n["b"], scope=frozenset({rid})).triples == []
    assert n["b"] not in backend.subjects(rid)


# ------------------------------------------------------------------ change log


def _file_of(tmp_path: Path, rid: str) -> Path:
    return tmp_path / "graphs" / f"{rid}.graph"


def _big_resource(rid: str, n: int = 2000) -> list:
    return [(file_uri(rid, f"m{i}.py"), UKO + "path", Literal(f"m{i}.py")) for i in range(n)]


def test_a_small_change_appends_only_the_change(tmp_path: Path) -> None:
    rid = new_ulid()
    f = file_uri(rid, "m7.py")
    with RdflibGraphBackend(tmp_path) as backend:
        backend.upsert(rid, _big_resource(rid))
        path = _file_of(tmp_path, rid)
        before = path.stat()
        backend.upsert(rid, [(f, UKO + "lines", Literal("3"))], delete_subjects=[f])
        assert path.stat().st_ino == before.st_ino  # the snapshot was not rewritten
        assert 0 < path.stat().st_size - before.st_size < 500
        expected = backend.get_triples(f, scope=frozenset({rid})).triples
        assert expected == [(f, UKO + "lines", "3")]
    with RdflibGraphBackend(tmp_path) as reopened:
        assert reopened.get_triples(f, scope=frozenset({rid})).triples == expected
        assert len(reopened.subjects(rid)) == 2000


def test_the_log_is_compacted_once_it_outgrows_the_base(tmp_path: Path) -> None:
    rid = new_ulid()
    f = file_uri(rid, "a.py")
    with RdflibGraphBackend(tmp_path) as backend:
        backend.upsert(rid, [(f, UKO + "path", Literal("a.py"))])
        path = _file_of(tmp_path, rid)
        first = path.stat().st_ino
        for i in range(400):
            backend.upsert(rid, [(f, UKO + "n", Literal(str(i)))], delete_subjects=[f])
        assert path.stat().st_ino != first  # replaced by a compaction
        assert path.stat().st_size <= (1 << 15) + 500
        final = backend.get_triples(f, scope=frozenset({rid})).triples
    assert final == [(f, UKO + "n", "399")]
    with RdflibGraphBackend(tmp_path) as reopened:
        assert reopened.get_triples(f, scope=frozenset({rid})).triples == final


def test_a_torn_log_tail_is_ignored_and_cut_by_the_next_writer(tmp_path: Path) -> None:
    rid = new_ulid()
    f, g = file_uri(rid, "a.py"), file_uri(rid, "b.py")
    with RdflibGraphBackend(tmp_path) as backend:
        backend.upsert(rid, [(f, UKO + "path", Literal("a.py"))])
        backend.upsert(rid, [(g, UKO + "path", Literal("b.py"))])
    log = _file_of(tmp_path, rid)
    committed = log.read_bytes()
    # A record header promising more bytes than follow: a writer killed mid-append.
    torn = b"L" + (1000).to_bytes(4, "little") + b"\0\0\0\0" + b"torn"
    log.write_bytes(committed + torn)
    with RdflibGraphBackend(tmp_path) as reader:
        assert reader.get_triples(f, scope=frozenset({rid})).triples == [(f, UKO + "path", "a.py")]
        assert reader.get_triples(g, scope=frozenset({rid})).triples == [(g, UKO + "path", "b.py")]
        reader.upsert(rid, [(f, UKO + "y", "urn:y")])
    assert log.read_bytes().startswith(committed)
    assert b"torn" not in log.read_bytes()
    with RdflibGraphBackend(tmp_path) as reopened:
        assert reopened.get_triples(f, scope=frozenset({rid})).triples == [
            (f, UKO + "path", "a.py"),
            (f, UKO + "y", "urn:y"),
        ]


def test_a_second_instance_follows_appends_deletes_and_compaction(tmp_path: Path) -> None:
    rid = new_ulid()
    f = file_uri(rid, "a.py")
    q = "SELECT ?s ?p ?o WHERE { ?s ?p ?o }"
    with RdflibGraphBackend(tmp_path) as first, RdflibGraphBackend(tmp_path) as second:
        first.upsert(rid, _big_resource(rid, 50))
        assert len(second.subjects(rid)) == 50
        for i in range(3):
            first.upsert(rid, [(f, UKO + "n", Literal(str(i)))], delete_subjects=[f])
            assert second.get_triples(f, scope=frozenset({rid})).triples == [(f, UKO + "n", str(i))]
            assert second.traverse(f, depth=1, scope=frozenset({rid})).triples == [
                (f, UKO + "n", str(i))
            ]
        assert len(second.sparql_query(q, scope=frozenset({rid})).triples) == 51
        for i in range(400):  # forces a compaction
            first.upsert(rid, [(f, UKO + "n", Literal(str(i)))], delete_subjects=[f])
        assert second.get_triples(f, scope=frozenset({rid})).triples == [(f, UKO + "n", "399")]
        second.delete(rid)
        assert first.resource_ids() == set()
        first.upsert(rid, [(f, UKO + "n", Literal("again"))])
        assert second.get_triples(f, scope=frozenset({rid})).triples == [(f, UKO + "n", "again")]


def test_a_leftover_temporary_file_is_ignored(tmp_path: Path) -> None:
    # What a writer killed before its rename leaves behind.
    rid = new_ulid()
    f = file_uri(rid, "a.py")
    (tmp_path / "graphs").mkdir()
    stale = tmp_path / "graphs" / f".{rid}.graph.x1y2.tmp"
    stale.write_bytes(b"ACMSGRF\x02" + bytes(16))
    with RdflibGraphBackend(tmp_path) as backend:
        assert backend.resource_ids() == set()
        backend.upsert(rid, [(f, UKO + "x", "urn:new")])
        assert backend.get_triples(f, scope=frozenset({rid})).triples == [(f, UKO + "x", "urn:new")]
    with RdflibGraphBackend(tmp_path) as reopened:
        assert reopened.get_triples(f, scope=frozenset({rid})).triples == [
            (f, UKO + "x", "urn:new")
        ]


def test_a_failed_append_takes_the_written_part_back(tmp_path: Path, monkeypatch) -> None:
    from cleveragents.infrastructure.acms import graph_store

    rid = new_ulid()
    f = file_uri(rid, "a.py")
    with RdflibGraphBackend(tmp_path) as backend:
        backend.upsert(rid, [(f, UKO + "x", "urn:y")])
        backend.upsert(rid, [(f, UKO + "x", "urn:z")])
        log = _file_of(tmp_path, rid)
        size = log.stat().st_size

        def broken(path, ino, data):
            with open(path, "ab") as fh:  # half the record reaches the disk
                fh.write(data[: len(data) // 2])
            raise OSError("disk full")

        monkeypatch.setattr(graph_store, "_append", broken)
        with pytest.raises(IndexUnavailableError, match="disk full"):
            backend.upsert(rid, [(f, UKO + "x", "urn:w")], delete_subjects=[f])
        assert log.stat().st_size == size
        monkeypatch.undo()
        assert len(backend.get_triples(f, scope=frozenset({rid})).triples) == 2
    with RdflibGraphBackend(tmp_path) as reopened:
        assert reopened.get_triples(f, scope=frozenset({rid})).triples == [
            (f, UKO + "x", "urn:y"),
            (f, UKO + "x", "urn:z"),
        ]


def test_traverse_lists_an_iri_and_an_equal_literal_once(tmp_path: Path) -> None:
    rid = new_ulid()
    f = file_uri(rid, "a.py")
    with RdflibGraphBackend(tmp_path) as backend:
        backend.upsert(rid, [(f, UKO + "x", "urn:y"), (f, UKO + "x", Literal("urn:y"))])
        assert backend.traverse(f, depth=2, scope=frozenset({rid})).triples == [
            (f, UKO + "x", "urn:y")
        ]
        assert backend.get_triples(f, scope=frozenset({rid})).triples == [(f, UKO + "x", "urn:y")]
