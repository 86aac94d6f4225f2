"""Hostile input: property-based fuzzing of every public input path.

Each target feeds hypothesis-generated hostile input to a public entry point
and asserts that

* nothing escapes but the documented errors (``ValueError`` / ``TypeError``,
  ``QueryError`` included, and ``NotFoundError`` / ``IndexUnavailableError``
  where the Protocol names them): every call runs under :func:`guarded`,
  which catches ``BaseException`` (PyO3's ``PanicException`` derives from it)
  and fails on anything else;
* nothing hangs: each call runs on a worker thread joined with a timeout;
* nothing outside the scope comes back, and nothing outside a resource root is
  opened, read, stored as a fragment or indexed.

Targets: Tantivy ``search`` (query syntax fragments, unicode, lone surrogates,
NUL, very long strings), rdflib ``sparql_query`` (grammar fragments,
SERVICE/FROM against a local listening socket that must see no connection),
FAISS ``similarity_search`` / ``upsert`` (NaN, inf, subnormals, 1e308, every
numpy dtype and shape, huge ``top_k``), every scope- or ULID-taking method of
the backends, stubs, ``ScopedView`` and the SQLite registry, and the hydrator
over generated hostile trees (symlinks out of the root, loops, FIFOs, sockets,
device nodes and links, a 10 GB sparse file, non-UTF-8 names, deep nesting,
files swapped or grown between listing and reading).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import shutil
import socket
import stat
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tantivy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from cleveragents.application.container import build_container
from cleveragents.application.services import context_tier_hydrator, resource_files
from cleveragents.application.services.context_tier_hydrator import hydrate_tiers_from_project
from cleveragents.application.services.context_tier_service import ContextTierService
from cleveragents.application.services.indexer import DEFAULT_INDEX_FILE_BYTES
from cleveragents.application.services.resource_files import MAX_FILE_BYTES
from cleveragents.domain.models.acms.backends import IndexUnit, Literal, validate_embedding
from cleveragents.domain.models.acms.errors import (
    IndexUnavailableError,
    NotFoundError,
    QueryError,
    QueryLimitError,
)
from cleveragents.domain.models.acms.scope import ScopedView
from cleveragents.domain.models.acms.stubs import (
    InMemoryGraphBackend,
    InMemoryTextBackend,
    InMemoryVectorBackend,
)
from cleveragents.domain.models.acms.uko import UKO, file_uri, resource_id_of, unit_uri
from cleveragents.domain.models.acms.ulids import is_ulid
from cleveragents.infrastructure.acms.faiss_vector import FaissVectorBackend
from cleveragents.infrastructure.acms.rdflib_graph import RdflibGraphBackend
from cleveragents.infrastructure.acms.sqlite_registry import open_registry
from cleveragents.infrastructure.acms.tantivy_text import TantivyTextBackend
from gitrepo import git
from listening import accepted, listening_socket

A = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
B = "01BX5ZZKBKACTAV9WEVGEMMVRZ"
C = "01H8XGJWBWBAQ4Z3Y5N3C6W7QK"
OUT = "7ZZZZZZZZZZZZZZZZZZZZZZZZZ"  # a valid ULID that no fixture indexes
D = "01J0000000000000000000000D"  # written to by the FAISS upsert fuzz only
INDEXED = (A, B, C)
DIM = 8

DOCUMENTED: tuple[type[Exception], ...] = (ValueError, TypeError)
CALL_TIMEOUT = 20.0

FUZZ = settings(
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# ---------------------------------------------------------------- the harness


def guarded(
    fn: Callable[..., Any],
    *args: Any,
    allowed: tuple[type[Exception], ...] = DOCUMENTED,
    timeout: float = CALL_TIMEOUT,
    **kwargs: Any,
) -> tuple[Any, Exception | None]:
    """Run ``fn`` on a worker thread; return (value, documented error).

    Fails the example on a hang or on any exception (``BaseException``
    included) that is not an ``Exception`` of one of the ``allowed`` types.
    """
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # native panics derive from BaseException
            box["error"] = exc

    worker = threading.Thread(target=run, daemon=True, name="fuzz-call")
    worker.start()
    worker.join(timeout)
    where = f"{getattr(fn, '__qualname__', fn)!s}{_short(args)}"
    if worker.is_alive():
        raise AssertionError(f"hang: {where} did not return within {timeout} s")
    error = box.get("error")
    if error is None:
        return box.get("value"), None
    if isinstance(error, Exception) and isinstance(error, allowed):
        return None, error
    raise AssertionError(
        f"undocumented {type(error).__module__}.{type(error).__qualname__} "
        f"(mro {[t.__name__ for t in type(error).__mro__]}) from {where}: {error!r:.400}"
    ) from error


def _short(args: tuple[Any, ...]) -> str:
    text = repr(args)
    return text if len(text) <= 300 else text[:300] + "..."


class _Audit:
    """One process-wide audit hook (hooks cannot be removed), active on demand."""

    def __init__(self) -> None:
        self.active = False
        self.events: list[tuple[str, tuple[Any, ...]]] = []
        self._lock = threading.Lock()
        sys.addaudithook(self._hook)

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if self.active and event in (
            "open",
            "socket.connect",
            "urllib.Request",
            "http.client.connect",
        ):
            with self._lock:
                self.events.append((event, args))

    @contextlib.contextmanager
    def recording(self) -> Iterator[list[tuple[str, tuple[Any, ...]]]]:
        with self._lock:
            self.events = []
        self.active = True
        try:
            yield self.events
        finally:
            self.active = False

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        was, self.active = self.active, False
        try:
            yield
        finally:
            self.active = was


AUDIT = _Audit()


def _in_scope(uri: str, scope: frozenset[str]) -> bool:
    return resource_id_of(uri) in scope


def _triple_in_scope(triple: tuple[str, str, str], scope: frozenset[str]) -> bool:
    return all(resource_id_of(t) is None or resource_id_of(t) in scope for t in triple)


def _canonical(scope: frozenset[str]) -> frozenset[str]:
    return frozenset(s.upper() for s in scope)


# Scopes that are valid: subsets of the indexed resources, any case, plus a
# ULID no index holds.
valid_scopes = st.frozensets(
    st.sampled_from([*INDEXED, OUT]).flatmap(lambda u: st.sampled_from([u, u.lower()])),
    max_size=4,
)


# ---------------------------------------------------------------- text


def _units(rid: str, n: int) -> list[IndexUnit]:
    words = ["parseJsonV2", "HTTPServer", "snake_case", "zebra", "hello world", "\x00nul", "日本語"]
    return [
        IndexUnit(
            unit_uri(rid, f"pkg/m{i}.py", f"L1-L{i + 1}"),
            f"{words[i % len(words)]} {rid[-4:]} unit {i} \ud800",
            {"path": f"pkg/m{i}.py"},
        )
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def text_backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TantivyTextBackend]:
    backend = TantivyTextBackend(tmp_path_factory.mktemp("fuzz-text") / "text")
    for rid, n in zip(INDEXED, (7, 5, 3), strict=True):
        backend.upsert(rid, _units(rid, n))
    yield backend
    backend.close()


TANTIVY_FRAGMENTS = [
    *("content:", "path:", "resource_id:", "uko_uri:", "body:", "metadata:", "nofield:"),
    *('"', "'", "(", ")", "[", "]", "{", "}", " TO ", " IN ", "IN [", "*", "?", "/", "\\"),
    *("^", "^2", "^0", "^1e40", "^-1", "^340282366920938463463374607431768211456"),
    *("~", "~1", "~2", "~300", "~4294967296", ":", ">", "<", ">=", "<=", "="),
    *(" AND ", " OR ", " NOT ", "-", "+", "&&", "||", "!", " ", "\t", "\n", "\r"),
    *("\x00", "\ud800", "\udfff", "\U0010ffff", "\ufeff", "\u202e", "\uff10", "é", "日本語"),
    *("/.*/", "/(a+)+$/", "/[/", "[a TO z]", "{* TO *}", "[* TO *]", '"a b"~5', "a*", "*a"),
    *("hello", "parseJson", "zebra", "HTTPServer", "snake_case", A, A.lower(), OUT),
    *("9" * 40, "NaN", "inf", "1.5", "-0.0", "%00", "\\u0000", "\\", "\\\\"),
]

any_unicode = st.text(st.characters(exclude_categories=()), max_size=200)
fragment_soup = st.lists(
    st.one_of(st.sampled_from(TANTIVY_FRAGMENTS), st.text(max_size=4)), max_size=24
).map("".join)
very_long = st.builds(
    lambda piece, n: piece * n,
    st.sampled_from(["a ", "hello ", "(", '"', "a^2 ", "x~2 ", "\x00", "\ud800", "日", "*"]),
    st.integers(1, 4000),
)
bytesish = st.binary(max_size=120).map(lambda b: b.decode("utf-8", "surrogateescape"))
tantivy_queries = st.one_of(fragment_soup, any_unicode, very_long, bytesish)


@settings(FUZZ, max_examples=400)
@given(
    query=tantivy_queries,
    scope=valid_scopes,
    max_results=st.integers(1, 2**40) | st.just(1),
)
def test_fuzz_tantivy_search(
    text_backend: TantivyTextBackend, query: str, scope: frozenset[str], max_results: int
) -> None:
    results, error = guarded(text_backend.search, query, scope=scope, max_results=max_results)
    if error is not None:
        return
    wanted = _canonical(scope)
    assert len(results) <= max_results
    for r in results:
        assert _in_scope(r.uko_uri, wanted), r.uko_uri
        assert 0.0 <= r.score <= 1.0
    scores = [r.score for r in results]
    assert scores == sorted(scores, reverse=True)


def test_native_panic_in_the_query_engine_becomes_a_query_error(
    text_backend: TantivyTextBackend,
) -> None:
    """Fault injection: no query reaches a panic in tantivy 0.27, so make the
    engine panic for real (``search(q, 0)`` asserts in Rust) inside
    ``parse_query`` and in ``Searcher.search``: no panic leaves.  In parsing
    it is the query's fault (``QueryError``); in searching, a query that
    parsed and passed the shape limits, it is the shard's (a damaged
    segment panicked so: ``IndexUnavailableError`` naming the rebuild)."""
    real_index = text_backend._index
    assert real_index is not None
    probe = real_index.searcher()

    def panic(*_args: object, **_kwargs: object) -> None:
        probe.search(tantivy.Query.all_query(), 0)  # PanicException: limit must be > 0

    with pytest.raises(BaseException) as raised:
        panic()
    assert not isinstance(raised.value, Exception), "expected a PyO3 PanicException"

    class PanickingIndex:
        def __getattr__(self, name: str) -> object:
            return panic if name == "parse_query" else getattr(real_index, name)

    text_backend._index = PanickingIndex()  # type: ignore[assignment]
    try:
        _, error = guarded(text_backend.search, "hello", scope=frozenset({A}), syntax="tantivy")
    finally:
        text_backend._index = real_index
    assert isinstance(error, QueryError)

    real_run = TantivyTextBackend._run
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(
            TantivyTextBackend,
            "_run",
            staticmethod(lambda shard, query, limit: real_run(shard, query, 0)),
        )
        _, error = guarded(
            text_backend.search,
            "hello",
            scope=frozenset({A}),
            allowed=(*DOCUMENTED, IndexUnavailableError),
        )
    assert isinstance(error, IndexUnavailableError) and "--rebuild" in str(error)


# ---------------------------------------------------------------- SPARQL


@pytest.fixture(scope="module")
def listener() -> Iterator[socket.socket]:
    with listening_socket() as sock:
        yield sock


_connections = accepted


def _graph_triples(rid: str) -> list[tuple[str, str, Any]]:
    f = file_uri(rid, "pkg/core.py")
    sym = unit_uri(rid, "pkg/core.py", "sym=Alpha")
    return [
        (f"uko://{rid}", UKO + "contains", f),
        (f, UKO + "inResource", f"uko://{rid}"),
        (f, UKO + "path", Literal("pkg/core.py")),
        (f, UKO + "defines", sym),
        (sym, UKO + "name", Literal("Alpha " + rid[-4:])),
        (sym, UKO + "line", Literal("010", "http://www.w3.org/2001/XMLSchema#integer")),
        (f, UKO + "imports", "urn:uko:module:json"),
        (f, UKO + "imports", file_uri(rid, "pkg/util.py")),
        (file_uri(rid, "pkg/util.py"), UKO + "imports", f),
    ]


@pytest.fixture(scope="module")
def graph_backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RdflibGraphBackend]:
    backend = RdflibGraphBackend(tmp_path_factory.mktemp("fuzz-graph") / "graph")
    for rid in INDEXED:
        backend.upsert(rid, _graph_triples(rid))
    yield backend
    backend.close()


def _sparql_fragments(port: int) -> list[str]:
    here = f"http://127.0.0.1:{port}"
    return [
        *("PREFIX uko: <https://cleveragents.dev/ns/uko#> ", "PREFIX : <http://x/> "),
        *("BASE <file:///etc/> ", "PREFIX p: <file:///etc/passwd#> "),
        *("SELECT ?s ?p ?o ", "SELECT * ", "SELECT DISTINCT ?s ?p ?o ", "SELECT REDUCED ?s ?p ?o "),
        *("SELECT (COUNT(*) AS ?c) ?p ?o ", "ASK ", "CONSTRUCT { ?s ?p ?o } ", "CONSTRUCT "),
        *("DESCRIBE ?s ", f"DESCRIBE <uko://{OUT}/x> ", "DESCRIBE <file:///etc/passwd> "),
        *("WHERE ", "{ ", "} ", "?s ?p ?o . ", "?s uko:name ?o . ", "?s ?p ?o ", ". ", "; ", ", "),
        *("GRAPH ?g { ?s ?p ?o } ", f"GRAPH <uko://{B}> {{ ?s ?p ?o }} "),
        *(f"SERVICE <{here}/sparql> {{ ?s ?p ?o }} ", "SERVICE SILENT ?svc { ?s ?p ?o } "),
        *(
            f"SERVICE SILENT <{here}/> {{ ?s ?p ?o }} ",
            f"FROM <{here}/g> ",
            f"FROM NAMED <{here}/n> ",
        ),
        *("FROM <file:///etc/passwd> ", "FROM NAMED <file:///etc/passwd> "),
        *(
            f"VALUES ?s {{ <uko://{OUT}/a> <uko://{B}/pkg/core.py> }} ",
            "VALUES (?s ?o) { (UNDEF 1) } ",
        ),
        *(
            "OPTIONAL { ",
            "UNION ",
            "MINUS { ",
            "FILTER ( ",
            "FILTER NOT EXISTS { ",
            "FILTER EXISTS { ",
        ),
        *(
            "BIND ( ",
            " AS ?x ) ",
            ") ",
            "( ",
            "?s uko:imports+ ?o . ",
            "?s (uko:imports|uko:defines)* ?o . ",
        ),
        *("?s ^uko:contains ?o . ", "?s !uko:name ?o . ", "?s uko:imports{2} ?o . "),
        *('REGEX(STR(?o), "a", "i") ', 'REPLACE(STR(?o), "a", "b") ', "STR(?o) ", "IRI(?o) "),
        *(
            f'URI("uko://{OUT}/z") ',
            "CONCAT(?o, ?o) ",
            "LANG(?o) ",
            "STRLEN(?o) ",
            "SUBSTR(?o, -1, 99) ",
        ),
        *(
            "xsd:integer(?o) ",
            "xsd:double(?o) ",
            "xsd:dateTime(?o) ",
            "COALESCE(?x, ?o) ",
            "IF(?o, 1, 0) ",
        ),
        *("SHA512(STR(?o)) ", "NOW() ", "RAND() ", "UUID() ", "STRUUID() ", "BNODE() ", "ABS(?o) "),
        *(
            "ENCODE_FOR_URI(?o) ",
            "1/0 ",
            "?o / 0 ",
            "1e999 ",
            "-1e999 ",
            "99999999999999999999999 ",
        ),
        *(
            "LIMIT 1 ",
            "LIMIT 0 ",
            "OFFSET 99999999999999999999 ",
            "ORDER BY ?s ",
            "ORDER BY DESC(?o) ",
        ),
        *("GROUP BY ?s ", "HAVING (COUNT(?o) > 1) ", "<file:///etc/passwd> ", f"<uko://{OUT}/x> "),
        *(
            f"<uko://{A.lower()}/pkg/core.py> ",
            '"lit" ',
            '"\\u0000" ',
            '"x"@en ',
            '"1"^^xsd:integer ',
        ),
        *("_:b ", "[] ", "[ uko:name ?o ] ", "( 1 2 ) ", "a ", "true ", "?s ", "$o ", "?1 "),
        *(
            "INSERT DATA { <a:b> <a:c> <a:d> } ",
            "LOAD <file:///etc/passwd> ",
            "DROP ALL ",
            "CLEAR ALL ",
        ),
        *("DELETE WHERE { ?s ?p ?o } ", "# comment\n", "\x00", "\ud800", "\n", "'''", '"""'),
    ]


