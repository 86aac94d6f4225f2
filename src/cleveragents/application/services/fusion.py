"""Hybrid retrieval: reciprocal rank fusion of text, vector and graph rankings.

:func:`reciprocal_rank_fusion` is the one fusion rule::

    score(u) = sum over sources s that ranked u:  weight(s) / (k + rank_s(u))

with 1-based ranks.  It is *exact*: scores are summed as fractions (a float
weight is an exact binary fraction), so two units whose scores are equal in
arithmetic are tied, whatever the order of the sources, and ties are broken
by URI.  The reported ``score`` is that fraction rounded to a float.

:func:`hybrid_search` asks a :class:`ScopedView` (which passes its scope to
every backend) for the text ranking of the query, the vector ranking of its
embedding, and, for identifiers in the query, a *graph* ranking: the chunks
that define a symbol of exactly that name (``uko:defines``/``uko:name``/``uko:line``
and the chunk's line range).  The three are fused with per-source weights
(:data:`DEFAULT_WEIGHTS`; a source of weight 0 is not asked).  When the text
ranking is sure of itself (its best hit scores :data:`DEFAULT_CONFIDENT` or
more) it is the answer, and the other sources are not asked: they help a
question text answers weakly (words not in the code), and only disturb one
it answers well.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import TypeVar

from cleveragents._logging import get_logger
from cleveragents.application.services.chunking import detect_language
from cleveragents.domain.models.acms.backends import TextResult, VectorResult
from cleveragents.domain.models.acms.embedding import Embedder
from cleveragents.domain.models.acms.errors import QueryError
from cleveragents.domain.models.acms.scope import ScopedView
from cleveragents.domain.models.acms.text_query import path_matches, text_options
from cleveragents.domain.models.acms.uko import UKO, path_of

__all__ = [
    "DEFAULT_CONFIDENT",
    "DEFAULT_DEPTH",
    "DEFAULT_K",
    "DEFAULT_WEIGHTS",
    "FILTERED_VECTOR_FACTOR",
    "MAX_FILTERED_CANDIDATES",
    "PROSE_CONFIDENT",
    "FusedHit",
    "HybridHit",
    "definition_query",
    "hybrid_search",
    "query_identifiers",
    "reads_as_prose",
    "reciprocal_rank_fusion",
]

_log = get_logger("cleveragents.acms.fusion")

# Measured with the plain-mode text engine (branch text-query at d879d5f,
# its final weights) by ``benchmarks/eval/run_eval.py --sweep``: exact fusion
# of each question's cached text, vector and graph rankings over k in
# {1, 2, 5, 10, 30, 60}, vector 0.1-1 and graph 0-0.5 (only weight ratios
# matter, so text stays 1.0).  MRR@10 over all questions, text alone -> these
# defaults (the best setting on each of the three):
#   quick, 142 questions, hashing  0.927 -> 0.928
#   quick, 142 questions, MiniLM   0.927 -> 0.929 (paraphrase 0.572 -> 0.595)
#   full,  854 questions, hashing  0.903 -> 0.904
# The text ranking is the strong one now: any larger k or heavier vector
# weight let vector neighbours displace exact text hits and lost (the old
# defaults, k=30 and text 2 / vector 0.5 / graph 1, were below text alone
# with the first plain-mode engine: 0.892 and 0.882 against 0.902 on quick).
# k=1 with vector at a quarter of text keeps text's first hit first
# (1/2 > 1/3 + 1/4 * 1/2) and lets vector reorder and fill the tail, which is
# where hybrid gains: a hair overall, more on paraphrases with MiniLM.  The
# graph's definitions of query identifiers added nothing over text's
# exact-identifier boost (0.1 tied, 0.25 and 0.5 tied or lost; at the
# branch's previous weights, 7dbe5df, 0.1 had won 0.001 on full) and cost a
# forked SPARQL evaluation per query naming an identifier (hybrid p50 was
# ~6x text's with it, ~4x without, on the loaded machine), so its default
# weight is 0 and it is not asked: pass ``weights={"graph": ...}`` to use it.
#
# Re-measured after the calls field and the corrected paraphrase set (full
# set, 838 questions, MiniLM; ``benchmarks/eval/run_eval.py`` rankings fused
# offline): fusing every query never beat text alone (0.943; vector 0.25:
# 0.932-0.943, 0.5: 0.926), because the vector ranking is weak where text is
# strong.  Text's best normalised score separates the two cases: its lower
# quartile is 0.88-0.91 on identifiers, docstrings, code lines and calls and
# its upper quartile 0.76 on paraphrases.  Asking the vector source only below
# 0.8 (vector 0.5, k=1) left every other kind unchanged and took paraphrases
# 0.158 -> 0.187 (all 0.943 -> 0.944); with the lexical hashing embedder the
# same rule costs 0.001 (it adds nothing a text search has not found), at
# vector 0.25 it ties.  A confident text query also costs no embedding.
# With the ``pairs`` field (text 0.946) the same defaults give hybrid MiniLM
# 0.947 (paraphrases 0.178 -> 0.198) and hashing 0.946 on the full set; on
# the quick set (132 questions) hybrid is 0.004 below text.
DEFAULT_K = 1
DEFAULT_DEPTH = 50
DEFAULT_WEIGHTS: Mapping[str, float] = MappingProxyType({"text": 1.0, "vector": 0.5, "graph": 0.0})
DEFAULT_CONFIDENT = 0.8
# A question in words (:func:`reads_as_prose`) skips the vector source only
# from this text score.  Tantivy's normalised score grows with the number of
# query terms, so such questions score 0.63-0.90 (median 0.82) without
# ranking well: at 0.8 two in three of them were answered by text alone,
# where MiniLM ranks best.  Measured on 58 agent questions over four code
# bases (httpx, click, starlette, this package; answers read off the code):
# hybrid MiniLM MRR@10 0.864 -> 0.890, hashing unchanged; identifiers, code
# lines and error messages keep 0.8 (the constructed set's sweep, where
# gating them is what beats fusing everything).
PROSE_CONFIDENT = 0.9
_PLAIN_WORD = re.compile(r"[A-Za-z][a-z]*[,.?!;:]?")
# With a path or language filter, vector candidates are fetched this many
# times deeper before filtering (the vector index has no filter of its own),
# then four times deeper again until ``depth`` pass, the scope runs out, or
# MAX_FILTERED_CANDIDATES were fetched (each hit carries its content: a
# filter that admits nothing must not read a whole large scope into memory).
FILTERED_VECTOR_FACTOR = 8
MAX_FILTERED_CANDIDATES = 16_384
_MAX_IDENTIFIERS = 8


@dataclass(frozen=True, slots=True)
class FusedHit:
    """One fused unit: its URI, fused score and its 1-based rank per source."""

    uko_uri: str
    score: float
    ranks: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class HybridHit:
    """A fused hit with the content and metadata the sources returned for it.

    ``content`` and ``metadata`` come from the text result when there is one,
    else the vector result; a unit only the graph found has empty content
    and metadata naming its path, lines and the symbol it defines.
    """

    uko_uri: str
    score: float
    ranks: Mapping[str, int]
    content: str = ""
    metadata: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


def _check_int(name: str, value: object, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < low:
        raise ValueError(f"{name} must be at least {low}, got {value}")
    return value


def _check_weights(weights: Mapping[str, float] | None) -> dict[str, float]:
    if weights is None:
        return {}
    if not isinstance(weights, Mapping):
        raise TypeError("weights must be a mapping of source name to float")
    checked: dict[str, float] = {}
    for name, weight in weights.items():
        if not isinstance(name, str) or not name:
            raise TypeError("weight keys must be non-empty source names (str)")
        if isinstance(weight, bool) or not isinstance(weight, int | float):
            raise TypeError(f"the weight of {name!r} must be a number")
        if not math.isfinite(weight) or weight < 0:
            raise ValueError(f"the weight of {name!r} must be finite and >= 0, got {weight}")
        checked[name] = float(weight)
    return checked


def reciprocal_rank_fusion(
    rankings: Mapping[str, Sequence[str]],
    *,
    k: int = DEFAULT_K,
    weights: Mapping[str, float] | None = None,
    limit: int | None = None,
) -> list[FusedHit]:
    """Fuse rankings by weighted reciprocal rank; exact and deterministic.

    Args:
        rankings: source name -> URIs, best first.  A URI appears at most
            once per source.
        k: the RRF constant (>= 0); larger flattens the rank curve.
        weights: source name -> weight (finite, >= 0); a source without one
            weighs 1.0.  A source of weight 0 is left out, ranks included.
        limit: keep at most this many hits (>= 1); ``None`` keeps all.

    Returns:
        Hits by descending score, ties by ascending URI; ``ranks`` holds the
        1-based rank of the hit in each (weighted) source that ranked it.

    Raises:
        TypeError: a wrong type anywhere (a ``str`` is not a ranking).
        ValueError: empty source names or URIs, a URI twice in one source,
            a negative ``k`` or weight, a non-finite weight, ``limit < 1``.
    """
    if not isinstance(rankings, Mapping):
        raise TypeError("rankings must be a mapping of source name to a sequence of URIs")
    k = _check_int("k", k, 0)
    if limit is not None:
        limit = _check_int("limit", limit, 1)
    weight_of = _check_weights(weights)
    ranks: dict[str, dict[str, int]] = {}
    for source in sorted(_check_sources(rankings)):
        ranking = rankings[source]
        weight = weight_of.get(source, 1.0)
        seen: set[str] = set()
        for position, uri in enumerate(ranking, 1):
            if not isinstance(uri, str):
                raise TypeError(f"{source!r} ranks a {type(uri).__name__}, not a URI str")
            if not uri:
                raise ValueError(f"{source!r} ranks an empty URI")
            if uri in seen:
                raise ValueError(f"{source!r} ranks {uri!r} twice")
            seen.add(uri)
            if weight > 0:
                ranks.setdefault(uri, {})[source] = position
    scored: list[tuple[Fraction, str]] = []
    for uri, by_source in ranks.items():
        total = Fraction(0)
        for source, position in by_source.items():
            total += Fraction(weight_of.get(source, 1.0)) / (k + position)
        scored.append((total, uri))
    scored.sort(key=lambda item: (-item[0], item[1]))
    if limit is not None:
        scored = scored[:limit]
    return [FusedHit(uri, float(total), MappingProxyType(ranks[uri])) for total, uri in scored]


def _check_sources(rankings: Mapping[str, Sequence[str]]) -> list[str]:
    names = list(rankings)
    for name in names:
        if not isinstance(name, str) or not name:
            raise TypeError("source names must be non-empty str")
        ranking = rankings[name]
        if isinstance(ranking, str | bytes) or not isinstance(ranking, Sequence):
            raise TypeError(f"the ranking of {name!r} must be a sequence of URIs, not a str")
    return names


# ---------------------------------------------------------------- hybrid search

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_CODE_LIKE = re.compile(r"_|[a-z][A-Z]|[A-Za-z][0-9]|\.")


def query_identifiers(query: str) -> list[str]:
    """The identifiers a query names, in order, at most eight.

    A word counts when it looks like code (an underscore, a camelCase hump,
    a letter then a digit, a dot, or a call ``name(``), or when it is the
    whole query: plain words of a sentence are not taken for symbol names.
    """
    words = [(m.group(), m.end()) for m in _IDENT.finditer(query)]
    whole = query.strip()
    found: list[str] = []
    for word, end in words:
        word = word.strip(".")
        called = query[end : end + 1] == "("
        code_like = bool(_CODE_LIKE.search(word)) or called or word == whole.rstrip("(")
        if code_like and word and word not in found:
            found.append(word)
    return found[:_MAX_IDENTIFIERS]


def definition_query(identifiers: Sequence[str]) -> str:
    """SPARQL selecting ``(chunk, symbol name, line)`` of the chunks that define
    a symbol named exactly one of ``identifiers`` (``Class.method`` for methods).

    Exact names only: a suffix match (``.method``) scans every name and took
    seconds per query on a small corpus with rdflib.  The pattern order is the
    one rdflib evaluates fast (symbol first, its chunk last).

    Raises:
        ValueError: no identifiers, or one that is not an identifier.
    """
    if not identifiers:
        raise ValueError("definition_query needs at least one identifier")
    for ident in identifiers:
        if not _IDENT.fullmatch(ident):
            raise ValueError(f"not an identifier: {ident!r}")
    # Identifiers are [A-Za-z0-9_.] only: safe inside a SPARQL string literal.
    exact = " ".join(f'"{i}"' for i in identifiers)
    return (
        f"PREFIX uko: <{UKO}>\n"
        "SELECT ?chunk ?name ?line WHERE {\n"
        f"  VALUES ?name {{ {exact} }}\n"
        "  ?sym uko:name ?name . ?sym uko:line ?line . ?file uko:defines ?sym .\n"
        "  ?file uko:hasChunk ?chunk . ?chunk uko:startLine ?s . ?chunk uko:endLine ?e .\n"
        "  FILTER(?s <= ?line && ?line <= ?e)\n"
        "}"
    )


def _filter(glob: str | None, lang: str | None) -> Callable[[str], bool] | None:
    """A predicate on unit URIs for the path glob and language; None: no filter."""
    if glob is None and lang is None:
        return None

    def admits(uri: str) -> bool:
        path = path_of(uri)
        if path is None:
            return False
        if glob is not None and not path_matches(glob, path):
            return False
        return lang is None or detect_language(path) == lang

    return admits


def _graph_ranking(
    view: ScopedView,
    identifiers: list[str],
    depth: int,
    admits: Callable[[str], bool] | None = None,
) -> list[tuple[str, str]]:
    """``(chunk URI, symbol name)`` of definitions, best first: by the order of
    the identifiers in the query, then by URI."""
    if not identifiers:
        return []
    result = view.sparql_query(definition_query(identifiers))
    position = {ident: i for i, ident in enumerate(identifiers)}
    best: dict[str, tuple[int, str]] = {}
    for chunk, name, _line in result.triples:
        if admits is not None and not admits(chunk):
            continue
        key = (position.get(name, len(identifiers)), name)
        if chunk not in best or key < best[chunk]:
            best[chunk] = key
    ordered = sorted(best.items(), key=lambda item: (item[1], item[0]))
    return [(chunk, key[1]) for chunk, key in ordered[:depth]]


def _graph_metadata(uri: str, symbol: str) -> dict[str, str]:
    meta = {"symbol": symbol, "source": "graph"}
    path = path_of(uri)
    if path is not None:
        meta["path"] = path
    fragment = uri.rpartition("#")[2]
    lines = re.fullmatch(r"L(\d+)-L(\d+)", fragment)
    if lines:
        meta["start_line"], meta["end_line"] = lines.group(1), lines.group(2)
    return meta


def hybrid_search(
    view: ScopedView,
    embedder: Embedder,
    query: str,
    *,
    max_results: int = 20,
    k: int = DEFAULT_K,
    weights: Mapping[str, float] | None = None,
    depth: int = DEFAULT_DEPTH,
    graph: bool = True,
    path: str | None = None,
    lang: str | None = None,
    confident: float | None = DEFAULT_CONFIDENT,
) -> list[HybridHit]:
    """Text, vector and (for identifiers) graph rankings of ``query``, fused.

    Every backend is called through ``view``, so with its scope.  A query the
    text backend refuses (:class:`QueryError`, e.g. its syntax) leaves the
    text ranking empty and is logged (``fusion.text_query_refused``); the
    other sources still answer.

    Args:
        view: the scoped backends.
        embedder: embeds the query for the vector ranking (the index's embedder).
        query: any non-empty text.
        max_results: hits returned (>= 1).
        k, weights: see :func:`reciprocal_rank_fusion`; ``weights`` default
            to :data:`DEFAULT_WEIGHTS` (sources ``text``, ``vector``, ``graph``).
        depth: how many results each source contributes (>= 1).
        graph: add the graph ranking of definitions of query identifiers
            (asked only when the query names one and the graph's weight is
            above 0; the default weight is 0).
        path, lang: a path glob and a language name (see ``text_query``):
            only units of matching files come back from every source.  The
            text backend filters inside its engine; vector and graph hits are
            filtered here (by the unit's path and its detected language),
            the vector source asked for :data:`FILTERED_VECTOR_FACTOR` times
            ``depth`` first so that a filter still leaves it candidates.
        confident: when text's best hit scores at least this (the text
            backend's 0..1 score; Tantivy's is ``raw / (raw + 8)``), the
            other sources are not asked and the text ranking is the answer
            (for a question in words, :func:`reads_as_prose`, at least
            :data:`PROSE_CONFIDENT`); ``None`` fuses every query.

    Raises:
        TypeError / ValueError: bad arguments (an empty query among them).
        QueryError: a malformed ``path`` glob or ``lang`` name.
        QueryLimitError / IndexUnavailableError: from a backend.
    """
    if not isinstance(query, str):
        raise TypeError(f"query must be a str, not {type(query).__name__}")
    if not query.strip():
        raise ValueError("query must not be empty")
    max_results = _check_int("max_results", max_results, 1)
    depth = _check_int("depth", depth, 1)
    chosen = dict(DEFAULT_WEIGHTS) if weights is None else _check_weights(weights)
    _check_int("k", k, 0)
    if confident is not None and (
        isinstance(confident, bool)
        or not isinstance(confident, (int, float))
        or not 0.0 <= confident <= 1.0
    ):
        raise ValueError(f"confident must be None or a number in [0, 1], not {confident!r}")
    # Validated before any backend runs: a bad glob is the caller's error, not
    # a text refusal that the other sources would silently answer.
    options = text_options(path=path, lang=lang)
    admits = _filter(options.path, options.lang)

    # A source of weight 0 is not asked at all.
    text_hits: list[TextResult] = []
    if chosen.get("text", 1.0) > 0:
        try:
            text_hits = view.search(query, max_results=depth, path=options.path, lang=options.lang)
        except QueryError as exc:
            text_hits = [] if admits is None else _unfiltered_text(view, query, depth, admits)
            if admits is None or not text_hits:
                _log.info("fusion.text_query_refused", reason=str(exc))
    gate = confident
    if gate is not None and reads_as_prose(query):
        gate = max(gate, PROSE_CONFIDENT)
    sure = (
        gate is not None
        and chosen.get("text", 1.0) > 0
        and bool(text_hits)
        and max(r.score for r in text_hits) >= gate
    )
    vector_hits: list[VectorResult] = []
    if chosen.get("vector", 1.0) > 0 and not sure:
        vector = embedder.embed([query])[0].tolist()
        if admits is None:
            vector_hits = view.similarity_search(vector, top_k=depth)
        else:
            vector_hits = _filtered_vector(view, vector, depth, admits)
    definitions = (
        _graph_ranking(view, query_identifiers(query), depth, admits)
        if graph and chosen.get("graph", 1.0) > 0 and not sure
        else []
    )

    rankings: dict[str, list[str]] = {
        "text": _unique(r.uko_uri for r in text_hits),
        "vector": _unique(r.uko_uri for r in vector_hits),
        "graph": [uri for uri, _ in definitions],
    }
    fused = reciprocal_rank_fusion(rankings, k=k, weights=chosen, limit=max_results)
    found: dict[str, TextResult | VectorResult] = {}
    for results in (vector_hits, text_hits):  # text wins: it carries the matching content
        for r in results:
            found[r.uko_uri] = r
    symbols = dict(definitions)
    hits: list[HybridHit] = []
    for hit in fused:
        source = found.get(hit.uko_uri)
        if source is not None:
            content, meta = source.content, dict(source.metadata)
        else:
            content, meta = "", _graph_metadata(hit.uko_uri, symbols.get(hit.uko_uri, ""))
        hits.append(HybridHit(hit.uko_uri, hit.score, hit.ranks, content, MappingProxyType(meta)))
    _log.debug(
        "fusion.hybrid_search",
        text=len(text_hits),
        vector=len(vector_hits),
        graph=len(definitions),
        hits=len(hits),
    )
    return hits


def _filtered_vector(
    view: ScopedView, vector: list[float], depth: int, admits: Callable[[str], bool]
) -> list[VectorResult]:
    """The first ``depth`` vector hits that ``admits`` (see :func:`_filtered`)."""
    return _filtered(lambda top: view.similarity_search(vector, top_k=top), depth, admits)


def _unfiltered_text(
    view: ScopedView, query: str, depth: int, admits: Callable[[str], bool]
) -> list[TextResult]:
    """The text ranking filtered here, for a text backend that takes the query
    but not the ``path``/``lang`` options (the Milvus adapter): as the vector
    source is.  Empty when it refuses the query itself."""
    try:
        return _filtered(lambda top: view.search(query, max_results=top), depth, admits)
    except QueryError:
        return []


_Hit = TypeVar("_Hit", TextResult, VectorResult)


def _filtered(
    search: Callable[[int], list[_Hit]], depth: int, admits: Callable[[str], bool]
) -> list[_Hit]:
    """The first ``depth`` hits of ``search(top)`` that ``admits``, exactly as
    a filtering index would return them: deeper searches until enough pass
    or the scope has no more units (a search returning fewer than it was
    asked), within the first :data:`MAX_FILTERED_CANDIDATES` hits (or
    ``depth`` x :data:`FILTERED_VECTOR_FACTOR`, if larger)."""
    top = depth * FILTERED_VECTOR_FACTOR
    cap = max(top, MAX_FILTERED_CANDIDATES)
    while True:
        wide = search(top)
        kept = [r for r in wide if admits(r.uko_uri)]
        if len(kept) >= depth or len(wide) < top or top >= cap:
            return kept[:depth]
        top = min(top * 4, cap)


def _unique(uris: Iterable[str]) -> list[str]:
    # A backend ranks each unit once; this only guards the fusion's precondition.
    return list(dict.fromkeys(uris))


def reads_as_prose(query: str) -> bool:
    """Whether ``query`` reads as a question in words: at least three words,
    three in four of them plain (ASCII letters, lower case after the first,
    at most a trailing punctuation mark).  An identifier, call or code line
    alone is not one; a question naming one identifier among its words
    ("where is parse_config defined") is; text in other scripts is not (it
    keeps the plain gate)."""
    words = query.split()
    if len(words) < 3:
        return False
    plain = sum(1 for w in words if _PLAIN_WORD.fullmatch(w))
    return plain * 4 >= 3 * len(words)
