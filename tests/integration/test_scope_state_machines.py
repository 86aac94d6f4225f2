"""Scope isolation, model-based: one hypothesis state machine per backend and
one over the whole indexer seen through ``ScopedView``.

Each machine keeps a plain-Python model of what was committed, mutates the
real index (add, replace, delete units, delete whole resources, close and
reopen from disk, write through one handle and read through another) and,
after every query with a random scope (empty, one resource, all, ULIDs never
indexed, ULIDs of deleted resources, lower-case ULIDs) and a random query
(hostile ones included), checks two things:

- nothing outside the scope comes back;
- the answer is exactly an oracle's: numpy brute force for FAISS, the merge
  of per-resource plain Tantivy indexes fed with only the in-scope
  resources' writes for text (``text_oracle.py``), a fresh rdflib store of
  only the in-scope triples for SPARQL.

Example counts are fixed and derandomized so CI runs the same examples each
time (see ``SETTINGS`` below).
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from cleveragents.domain.models.acms.backends import (
    GraphResult,
    IndexUnit,
    Literal,
    TextResult,
    VectorResult,
    WriteTriple,
)
from cleveragents.domain.models.acms.errors import QueryError
from cleveragents.domain.models.acms.scope import ScopedView
from cleveragents.domain.models.acms.uko import (
    UKO,
    file_uri,
    module_uri,
    resource_id_of,
    resource_uri,
    unit_uri,
)
from cleveragents.infrastructure.acms.faiss_vector import FaissVectorBackend
from cleveragents.infrastructure.acms.rdflib_graph import RdflibGraphBackend
from cleveragents.infrastructure.acms.tantivy_text import TantivyTextBackend
from cleveragents.infrastructure.acms.tree_sitter_code import TreeSitterCodeParser
from text_oracle import ShardOracle

# A pool of resources that get indexed, and ULIDs that never are.
POOL = tuple(f"01JD5TD11B{'0' * 15}{c}" for c in "ABCDE")
NEVER = ("01JD5TD11C000000000000000Z", "7ZZZZZZZZZZZZZZZZZZZZZZZZZ")
XSD_INT = "http://www.w3.org/2001/XMLSchema#integer"
SCORE_TOL = 1e-5


def scratch_dir(prefix: str) -> str:
    """A temporary directory, on tmpfs when there is one: fsync there is free,
    and these machines test scope logic, not durability."""
    shm = "/dev/shm"
    base = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None
    return tempfile.mkdtemp(prefix=prefix, dir=base)


def _settings(examples: int, steps: int) -> settings:
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        derandomize=True,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        print_blob=True,
    )


# ---------------------------------------------------------------- scopes

pool_ids = st.sampled_from(POOL)
_special_scopes = st.sampled_from(
    [frozenset(), frozenset(POOL), frozenset(POOL + NEVER), frozenset(NEVER)]
)
scopes = st.tuples(
    st.one_of(
        _special_scopes,
        pool_ids.map(lambda r: frozenset({r})),
        st.frozensets(st.sampled_from(POOL + NEVER), max_size=4),
    ),
    st.booleans(),
).map(lambda pair: frozenset(r.lower() for r in pair[0]) if pair[1] else pair[0])


def canonical(scope: frozenset[str]) -> frozenset[str]:
    return frozenset(r.upper() for r in scope)


def assert_uris_in_scope(uris: Iterable[str], scope: frozenset[str]) -> None:
    wanted = canonical(scope)
    for uri in uris:
        assert resource_id_of(uri) in wanted, f"out-of-scope result {uri} for scope {wanted}"


def assert_triples_in_scope(triples: Iterable[tuple[str, str, str]], scope: frozenset[str]) -> None:
    wanted = canonical(scope)
    for triple in triples:
        for term in triple:
            if term[:6].lower() == "uko://":
                assert resource_id_of(term) in wanted, f"out-of-scope term {term} in {triple}"


# ---------------------------------------------------------------- shared checks


def assert_text_equal(got: list[TextResult], want: list[TextResult]) -> None:
    assert [r.uko_uri for r in got] == [r.uko_uri for r in want]
    for g, w in zip(got, want, strict=True):
        assert math.isclose(g.score, w.score, abs_tol=SCORE_TOL), (g, w)
        assert g.content == w.content
        assert g.metadata == w.metadata


def assert_exact_top_k(
    results: list[VectorResult], oracle: dict[str, float], top_k: int, scope: frozenset[str]
) -> None:
    """``results`` is a correct top-k of ``oracle`` (uri -> clamped cosine), ties aware."""
    uris = [r.uko_uri for r in results]
    assert_uris_in_scope(uris, scope)
    assert len(set(uris)) == len(uris), "a unit came back twice"
    assert len(results) == min(top_k, len(oracle))
    scores = [r.score for r in results]
    assert scores == sorted(scores, reverse=True)
    for r in results:
        assert r.uko_uri in oracle, f"{r.uko_uri} is not an in-scope unit of the model"
        assert abs(r.score - oracle[r.uko_uri]) <= SCORE_TOL, (r, oracle[r.uko_uri])
    want = sorted(oracle.values(), reverse=True)[:top_k]
    for g, w in zip(scores, want, strict=True):
        assert abs(g - w) <= SCORE_TOL, (scores, want)
    if results:
        kth = scores[-1]
        must = {u for u, s in oracle.items() if s > kth + SCORE_TOL}
        assert must <= set(uris), f"missing strictly better units {sorted(must - set(uris))}"


def assert_graph_equal(got: GraphResult, want: GraphResult, *, exact: bool) -> None:
    if exact:
        assert got.triples == want.triples
    else:
        # LIMIT without a total ORDER BY: any subset of the full answer.
        assert len(got.triples) == len(want.triples)
    assert got.metadata.get("boolean") == want.metadata.get("boolean")


# ================================================================= text


TEXT_WORDS = ("alpha", "beta", "gamma", "parseJson", "json", "HTTPServer", "snake_case", "omega")
TEXT_PATHS = ("a.py", "pkg/b.py", "pkg/c.md", "docs/d.txt")


_LANGS = {"py": "python", "md": "markdown", "txt": "text"}


def text_unit(rid: str, path: str, line: int, words: list[str]) -> IndexUnit:
    """A unit with the chunker's metadata; its first word is the name it defines."""
    metadata = {"path": path, "start_line": str(line), "language": _LANGS[path.rsplit(".")[-1]]}
    if words:
        metadata["symbols"] = words[0]
    text = "\n".join(" ".join(words[i : i + 2]) for i in range(0, len(words), 2))
    return IndexUnit(unit_uri(rid, path, f"L{line}-L{line + 4}"), text, metadata)