@st.composite
def sparql_queries(draw: st.DrawFn, port: int) -> str:
    frags = _sparql_fragments(port)
    kind = draw(st.integers(0, 3))
    if kind == 0:  # free soup
        return "".join(draw(st.lists(st.sampled_from(frags) | st.text(max_size=3), max_size=30)))
    if kind == 1:  # arbitrary text
        return draw(st.one_of(any_unicode, bytesish))
    # Grammar-shaped: a prologue, a form, dataset clauses, a nested body, modifiers.
    prologue = "".join(draw(st.lists(st.sampled_from(frags[:4]), max_size=2)))
    form = draw(
        st.sampled_from(
            [f for f in frags if f.startswith(("SELECT", "ASK", "CONSTRUCT", "DESCRIBE"))]
        )
    )
    dataset = "".join(
        draw(st.lists(st.sampled_from([f for f in frags if f.startswith("FROM")]), max_size=1))
    )
    depth = draw(st.integers(0, 6 if kind == 2 else 60))
    inner = "".join(draw(st.lists(st.sampled_from(frags), min_size=1, max_size=8)))
    body = "{ " * depth + "?s ?p ?o . " + inner + "} " * depth
    tail = "".join(
        draw(
            st.lists(
                st.sampled_from(
                    [
                        f
                        for f in frags
                        if f.startswith(("LIMIT", "OFFSET", "ORDER", "GROUP", "HAVING"))
                    ]
                ),
                max_size=2,
            )
        )
    )
    return f"{prologue}{form}{dataset}WHERE {{ {body}}} {tail}"


