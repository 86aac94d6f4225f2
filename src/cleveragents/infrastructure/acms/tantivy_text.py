"""Tantivy adapter for the :class:`~cleveragents.domain.models.acms.backends.TextIndex` port.

Storage: one Tantivy index per resource (a *shard*), in ``<index_path>/<ULID>/``.
A scoped query opens (lazily, then cached) and searches only the in-scope
shards and merges their top-k exactly, ties broken by URI.  BM25 statistics
(IDF, average field length) therefore come from each in-scope resource alone:
no document of another resource can influence a score or the order, and no
query copies a document.  A resource without units has no shard.

Change detection is per shard: before a search, one ``stat`` of each in-scope
shard's ``meta.json`` (every commit replaces it atomically) tells whether that
shard moved; only a moved shard is reloaded.  A commit to resource A never
reloads or invalidates anything of resource B, in this process or another.
A rebuild that relinks ``index_path`` (see ``index_layout.py``) changes every
shard's ``meta.json`` seen through the link; the first moved shard then
notices the new target and drops every cached shard.

Bounded queries: a query is validated and built in one step
(``tantivy_query.QueryBuilder``: caps, then the shapes that explode, then
the parser),
and a search runs on worker threads (Tantivy releases the GIL while it
searches) while the caller waits at most ``query_timeout`` seconds.  No lock
is held while the engine searches, so a slow query never delays another.
Tantivy cannot be cancelled: a search past its deadline finishes on its
worker thread and its answer is dropped; the static shape limits bound that
work, and the worker pool is capped (:data:`MAX_SEARCH_THREADS`).

One kind of search runs on the caller's thread instead: a plain-syntax
query (term lookups, the ``pairs`` field, proximity phrases; no slop, no
fuzzy or prefix terms) for at most :data:`INLINE_MAX_RESULTS` results over
in-scope shards of at most :data:`INLINE_MAX_BYTES` of index files and
:data:`INLINE_MAX_UNITS` units, when the deadline is at least
:data:`INLINE_MIN_TIMEOUT`.  Its cost is bounded by what it can read: the
worst such query measured (64 words each in every document, a path glob)
took ~1 ms per MiB of index, so ~4 ms at the bound; hits tied at the
cut-off are read all, at most the units in scope (2,000 units alike,
every one tied: ~15 ms, 30 ms at worst).  That against the
~0.14 ms the hand-off to a worker thread and back costs every query (two
thread wake-ups; a third of a warm query over one small resource).  Past
its deadline such a search still raises :class:`QueryTimeoutError`, once it
returns (a worker-thread search returns at the deadline).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import math
import os
import queue
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, NoReturn

import tantivy

from cleveragents._logging import get_logger
from cleveragents.domain.models.acms.backends import (
    IndexUnit,
    TextResult,
    validate_non_empty,
    validate_positive_int,
)
from cleveragents.domain.models.acms.errors import (
    REBUILD_HINT,
    IndexUnavailableError,
    QueryError,
    QueryTimeoutError,
)
from cleveragents.domain.models.acms.text_query import (
    LineMatcher,
    TextOptions,
    glob_regex,
    text_options,
)
from cleveragents.domain.models.acms.uko import resource_id_of
from cleveragents.domain.models.acms.ulids import canonical_ulid, is_ulid, validate_scope
from cleveragents.infrastructure.acms.fs_swap import exchange_paths
from cleveragents.infrastructure.acms.tantivy_query import (
    ANALYZER_NAME,
    KEYWORD_ANALYZER_NAME,
    PAIRS_ANALYZER_NAME,
    Clause,
    PlainQueryBuilder,
    QueryBuilder,
    code_analyzer,
    filter_query,
    filtered,
    filters,
    keyword_analyzer,
    pairs_analyzer,
    query_terms,
    reraise_fatal,
    scope_queries,
    scoring_query,
    terms_analyzer,
)
from cleveragents.infrastructure.acms.text_analysis import (
    ASCII_TOKEN,
    analysable,
    prepare_content,
    tokens_of,
)

__all__ = ["TantivyTextBackend"]

# The benchmarks' raw references import the analyzer under its old name.
_analyzer = code_analyzer

_log = get_logger("cleveragents.acms.tantivy_text")

DEFAULT_QUERY_TIMEOUT = 5.0
# Worker threads for searches, process-wide.  A search past its deadline keeps
# its thread until Tantivy returns; new searches get a fresh thread up to
# this many, then queue (and time out at their own deadline).
MAX_SEARCH_THREADS = 32
#: In-scope index bytes up to which a plain query runs on the caller's
#: thread (see the module docstring), and the least deadline it needs.
INLINE_MAX_BYTES = 4 * 1024 * 1024
INLINE_MIN_TIMEOUT = 0.5
#: ... and at most this many units in scope and results asked for: reading
#: the stored hits is Python work per hit (ties at the cut-off read them all).
INLINE_MAX_UNITS = 2_000
INLINE_MAX_RESULTS = 100

_SCORE_HALF = 8.0  # the raw BM25 score that normalises to 0.5
#: Shards kept open between searches (least recently used closed beyond it).
#: An open shard holds ~8 memory maps per segment: unbounded, a long-lived
#: service over thousands of resources would reach the kernel's map limit
#: (``vm.max_map_count``, 65,530 by default) and fail every open.
DEFAULT_MAX_OPEN_SHARDS = 512
_WRITER_HEAP = 50_000_000
_PARSED_CACHE_SIZE = 64  # built queries kept (they depend on the query text only)
_SCOPE_CACHE_SIZE = 64  # validated scopes kept
_FREQS_CACHE_SIZE = 256  # document frequencies a shard keeps (~45 KB at most)
_LOCK_BACKOFF_START = 0.01
_LOCK_BACKOFF_MAX = 0.5
_META = "meta.json"
_MISSING = object()
_TRASH_PREFIX = ".trash-"


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("uko_uri", stored=True, tokenizer_name="raw")
    builder.add_text_field("resource_id", stored=True, tokenizer_name="raw")
    # ``content``, ``path``, ``symbol`` and ``names`` index the tokens of the
    # text (``text_analysis``: ``prepare_content``, ``tokens_of``); the
    # original content is kept byte-exact in ``body``.
    builder.add_text_field("content", tokenizer_name=ANALYZER_NAME)
    builder.add_text_field("path", tokenizer_name=ANALYZER_NAME)
    # Names defined in the unit (``metadata["symbols"]``): split like content,
    # and each one whole and lower-cased (the exact-identifier boost).
    builder.add_text_field("symbol", tokenizer_name=ANALYZER_NAME)
    builder.add_text_field("symbol_exact", tokenizer_name=KEYWORD_ANALYZER_NAME)
    # ... and as written (``Manager`` is not ``manager``).
    builder.add_text_field("symbol_case", tokenizer_name="raw")
    # The plain syntax's one field for path and defined names (one clause
    # per term instead of two; see ``tantivy_query``).
    builder.add_text_field("names", tokenizer_name=ANALYZER_NAME)
    # Names called in the unit (``metadata["calls"]``), each whole and
    # lower-cased: a list of names finds the code that calls them.
    builder.add_text_field("calls", tokenizer_name=KEYWORD_ANALYZER_NAME)
    # Adjacent content terms, one token per pair (``tantivy_query.pair_terms``):
    # the plain syntax's phrase boosts as term lookups.  No positions needed.
    builder.add_text_field("pairs", tokenizer_name=PAIRS_ANALYZER_NAME, index_option="freq")
    # Filters: the path as is (glob -> regex over the term dictionary) and
    # the language, lower-cased.
    builder.add_text_field("path_raw", tokenizer_name="raw")
    builder.add_text_field("lang", tokenizer_name=KEYWORD_ANALYZER_NAME)
    builder.add_bytes_field("body", stored=True, indexed=False)
    builder.add_bytes_field("metadata", stored=True, indexed=False)
    return builder.build()


# The fields of the current schema: a shard without them has an older one.
_SCHEMA_FIELDS = frozenset(
    {
        "uko_uri",
        "resource_id",
        "content",
        "path",
        "symbol",
        "symbol_exact",
        "symbol_case",
        "names",
        "calls",
        "pairs",
        "path_raw",
        "lang",
        "body",
        "metadata",
    }
)


def _check_prepared(prepared: object) -> tuple[str, str] | None:
    if prepared is None:
        return None
    if (
        type(prepared) is not tuple
        or len(prepared) != 2
        or type(prepared[0]) is not str
        or type(prepared[1]) is not str
    ):
        raise TypeError("each prepared entry must be None or what prepare_content returns")
    return prepared


def _document(
    uri: str,
    rid: str,
    content: str,
    metadata: Mapping[str, str],
    prepared: tuple[str, str] | None = None,
) -> tantivy.Document:
    doc = tantivy.Document()
    doc.add_text("uko_uri", uri)
    doc.add_text("resource_id", rid)
    tokens, pairs = prepare_content(content) if prepared is None else prepared
    doc.add_text("content", tokens)
    if pairs:
        doc.add_text("pairs", pairs)
    path = metadata.get("path")
    path_tokens = symbol_tokens = ""
    if path:
        path_tokens = tokens_of(path)
        doc.add_text("path", path_tokens)
        doc.add_text("path_raw", _encodable(path))
    symbols = metadata.get("symbols", "").split()
    if symbols:
        symbol_tokens = tokens_of(" ".join(symbols))
        doc.add_text("symbol", symbol_tokens)
        for name in dict.fromkeys(symbols):
            doc.add_text("symbol_exact", _encodable(name))
            doc.add_text("symbol_case", _encodable(name))
    # Qualified names (``Graph.parse``), whole: a query naming one exactly.
    for name in dict.fromkeys(metadata.get("qualified", "").split()):
        doc.add_text("symbol_exact", _encodable(name))
        doc.add_text("symbol_case", _encodable(name))
    if path or symbols:
        # The path's and the symbols' tokens together (no token spans a space).
        doc.add_text("names", f"{path_tokens} {symbol_tokens}")
    for name in dict.fromkeys(metadata.get("calls", "").split()):
        doc.add_text("calls", _encodable(name))
    language = metadata.get("language")
    if language:
        doc.add_text("lang", _encodable(language))
    doc.add_bytes("body", content.encode("utf-8", "surrogatepass"))
    doc.add_bytes("metadata", json.dumps(dict(metadata), sort_keys=True).encode("ascii"))
    return doc


# What Tantivy's errors say when a segment's bytes cannot be read or decoded.
_READ_FAILED = re.compile(r"IO ?error|IoError|end of buffer|corrupt|checksum", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class _Stored:
    uri: str
    rid: str
    content: str
    metadata: dict[str, str]


def _encodable(text: str) -> str:
    """``text`` with lone surrogates (undecodable file names) replaced."""
    return text if text.isascii() else text.encode("utf-8", "replace").decode("utf-8")


def _register(index: tantivy.Index, *, parses_queries: bool) -> None:
    """Analyzers by name (they are not stored in the index) and the reload policy.

    The text fields are written as tokens (``text_analysis``), which a shard
    only splits at the spaces; the index that parses queries analyses query
    text in full under the same name (a term query never asks a shard's
    analyzer).
    """
    analyzer = code_analyzer() if parses_queries else terms_analyzer()
    index.register_tokenizer(ANALYZER_NAME, analyzer)
    index.register_tokenizer(KEYWORD_ANALYZER_NAME, keyword_analyzer())
    index.register_tokenizer(PAIRS_ANALYZER_NAME, pairs_analyzer())
    index.config_reader(reload_policy="manual")


def _schema_is_current(path: str) -> bool:
    """Whether the shard at ``path`` has every field of :func:`_schema`."""
    try:
        with open(os.path.join(path, _META), encoding="utf-8") as meta:
            fields = {entry.get("name") for entry in json.load(meta).get("schema", [])}
    except (OSError, ValueError, AttributeError):
        return True  # unreadable here: opening it reports the real problem
    return fields >= _SCHEMA_FIELDS


_json_object = json.JSONDecoder().decode  # json.loads without its type dispatch


def _read_stored(doc: tantivy.Document) -> _Stored:
    metadata = json.loads(bytes(doc.get_first("metadata") or b"{}").decode("ascii"))
    return _Stored(
        uri=str(doc.get_first("uko_uri")),
        rid=str(doc.get_first("resource_id")),
        content=bytes(doc.get_first("body") or b"").decode("utf-8", "surrogatepass"),
        metadata={str(k): str(v) for k, v in metadata.items()},
    )


def _normalise(raw: float) -> float:
    if math.isnan(raw) or raw <= 0.0:
        return 0.0
    if math.isinf(raw):
        return 1.0
    return raw / (raw + _SCORE_HALF)


# ---------------------------------------------------------------- search threads


class _SearchThreads:
    """Daemon worker threads for searches, shared by every backend of the process.

    Daemon, so a search abandoned at its deadline never delays the process's
    exit; a fresh thread is started whenever none is idle, up to ``limit``.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._tasks: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]]] = queue.SimpleQueue()
        self._idle = 0
        self._threads = 0

    def submit(self, task: Callable[[], Any]) -> Future[Any]:
        future: Future[Any] = Future()
        with self._lock:
            self._tasks.put((future, task))
            if self._idle > 0:
                self._idle -= 1  # that thread takes this task
            elif self._threads < self._limit:
                self._threads += 1
                threading.Thread(target=self._work, name="acms-text-search", daemon=True).start()
        return future

    def _work(self) -> None:
        while True:
            future, task = self._tasks.get()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(task())
                except BaseException as exc:  # handed to the caller, who re-raises it
                    future.set_exception(exc)
            del future, task
            with self._lock:
                self._idle += 1