# The search controls the text rules draw: both syntaxes, the filters.
text_syntaxes = st.sampled_from(["plain", "tantivy"])
text_paths = st.sampled_from([None, None, "pkg/*", "**/*.py", "docs/", "a.py", "*/b.py"])
text_langs = st.sampled_from([None, None, "python", "markdown", "Text"])


text_units = st.lists(
    st.tuples(
        st.sampled_from(TEXT_PATHS),
        st.integers(1, 3),
        st.lists(st.sampled_from(TEXT_WORDS), max_size=6),
    ),
    min_size=1,
    max_size=5,
)


def _text_queries() -> st.SearchStrategy[str]:
    words = st.sampled_from(TEXT_WORDS)
    rid = st.sampled_from(POOL + NEVER)
    plain = st.one_of(words, st.tuples(words, words).map(" ".join))
    return st.one_of(
        plain,
        plain,
        plain,
        st.tuples(words, words).map(lambda w: f"{w[0]} AND {w[1]}"),
        st.tuples(words, words).map(lambda w: f'"{w[0]} {w[1]}"'),
        words.map(lambda w: f"{w} OR *"),
        words.map(lambda w: f"path:{w}"),
        words.map(lambda w: f"-{w} gamma"),
        words.map(lambda w: f"{w[:3]}*"),
        rid.map(lambda r: f"resource_id:{r} OR *"),
        rid.map(lambda r: f"resource_id:{r} OR alpha"),
        rid.map(lambda r: f"resource_id:{r.lower()}"),
        rid.map(lambda r: f'uko_uri:"{unit_uri(r, "a.py", "L1-L5")}" OR beta'),
        rid.map(lambda r: f"resource_id:[{r} TO 7ZZZZZZZZZZZZZZZZZZZZZZZZZ]"),
        st.sampled_from(
            [
                "*",
                "content:*",
                "resource_id:*",
                "uko_uri:*",
                "body:alpha",
                "metadata:alpha",
                "alpha^5 beta",
                "alpha~1",
                "NOT alpha",
                "(",
                '"',
                "alpha:",
                "path:pkg AND json",
                "content:json OR path:docs",
                "lang:python AND alpha",
                "symbol:alpha OR beta",
                "symbol_exact:alpha",
                "path_raw:a.py",
                "parseJson(",
                "snake_case() -> HTTPServer.get(k,d)",
                "Where is parse_json defined? (json, omega)",
                "!?()[]{}",
            ]
        ),
    )


text_queries = _text_queries()


class _TwoHandleMachine(RuleBasedStateMachine):
    """One backend directory, two handles on it, oracles cached per scope.

    Subclasses give ``_open`` (a handle on ``self.path``) and ``_new_oracle``;
    rules that delete a whole resource or reopen the handles are shared.
    """

    prefix = "acms-sm-"
    dirname = "index"

    def __init__(self) -> None:
        super().__init__()
        self.tmp = scratch_dir(self.prefix)
        self.path = Path(self.tmp) / self.dirname
        self.handles = [self._open(), self._open()]
        self.model: dict[str, Any] = {}
        self.version = 0
        self.oracles: dict[frozenset[str], Any] = {}

    def _open(self) -> Any:
        raise NotImplementedError

    def teardown(self) -> None:
        for h in self.handles:
            h.close()
        self._drop_oracles()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _drop_oracles(self) -> None:
        for o in self.oracles.values():
            o.close()
        self.oracles.clear()

    def _changed(self) -> None:
        self.version += 1
        self._drop_oracles()

    @rule(rid=pool_ids, handle=st.integers(0, 1))
    def delete_resource(self, rid: str, handle: int) -> None:
        self.handles[handle].delete(rid)
        self.model.pop(rid, None)
        self._changed()

    @rule()
    def reopen(self) -> None:
        for h in self.handles:
            h.close()
        self.handles = [self._open(), self._open()]