@settings(FUZZ, max_examples=250)
@given(data=st.data(), scope=valid_scopes)
def test_fuzz_sparql(
    graph_backend: RdflibGraphBackend,
    listener: socket.socket,
    data: st.DataObject,
    scope: frozenset[str],
) -> None:
    port = listener.getsockname()[1]
    query = data.draw(sparql_queries(port), label="query")
    with AUDIT.recording() as events:
        result, error = guarded(graph_backend.sparql_query, query, scope=scope)
    reached = [e for e in events if e[0] != "open" or "passwd" in str(e[1][0])]
    assert reached == [], f"the query reached outside the graph: {reached}"
    assert _connections(listener) == 0, "a SPARQL query connected to the local endpoint"
    if error is not None:
        return
    wanted = _canonical(scope)
    for triple in result.triples:
        assert _triple_in_scope(triple, wanted), triple
    assert all("root:" not in term for t in result.triples for term in t)


def test_sparql_forbidden_forms_never_touch_the_network_or_files(
    graph_backend: RdflibGraphBackend, listener: socket.socket, tmp_path: Path
) -> None:
    here = f"http://127.0.0.1:{listener.getsockname()[1]}"
    secret = tmp_path / "secret.nt"
    secret.write_text('<urn:x:secret> <urn:x:p> "LOCALFILESECRET" .\n')
    queries = [
        f"SELECT ?s ?p ?o FROM <{secret.as_uri()}> WHERE {{ ?s ?p ?o }}",
        f"CONSTRUCT {{ ?s ?p ?o }} FROM NAMED <{secret.as_uri()}>"
        " WHERE { GRAPH ?g { ?s ?p ?o } }",
        f"SELECT ?s ?p ?o WHERE {{ SERVICE <{secret.as_uri()}> {{ ?s ?p ?o }} }}",
        f"SELECT ?s ?p ?o WHERE {{ SERVICE <{here}/q> {{ ?s ?p ?o }} }}",
        f"SELECT ?s ?p ?o WHERE {{ ?a ?b ?c OPTIONAL {{ SERVICE SILENT <{here}/> {{ ?s ?p ?o }} }}"
        " }",
        f"SELECT ?s ?p ?o FROM <{here}/g> WHERE {{ ?s ?p ?o }}",
        "SELECT ?s ?p ?o FROM <file:///etc/passwd> WHERE { ?s ?p ?o }",
        "SELECT ?s ?p ?o FROM NAMED <file:///etc/passwd> WHERE { GRAPH ?g { ?s ?p ?o } }",
        f"ASK {{ FILTER EXISTS {{ SERVICE <{here}/> {{ ?s ?p ?o }} }} }}",
    ]
    with AUDIT.recording() as events:
        for query in queries:
            result, error = guarded(graph_backend.sparql_query, query, scope=frozenset({A}))
            assert error is not None or "LOCALFILESECRET" not in repr(result.triples), query
            assert isinstance(error, QueryError), query
    assert [e for e in events if e[0] != "open" or "passwd" in str(e[1][0])] == []
    assert _connections(listener) == 0


