"""Working in-memory reference implementations of the write-side index ports.

Brute force and small, for tests and the planner's unit tests (haystack's
``InMemoryDocumentStore`` is the model): they pass the same contract suite
(:mod:`cleveragents.testing.backend_contracts`) as Tantivy, FAISS and rdflib.

- :class:`MemoryTextIndex`: a code-aware tokenizer (identifier parts,
  lower case) and BM25 computed over the in-scope documents only, scored
  ``bm25 / (bm25 + 8)`` as the Tantivy adapter does; ties by URI.  The
  plain syntax (default) reads any string as its words; a unit that defines
  a whole identifier of the query (``metadata["symbols"]``) gets a bonus, so
  definitions rank above uses; ``path``/``lang`` filters restrict matches
  without changing the statistics (as Tantivy's zero-scored filter clauses).
  ``syntax="tantivy"`` is a subset here: words, phrases read as words and
  ``OR``; any ``field:`` is refused.  It stages writes as Tantivy does
  (``StagedWrites``: invisible until committed, dropped by a failed block),
  so the store's fast tests run the same staged sessions.
- :class:`MemoryVectorIndex`: exact cosine over L2-normalised rows (numpy).
- :class:`MemoryGraphIndex`: one rdflib ``Graph`` per resource; SPARQL through
  the same sandbox (:mod:`.sparql_guard`) over the union of the in-scope graphs,
  evaluated in-process (no time limit: a reference, not a server).
- :class:`MemoryCatalog`: the catalog port as dicts.

The seed's ``InMemory*Backend`` stubs (empty results) are a different thing
and stay as the seed describes them.
"""

from __future__ import annotations

import contextlib
import math
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np
import numpy.typing as npt
from rdflib import BNode, Graph, URIRef, Variable
from rdflib import Literal as RdfLiteral
from rdflib.plugins.sparql.evaluate import evalQuery
from rdflib.term import Node

from cleveragents.domain.models.acms.backends import (
    MAX_WALK_TRIPLES,
    GraphResult,
    IndexUnit,
    Literal,
    TextResult,
    VectorResult,
    WriteTriple,
    validate_depth,
    validate_embedding,
    validate_non_empty,
    validate_positive_int,
    validate_traversal,
    walk_limit_error,
)
from cleveragents.domain.models.acms.errors import IndexUnavailableError, QueryError
from cleveragents.domain.models.acms.indexing import FileRecord
from cleveragents.domain.models.acms.text_query import (
    MAX_PLAIN_TERMS,
    match_lines,
    path_matches,
    text_options,
)
from cleveragents.domain.models.acms.uko import UKO, resource_id_of
from cleveragents.domain.models.acms.ulids import canonical_ulid, validate_scope
from cleveragents.infrastructure.acms.sparql_guard import check_query

__all__ = ["MemoryCatalog", "MemoryGraphIndex", "MemoryTextIndex", "MemoryVectorIndex"]

_K1, _B = 1.2, 0.75
_WORD = re.compile(r"[A-Za-z0-9_]+")
_PART = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_FIELD = re.compile(r"(?<![\w\"])[A-Za-z_][\w.]*:")
_EXACT_BONUS = 4.0  # times the IDF of "defines this name" (Tantivy's W_EXACT)


def tokens(text: str) -> list[str]:
    """Lower-case words and their identifier parts (``parseJsonV2`` -> parse, json, v, 2)."""
    out: list[str] = []
    for word in _WORD.findall(text):
        lower = word.lower()
        out.append(lower)
        parts = [p.lower() for chunk in word.split("_") for p in _PART.findall(chunk)]
        out.extend(p for p in parts if p != lower)
    return out


def _check_units(rid: str, units: Sequence[IndexUnit], delete_uris: Iterable[str]) -> list[str]:
    for unit in units:
        if not isinstance(unit, IndexUnit):
            raise TypeError("units must be IndexUnit values")
        if unit.resource_id != rid:
            raise ValueError(f"unit {unit.uko_uri[:80]!r} is not of resource {rid}")
    doomed = list(delete_uris)
    for uri in doomed:
        if resource_id_of(uri) != rid:
            raise ValueError(f"URI {uri[:80]!r} is not of resource {rid}")
    return doomed