class TextScopeMachine(_TwoHandleMachine):
    """TantivyTextBackend on disk: two handles on one directory, reopened at will.

    The oracle of a scope replays the writes of only the in-scope resources
    on per-resource plain Tantivy indexes and merges their answers.
    """

    prefix, dirname = "acms-sm-text-", "text"
    model: dict[str, dict[str, IndexUnit]]

    def __init__(self) -> None:
        super().__init__()
        self.writes: dict[str, list[tuple[str, Any, Any]]] = {}

    def _open(self) -> TantivyTextBackend:
        return TantivyTextBackend(self.path)

    @rule(rid=pool_ids, handle=st.integers(0, 1))
    def delete_resource(self, rid: str, handle: int) -> None:
        self.writes.setdefault(rid, []).append(("delete", None, None))
        super().delete_resource(rid, handle)

    @initialize(data=st.lists(text_units, min_size=4, max_size=4))
    def populate(self, data: list[list[Any]]) -> None:
        for rid, units in zip(POOL, data, strict=False):
            self.upsert(rid, units, 0, [])

    @rule(
        rid=pool_ids,
        units=text_units,
        handle=st.integers(0, 1),
        drop=st.lists(st.integers(0, 20), max_size=3),
    )
    def upsert(self, rid: str, units: list[Any], handle: int, drop: list[int]) -> None:
        built = [text_unit(rid, *u) for u in units]
        existing = sorted(self.model.get(rid, {}))
        delete_uris = {existing[i % len(existing)] for i in drop} if existing else set()
        self.handles[handle].upsert(rid, built, delete_uris=delete_uris)
        self.writes.setdefault(rid, []).append(("upsert", built, delete_uris))
        units_of = self.model.setdefault(rid, {})
        for uri in delete_uris:
            units_of.pop(uri, None)
        for u in built:
            units_of[u.uko_uri] = u
        self._changed()

    @rule(rid=pool_ids, other=pool_ids, units=text_units)
    def upsert_foreign_unit_changes_nothing(self, rid: str, other: str, units: list[Any]) -> None:
        if rid == other:
            return
        built = [text_unit(rid, *u) for u in units] + [text_unit(other, "x.py", 1, ["alpha"])]
        with pytest.raises(ValueError):
            self.handles[0].upsert(rid, built)

    @rule(rid=pool_ids, picks=st.lists(st.integers(0, 20), min_size=1, max_size=3))
    def delete_units(self, rid: str, picks: list[int]) -> None:
        existing = sorted(self.model.get(rid, {}))
        if not existing:
            return
        doomed = {existing[i % len(existing)] for i in picks}
        self.handles[1].delete(rid, doomed)
        self.writes.setdefault(rid, []).append(("delete", doomed, None))
        for uri in doomed:
            del self.model[rid][uri]
        self._changed()

    def _oracle(self, scope: frozenset[str]) -> ShardOracle:
        key = canonical(scope)
        oracle = self.oracles.get(key)
        if oracle is None:
            oracle = ShardOracle()
            for rid in sorted(key):
                for kind, first, second in self.writes.get(rid, []):
                    if kind == "upsert":
                        oracle.upsert(rid, first, delete_uris=second)
                    else:
                        oracle.delete(rid, first)
            self.oracles[key] = oracle
        return oracle

    @rule(
        scope=scopes,
        query=text_queries,
        limit=st.integers(1, 12),
        handle=st.integers(0, 1),
        syntax=text_syntaxes,
        path=text_paths,
        lang=text_langs,
    )
    def search(
        self,
        scope: frozenset[str],
        query: str,
        limit: int,
        handle: int,
        syntax: str,
        path: str | None,
        lang: str | None,
    ) -> None:
        oracle = self._oracle(scope)
        options = {"syntax": syntax, "path": path, "lang": lang}
        try:
            want = oracle.search(query, scope=canonical(scope), max_results=limit, **options)
        except QueryError:
            assert syntax == "tantivy", query  # the plain syntax refuses nothing
            with pytest.raises(QueryError):
                self.handles[handle].search(query, scope=scope, max_results=limit, **options)
            return
        got = self.handles[handle].search(query, scope=scope, max_results=limit, **options)
        assert_uris_in_scope((r.uko_uri for r in got), scope)
        assert_text_equal(got, want)

    @rule(handle=st.integers(0, 1))
    def listing_matches_model(self, handle: int) -> None:
        h = self.handles[handle]
        assert h.resource_ids() == {r for r, units in self.model.items() if units}
        for rid in POOL:
            assert h.unit_uris(rid) == set(self.model.get(rid, {}))


# ================================================================= vectors


DIM = 6
small_vectors = st.lists(st.integers(-2, 2), min_size=DIM, max_size=DIM).filter(any)
vector_units = st.lists(
    st.tuples(st.sampled_from(TEXT_PATHS), st.integers(1, 3), small_vectors),
    min_size=1,
    max_size=5,
)


def unit_vector(values: list[int]) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64)
    return v / np.linalg.norm(v)


