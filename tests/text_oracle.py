"""The text oracle: one plain Tantivy index per resource, results merged by hand.

``TantivyTextBackend`` promises that a scoped search equals the merge of
per-resource indexes built from only the in-scope documents.  This oracle
builds exactly that, with raw tantivy-py and none of the backend's shard,
cache or fan-out code: every write is replayed on the resource's own index
(one writer and one commit per call, as the backend does, so the segment
layout and hence the BM25 statistics match), and a search runs the query on
each in-scope index, takes every hit and merges by (score desc, URI).
Documents, analysis, query building (both syntaxes, the filters) and the
``match_lines`` computation are the backend's own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import tantivy

from cleveragents.domain.models.acms.backends import IndexUnit, TextResult
from cleveragents.domain.models.acms.errors import QueryError
from cleveragents.domain.models.acms.text_query import glob_regex, match_lines, text_options
from cleveragents.infrastructure.acms.tantivy_query import (
    PlainQueryBuilder,
    QueryBuilder,
    analysable,
    code_analyzer,
    filter_query,
    query_terms,
)
from cleveragents.infrastructure.acms.tantivy_text import (
    _document,
    _normalise,
    _read_stored,
    _register,
    _schema,
)

_HEAP = 15_000_000


class ShardOracle:
    """Per-resource reference indexes fed with the same calls as the backend."""

    def __init__(self) -> None:
        self._schema = _schema()
        self._indexes: dict[str, tantivy.Index] = {}
        self._parser = self._fresh(parses_queries=True)
        self._builder = QueryBuilder()
        self._plain = PlainQueryBuilder()
        self._analyzer = code_analyzer()

    def _fresh(self, *, parses_queries: bool) -> tantivy.Index:
        index = tantivy.Index(self._schema)
        _register(index, parses_queries=parses_queries)
        return index

    def _commit(self, rid: str, deletes: Iterable[tuple[str, str]], adds: list[IndexUnit]) -> None:
        index = self._indexes.get(rid)
        if index is None:
            if not adds:
                return
            index = self._indexes[rid] = self._fresh(parses_queries=False)
        writer = index.writer(_HEAP, 1)
        for field, value in deletes:
            writer.delete_documents_by_term(field, value)
        for u in adds:
            writer.add_document(_document(u.uko_uri, rid, u.content, u.metadata))
        writer.commit()
        writer.wait_merging_threads()
        index.reload()
        if index.searcher().num_docs == 0:
            del self._indexes[rid]  # a resource without units has no index

    def upsert(
        self, rid: str, units: Sequence[IndexUnit], *, delete_uris: Iterable[str] = ()
    ) -> None:
        latest = {u.uko_uri: u for u in units}
        removed = set(delete_uris)
        if not latest and not removed:
            return
        deletes = [("uko_uri", uri) for uri in removed | latest.keys()]
        self._commit(rid, deletes, list(latest.values()))

    def delete(self, rid: str, uris: Iterable[str] | None = None) -> None:
        if uris is None:
            self._commit(rid, [("resource_id", rid)], [])
            return
        removed = set(uris)
        if removed:
            self._commit(rid, [("uko_uri", uri) for uri in removed], [])

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
        """Raises QueryError exactly when the backend's query builder does."""
        options = text_options(syntax, path, lang)
        built: tantivy.Query | None
        if syntax == "tantivy":
            built = self._builder.build(self._parser, query)
        else:
            built = self._plain.build(self._schema, query)
        if built is None:
            return []
        if options.filtered:
            regex = None if options.path is None else glob_regex(options.path)
            built = filter_query(self._schema, built, path_regex=regex, lang=options.lang)
        terms = query_terms(self._analyzer, query, syntax=syntax)
        hits: list[tuple[float, str, str, tantivy.Document]] = []
        for rid in {r.upper() for r in scope}:
            index = self._indexes.get(rid)
            if index is None:
                continue
            searcher = index.searcher()
            try:
                found = searcher.search(built, searcher.num_docs, count=False).hits
            except ValueError as exc:
                raise QueryError(str(exc)) from exc
            for score, addr in found:
                doc = searcher.doc(addr)
                hits.append((float(score), str(doc.get_first("uko_uri")), rid, doc))
        hits.sort(key=lambda h: (-h[0], h[1]))
        out = []
        for score, _, rid, doc in hits[:max_results]:
            stored = _read_stored(doc)
            lines = match_lines(
                stored.content,
                stored.metadata.get("start_line"),
                terms,
                lambda line: self._analyzer.analyze(analysable(line)),
            )
            out.append(
                TextResult(
                    uko_uri=stored.uri,
                    content=stored.content,
                    score=_normalise(score),
                    metadata={**stored.metadata, "resource_id": rid, "match_lines": lines},
                )
            )
        return out

    def close(self) -> None:
        self._indexes.clear()


def oracle_of(units: Iterable[IndexUnit]) -> ShardOracle:
    """An oracle holding only ``units``, one upsert per resource."""
    oracle = ShardOracle()
    by_rid: dict[str, list[IndexUnit]] = {}
    for u in units:
        by_rid.setdefault(u.resource_id, []).append(u)
    for rid, group in by_rid.items():
        oracle.upsert(rid, group)
    return oracle