class _Closable:
    def __init__(self) -> None:
        self._closed = False
        self._lock = threading.RLock()

    def _check_open(self) -> None:
        if self._closed:
            raise IndexUnavailableError("the index is closed")

    def close(self) -> None:
        """Forget everything; further calls fail."""
        self._closed = True


class MemoryTextIndex(_Closable):
    """BM25 over in-scope documents, brute force (see the module doc)."""

    def __init__(self) -> None:
        super().__init__()
        self._docs: dict[str, dict[str, tuple[IndexUnit, Counter[str], int]]] = {}
        # Per resource in a staged block: its writes since the last commit,
        # applied to ``_docs`` in order by commit_staged (``StagedWrites``).
        self._staged: dict[str, list[Callable[[], None]]] = {}

    @contextlib.contextmanager
    def staged_writes(self, resource_id: str) -> Iterator[None]:
        """Hold the resource's writes until :meth:`commit_staged` (see
        ``StagedWrites``): readers see its last commit; leaving the block
        normally commits the rest, an exception drops it.

        Raises:
            ValueError: an invalid ULID, or the resource's writes are
                already staged.
        """
        rid = canonical_ulid(resource_id)
        self._check_open()
        with self._lock:
            if rid in self._staged:
                raise ValueError(f"the writes of {rid} are already grouped")
            self._staged[rid] = []
        try:
            yield
            self.commit_staged(rid)
        finally:
            with self._lock:
                self._staged.pop(rid, None)

    def commit_staged(self, resource_id: str) -> None:
        """Apply the resource's staged writes (none: nothing happens).

        Raises:
            ValueError: an invalid ULID.
            IndexUnavailableError: the index was closed (the writes are lost).
        """
        rid = canonical_ulid(resource_id)
        with self._lock:
            pending = self._staged.get(rid)
            if not pending:
                return
            self._check_open()
            self._staged[rid] = []
            for change in pending:
                change()

    def _change(self, rid: str, change: Callable[[], None]) -> None:
        """Apply ``change`` now, or stage it in the resource's staged block."""
        with self._lock:
            pending = self._staged.get(rid)
            if pending is None:
                change()
            else:
                pending.append(change)

    def search(
        self,
        query: str,
        *,
        scope: frozenset[str],
        max_results: int = 20,
        syntax: str = "plain",
        path: str | None = None,
        lang: str | None = None,
    ) -> list[TextResult]:
        """BM25 search restricted to ``scope`` (statistics from in-scope documents only).

        Raises:
            TypeError / ValueError: bad arguments or options.  QueryError
            (tantivy syntax only): unbalanced quotes or parentheses, a field
            (``name:``) or a bare ``*``.
        """
        validate_non_empty(query, "query")
        validate_positive_int(max_results, "max_results")
        canonical = validate_scope(scope)
        options = text_options(syntax, path, lang)
        if options.syntax == "tantivy":
            terms = self._parse(query)
        else:
            terms = set(list(dict.fromkeys(tokens(query)))[:MAX_PLAIN_TERMS])
        self._check_open()
        with self._lock:
            docs = [d for rid in sorted(canonical) for d in self._docs.get(rid, {}).values()]
        if not docs or not terms:
            return []
        avg = sum(n for _, _, n in docs) / len(docs)
        df = Counter(t for _, counts, _ in docs for t in set(counts) if t in terms)
        names = {w.lower() for w in _WORD.findall(query)} if options.syntax == "plain" else set()
        defined = [set(u.metadata.get("symbols", "").lower().split()) & names for u, _, _ in docs]
        defines = Counter(n for found in defined for n in found)
        scored: list[tuple[float, str, IndexUnit]] = []
        for (unit, counts, length), found in zip(docs, defined, strict=True):
            if options.lang is not None and unit.metadata.get("language", "") != options.lang:
                continue
            if options.path is not None and not path_matches(
                options.path, unit.metadata.get("path", "")
            ):
                continue
            score = 0.0
            for term in terms:
                tf = counts.get(term, 0)
                if not tf:
                    continue
                idf = math.log(1 + (len(docs) - df[term] + 0.5) / (df[term] + 0.5))
                score += idf * tf * (_K1 + 1) / (tf + _K1 * (1 - _B + _B * length / avg))
            if score > 0:
                for name in found:
                    n = defines[name]
                    score += _EXACT_BONUS * math.log(1 + (len(docs) - n + 0.5) / (n + 0.5))
                scored.append((score, unit.uko_uri, unit))
        scored.sort(key=lambda item: (-item[0], item[1]))
        out = []
        for s, uri, unit in scored[:max_results]:
            lines = match_lines(unit.content, unit.metadata.get("start_line"), terms, tokens)
            metadata = {**unit.metadata, "match_lines": lines}
            out.append(TextResult(uri, unit.content, s / (s + 8.0), metadata))
        return out

    @staticmethod
    def _parse(query: str) -> set[str]:
        if query.count('"') % 2 or query.count("(") != query.count(")"):
            raise QueryError(f"malformed text query: {query[:80]!r}")
        if _FIELD.search(query):
            raise QueryError("fields cannot be searched in a text query")
        if query.strip() == "*" or re.search(r"(^|\s)\*(\s|$)", query):
            raise QueryError("a bare '*' matches everything and is refused")
        return set(tokens(query)) - {"or", "and", "not"}

    def upsert(
        self, resource_id: str, units: Sequence[IndexUnit], *, delete_uris: Iterable[str] = ()
    ) -> None:
        """Delete ``delete_uris`` and add or replace ``units`` in one change."""
        rid = canonical_ulid(resource_id)
        doomed = _check_units(rid, units, delete_uris)
        self._check_open()
        analysed = []
        for unit in units:
            words = tokens(unit.content) + tokens(unit.metadata.get("path", ""))
            analysed.append((unit, Counter(words), max(1, len(words))))

        def change() -> None:
            docs = self._docs.setdefault(rid, {})
            for uri in doomed:
                docs.pop(uri, None)
            for entry in analysed:
                docs[entry[0].uko_uri] = entry
            if not docs:
                del self._docs[rid]

        self._change(rid, change)

    def delete(self, resource_id: str, uris: Iterable[str] | None = None) -> None:
        """Delete the given units of a resource, or all of them."""
        rid = canonical_ulid(resource_id)
        self._check_open()
        doomed = None if uris is None else list(uris)

        def change() -> None:
            if doomed is None:
                self._docs.pop(rid, None)
                return
            docs = self._docs.get(rid, {})
            for uri in doomed:
                docs.pop(uri, None)
            if not docs:
                self._docs.pop(rid, None)

        self._change(rid, change)

    def unit_uris(self, resource_id: str) -> set[str]:
        """URIs of a resource's units."""
        with self._lock:
            return set(self._docs.get(canonical_ulid(resource_id), {}))

    def unit_count(self, resource_id: str) -> int:
        """How many units a resource has."""
        with self._lock:
            return len(self._docs.get(canonical_ulid(resource_id), {}))

    def units(self, resource_id: str) -> Iterator[IndexUnit]:
        """Every unit stored for a resource, in URI order."""
        with self._lock:
            docs = self._docs.get(canonical_ulid(resource_id), {})
            return iter([docs[uri][0] for uri in sorted(docs)])

    def resource_ids(self) -> set[str]:
        """Resources with at least one unit."""
        with self._lock:
            return set(self._docs)