class VectorScopeMachine(_TwoHandleMachine):
    """FaissVectorBackend on disk: two handles on one directory, reopened at will.

    Small integer embeddings make exact ties common, so the top-k check is
    tie aware: equal score multisets, and every strictly better unit present.
    """

    prefix, dirname = "acms-sm-vec-", "vectors"
    model: dict[str, dict[str, np.ndarray]]

    def _open(self) -> FaissVectorBackend:
        return FaissVectorBackend(self.path, dimension=DIM)

    @initialize(data=st.lists(vector_units, min_size=4, max_size=4))
    def populate(self, data: list[list[Any]]) -> None:
        for rid, units in zip(POOL, data, strict=False):
            self.upsert(rid, units, 0, [])

    @rule(
        rid=pool_ids,
        units=vector_units,
        handle=st.integers(0, 1),
        drop=st.lists(st.integers(0, 20), max_size=3),
    )
    def upsert(self, rid: str, units: list[Any], handle: int, drop: list[int]) -> None:
        built = [
            IndexUnit(unit_uri(rid, path, f"L{line}-L{line}"), f"{path}:{line}", {"path": path})
            for path, line, _ in units
        ]
        matrix = np.asarray([v for _, _, v in units], dtype=np.float32)
        existing = sorted(self.model.get(rid, {}))
        delete_uris = {existing[i % len(existing)] for i in drop} if existing else set()
        self.handles[handle].upsert(rid, built, matrix, delete_uris=delete_uris)
        rows = self.model.setdefault(rid, {})
        for uri in delete_uris:
            rows.pop(uri, None)
        for u, (_, _, v) in zip(built, units, strict=True):
            rows[u.uko_uri] = unit_vector(v)  # the last duplicate wins

    @rule(rid=pool_ids, other=pool_ids)
    def upsert_foreign_unit_changes_nothing(self, rid: str, other: str) -> None:
        if rid == other:
            return
        units = [IndexUnit(unit_uri(other, "x.py", "L1-L1"), "x")]
        with pytest.raises(ValueError):
            self.handles[0].upsert(rid, units, np.ones((1, DIM), dtype=np.float32))

    @rule(rid=pool_ids, picks=st.lists(st.integers(0, 20), min_size=1, max_size=3))
    def delete_units(self, rid: str, picks: list[int]) -> None:
        existing = sorted(self.model.get(rid, {}))
        if not existing:
            return
        doomed = {existing[i % len(existing)] for i in picks}
        self.handles[1].delete(rid, doomed)
        for uri in doomed:
            del self.model[rid][uri]

    @rule(
        scope=scopes,
        query=small_vectors,
        top_k=st.integers(1, 12),
        handle=st.integers(0, 1),
    )
    def search(self, scope: frozenset[str], query: list[int], top_k: int, handle: int) -> None:
        q = unit_vector(query)
        wanted = canonical(scope)
        oracle = {
            uri: max(0.0, min(1.0, float(row @ q)))
            for rid in wanted
            for uri, row in self.model.get(rid, {}).items()
        }
        got = self.handles[handle].similarity_search(
            [float(x) for x in query], scope=scope, top_k=top_k
        )
        assert_exact_top_k(got, oracle, top_k, scope)

    @rule(handle=st.integers(0, 1))
    def listing_matches_model(self, handle: int) -> None:
        h = self.handles[handle]
        assert h.resource_ids() == {r for r, rows in self.model.items() if rows}
        for rid in POOL:
            assert h.unit_uris(rid) == set(self.model.get(rid, {}))


# ================================================================= graph


PREDICATES = tuple(UKO + p for p in ("contains", "inResource", "path", "imports", "name"))
_OBJECTS = st.one_of(
    st.tuples(st.just("file"), st.integers(0, 2)),
    st.tuples(st.just("res"), st.just(0)),
    st.tuples(st.just("mod"), st.sampled_from(["os", "sys"])),
    st.tuples(st.just("lit"), st.sampled_from(["a.py", "x", ""])),
    st.tuples(st.just("int"), st.sampled_from(["010", "3"])),
)
abstract_triples = st.tuples(st.integers(0, 3), st.sampled_from(PREDICATES), _OBJECTS)


def _subject(rid: str, i: int) -> str:
    return resource_uri(rid) if i == 3 else file_uri(rid, f"f{i}.py")


def make_triple(rid: str, spec: tuple[int, str, tuple[str, Any]]) -> WriteTriple:
    s, p, (kind, value) = spec
    obj: str | Literal
    if kind == "file":
        obj = file_uri(rid, f"f{value}.py")
    elif kind == "res":
        obj = resource_uri(rid)
    elif kind == "mod":
        obj = module_uri(value)
    elif kind == "lit":
        obj = Literal(value)
    else:
        obj = Literal(value, XSD_INT)
    return (_subject(rid, s), p, obj)