_THREADS = _SearchThreads(MAX_SEARCH_THREADS)
# A forked child has none of the parent's threads.
os.register_at_fork(after_in_child=_THREADS._reset)


# ---------------------------------------------------------------- shards


@dataclass(frozen=True, slots=True)
class _Shard:
    """One resource's index as of one commit."""

    rid: str
    index: tantivy.Index
    searcher: tantivy.Searcher
    generation: object
    num_docs: int
    # False for a shard written with an older schema (before the symbol,
    # path_raw and lang fields): searches refuse it, the next write migrates it.
    current: bool = True
    directory: object = None  # identity of the shard's directory
    # Bytes of the files in the shard's directory (None: unknown, in RAM).
    index_bytes: int | None = None
    # (field, term) -> document frequency in this commit (see _doc_freqs).
    freqs: dict[tuple[str, str], int] = field(default_factory=dict, compare=False)

    def doc_freqs(self, clauses: Sequence[Clause]) -> tuple[int, list[int]]:
        """The shard's document count and each clause term's document
        frequency, both as Tantivy's BM25 counts them (documents replaced
        or deleted but not yet merged away included: every document holds
        its ``resource_id``, so that term's frequency is the engine's N)."""
        freqs = self.freqs
        if len(freqs) > _FREQS_CACHE_SIZE:
            freqs.clear()
        out = []
        for name, value, _ in (("resource_id", self.rid, 1.0), *clauses):
            key = (name, value)
            n = freqs.get(key)
            if n is None:
                n = freqs[key] = self.searcher.doc_freq(name, value)
            out.append(n)
        return out[0], out[1:]