class MemoryVectorIndex(_Closable):
    """Exact cosine similarity with numpy (see the module doc)."""

    def __init__(self, dimension: int) -> None:
        super().__init__()
        self._dimension = validate_positive_int(dimension, "dimension")
        self._rows: dict[str, dict[str, tuple[IndexUnit, npt.NDArray[np.float64]]]] = {}

    @property
    def dimension(self) -> int:
        """Embedding dimension."""
        return self._dimension

    def similarity_search(
        self, embedding: list[float], *, scope: frozenset[str], top_k: int = 20
    ) -> list[VectorResult]:
        """The ``top_k`` in-scope units most similar to ``embedding`` (ties by URI)."""
        values = validate_embedding(embedding, self._dimension)
        validate_positive_int(top_k, "top_k")
        canonical = validate_scope(scope)
        self._check_open()
        q = np.asarray(values, dtype=np.float64)
        norm = float(np.linalg.norm(q))
        if norm == 0.0:
            raise ValueError("the embedding must not be all zeros")
        q /= norm
        with self._lock:
            rows = [r for rid in canonical for r in self._rows.get(rid, {}).values()]
        scored = sorted(
            ((min(1.0, max(0.0, float(row @ q))), unit) for unit, row in rows),
            key=lambda item: (-item[0], item[1].uko_uri),
        )
        return [VectorResult(u.uko_uri, u.content, s, dict(u.metadata)) for s, u in scored[:top_k]]

    def upsert(
        self,
        resource_id: str,
        units: Sequence[IndexUnit],
        embeddings: npt.NDArray[np.float32],
        *,
        delete_uris: Iterable[str] = (),
    ) -> None:
        """Delete ``delete_uris`` and add or replace ``units`` with their rows."""
        rid = canonical_ulid(resource_id)
        doomed = _check_units(rid, units, delete_uris)
        matrix = np.asarray(embeddings, dtype=np.float64)
        if matrix.ndim != 2 or matrix.shape != (len(units), self._dimension):
            raise ValueError(
                f"embeddings must have shape ({len(units)}, {self._dimension}), got {matrix.shape}"
            )
        if not np.all(np.isfinite(matrix)):
            raise ValueError("embeddings must be finite")
        norms = np.linalg.norm(matrix, axis=1)
        if np.any(norms == 0):
            raise ValueError("an embedding row is all zeros")
        self._check_open()
        with self._lock:
            rows = self._rows.setdefault(rid, {})
            for uri in doomed:
                rows.pop(uri, None)
            for unit, row, n in zip(units, matrix, norms, strict=True):
                rows[unit.uko_uri] = (unit, row / n)
            if not rows:
                del self._rows[rid]

    def delete(self, resource_id: str, uris: Iterable[str] | None = None) -> None:
        """Delete the given units of a resource, or all of them."""
        rid = canonical_ulid(resource_id)
        self._check_open()
        with self._lock:
            if uris is None:
                self._rows.pop(rid, None)
                return
            rows = self._rows.get(rid, {})
            for uri in uris:
                rows.pop(uri, None)
            if not rows:
                self._rows.pop(rid, None)

    def unit_uris(self, resource_id: str) -> set[str]:
        """URIs of a resource's units."""
        with self._lock:
            return set(self._rows.get(canonical_ulid(resource_id), {}))

    def unit_count(self, resource_id: str) -> int:
        """How many units a resource has."""
        with self._lock:
            return len(self._rows.get(canonical_ulid(resource_id), {}))

    def resource_ids(self) -> set[str]:
        """Resources with at least one unit."""
        with self._lock:
            return set(self._rows)