PFX = f"PREFIX uko: <{UKO}>\n"
# (template, expectation): "refused" must raise QueryError; "exact" must equal
# the oracle; "loose" (LIMIT without a total order) must match its size.
SPARQL_TEMPLATES: tuple[tuple[str, str], ...] = (
    ("SELECT ?s ?p ?o WHERE { ?s ?p ?o }", "exact"),
    ("SELECT * WHERE { ?s ?p ?o }", "exact"),
    ("SELECT ?s ?p ?o WHERE { GRAPH ?g { ?s ?p ?o } }", "refused"),
    ("SELECT ?s ?p ?o WHERE { GRAPH <uko://{R}> { ?s ?p ?o } }", "refused"),
    ("SELECT ?s ?p ?o FROM <uko://{R}> WHERE { ?s ?p ?o }", "refused"),
    ("SELECT ?s ?p ?o FROM NAMED <uko://{R}> WHERE { ?s ?p ?o }", "refused"),
    ("SELECT ?s ?p ?o FROM <file:///etc/passwd> WHERE { ?s ?p ?o }", "refused"),
    ("SELECT ?s ?p ?o WHERE { SERVICE <http://127.0.0.1:9/q> { ?s ?p ?o } }", "refused"),
    ("SELECT ?s ?p ?o WHERE { ?s ?p ?o OPTIONAL { GRAPH ?g { ?s ?p ?x } } }", "refused"),
    ("SELECT ?s ?p ?o WHERE { ?s ?p ?o FILTER EXISTS { GRAPH ?g { ?s ?p ?o } } }", "refused"),
    ("SELECT ?s ?p ?o WHERE { { SELECT ?s ?p ?o WHERE { GRAPH ?g { ?s ?p ?o } } } }", "refused"),
    ("ASK { GRAPH ?g { ?s ?p ?o } }", "refused"),
    ("CONSTRUCT { ?s ?p ?o } WHERE { GRAPH ?g { ?s ?p ?o } }", "refused"),
    ("LOAD <file:///etc/passwd>", "refused"),
    ("INSERT DATA { <uko://{R}/f0.py> <urn:p> <urn:o> }", "refused"),
    ("DROP ALL", "refused"),
    ("SELECT ?s ?p WHERE { ?s ?p ?o }", "refused"),  # not three variables
    ("SELECT ?s ?p ?o WHERE { VALUES ?g { <uko://{R}> } ?s ?p ?o }", "exact"),
    (
        "SELECT ?s ?p ?o WHERE { VALUES ?s { <uko://{R}/f0.py> <uko://{R2}/f1.py> } ?s ?p ?o }",
        "exact",
    ),
    ("SELECT ?s ?p ?o WHERE { { SELECT ?s ?p ?o WHERE { ?s ?p ?o } } }", "exact"),
    (
        "SELECT ?s ?p ?o WHERE { { SELECT ?s (uko:n AS ?p) (COUNT(?x) AS ?o)"
        " WHERE { ?s ?q ?x } GROUP BY ?s } }",
        "exact",
    ),
    ("SELECT ?s ?p ?o WHERE { ?s uko:imports+ ?o BIND(uko:imports AS ?p) }", "exact"),
    ("SELECT ?s ?p ?o WHERE { ?s (uko:imports|^uko:imports)* ?o BIND(uko:x AS ?p) }", "exact"),
    ("SELECT ?s ?p ?o WHERE { ?s (uko:contains/uko:imports)+ ?o BIND(uko:y AS ?p) }", "exact"),
    (
        "SELECT ?s ?p ?o WHERE { VALUES ?s { <uko://{R}/f0.py> }"
        " ?s (uko:imports|^uko:contains)* ?o BIND(uko:z AS ?p) }",
        "exact",
    ),
    ("SELECT ?s ?p ?o WHERE { ?s !(uko:path|uko:name) ?o BIND(uko:neg AS ?p) }", "exact"),
    ("SELECT ?s ?p ?o WHERE { ?s ?p ?o FILTER(STRSTARTS(STR(?s), 'uko://{R}')) }", "exact"),
    ("SELECT ?s ?p ?o WHERE { ?s ?p ?o FILTER(?s = <uko://{R}/f1.py>) }", "exact"),
    ("SELECT ?s ?p ?o WHERE { ?s ?p ?o MINUS { ?s uko:path ?x } }", "exact"),
    ("SELECT ?s ?p ?o WHERE { ?s ?p ?o } ORDER BY ?s ?p ?o LIMIT 3", "exact"),
    ("SELECT ?s ?p ?o WHERE { ?s ?p ?o } ORDER BY DESC(?o) ?s ?p OFFSET 1 LIMIT 4", "exact"),
    ("SELECT ?s ?p ?o WHERE { ?s ?p ?o } LIMIT 2", "loose"),
    (
        "SELECT ?s ?p ?o WHERE { BIND(<uko://{R}/leak> AS ?s) BIND(uko:p AS ?p) BIND(1 AS ?o) }",
        "exact",
    ),
    ("SELECT ?s ?p ?o WHERE { BIND(<uko://{r}/f0.py> AS ?s) ?s ?p ?o }", "exact"),
    (
        "SELECT ?s ?p ?o WHERE { ?a uko:imports ?b"
        " BIND(IRI(CONCAT('uko://{R}/', STR(?b))) AS ?s) BIND(uko:c AS ?p) BIND(?a AS ?o) }",
        "exact",
    ),
    ("CONSTRUCT { ?s ?p ?o } WHERE { ?s ?p ?o }", "exact"),
    ("CONSTRUCT WHERE { ?s uko:imports ?o }", "exact"),
    ("CONSTRUCT { <uko://{R}/x> uko:sees ?o } WHERE { ?s uko:path ?o }", "exact"),
    ("DESCRIBE <uko://{R}/f0.py>", "exact"),
    ("DESCRIBE ?s WHERE { ?s uko:path ?o }", "exact"),
    ("ASK { <uko://{R}/f0.py> ?p ?o }", "exact"),
    ("ASK { ?s uko:imports ?o }", "exact"),
)

sparql_queries = st.tuples(
    st.sampled_from(SPARQL_TEMPLATES), st.sampled_from(POOL + NEVER), pool_ids
).map(
    lambda t: (
        PFX + t[0][0].replace("{R}", t[1]).replace("{R2}", t[2]).replace("{r}", t[1].lower()),
        t[0][1],
    )
)