def test_sparql_catastrophic_regex_is_stopped_by_the_time_limit() -> None:
    backend = RdflibGraphBackend(query_timeout=1.0)
    backend.upsert(A, [(f"uko://{A}/a", "urn:p", Literal("a" * 40 + "!"))])
    query = 'SELECT ?s ?p ?o WHERE { ?s ?p ?o FILTER(REGEX(?o, "^(a+)+$")) }'
    _, error = guarded(backend.sparql_query, query, scope=frozenset({A}), timeout=15.0)
    assert isinstance(error, QueryLimitError), error
    backend.close()


# ---------------------------------------------------------------- FAISS


@pytest.fixture(scope="module")
def vector_backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaissVectorBackend]:
    backend = FaissVectorBackend(tmp_path_factory.mktemp("fuzz-vec") / "vectors", dimension=DIM)
    rng = np.random.default_rng(0)
    for rid, n in zip(INDEXED, (6, 4, 2), strict=True):
        units = [IndexUnit(unit_uri(rid, "v.py", f"L{i + 1}-L{i + 1}"), f"v{i}") for i in range(n)]
        backend.upsert(rid, units, rng.standard_normal((n, DIM)))
    yield backend
    backend.close()


SPECIAL_FLOATS = [
    math.nan, math.inf, -math.inf, -0.0, 0.0, 5e-324, -5e-324, 2.2250738585072014e-308,
    1e308, -1e308, 1.7976931348623157e308, 1e-300, 1.0, -1.0, 3.4028235e38, 3.5e38,
]  # fmt: skip
hostile_floats = st.one_of(
    st.sampled_from(SPECIAL_FLOATS), st.floats(allow_nan=True, allow_infinity=True)
)
# Integers stay below 2**1000: beyond float range they hit the OverflowError
# bug pinned by test_embedding_with_a_huge_int_is_a_value_error.
hostile_scalars = st.one_of(
    hostile_floats,
    st.integers(-(2**1000), 2**1000),
    st.booleans(),
    st.text(max_size=3),
    st.binary(max_size=3),
    st.complex_numbers(),
    st.none(),
    st.lists(st.floats(), max_size=2),
    st.sampled_from([np.float32(1.0), np.float64(-0.0), np.int64(3), np.bool_(True), np.nan]),
)
all_dtypes = st.one_of(
    hnp.scalar_dtypes(),
    st.sampled_from([np.dtype(object), np.dtype(np.longdouble), np.dtype("S3"), np.dtype("U2")]),
)
numpy_embeddings = hnp.arrays(
    dtype=all_dtypes,
    shape=st.one_of(st.just((DIM,)), hnp.array_shapes(min_dims=0, max_dims=3, max_side=DIM + 1)),
)
embeddings = st.one_of(
    st.lists(hostile_floats, min_size=DIM, max_size=DIM),
    st.lists(hostile_floats, max_size=2 * DIM + 1),
    st.lists(hostile_scalars, max_size=DIM + 1),
    st.lists(hostile_scalars, min_size=DIM, max_size=DIM).map(tuple),
    numpy_embeddings,
    st.sampled_from(["x" * DIM, b"x" * DIM, {i: 1.0 for i in range(DIM)}, None, 1.0, set()]),
)
top_ks = st.one_of(st.integers(-3, 64), st.integers(2**31 - 2, 2**70), st.booleans(), st.floats())


@settings(FUZZ, max_examples=400)
@given(embedding=embeddings, scope=valid_scopes, top_k=top_ks)
def test_fuzz_faiss_similarity_search(
    vector_backend: FaissVectorBackend, embedding: object, scope: frozenset[str], top_k: object
) -> None:
    results, error = guarded(vector_backend.similarity_search, embedding, scope=scope, top_k=top_k)
    if error is not None:
        return
    assert isinstance(top_k, int)
    assert len(results) <= top_k
    wanted = _canonical(scope)
    for r in results:
        assert _in_scope(r.uko_uri, wanted)
        assert 0.0 <= r.score <= 1.0


def _upsert_should_succeed(matrix: np.ndarray, rows: int) -> bool:
    if matrix.dtype.kind not in "fiu" or matrix.shape != (rows, DIM):
        return False
    with np.errstate(over="ignore", invalid="ignore"):
        wide = matrix.astype(np.float64)
    return bool(np.all(np.isfinite(wide)) and np.all(np.any(wide != 0.0, axis=1)))


@settings(FUZZ, max_examples=250)
@given(
    matrix=hnp.arrays(
        dtype=all_dtypes,
        shape=st.one_of(
            st.tuples(st.integers(0, 3), st.just(DIM)),
            hnp.array_shapes(min_dims=0, max_dims=3, max_side=DIM + 1),
        ),
    ),
    rows=st.integers(0, 3),
)
def test_fuzz_faiss_upsert(
    vector_backend: FaissVectorBackend, matrix: np.ndarray, rows: int
) -> None:
    units = [IndexUnit(unit_uri(D, "u.py", f"L{i + 1}-L{i + 1}"), f"u{i}") for i in range(rows)]
    _, error = guarded(vector_backend.upsert, D, units, matrix)
    assert (error is None) == _upsert_should_succeed(matrix, rows), (error, matrix.dtype)
    if error is None:
        uris = {u.uko_uri for u in units}
        assert vector_backend.unit_uris(D) >= uris
        found, err = guarded(
            vector_backend.similarity_search, [1.0] * DIM, scope=frozenset({D}), top_k=99
        )
        assert err is None
        assert all(0.0 <= r.score <= 1.0 and _in_scope(r.uko_uri, frozenset({D})) for r in found)


