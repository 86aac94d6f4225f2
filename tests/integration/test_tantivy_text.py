"""TantivyTextBackend against real Tantivy indexes, on disk and in RAM.

The central property is scope exactness: a scoped search returns exactly the
merge of per-resource indexes holding only the in-scope units (URIs, order
and scores; see ``text_oracle.py``), so nothing outside the scope can crowd
out or influence a result.
"""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs
from ulid import ULID

from cleveragents.domain.models.acms.backends import IndexUnit, TextIndex, TextResult
from cleveragents.domain.models.acms.errors import IndexUnavailableError, QueryError
from cleveragents.domain.models.acms.uko import resource_id_of, unit_uri
from cleveragents.infrastructure.acms.tantivy_text import TantivyTextBackend
from text_oracle import ShardOracle, oracle_of


def new_ulid() -> str:
    return str(ULID())


def unit(rid: str, path: str, content: str, line: int = 1, **extra: str) -> IndexUnit:
    return IndexUnit(unit_uri(rid, path, f"L{line}-L{line + 4}"), content, {"path": path, **extra})


def uris(results: list[TextResult]) -> list[str]:
    return [r.uko_uri for r in results]


def assert_same_results(got: list[TextResult], want: list[TextResult]) -> None:
    assert uris(got) == uris(want)
    for g, w in zip(got, want, strict=True):
        assert math.isclose(g.score, w.score, abs_tol=1e-6), (g, w)
        assert g.content == w.content
        assert g.metadata == w.metadata