class GraphScopeMachine(_TwoHandleMachine):
    """RdflibGraphBackend on disk: two handles on one directory, reopened at will."""

    prefix, dirname = "acms-sm-graph-", "graph"
    model: dict[str, set[WriteTriple]]

    def _open(self) -> RdflibGraphBackend:
        return RdflibGraphBackend(self.path)

    @initialize(
        data=st.lists(st.lists(abstract_triples, min_size=2, max_size=10), min_size=4, max_size=4)
    )
    def populate(self, data: list[list[Any]]) -> None:
        for rid, specs in zip(POOL, data, strict=False):
            self.upsert(rid, specs, [], [], 0)

    @rule(
        rid=pool_ids,
        specs=st.lists(abstract_triples, max_size=8),
        delete_subjects=st.lists(st.integers(0, 3), max_size=2),
        delete_specs=st.lists(abstract_triples, max_size=2),
        handle=st.integers(0, 1),
    )
    def upsert(
        self,
        rid: str,
        specs: list[Any],
        delete_subjects: list[int],
        delete_specs: list[Any],
        handle: int,
    ) -> None:
        triples = [make_triple(rid, s) for s in specs]
        subjects = {_subject(rid, i) for i in delete_subjects}
        drop = [make_triple(rid, s) for s in delete_specs]
        # Mostly delete triples that exist, so the exact-triple path is exercised.
        drop += sorted(self.model.get(rid, set()), key=repr)[: len(delete_specs)]
        self.handles[handle].upsert(rid, triples, delete_subjects=subjects, delete_triples=drop)
        graph = self.model.setdefault(rid, set())
        graph.difference_update({t for t in graph if t[0] in subjects})
        graph.difference_update(drop)
        graph.update(triples)
        self._changed()

    @rule(rid=pool_ids, other=pool_ids)
    def upsert_foreign_triple_changes_nothing(self, rid: str, other: str) -> None:
        if rid == other:
            return
        bad = [
            make_triple(rid, (0, UKO + "path", ("lit", "x"))),
            (file_uri(rid, "f0.py"), UKO + "imports", file_uri(other, "f0.py")),
        ]
        with pytest.raises(ValueError):
            self.handles[0].upsert(rid, bad)

    @rule(rid=pool_ids, subjects=st.lists(st.integers(0, 3), min_size=1, max_size=2))
    def delete_subjects(self, rid: str, subjects: list[int]) -> None:
        doomed = {_subject(rid, i) for i in subjects}
        self.handles[1].delete(rid, doomed)
        graph = self.model.get(rid, set())
        graph.difference_update({t for t in graph if t[0] in doomed})
        self._changed()

    def _oracle(self, scope: frozenset[str]) -> RdflibGraphBackend:
        key = canonical(scope)
        oracle = self.oracles.get(key)
        if oracle is None:
            oracle = RdflibGraphBackend()
            for rid in sorted(key):
                if self.model.get(rid):
                    oracle.upsert(rid, sorted(self.model[rid], key=repr))
            self.oracles[key] = oracle
        return oracle

    @rule(scope=scopes, query=sparql_queries, handle=st.integers(0, 1))
    def sparql(self, scope: frozenset[str], query: tuple[str, str], handle: int) -> None:
        text, expect = query
        backend = self.handles[handle]
        if expect == "refused":
            with pytest.raises(QueryError):
                backend.sparql_query(text, scope=scope)
            return
        want = self._oracle(scope).sparql_query(text, scope=canonical(scope))
        got = backend.sparql_query(text, scope=scope)
        assert_triples_in_scope(got.triples, scope)
        assert_graph_equal(got, want, exact=expect == "exact")
        if expect == "loose":
            full = self._oracle(scope).sparql_query(
                text.replace("LIMIT 2", ""), scope=canonical(scope)
            )
            assert set(got.triples) <= set(full.triples)

    @rule(
        scope=scopes,
        rid=st.sampled_from(POOL + NEVER),
        start=st.integers(0, 3),
        depth=st.integers(0, 3),
        handle=st.integers(0, 1),
        direction=st.sampled_from(["out", "in", "both"]),
        predicates=st.none() | st.frozensets(st.sampled_from(PREDICATES), min_size=1, max_size=3),
    )
    def walk(
        self,
        scope: frozenset[str],
        rid: str,
        start: int,
        depth: int,
        handle: int,
        direction: str,
        predicates: frozenset[str] | None,
    ) -> None:
        backend = self.handles[handle]
        oracle = self._oracle(scope)
        subject = _subject(rid, start)
        got = backend.get_triples(subject, scope=scope)
        assert_triples_in_scope(got.triples, scope)
        assert got.triples == oracle.get_triples(subject, scope=canonical(scope)).triples
        got = backend.traverse(
            subject, depth=depth, scope=scope, direction=direction, predicates=predicates
        )
        assert_triples_in_scope(got.triples, scope)
        want = oracle.traverse(
            subject,
            depth=depth,
            scope=canonical(scope),
            direction=direction,
            predicates=predicates,
        )
        assert got.triples == want.triples

    @rule(handle=st.integers(0, 1))
    def listing_matches_model(self, handle: int) -> None:
        h = self.handles[handle]
        assert h.resource_ids() == {r for r, g in self.model.items() if g}
        for rid in POOL:
            assert h.subjects(rid) == {t[0] for t in self.model.get(rid, set())}


# ================================================================= indexer + ScopedView


IX_DIM = 32
IX_PATHS = ("a.py", "pkg/b.py", "pkg/c.py", "notes.md", "docs/d.txt")
IX_WORDS = ("alpha", "beta", "gamma", "parseJson", "delta", "omega")
IX_QUERIES = (
    "alpha",
    "beta gamma",
    "parse json",
    "def",
    "import os",
    "path:pkg",
    "resource_id:{R} OR *",
    "*",
)
IX_SPARQL = (
    "SELECT ?s ?p ?o WHERE { ?s ?p ?o }",
    "SELECT ?s ?p ?o WHERE { ?s uko:defines ?x . ?x uko:name ?o BIND(uko:defines AS ?p) }",
    "SELECT ?s ?p ?o WHERE { ?s (uko:contains|uko:hasChunk)+ ?o BIND(uko:r AS ?p) }",
    "SELECT ?s ?p ?o WHERE { VALUES ?g { <uko://{R}> } ?s uko:inResource ?g BIND(?g AS ?o)"
    " BIND(uko:inResource AS ?p) }",
    "CONSTRUCT { ?s ?p ?o } WHERE { ?s ?p ?o FILTER(ISIRI(?o)) }",
    "SELECT ?s ?p ?o WHERE { GRAPH ?g { ?s ?p ?o } }",
)