@settings(FUZZ, max_examples=120)
@given(
    bad=st.lists(
        st.one_of(
            st.lists(hostile_scalars, min_size=DIM, max_size=DIM),
            st.lists(hostile_floats, max_size=DIM + 2),
        ),
        min_size=1,
        max_size=3,
    )
)
def test_fuzz_faiss_upsert_nested_lists(vector_backend: FaissVectorBackend, bad: list[Any]) -> None:
    units = [IndexUnit(unit_uri(D, "w.py", f"L{i + 1}-L{i + 1}"), "w") for i in range(len(bad))]
    guarded(vector_backend.upsert, D, units, bad)


def test_embedding_with_a_huge_int_is_a_value_error(vector_backend: FaissVectorBackend) -> None:
    embedding = [10**400] + [0.0] * (DIM - 1)
    for call in (
        lambda: validate_embedding(embedding, DIM),
        lambda: InMemoryVectorBackend(DIM).similarity_search(embedding, scope=frozenset({A})),
        lambda: vector_backend.similarity_search(embedding, scope=frozenset({A})),
    ):
        guarded(call)


# ---------------------------------------------------------------- scopes and ULIDs


def _almost_ulids() -> st.SearchStrategy[str]:
    swaps = [
        "I",
        "L",
        "O",
        "U",
        "i",
        "l",
        "o",
        "u",
        " ",
        "\t",
        "\n",
        "\uff10",
        "\u0663",
        "-",
        "\x00",
        "\ud800",
        "\u00df",
        "\ufb00",
        "\u017f",
        "K",
    ]

    def mutate(base: str, pos: int, swap: str, how: int) -> str:
        pos %= len(base)
        if how == 0:
            return base[:pos] + swap + base[pos + 1 :]
        if how == 1:
            return base[:pos] + swap + base[pos:]
        if how == 2:
            return base[:pos]
        if how == 3:
            return f" {base} "
        if how == 4:
            return "8" + base[1:]  # first character beyond 7: over 128 bits
        return base.lower()[:pos] + swap

    return st.builds(
        mutate,
        st.sampled_from([*INDEXED, OUT]),
        st.integers(0, 25),
        st.sampled_from(swaps),
        st.integers(0, 5),
    )


scope_members = st.one_of(
    _almost_ulids(),
    st.sampled_from([*INDEXED, OUT, A.lower()]),
    st.text(max_size=30),
    st.binary(max_size=26),
    st.integers(),
    st.none(),
    st.floats(),
    st.tuples(st.sampled_from(INDEXED)),
    st.frozensets(st.sampled_from(INDEXED), max_size=1),
)
scope_objects = st.one_of(
    valid_scopes,
    st.frozensets(scope_members, max_size=4),
    st.frozensets(_almost_ulids(), max_size=3),
    st.text(max_size=30),
    st.sampled_from([A, A.encode(), [A], {A}, {A: A}, (A,), None, 0, frozenset, frozenset({(A,)})]),
    st.lists(st.sampled_from(INDEXED), max_size=3),
    st.sets(st.sampled_from(INDEXED), max_size=3),
    st.dictionaries(st.sampled_from(INDEXED), st.integers(), max_size=2),
)
resource_id_objects = st.one_of(
    scope_members, st.sampled_from([[A], {A}, frozenset({A}), A.encode()])
)


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Any:
    projects, resources = open_registry(tmp_path_factory.mktemp("fuzz-reg") / "registry.sqlite3")
    projects.add("local/fuzz")
    return projects, resources


def _scope_calls(
    text: TantivyTextBackend, vector: FaissVectorBackend, graph: RdflibGraphBackend, scope: object
) -> list[tuple[str, Callable[[], Any], bool]]:
    """(name, call, whether a success must return only in-scope results)."""
    q_graph = "SELECT ?s ?p ?o WHERE { ?s ?p ?o } LIMIT 5"
    start = file_uri(A, "pkg/core.py")
    emb = [1.0] * DIM
    calls: list[tuple[str, Callable[[], Any], bool]] = [
        ("text.search", lambda: text.search("hello OR unit", scope=scope), True),  # type: ignore[arg-type]
        ("vector.similarity_search", lambda: vector.similarity_search(emb, scope=scope), True),  # type: ignore[arg-type]
        ("graph.sparql_query", lambda: graph.sparql_query(q_graph, scope=scope), True),  # type: ignore[arg-type]
        ("graph.get_triples", lambda: graph.get_triples(start, scope=scope), True),  # type: ignore[arg-type]
        ("graph.traverse", lambda: graph.traverse(start, depth=3, scope=scope), True),  # type: ignore[arg-type]
        ("stub.search", lambda: InMemoryTextBackend().search("q", scope=scope), True),  # type: ignore[arg-type]
        (
            "stub.similarity",
            lambda: InMemoryVectorBackend(DIM).similarity_search(emb, scope=scope),
            True,
        ),  # type: ignore[arg-type]
        ("stub.sparql", lambda: InMemoryGraphBackend().sparql_query("ASK {}", scope=scope), True),  # type: ignore[arg-type]
        ("stub.get_triples", lambda: InMemoryGraphBackend().get_triples("s", scope=scope), True),  # type: ignore[arg-type]
        ("stub.traverse", lambda: InMemoryGraphBackend().traverse("s", scope=scope), True),  # type: ignore[arg-type]
        ("ScopedView", lambda: ScopedView(text, vector, graph, scope), False),  # type: ignore[arg-type]
    ]
    return calls


def _check_in_scope(value: object, scope: frozenset[str]) -> None:
    items = value if isinstance(value, list) else getattr(value, "triples", [])
    for item in items:
        if isinstance(item, tuple):
            assert _triple_in_scope(item, scope), item
        else:
            assert _in_scope(item.uko_uri, scope), item


@settings(FUZZ, max_examples=250)
@given(scope=scope_objects)
def test_fuzz_every_scope_taking_method(
    text_backend: TantivyTextBackend,
    vector_backend: FaissVectorBackend,
    graph_backend: RdflibGraphBackend,
    scope: object,
) -> None:
    for name, call, scoped in _scope_calls(text_backend, vector_backend, graph_backend, scope):
        value, error = guarded(call)
        if error is not None:
            continue
        if scope is None and name.endswith(("get_triples", "traverse")):
            continue  # None is documented: unrestricted, for maintenance
        assert isinstance(scope, frozenset), (name, scope)
        canonical = frozenset(s.upper() for s in scope)
        if scoped:
            _check_in_scope(value, canonical)
            continue
        _check_view(value)