_Triple = tuple[str, str, str]


def _node(value: str | Literal) -> Node:
    if isinstance(value, Literal):
        return RdfLiteral(value.value, datatype=URIRef(value.datatype) if value.datatype else None)
    if not isinstance(value, str):
        raise TypeError("a triple object is an IRI str or a Literal")
    return URIRef(value)


def _term(node: Node) -> str:
    return f"_:{node}" if isinstance(node, BNode) else str(node)


def _in_scope(triple: _Triple, scope: frozenset[str]) -> bool:
    for part in triple:
        rid = resource_id_of(part)
        if part.startswith("uko://") and rid is not None and rid not in scope:
            return False
    return True


class MemoryGraphIndex(_Closable):
    """One rdflib ``Graph`` per resource (see the module doc).

    Args:
        max_rows: the most triples a walk may gather after its first hop;
            past it ``traverse`` stops with a :class:`QueryLimitError`, as
            the store's does.
    """

    def __init__(self, *, max_rows: int = MAX_WALK_TRIPLES) -> None:
        super().__init__()
        self._graphs: dict[str, Graph] = {}
        self._max_rows = validate_positive_int(max_rows, "max_rows")

    def _check_triple(self, triple: WriteTriple, rid: str) -> tuple[URIRef, URIRef, Node]:
        if not isinstance(triple, tuple) or len(triple) != 3:
            raise TypeError("a triple is a (subject, predicate, object) tuple")
        s, p, o = triple
        if not isinstance(s, str) or not isinstance(p, str):
            raise TypeError("subject and predicate are IRI strings")
        for part in (s, p, o):
            if isinstance(part, str) and part.startswith("uko://") and resource_id_of(part) != rid:
                raise ValueError(f"IRI {part[:80]!r} is not of resource {rid}")
        return URIRef(s), URIRef(p), _node(o)

    def upsert(
        self,
        resource_id: str,
        triples: Iterable[WriteTriple],
        *,
        delete_subjects: Iterable[str] = (),
        delete_triples: Iterable[WriteTriple] = (),
    ) -> None:
        """Drop ``delete_subjects`` and ``delete_triples``, then add ``triples``, at once."""
        rid = canonical_ulid(resource_id)
        add = [self._check_triple(t, rid) for t in triples]
        drop = [self._check_triple(t, rid) for t in delete_triples]
        doomed = [URIRef(validate_non_empty(s, "subject")) for s in delete_subjects]
        self._check_open()
        with self._lock:
            graph = self._graphs.get(rid)
            if graph is None:
                graph = Graph()
            for s in doomed:
                graph.remove((s, None, None))
            for t in drop:
                graph.remove(t)
            for t in add:
                graph.add(t)
            if len(graph):
                self._graphs[rid] = graph
            else:
                self._graphs.pop(rid, None)

    def delete(self, resource_id: str, subjects: Iterable[str] | None = None) -> None:
        """Remove the triples of ``subjects``, or the whole resource graph."""
        if subjects is None:
            self._check_open()
            with self._lock:
                self._graphs.pop(canonical_ulid(resource_id), None)
            return
        self.upsert(resource_id, [], delete_subjects=subjects)

    def subjects(self, resource_id: str) -> set[str]:
        """Distinct subjects of a resource's graph."""
        with self._lock:
            graph = self._graphs.get(canonical_ulid(resource_id))
            return set() if graph is None else {_term(s) for s in graph.subjects(unique=True)}

    def resource_ids(self) -> set[str]:
        """Resources with a non-empty graph."""
        with self._lock:
            return set(self._graphs)

    def _selected(self, scope: frozenset[str] | None) -> list[Graph]:
        with self._lock:
            if scope is None:
                return [self._graphs[r] for r in sorted(self._graphs)]
            return [self._graphs[r] for r in sorted(scope) if r in self._graphs]

    def sparql_query(self, query: str, *, scope: frozenset[str]) -> GraphResult:
        """Sandboxed SPARQL over the union of the in-scope graphs (see the adapter's rules)."""
        validate_non_empty(query, "query")
        canonical = validate_scope(scope)
        checked = check_query(query, init_ns={"uko": UKO})
        if checked.form == "SELECT" and len(checked.projection) != 3:
            raise QueryError("a SELECT query must project exactly three variables")
        self._check_open()
        union = Graph()
        for graph in self._selected(canonical):
            for t in graph:
                union.add(t)
        try:
            result = evalQuery(union, checked.prepared, {}, None)
            if checked.form == "ASK":
                return GraphResult(
                    metadata={"boolean": str(bool(result["askAnswer"])).lower(), "rows": "0"}
                )
            triples: list[_Triple] = []
            if checked.form == "SELECT":
                names = [Variable(n) for n in checked.projection]
                for row in result["bindings"]:
                    values = [row.get(v) for v in names]
                    if all(v is not None for v in values):
                        s, p, o = (_term(v) for v in values)
                        triples.append((s, p, o))
                if not checked.ordered:
                    triples.sort()
            else:
                triples = sorted((_term(s), _term(p), _term(o)) for s, p, o in result["graph"])
        except QueryError:
            raise
        except Exception as exc:
            raise QueryError(f"SPARQL evaluation failed: {exc}") from exc
        kept = [t for t in triples if _in_scope(t, canonical)]
        return GraphResult(triples=kept, metadata={"rows": str(len(kept))})

    def get_triples(self, subject: str, *, scope: frozenset[str] | None = None) -> GraphResult:
        """Triples of ``subject`` in the in-scope graphs (``None``: every graph), sorted."""
        validate_non_empty(subject, "subject")
        canonical = None if scope is None else validate_scope(scope)
        found = {
            (_term(s), _term(p), _term(o))
            for graph in self._selected(canonical)
            for s, p, o in graph.triples((URIRef(subject), None, None))
        }
        return GraphResult(triples=sorted(found), metadata={"rows": str(len(found))})

    def traverse(
        self,
        start: str,
        *,
        depth: int = 2,
        scope: frozenset[str] | None = None,
        direction: str = "out",
        predicates: frozenset[str] | None = None,
    ) -> GraphResult:
        """Breadth-first walk, each triple once (see ``GraphBackend.traverse``)."""
        validate_non_empty(start, "start")
        validate_depth(depth)
        chosen = validate_traversal(direction, predicates)
        canonical = None if scope is None else validate_scope(scope)
        graphs = self._selected(canonical)
        out: list[_Triple] = []
        seen: set[_Triple] = set()
        visited, frontier = {start}, [start]
        for hop in range(1, depth + 1):
            reached: list[str] = []
            for node in frontier:
                if hop > 1 and len(out) > self._max_rows:
                    raise walk_limit_error(start, self._max_rows, hop)
                edges: set[tuple[_Triple, str]] = set()
                for g in graphs:
                    if direction in ("out", "both"):
                        for s, p, o in g.triples((URIRef(node), None, None)):
                            nxt = _term(o) if isinstance(o, URIRef) else ""
                            edges.add(((_term(s), _term(p), _term(o)), nxt))
                    if direction in ("in", "both"):
                        for s, p, o in g.triples((None, None, URIRef(node))):
                            edges.add(((_term(s), _term(p), _term(o)), _term(s)))
                for triple, nxt in sorted(edges):
                    if chosen is not None and triple[1] not in chosen:
                        continue
                    if triple not in seen:
                        seen.add(triple)
                        out.append(triple)
                    if nxt and nxt not in visited:
                        visited.add(nxt)
                        reached.append(nxt)
            if hop > 1 and len(out) > self._max_rows:
                raise walk_limit_error(start, self._max_rows, hop)
            if not reached:
                break
            frontier = reached
        return GraphResult(triples=out, metadata={"rows": str(len(out))})