def file_body(path: str, words: list[str], funcs: int) -> str:
    text = " ".join(words)
    if path.endswith(".py"):
        lines = ["import os", f'"""{text}"""']
        lines += [f"def {w}_{i}():\n    return '{text}'\n" for i, w in enumerate(words[:funcs])]
        return "\n".join(lines) + "\n"
    return f"# {text}\n\n{text}\n"


class IndexerScopeMachine(RuleBasedStateMachine):
    """The local container's indexer over generated file trees, queried through
    ``ScopedView`` and compared with fresh in-memory indexes fed by replaying
    only the in-scope resources' index runs (each run's tree as it was), so
    text scores carry the same per-resource history of replaced units."""

    def __init__(self) -> None:
        super().__init__()
        from cleveragents.application.container import build_container

        self._build = build_container
        self.tmp = Path(scratch_dir("acms-sm-ix-"))
        self.data = self.tmp / "data"
        self.trees = self.tmp / "trees"
        self.snaps = self.tmp / "snaps"
        self.container = build_container("local", self.data, embedding_dimension=IX_DIM)
        self.indexer = self.container.indexer()
        self.files: dict[str, dict[str, str]] = {}  # live trees
        self.committed: dict[str, dict[str, str]] = {}  # as last indexed
        self.tick = 1_700_000_000_000_000_000
        self.oracles: dict[frozenset[str], Any] = {}
        # Per resource: each index run as (snapshot of its tree, full), or
        # None for a deleted resource.
        self.runs: dict[str, list[tuple[Path, bool] | None]] = {}

    def teardown(self) -> None:
        self._close()
        self._drop_oracles()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _close(self) -> None:
        for backend in (
            self.container.text_backend(),
            self.container.vector_backend(),
            self.container.graph_backend(),
            self.indexer.catalog,
        ):
            backend.close()

    def _drop_oracles(self) -> None:
        for _, close in self.oracles.values():
            close()
        self.oracles.clear()

    def _write(self, rid: str, path: str, body: str) -> None:
        target = self.trees / rid / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(body, encoding="utf-8")
        # Distinct mtimes: same-size rewrites within one timestamp tick are
        # covered by their own test below.
        self.tick += 1_000_000
        os.utime(target, ns=(self.tick, self.tick))
        self.files.setdefault(rid, {})[path] = body

    @initialize(
        trees=st.lists(
            st.lists(
                st.tuples(
                    st.sampled_from(IX_PATHS),
                    st.lists(st.sampled_from(IX_WORDS), min_size=1, max_size=5),
                    st.integers(0, 3),
                ),
                min_size=1,
                max_size=4,
            ),
            min_size=4,
            max_size=4,
        )
    )
    def populate(self, trees: list[list[Any]]) -> None:
        for rid, files in zip(POOL, trees, strict=False):
            for path, words, funcs in files:
                self._write(rid, path, file_body(path, words, funcs))
            self.index(rid, False)

    @rule(
        rid=pool_ids,
        path=st.sampled_from(IX_PATHS),
        words=st.lists(st.sampled_from(IX_WORDS), min_size=1, max_size=5),
        funcs=st.integers(0, 3),
    )
    def write_file(self, rid: str, path: str, words: list[str], funcs: int) -> None:
        self._write(rid, path, file_body(path, words, funcs))

    @rule(rid=pool_ids, pick=st.integers(0, 10))
    def delete_file(self, rid: str, pick: int) -> None:
        present = sorted(self.files.get(rid, {}))
        if not present:
            return
        path = present[pick % len(present)]
        (self.trees / rid / path).unlink()
        del self.files[rid][path]

    @rule(rid=pool_ids, full=st.booleans())
    def index(self, rid: str, full: bool) -> None:
        root = self.trees / rid
        root.mkdir(parents=True, exist_ok=True)
        self.indexer.index_resource(rid, root, "directory", full=full)
        self.committed[rid] = dict(self.files.get(rid, {}))
        runs = self.runs.setdefault(rid, [])
        snap = self.snaps / rid / str(len(runs))
        shutil.copytree(root, snap)  # keeps mtimes: the replay skips what this run skipped
        runs.append((snap, full))
        self._drop_oracles()

    @rule(rid=pool_ids)
    def delete_resource(self, rid: str) -> None:
        self.indexer.delete_resource(rid)
        self.committed.pop(rid, None)
        self.runs.setdefault(rid, []).append(None)
        self._drop_oracles()

    @rule()
    def reopen(self) -> None:
        self._close()
        self.container = self._build("local", self.data, embedding_dimension=IX_DIM)
        self.indexer = self.container.indexer()

    def _oracle(self, scope: frozenset[str]) -> Any:
        from cleveragents.application.services.indexer import Indexer
        from cleveragents.infrastructure.acms.hashing_embedder import HashingEmbedder
        from cleveragents.infrastructure.acms.index_store import ManagedIndexStore
        from cleveragents.infrastructure.acms.sqlite_catalog import SqliteCatalog

        key = canonical(scope)
        entry = self.oracles.get(key)
        if entry is None:
            text = TantivyTextBackend()
            vector = FaissVectorBackend(None, dimension=IX_DIM)
            graph = RdflibGraphBackend()
            catalog = SqliteCatalog(":memory:")
            store = ManagedIndexStore.over(text, vector, graph, catalog)
            ix = Indexer(store, HashingEmbedder(IX_DIM), code_parser=TreeSitterCodeParser())
            for rid in sorted(key):
                for run in self.runs.get(rid, []):
                    if run is None:
                        ix.delete_resource(rid)
                    else:
                        ix.index_resource(rid, run[0], "directory", full=run[1])

            def close() -> None:
                for b in (text, vector, graph, catalog):
                    b.close()

            entry = (ScopedView(text, vector, graph, key), close)
            self.oracles[key] = entry
        return entry[0]

    def _view(self, scope: frozenset[str]) -> ScopedView:
        c = self.container
        return ScopedView(c.text_backend(), c.vector_backend(), c.graph_backend(), scope)

    @rule(
        scope=scopes,
        query=st.sampled_from(IX_QUERIES),
        other=st.sampled_from(POOL + NEVER),
        limit=st.integers(1, 10),
        syntax=text_syntaxes,
        path=st.sampled_from([None, "**/*.py", "pkg/"]),
    )
    def search(
        self,
        scope: frozenset[str],
        query: str,
        other: str,
        limit: int,
        syntax: str,
        path: str | None,
    ) -> None:
        query = query.replace("{R}", other)
        options = {"syntax": syntax, "path": path}
        try:
            want = self._oracle(scope).search(query, max_results=limit, **options)
        except QueryError:  # refused queries are refused through the view too
            assert syntax == "tantivy", query
            with pytest.raises(QueryError):
                self._view(scope).search(query, max_results=limit, **options)
            return
        got = self._view(scope).search(query, max_results=limit, **options)
        assert_uris_in_scope((r.uko_uri for r in got), scope)
        assert_text_equal(got, want)

    @rule(
        scope=scopes,
        words=st.lists(st.sampled_from(IX_WORDS), min_size=1, max_size=3),
        top_k=st.integers(1, 10),
    )
    def similar(self, scope: frozenset[str], words: list[str], top_k: int) -> None:
        embedding = self.container.embedder().embed([" ".join(words)])[0]
        q = embedding.astype(np.float64)
        q /= np.linalg.norm(q)
        oracle_vec: FaissVectorBackend = self._oracle(scope)._vector
        oracle: dict[str, float] = {}
        for rid in canonical(scope):
            for uri in oracle_vec.unit_uris(rid):
                oracle[uri] = math.nan
        if oracle:
            full = oracle_vec.similarity_search(
                q.tolist(), scope=canonical(scope), top_k=len(oracle)
            )
            oracle = {r.uko_uri: r.score for r in full}
        got = self._view(scope).similarity_search(q.tolist(), top_k=top_k)
        assert_exact_top_k(got, oracle, top_k, scope)

    @rule(scope=scopes, query=st.sampled_from(IX_SPARQL), other=st.sampled_from(POOL + NEVER))
    def sparql(self, scope: frozenset[str], query: str, other: str) -> None:
        text = PFX + query.replace("{R}", other)
        if "GRAPH" in query:
            with pytest.raises(QueryError):
                self._view(scope).sparql_query(text)
            return
        want = self._oracle(scope).sparql_query(text)
        got = self._view(scope).sparql_query(text)
        assert_triples_in_scope(got.triples, scope)
        assert got.triples == want.triples

    @precondition(lambda self: bool(self.committed))
    @rule(pick=st.integers(0, 10))
    def catalog_and_indexes_agree(self, pick: int) -> None:
        rids = sorted(self.committed)
        rid = rids[pick % len(rids)]
        c = self.container
        records = self.indexer.catalog.records(rid)
        expected = {u for rec in records.values() for u in rec.unit_uris}
        assert c.text_backend().unit_uris(rid) == expected
        assert c.vector_backend().unit_uris(rid) == expected
        assert set(records) == set(self.committed[rid])