def _check_view(view: ScopedView) -> None:
    for view_call in (
        lambda: view.search("hello OR unit"),
        lambda: view.similarity_search([1.0] * DIM, top_k=50),
        lambda: view.sparql_query("CONSTRUCT { ?s ?p ?o } WHERE { ?s ?p ?o }"),
        lambda: view.get_triples(file_uri(A, "pkg/core.py")),
        lambda: view.traverse(file_uri(B, "pkg/core.py"), depth=4),
    ):
        got, err = guarded(view_call)
        if err is None:
            _check_in_scope(got, view.scope)


@settings(FUZZ, max_examples=200)
@given(rid=resource_id_objects)
def test_fuzz_every_resource_id_taking_method(
    text_backend: TantivyTextBackend,
    vector_backend: FaissVectorBackend,
    graph_backend: RdflibGraphBackend,
    registry: Any,
    rid: object,
) -> None:
    projects, resources = registry
    empty = np.empty((0, DIM), dtype=np.float32)
    calls: list[Callable[[], Any]] = [
        lambda: text_backend.unit_uris(rid),  # type: ignore[arg-type]
        lambda: vector_backend.unit_uris(rid),  # type: ignore[arg-type]
        lambda: graph_backend.subjects(rid),  # type: ignore[arg-type]
        lambda: text_backend.upsert(rid, []),  # type: ignore[arg-type]
        lambda: text_backend.delete(rid, []),  # type: ignore[arg-type]
        lambda: vector_backend.upsert(rid, [], empty),  # type: ignore[arg-type]
        lambda: vector_backend.delete(rid, []),  # type: ignore[arg-type]
        lambda: graph_backend.upsert(rid, []),  # type: ignore[arg-type]
        lambda: graph_backend.delete(rid, []),  # type: ignore[arg-type]
        lambda: resources.get(rid),
        lambda: resources.remove(rid),
        lambda: resources.mark_indexed(rid),
        lambda: projects.link("local/fuzz", rid),
    ]
    for call in calls:
        guarded(call, allowed=(*DOCUMENTED, NotFoundError))
    # Nothing above may have removed the fixtures' data.
    assert text_backend.resource_ids() >= set(INDEXED)
    assert vector_backend.resource_ids() >= set(INDEXED)
    assert graph_backend.resource_ids() >= set(INDEXED)


@settings(FUZZ, max_examples=300)
@given(
    value=st.one_of(
        _almost_ulids(),
        st.text(max_size=40),
        st.text(st.characters(exclude_categories=()), min_size=24, max_size=28),
    )
)
def test_fuzz_is_ulid_accepts_only_26_crockford_ascii_chars(value: str) -> None:
    accepted = is_ulid(value)
    expected = (
        len(value) == 26
        and value.isascii()
        and value[0] in "01234567"
        and all(ch in "0123456789ABCDEFGHJKMNPQRSTVWXYZ" for ch in value.upper())
    )
    assert accepted == expected, value


def test_non_ascii_look_alikes_are_not_ulids() -> None:
    for value in ("0" * 24 + "\u00df", "0" * 24 + "\ufb00", "0" * 25 + "\u017f"):
        assert not is_ulid(value), value


@pytest.mark.parametrize("name", [["local/x"], {"local/x": 1}, object()])
def test_registry_rejects_non_str_names_with_type_error(registry: Any, name: object) -> None:
    projects, resources = registry
    for call in (
        lambda: projects.remove(name),
        lambda: projects.link(name, A),
        lambda: resources.mark_indexed(A, when=name),
    ):
        _, error = guarded(call, allowed=(*DOCUMENTED, NotFoundError, IndexUnavailableError))
        assert not isinstance(error, IndexUnavailableError), error


# ---------------------------------------------------------------- the hydrator

NAMES = [
    b"a", b"b", b"pkg", b"n.py", b"m.txt", b"caf\xe9.py", b"\xff\xfe", b"x" * 255,
    b"\xe2\x80\xae.py", b"-rf", b"new\nline.txt", b" sp ace ", b"node_modules", b"UPPER.MD",
    b"bin.png", b"s.so",
]  # fmt: skip
PASSWD_TOKEN = "root"  # /etc/passwd always holds the root user
OUTSIDE_SECRET = b"OUTSIDESECRETMARKER lives outside the root\n"
CONTENT_BYTES = st.binary(max_size=600).map(lambda b: bytes(x for x in b if x not in b"rot"))

FILE_KINDS = [
    "file", "file", "file", "nul", "bom", "big", "sparse", "link_passwd", "link_out_rel",
    "link_out_abs", "link_dir_out", "link_dir_out_rel", "link_dir_in", "link_dir_up",
    "loop_self", "loop_pair", "loop_dir", "fifo", "socket", "link_dev_zero", "link_dev_random",
    "link_dev_tty", "dev_zero", "deep", "dangling",
]  # fmt: skip
# What the read hook does to a file after listing, before reading.
MUTATIONS = [
    "none",
    "vanish",
    "to_passwd_link",
    "to_fifo",
    "parent_to_link",
    "grow",
    "grow_mid_read",
    "to_dir",
    "rewrite",
]

entry = st.tuples(
    st.lists(st.sampled_from([*NAMES[:4], b"caf\xe9", b"\xff"]), max_size=2),  # directories
    st.sampled_from(NAMES),
    st.sampled_from(FILE_KINDS),
    CONTENT_BYTES,
)


