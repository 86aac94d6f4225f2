"""The scope's IDF of a plain query over several shards (``scope_idf_factors``).

Oracle: BM25's IDF of one index holding every in-scope document, i.e. the
shards' document counts and each term's document frequencies summed.
"""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from cleveragents.infrastructure.acms.tantivy_query import bm25_idf, scope_idf_factors


@st.composite
def shard_stats(draw: st.DrawFn) -> list[tuple[int, list[int]]]:
    clauses = draw(st.integers(1, 6))
    shards = []
    for _ in range(draw(st.integers(1, 8))):
        docs = draw(st.integers(1, 10_000))
        shards.append(
            (docs, draw(st.lists(st.integers(0, docs), min_size=clauses, max_size=clauses)))
        )
    return shards


def idf(docs: int, freq: int) -> float:
    return math.log(1 + (docs - freq + 0.5) / (freq + 0.5))


@given(shard_stats())
def test_each_clause_scores_with_the_idf_of_the_whole_scope(
    stats: list[tuple[int, list[int]]],
) -> None:
    factors = scope_idf_factors(stats)
    assert len(factors) == len(stats)
    docs = sum(n for n, _ in stats)
    for (shard_docs, freqs), shard in zip(stats, factors, strict=True):
        if not any(freqs):
            assert shard is None  # nothing to match there: not searched
            continue
        assert shard is not None
        for i, freq in enumerate(freqs):
            if freq == 0:
                assert shard[i] == 1.0
                continue
            scope = idf(docs, sum(f[i] for _, f in stats))
            assert math.isclose(shard[i] * idf(shard_docs, freq), scope, rel_tol=1e-12)


@given(
    st.integers(1, 10_000).flatmap(
        lambda n: st.tuples(st.just(n), st.lists(st.integers(1, n), min_size=1))
    )
)
def test_one_shard_keeps_its_own_statistics(stat: tuple[int, list[int]]) -> None:
    (factors,) = scope_idf_factors([stat])
    assert factors == [1.0] * len(stat[1])


def test_tantivy_s_idf() -> None:
    # Tantivy's explanation of a term in 1 of 5 documents: idf 1.3862944.
    assert math.isclose(bm25_idf(5, 1), 1.3862944, rel_tol=1e-7)
