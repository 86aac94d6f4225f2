"""Milvus adapter for the :class:`~cleveragents.domain.models.acms.backends.TextIndex` port.

Full-text search is Milvus's BM25 *function*: the server analyses a VARCHAR
field into a sparse vector on insert and scores a query text against it.
One collection, one row per unit::

    id           VARCHAR(64), primary key   SHA-256 of the unit URI
    resource_id  VARCHAR(26), partition key canonical ULID of the owning resource
    uko_uri      VARCHAR                    the unit URI
    content      VARCHAR                    the unit text, as given
    terms        VARCHAR, analysed          the code-aware terms of content (below)
    meta         JSON                       the unit metadata (str -> str)
    sparse       SPARSE_FLOAT_VECTOR        BM25 output of ``terms``

Code-aware analysis runs here, on both sides: identifiers are split as the
Tantivy adapter splits them (``parseJsonV2`` -> ``parse json v2``,
``HTTPServer`` -> ``http server``), and the server's standard analyser then
splits on non-word characters and lower-cases.

Query language: BM25 is a bag of words.  The plain syntax (default) reads
any string as its words (the first 64 distinct terms; punctuation is never an
error).  With ``syntax="tantivy"`` a query is words (and quoted
phrases, read as their words) joined by an optional ``OR``; a unit matches if
it holds any of them.  There is no symbol field here (no definition boost),
and the ``path``/``lang`` filters are not supported: asking for one raises
:class:`QueryError` rather than silently searching everything.  With the
tantivy syntax, what the engine cannot honour is refused with a
:class:`QueryError` rather than silently widened: ``AND``, ``NOT``, ``+``/``-``
prefixes, wildcards, fuzzy and boost suffixes, ranges, and every field prefix
(``path:``, ``lang:``, ``symbol:``, ``content:``, the internal ones: the
filters they would be are not implemented here, and read as words they
would widen the search); unbalanced quotes or parentheses are malformed.
Text longer than a VARCHAR is cut to fit (:func:`.milvus_common.fit_unit`):
a unit's content comes back cut, with ``metadata["truncated"]`` set, and
words past the first 64 KiB of its terms do not find it.

Scope is a server-side filter on the partition key, applied before ranking:
out-of-scope rows never come back and never take a top-k slot.  Unlike the
Tantivy adapter, **scores are not scope-local**: Milvus computes BM25's IDF
and average length over the collection's data (Milvus Lite: per segment),
in-scope or not, so adding out-of-scope documents can change in-scope scores
(``tests/integration/test_remote_milvus.py::test_bm25_statistics_are_not_scope_local``
shows it).  Scores are ``bm25 / (bm25 + 8)`` like the Tantivy adapter's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from cleveragents.domain.models.acms.backends import (
    IndexUnit,
    TextResult,
    validate_non_empty,
    validate_positive_int,
)
from cleveragents.domain.models.acms.errors import QueryError
from cleveragents.domain.models.acms.text_query import MAX_PLAIN_TERMS, match_lines, text_options
from cleveragents.domain.models.acms.ulids import canonical_ulid, validate_scope
from cleveragents.infrastructure.acms.milvus_common import (
    MilvusCollection,
    fit_unit,
    resource_filter,
    scope_filter,
    unit_id,
    uris_of,
)
from cleveragents.infrastructure.acms.text_analysis import ACRONYM_BOUNDARY, MAX_TOKEN_CHARS

if TYPE_CHECKING:
    from pymilvus import MilvusClient

__all__ = ["MAX_QUERY_CHARS", "MilvusTextBackend", "code_terms", "parse_query"]

MAX_QUERY_CHARS = 10_000
MAX_QUERY_TERMS = 1_000
_SCORE_HALF = 8.0
_OUTPUT = ["uko_uri", "content", "meta"]

# As the Tantivy analyser: a capitalised or lower-case word, an upper-case run,
# a number, or any other run of letters; acronyms split before a word.
_TOKEN = re.compile(r"[A-Z]?[a-z]+|[A-Z]+|[0-9]+|[^\W\d_]+")

_LEXEME = re.compile(r'\s+|"[^"]*"|[()]|[^\s()"]+')
# ``name:`` where Tantivy's syntax reads a field (``std::vector`` is not one).
_FIELD = re.compile(r"(?<![\w.:])(\w+)\s*:(?!:)")
_QUOTED = re.compile(r'"[^"]*"')
# +/- prefixes, wildcards, fuzzy and boost suffixes (ranges need TO, refused).
_UNSUPPORTED = re.compile(r"^[+-]|\*|[~^]\d*(\.\d+)?$")
_OPERATORS = {"AND", "NOT", "&&", "||", "!", "TO"}


def code_terms(text: str) -> str:
    """The searchable terms of ``text``, lower case, space separated.

    A term of 100 UTF-8 bytes or more is dropped, as Tantivy's
    ``remove_long`` drops it: a long identifier is found, or not, alike
    on both engines.
    """
    split = ACRONYM_BOUNDARY.sub(" ", text)
    return " ".join(
        t.lower()
        for t in _TOKEN.findall(split)
        if len(t) < MAX_TOKEN_CHARS
        and (t.isascii() or len(t.encode("utf-8", "surrogatepass")) < MAX_TOKEN_CHARS)
    )


def parse_query(query: str) -> list[str]:
    """The words of a query, or a :class:`QueryError` for what BM25 cannot do.

    Raises:
        QueryError: malformed (unbalanced quotes or parentheses), too long, or
            using syntax this engine cannot honour (see the module docstring).
    """
    if len(query) > MAX_QUERY_CHARS:
        raise QueryError(
            f"the query is {len(query)} characters long; the limit is {MAX_QUERY_CHARS}"
        )
    if query.count('"') % 2:
        raise QueryError("malformed query: unbalanced double quote")
    field = _FIELD.search(_QUOTED.sub(" ", query))
    if field is not None:
        # Every field would otherwise be read as one more word (path:tool.py
        # as the words path, tool, py): a wider search than the one asked for.
        raise QueryError(
            f"the Milvus text backend does not support the field {field.group(1)[:40]!r}: "
            "it searches content only (quote the text to search it as words)"
        )
    depth = 0
    words: list[str] = []
    for m in _LEXEME.finditer(query):
        lexeme = m.group()
        if lexeme.isspace():
            continue
        if lexeme == "(":
            depth += 1
            continue
        if lexeme == ")":
            depth -= 1
            if depth < 0:
                raise QueryError("malformed query: unbalanced parentheses")
            continue
        if lexeme.startswith('"'):
            words.extend(code_terms(lexeme[1:-1]).split())
            continue
        if lexeme == "OR":
            continue
        if lexeme in _OPERATORS:
            raise QueryError(
                f"the Milvus text backend does not support {lexeme}: BM25 here is a "
                "bag of words (a unit matches any of them)"
            )
        if _UNSUPPORTED.search(lexeme):
            raise QueryError(
                f"the Milvus text backend does not support {lexeme[:40]!r}: no wildcards, "
                "fuzzy or boosted terms, ranges or +/- prefixes"
            )
        words.extend(code_terms(lexeme).split())
    if depth:
        raise QueryError("malformed query: unbalanced parentheses")
    if len(words) > MAX_QUERY_TERMS:
        raise QueryError(f"the query has {len(words)} terms; the limit is {MAX_QUERY_TERMS}")
    return words


def _create(client: MilvusClient, name: str) -> None:
    from pymilvus import DataType, Function, FunctionType

    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
    schema.add_field("resource_id", DataType.VARCHAR, max_length=26, is_partition_key=True)
    schema.add_field("uko_uri", DataType.VARCHAR, max_length=65_535)
    schema.add_field("content", DataType.VARCHAR, max_length=65_535)
    schema.add_field(
        "terms",
        DataType.VARCHAR,
        max_length=65_535,
        enable_analyzer=True,
        analyzer_params={"type": "standard"},
    )
    schema.add_field("meta", DataType.JSON)
    schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
    schema.add_function(
        Function(
            name="terms_bm25",
            function_type=FunctionType.BM25,
            input_field_names=["terms"],
            output_field_names=["sparse"],
        )
    )
    index = client.prepare_index_params()
    index.add_index(field_name="sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
    client.create_collection(name, schema=schema, index_params=index, consistency_level="Strong")


def _check(description: dict[str, Any]) -> None:
    names = {f.get("name") for f in description.get("fields", [])}
    if not {"terms", "sparse", "uko_uri", "resource_id"} <= names:
        raise ValueError("the Milvus collection is not an ACMS text collection")


class MilvusTextBackend:
    """A :class:`~cleveragents.domain.models.acms.backends.TextIndex` on Milvus BM25.

    Args:
        uri: Milvus server address (``http://host:19530``).
        token: credentials (``user:password`` or API key); never logged.
        collection: collection name.
        timeout: seconds any one server call may take.
        required: whether a read of the collection, missing on the server, is
            an error (something indexed should be there); reads then never
            create it.  None: created when missing, at once (used on its own).

    Raises:
        ValueError: invalid arguments or a collection of another layout.
        IndexUnavailableError: the server cannot be reached.
    """

    def __init__(
        self,
        uri: str,
        *,
        token: str | None = None,
        collection: str = "acms_text",
        timeout: float = 10.0,
        required: Callable[[], bool] | None = None,
    ) -> None:
        self._coll = MilvusCollection(
            uri=uri,
            token=token,
            collection=collection,
            timeout=timeout,
            create=_create,
            required=required,
            check=_check,
        )

    def ping(self) -> None:
        """Raise :class:`IndexUnavailableError` while Milvus is unreachable, or
        the collection is missing while something indexed should be in it
        (``acms status``, the image's health check)."""
        self._coll.ping()

    def create_missing(self) -> None:
        """Create the collection if Milvus does not hold it: a writer's first
        step (a read never creates one; see :mod:`.milvus_common`)."""
        self._coll.create_missing()

    def close(self) -> None:
        """Close the client; later calls raise IndexUnavailableError."""
        self._coll.close()

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
        """BM25 search of the in-scope units (any query word matches).

        ``max_results`` is clamped to Milvus's cap of 16,384.  Ties come in URI
        order.  Scores depend on collection-wide statistics (module docstring).

        Raises:
            TypeError / ValueError: as the Protocol says; :class:`QueryError`
                for a ``path``/``lang`` filter (unsupported here) and, with
                ``syntax="tantivy"``, syntax the engine cannot honour.
            IndexUnavailableError: the server failed or did not answer in time.
        """
        validate_non_empty(query, "query")
        validate_positive_int(max_results, "max_results")
        canonical = validate_scope(scope)
        options = text_options(syntax, path, lang)
        if options.filtered:
            raise QueryError("the Milvus text backend does not support the path and lang filters")
        if options.syntax == "tantivy":
            words = parse_query(query)
        else:
            words = list(dict.fromkeys(code_terms(query[:MAX_QUERY_CHARS]).split()))
            words = words[:MAX_PLAIN_TERMS]
        if not canonical or not words:
            return []
        hits = self._coll.search(
            [" ".join(words)],
            "sparse",
            limit=max_results,
            expr=scope_filter(canonical),
            metric="BM25",
            output_fields=_OUTPUT,
        )
        wanted = set(words)
        results = []
        for hit in hits:
            found = _result(hit)
            lines = match_lines(
                found.content,
                found.metadata.get("start_line"),
                wanted,
                lambda line: code_terms(line).split(),
            )
            metadata = {**found.metadata, "match_lines": lines}
            results.append(TextResult(found.uko_uri, found.content, found.score, metadata))
        results.sort(key=lambda r: (-r.score, r.uko_uri))
        return results

    def upsert(
        self, resource_id: str, units: Sequence[IndexUnit], *, delete_uris: Iterable[str] = ()
    ) -> None:
        """Delete ``delete_uris``, then add or replace ``units`` (two server calls;
        see :meth:`MilvusVectorBackend.upsert` about atomicity).

        Content and terms longer than a Milvus VARCHAR (64 KiB) are cut to
        fit, keeping their start (see :func:`.milvus_common.fit_unit`).

        Raises:
            ValueError: a unit or URI of another resource, or a URI longer
                than a Milvus VARCHAR.
            IndexUnavailableError: the server failed.
        """
        rid = canonical_ulid(resource_id)
        units = list(units)
        doomed = uris_of(rid, delete_uris)
        rows: dict[str, dict[str, Any]] = {}
        for unit in units:
            if not isinstance(unit, IndexUnit):
                raise TypeError("units must be IndexUnit values")
            if unit.resource_id != rid:
                raise ValueError(f"unit {unit.uko_uri[:80]!r} does not belong to {rid}")
            key = unit_id(unit.uko_uri)
            rows[key] = {
                "id": key,
                "resource_id": rid,
                **fit_unit(unit.uko_uri, unit.content, unit.metadata, _terms_of(unit)),
            }
        stale = {unit_id(u) for u in doomed} - set(rows)
        if stale:
            self._coll.delete_ids(stale)
        self._coll.upsert(list(rows.values()))

    def delete(self, resource_id: str, uris: Iterable[str] | None = None) -> None:
        """Delete the given units of a resource, or all of them when ``uris`` is None."""
        rid = canonical_ulid(resource_id)
        if uris is None:
            self._coll.delete_where(resource_filter(rid))
            return
        doomed = uris_of(rid, uris)
        if doomed:
            self._coll.delete_ids(unit_id(u) for u in doomed)

    def holds_any(self, resource_id: str) -> bool:
        """Whether any unit of the resource is indexed (one row asked for)."""
        return self._coll.any_row(resource_filter(canonical_ulid(resource_id)))

    def unit_uris(self, resource_id: str) -> set[str]:
        """URIs of the units indexed for a resource."""
        rid = canonical_ulid(resource_id)
        return {row["uko_uri"] for row in self._coll.iterate(resource_filter(rid), ["uko_uri"])}

    def units(self, resource_id: str) -> Iterator[IndexUnit]:
        """Not offered: a change of embedder re-indexes a Milvus-backed resource in full.

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError(
            "the Milvus text index does not read units back; a change of embedder "
            "re-indexes the resource in full"
        )

    def resource_ids(self) -> set[str]:
        """ULIDs of the resources with at least one unit (a scan: maintenance only)."""
        return {row["resource_id"] for row in self._coll.iterate('id != ""', ["resource_id"])}


def _terms_of(unit: IndexUnit) -> str:
    # The path is searchable too, as in the Tantivy adapter.  BM25 reads a bag
    # of words, so the order is free: path first, so that terms cut to fit a
    # VARCHAR lose the end of the content, never the path.
    path = code_terms(unit.metadata.get("path", ""))
    return f"{path} {code_terms(unit.content)}" if path else code_terms(unit.content)


def _result(hit: dict[str, Any]) -> TextResult:
    entity = hit.get("entity", {})
    meta = entity.get("meta") or {}
    # Milvus returns the BM25 score; Milvus Lite returns it negated (a distance).
    raw = abs(float(hit.get("distance", 0.0)))
    score = raw / (raw + _SCORE_HALF) if math.isfinite(raw) else 0.0
    return TextResult(
        uko_uri=str(entity["uko_uri"]),
        content=str(entity.get("content", "")),
        score=score,
        metadata={str(k): str(v) for k, v in meta.items()},
    )