# (raw score, URI, stored document, resource) of one hit.
_Hit = tuple[float, str, tantivy.Document, str]
# A plain query's clauses, their term queries and its filter clauses (see _scope_plan).
_Plan = tuple[tuple[Clause, ...], list[tantivy.Query], list[tantivy.Query]]


class TantivyTextBackend:
    """Full-text search over UKO units with Tantivy (BM25, code-aware analysis).

    Args:
        index_path: directory holding one index per resource (created if
            missing); ``None`` keeps every index in RAM.
        view_cache_size: accepted for compatibility and ignored: queries no
            longer build per-scope views.
        lock_timeout: seconds a write waits for another process's writer lock
            before :class:`IndexUnavailableError`.
        query_timeout: seconds a search may take before it is abandoned with
            :class:`QueryTimeoutError` (positive, finite).
        max_open_shards: shards kept open between searches; beyond it the
            least recently searched are closed (and reopened on need).  A
            search over more resources than this opens them all for its
            duration, then keeps the most recent.
        expected: ``expected(rid, still_missing)``: the units its owner's
            records (the index store's catalog) count of a resource whose
            shard was found missing, 0 when a write under way explains it
            (``still_missing()`` looks at the shard again).  Given, a search
            over a resource whose shard is missing while it counts units is
            an :class:`IndexUnavailableError` (the shard was deleted, or a
            restore left it out), not an answer without that resource.

    Scores: the raw BM25 score ``raw`` is reported as ``raw / (raw + 8.0)``,
    a fixed monotone map into 0..1 (0 for no relevance, 0.5 at a raw score of
    8) with no per-query rescaling, so scores of different queries compare.
    Results are ordered by descending score, ties by ``uko_uri``.

    Scope is exact: each in-scope resource is searched in its own index and
    the results are the exact merge of theirs.  A plain query over several
    resources is scored with the statistics of the scope: each clause's BM25
    IDF is the one of a single index of exactly the in-scope documents
    (document counts summed over the in-scope shards; each shard keeps its
    own average field lengths), so a one-file project's definition competes
    fairly with a large library's loose matches, and no out-of-scope document
    counts.  A query in the tantivy syntax is scored by each resource's own
    statistics.  (Like every Lucene-family index, a resource's replaced units
    keep counting in its statistics until Tantivy merges their segment.)  Identifiers are
    split for search (``parseJsonV2`` -> parse, json, v, 2; ``HTTPServer`` ->
    http, server; ``snake_case`` -> snake, case), case-insensitively, in
    queries the same way.

    Writes take the resource's writer lock for the duration of one call; each
    call commits, so it is durable and visible when it returns.
    """

    def __init__(
        self,
        index_path: str | os.PathLike[str] | None = None,
        *,
        view_cache_size: int = 8,
        lock_timeout: float = 30.0,
        query_timeout: float = DEFAULT_QUERY_TIMEOUT,
        max_open_shards: int = DEFAULT_MAX_OPEN_SHARDS,
        expected: Callable[[str, Callable[[], bool]], int] | None = None,
    ) -> None:
        validate_positive_int(view_cache_size, "view_cache_size")
        self._expected = expected
        self._max_open = validate_positive_int(max_open_shards, "max_open_shards")
        self._lock_timeout = _seconds(lock_timeout, "lock_timeout", allow_zero=True)
        self._timeout = _seconds(query_timeout, "query_timeout", allow_zero=False)
        self._path = None if index_path is None else os.fspath(index_path)
        self._resolved = ""
        self._legacy = False
        self._schema = _schema()
        self._builder = QueryBuilder()
        self._plain = PlainQueryBuilder()
        self._analyzer = code_analyzer()
        # Guards the caches below; never held while the engine searches.
        self._lock = threading.RLock()
        self._write_lock = threading.Lock()
        self._shards: dict[str, _Shard] = {}
        # When each shard was last used (a tick of _clock): the least recent
        # are closed first once more than max_open_shards are open.
        self._used: dict[str, int] = {}
        self._clock = itertools.count()
        # Writers kept open by grouped_writes (guarded by _write_lock): the
        # resource's index and its writer, None until the first write.
        self._held: dict[str, tuple[tantivy.Index, tantivy.IndexWriter] | None] = {}
        # Resources in a staged_writes block, and those of them whose kept
        # writer holds writes not committed yet (both under _write_lock).
        self._staging: set[str] = set()
        self._uncommitted: set[str] = set()
        # Staging resources whose uncommitted writes were dropped (a failed
        # write's rollback, close()): their commit must fail, not succeed empty.
        self._lost: set[str] = set()
        self._ram: dict[str, tantivy.Index] = {}
        self._commits: dict[str, int] = {}
        # Built queries of the parser ``_parsed_for`` (a query that passed the
        # limits and parsed once builds the same way again).
        self._parsed: OrderedDict[tuple[str | None, ...], tantivy.Query | None] = OrderedDict()
        self._plans: OrderedDict[tuple[str | None, ...], _Plan] = OrderedDict()
        self._parsed_for: tantivy.Index | None = None
        self._matchers: OrderedDict[tuple[str, str], LineMatcher] = OrderedDict()
        self._scopes: dict[frozenset[str], frozenset[str]] = {}
        if self._path is not None:
            try:
                os.makedirs(self._path, exist_ok=True)
                if not os.path.isdir(self._path):
                    raise NotADirectoryError(self._path)
            except OSError as exc:
                raise IndexUnavailableError(
                    f"cannot open the text index at {self._path!r}: {exc}" + REBUILD_HINT
                ) from exc
            self._follow()
        # Parses queries (every shard shares the schema and the analyzer).
        self._index: tantivy.Index | None = self._new_index(None, parses_queries=True)

    # ------------------------------------------------------------ lifecycle

    def _new_index(self, path: str | None, *, parses_queries: bool) -> tantivy.Index:
        try:
            if path is None:
                index = tantivy.Index(self._schema)
            else:
                index = tantivy.Index(self._schema, path=path, reuse=True)
            _register(index, parses_queries=parses_queries)
        except (OSError, ValueError) as exc:
            raise IndexUnavailableError(
                f"cannot open the text index at {path!r}: {exc}" + REBUILD_HINT
            ) from exc
        return index

    def _open_existing(self, path: str) -> tantivy.Index:
        index = tantivy.Index.open(path)
        _register(index, parses_queries=False)
        return index

    def close(self) -> None:
        """Release every shard; later calls fail."""
        with self._write_lock, self._lock:
            for rid in list(self._held):
                held = self._held.pop(rid)
                if held is not None:
                    _settle(held[1])
            self._lost |= self._uncommitted
            self._uncommitted.clear()
            self._index = None
            self._shards.clear()
            self._used.clear()
            self._ram.clear()
            self._parsed.clear()
            self._parsed_for = None

    def _parser(self) -> tantivy.Index:
        index = self._index
        if index is None:
            raise IndexUnavailableError("the text index is closed")
        if self._legacy:
            raise IndexUnavailableError(
                f"the text index at {self._path!r} has the layout of an older version "
                "(one index for every resource); run `scripts/reindex.py --rebuild`"
            )
        return index

    def _follow(self) -> bool:
        """Notice a relinked ``index_path`` (``reindex --rebuild``): drop every shard.

        Returns whether the path now resolves elsewhere.
        """
        assert self._path is not None
        resolved = os.path.realpath(self._path)
        if resolved == self._resolved:
            return False
        with self._lock:
            self._resolved = resolved
            self._shards.clear()
            self._used.clear()
            # One index for every resource, directly in the directory.
            self._legacy = os.path.exists(os.path.join(resolved, _META))
        return True

    # ------------------------------------------------------------ shards

    def _generation(self, rid: str) -> object:
        """What identifies the shard's latest commit; ``None`` when it has none."""
        if self._path is None:
            return self._commits.get(rid)
        try:
            st = os.stat(os.path.join(self._path, rid, _META))
        except FileNotFoundError:
            if not os.path.isdir(self._path):
                # The index itself is gone (deleted, or moved away under a
                # running process): not "no units", which answers nothing.
                raise IndexUnavailableError(
                    f"the text index {self._path} has disappeared" + REBUILD_HINT
                ) from None
            return None  # no units committed for it
        except NotADirectoryError:
            # Its shard (or the index) is a file: damage, not "no units" (a
            # search would answer nothing, silently).
            raise IndexUnavailableError(
                f"the text index of {rid} at {os.path.join(self._path, rid)!r} is not a "
                "directory" + REBUILD_HINT
            ) from None
        except OSError as exc:
            raise IndexUnavailableError(
                f"cannot read the text index: {exc}" + REBUILD_HINT
            ) from exc
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _shard(self, rid: str) -> _Shard | None:
        """The shard of ``rid`` as of its latest commit (reloaded only if it moved)."""
        generation = self._generation(rid)
        cached = self._shards.get(rid)
        if cached is not None and cached.generation == generation:
            self._used[rid] = next(self._clock)
            return cached
        with self._lock:
            return self._load(rid)

    def _queried(self, rid: str) -> _Shard | None:
        """:meth:`_shard` for a query: a shard missing while ``expected``
        counts units of its resource is an error, not "no units"."""
        shard = self._shard(rid)
        if shard is None and self._expected is not None and self._path is not None:
            # Looked at again after the catalog's answer: a shard swapped in
            # by two renames (no renameat2) is missing for microseconds only,
            # and a session removes it before the catalog rows follow.
            units = self._expected(rid, lambda: self._generation(rid) is None)
            if units:
                where = os.path.join(self._resolved or self._path, rid)
                raise IndexUnavailableError(
                    f"the text index of resource {rid} ({where}) is missing while the "
                    f"catalog records {units} units of it: `acms reindex --resource "
                    f"{rid}` writes it again (`acms reindex --rebuild`: every index)"
                )
        return shard

    def check_readable(self, resource_id: str) -> None:
        """Open the resource's shard as a query would (its commit record and
        the files it names, whose footers are checked; no document is read):
        ``acms status`` names a damaged or missing shard before a query does.

        Raises:
            ValueError: an invalid ULID.
            IndexUnavailableError: the shard cannot be opened, or is missing
                while ``expected`` counts units of it.
        """
        rid = canonical_ulid(resource_id)
        self._parser()
        self._queried(rid)

    def _keep(self, shard: _Shard) -> None:
        """Cache ``shard`` as its resource's latest (the caller holds ``_lock``);
        beyond ``max_open_shards``, close the least recently used quarter.

        Closing is dropping the reference: a search that still holds the
        shard keeps it open until it returns.
        """
        self._shards[shard.rid] = shard
        self._used[shard.rid] = next(self._clock)
        if len(self._shards) <= self._max_open:
            return
        used = self._used
        by_age = sorted(self._shards, key=lambda rid: used.get(rid, -1))
        for rid in by_age[: len(by_age) - max(1, self._max_open * 3 // 4)]:
            del self._shards[rid]
        self._used = {rid: used.get(rid, -1) for rid in self._shards}
        _log.debug("acms.tantivy_text.shards_closed", closed=len(by_age) - len(self._shards))

    def _load(self, rid: str) -> _Shard | None:
        if self._path is not None and self._follow():
            self._parser()  # a rebuild may have installed an index of the old layout
        generation = self._generation(rid)
        cached = self._shards.get(rid)
        if cached is not None and cached.generation == generation:
            return cached  # another thread loaded it meanwhile
        if generation is None:
            self._shards.pop(rid, None)
            return None
        started = time.perf_counter()
        current, directory = True, None
        try:
            if self._path is not None:
                path = os.path.join(self._resolved, rid)
                st = os.stat(path)
                directory = (st.st_dev, st.st_ino)
                if cached is not None and cached.directory != directory:
                    cached = None  # migrated by another process: a new directory
            if cached is not None:
                index = cached.index
                index.reload()
                current = cached.current
            elif self._path is None:
                index = self._ram[rid]
            else:
                current = _schema_is_current(path)
                index = self._open_existing(path)
            searcher = index.searcher()
        except (OSError, ValueError) as exc:
            if self._generation(rid) is None:  # removed meanwhile
                self._shards.pop(rid, None)
                return None
            raise IndexUnavailableError(
                f"cannot read the text index of {rid}: {exc}" + REBUILD_HINT
            ) from exc
        shard = self._new_shard(rid, index, searcher, generation, current, directory)
        self._keep(shard)
        _log.debug(
            "acms.tantivy_text.shard_loaded",
            resource_id=rid,
            reloaded=cached is not None,
            units=shard.num_docs,
            ms=round((time.perf_counter() - started) * 1000, 3),
        )
        return shard

    def _present(self) -> list[str]:
        """ULIDs that have a shard directory (or RAM index), possibly empty."""
        if self._path is None:
            return sorted(self._ram)
        try:
            names = os.listdir(self._path)
        except OSError as exc:
            raise IndexUnavailableError(
                f"cannot read the text index: {exc}" + REBUILD_HINT
            ) from exc
        return sorted(name for name in names if is_ulid(name) and name == name.upper())

    # ------------------------------------------------------------ read side

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
        """Search the units of the resources in ``scope`` (see :class:`TextBackend`).

        ``max_results`` may be any positive int; it is clamped to the number of
        in-scope units.  ``syntax="plain"`` (default) accepts any string (see
        ``tantivy_query``); ``path`` (a glob, see ``text_query``) and ``lang``
        restrict the matches inside the engine (a regex over the exact path
        terms and a language term, both required clauses scored 0), so the
        top k of the filtered matches are exact and scores are unchanged.
        Each result's ``metadata["match_lines"]`` lists the file's line
        numbers of the chunk lines holding a query term (at most 20).

        With ``syntax="tantivy"``, the limits (in ``tantivy_query``): a query may be at
        most :data:`MAX_QUERY_CHARS` characters long, nest parentheses and
        ``NOT`` at most
        :data:`MAX_QUERY_DEPTH` deep and hold at most :data:`MAX_QUERY_TERMS`
        terms after analysis (``AND``/``OR``/``NOT`` aside; an identifier
        counts as its parts).  A phrase's slop is at most
        :data:`MAX_PHRASE_SLOP`; a phrase with slop holds at most
        :data:`MAX_SLOPPY_PHRASE_TERMS` terms, none more than
        :data:`MAX_PHRASE_REPEATS` times, and a query at most
        :data:`MAX_SLOPPY_PHRASES` such phrases; at most
        :data:`MAX_WILDCARD_TERMS` prefix terms and fuzzy distances up to
        :data:`MAX_FUZZY_DISTANCE`.

        Raises:
            TypeError: an argument has the wrong type.
            ValueError: empty query, non-positive ``max_results``, an invalid
                scope member, a bad option, or (tantivy syntax) a query over a
                limit or one the parser rejects (:class:`QueryError`).
            QueryTimeoutError: the search ran past ``query_timeout``.
            IndexUnavailableError: the index cannot be read, or a shard has
                the schema of an older version (run a reindex).
        """
        validate_non_empty(query, "query")
        wanted = self._canonical_scope(scope)
        limit = validate_positive_int(max_results, "max_results")
        options = text_options(syntax, path, lang)
        started = time.monotonic()
        built = self._build(query, options)
        if not wanted or built is None:
            return []
        shards = [s for s in map(self._queried, sorted(wanted)) if s is not None and s.num_docs]
        if not shards:
            return []
        for shard in shards:
            if not shard.current:
                raise IndexUnavailableError(
                    f"the text index of {shard.rid} has the schema of an older version; "
                    "run `scripts/reindex.py --rebuild` (a reindex that rewrites any of "
                    "the resource's files also upgrades it)"
                )
        # Tantivy allocates for the limit and panics near 2**63: never ask
        # for more than there are documents.
        limit = min(limit, sum(s.num_docs for s in shards))
        # On a search thread, so the caller can give up at the deadline.  One
        # task for every shard: splitting them over two threads was no faster
        # on 2 cores (interleaved A/B, 100 shards: 4.8 vs 4.5 ms).
        if options.syntax == "plain" and len(shards) > 1:
            # Each shard's clauses reweighted to the scope's statistics.
            search = functools.partial(self._search_scope, shards, query, options, limit)
        else:
            search = functools.partial(self._search_shards, [(s, built) for s in shards], limit)
        if self._inline(shards, options.syntax, limit):
            if time.monotonic() - started > self._timeout:  # spent opening shards
                self._timed_out()
            hits = search()
            if time.monotonic() - started > self._timeout:
                self._timed_out()
        else:
            future = _THREADS.submit(search)
            try:
                hits = future.result(timeout=max(0.0, started + self._timeout - time.monotonic()))
            except FutureTimeout:
                future.cancel()
                self._timed_out()
        matcher = self._line_matcher(query, options.syntax)
        results: list[TextResult] = []
        for raw, uri, doc, rid in hits:
            # _read_stored, without reading the URI and resource id again and
            # without a second copy of the metadata.
            stored = _json_object(bytes(doc.get_first("metadata") or b"{}").decode("ascii"))
            metadata = {str(k): str(v) for k, v in stored.items()}
            content = bytes(doc.get_first("body") or b"").decode("utf-8", "surrogatepass")
            metadata["resource_id"] = rid
            metadata["match_lines"] = matcher.lines(content, metadata.get("start_line"))
            results.append(TextResult(uri, content, _normalise(raw), metadata))
        return results

    def _timed_out(self) -> NoReturn:
        _log.warning("acms.tantivy_text.query_timed_out", seconds=self._timeout)
        # A time-out, not a cap: the same query may be answered when the
        # machine is less busy (a service answers 503, not 400).
        raise QueryTimeoutError(
            f"the text query ran past its time limit of {self._timeout:g} s"
        ) from None

    def _line_matcher(self, query: str, syntax: str) -> LineMatcher:
        """The ``match_lines`` of a query's terms, built once per query text."""
        key = (query, syntax)
        matcher = self._matchers.get(key)
        if matcher is None:
            terms = query_terms(self._analyzer, query, syntax=syntax)
            matcher = LineMatcher(terms, self._line_terms, ascii_token=ASCII_TOKEN)
            with self._lock:
                self._matchers[key] = matcher
                while len(self._matchers) > _PARSED_CACHE_SIZE:
                    self._matchers.popitem(last=False)
        return matcher

    def _line_terms(self, line: str) -> Iterable[str]:
        if line.isascii():  # the analyzer's rules, in Python (no engine call)
            return map(str.lower, ASCII_TOKEN.findall(line))
        return self._analyzer.analyze(analysable(line))

    def _build(self, query: str, options: TextOptions) -> tantivy.Query | None:
        """The engine query of ``query`` with ``options``; ``None`` matches nothing."""
        parser = self._parser()
        key = (query, *options.key())
        if parser is self._parsed_for:
            cached = self._parsed.get(key, _MISSING)
            if cached is not _MISSING:
                return cached  # type: ignore[return-value]
        built: tantivy.Query | None
        if options.syntax == "tantivy":
            built = self._builder.build(parser, query)
            if built is not None and options.filtered:
                regex = None if options.path is None else glob_regex(options.path)
                built = filter_query(self._schema, built, path_regex=regex, lang=options.lang)
        else:
            # From the plan a search over several shards reweights: the term
            # queries and the path regex are built once per query.
            clauses, terms, must = self._scope_plan(query, options)
            built = scoring_query(self._schema, clauses, terms) if clauses else None
            if built is not None and must:
                built = filtered(built, must)
        with self._lock:
            if self._parsed_for is not parser:
                self._parsed_for = parser
                self._parsed.clear()
            self._parsed[key] = built
            while len(self._parsed) > _PARSED_CACHE_SIZE:
                self._parsed.popitem(last=False)
        return built

    def _canonical_scope(self, scope: object) -> frozenset[str]:
        """:func:`validate_scope`, remembering recent scopes of plain strings."""
        if type(scope) is frozenset:
            known = self._scopes.get(scope)
            # Equal members of another type could pass the lookup: check them.
            if known is not None and all(type(member) is str for member in scope):
                return known
        wanted = validate_scope(scope)
        if type(scope) is frozenset and all(type(member) is str for member in scope):
            with self._lock:
                if len(self._scopes) >= _SCOPE_CACHE_SIZE:
                    del self._scopes[next(iter(self._scopes))]
                self._scopes[scope] = wanted
        return wanted

    def _scope_plan(self, query: str, options: TextOptions) -> _Plan:
        """The plain query's clauses and the options' filter clauses, built once per query."""
        key = (query, *options.key())
        plan = self._plans.get(key)
        if plan is not None:
            return plan
        clauses = self._plain.clauses(query) or ()
        regex = None if options.path is None else glob_regex(options.path)
        terms = [tantivy.Query.term_query(self._schema, f, v) for f, v, _ in clauses]
        plan = (clauses, terms, filters(self._schema, path_regex=regex, lang=options.lang))
        with self._lock:
            self._plans[key] = plan
            while len(self._plans) > _PARSED_CACHE_SIZE:
                self._plans.popitem(last=False)
        return plan

    def _search_scope(
        self, shards: list[_Shard], query: str, options: TextOptions, k: int
    ) -> list[_Hit]:
        """:meth:`_search_shards` of a plain query, scored with the scope's statistics.

        Each clause of a shard's query is weighted by the ratio of the term's
        IDF over all the in-scope shards to its IDF in that shard
        (:func:`scope_idf_factors`), so the shards' scores are those of one
        index of exactly the in-scope documents (each shard keeps its own
        average field lengths).  A shard holding none of the terms is not searched.
        """
        clauses, terms, must = self._scope_plan(query, options)
        try:
            stats = [shard.doc_freqs(clauses) for shard in shards]
        except (OSError, ValueError) as exc:
            raise IndexUnavailableError(
                f"cannot read the text index: {exc}" + REBUILD_HINT
            ) from exc
        plan: list[tuple[_Shard, tantivy.Query]] = []
        for shard, scoring in zip(shards, scope_queries(terms, clauses, stats), strict=True):
            if scoring is not None:
                plan.append((shard, filtered(scoring, must) if must else scoring))
        return self._search_shards(plan, k)

    def _search_shards(self, plan: list[tuple[_Shard, tantivy.Query]], k: int) -> list[_Hit]:
        """The top ``k`` hits of the shards, each searched with its query, by
        (score desc, URI); runs on a search thread.

        Stored documents are read only for the hits at or above the k-th
        best score of these shards (the k winners and anything tied with the
        last of them), never for each shard's own top k.
        """
        fetched: list[tuple[_Shard, tantivy.Query, list[tuple[Any, tantivy.DocAddress]], int]] = []
        for shard, query in plan:
            limit = min(k, shard.num_docs)
            fetched.append((shard, query, self._run(shard, query, limit), limit))
        scores = sorted((score for _, _, hits, _ in fetched for score, _ in hits), reverse=True)
        if not scores:
            return []
        cutoff = scores[min(k, len(scores)) - 1]
        found: list[_Hit] = []
        for shard, query, hits, limit in fetched:
            # A shard that filled its limit may hold more hits tied with the
            # cutoff: they compete by URI, so fetch until past the cutoff.
            while len(hits) == limit < shard.num_docs and hits[-1][0] >= cutoff:
                limit = min(limit * 2, shard.num_docs)
                hits = self._run(shard, query, limit)
            found.extend(self._read_hits(shard, hits, cutoff))
        found.sort(key=lambda hit: (-hit[0], hit[1]))
        return found[:k]

    @staticmethod
    def _read_hits(
        shard: _Shard, hits: list[tuple[Any, tantivy.DocAddress]], cutoff: float
    ) -> list[_Hit]:
        found: list[_Hit] = []
        try:
            for score, addr in hits:
                if score < cutoff:
                    break  # hits come best first
                doc = shard.searcher.doc(addr)
                rid = str(doc.get_first("resource_id"))
                if rid != shard.rid:  # cannot happen: a shard holds one resource
                    _log.error("acms.tantivy_text.foreign_unit", shard=shard.rid, unit_of=rid)
                    continue
                found.append((float(score), str(doc.get_first("uko_uri")), doc, rid))
        except (OSError, ValueError) as exc:
            raise IndexUnavailableError(
                f"cannot read the text index: {exc}" + REBUILD_HINT
            ) from exc
        return found

    @staticmethod
    def _run(
        shard: _Shard, query: tantivy.Query, limit: int
    ) -> list[tuple[Any, tantivy.DocAddress]]:
        try:
            return shard.searcher.search(query, limit, count=False).hits
        except ValueError as exc:
            if _READ_FAILED.search(str(exc)):
                # Bytes of a segment that do not decode (damaged on disk): not
                # the query's fault, which "invalid query" (exit 2) said.
                raise IndexUnavailableError(
                    f"cannot read the text index of resource {shard.rid}: "
                    f"{str(exc)[:300]}" + REBUILD_HINT
                ) from exc
            # Some queries parse but fail here, e.g. ``content:*`` (needs a fast field).
            raise QueryError(f"invalid query: {exc}") from exc
        except BaseException as exc:  # PyO3 PanicException derives from BaseException
            reraise_fatal(exc)
            # A query that parsed and passed the shape limits, failing inside
            # the engine: a damaged segment ("index out of bounds", "mid > len")
            # as reviewers found, or an engine bug; either way not the caller's.
            why = (str(exc).splitlines() or [type(exc).__name__])[0][:300]
            raise IndexUnavailableError(
                f"the text index of resource {shard.rid} failed on this query: {why}" + REBUILD_HINT
            ) from exc

    def unit_uris(self, resource_id: str) -> set[str]:
        """URIs of the units indexed for a resource.

        Raises:
            TypeError / ValueError: ``resource_id`` is not a ULID.
            IndexUnavailableError: the index cannot be read.
        """
        return {str(doc.get_first("uko_uri")) for doc in self._all_docs(resource_id)}

    def _all_docs(self, resource_id: str) -> list[tantivy.Document]:
        """Every stored document of a resource's shard (none without a shard)."""
        rid = canonical_ulid(resource_id)
        self._parser()
        shard = self._shard(rid)
        if shard is None or shard.num_docs == 0:
            return []
        try:
            searcher = shard.searcher
            hits = searcher.search(tantivy.Query.all_query(), shard.num_docs, count=False).hits
            return [searcher.doc(addr) for _, addr in hits]
        except (OSError, ValueError) as exc:
            raise IndexUnavailableError(
                f"cannot read the text index: {exc}" + REBUILD_HINT
            ) from exc

    def units(self, resource_id: str) -> Iterator[IndexUnit]:
        """Every unit stored for a resource (URI, content, metadata), in URI order.

        What a change of embedder re-embeds without re-reading any file.

        Raises:
            TypeError / ValueError: ``resource_id`` is not a ULID.
            IndexUnavailableError: the index cannot be read.
        """
        stored = [_read_stored(doc) for doc in self._all_docs(resource_id)]
        stored.sort(key=lambda s: s.uri)
        return iter([IndexUnit(s.uri, s.content, s.metadata) for s in stored])

    def unit_count(self, resource_id: str) -> int:
        """How many units ``resource_id`` has, as of its shard's last commit:
        read from the shard's ``meta.json`` (no document is read, and an
        unopened shard stays closed).

        Raises:
            ValueError: an invalid ULID.
            IndexUnavailableError: the index cannot be read.
        """
        rid = canonical_ulid(resource_id)
        self._parser()
        if self._path is not None:
            self._follow()
            self._parser()
            docs = _committed_docs(os.path.join(self._resolved, rid, _META))
            if docs is not None:
                return docs
        shard = self._shard(rid)  # in RAM, or a commit record of another shape
        return 0 if shard is None else shard.num_docs

    def resource_ids(self) -> set[str]:
        """ULIDs of the resources that have at least one unit.

        Raises:
            IndexUnavailableError: the index cannot be read.
        """
        self._parser()
        if self._path is not None:
            self._follow()
            self._parser()
        found = set()
        for rid in self._present():
            if self._path is not None and rid not in self._shards:
                # Not opened yet: its commit record says how many documents
                # it holds (opening each shard made a CLI's prune cost ~1.5 ms
                # per resource of the data directory).
                docs = _committed_docs(os.path.join(self._resolved, rid, _META))
                if docs is not None:
                    if docs:
                        found.add(rid)
                    continue
            shard = self._shard(rid)
            if shard is not None and shard.num_docs:
                found.add(rid)
        return found

    # ------------------------------------------------------------ write side

    def upsert(
        self, resource_id: str, units: Sequence[IndexUnit], *, delete_uris: Iterable[str] = ()
    ) -> None:
        """Atomically delete ``delete_uris`` and add or replace ``units`` (one commit).

        A unit whose URI is already indexed replaces it; when ``units`` repeats
        a URI the last one wins.  Only the resource's own index is written.

        Raises:
            TypeError: ``units`` holds something other than :class:`IndexUnit`.
            ValueError: an invalid ULID, or a unit or URI of another resource.
            IndexUnavailableError: the change could not be written.
        """
        self._upsert(resource_id, units, None, delete_uris)

    @property
    def preparer(self) -> Callable[[str], tuple[str, str]]:
        """:func:`prepare_content`: what a planning worker runs on each unit's
        content so this process does not (see :meth:`upsert_prepared`)."""
        return prepare_content

    def upsert_prepared(
        self,
        resource_id: str,
        units: Sequence[IndexUnit],
        prepared: Sequence[object],
        *,
        delete_uris: Iterable[str] = (),
    ) -> None:
        """:meth:`upsert`, with ``prepare_content(unit.content)`` (or None) per unit.

        The prepared text is trusted to be that function's result (only its
        shape is checked): it is what the content field indexes.

        Raises:
            TypeError: a unit or a prepared entry of the wrong type.
            ValueError: as :meth:`upsert`, or not one prepared entry per unit.
            IndexUnavailableError: the change could not be written.
        """
        if isinstance(units, str | bytes) or not isinstance(units, Sequence):
            raise TypeError("units must be a sequence of IndexUnit")
        if isinstance(prepared, str | bytes) or not isinstance(prepared, Sequence):
            raise TypeError("prepared must be a sequence with one entry per unit")
        if len(prepared) != len(units):
            raise ValueError("prepared must have one entry per unit")
        self._upsert(resource_id, units, [_check_prepared(p) for p in prepared], delete_uris)

    def _upsert(
        self,
        resource_id: str,
        units: Sequence[IndexUnit],
        prepared: Sequence[tuple[str, str] | None] | None,
        delete_uris: Iterable[str],
    ) -> None:
        rid = canonical_ulid(resource_id)
        if isinstance(units, str | bytes) or not isinstance(units, Sequence):
            raise TypeError("units must be a sequence of IndexUnit")
        latest: dict[str, tuple[IndexUnit, tuple[str, str] | None]] = {}
        for n, unit in enumerate(units):
            if not isinstance(unit, IndexUnit):
                raise TypeError(f"units must be IndexUnit, not {type(unit).__name__}")
            if unit.resource_id != rid:
                raise ValueError(f"unit {unit.uko_uri[:80]!r} does not belong to {rid}")
            latest[unit.uko_uri] = (unit, None if prepared is None else prepared[n])
        removed = self._own_uris(rid, delete_uris, "delete_uris")
        if not latest and not removed:
            return

        def change(writer: tantivy.IndexWriter) -> None:
            for uri in removed | latest.keys():
                writer.delete_documents_by_term("uko_uri", uri)
            for unit, ready in latest.values():
                writer.add_document(
                    _document(unit.uko_uri, rid, unit.content, unit.metadata, ready)
                )

        self._write(rid, change, create=bool(latest))

    def delete(self, resource_id: str, uris: Iterable[str] | None = None) -> None:
        """Delete the given units of a resource, or all of them when ``uris`` is None.

        A resource left without units loses its index.

        Raises:
            ValueError: an invalid ULID, or a URI of another resource.
            IndexUnavailableError: the change could not be written.
        """
        rid = canonical_ulid(resource_id)
        if uris is None:

            def delete_all(writer: tantivy.IndexWriter) -> None:
                writer.delete_documents_by_term("resource_id", rid)

            self._write(rid, delete_all, create=False)
            return
        removed = self._own_uris(rid, uris, "uris")
        if not removed:
            return

        def change(writer: tantivy.IndexWriter) -> None:
            for uri in removed:
                writer.delete_documents_by_term("uko_uri", uri)

        self._write(rid, change, create=False)

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

    def _writable(self, rid: str, *, create: bool) -> tantivy.Index | None:
        """The index to write ``rid``'s change to; ``None`` if it has none and
        ``create`` is false."""
        self._parser()
        if self._path is None:
            index = self._ram.get(rid)
            if index is None and create:
                index = self._ram[rid] = self._new_index(None, parses_queries=False)
            return index
        if self._follow():
            self._parser()
        shard = self._shard(rid)
        if shard is not None and not shard.current:
            return self._migrate(shard)
        if shard is not None:
            return shard.index
        if not create:
            return None
        path = os.path.join(self._resolved, rid)
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as exc:
            raise IndexUnavailableError(
                f"cannot create the text index {path!r}: {exc}" + REBUILD_HINT
            ) from exc
        return self._new_index(path, parses_queries=False)

    def _new_shard(
        self,
        rid: str,
        index: tantivy.Index,
        searcher: tantivy.Searcher,
        generation: object,
        current: bool,
        directory: object,
    ) -> _Shard:
        """The shard of ``rid`` as ``searcher`` sees it (loaded or just committed)."""
        return _Shard(
            rid,
            index,
            searcher,
            generation,
            searcher.num_docs,
            current,
            directory,
            self._index_bytes(rid),
        )

    def _index_bytes(self, rid: str) -> int | None:
        """The bytes of the files in ``rid``'s shard directory (segments not
        yet collected count too); None in RAM or if it cannot be listed."""
        if self._path is None:
            return None
        try:
            with os.scandir(os.path.join(self._resolved, rid)) as entries:
                return sum(
                    e.stat(follow_symlinks=False).st_size
                    for e in entries
                    if e.is_file(follow_symlinks=False)
                )
        except OSError:
            return None

    def _inline(self, shards: list[_Shard], syntax: str, limit: int) -> bool:
        """Whether this search runs on the caller's thread (module docstring)."""
        if syntax != "plain" or self._timeout < INLINE_MIN_TIMEOUT or limit > INLINE_MAX_RESULTS:
            return False
        total = units = 0
        for shard in shards:
            if shard.index_bytes is None:
                return False
            total += shard.index_bytes
            units += shard.num_docs
        return total <= INLINE_MAX_BYTES and units <= INLINE_MAX_UNITS

    def _directory(self, rid: str) -> object:
        if self._path is None:
            return None
        try:
            st = os.stat(os.path.join(self._resolved, rid))
        except OSError:
            return None
        return (st.st_dev, st.st_ino)

    def _migrate(self, shard: _Shard) -> tantivy.Index:
        """Rewrite a shard of an older schema with the current one; its new index.

        Every field is derived from what the shard stores (URI, resource,
        body, metadata), so the migration loses nothing.  The new shard is
        built aside, under the old shard's writer lock, then swapped in with
        one atomic exchange (``renameat2``; where it is missing, two renames,
        between which a reader sees the resource without units).
        """
        assert self._path is not None
        rid, root = shard.rid, self._resolved
        final = os.path.join(root, rid)
        aside = os.path.join(root, f"{_TRASH_PREFIX}{rid}-new-{os.getpid()}-{time.time_ns()}")
        old_writer = self._acquire_writer(shard.index)
        try:
            searcher = shard.searcher
            hits = searcher.search(tantivy.Query.all_query(), max(1, shard.num_docs)).hits
            stored = [_read_stored(searcher.doc(addr)) for _, addr in hits]
            os.makedirs(aside)
            fresh = self._new_index(aside, parses_queries=False)
            writer = fresh.writer(heap_size=_WRITER_HEAP, num_threads=1)
            for unit in stored:
                writer.add_document(_document(unit.uri, rid, unit.content, unit.metadata))
            writer.commit()
            writer.wait_merging_threads()
            del writer, fresh
            try:
                exchange_paths(aside, final)  # one step: readers never miss the shard
                trash = aside
            except OSError:
                trash = os.path.join(root, f"{_TRASH_PREFIX}{rid}-{os.getpid()}-{time.time_ns()}")
                os.rename(final, trash)
                os.rename(aside, final)
        except (OSError, ValueError) as exc:
            raise IndexUnavailableError(
                f"cannot migrate the text index of {rid} to the current schema: {exc}"
            ) from exc
        finally:
            with contextlib.suppress(OSError, ValueError):
                old_writer.rollback()
            del old_writer
        import shutil

        shutil.rmtree(trash, ignore_errors=True)
        with self._lock:
            self._shards.pop(rid, None)
        _log.info("acms.tantivy_text.shard_migrated", resource_id=rid, units=len(stored))
        return self._new_index(final, parses_queries=False)

    def staged_writes(self, resource_id: str) -> contextlib.AbstractContextManager[None]:
        """Group the resource's writes and commit them only at
        :meth:`commit_staged` (see ``StagedWrites``).

        An indexing session commits once per several batches: each commit
        makes a segment, and Tantivy's merges of many small segments were
        ~2 s of the 13 s an indexing writer spent on the standard library.
        Until committed, the writes use the writer's memory budget (it
        writes a segment to disk, uncommitted, when that is full).

        Raises:
            ValueError: an invalid ULID, or the resource's writes are
                already grouped.
        """
        return self._grouped(resource_id, staged=True)

    def commit_staged(self, resource_id: str) -> None:
        """Commit what the resource's staged block wrote since the last commit.

        Raises:
            ValueError: an invalid ULID.
            IndexUnavailableError: the commit failed (the staged writes are lost).
        """
        rid = canonical_ulid(resource_id)
        with self._write_lock:
            if rid in self._lost:
                self._lost.discard(rid)
                raise IndexUnavailableError(
                    f"the text writes staged for {rid} were dropped (a failed write, or close)"
                )
            held = self._held.get(rid)
            if rid not in self._uncommitted or held is None:
                return
            self._uncommitted.discard(rid)
            index, writer = held
            try:
                writer.commit()
                if not self._committed(rid, index):
                    self._held[rid] = None
                    _settle(writer)
            except BaseException as exc:
                self._held[rid] = None
                with contextlib.suppress(OSError, ValueError):
                    writer.rollback()
                _settle(writer)
                reraise_fatal(exc)
                if isinstance(exc, IndexUnavailableError):
                    raise
                raise IndexUnavailableError(f"cannot commit the text index: {exc}") from exc

    def grouped_writes(self, resource_id: str) -> contextlib.AbstractContextManager[None]:
        """Keep the resource's writer open between the writes of the block.

        Each write still commits (and is visible) when it returns; what
        changes is that Tantivy's segment merges, which a write otherwise
        waits for, run in the background while the caller prepares the next
        batch, and are waited for once, when the block ends.  The writer
        lock of the resource's shard is held for the whole block (other
        writers of it wait, as they would for one long write).

        Raises:
            ValueError: an invalid ULID, or the resource's writes are
                already grouped.
        """
        return self._grouped(resource_id, staged=False)

    @contextlib.contextmanager
    def _grouped(self, resource_id: str, *, staged: bool) -> Iterator[None]:
        rid = canonical_ulid(resource_id)
        with self._write_lock:
            if rid in self._held:
                raise ValueError(f"the writes of {rid} are already grouped")
            self._held[rid] = None
            if staged:
                self._staging.add(rid)
        try:
            yield
            self.commit_staged(rid)  # not after an exception: the writer drops them
        finally:
            with self._write_lock:
                self._staging.discard(rid)
                self._uncommitted.discard(rid)
                self._lost.discard(rid)
                held = self._held.pop(rid, None)
                if held is not None:
                    _settle(held[1])

    def _writer_for(self, rid: str, index: tantivy.Index) -> tantivy.IndexWriter:
        """The writer a grouped block kept for ``index``, or a new one."""
        held = self._held.get(rid)
        if held is not None:
            if held[0] is index:
                return held[1]
            self._held[rid] = None  # the shard was replaced: its writer goes
            _settle(held[1])
        return self._acquire_writer(index)

    def _write(
        self, rid: str, change: Callable[[tantivy.IndexWriter], None], *, create: bool
    ) -> None:
        with self._write_lock:
            held = self._held.get(rid)
            if held is not None and rid in self._staging:
                # The staged block's writer: its shard may have no commit yet
                # (opening it again would give another index), and the block
                # holds its writer lock, so no one replaced it.
                index, writer = held
            else:
                found = self._writable(rid, create=create)
                if found is None:
                    return
                index, writer = found, self._writer_for(rid, found)
            keep = False
            try:
                change(writer)
                if rid in self._staging:  # committed by commit_staged
                    self._uncommitted.add(rid)
                    keep = True
                    return
                writer.commit()
                keep = self._committed(rid, index) and rid in self._held
            except BaseException as exc:
                if rid in self._uncommitted:  # a rollback drops the staged writes too
                    self._uncommitted.discard(rid)
                    self._lost.add(rid)
                with contextlib.suppress(OSError, ValueError):
                    writer.rollback()
                reraise_fatal(exc)
                if isinstance(exc, IndexUnavailableError):
                    raise
                raise IndexUnavailableError(f"cannot write the text index: {exc}") from exc
            finally:
                if keep:
                    self._held[rid] = (index, writer)
                else:
                    if rid in self._held:
                        self._held[rid] = None
                    _settle(writer)
                del writer

    def _committed(self, rid: str, index: tantivy.Index) -> bool:
        """After a commit: the resource's shard as committed, or removed when
        it holds nothing.  False: removed (its writer must go)."""
        if self._path is None:
            self._commits[rid] = self._commits.get(rid, 0) + 1
        # Read before reloading: a later commit can only make it look stale.
        generation = self._generation(rid)
        index.reload()
        searcher = index.searcher()
        if searcher.num_docs == 0:
            # Removed while this writer still holds the resource's lock.
            self._remove(rid)
            return False
        # Only this resource's shard moves; every other one stays as loaded.
        directory = self._directory(rid)
        shard = self._new_shard(rid, index, searcher, generation, True, directory)
        with self._lock:
            self._keep(shard)
        return True

    def _remove(self, rid: str) -> None:
        """Drop an empty shard: renamed aside in one step, then deleted."""
        with self._lock:
            self._shards.pop(rid, None)
            if self._path is None:
                self._ram.pop(rid, None)
                self._commits.pop(rid, None)
                return
        root = self._resolved
        # Unique without importing a ULID library (~80 ms of a CLI's cold start).
        trash = os.path.join(root, f"{_TRASH_PREFIX}{rid}-{os.getpid()}-{time.time_ns()}")
        try:
            os.rename(os.path.join(root, rid), trash)
        except OSError as exc:
            raise IndexUnavailableError(f"cannot remove the text index of {rid}: {exc}") from exc
        import shutil  # here: it pulls in bz2/lzma, and queries never need it

        # This one, and any a killed process left behind.
        for name in os.listdir(root):
            if name.startswith(_TRASH_PREFIX):
                shutil.rmtree(os.path.join(root, name), ignore_errors=True)

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


def _committed_docs(meta_path: str) -> int | None:
    """The live documents of a shard's last commit, from its ``meta.json``
    (each segment's ``max_doc`` less its deleted documents); None when the
    file is missing or not of the shape this reads (the caller then opens
    the shard)."""
    try:
        with open(meta_path, "rb") as fh:
            meta = json.loads(fh.read())
        total = 0
        for segment in meta["segments"]:
            deletes = segment["deletes"]
            deleted = 0 if deletes is None else deletes["num_deleted_docs"]
            docs = segment["max_doc"] - deleted
            if type(docs) is not int or docs < 0:
                return None
            total += docs
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return total


def _settle(writer: tantivy.IndexWriter) -> None:
    """Let the writer's merges finish and release its lock (the writer is
    spent afterwards)."""
    with contextlib.suppress(OSError, ValueError):
        writer.wait_merging_threads()


def _seconds(value: object, name: str, *, allow_zero: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'non-negative' if allow_zero else 'positive'}")
    return seconds