class _OsProxy:
    """``os`` as ``resource_files`` sees it: records the real target of every
    descriptor it opens and the bytes read from each, and can grow a file
    right after ``fstat`` (a file that changes while it is read)."""

    def __init__(self, grow_mid_read: set[str]) -> None:
        self.opened: list[str] = []
        self.read_bytes: dict[int, int] = {}
        self.fd_paths: dict[int, str] = {}
        self._grow = grow_mid_read

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def open(self, path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        fd = os.open(path, flags, mode, dir_fd=dir_fd)
        target = os.readlink(f"/proc/self/fd/{fd}")
        self.opened.append(target)
        self.fd_paths[fd] = target
        self.read_bytes[fd] = 0
        return fd

    def fstat(self, fd: int) -> os.stat_result:
        st_ = os.fstat(fd)
        target = self.fd_paths.get(fd, "")
        if target in self._grow and stat.S_ISREG(st_.st_mode):
            with AUDIT.paused():
                grower = os.open(target, os.O_WRONLY | os.O_APPEND)
                try:
                    os.write(grower, b"g" * (2 * DEFAULT_INDEX_FILE_BYTES))
                finally:
                    os.close(grower)
        return st_

    def read(self, fd: int, n: int) -> bytes:
        data = os.read(fd, n)
        self.read_bytes[fd] = self.read_bytes.get(fd, 0) + len(data)
        return data

    def close(self, fd: int) -> None:
        self.fd_paths.pop(fd, None)
        os.close(fd)


def _bind_unix_socket(path: bytes) -> None:
    # sun_path is short: bind by a relative name from inside the directory.
    parent, name = os.path.split(path)
    here = os.open(".", os.O_RDONLY)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        os.chdir(parent)
        with contextlib.suppress(OSError):
            sock.bind(os.fsdecode(name))
    finally:
        os.fchdir(here)
        os.close(here)
        sock.close()


def _make(
    root: bytes, outside: bytes, rel_dirs: list[bytes], name: bytes, kind: str, content: bytes
) -> bytes | None:
    """Create one entry; return its path relative to root if it is a regular file."""
    directory = os.path.join(root, *rel_dirs) if rel_dirs else root
    if kind == "deep":
        directory = os.path.join(directory, *([b"d"] * 80))
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError:
        return None  # a path component already exists as a file or link
    if os.path.realpath(directory) != os.path.normpath(directory):
        return None  # an earlier entry made a component a symlink: never write through it
    path = os.path.join(directory, name)
    if os.path.lexists(path):
        return None
    depth = os.path.relpath(directory, root).count(b"/") + (0 if directory == root else 1)
    up = b"../" * depth
    outside_secret = os.path.join(outside, b"secret.txt")
    try:
        if kind in ("file", "deep"):
            with open(path, "wb") as fh:
                fh.write(content)
        elif kind == "nul":
            with open(path, "wb") as fh:
                fh.write(b"x = 1\n\x00" + content)
        elif kind == "bom":
            with open(path, "wb") as fh:
                fh.write(b"\xef\xbb\xbf" + content + b"\xc3\x28\xa0\xa1")
        elif kind == "big":
            with open(path, "wb") as fh:
                fh.write(b"y" * (MAX_FILE_BYTES + 4096))
        elif kind == "sparse":
            with open(path, "wb") as fh:
                fh.write(b"sparse head\n")
            os.truncate(path, 10 * 1024**3)  # 10 GB, no disk used
        elif kind == "link_passwd":
            os.symlink(b"/etc/passwd", path)
        elif kind == "link_out_rel":
            os.symlink(up + b"../outside/secret.txt", path)
        elif kind == "link_out_abs":
            os.symlink(outside_secret, path)
        elif kind == "link_dir_out":
            os.symlink(outside, path)
        elif kind == "link_dir_out_rel":
            os.symlink(up + b"../outside", path)
        elif kind == "link_dir_in":
            os.symlink(b".", path)
        elif kind == "link_dir_up":
            os.symlink(b"..", path)
        elif kind == "loop_self":
            os.symlink(name, path)
        elif kind == "loop_pair":
            os.symlink(name + b".2", path)
            if not os.path.lexists(path + b".2"):
                os.symlink(name, path + b".2")
        elif kind == "loop_dir":
            os.makedirs(path)
            os.symlink(b"..", os.path.join(path, b"back"))
        elif kind == "fifo":
            os.mkfifo(path)
        elif kind == "socket":
            _bind_unix_socket(path)
        elif kind == "link_dev_zero":
            os.symlink(b"/dev/zero", path)
        elif kind == "link_dev_random":
            os.symlink(b"/dev/random", path)
        elif kind == "link_dev_tty":
            os.symlink(b"/dev/tty", path)
        elif kind == "dev_zero":
            try:
                os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))
            except PermissionError:
                os.symlink(b"/dev/zero", path)
        elif kind == "dangling":
            os.symlink(up + b"nowhere/at/all", path)
    except OSError:
        return None
    if kind in ("file", "deep", "nul", "bom", "big"):
        return os.path.relpath(path, root)
    return None


@st.composite
def hostile_trees(draw: st.DrawFn) -> tuple[list[tuple[list[bytes], bytes, str, bytes]], list[str]]:
    entries = draw(st.lists(entry, min_size=1, max_size=14))
    mutations = draw(
        st.lists(st.sampled_from(MUTATIONS), min_size=len(entries), max_size=len(entries))
    )
    return entries, mutations


_COUNTER = itertools.count()


def _apply_mutation(root: str, outside: str, rel_path: str, mutation: str) -> None:
    path = os.path.join(root, rel_path)
    with AUDIT.paused(), contextlib.suppress(OSError):
        if mutation == "vanish":
            os.unlink(path)
        elif mutation == "to_passwd_link":
            os.unlink(path)
            os.symlink("/etc/passwd", path)
        elif mutation == "to_fifo":
            os.unlink(path)
            os.mkfifo(path)
        elif mutation == "to_dir":
            os.unlink(path)
            os.mkdir(path)
        elif mutation == "grow":
            with open(path, "ab") as fh:
                fh.write(b"G" * (2 * DEFAULT_INDEX_FILE_BYTES))
        elif mutation == "rewrite":
            with open(path, "wb") as fh:
                fh.write(b"rewritten content\n")
        elif mutation == "parent_to_link":
            # The parent becomes a link to a decoy outside that holds the same
            # name with secret content: following it would read the secret.
            parent = os.path.dirname(path)
            if parent == root:
                os.unlink(path)
                os.symlink(os.path.join(outside, "secret.txt"), path)
            else:
                decoy = os.path.join(outside, f"decoy{next(_COUNTER)}")
                os.mkdir(decoy)
                with open(os.path.join(decoy, os.path.basename(path)), "wb") as fh:
                    fh.write(OUTSIDE_SECRET)
                shutil.rmtree(parent)
                os.symlink(decoy, parent)