@pytest.fixture(params=["disk", "ram"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TantivyTextBackend]:
    b = TantivyTextBackend(tmp_path / "text" if request.param == "disk" else None)
    yield b
    b.close()


def test_satisfies_text_index_protocol(backend: TantivyTextBackend) -> None:
    assert isinstance(backend, TextIndex)


# ---------------------------------------------------------------- analysis


IDENTIFIERS = {
    "def parseJsonV2(data): return data": [
        "parse",
        "json",
        "JSON",
        "v2",
        "2",
        "parseJsonV2",
        "ParseJsonV2",
        "parse_json_v2",
    ],
    "snake_case_name = 1": ["snake", "case", "name", "snake_case_name", "SNAKE", "snakeCaseName"],
    "raise HTTPServerError()": ["http", "server", "error", "HTTPServer", "ServerError"],
    "req = XMLHttpRequest2()": ["xml", "http", "request", "XMLHttp", "xml_http_request"],
    "class IOError2Handler: pass": ["io", "error", "handler", "IOError"],
}


@pytest.mark.parametrize(
    ("content", "query"),
    [(content, query) for content, queries in IDENTIFIERS.items() for query in queries],
)
def test_identifiers_are_found_by_their_parts(
    backend: TantivyTextBackend, content: str, query: str
) -> None:
    rid = new_ulid()
    target = unit(rid, "src/target.py", content)
    backend.upsert(rid, [target, unit(rid, "src/other.py", "nothing relevant here", 10)])
    assert uris(backend.search(query, scope=frozenset({rid}))) == [target.uko_uri]


def test_parts_do_not_match_unrelated_words(backend: TantivyTextBackend) -> None:
    rid = new_ulid()
    backend.upsert(rid, [unit(rid, "a.py", "def parseJsonV2(): pass")])
    for query in ("pars", "jsonv", "parsejsonv2", "xml"):
        assert backend.search(query, scope=frozenset({rid}), syntax="tantivy") == [], query
    # Plain mode ORs the parts: only the whole-word misses stay empty.
    for query in ("pars", "jsonv", "xml"):
        assert backend.search(query, scope=frozenset({rid})) == [], query


def test_path_metadata_is_searchable(backend: TantivyTextBackend) -> None:
    rid = new_ulid()
    target = unit(rid, "src/configLoader/yaml_reader.py", "x = 1")
    backend.upsert(rid, [target, unit(rid, "src/main.py", "y = 2", 5)])
    scope = frozenset({rid})
    for query in ("loader", "yaml", "path:reader", "configLoader"):
        assert uris(backend.search(query, scope=scope)) == [target.uko_uri], query


def test_non_ascii_and_surrogates_round_trip(backend: TantivyTextBackend) -> None:
    rid = new_ulid()
    content = "über café naïve 日本語 broken\udcff bytes"
    u = unit(rid, "docs/é.md", content, note="ünï\udcfe")
    backend.upsert(rid, [u])
    for query in ("über", "CAFÉ", "日本語", "broken"):
        (hit,) = backend.search(query, scope=frozenset({rid}))
        assert hit.content == content
        assert hit.metadata == {
            "path": "docs/é.md",
            "note": "ünï\udcfe",
            "resource_id": rid,
            "match_lines": "1",
        }


# ---------------------------------------------------------------- scope exactness


def test_out_of_scope_better_matches_do_not_crowd_out(backend: TantivyTextBackend) -> None:
    quiet, loud = new_ulid(), new_ulid()
    quiet_units = [unit(quiet, f"q/{i}.py", f"needle once {'pad ' * i}") for i in range(6)]
    loud_units = [unit(loud, f"l/{i}.py", "needle " * 30 + str(i)) for i in range(50)]
    backend.upsert(quiet, quiet_units)
    backend.upsert(loud, loud_units)

    got = backend.search("needle", scope=frozenset({quiet}), max_results=4)
    assert len(got) == 4
    assert all(resource_id_of(r.uko_uri) == quiet for r in got)
    assert_same_results(
        got, oracle_of(quiet_units).search("needle", scope=frozenset({quiet}), max_results=4)
    )


def test_out_of_scope_documents_do_not_change_scores(backend: TantivyTextBackend) -> None:
    # "rare" is rare in scope but common outside: a leaked IDF would lower it.
    a, b = new_ulid(), new_ulid()
    a_units = [unit(a, "a/1.py", "rare common"), unit(a, "a/2.py", "common common")]
    b_units = [unit(b, f"b/{i}.py", "rare rare filler words") for i in range(30)]
    backend.upsert(a, a_units)
    backend.upsert(b, b_units)
    scope = frozenset({a})
    oracle = oracle_of(a_units)
    for query in ("rare", "common", "rare OR common", "filler OR rare"):
        assert_same_results(backend.search(query, scope=scope), oracle.search(query, scope=scope))


def test_full_scope_with_replaced_units_matches_per_resource_indexes(
    backend: TantivyTextBackend,
) -> None:
    # Replaced and deleted units linger as deleted documents of that
    # resource's index (as in every Lucene-family index) until a merge drops
    # them, and count in its statistics and the scope's: the oracle replays
    # the same writes on per-resource indexes, so it holds the same ones.
    oracle = ShardOracle()
    a, b = new_ulid(), new_ulid()
    for target in (backend, oracle):
        target.upsert(a, [unit(a, f"a/{i}.py", "needle " * (i + 1)) for i in range(5)])
        target.upsert(b, [unit(b, f"b/{i}.py", "needle haystack") for i in range(5)])
        target.upsert(a, [unit(a, f"a/{i}.py", "haystack only") for i in range(3)])
        target.delete(a, [unit(a, "a/4.py", "").uko_uri])
    scope = frozenset({a, b})
    for query in ("needle", "haystack", "needle OR haystack"):
        assert_same_results(
            backend.search(query, scope=scope, max_results=50),
            oracle.search(query, scope=scope, max_results=50),
        )


def test_a_scope_of_several_resources_scores_as_one_index_of_them(
    backend: TantivyTextBackend,
) -> None:
    # "rare" is rare in a and common in b.  Over both, a's hit has the IDF of
    # the scope (rare among 32 documents), as in one resource c holding the
    # same 32 texts; each resource alone has its own.  (All contents have two
    # tokens, so the average field lengths agree too; scores are float32.)
    a, b, c, far = new_ulid(), new_ulid(), new_ulid(), new_ulid()
    a_texts = ["rare common", "common common"]
    b_texts = ["rare filler"] * 30
    backend.upsert(a, [unit(a, f"a/{i}.py", t) for i, t in enumerate(a_texts)])
    backend.upsert(b, [unit(b, f"b/{i}.py", t) for i, t in enumerate(b_texts)])
    backend.upsert(c, [unit(c, f"c/{i}.py", t) for i, t in enumerate(a_texts + b_texts)])
    # Out of the scope, a resource full of "rare" changes nothing.
    backend.upsert(far, [unit(far, f"f/{i}.py", "rare rare") for i in range(50)])

    both = backend.search("rare", scope=frozenset({a, b}), max_results=50)
    union = backend.search("rare", scope=frozenset({c}), max_results=50)
    alone = backend.search("rare", scope=frozenset({a}))
    assert len(both) == len(union) == 31
    assert [r.score for r in both] == pytest.approx([r.score for r in union], rel=1e-5)
    a_hit = next(r for r in both if resource_id_of(r.uko_uri) == a)
    c_hit = next(r for r in union if r.content == "rare common")
    assert a_hit.score == pytest.approx(c_hit.score, rel=1e-5)
    assert a_hit.score < alone[0].score  # rare in a alone, common in the scope


def test_a_small_resource_s_definition_outranks_loose_matches_of_a_large_one(
    backend: TantivyTextBackend,
) -> None:
    # An agent's scope: a one-file project beside a large library.  The
    # library mentions "load" and "settings" here and there; the project
    # defines load_settings.  Scored by each resource's own statistics, every
    # term of a one-document resource looked common (IDF 0.29) and the
    # library's loose matches came first.
    small, large = new_ulid(), new_ulid()
    definition = unit(
        small,
        "app.py",
        "def load_settings(path):\n    return parse(open(path).read())",
        symbols="load_settings",
    )
    backend.upsert(small, [definition])
    filler = [
        unit(large, f"lib/m{i}.py", f"def helper_{i}(x):\n    return x + {i}") for i in range(60)
    ]
    loose = [
        unit(large, "lib/config.py", "settings = load(file)  # load the settings, then load more"),
        unit(large, "lib/io.py", "def load(stream):\n    settings.load(stream)  # load settings"),
    ]
    backend.upsert(large, filler + loose)
    hits = backend.search("load_settings", scope=frozenset({small, large}), max_results=5)
    assert hits[0].uko_uri == definition.uko_uri, [h.uko_uri for h in hits]


def test_ties_are_ordered_by_uri_and_cut_exactly(backend: TantivyTextBackend) -> None:
    rid = new_ulid()
    same = [unit(rid, f"t/{name}.py", "twin text") for name in "qwertyuiopasdfgh"]
    backend.upsert(rid, same)
    for k in (1, 3, 7, 16, 40):
        got = backend.search("twin", scope=frozenset({rid}), max_results=k)
        assert uris(got) == sorted(u.uko_uri for u in same)[:k]
        assert len({r.score for r in got}) == 1


def test_unknown_and_lower_case_scope_members(backend: TantivyTextBackend) -> None:
    rid = new_ulid()
    backend.upsert(rid, [unit(rid, "a.py", "needle")])
    assert backend.search("needle", scope=frozenset({new_ulid()})) == []
    assert len(backend.search("needle", scope=frozenset({rid.lower(), new_ulid()}))) == 1


VOCAB = ["alpha", "beta", "gammaDelta", "HTTPServer", "x2", "snake_case", "needle", "zeta"]
RIDS = [f"01ARZ3NDEKTSV4RRFFQ69G5F{i:02d}" for i in range(6)]

documents = st.lists(st.sampled_from(VOCAB), min_size=1, max_size=10).map(" ".join)
corpora = st.dictionaries(
    st.sampled_from(RIDS),
    st.lists(documents, min_size=1, max_size=4),
    min_size=1,
    max_size=5,
)
queries = st.one_of(
    st.sampled_from(VOCAB),
    st.tuples(st.sampled_from(VOCAB), st.sampled_from(VOCAB)).map(" OR ".join),
    st.tuples(st.sampled_from(VOCAB), st.sampled_from(VOCAB)).map(" ".join),
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    corpus=corpora,
    rewrites=st.lists(st.tuples(st.sampled_from(RIDS), documents), max_size=3),
    scope=st.frozensets(st.sampled_from([*RIDS, "01ARZ3NDEKTSV4RRFFQ69G5FZZ"])),
    query=queries,
    k=st.integers(min_value=1, max_value=6),
)
def test_scoped_search_equals_an_index_of_only_the_scope(
    corpus: dict[str, list[str]],
    rewrites: list[tuple[str, str]],
    scope: frozenset[str],
    query: str,
    k: int,
) -> None:
    main = TantivyTextBackend()
    # Only the in-scope resources' writes reach the oracle.
    oracle = ShardOracle()
    for rid, texts in corpus.items():
        units = [unit(rid, f"f{i}.py", text) for i, text in enumerate(texts)]
        main.upsert(rid, units)
        if rid in scope:
            oracle.upsert(rid, units)
    for rid, text in rewrites:  # replacements leave deleted documents behind
        if rid in corpus:
            u = unit(rid, "f0.py", text)
            main.upsert(rid, [u])
            if rid in scope:
                oracle.upsert(rid, [u])

    got = main.search(query, scope=scope, max_results=k)
    assert all(resource_id_of(r.uko_uri) in scope for r in got)
    want = oracle.search(query, scope=scope, max_results=k)
    assert_same_results(got, want)
    # A second search is served from the cached shards and must not differ.
    assert_same_results(main.search(query, scope=scope, max_results=k), want)


# ---------------------------------------------------------------- hostile queries


@pytest.fixture
def two_resources(backend: TantivyTextBackend) -> tuple[str, str]:
    mine, other = new_ulid(), new_ulid()
    backend.upsert(mine, [unit(mine, "m.py", "mine shared")])
    backend.upsert(other, [unit(other, "o.py", "secret shared " * 5)])
    return mine, other


def test_field_queries_cannot_reach_other_resources(
    backend: TantivyTextBackend, two_resources: tuple[str, str]
) -> None:
    mine, other = two_resources
    other_uri = unit(other, "o.py", "").uko_uri
    scope = frozenset({mine})
    for query in (
        f"resource_id:{other} OR *",
        f"resource_id:{other}",
        f'uko_uri:"{other_uri}"',
        f'uko_uri:"{other_uri}" OR mine',
        "secret OR shared OR *",
        "resource_id:*",
        "resource_id:[0 TO Z]",
        "path_raw:o.py OR shared",
        "symbol_exact:* OR shared",
    ):
        for syntax in ("plain", "tantivy"):
            try:
                results = backend.search(query, scope=scope, max_results=50, syntax=syntax)
            except QueryError:
                assert syntax == "tantivy", query  # plain mode never refuses
                continue  # internal fields and a bare '*' are refused outright
            assert all(resource_id_of(r.uko_uri) == mine for r in results), query


@pytest.mark.parametrize(
    "query",
    ['"unbalanced', "(open", "close)", "a AND", "NOT", "foo:bar", "body:x", "a^-1", "content:*"],
)
def test_bad_queries_raise_query_error(
    backend: TantivyTextBackend, two_resources: tuple[str, str], query: str
) -> None:
    with pytest.raises(QueryError) as caught:
        backend.search(query, scope=frozenset(two_resources), syntax="tantivy")
    assert isinstance(caught.value, ValueError)
    assert str(caught.value)
    # The same text is a valid plain query.
    assert isinstance(backend.search(query, scope=frozenset(two_resources)), list)


@pytest.mark.parametrize("query", ["content:*", "path:*", "needle AND symbol:*"])
def test_a_field_star_is_refused_as_match_everything_not_as_a_schema_error(
    backend: TantivyTextBackend, two_resources: tuple[str, str], query: str
) -> None:
    """Found by a reviewer: "invalid query: Schema error: 'Field content is
    not a fast field.'" named the engine's internals, not the query's."""
    with pytest.raises(QueryError, match=r"'\w+:\*' \(every document with the field\)"):
        backend.search(query, scope=frozenset(two_resources), syntax="tantivy")


class _EnginePanic(BaseException):
    """Stands in for pyo3's PanicException, which derives from BaseException."""


class _PanickingIndex:
    def __init__(self, inner: object, exc: BaseException) -> None:
        self._inner = inner
        self._exc = exc

    def parse_query(self, *args: object, **kwargs: object) -> None:
        raise self._exc

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)


