"""The text oracle: one plain Tantivy index per resource, results merged by hand.

``TantivyTextBackend`` promises that a scoped search equals the merge of
per-resource indexes built from only the in-scope documents, a plain query
over several of them weighted by the statistics of all of them together.
This oracle builds exactly that, with raw tantivy-py and none of the
backend's shard, cache or fan-out code: every write is replayed on the
resource's own index (one writer and one commit per call, as the backend
does, so the segment layout and hence the BM25 statistics match), and a
search runs the query on each in-scope index (a plain query's clauses
reweighted by ``idf(scope) / idf(index)``, computed here from the indexes'
own counts), takes every hit and merges by (score desc, URI).
Documents, analysis, query building (both syntaxes, the filters) and the
``match_lines`` computation are the backend's own.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import tantivy

from cleveragents.domain.models.acms.backends import IndexUnit, TextResult
from cleveragents.domain.models.acms.errors import QueryError
from cleveragents.domain.models.acms.text_query import (
    TextOptions,
    glob_regex,
    match_lines,
    text_options,
)
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
        in_scope = {r: self._indexes[r] for r in {r.upper() for r in scope} if r in self._indexes}
        queries = dict.fromkeys(in_scope, built)
        if syntax == "plain" and len(in_scope) > 1:
            queries = self._scope_weighted(query, in_scope, options)
        hits: list[tuple[float, str, str, tantivy.Document]] = []
        for rid, index in in_scope.items():
            searcher = index.searcher()
            try:
                found = searcher.search(queries[rid], searcher.num_docs, count=False).hits
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

    def _scope_weighted(
        self, query: str, indexes: dict[str, tantivy.Index], options: TextOptions
    ) -> dict[str, tantivy.Query]:
        """Per index, the plain query with each clause's weight times
        idf(scope) / idf(index): BM25's idf, ``ln(1 + (N - n + 0.5) / (n + 0.5))``,
        with N and n counted over every in-scope index (deleted documents
        not yet merged away count, as they do in Tantivy's own N and n)."""
        clauses = self._plain.clauses(query) or ()
        searchers = {rid: index.searcher() for rid, index in indexes.items()}
        docs = {rid: s.doc_freq("resource_id", rid) for rid, s in searchers.items()}
        freqs = {
            rid: [s.doc_freq(field, value) for field, value, _ in clauses]
            for rid, s in searchers.items()
        }

        def idf(n_docs: int, n: int) -> float:
            return math.log(1.0 + (n_docs - n + 0.5) / (n + 0.5))

        all_docs = sum(docs.values())
        scope_idf = [
            idf(all_docs, sum(freqs[rid][i] for rid in freqs)) for i in range(len(clauses))
        ]
        out: dict[str, tantivy.Query] = {}
        for rid in indexes:
            weighted = []
            for i, (field, value, weight) in enumerate(clauses):
                n = freqs[rid][i]
                factor = scope_idf[i] / idf(docs[rid], n) if n else 1.0
                clause = tantivy.Query.term_query(self._schema, field, value)
                weighted.append(
                    (tantivy.Occur.Should, tantivy.Query.boost_query(clause, weight * factor))
                )
            scoring = tantivy.Query.boolean_query(weighted)
            if options.filtered:
                regex = None if options.path is None else glob_regex(options.path)
                scoring = filter_query(self._schema, scoring, path_regex=regex, lang=options.lang)
            out[rid] = scoring
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
