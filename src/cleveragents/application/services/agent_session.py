"""What an agent host asks of the indexes, in agent-sized answers.

An :class:`AgentSession` is fixed to the scope the operator chose (projects
and resources); every call may narrow that scope and never widen it.  Every
answer is a JSON object whose compact serialisation (:func:`render`) never
exceeds the call's character budget: results are added best first while they
fit, a hit too large for what is left is shortened (fewer lines, shorter
lines) before it is dropped, and ``"truncated": {"more": N}`` says how many
were left out.  Hits carry integer line numbers and the matching lines of the
chunk (with a line of context), not whole chunks.

The same session backs the MCP tools, the HTTP API, the CLI and the Python
facade, so all four give the same answers.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import unquote

from cleveragents.application.services.chunking import check_language, split_lines
from cleveragents.application.services.fusion import DEFAULT_DEPTH, hybrid_search
from cleveragents.domain.models.acms.backends import (
    GraphBackend,
    GraphResult,
    TextBackend,
    VectorBackend,
    validate_traversal,
    walk_limit_error,
)
from cleveragents.domain.models.acms.embedding import Embedder
from cleveragents.domain.models.acms.errors import (
    IndexUnavailableError,
    QueryError,
    ScopeError,
    WalkLimitError,
)
from cleveragents.domain.models.acms.scope import ScopedView
from cleveragents.domain.models.acms.text_query import text_options
from cleveragents.domain.models.acms.uko import (
    PREDICATES,
    UKO,
    file_uri,
    name_uri,
    path_of,
    resource_id_of,
    unit_uri,
)
from cleveragents.domain.models.acms.ulids import canonical_ulid

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "DEFAULT_BUDGET",
    "ECHO_CHARS",
    "MAX_BUDGET",
    "MAX_LINE",
    "MAX_RESULTS",
    "MIN_BUDGET",
    "READ_FILE_BYTES",
    "AgentSession",
    "FileReader",
    "FileText",
    "SessionScope",
    "check_budget",
    "check_embedded_by",
    "matching_lines",
    "query_terms",
    "render",
]

DEFAULT_BUDGET = 8_000
MIN_BUDGET = 256
MAX_BUDGET = 200_000
MAX_RESULTS = 100
"""``search`` ranks at most this many hits (``max_results``) in one call."""
MAX_LINE = 10**9
"""The highest line number ``read`` takes (a bound on the number, not a file's size)."""
ECHO_CHARS = 200
"""An answer repeats at most this many characters of its query."""
READ_FILE_BYTES = 1024 * 1024
"""``read`` serves files up to this size: the indexer's (every indexed file)."""
_MAX_LINE_CHARS = 200
_MAX_LINES_PER_HIT = 8
# ``context``: the first hits keep _MAX_LINES_PER_HIT lines, the later ones
# fewer, so a budget holds more of the ranking (the right chunk is often 6th-9th).
_CONTEXT_FULL_HITS = 3
_CONTEXT_LINES_AFTER = 3
_MAX_READ_LINES = 2_000
# The most "#" positions a node argument is split at to find a file path.
_MAX_HASH_SPLITS = 8
_TERM = re.compile(r"[A-Za-z][a-z]+|[A-Z]+(?![a-z])|\d+|[^\W\d_]+")
_WORD = re.compile(r"\w+")
_RANGE = re.compile(r"^L(\d+)(?:-L(\d+))?$")
#: A later definition of a name in its file (an overload, a setter):
#: ``#sym=Shapes.area~2`` is a definition of ``Shapes.area``.
_REDEFINED = re.compile(r"~\d+$")
_MODES = ("hybrid", "text", "vector")
_JSON_UNSAFE = re.compile(
    "[\x7f-\x9f\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
_NAME_NODE = name_uri("x")[:-1]
# What ``symbols`` reads: a file's definitions, and each one's row.
_SYMBOL_PREDICATES = frozenset(
    PREDICATES[p] for p in ("defines", "name", "kind", "signature", "line", "endLine")
)
# The arguments an answer repeats (cut as :func:`_echo` and :func:`fit` cut them).
_ECHO_KEYS = ("query", "target", "source", "subject", "start")


class FileText(NamedTuple):
    """A file as read now: its text, and whether its bytes differ from those
    the index holds (line ranges of search hits may then be off)."""

    text: str
    changed: bool = False


#: Reads a file of a resource: (resource id, relative path, max bytes) -> its
#: text, or None when it cannot be read safely (vanished, a symlink, too
#: large).  Raises ValueError when it may no longer be served (it is binary,
#: or holds a secret, now), or to say which of those reasons it is (the
#: data directory's reader does: a deleted file names ``acms reindex``).
FileReader = Callable[[str, str, int], FileText | None]
#: Whether a file of a resource is indexed: (resource id, relative path) -> bool.
IndexedCheck = Callable[[str, str], bool]
#: The registered resources' locations (their root directories): resource id -> path.
Locations = Callable[[], Mapping[str, str]]
#: The embedder (``name:dimension``) that made each given resource's vectors.
EmbeddedBy = Callable[[frozenset[str]], Mapping[str, str]]


def render(response: Mapping[str, Any]) -> str:
    """The compact JSON text of a response: what budgets are measured on.

    DEL, C1 controls, line separators, bidi controls and lone surrogates are
    written as ``\\uXXXX`` escapes (the same JSON value), so an answer printed
    on a terminal cannot drive it (C0 controls are escaped by JSON itself).
    """
    text = json.dumps(response, ensure_ascii=False, separators=(",", ":"))
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def query_terms(query: str) -> set[str]:
    """Lower-case terms of a query: whole words and their identifier parts."""
    terms: set[str] = set()
    for word in _WORD.findall(query):
        if len(word) > 1:
            terms.add(word.lower())
        terms.update(part.lower() for part in _TERM.findall(word) if len(part) > 1)
    return terms


def matching_lines(
    content: str,
    start_line: int,
    terms: Iterable[str],
    *,
    context: int = 1,
    max_lines: int = _MAX_LINES_PER_HIT,
) -> list[dict[str, Any]]:
    """The lines of a chunk that best match the query terms, each with
    ``context`` lines around it, in line order; the first lines when none
    matches.  A line holding a query word whole (``aardvark_helper``) ranks
    above one holding only its parts (``AardvarkEngine``).  At most
    ``max_lines`` lines of at most 200 characters (a longer one is cut and
    carries ``cut``: the characters left out)."""
    lines = content.split("\n")
    wanted = {t.lower() for t in terms}
    scored: list[tuple[int, int]] = []
    for i, line in enumerate(lines):
        parts = wanted & query_terms(line)
        if parts:
            whole = wanted & {w.lower() for w in _WORD.findall(line)}
            scored.append((-(3 * len(whole) + len(parts)), i))
    scored.sort()
    keep: set[int] = set()
    for _, i in scored or [(0, 0)]:
        around = range(max(0, i - context), min(len(lines), i + context + 1))
        if keep and len(keep | set(around)) > max_lines:
            break
        keep.update(around)
    return [_line(start_line + j, lines[j]) for j in sorted(keep)[:max_lines]]


def _line(number: int, text: str) -> dict[str, Any]:
    """A hit's line: at most 200 characters, and ``cut`` (the characters
    left out) when it had more, as a line cut to fit the budget says."""
    if len(text) <= _MAX_LINE_CHARS:
        return {"line": number, "text": text}
    return {"line": number, "text": text[:_MAX_LINE_CHARS], "cut": len(text) - _MAX_LINE_CHARS}


@dataclass(frozen=True, slots=True)
class SessionScope:
    """The scope the operator fixed: resource ULIDs, and project names -> their ULIDs."""

    resources: frozenset[str]
    projects: Mapping[str, frozenset[str]]

    def narrow(
        self, projects: Sequence[str] | None = None, resources: Sequence[str] | None = None
    ) -> frozenset[str]:
        """The scope of one call: the named projects and resources, which must
        lie inside this scope (an unknown or outside name is a :class:`ScopeError`);
        all of it when neither is given."""
        if not projects and not resources:
            return self.resources
        chosen: set[str] = set()
        for name in projects or ():
            if not isinstance(name, str) or name not in self.projects:
                raise ScopeError(f"project {name!r} is not in this session's scope")
            chosen |= self.projects[name]
        for rid in resources or ():
            try:
                canonical = canonical_ulid(rid)
            except (TypeError, ValueError):
                raise ScopeError(f"resource {rid!r} is not a resource ULID") from None
            if canonical not in self.resources:
                raise ScopeError(f"resource {canonical} is not in this session's scope")
            chosen.add(canonical)
        return frozenset(chosen)


def check_budget(value: object) -> int:
    """``value`` as a tool's character budget (``None``: the default).

    Raises:
        TypeError: not an int.  ValueError: outside MIN_BUDGET..MAX_BUDGET.
    """
    if value is None:
        return DEFAULT_BUDGET
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("budget must be an int (characters)")
    if not MIN_BUDGET <= value <= MAX_BUDGET:
        raise ValueError(f"budget must be between {MIN_BUDGET} and {MAX_BUDGET} characters")
    return value


def _count(value: object, name: str, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int")
    if not 1 <= value <= high:
        raise ValueError(f"{name} must be between 1 and {high}")
    return value


def _shrunk(item: dict[str, Any], room: int) -> Iterable[dict[str, Any]]:
    """Ever smaller versions of an item for ``room`` characters: a hit with
    fewer lines, then its first line cut; an item's ``text`` cut to the most
    that fits.  A cut text carries ``cut``: the characters left out; a hit
    that lost lines ``lines_cut``: how many (its range still spans them)."""
    lines = item.get("lines")
    if isinstance(lines, list):
        for n in range(len(lines) - 1, 0, -1):
            yield {**item, "lines": lines[:n], "lines_cut": len(lines) - n}
        first = lines[0] if lines else None
        if isinstance(first, dict) and isinstance(first.get("text"), str):
            left = {"lines_cut": len(lines) - 1} if len(lines) > 1 else {}
            for width in (80, 40):
                if width < len(first["text"]):
                    yield {**item, "lines": [_cut(first, width)], **left}
        rest = {k: v for k, v in item.items() if k != "lines"}
        yield {**rest, "lines_cut": len(lines)} if lines else rest
    text = item.get("text")
    if isinstance(text, str) and text:
        widest = _widest_cut(item, room)
        if widest is not None:
            yield _cut(item, widest)


def _cut(item: dict[str, Any], width: int) -> dict[str, Any]:
    text = item["text"]
    return {**item, "text": text[:width], "cut": len(text) - width + int(item.get("cut", 0))}


def _widest_cut(item: dict[str, Any], room: int) -> int | None:
    """The longest prefix of ``item["text"]`` whose cut item renders within
    ``room`` characters (None if not even an empty one does).  Binary search:
    rendered length grows with the prefix (escapes make it uneven)."""
    text = item["text"]
    if len(render(_cut(item, 0))) > room:
        return None
    low, high = 0, len(text) - 1
    while low < high:
        mid = (low + high + 1) // 2
        if len(render(_cut(item, mid))) <= room:
            low = mid
        else:
            high = mid - 1
    return low


def fit(
    envelope: dict[str, Any],
    items: Sequence[dict[str, Any]],
    budget: int,
    *,
    left_out: int = 0,
) -> dict[str, Any]:
    """``envelope`` with ``results`` holding as many of ``items`` as fit in
    ``budget`` characters (see :func:`render`), and ``truncated``: how many
    were left out, ``left_out`` more (items the caller already dropped)."""
    if left_out < 0:
        raise ValueError("left_out must not be negative")
    results: list[dict[str, Any]] = []
    marker_room = len(render({"truncated": {"more": len(items) + left_out}})) + 1
    # The answer with no result fitting carries the marker that counts them
    # all: a long argument echoed is cut further to leave room for it.
    empty: dict[str, Any] | bool = {"more": len(items) + left_out} if items or left_out else False
    if len(render({**envelope, "results": [], "truncated": empty})) > budget:
        envelope = _echo_to_fit({**envelope, "results": [], "truncated": empty}, budget)
        envelope = {k: v for k, v in envelope.items() if k not in ("results", "truncated")}
    used = len(render({**envelope, "results": [], "truncated": False}))
    if len(render({**envelope, "results": [], "truncated": empty})) > budget:
        raise ValueError(f"a budget of {budget} characters cannot hold this answer's envelope")
    for i, item in enumerate(items):
        remaining = len(items) - i - 1 + left_out
        room = budget - used - (1 if results else 0) - (marker_room if remaining else 0)
        chosen = None
        for candidate in itertools.chain((item,), _shrunk(item, room)):
            if len(render(candidate)) <= room:
                chosen = candidate
                break
        if chosen is None:
            break
        results.append(chosen)
        used += len(render(chosen)) + (1 if len(results) > 1 else 0)
        if chosen.get("cut") != item.get("cut"):
            break  # a cut line ends the answer: no whole line after a cut one
    more = len(items) - len(results) + left_out
    response = {**envelope, "results": results, "truncated": {"more": more} if more else False}
    while len(render(response)) > budget and results:  # marker digits: belt and braces
        results.pop()
        more += 1
        response = {**envelope, "results": results, "truncated": {"more": more}}
    return response


# A scheme, as RFC 3986 spells it: what makes a node name an absolute IRI.
_IRI_START = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
# A predicate IRI, not a prefixed name such as ``uko:imports`` or ``rdf:type``.
_FULL_IRI = re.compile(r"(?:[A-Za-z][A-Za-z0-9+.-]*://|urn:)\S")


def union_graphs(results: Iterable[GraphResult], *, ordered: bool = False) -> GraphResult:
    """The triples of several results, each once: in the order first seen,
    or sorted when ``ordered`` (as ``get_triples`` gives them), with the
    count in ``metadata["rows"]``.  One result is returned as it is."""
    results = list(results)
    if len(results) == 1:
        return results[0]
    seen: dict[tuple[str, str, str], None] = {}
    for result in results:
        seen.update(dict.fromkeys(result.triples))
    triples = sorted(seen) if ordered else list(seen)
    return GraphResult(triples, {"rows": str(len(triples))})


def walk_nodes(
    view: ScopedView,
    given: str,
    nodes: Sequence[str],
    *,
    depth: int,
    direction: str = "out",
    predicates: frozenset[str] | None = None,
) -> GraphResult:
    """The union of the walks from each node ``given`` stands for (a path in
    several resources: one node each).  When walks pass their limit, the
    error names the smallest depth that answers for every node (each walk
    runs, so that the advice holds for all of them).

    Raises:
        WalkLimitError: a walk passed its limit.
    """
    results: list[GraphResult] = []
    over: list[WalkLimitError] = []
    for node in nodes:
        try:
            results.append(
                view.traverse(node, depth=depth, direction=direction, predicates=predicates)
            )
        except WalkLimitError as exc:
            # Without its traceback: it holds the walk's frames (10,000
            # triples and their sets), kept by a cycle (this frame, ``over``)
            # until a full collection.
            over.append(exc.with_traceback(None))
    if over:
        first = min(over, key=lambda e: e.hop)
        raise walk_limit_error(given, first.max_rows, first.hop) from first
    return union_graphs(results)


def predicate_iris(predicates: Sequence[str] | None) -> frozenset[str] | None:
    """Predicates as IRIs: a UKO name (``imports``) or a full IRI each;
    ``None`` (every edge) stays ``None``.

    Raises:
        TypeError: not a list of strings.  ValueError: an empty list, or a
            name that is neither a UKO predicate nor an IRI.
    """
    if predicates is None:
        return None
    if isinstance(predicates, str) or not isinstance(predicates, Sequence | frozenset | set):
        raise TypeError("predicates must be a list of predicate names or IRIs")
    chosen: set[str] = set()
    for name in predicates:
        if not isinstance(name, str):
            raise TypeError("predicates must be a list of predicate names or IRIs")
        name = name.strip()
        local = name[4:] if name.startswith("uko:") else name  # the SPARQL prefix
        if local in PREDICATES:
            chosen.add(PREDICATES[local])
        elif _FULL_IRI.match(name) and not any(c.isspace() for c in name):
            if name.startswith(UKO) and name[len(UKO) :] not in PREDICATES:
                # our namespace holds no other predicate
                raise ValueError(
                    f"unknown predicate {name[:100]!r}: UKO's are " + ", ".join(sorted(PREDICATES))
                )
            chosen.add(name)
        else:
            raise ValueError(
                f"unknown predicate {name[:100]!r}: give a full IRI (scheme://... or urn:...) "
                "or one of " + ", ".join(sorted(PREDICATES))
            )
    if not chosen:
        raise ValueError("predicates must not be empty (omit it to follow every edge)")
    return frozenset(chosen)


def _node_envelope(tool: str, key: str, given: str, nodes: list[str]) -> dict[str, Any]:
    """A graph tool's envelope (``given`` echoed as a query is); ``nodes``
    too when the name was resolved (a file path), so the caller learns the
    IRIs to use next."""
    envelope: dict[str, Any] = {"tool": tool, **_echo(given, key)}
    if nodes != [given]:
        envelope["nodes"] = nodes
    return envelope


class AgentSession:
    """Scoped, budgeted operations over the three backends.

    Args:
        text, vector, graph: the backends (any implementation of the Protocols).
        embedder: the index's own embedder (queries are embedded with it).
        scope: the operator's scope.
        read_file: reads an indexed file from its resource (for :meth:`read`).
        is_indexed: whether a file is indexed (for :meth:`read`: only such
            files are read; the index store's catalog answers with one row,
            where asking the graph would load the resource's graph).
        closer: what :meth:`close` calls (releases what the session owns).
        registered: the resource ULIDs registered now (for :meth:`removed`;
            None: the scope's resources are taken as still registered).
        locations: the resources' root directories, so a file may be named
            by its absolute path (None: only by a path relative to a root).
    """

    def __init__(
        self,
        *,
        text: TextBackend,
        vector: VectorBackend,
        graph: GraphBackend,
        embedder: Embedder,
        scope: SessionScope,
        read_file: FileReader,
        is_indexed: IndexedCheck,
        closer: Callable[[], None] | None = None,
        registered: Callable[[], frozenset[str]] | None = None,
        locations: Locations | None = None,
        embedded_by: EmbeddedBy | None = None,
    ) -> None:
        self._closer = closer
        self._embedded_by = embedded_by
        self._locations = locations
        self._registered = registered
        self._text = text
        self._vector = vector
        self._graph = graph
        self._embedder = embedder
        self._scope = scope
        self._read_file = read_file
        self._is_indexed = is_indexed

    @property
    def scope(self) -> SessionScope:
        """The operator's scope."""
        return self._scope

    def removed(self) -> frozenset[str]:
        """The scope's resources removed from the registry since the session
        started.  The scope stays as it was fixed (it never changes under a
        running host); these are in it with nothing left to answer."""
        if self._registered is None:
            return frozenset()
        return self._scope.resources - self._registered()

    def close(self) -> None:
        """Release what this session owns (a session of
        ``cleveragents.acms.open_data_dir`` owns its indexes: their files and
        locks); its queries fail after it.  Also on leaving a ``with`` block."""
        if self._closer is not None:
            self._closer()

    def __enter__(self) -> AgentSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _view(self, projects: Sequence[str] | None, resources: Sequence[str] | None) -> ScopedView:
        scope = self._scope.narrow(projects, resources)
        return ScopedView(self._text, self._vector, self._graph, scope)

    # ------------------------------------------------------------ search

    def search(
        self,
        query: str,
        *,
        mode: str = "hybrid",
        max_results: int = 10,
        budget: int | None = None,
        projects: Sequence[str] | None = None,
        resources: Sequence[str] | None = None,
        syntax: str = "plain",
        path: str | None = None,
        lang: str | None = None,
        line_cap: Callable[[int], int] | None = None,
    ) -> dict[str, Any]:
        """Hits for ``query``: ``hybrid`` (text and vector fused), ``text`` or ``vector``.

        Each hit: ``uri``, ``path``, ``start_line``/``end_line`` (ints),
        ``score``, ``lines`` (the matching lines with context), and for
        hybrid the ``ranks`` per source.  ``syntax`` (``plain``/``tantivy``),
        ``path`` (a glob) and ``lang`` are the text search's options (see
        ``TextBackend.search``).  Hybrid search takes ``path`` and ``lang``
        (every source is filtered) but only the plain syntax; vector search
        takes none of them (a :class:`QueryError` says so rather than
        silently ignoring them).  ``line_cap(rank)``: the most matching lines
        the hybrid hit of that rank shows (default 8; ``context`` packs).
        """
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {', '.join(_MODES)}")
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query must be a non-empty string")
        options = text_options(syntax, path, lang)
        if options.lang is not None:
            check_language(options.lang)
        if mode == "hybrid" and options.syntax != "plain":
            raise QueryError(
                "hybrid search takes the plain syntax only; the tantivy syntax is text "
                "search's ('acms search text', the search_text tool)"
            )
        if mode == "vector" and (options.syntax != "plain" or options.filtered):
            raise QueryError("syntax, path and lang apply to text and hybrid search, not vector")
        limit = _count(max_results, "max_results", MAX_RESULTS)
        chars = check_budget(budget)
        view = self._view(projects, resources)
        terms = query_terms(query)
        items: list[dict[str, Any]] = []
        if mode != "text" and options.syntax == "plain" and not _WORD.search(query):
            # No letters or digits: text search finds nothing, and a vector
            # ranking of the scope against the embedding of punctuation is
            # noise ("context('???')" answered five hits).  Any plain text is
            # a valid query, so the answer is empty, not an error.
            return fit({"tool": "search", "mode": mode, **_echo(query)}, [], chars)
        if mode == "hybrid":
            # Each source ranks at least max_results (else 100 asked for
            # answered 50).  Hits past max_results are not "left out": the
            # agent asked for that many, as in text and vector mode (a vector
            # ranking always has more), so they are not counted in truncated.
            depth = max(DEFAULT_DEPTH, limit)
            fused = hybrid_search(
                view,
                _Checked(self._embedder, functools.partial(self._check_embedder, view.scope)),
                query,
                max_results=limit,
                depth=depth,
                path=options.path,
                lang=options.lang,
            )
            for rank, hit in enumerate(fused[:limit]):
                cap = _MAX_LINES_PER_HIT if line_cap is None else line_cap(rank)
                items.append(
                    _hit(hit.uko_uri, hit.content, hit.metadata, hit.score, terms, cap)
                    | {"ranks": dict(hit.ranks)}
                )
        elif mode == "text":
            for t in view.search(
                query,
                max_results=limit,
                syntax=options.syntax,
                path=options.path,
                lang=options.lang,
            ):
                items.append(_hit(t.uko_uri, t.content, t.metadata, t.score, terms))
        else:
            self._check_embedder(view.scope)
            embedding = self._embedder.embed([query])[0].tolist()
            for v in view.similarity_search(embedding, top_k=limit):
                items.append(_hit(v.uko_uri, v.content, v.metadata, v.score, terms))
        envelope = {"tool": "search", "mode": mode, **_echo(query)}
        return fit(envelope, items, chars)

    def _check_embedder(self, scope: frozenset[str]) -> None:
        """Before a query is embedded: every in-scope resource's vectors were
        made by this session's embedder.  Another one of the same dimension
        (``ACMS_EMBEDDER`` changed since the reindex) compared vectors of two
        models: every score 0.000, exit 0, no word of why."""
        if self._embedded_by is not None:
            check_embedded_by(self._embedder, self._embedded_by(scope))

    # ------------------------------------------------------------ graph

    def sparql(
        self,
        query: str,
        *,
        budget: int | None = None,
        projects: Sequence[str] | None = None,
        resources: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """A sandboxed SPARQL query over the scope's graphs, answered in the
        SPARQL 1.1 JSON results form: a SELECT with any variables gives
        ``vars`` and one binding per row in ``results``; ASK gives ``boolean``;
        CONSTRUCT/DESCRIBE give ``s``/``p``/``o`` bindings.  Backends without
        bindings answer triples (``s``/``p``/``o``) for 3-variable SELECTs."""
        chars = check_budget(budget)
        scope = self._scope.narrow(projects, resources)
        select = getattr(self._graph, "sparql_select", None)
        if select is None:
            result = ScopedView(self._text, self._vector, self._graph, scope).sparql_query(query)
            envelope: dict[str, Any] = {"tool": "sparql", "vars": ["s", "p", "o"]}
            if "boolean" in result.metadata:
                envelope["boolean"] = result.metadata["boolean"] == "true"
            items = [
                {
                    k: {"type": "uri" if ":" in v else "literal", "value": v}
                    for k, v in zip("spo", t, strict=True)
                }
                for t in result.triples
            ]
            return fit(envelope, items, chars)
        answer = select(query, scope=scope)
        if "boolean" in answer:
            return fit({"tool": "sparql", "boolean": bool(answer["boolean"])}, [], chars)
        rows = [
            b
            for b in answer["results"]["bindings"]
            if all(
                (rid := resource_id_of(term.get("value", ""))) is None or rid in scope
                for term in b.values()
            )
        ]
        return fit({"tool": "sparql", "vars": list(answer["head"]["vars"])}, rows, chars)

    def triples(
        self,
        subject: str,
        *,
        budget: int | None = None,
        projects: Sequence[str] | None = None,
        resources: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """The triples whose subject is ``subject``, within the scope."""
        chars = check_budget(budget)
        view = self._view(projects, resources)
        nodes = self._graph_nodes(view, subject, "subject")
        result = union_graphs((view.get_triples(node) for node in nodes), ordered=True)
        items = [{"s": s, "p": p, "o": o} for s, p, o in result.triples]
        return fit(_node_envelope("triples", "subject", subject, nodes), items, chars)

    def traverse(
        self,
        start: str,
        *,
        depth: int = 2,
        direction: str = "out",
        predicates: Sequence[str] | None = None,
        budget: int | None = None,
        projects: Sequence[str] | None = None,
        resources: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """Triples within ``depth`` hops of ``start``, within the scope.

        ``direction``: ``"out"`` (subject -> object, the default), ``"in"``
        (object -> subject: who imports a file, who defines a name) or
        ``"both"``; ``predicates``: the edges to follow, each a UKO name
        (``imports``, ``calls``, ...) or a full IRI (``None``: every edge).
        """
        chars = check_budget(budget)
        chosen = predicate_iris(predicates)
        validate_traversal(direction, chosen)
        view = self._view(projects, resources)
        nodes = self._graph_nodes(view, start, "start")
        result = walk_nodes(view, start, nodes, depth=depth, direction=direction, predicates=chosen)
        items = [{"s": s, "p": p, "o": o} for s, p, o in result.triples]
        envelope = _node_envelope("traverse", "start", start, nodes)
        envelope["depth"] = depth
        if direction != "out":
            envelope["direction"] = direction
        if chosen is not None:
            envelope["predicates"] = sorted(chosen)
        return fit(envelope, items, chars)

    def graph_nodes(
        self,
        node: str,
        *,
        projects: Sequence[str] | None = None,
        resources: Sequence[str] | None = None,
    ) -> list[str]:
        """The graph nodes ``node`` stands for (see :meth:`_graph_nodes`)."""
        return self._graph_nodes(self._view(projects, resources), node, "node")

    def _graph_nodes(self, view: ScopedView, node: str, what: str) -> list[str]:
        """An IRI (or blank node) stands for itself; a relative file path for
        that file's node in each in-scope resource that indexes it
        (``pkg/core.py`` -> ``uko://<ULID>/pkg/core.py``); an absolute path
        for the file's node in each in-scope resource whose root holds it
        (see :func:`_places`).  Anything else
        is refused with the form to use: a path no in-scope resource
        indexes would otherwise answer, silently, with no triples.
        Every tool that takes a file path resolves it here.

        Raises:
            TypeError: ``node`` is not a string.  ValueError: it is empty, or
                neither an IRI nor an indexed file path of the scope.
            ScopeError: it is the IRI of a resource outside the scope.
        """
        if not isinstance(node, str):
            raise TypeError(f"{what} must be a string")
        if not node.strip():
            raise ValueError(f"{what} must not be empty")
        _check_path_text(node, what)
        if _IRI_START.match(node) or node.startswith("_:"):
            owner = resource_id_of(node)
            if owner is not None and owner not in view.scope:
                # As read and callers: a node of another resource is refused,
                # not answered with an empty graph that reads as "no edges".
                raise ScopeError(f"{node[:200]!r} is outside this session's scope")
            if owner is not None and not self._is_node(view, node):
                raise ValueError(_no_node(what, node))
            return [node]
        whole, roots, found, fragment = self._indexed_prefix(view, node)
        nodes = [
            unit_uri(rid, path, unquote(fragment)) if fragment else file_uri(rid, path)
            for rid, path in found
        ]
        if nodes and fragment:
            nodes = [n for n in nodes if self._is_node(view, n)]
            if not nodes:
                raise ValueError(_no_node(what, node))
        if not nodes:
            raise ValueError(
                f"{what} {node[:200]!r} is neither an IRI nor a file path indexed in this scope"
                f"{_where(whole, view.scope, roots)}: "
                "give a node's IRI (uko://<ULID>/<path>, a symbol's ...#sym=<name>), a "
                "path relative to a resource's root or an absolute path inside one"
            )
        return nodes

    def _indexed_prefix(
        self, view: ScopedView, node: str
    ) -> tuple[str, dict[str, str] | None, list[tuple[str, str]], str]:
        """A file path given with or without a fragment (``#sym=Name``,
        ``#L10-L42``), split where the index says: the whole is a path if a
        resource indexes it (``a#b.py``), else the longest indexed prefix
        ending before a ``#`` (a few tried: each try is a catalog lookup per
        resource).  Returns the path as given (``./`` dropped), the in-scope
        roots for an absolute one (else None), the ``(resource, path)``
        places found and the fragment after them (raw, as given)."""
        whole = node[2:].lstrip("/") if node.startswith("./") else node  # .//a.py is ./a.py
        roots = self._roots(view) if os.path.isabs(whole) else None
        found: list[tuple[str, str]] = []
        cuts = [i for i, c in enumerate(whole) if c == "#"][-_MAX_HASH_SPLITS:]
        for i in [len(whole), *reversed(cuts)]:
            found = [
                (rid, path)
                for rid, path in _places(whole[:i], view.scope, roots)
                if path.strip("/") and self._is_indexed(rid, path)
            ]
            if found:
                return whole, roots, found, whole[i + 1 :]
        return whole, roots, found, ""

    def _roots(self, view: ScopedView) -> dict[str, str]:
        """The real root directory of each in-scope resource whose location
        is known (a removed resource has none)."""
        if self._locations is None:
            return {}
        known = self._locations()
        roots: dict[str, str] = {}
        for rid in view.scope:
            location = known.get(rid)
            if location:
                try:
                    roots[rid] = os.path.realpath(location)
                except (OSError, ValueError):
                    continue
        return roots

    def _is_node(self, view: ScopedView, node: str) -> bool:
        """Whether ``node``, of a resource in ``view``'s scope, is in its
        graph: an indexed file, or a node with edges (a symbol, a chunk, the
        resource).  A typo must not read as "no edges"."""
        path = path_of(node)
        if "#" not in node and (path is None or self._is_indexed(resource_id_of(node) or "", path)):
            return True  # the resource's own node, or an indexed file's
        if view.get_triples(node).triples:
            return True
        return bool(view.traverse(node, depth=1, direction="in").triples)

    # ------------------------------------------------------------ code graph

    def symbols(
        self,
        path: str,
        *,
        budget: int | None = None,
        projects: Sequence[str] | None = None,
        resources: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """The definitions of a file, by its path (relative: in every in-scope
        resource that indexes it; absolute: in the resources whose root holds
        it) or its URI: qualified name, kind, line range, signature; in line
        order.

        Raises:
            ValueError: no in-scope resource indexes ``path``.  ScopeError:
                a URI of a resource outside the scope.
        """
        chars = check_budget(budget)
        if not isinstance(path, str) or not path.strip("/"):
            raise ValueError("path must be a file path or a file's URI")
        view = self._view(projects, resources)
        # A path no in-scope resource indexes, an absolute path outside
        # them, another resource's URI: an error that says so, never "no symbols".
        _check_path_text(path, "path")
        found = [] if _IRI_START.match(path) else self._indexed_prefix(view, path)[2]
        # A file's fragment (``#sym=Name``) names the file; a "#" in its name
        # (``sp ace#1.py``) is part of it when the index says so.
        nodes = [file_uri(rid, p) for rid, p in found] or self._graph_nodes(
            view, path.split("#", 1)[0], "path"
        )
        items: list[dict[str, Any]] = []
        for own in nodes:
            items += self._symbol_rows(view, own)
        items.sort(key=lambda r: (r["path"], r.get("line", 0), r["uri"]))
        return fit({"tool": "symbols", "path": path}, items, chars)

    def callers(
        self,
        target: str,
        *,
        budget: int | None = None,
        projects: Sequence[str] | None = None,
        resources: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """Who calls ``target`` (a bare or qualified name, or a symbol URI):
        each calling symbol (or file, for module-level calls) with the lines
        of its calls.  Calls are resolved by name within the scope, so a call
        of another function of the same name counts too (best effort): a
        row's ``by_name`` is true when its calls name the target only by its
        bare name (``x.decode()`` for ``JSONDecoder.decode``), false when
        one resolves to the definition itself (in its own file).
        ``defined`` counts the target's definitions in scope: 0 with calls is
        a library or built-in name; 0 without, a name nothing in scope
        defines or calls (a typo, or a file indexed without its symbols)."""
        chars = check_budget(budget)
        view = self._view(projects, resources)
        bare, targets = self._targets(view, target)
        calls = frozenset({PREDICATES["calls"]})
        found: dict[str, dict[str, Any]] = {}
        by_name = name_uri(bare)
        for node in sorted(targets):
            for caller, _, _ in view.traverse(
                node, depth=1, direction="in", predicates=calls
            ).triples:
                row = found.setdefault(caller, self._call_row(view, caller, bare))
                # Reached through the name alone, or resolved to a definition
                # (a call in the definition's own file) at least once.
                row["by_name"] = row.get("by_name", True) and node == by_name

        items = sorted(found.values(), key=lambda r: (r["path"], r["lines"][:1], r["uri"]))
        # ``defined``: the in-scope definitions the target stands for, so an
        # empty answer tells "defined, never called" from "no such name".
        defined = sum(1 for t in targets if "#sym=" in t)  # a file's or resource's node is none
        return fit({"tool": "callers", **_echo(target, "target"), "defined": defined}, items, chars)

    def callees(
        self,
        source: str,
        *,
        budget: int | None = None,
        projects: Sequence[str] | None = None,
        resources: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """What ``source`` (a name or a symbol URI) calls: each called name
        with the definitions of it in scope (none for library calls).
        ``defined`` counts the definitions of ``source`` whose calls these
        are: 0 is a name nothing in scope defines."""
        chars = check_budget(budget)
        view = self._view(projects, resources)
        _, sources = self._targets(view, source, definitions_only=True)
        calls, named = frozenset({PREDICATES["calls"]}), frozenset({PREDICATES["named"]})
        items: list[dict[str, Any]] = []
        for sym in sorted(sources):
            for _, _, callee in view.traverse(sym, depth=1, predicates=calls).triples:
                if callee.startswith(_NAME_NODE):
                    name = unquote(callee[len(_NAME_NODE) :])
                    defs = sorted(
                        s
                        for s, _, _ in view.traverse(
                            callee, depth=1, direction="in", predicates=named
                        ).triples
                    )
                else:
                    name, defs = callee.rsplit("sym=", 1)[-1], [callee]
                items.append({"from": sym, "name": name, "definitions": defs[:20]})
        items.sort(key=lambda r: (r["from"], r["name"]))
        defined = sum(1 for t in sources if "#sym=" in t)
        envelope = {"tool": "callees", **_echo(source, "source"), "defined": defined}
        return fit(envelope, items, chars)

    def _targets(
        self, view: ScopedView, target: str, *, definitions_only: bool = False
    ) -> tuple[str, set[str]]:
        """The bare name of ``target`` and the graph nodes that stand for it:
        its definitions in scope and (unless ``definitions_only``) its name node."""
        if not isinstance(target, str) or not target.strip():
            raise ValueError("give a name or a symbol URI")
        target = target.strip()
        try:
            target.encode("utf-8")
        except UnicodeEncodeError:  # undecodable bytes of a command line
            raise ValueError(
                f"the name {target[:80]!r} holds bytes that are not UTF-8 text: "
                "no indexed name does"
            ) from None
        if resource_id_of(target) is not None or ("#" in target and not _IRI_START.match(target)):
            # A symbol's URI, or a file path and its symbol (pkg/core.py#sym=run)
            # as read and the graph tools take it: that symbol in each in-scope
            # resource that indexes the file.
            nodes = set(self._graph_nodes(view, target, "name"))
            bare = _REDEFINED.sub("", target.rsplit("sym=", 1)[-1]).rsplit(".", 1)[-1]
        else:
            # ``Shapes.area~2`` (as ``callers`` prints a caller) is that one
            # definition of ``Shapes.area``.
            plain = _REDEFINED.sub("", target)
            bare = plain.rsplit(".", 1)[-1]
            named = frozenset({PREDICATES["named"]})
            defs = {
                s
                for s, _, _ in view.traverse(
                    name_uri(bare), depth=1, direction="in", predicates=named
                ).triples
            }
            # Compared with the URIs' fragments as written (``#sym=café``
            # is quoted in the URI).
            if plain != target:
                defs = {
                    d
                    for d in defs
                    if (written := unquote(d)).endswith("sym=" + target)
                    or written.endswith("." + target)
                }
            elif "." in target:  # a qualified name: only the definitions of that name
                named_so = {
                    d
                    for d in defs
                    if (written := unquote(_REDEFINED.sub("", d))).endswith("sym=" + target)
                    or written.endswith("." + target)
                }
                # Else a name qualified by its module, as code imports it
                # (json.loads, email.message.Message.get_payload): it was
                # "nothing in scope defines this name", and the callers in
                # its own file were lost (a reviewer found it).
                defs = named_so or {
                    d
                    for d in defs
                    if (full := _module_qualified(d)) is not None
                    and (full == target or full.endswith("." + target))
                }
            nodes = defs
        if not definitions_only:
            nodes = nodes | {name_uri(bare)}
        return bare, nodes

    @classmethod
    def _symbol_rows(cls, view: ScopedView, file_node: str) -> list[dict[str, Any]]:
        """The rows of the symbols ``file_node`` defines, read in one walk of
        two hops along the predicates they need, not one ``get_triples`` per
        symbol: against a SPARQL endpoint that was a round trip each (a file
        of 197 symbols took 41 s at 0.2 s a request).  A file whose walk
        passes the walk limit is read symbol by symbol, as before."""
        try:
            walked = view.traverse(file_node, depth=2, predicates=_SYMBOL_PREDICATES).triples
        except WalkLimitError:
            walked = None
        if walked is None:
            syms = [
                o for _, p, o in view.get_triples(file_node).triples if p == PREDICATES["defines"]
            ]
            return [cls._symbol_row(sym, view.get_triples(sym).triples) for sym in syms]
        by_subject: dict[str, list[tuple[str, str, str]]] = {}
        for triple in walked:
            by_subject.setdefault(triple[0], []).append(triple)
        syms = [o for s, p, o in walked if s == file_node and p == PREDICATES["defines"]]
        return [cls._symbol_row(sym, by_subject.get(sym, [])) for sym in dict.fromkeys(syms)]

    @staticmethod
    def _symbol_row(sym: str, triples: Iterable[tuple[str, str, str]]) -> dict[str, Any]:
        row: dict[str, Any] = {"uri": sym, "path": path_of(sym) or ""}
        for _, p, o in triples:
            key = p[len(UKO) :] if p.startswith(UKO) else None
            if key in ("name", "kind", "signature"):
                row[key] = o
            elif key in ("line", "endLine"):
                row["line" if key == "line" else "end_line"] = _int(o, 0)
        return row

    @staticmethod
    def _call_row(view: ScopedView, caller: str, bare: str) -> dict[str, Any]:
        lines: list[int] = []
        for _, p, o in view.get_triples(caller).triples:
            if p == PREDICATES["callSites"]:
                for part in o.split(";"):
                    name, _, numbers = part.partition(":")
                    if name == bare:
                        lines = [int(n) for n in numbers.split(",") if n.isdigit()]
        return {
            "uri": caller,
            "path": path_of(caller) or "",
            "caller": caller.rsplit("#sym=", 1)[1] if "#sym=" in caller else None,
            "lines": lines,
        }

    # ------------------------------------------------------------ reading

    def read(
        self,
        uri: str,
        *,
        start_line: int | None = None,
        end_line: int | None = None,
        budget: int | None = None,
    ) -> dict[str, Any]:
        """An indexed file, or a line range of it, by URI (a chunk URI's
        ``#L10-L42`` gives the range), or by its path relative to the root of
        the one in-scope resource that indexes it (``pkg/core.py#L10-L42``)
        or its absolute path inside that root.
        The URI's resource must be in scope and the file indexed (so files
        the index left out — ignored, secret, binary — are never read); lines
        are returned numbered, as many as fit."""
        chars = check_budget(budget)
        if not isinstance(uri, str):
            raise TypeError("uri must be a string")
        _check_path_text(uri, "uri")
        if not _IRI_START.match(uri):
            uri = self._file_of_path(uri)
        rid = resource_id_of(uri)
        path = path_of(uri)
        if rid is None or path is None:
            raise ValueError("uri must name a file of a resource: uko://<ULID>/<path>[#L1-L9]")
        if rid not in self._scope.resources:
            raise ScopeError(f"resource {rid} is not in this session's scope")
        fragment = uri.split("#", 1)[1] if "#" in uri else ""
        own = file_uri(rid, path)
        if path != path.strip("/"):  # uko://R//a.py: not a.py's URI, but surely meant
            raise ValueError(
                f"{uri[:300]!r} names no file: its path starts or ends with '/' "
                f"(the file's URI is {own[:300]!r})"
            )
        if not self._is_indexed(rid, path):
            raise ValueError(f"{own[:300]!r} is not an indexed file of this scope")
        found = _RANGE.match(fragment)
        if fragment.startswith("sym="):
            # Quoted as the index quotes it, whether it came quoted or not
            # (``#sym=Getting Started``, ``#sym=café``).
            symbol = self._symbol_lines(
                unit_uri(rid, path, unquote(fragment)), own, unquote(fragment[4:])
            )
            if start_line is None and end_line is None:
                start_line, end_line = symbol
        elif fragment and not found:
            raise ValueError(
                f"uri fragment {'#' + fragment[:40]!r} is neither a line range (#L10-L42, #L10) "
                "nor a symbol (#sym=Name)"
            )
        if found and start_line is None and end_line is None:
            # ``#L2`` is the one line 2.
            start_line = int(found.group(1))
            end_line = int(found.group(2) or found.group(1))
        first = _count(start_line, "start_line", MAX_LINE) if start_line is not None else 1
        last = _count(end_line, "end_line", MAX_LINE) if end_line is not None else None
        if last is not None and last < first:
            raise ValueError("end_line must not be before start_line")
        got = self._read_file(rid, path, READ_FILE_BYTES)
        if got is None:
            raise ValueError(f"{own} cannot be read now (moved, too large or not a regular file)")
        # Numbered as the indexer numbers them (\r\n, \r and \n end a line;
        # a final line ending starts no line), so hits' ranges match.
        lines = split_lines(got.text)
        if first > len(lines) and (lines or start_line is not None):  # an empty file has no L1
            raise ValueError(f"{own} has {len(lines)} lines: line {first} is past its end")
        wanted = len(lines) if last is None else min(last, len(lines))
        stop = min(wanted, first - 1 + _MAX_READ_LINES)
        items = [{"line": n, "text": lines[n - 1]} for n in range(first, stop + 1)]
        envelope: dict[str, Any] = {
            "tool": "read",
            "uri": own,
            "path": path,
            "total_lines": len(lines),
        }
        if got.changed:
            # Read as it is now; what search and the graph say of it is older.
            envelope["changed_since_indexed"] = True
        # The lines past the cap are left out as those past the budget are:
        # counted, so the agent reads on from the last line it was given.
        return fit(envelope, items, chars, left_out=wanted - stop)

    def _symbol_lines(self, uri: str, own: str, name: str) -> tuple[int, int]:
        """The line range of the symbol node ``uri`` (``...#sym=Name``).

        Raises:
            ValueError: the graph has no such symbol in the file.
        """
        view = self._view(None, None)
        found: dict[str, int] = {}
        for _, p, o in view.get_triples(uri).triples:
            if p in (PREDICATES["line"], PREDICATES["endLine"]):
                found[p] = _int(o, 0)
        first, last = found.get(PREDICATES["line"], 0), found.get(PREDICATES["endLine"], 0)
        if first < 1:
            raise ValueError(f"{own} defines no symbol {name[:80]!r} (see 'symbols' for its names)")
        return first, max(first, last)

    def _file_of_path(self, given: str) -> str:
        """The URI of the one file of the scope at a path, relative or
        absolute (and the ``#`` fragment given with it).

        Raises:
            ValueError: no in-scope resource indexes the path, or several do
                (their URIs are named, to pick one).
        """
        view = self._view(None, None)
        _, _, found, fragment = self._indexed_prefix(view, given)
        if not found:  # a blank node (refused by read), else the error naming the forms
            return self._graph_nodes(view, given, "uri")[0]
        nodes = [file_uri(rid, path) for rid, path in found]
        path = found[0][1]
        if len(nodes) > 1:
            shown = ", ".join(nodes[:5]) + (f" and {len(nodes) - 5} more" if len(nodes) > 5 else "")
            raise ValueError(
                f"{path[:200]!r} is a file of {len(nodes)} resources of this scope; "
                f"read it by URI: {shown}"
            )
        # The fragment quoted as the index quotes it (``#sym=Getting%20Started``).
        return unit_uri(found[0][0], path, unquote(fragment)) if fragment else nodes[0]

    # ------------------------------------------------------------ context

    def context(
        self,
        task: str,
        *,
        budget: int | None = None,
        projects: Sequence[str] | None = None,
        resources: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """A ranked bundle of snippets for a task description within the budget:
        the hybrid hits, each with its matching lines, best first, one per
        chunk, as many as fit."""
        if not isinstance(task, str) or not task.strip():
            raise ValueError("task must be a non-empty string")
        chars = check_budget(budget)
        response = self.search(
            task,
            line_cap=lambda rank: (
                _MAX_LINES_PER_HIT if rank < _CONTEXT_FULL_HITS else _CONTEXT_LINES_AFTER
            ),
            mode="hybrid",
            max_results=MAX_RESULTS,  # as many as the budget holds; the rest counted
            budget=chars,
            projects=projects,
            resources=resources,
        )
        response["tool"] = "context"
        response.pop("mode", None)
        dropped = response.get("truncated")
        return fit(
            {k: v for k, v in response.items() if k not in ("results", "truncated")},
            response["results"],
            chars,
            # The hits the search already left out are left out of the context too.
            left_out=dropped["more"] if isinstance(dropped, dict) else 0,
        )


def _module_qualified(symbol: str) -> str | None:
    """A symbol URI's name qualified by its file as a module path:
    ``json/__init__.py#sym=loads`` -> ``json.loads``,
    ``email/message.py#sym=Message.get_payload`` ->
    ``email.message.Message.get_payload`` (a package's ``__init__``, a JS
    ``index`` or a Rust ``mod`` file is its directory); None for another URI."""
    path = path_of(symbol)
    if path is None or "sym=" not in symbol:
        return None
    name = _REDEFINED.sub("", unquote(symbol.rsplit("sym=", 1)[-1]))
    directory, _, file_name = path.rpartition("/")
    stem, _, extension = file_name.partition(".")
    parts = [p for p in directory.split("/") if p]
    # Only in its own language (a Python module named index.py is a module).
    if (stem, extension.rpartition(".")[2]) not in _PACKAGE_FILES:
        parts.append(stem)
    return ".".join([*parts, name])


# The files that stand for their directory: (stem, extension).
_PACKAGE_FILES = frozenset(
    {("__init__", "py"), ("__init__", "pyi"), ("mod", "rs")}
    | {("index", ext) for ext in ("js", "jsx", "mjs", "cjs", "ts", "tsx", "mts", "cts")}
)


def _places(
    path: str, scope: Iterable[str], roots: Mapping[str, str] | None
) -> list[tuple[str, str]]:
    """Where a file path may be: ``(resource, path relative to its root)``.

    A relative path may be in any resource of ``scope``.  An absolute one
    (``roots`` given, resource -> real root directory) is resolved as the
    operating system would open it (``..`` and symlinks followed), and is in
    the resources whose root holds the result, under its path from there:
    a path that leaves the root, by ``..`` or through a symlink, is in none.
    Only the files a resource indexes are then served, so nothing outside
    the scope can come back.
    """
    if roots is None:
        return [(rid, path) for rid in sorted(scope)]
    try:
        real = os.path.realpath(path)
    except (OSError, ValueError):  # a NUL byte: no file has that name
        return []
    places: list[tuple[str, str]] = []
    for rid, root in sorted(roots.items()):
        base = root if root.endswith(os.sep) else root + os.sep
        if real.startswith(base):
            places.append((rid, real[len(base) :].replace(os.sep, "/")))
    return places


def _where(path: str, scope: Iterable[str], roots: Mapping[str, str] | None) -> str:
    """What the error for an unresolved absolute ``path`` adds: the file it
    is in an in-scope resource, or that it lies in none (and their roots)."""
    if roots is None:
        return ""
    cut = path.split("#", 1)[0]
    inside = _places(cut, scope, roots)
    if inside:
        return " (it is " + ", ".join(f"{rel!r} of resource {rid}" for rid, rel in inside[:3]) + ")"
    if not roots:
        return " (an absolute path: the scope's resources have no known location)"
    shown = sorted(roots.values())
    more = f" and {len(shown) - 5} more" if len(shown) > 5 else ""
    return f" (it lies in none of the scope's resources: {', '.join(shown[:5])}{more})"


def _check_path_text(value: str, what: str) -> None:
    """Refuse a path or URI no file name decodes to: one holding a lone
    surrogate (JSON's ``"\\ud800"``) other than the escapes ``os.fsdecode``
    gives undecodable bytes (``\\udc80``-``\\udcff``, as indexed paths keep
    them), in one line rather than the codec's error.

    Raises:
        ValueError: ``value`` does not encode as a file name.
    """
    try:
        os.fsencode(value)
    except UnicodeEncodeError:
        raise ValueError(
            f"the {what} {value[:200]!r} is not valid text: it holds a lone surrogate, "
            "as no indexed path or name does"
        ) from None


def _no_node(what: str, node: str) -> str:
    """The error for a node of the scope's resources that its graph lacks:
    the same whether it never existed or is another scope's."""
    return (
        f"{what} {node[:200]!r} is no node of this scope's graph "
        "(see 'symbols' for a file's names, 'search' for its chunks)"
    )


def _echo(query: str, key: str = "query") -> dict[str, Any]:
    """The query (or a graph tool's node argument, under ``key``) as an
    answer repeats it: whole up to ``ECHO_CHARS``, else its start and
    ``query_cut``, the characters left out.  The caller sent it; a pasted
    traceback repeated whole would take the budget's room from the hits (and
    past the budget, fail the call).  :func:`fit` cuts it further when even
    that leaves the envelope no room."""
    if len(query) <= ECHO_CHARS:
        return {key: query}
    return {key: query[:ECHO_CHARS], "query_cut": len(query) - ECHO_CHARS}


def _echo_to_fit(envelope: dict[str, Any], room: int) -> dict[str, Any]:
    """``envelope`` with its echoed argument cut to the longest start whose
    rendering (with ``query_cut`` counting what was left out) takes at most
    ``room`` characters; unchanged when it has no echo or nothing fits."""
    key = next((k for k in _ECHO_KEYS if isinstance(envelope.get(k), str)), None)
    if key is None:
        return envelope
    given: str = envelope[key]
    already = int(envelope.get("query_cut", 0))

    def cut(width: int) -> dict[str, Any]:
        return {**envelope, key: given[:width], "query_cut": already + len(given) - width}

    if len(render(cut(0))) > room:
        return envelope
    low, high = 0, len(given)
    while low < high:  # the rendering grows with the width (a digit of the count aside)
        mid = (low + high + 1) // 2
        if len(render(cut(mid))) <= room:
            low = mid
        else:
            high = mid - 1
    return cut(low)


def _hit(
    uri: str,
    content: str,
    metadata: Mapping[str, str],
    score: float,
    terms: set[str],
    max_lines: int = _MAX_LINES_PER_HIT,
) -> dict[str, Any]:
    start = _int(metadata.get("start_line"), 1)
    end = _int(metadata.get("end_line"), start + max(0, content.count("\n")))
    return {
        "uri": uri,
        "path": metadata.get("path") or path_of(uri) or "",
        "start_line": start,
        "end_line": end,
        "score": round(float(score), 4),
        "lines": matching_lines(content, start, terms, max_lines=max_lines) if content else [],
    }


def _int(value: object, default: int) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return default


def check_embedded_by(embedder: Embedder, recorded: Mapping[str, str]) -> None:
    """Raise unless every resource of ``recorded`` (its vectors' embedder,
    ``name:dimension``, by ULID) was embedded by ``embedder``.

    Raises:
        IndexUnavailableError: one was made by another embedder.
    """
    mine = f"{embedder.name}:{embedder.dimension}"
    for rid, theirs in sorted(recorded.items()):
        if theirs != mine:
            raise IndexUnavailableError(
                f"the vectors of resource {rid} were made by {theirs}, and this process "
                f"embeds queries with {mine} (ACMS_EMBEDDER): their scores would mean "
                f"nothing; `acms reindex` re-embeds it with {mine}, or set ACMS_EMBEDDER "
                "to the embedder it was indexed with"
            )


class _Checked:
    """An embedder that runs ``check`` before each embedding: hybrid search
    embeds a query only when it asks the vector source, and only then do
    the vectors' makers matter."""

    def __init__(self, inner: Embedder, check: Callable[[], None]) -> None:
        self._inner = inner
        self._check = check

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def dimension(self) -> int:
        return self._inner.dimension

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self._check()
        return self._inner.embed(texts)
