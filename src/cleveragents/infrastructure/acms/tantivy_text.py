"""Tantivy adapter for the :class:`~cleveragents.domain.models.acms.backends.TextIndex` port.

The on-disk (or in-RAM) *main* index is the durable store.  A query never
builds its scope into the query string.

BM25 statistics (IDF, average field length) are index-wide, and deleted
documents keep counting until a merge drops them.  So that nothing outside a
scope can influence a score, a query runs on the main index only when the
scope covers every present resource and the index holds no deleted documents;
otherwise it runs on a *view*: an in-RAM index holding only the in-scope
documents, copied out of the main index (through a zero-scored term-set query
on ``resource_id``) and cached per (scope, generation).  Either way the
searcher holds exactly the in-scope documents, so the user query runs on it
unchanged (a scope filter would only add work: it cost more than the query),
and every hit's ``resource_id`` is checked against the scope once more.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import structlog
import tantivy

from cleveragents.domain.models.acms.backends import (
    IndexUnit,
    TextResult,
    validate_non_empty,
    validate_positive_int,
)
from cleveragents.domain.models.acms.errors import IndexUnavailableError, QueryError
from cleveragents.domain.models.acms.uko import resource_id_of
from cleveragents.domain.models.acms.ulids import canonical_ulid, validate_scope

__all__ = ["TantivyTextBackend"]

_log = structlog.get_logger("cleveragents.acms.tantivy_text")

ANALYZER_NAME = "cleveragents_code"
# Rust regex (no look-around): a capitalised or lower-case word, an upper-case
# run, a number, or any other run of letters.  Acronyms followed by a word
# ("HTTPServer") are split before analysis by _ACRONYM_BOUNDARY.
_TOKEN_PATTERN = r"\p{Lu}?\p{Ll}+|\p{Lu}+|\p{N}+|\p{L}+"
_ACRONYM_BOUNDARY = re.compile(r"(?<=[A-Z])(?=[A-Z][a-z])")
_MAX_TOKEN_CHARS = 100

# Query caps.  Tantivy's parser recurses once per nesting level (parentheses,
# NOT chains) and overflows the native stack, killing the process with
# SIGSEGV, at a few thousand levels on an 8 MB stack, at ~100 on a 256 KB
# thread stack; 32 levels need well under 128 KB.  Length and term caps keep
# one query's work (and a 20,000-term OR) small.
MAX_QUERY_CHARS = 10_000
MAX_QUERY_DEPTH = 32
_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')
_INTERNAL_FIELD = re.compile(r"(?<![\w.])(resource_id|uko_uri|body|metadata)\s*:")
_BARE_STAR = re.compile(r"(?<![\w*:\\])\*(?![\w*])")
MAX_QUERY_TERMS = 1_000

_OPERATORS = re.compile(r"\b(?:AND|OR|NOT)\b")

_SEARCH_FIELDS = ["content", "path"]
_SCORE_HALF = 8.0  # the raw BM25 score that normalises to 0.5
_WRITER_HEAP = 50_000_000
_PARSED_CACHE_SIZE = 64  # parsed queries kept per index (they depend on the query only)
_SCOPE_CACHE_SIZE = 64  # validated scopes kept
_LOCK_BACKOFF_START = 0.01
_LOCK_BACKOFF_MAX = 0.5


def _analyzer() -> tantivy.TextAnalyzer:
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.regex(_TOKEN_PATTERN))
        .filter(tantivy.Filter.remove_long(_MAX_TOKEN_CHARS))
        .filter(tantivy.Filter.lowercase())
        .build()
    )


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("uko_uri", stored=True, tokenizer_name="raw")
    # fast: the terms aggregation that lists present resources counts live
    # documents only.
    builder.add_text_field("resource_id", stored=True, fast=True, tokenizer_name="raw")
    # ``content`` and ``path`` index an analysis-ready copy of the text; the
    # original content is kept byte-exact in ``body``.
    builder.add_text_field("content", tokenizer_name=ANALYZER_NAME)
    builder.add_text_field("path", tokenizer_name=ANALYZER_NAME)
    builder.add_bytes_field("body", stored=True, indexed=False)
    builder.add_bytes_field("metadata", stored=True, indexed=False)
    return builder.build()


def _analysable(text: str) -> str:
    """Text as the analyzer should see it: acronyms split, surrogates replaced."""
    if not text.isascii():
        text = text.encode("utf-8", "replace").decode("utf-8")
    return _ACRONYM_BOUNDARY.sub("_", text)


def _document(uri: str, rid: str, content: str, metadata: Mapping[str, str]) -> tantivy.Document:
    doc = tantivy.Document()
    doc.add_text("uko_uri", uri)
    doc.add_text("resource_id", rid)
    doc.add_text("content", _analysable(content))
    path = metadata.get("path")
    if path:
        doc.add_text("path", _analysable(path))
    doc.add_bytes("body", content.encode("utf-8", "surrogatepass"))
    doc.add_bytes("metadata", json.dumps(dict(metadata), sort_keys=True).encode("ascii"))
    return doc


def _copy(stored: tantivy.Document) -> tantivy.Document:
    """A stored document re-indexed as :func:`_document` indexed it (stored bytes kept)."""
    body = bytes(stored.get_first("body") or b"")
    raw_metadata = bytes(stored.get_first("metadata") or b"{}")
    doc = tantivy.Document()
    doc.add_text("uko_uri", str(stored.get_first("uko_uri")))
    doc.add_text("resource_id", str(stored.get_first("resource_id")))
    doc.add_text("content", _analysable(body.decode("utf-8", "surrogatepass")))
    path = json.loads(raw_metadata.decode("ascii")).get("path")
    if path:
        doc.add_text("path", _analysable(str(path)))
    doc.add_bytes("body", body)
    doc.add_bytes("metadata", raw_metadata)
    return doc


@dataclass(frozen=True, slots=True)
class _Stored:
    uri: str
    rid: str
    content: str
    metadata: dict[str, str]


def _read_stored(doc: tantivy.Document) -> _Stored:
    metadata = json.loads(bytes(doc.get_first("metadata") or b"{}").decode("ascii"))
    return _Stored(
        uri=str(doc.get_first("uko_uri")),
        rid=str(doc.get_first("resource_id")),
        content=bytes(doc.get_first("body") or b"").decode("utf-8", "surrogatepass"),
        metadata={str(k): str(v) for k, v in metadata.items()},
    )


def _nesting(query: str) -> int:
    """How deep the parser recurses: parentheses and ``NOT`` chains, outside quotes.

    Each ``(`` counts one level plus the ``NOT`` run in front of it; escaped
    parentheses and phrases do not count.  Errs on the high side.
    """
    opened: list[int] = []  # levels each open parenthesis added
    depth = deepest = nots = 0
    word: list[str] = []
    chars = iter(query)

    def end_word() -> None:
        nonlocal nots
        if word:
            nots = nots + 1 if "".join(word) == "NOT" else 0
            word.clear()

    for char in chars:
        if char == "\\":
            next(chars, None)
            word.append(char)
        elif char == '"':
            end_word()
            for quoted in chars:  # a phrase: nothing inside nests
                if quoted == "\\":
                    next(chars, None)
                elif quoted == '"':
                    break
        elif char == "(":
            end_word()
            opened.append(nots + 1)
            depth += nots + 1
            nots = 0
        elif char == ")":
            end_word()
            depth -= opened.pop() if opened else 0
            nots = 0
        elif char.isspace():
            end_word()
        else:
            word.append(char)
        deepest = max(deepest, depth + nots)
    end_word()
    return max(deepest, depth + nots)


def _normalise(raw: float) -> float:
    if math.isnan(raw) or raw <= 0.0:
        return 0.0
    if math.isinf(raw):
        return 1.0
    return raw / (raw + _SCORE_HALF)


def _reraise_fatal(exc: BaseException) -> None:
    if isinstance(exc, KeyboardInterrupt | SystemExit | GeneratorExit):
        raise exc


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """One reader generation: a searcher and what the scope logic needs of it."""

    generation: object
    searcher: tantivy.Searcher
    present: frozenset[str]
    # No deleted documents: BM25 statistics cover exactly the live documents.
    clean: bool


class TantivyTextBackend:
    """Full-text search over UKO units with Tantivy (BM25, code-aware analysis).

    Args:
        index_path: directory of the index (created if missing); ``None`` keeps
            the index in RAM.
        view_cache_size: how many per-scope views to keep (LRU).
        lock_timeout: seconds a write waits for another process's writer lock
            before :class:`IndexUnavailableError`.

    Scores: the raw BM25 score ``raw`` is reported as ``raw / (raw + 8.0)``,
    a fixed monotone map into 0..1 (0 for no relevance, 0.5 at a raw score of
    8) with no per-query rescaling, so scores of different queries compare.
    Results are ordered by descending score, ties by ``uko_uri``.

    Scope is exact: the results for a scope, URIs and scores, are those of an
    index holding only the in-scope units.  Identifiers are split for search
    (``parseJsonV2`` -> parse, json, v, 2; ``HTTPServer`` -> http, server;
    ``snake_case`` -> snake, case), case-insensitively, in queries the same way.

    Writes take the directory's single writer lock for the duration of one
    call; each call commits, so it is durable and visible when it returns.
    """

    def __init__(
        self,
        index_path: str | os.PathLike[str] | None = None,
        *,
        view_cache_size: int = 8,
        lock_timeout: float = 30.0,
    ) -> None:
        validate_positive_int(view_cache_size, "view_cache_size")
        if isinstance(lock_timeout, bool) or not isinstance(lock_timeout, int | float):
            raise TypeError("lock_timeout must be a number of seconds")
        if not lock_timeout >= 0:
            raise ValueError("lock_timeout must be non-negative")
        self._path = None if index_path is None else os.fspath(index_path)
        self._resolved = ""
        self._view_cache_size = view_cache_size
        self._lock_timeout = float(lock_timeout)
        self._schema = _schema()
        self._read_lock = threading.RLock()
        self._write_lock = threading.Lock()
        self._commits = 0  # generation of a RAM index
        self._snapshot: _Snapshot | None = None
        self._views: OrderedDict[tuple[frozenset[str], object], tantivy.Index] = OrderedDict()
        self._query_analyzer = _analyzer()
        # Parsed queries of the index object ``_parsed_for`` (a query that
        # passed the caps and parsed once parses the same way again).
        self._parsed: dict[str, tantivy.Query] = {}
        self._parsed_for: tantivy.Index | None = None
        self._scopes: dict[frozenset[str], frozenset[str]] = {}
        self._index: tantivy.Index | None = self._open()

    # ------------------------------------------------------------ lifecycle

    def _open(self) -> tantivy.Index:
        try:
            if self._path is None:
                index = tantivy.Index(self._schema)
            else:
                os.makedirs(self._path, exist_ok=True)
                # Tantivy resolves the directory once; remember which one, so
                # a rebuild that relinks the path is noticed (see _follow).
                self._resolved = os.path.realpath(self._path)
                index = tantivy.Index(self._schema, path=self._resolved, reuse=True)
            index.register_tokenizer(ANALYZER_NAME, _analyzer())
            index.config_reader(reload_policy="manual")
        except (OSError, ValueError) as exc:
            raise IndexUnavailableError(
                f"cannot open the text index at {self._path!r}: {exc}"
            ) from exc
        return index

    def close(self) -> None:
        """Release the index and the cached views; later calls fail."""
        with self._write_lock, self._read_lock:
            self._index = None
            self._snapshot = None
            self._views.clear()
            self._parsed.clear()
            self._parsed_for = None

    def _main(self) -> tantivy.Index:
        if self._index is None:
            raise IndexUnavailableError("the text index is closed")
        if self._path is not None and os.path.realpath(self._path) != self._resolved:
            # `reindex --rebuild` pointed the path at a new index: open that one.
            self._index = self._open()
            self._snapshot = None
            self._views.clear()
        return self._index

    # ------------------------------------------------------------ read side

    def search(
        self, query: str, *, scope: frozenset[str], max_results: int = 20
    ) -> list[TextResult]:
        """Search the units of the resources in ``scope`` (see :class:`TextBackend`).

        ``max_results`` may be any positive int; it is clamped to the number of
        in-scope units.  A query may be at most :data:`MAX_QUERY_CHARS`
        characters long, nest parentheses and ``NOT`` at most
        :data:`MAX_QUERY_DEPTH` deep and hold at most :data:`MAX_QUERY_TERMS`
        terms after analysis (``AND``/``OR``/``NOT`` aside; an identifier
        counts as its parts).

        Raises:
            TypeError: an argument has the wrong type.
            ValueError: empty query, non-positive ``max_results``, an invalid
                scope member, a query over a cap or one the parser rejects
                (:class:`QueryError`).
            IndexUnavailableError: the index cannot be read.
        """
        with self._read_lock:
            validate_non_empty(query, "query")
            wanted = self._canonical_scope(scope)
            limit = validate_positive_int(max_results, "max_results")
            index = self._index
            parsed = self._parsed.get(query) if index is self._parsed_for else None
            if parsed is None:
                self._check_caps(query)
                if not wanted:
                    return []
                index = self._main()
                parsed = self._parse(index, query)
                if self._parsed_for is not index:
                    self._parsed_for = index
                    self._parsed.clear()
                self._parsed[query] = parsed
                if len(self._parsed) > _PARSED_CACHE_SIZE:
                    del self._parsed[next(iter(self._parsed))]
            elif not wanted:
                return []
            snapshot = self._fresh()
            ids = wanted & snapshot.present
            if not ids:
                return []
            if ids == snapshot.present and snapshot.clean:
                searcher = snapshot.searcher
            else:
                searcher = self._view(snapshot, ids).searcher()
            # searcher holds exactly the in-scope units (see above), so the
            # parsed query runs on it as is: a scope filter could only add
            # work.  Tantivy allocates for the limit and panics near 2**63:
            # never ask for more than there are documents.
            limit = min(limit, searcher.num_docs)
            if limit == 0:
                return []
            return self._top(searcher, parsed, limit, ids)

    def _canonical_scope(self, scope: object) -> frozenset[str]:
        """:func:`validate_scope`, remembering recent scopes of plain strings."""
        if type(scope) is frozenset:
            known = self._scopes.get(scope)
            # Equal members of another type could pass the lookup: check them.
            if known is not None and all(type(member) is str for member in scope):
                return known
        wanted = validate_scope(scope)
        if type(scope) is frozenset and all(type(member) is str for member in scope):
            if len(self._scopes) >= _SCOPE_CACHE_SIZE:
                del self._scopes[next(iter(self._scopes))]
            self._scopes[scope] = wanted
        return wanted

    def unit_uris(self, resource_id: str) -> set[str]:
        """URIs of the units indexed for a resource.

        Raises:
            TypeError / ValueError: ``resource_id`` is not a ULID.
            IndexUnavailableError: the index cannot be read.
        """
        rid = canonical_ulid(resource_id)
        with self._read_lock:
            snapshot = self._current()
            if rid not in snapshot.present:
                return set()
            return {s.uri for s in self._stored(snapshot.searcher, frozenset({rid}))}

    def resource_ids(self) -> set[str]:
        """ULIDs of the resources that have at least one unit.

        Raises:
            IndexUnavailableError: the index cannot be read.
        """
        with self._read_lock:
            return set(self._current().present)

    def _check_caps(self, query: str) -> None:
        if len(query) > MAX_QUERY_CHARS:
            raise QueryError(
                f"the query is {len(query)} characters long; the limit is {MAX_QUERY_CHARS}"
            )
        depth = _nesting(query)
        if depth > MAX_QUERY_DEPTH:
            raise QueryError(
                f"the query nests parentheses / NOT {depth} deep; the limit is {MAX_QUERY_DEPTH}"
            )
        terms = len(self._query_analyzer.analyze(_analysable(_OPERATORS.sub(" ", query))))
        if terms > MAX_QUERY_TERMS:
            raise QueryError(f"the query has {terms} terms; the limit is {MAX_QUERY_TERMS}")
        unquoted = _QUOTED.sub(" ", query)
        field = _INTERNAL_FIELD.search(unquoted)
        if field is not None:
            # The scope already selects resources; these fields are bookkeeping.
            raise QueryError(
                f"the field {field.group(1)!r} cannot be searched; search content or path"
            )
        if _BARE_STAR.search(unquoted):
            # Tantivy scores a match-all clause 0 or 1 depending on its segment
            # layout, so scores would no longer depend on the in-scope
            # documents alone (found by the scope state machine).
            raise QueryError("a bare '*' (match everything) is not supported; search for terms")

    def _parse(self, index: tantivy.Index, query: str) -> tantivy.Query:
        try:
            return index.parse_query(_analysable(query), default_field_names=_SEARCH_FIELDS)
        except ValueError as exc:
            raise QueryError(f"invalid query: {exc}") from exc
        except BaseException as exc:  # PyO3 PanicException derives from BaseException
            _reraise_fatal(exc)
            raise QueryError(f"the query engine failed on this query: {exc}") from exc

    def _scope_filter(self, ids: frozenset[str]) -> tantivy.Query:
        # Zero-scored so the clause neither adds to nor changes BM25 scores.
        terms = tantivy.Query.term_set_query(self._schema, "resource_id", sorted(ids))
        return tantivy.Query.const_score_query(terms, 0.0)

    def _top(
        self, searcher: tantivy.Searcher, query: tantivy.Query, k: int, ids: frozenset[str]
    ) -> list[TextResult]:
        # Fetch past the k-th hit until the last fetched score is below it, so
        # hits tied with the k-th are all seen and ordered by URI, not by
        # engine internals.  One search with twice the room usually suffices.
        fetch = 2 * k + 1
        while True:
            hits = self._run(searcher, query, fetch)
            if len(hits) < fetch or hits[-1][0] < hits[k - 1][0]:
                break
            fetch *= 2
        if len(hits) > k:
            # Only the hits tied with the k-th can displace one of the top k.
            cutoff = hits[k - 1][0]
            end = k
            while end < len(hits) and hits[end][0] >= cutoff:
                end += 1
            hits = hits[:end]
        try:
            docs = [(float(score), searcher.doc(addr)) for score, addr in hits]
            keyed = [(-score, str(doc.get_first("uko_uri")), doc) for score, doc in docs]
            keyed.sort(key=lambda hit: hit[:2])
            # Decode the stored fields of the k winners only.
            found = [(-neg, _read_stored(doc)) for neg, _, doc in keyed[:k]]
        except (OSError, ValueError) as exc:
            raise IndexUnavailableError(f"cannot read the text index: {exc}") from exc
        results: list[TextResult] = []
        for raw, stored in found:
            if stored.rid not in ids:  # cannot happen: the searcher holds only the scope
                _log.error("acms.tantivy_text.out_of_scope_hit", uko_uri=stored.uri)
                continue
            results.append(
                TextResult(
                    uko_uri=stored.uri,
                    content=stored.content,
                    score=_normalise(raw),
                    metadata={**stored.metadata, "resource_id": stored.rid},
                )
            )
        return results

    @staticmethod
    def _run(
        searcher: tantivy.Searcher, query: tantivy.Query, limit: int
    ) -> list[tuple[Any, tantivy.DocAddress]]:
        try:
            return searcher.search(query, limit, count=False).hits
        except ValueError as exc:
            # Some queries parse but fail here, e.g. ``content:*`` (needs a fast field).
            raise QueryError(f"invalid query: {exc}") from exc
        except BaseException as exc:  # PyO3 PanicException derives from BaseException
            _reraise_fatal(exc)
            raise QueryError(f"the query engine failed on this query: {exc}") from exc

    # ------------------------------------------------------------ snapshots and views

    def _generation(self) -> object:
        if self._path is None:
            return self._commits
        # Every commit and merge atomically replaces meta.json.
        try:
            st = os.stat(os.path.join(self._path, "meta.json"))
        except OSError as exc:
            raise IndexUnavailableError(f"the text index at {self._path!r} is gone") from exc
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _fresh(self) -> _Snapshot:
        """:meth:`_current`, checking for a relinked path only when the generation moved.

        A rebuild that relinks the path makes ``meta.json`` (read through the
        path) another file, so an unchanged generation means an unchanged index.
        """
        snapshot = self._snapshot
        if (
            self._index is not None
            and snapshot is not None
            and snapshot.generation == self._generation()
        ):
            return snapshot
        return self._current()

    def _current(self) -> _Snapshot:
        """The snapshot of the latest commit (reloading when it changed)."""
        index = self._main()
        generation = self._generation()
        if self._snapshot is not None and self._snapshot.generation == generation:
            return self._snapshot
        try:
            index.reload()
            searcher = index.searcher()
            terms = searcher.terms_with_prefix("resource_id", "")
            # doc_freq counts deleted documents until a merge drops them.
            clean = sum(freq for _, freq in terms) == searcher.num_docs
            if clean:
                present = frozenset(term for term, _ in terms)
            else:
                agg = searcher.aggregate(
                    tantivy.Query.all_query(),
                    {"rids": {"terms": {"field": "resource_id", "size": max(1, len(terms))}}},
                )
                present = frozenset(str(b["key"]) for b in agg["rids"]["buckets"])
        except (OSError, ValueError) as exc:
            raise IndexUnavailableError(f"cannot read the text index: {exc}") from exc
        self._snapshot = _Snapshot(generation, searcher, present, clean)
        self._views.clear()  # views of older generations can never be hit again
        return self._snapshot

    def _stored(self, searcher: tantivy.Searcher, ids: frozenset[str]) -> list[_Stored]:
        """Every live unit of the resources ``ids``, read through the scope filter."""
        try:
            upper = sum(searcher.doc_freq("resource_id", rid) for rid in ids)
            if upper == 0:
                return []
            hits = searcher.search(self._scope_filter(ids), upper, count=False).hits
            return [_read_stored(searcher.doc(addr)) for _, addr in hits]
        except (OSError, ValueError) as exc:
            raise IndexUnavailableError(f"cannot read the text index: {exc}") from exc

    def _stored_docs(
        self, searcher: tantivy.Searcher, ids: frozenset[str]
    ) -> list[tantivy.Document]:
        """Every live document of the resources ``ids``, as stored."""
        try:
            upper = sum(searcher.doc_freq("resource_id", rid) for rid in ids)
            if upper == 0:
                return []
            hits = searcher.search(self._scope_filter(ids), upper, count=False).hits
            return [searcher.doc(addr) for _, addr in hits]
        except (OSError, ValueError) as exc:
            raise IndexUnavailableError(f"cannot read the text index: {exc}") from exc

    def _view(self, snapshot: _Snapshot, ids: frozenset[str]) -> tantivy.Index:
        key = (ids, snapshot.generation)
        view = self._views.get(key)
        if view is not None:
            self._views.move_to_end(key)
            return view
        started = time.perf_counter()
        units = self._stored_docs(snapshot.searcher, ids)
        try:
            view = tantivy.Index(self._schema)
            view.register_tokenizer(ANALYZER_NAME, _analyzer())
            view.config_reader(reload_policy="manual")
            writer = view.writer(heap_size=_WRITER_HEAP, num_threads=1)
            for unit in units:
                writer.add_document(_copy(unit))
            writer.commit()
            writer.wait_merging_threads()
            view.reload()
        except (OSError, ValueError) as exc:
            raise IndexUnavailableError(f"cannot build a scoped view: {exc}") from exc
        _log.debug(
            "acms.tantivy_text.view_built",
            resources=len(ids),
            units=len(units),
            ms=round((time.perf_counter() - started) * 1000, 3),
        )
        self._views[key] = view
        while len(self._views) > self._view_cache_size:
            self._views.popitem(last=False)
        return view

    # ------------------------------------------------------------ write side

    def upsert(
        self, resource_id: str, units: Sequence[IndexUnit], *, delete_uris: Iterable[str] = ()
    ) -> None:
        """Atomically delete ``delete_uris`` and add or replace ``units`` (one commit).

        A unit whose URI is already indexed replaces it; when ``units`` repeats
        a URI the last one wins.

        Raises:
            TypeError: ``units`` holds something other than :class:`IndexUnit`.
            ValueError: an invalid ULID, or a unit or URI of another resource.
            IndexUnavailableError: the change could not be written.
        """
        rid = canonical_ulid(resource_id)
        if isinstance(units, str | bytes) or not isinstance(units, Sequence):
            raise TypeError("units must be a sequence of IndexUnit")
        latest: dict[str, IndexUnit] = {}
        for unit in units:
            if not isinstance(unit, IndexUnit):
                raise TypeError(f"units must be IndexUnit, not {type(unit).__name__}")
            if unit.resource_id != rid:
                raise ValueError(f"unit {unit.uko_uri[:80]!r} does not belong to {rid}")
            latest[unit.uko_uri] = unit
        removed = self._own_uris(rid, delete_uris, "delete_uris")
        if not latest and not removed:
            return

        def change(writer: tantivy.IndexWriter) -> None:
            for uri in removed | latest.keys():
                writer.delete_documents_by_term("uko_uri", uri)
            for unit in latest.values():
                writer.add_document(_document(unit.uko_uri, rid, unit.content, unit.metadata))

        self._write(change)

    def delete(self, resource_id: str, uris: Iterable[str] | None = None) -> None:
        """Delete the given units of a resource, or all of them when ``uris`` is None.

        Raises:
            ValueError: an invalid ULID, or a URI of another resource.
            IndexUnavailableError: the change could not be written.
        """
        rid = canonical_ulid(resource_id)
        if uris is None:

            def delete_all(writer: tantivy.IndexWriter) -> None:
                writer.delete_documents_by_term("resource_id", rid)

            self._write(delete_all)
            return
        removed = self._own_uris(rid, uris, "uris")
        if not removed:
            return

        def change(writer: tantivy.IndexWriter) -> None:
            for uri in removed:
                writer.delete_documents_by_term("uko_uri", uri)

        self._write(change)

    @staticmethod
    def _own_uris(rid: str, uris: Iterable[str], name: str) -> set[str]:
        if isinstance(uris, str | bytes):
            raise TypeError(f"{name} must be an iterable of URIs, not a single string")
        out: set[str] = set()
        for uri in uris:
            if resource_id_of(uri) != rid:
                raise ValueError(f"{name}: {str(uri)[:80]!r} is not a unit URI of {rid}")
            out.add(uri)
        return out

    def _write(self, change: Callable[[tantivy.IndexWriter], None]) -> None:
        with self._write_lock:
            index = self._main()
            writer = self._acquire_writer(index)
            try:
                change(writer)
                writer.commit()
            except BaseException as exc:
                with contextlib.suppress(OSError, ValueError):
                    writer.rollback()
                _reraise_fatal(exc)
                raise IndexUnavailableError(f"cannot write the text index: {exc}") from exc
            finally:
                # Lets merges finish and releases the writer lock.
                with contextlib.suppress(OSError, ValueError):
                    writer.wait_merging_threads()
                del writer
            self._commits += 1
        with self._read_lock:
            self._snapshot = None
            try:
                index.reload()
            except (OSError, ValueError) as exc:
                raise IndexUnavailableError(f"cannot reload the text index: {exc}") from exc

    def _acquire_writer(self, index: tantivy.Index) -> tantivy.IndexWriter:
        deadline = time.monotonic() + self._lock_timeout
        delay = _LOCK_BACKOFF_START
        waited = False
        while True:
            try:
                writer = index.writer(heap_size=_WRITER_HEAP, num_threads=1)
            except ValueError as exc:
                remaining = deadline - time.monotonic()
                if "LockBusy" not in str(exc):
                    raise IndexUnavailableError(f"cannot open a writer: {exc}") from exc
                if remaining <= 0:
                    self._lock_timed_out(exc)
                if not waited:
                    _log.info("acms.tantivy_text.writer_lock_busy", path=self._path)
                    waited = True
                time.sleep(min(delay, remaining))
                delay = min(delay * 2, _LOCK_BACKOFF_MAX)
            else:
                return writer

    def _lock_timed_out(self, exc: ValueError) -> NoReturn:
        raise IndexUnavailableError(
            f"the text index at {self._path!r} stayed locked by another writer "
            f"for {self._lock_timeout:g} s"
        ) from exc