def _hydrate_hostile(
    base: Path, resource_type: str, spec: tuple[list[Any], list[str]]
) -> tuple[dict[str, str], set[str]]:
    """Build the tree, hydrate it under every check; return the fragments
    (path -> content) and the paths the catalog recorded."""
    entries, mutations = spec
    work = base / f"ex{next(_COUNTER)}"
    root_b = os.fsencode(os.path.realpath(base) + f"/{work.name}/root")
    outside_b = os.fsencode(os.path.realpath(base) + f"/{work.name}/outside")
    os.makedirs(root_b)
    os.makedirs(outside_b)
    with open(os.path.join(outside_b, b"secret.txt"), "wb") as fh:
        fh.write(OUTSIDE_SECRET)
    special_late = {"fifo", "socket", "sparse", "dev_zero"}  # never handed to git
    regular: dict[str, str] = {}
    for (dirs, name, kind, content), mutation in zip(entries, mutations, strict=True):
        if kind in special_late and resource_type == "git-checkout":
            continue
        rel = _make(root_b, outside_b, dirs, name, kind, content)
        if rel is not None:
            regular[os.fsdecode(rel)] = mutation
    root = os.fsdecode(root_b)
    outside = os.fsdecode(outside_b)
    if resource_type == "git-checkout":
        git(Path(root), "init", "-q")
        git(Path(root), "add", "-A")
        git(Path(root), "commit", "-q", "--allow-empty", "-m", "hostile")
        for (dirs, name, kind, content), _ in zip(entries, mutations, strict=True):
            if kind in special_late:
                _make(root_b, outside_b, dirs, name, kind, content)

    grow_mid_read = {
        os.path.realpath(os.path.join(root, rel))
        for rel, m in regular.items()
        if m == "grow_mid_read"
    }
    proxy = _OsProxy(grow_mid_read)
    real_read_file = context_tier_hydrator.read_file
    mutated: set[str] = set()

    def read_with_race(root_arg: Any, listed: Any, **kwargs: Any) -> Any:
        mutation = regular.get(listed.rel_path, "none")
        if mutation not in ("none", "grow_mid_read"):
            _apply_mutation(root, outside, listed.rel_path, mutation)
            mutated.add(listed.rel_path)
        return real_read_file(root_arg, listed, **kwargs)

    container = build_container("local", work / "data", embedding_dimension=16)
    indexer = container.indexer()
    tiers = ContextTierService()
    data_real = os.path.realpath(work / "data")
    root_real = os.path.realpath(root)
    try:
        with pytest.MonkeyPatch.context() as mp, AUDIT.recording() as events:
            mp.setattr(resource_files, "os", proxy)
            mp.setattr(context_tier_hydrator, "read_file", read_with_race)
            stored, _ = guarded(
                hydrate_tiers_from_project,
                tiers,
                "local/fuzz",
                A,
                root,
                resource_type,
                indexer=indexer,
                allowed=(),
                timeout=60.0,
            )
        _check_hydration(
            root_real, data_real, outside, proxy, list(events), tiers, indexer, regular, mutated
        )
        assert stored == len(tiers.fragments())
        fragments = {f.metadata["path"]: f.content for f in tiers.fragments()}
        return fragments, set(indexer.catalog.records(A))
    finally:
        for backend in (
            indexer.store.text,
            indexer.store.vector,
            indexer.store.graph,
            indexer.catalog,
        ):
            with contextlib.suppress(Exception):
                backend.close()
        shutil.rmtree(work, ignore_errors=True)


def _allowed_path(path: str, root_real: str, data_real: str) -> bool:
    real = os.path.realpath(path)
    inside = [root_real, data_real]
    internal = [
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        "/proc/self",
        "/dev/null",
        "/dev/urandom",
    ]
    return any(real == p or real.startswith(p.rstrip("/") + "/") for p in inside + internal)


def _check_hydration(
    root_real: str,
    data_real: str,
    outside: str,
    proxy: _OsProxy,
    events: list[tuple[str, tuple[Any, ...]]],
    tiers: ContextTierService,
    indexer: Any,
    regular: dict[str, str],
    mutated: set[str],
) -> None:
    # 1. Nothing opened outside the root (descriptor targets as the kernel sees them).
    for target in proxy.opened:
        assert target == root_real or target.startswith(root_real + "/"), f"opened {target}"
    for event, args in events:
        if event != "open":
            raise AssertionError(f"hydration made a network call: {event} {args}")
        path = args[0]
        if isinstance(path, int) or not os.path.isabs(os.fsdecode(path)):
            continue  # a descriptor, or a name relative to a dir_fd checked above
        assert _allowed_path(os.fsdecode(path), root_real, data_real), f"opened {path!r}"
    # 2. Bytes read per descriptor are capped.
    for fd, count in proxy.read_bytes.items():
        assert count <= DEFAULT_INDEX_FILE_BYTES + 1, f"read {count} bytes from fd {fd}"
    # 3. Fragments: only regular files created as such, never outside content, bounded.
    broken = {
        "vanish",
        "to_passwd_link",
        "to_fifo",
        "to_dir",
        "parent_to_link",
        "grow",
        "grow_mid_read",
    }
    fragments = tiers.fragments()
    for fragment in fragments:
        path = fragment.metadata["path"]
        assert path in regular, f"a fragment for {path!r}, which is no regular file"
        assert not (path in mutated and regular[path] in broken), (path, regular[path])
        assert len(fragment.content) <= MAX_FILE_BYTES
        assert "OUTSIDESECRETMARKER" not in fragment.content
        assert "root:x:0:0" not in fragment.content
    # 4. Indexes: only regular files, never over the cap, never outside content.
    records = indexer.catalog.records(A)
    for path, record in records.items():
        assert path in regular, f"indexed {path!r}, which is no regular file"
        assert not (path in mutated and regular[path] in broken), (path, regular[path])
        assert record.size <= indexer.max_file_bytes
    for token in ("outsidesecretmarker", PASSWD_TOKEN):
        assert indexer.store.text.search(token, scope=frozenset({A})) == [], token
    for unit_uri_ in indexer.store.text.unit_uris(A):
        assert resource_id_of(unit_uri_) == A


@pytest.fixture(scope="module")
def hydrate_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-hydrate")


@pytest.mark.slow
@settings(FUZZ, max_examples=80)
@given(spec=hostile_trees())
def test_fuzz_hydrator_directory(hydrate_base: Path, spec: Any) -> None:
    _hydrate_hostile(hydrate_base, "directory", spec)


@pytest.mark.slow
@settings(FUZZ, max_examples=30)
@given(spec=hostile_trees())
def test_fuzz_hydrator_git_checkout(hydrate_base: Path, spec: Any) -> None:
    _hydrate_hostile(hydrate_base, "git-checkout", spec)


@pytest.mark.parametrize("resource_type", ["directory", "git-checkout"])
@pytest.mark.parametrize("mutation", MUTATIONS)
def test_hydrator_every_kind_and_race_once(
    hydrate_base: Path, resource_type: str, mutation: str
) -> None:
    """Every entry kind in one tree, with every file hit by ``mutation``: the
    generated trees above cover combinations, this covers each case surely."""
    entries = [
        ([b"pkg"], f"f{i}.py".encode(), kind, b"x = 1\n") for i, kind in enumerate(FILE_KINDS)
    ]
    entries += [([], b"top.py", "file", b"y = 2\n"), ([b"caf\xe9"], b"\xff.txt", "file", b"z\n")]
    fragments, indexed = _hydrate_hostile(
        hydrate_base, resource_type, (entries, [mutation] * len(entries))
    )
    # The checks above must have had something to look at.
    plain = {"pkg/f0.py", "pkg/f1.py", "pkg/f2.py", "top.py", os.fsdecode(b"caf\xe9/\xff.txt")}
    if mutation == "none":
        assert plain <= set(fragments), sorted(fragments)
        assert fragments["top.py"] == "y = 2\n"
        assert "pkg/f5.py" not in fragments  # over the tier's cap ...
        assert "pkg/f5.py" in indexed  # ... but not the index's
    elif mutation == "rewrite":
        assert plain <= set(fragments)
        assert {fragments[p] for p in plain} == {"rewritten content\n"}
    else:  # every regular file was broken before it was read
        assert fragments == {}, sorted(fragments)