class MemoryCatalog:
    """The catalog port over dicts (see ``SqliteCatalog`` for the durable one)."""

    def __init__(self) -> None:
        self._files: dict[str, dict[str, FileRecord]] = {}
        self._meta: dict[str, str] = {}

    def records(self, resource_id: str) -> dict[str, FileRecord]:
        """Every record of a resource, by path."""
        return dict(self._files.get(resource_id, {}))

    def file_stats(self, resource_id: str) -> dict[str, tuple[int, int]]:
        """``(size, mtime_ns)`` per path."""
        return {p: (r.size, r.mtime_ns) for p, r in self._files.get(resource_id, {}).items()}

    def get(self, resource_id: str, paths: Iterable[str]) -> dict[str, FileRecord]:
        """The records of some paths."""
        files = self._files.get(resource_id, {})
        return {p: files[p] for p in paths if p in files}

    def put(self, resource_id: str, records: Iterable[FileRecord]) -> None:
        """Insert or replace records."""
        files = self._files.setdefault(resource_id, {})
        for rec in records:
            files[rec.path] = rec

    def remove(self, resource_id: str, paths: Iterable[str] | None = None) -> None:
        """Forget some paths of a resource, or all of them."""
        if paths is None:
            self._files.pop(resource_id, None)
            return
        files = self._files.get(resource_id, {})
        for p in paths:
            files.pop(p, None)
        if not files:
            self._files.pop(resource_id, None)

    def resource_ids(self) -> set[str]:
        """Resources with at least one record."""
        return {rid for rid, files in self._files.items() if files}

    def get_meta(self, key: str) -> str | None:
        """A setting, or None."""
        return self._meta.get(key)

    def set_meta(self, key: str, value: str) -> None:
        """Record a setting."""
        self._meta[key] = value

    def delete_meta(self, key: str) -> None:
        """Forget a setting."""
        self._meta.pop(key, None)

    def close(self) -> None:
        """Nothing to release."""