# ================================================================= the tests

# Example counts (derandomized, so CI runs the same 720 examples every time):
# measured on a 2-core machine with tmpfs at about 20 s (text), 14 s (vector),
# 16 s (graph) and 18 s (indexer), about 70 s together.
TestTextScope = TextScopeMachine.TestCase
TestTextScope.settings = _settings(examples=150, steps=30)
TestVectorScope = VectorScopeMachine.TestCase
TestVectorScope.settings = _settings(examples=400, steps=40)
TestGraphScope = GraphScopeMachine.TestCase
TestGraphScope.settings = _settings(examples=120, steps=30)
TestIndexerScope = IndexerScopeMachine.TestCase
TestIndexerScope.settings = _settings(examples=50, steps=25)


# ================================================================= found bugs


@pytest.mark.parametrize(
    "query", ["resource_id:{A} OR *", "alpha OR resource_id:[0 TO 8]", "alpha OR *"]
)
def test_match_all_and_internal_fields_are_refused(query: str) -> None:
    a, b = POOL[:2]
    query = query.replace("{A}", a)
    a1, a2 = text_unit(a, "a.py", 1, ["alpha"]), text_unit(a, "a.py", 2, ["beta"])
    b1 = text_unit(b, "b.py", 1, ["gamma"])
    backend, oracle = TantivyTextBackend(), TantivyTextBackend()
    try:
        backend.upsert(a, [a1, a2])
        backend.upsert(b, [b1])
        backend.delete(a, [a2.uko_uri])  # a deleted document: the scoped search uses a view
        oracle.upsert(a, [a1])
        oracle.upsert(b, [b1])
        scope = frozenset({a, b})
        # Tantivy scored such clauses by segment layout; they are refused now.
        for index in (backend, oracle):
            with pytest.raises(QueryError, match=r"bare|cannot be searched"):
                index.search(query, scope=scope, syntax="tantivy")
    finally:
        backend.close()
        oracle.close()