def test_engine_panic_becomes_query_error(
    backend: TantivyTextBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backend, "_index", _PanickingIndex(backend._index, _EnginePanic("boom")))
    with pytest.raises(QueryError, match="boom"):
        backend.search("x", scope=frozenset({new_ulid()}), syntax="tantivy")


def test_keyboard_interrupt_is_not_swallowed(
    backend: TantivyTextBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backend, "_index", _PanickingIndex(backend._index, KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        backend.search("x", scope=frozenset({new_ulid()}), syntax="tantivy")


def test_huge_boost_keeps_scores_in_range(
    backend: TantivyTextBackend, two_resources: tuple[str, str]
) -> None:
    results = backend.search("shared^99999999999999999999999", scope=frozenset(two_resources))
    assert results
    assert all(0.0 <= r.score <= 1.0 for r in results)


# ---------------------------------------------------------------- scores


def test_scores_are_normalised_bm25(backend: TantivyTextBackend) -> None:
    rid = new_ulid()
    backend.upsert(rid, [unit(rid, f"{i}.py", "word " * (i + 1) + "pad " * 5) for i in range(8)])
    results = backend.search("word", scope=frozenset({rid}), max_results=8)
    scores = [r.score for r in results]
    assert len(scores) == 8
    assert scores == sorted(scores, reverse=True)
    assert all(0.0 < s < 1.0 for s in scores)
    # raw / (raw + 8) is invertible: the raw BM25 scores are positive and finite.
    raws = [8.0 * s / (1.0 - s) for s in scores]
    assert all(math.isfinite(r) and r > 0 for r in raws)


# ---------------------------------------------------------------- write side


def test_upsert_replace_delete_and_listing(backend: TantivyTextBackend) -> None:
    a, b = new_ulid(), new_ulid()
    a1, a2, a3 = (unit(a, f"a{i}.py", f"alpha v1 n{i}") for i in range(3))
    backend.upsert(a, [a1, a2, a3])
    backend.upsert(b, [unit(b, "b.py", "bravo")])
    assert backend.resource_ids() == {a, b}
    assert backend.unit_uris(a) == {a1.uko_uri, a2.uko_uri, a3.uko_uri}

    # Read-after-write: the replacement is visible as soon as upsert returns.
    backend.upsert(a, [IndexUnit(a1.uko_uri, "alpha v2", {"path": "a0.py"})])
    (hit,) = backend.search("v2", scope=frozenset({a}), syntax="tantivy")  # the phrase "v 2"
    assert (hit.uko_uri, hit.content) == (a1.uko_uri, "alpha v2")
    assert len(backend.search("alpha", scope=frozenset({a}))) == 3

    a4 = unit(a, "a4.py", "alpha new")
    backend.upsert(a, [a4], delete_uris=[a2.uko_uri])
    assert backend.unit_uris(a) == {a1.uko_uri, a3.uko_uri, a4.uko_uri}

    backend.delete(a, [a3.uko_uri])
    assert backend.unit_uris(a) == {a1.uko_uri, a4.uko_uri}

    backend.delete(a)
    assert backend.unit_uris(a) == set()
    assert backend.resource_ids() == {b}
    assert backend.search("alpha", scope=frozenset({a, b})) == []
    assert len(backend.search("bravo", scope=frozenset({a, b}))) == 1


def test_repeated_uri_in_one_upsert_keeps_the_last(backend: TantivyTextBackend) -> None:
    rid = new_ulid()
    first = unit(rid, "a.py", "first")
    backend.upsert(rid, [first, IndexUnit(first.uko_uri, "second", {})])
    (hit,) = backend.search("first OR second", scope=frozenset({rid}))
    assert hit.content == "second"


def test_lower_case_resource_id_is_canonicalised(backend: TantivyTextBackend) -> None:
    rid = new_ulid()
    u = unit(rid, "a.py", "x")
    backend.upsert(rid.lower(), [u])
    assert backend.unit_uris(rid.lower()) == {u.uko_uri}
    assert backend.resource_ids() == {rid}
    backend.delete(rid.lower())
    assert backend.resource_ids() == set()


def test_write_side_validation(backend: TantivyTextBackend) -> None:
    a, b = new_ulid(), new_ulid()
    a_unit, b_unit = unit(a, "a.py", "alpha"), unit(b, "b.py", "bravo")
    backend.upsert(a, [a_unit])
    with pytest.raises(ValueError, match="does not belong"):
        backend.upsert(a, [b_unit])
    with pytest.raises(ValueError):
        backend.upsert(a, [], delete_uris=[b_unit.uko_uri])
    with pytest.raises(ValueError):
        backend.upsert(a, [], delete_uris=["https://example.com/x"])
    with pytest.raises(ValueError):
        backend.delete(a, [b_unit.uko_uri])
    with pytest.raises(ValueError, match="ULID"):
        backend.upsert("not-a-ulid", [])
    with pytest.raises(ValueError, match="ULID"):
        backend.delete("not-a-ulid")
    with pytest.raises(ValueError, match="ULID"):
        backend.unit_uris("nope")
    with pytest.raises(TypeError):
        backend.upsert(a, [{"uko_uri": a_unit.uko_uri}])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        backend.upsert(a, [], delete_uris=a_unit.uko_uri)
    with pytest.raises(TypeError):
        backend.delete(a, a_unit.uko_uri)
    # A rejected call changes nothing.
    assert backend.unit_uris(a) == {a_unit.uko_uri}
    assert backend.resource_ids() == {a}


def test_constructor_validation(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="view_cache_size"):
        TantivyTextBackend(view_cache_size=0)
    with pytest.raises(TypeError):
        TantivyTextBackend(lock_timeout="1")  # type: ignore[arg-type]
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    with pytest.raises(IndexUnavailableError):
        TantivyTextBackend(not_a_dir)


def test_closed_backend_is_unavailable(backend: TantivyTextBackend) -> None:
    backend.close()
    rid = new_ulid()
    with pytest.raises(IndexUnavailableError):
        backend.search("x", scope=frozenset({rid}))
    with pytest.raises(IndexUnavailableError):
        backend.upsert(rid, [unit(rid, "a.py", "x")])
    with pytest.raises(IndexUnavailableError):
        backend.resource_ids()


# ---------------------------------------------------------------- persistence and processes


def test_reopen_sees_committed_data(tmp_path: Path) -> None:
    path = tmp_path / "text"
    rid = new_ulid()
    u = unit(rid, "src/parserCore.py", "def parseJsonV2(): pass", owner="me")
    first = TantivyTextBackend(path)
    first.upsert(rid, [u])
    first.close()

    again = TantivyTextBackend(str(path))
    assert again.resource_ids() == {rid}
    assert again.unit_uris(rid) == {u.uko_uri}
    (hit,) = again.search("json", scope=frozenset({rid}))  # analyzer registered again
    assert hit.metadata == {
        "path": "src/parserCore.py",
        "owner": "me",
        "resource_id": rid,
        "match_lines": "1",
    }
    assert again.search("parser", scope=frozenset({rid}))
    again.close()


def test_commit_by_another_instance_reaches_readers(tmp_path: Path) -> None:
    path = tmp_path / "text"
    writer, reader = TantivyTextBackend(path), TantivyTextBackend(path)
    a, b = new_ulid(), new_ulid()
    writer.upsert(a, [unit(a, "a.py", "needle")])
    writer.upsert(b, [unit(b, "b.py", "needle needle")])
    assert len(reader.search("needle", scope=frozenset({a}))) == 1  # opens a's shard
    extra = unit(a, "a2.py", "needle again")
    writer.upsert(a, [extra])
    assert extra.uko_uri in uris(reader.search("needle", scope=frozenset({a})))
    assert reader.unit_uris(a) == writer.unit_uris(a)
    writer.close()
    reader.close()


def test_view_cache_eviction_keeps_results_right(tmp_path: Path) -> None:
    b = TantivyTextBackend(tmp_path / "text", view_cache_size=1)
    rids = [new_ulid() for _ in range(3)]
    for i, rid in enumerate(rids):
        b.upsert(rid, [unit(rid, f"{j}.py", f"needle r{i}") for j in range(i + 1)])
    for _ in range(2):
        for i, rid in enumerate(rids):
            assert len(b.search("needle", scope=frozenset({rid}))) == i + 1
    b.close()


HOLD_WRITER = textwrap.dedent(
    """
    import pathlib, sys, time
    import tantivy
    index = tantivy.Index.open(sys.argv[1])
    writer = index.writer(heap_size=20_000_000, num_threads=1)
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    pathlib.Path(sys.argv[3]).write_text("released")
    del writer
    time.sleep(0.2)
    """
)


@contextlib.contextmanager
def _hold_writer(path: Path, seconds: float, marker: Path) -> Iterator[None]:
    """Another process holds the index's writer lock for ``seconds``."""
    with subprocess.Popen(
        [sys.executable, "-c", HOLD_WRITER, str(path), str(seconds), str(marker)],
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        try:
            assert proc.stdout.readline().strip() == "locked"
            yield
        finally:
            proc.kill()


def test_upsert_waits_for_another_process_writer(tmp_path: Path) -> None:
    path, marker = tmp_path / "text", tmp_path / "released"
    b = TantivyTextBackend(path)
    rid = new_ulid()
    b.upsert(rid, [unit(rid, "first.py", "first")])
    with _hold_writer(path / rid, 0.8, marker):
        b.upsert(rid, [unit(rid, "a.py", "waited")])
        # The lock was only ours after the other process let it go.
        assert marker.exists()
    assert len(b.search("waited", scope=frozenset({rid}))) == 1
    b.close()


def test_upsert_gives_up_after_lock_timeout(tmp_path: Path) -> None:
    path, marker = tmp_path / "text", tmp_path / "released"
    b = TantivyTextBackend(path, lock_timeout=0.3)
    rid = new_ulid()
    first = unit(rid, "first.py", "first")
    b.upsert(rid, [first])
    with (
        _hold_writer(path / rid, 20.0, marker),
        pytest.raises(IndexUnavailableError, match="locked"),
    ):
        b.upsert(rid, [unit(rid, "a.py", "never")])
    assert not marker.exists()
    assert b.unit_uris(rid) == {first.uko_uri}
    b.close()


# ---------------------------------------------------------------- query-path caches


def test_cached_query_and_scope_keep_every_refusal(backend: TantivyTextBackend) -> None:
    rid = new_ulid()
    backend.upsert(rid, [unit(rid, "a.py", "needle hay")])
    scope = frozenset({rid})
    for _ in range(3):  # the parsed query and the validated scope are now cached
        assert uris(backend.search("needle", scope=scope)) == [unit_uri(rid, "a.py", "L1-L5")]
        for refused in ("resource_id:" + rid, "*", "(" * 40 + "needle" + ")" * 40):
            with pytest.raises(QueryError):
                backend.search(refused, scope=scope, syntax="tantivy")
            assert isinstance(backend.search(refused, scope=scope), list)  # plain: valid
        with pytest.raises(ValueError):
            backend.search("needle", scope=frozenset({rid, "not-a-ulid"}))
        with pytest.raises(TypeError):
            backend.search("needle", scope=set(scope))  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            backend.search("needle", scope=scope, max_results=0)
        assert backend.search("needle", scope=frozenset()) == []


class _LooksLikeAUlid:
    """Hashes and compares equal to a ULID string without being one."""

    def __init__(self, value: str) -> None:
        self._value = value

    def __hash__(self) -> int:
        return hash(self._value)

    def __eq__(self, other: object) -> bool:
        return other == self._value


def test_a_cached_scope_does_not_admit_non_string_members(backend: TantivyTextBackend) -> None:
    rid = new_ulid()
    backend.upsert(rid, [unit(rid, "a.py", "needle")])
    assert len(backend.search("needle", scope=frozenset({rid}))) == 1
    impostor = frozenset({_LooksLikeAUlid(rid)})
    assert impostor == frozenset({rid})
    with pytest.raises(TypeError):
        backend.search("needle", scope=impostor)  # type: ignore[arg-type]


def test_ties_beyond_twice_the_limit_are_still_cut_by_uri(backend: TantivyTextBackend) -> None:
    rid, other = new_ulid(), new_ulid()
    same = [unit(rid, f"t/{i:03d}.py", "twin text") for i in range(70)]
    backend.upsert(rid, [*same, unit(rid, "best.py", "twin twin twin")])
    backend.upsert(other, [unit(other, "o.py", "twin elsewhere")])
    scope = frozenset({rid})
    oracle = oracle_of([*same, unit(rid, "best.py", "twin twin twin")])
    for k in (1, 2, 5, 30, 71, 100):
        got = backend.search("twin", scope=scope, max_results=k)
        assert_same_results(got, oracle.search("twin", scope=scope, max_results=k))
        assert uris(got)[0] == unit_uri(rid, "best.py", "L1-L5")
        assert uris(got)[1:] == sorted(u.uko_uri for u in same)[: k - 1]


def test_shards_follow_repeated_commits_with_a_cached_query(tmp_path: Path) -> None:
    writer = TantivyTextBackend(tmp_path / "text")
    reader = TantivyTextBackend(tmp_path / "text")
    oracle = ShardOracle()
    a, b = new_ulid(), new_ulid()
    corpus = {a: [unit(a, "a.py", "needle one")], b: [unit(b, "b.py", "needle two needle")]}
    for step in range(4):
        corpus[a] = [unit(a, f"a{i}.py", "needle " + "hay " * i) for i in range(step + 1)]
        for target in (writer, oracle):
            target.upsert(a, corpus[a])
            target.upsert(b, corpus[b])
            if step == 2:
                target.delete(b)
        if step == 2:
            corpus[b] = []
        for scope in (frozenset({a}), frozenset({a, b})):
            want = oracle.search("needle", scope=scope, max_results=10)
            assert_same_results(reader.search("needle", scope=scope, max_results=10), want)
    writer.close()
    reader.close()


# ---------------------------------------------------------------- shards


def _loaded(logs: list[dict[str, object]]) -> list[object]:
    return [e["resource_id"] for e in logs if e["event"] == "acms.tantivy_text.shard_loaded"]


def _files(path: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in path.iterdir()}


def test_each_resource_is_its_own_index_inside_the_directory(tmp_path: Path) -> None:
    path = tmp_path / "text"
    b = TantivyTextBackend(path)
    a, c = new_ulid(), new_ulid()
    a1, a2 = unit(a, "a1.py", "alpha"), unit(a, "a2.py", "alpha beta")
    b.upsert(a, [a1, a2])
    b.upsert(c, [unit(c, "c.py", "gamma")])
    assert sorted(p.name for p in path.iterdir()) == sorted([a, c])
    assert (path / a / "meta.json").is_file()
    # A resource left without units has no index any more.
    b.delete(a, [a1.uko_uri, a2.uko_uri])
    assert sorted(p.name for p in path.iterdir()) == [c]
    b.delete(c)
    assert list(path.iterdir()) == []
    assert b.resource_ids() == set()
    assert b.search("gamma OR alpha", scope=frozenset({a, c})) == []
    b.close()


@pytest.mark.parametrize("where", ["disk", "ram"])
def test_a_commit_to_one_resource_leaves_other_shards_untouched(tmp_path: Path, where: str) -> None:
    b = TantivyTextBackend(tmp_path / "text" if where == "disk" else None)
    a, other = new_ulid(), new_ulid()
    b.upsert(a, [unit(a, "a.py", "needle")])
    b.upsert(other, [unit(other, "o.py", "needle needle")])
    both = frozenset({a, other})
    assert len(b.search("needle", scope=both)) == 2
    shard, written = b._shards[other], b._shards[a]
    on_disk = _files(tmp_path / "text" / other) if where == "disk" else {}
    with capture_logs() as logs:
        b.upsert(a, [unit(a, "a2.py", "needle again")])
        assert len(b.search("needle", scope=both)) == 3
    assert _loaded(logs) == []  # the writer's own shard moved with its commit
    assert b._shards[a] is not written
    assert b._shards[other] is shard  # same searcher, same snapshot
    if where == "disk":
        assert _files(tmp_path / "text" / other) == on_disk  # nothing of it was written
    b.close()


def test_a_commit_through_another_handle_reloads_only_that_resource(tmp_path: Path) -> None:
    path = tmp_path / "text"
    writer, reader = TantivyTextBackend(path), TantivyTextBackend(path)
    rids = [new_ulid() for _ in range(4)]
    for rid in rids:
        writer.upsert(rid, [unit(rid, "a.py", "needle")])
    scope = frozenset(rids)
    assert len(reader.search("needle", scope=scope)) == 4
    shards = dict(reader._shards)
    with capture_logs() as logs:
        writer.upsert(rids[0], [unit(rids[0], "b.py", "needle twice needle")])
        got = reader.search("needle", scope=scope)
    assert len(got) == 5
    assert _loaded(logs) == [rids[0]]  # by the reader; the writer's moved with its commit
    for rid in rids[1:]:
        assert reader._shards[rid] is shards[rid]
    writer.close()
    reader.close()


def test_merge_over_many_shards_equals_the_oracle(tmp_path: Path) -> None:
    b = TantivyTextBackend(tmp_path / "text")
    oracle = ShardOracle()
    rids = [new_ulid() for _ in range(20)]
    for i, rid in enumerate(rids):
        units = [
            unit(rid, f"f{j}.py", "twin " * (1 + (i + j) % 3) + "pad " * (j % 4)) for j in range(6)
        ]
        b.upsert(rid, units)
        oracle.upsert(rid, units)
    for scope in (frozenset(rids), frozenset(rids[:9]), frozenset(rids[::3])):
        for k in (1, 5, 17, 60, 200):
            assert_same_results(
                b.search("twin OR pad", scope=scope, max_results=k),
                oracle.search("twin OR pad", scope=scope, max_results=k),
            )
    b.close()


def test_a_relinked_directory_is_followed(tmp_path: Path) -> None:
    """``reindex --rebuild`` points the live link at a new generation."""
    old, new = tmp_path / "gen1" / "text", tmp_path / "gen2" / "text"
    link = tmp_path / "text"
    link.parent.mkdir(exist_ok=True)
    os.makedirs(old)
    os.symlink(old, link)
    a, c = new_ulid(), new_ulid()
    reader = TantivyTextBackend(link)
    with TantivyTextBackendClosing(link) as w:
        w.upsert(a, [unit(a, "a.py", "needle old")])
    assert uris(reader.search("needle", scope=frozenset({a, c}))) == [unit(a, "a.py", "").uko_uri]
    with TantivyTextBackendClosing(new) as w:
        w.upsert(c, [unit(c, "c.py", "needle new")])
    os.symlink(new, tmp_path / "swap")
    os.replace(tmp_path / "swap", link)
    assert uris(reader.search("needle", scope=frozenset({a, c}))) == [unit(c, "c.py", "").uko_uri]
    assert reader.resource_ids() == {c}
    reader.close()


class TantivyTextBackendClosing(TantivyTextBackend):
    def __enter__(self) -> TantivyTextBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def test_an_index_of_the_old_single_index_layout_asks_for_a_rebuild(tmp_path: Path) -> None:
    import tantivy

    path = tmp_path / "text"
    path.mkdir()
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("content")
    tantivy.Index(builder.build(), path=str(path))  # meta.json directly inside
    b = TantivyTextBackend(path)
    rid = new_ulid()
    for call in (
        lambda: b.search("x", scope=frozenset({rid})),
        lambda: b.upsert(rid, [unit(rid, "a.py", "x")]),
        b.resource_ids,
    ):
        with pytest.raises(IndexUnavailableError, match="--rebuild"):
            call()
    b.close()


def test_a_qualified_name_finds_that_class_s_method_over_its_namesakes(
    backend: TantivyTextBackend,
) -> None:
    # rdflib: ``Graph.parse`` ranked ConjunctiveGraph.parse (whose chunk says
    # "graph" more often) first, when only bare names were indexed whole.
    rid = new_ulid()
    graph = unit(
        rid,
        "core.py",
        "    def parse(self, source):\n        return self",
        symbols="parse",
        qualified="Graph.parse",
    )
    conjunctive = unit(
        rid,
        "memory.py",
        "    def parse(self, source):\n        graph = Graph(); graph.parse(source)  # a graph",
        symbols="parse",
        qualified="ConjunctiveGraph.parse",
    )
    backend.upsert(rid, [graph, conjunctive])
    hits = backend.search("Graph.parse", scope=frozenset({rid}))
    assert uris(hits)[:1] == [graph.uko_uri]
    hits = backend.search("ConjunctiveGraph.parse", scope=frozenset({rid}))
    assert uris(hits)[:1] == [conjunctive.uko_uri]
