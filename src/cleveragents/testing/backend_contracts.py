"""The backend contract, written once as pytest mixins.

Every implementation of a backend Protocol (stub or real engine) runs the
same tests.  An implementation's test module defines a small class that
inherits the mixins and supplies a ``backend`` fixture::

    class TestTantivyContract(TextIndexContract):
        @pytest.fixture
        def backend(self, tmp_path):
            b = TantivyTextBackend(tmp_path / "text")
            yield b
            b.close()

Mixins:

- :class:`TextBackendContract`, :class:`VectorBackendContract`,
  :class:`GraphBackendContract`: argument validation and empty-scope
  behaviour, for every implementation (read side only).
- :class:`TextIndexContract`, :class:`VectorIndexContract`,
  :class:`GraphIndexContract`: add the data tests that need the write side
  (``upsert`` / ``delete``): scope restriction, exact in-scope top-k,
  ordering, score range, replacement and deletion.

Vector backends under test must have dimension :data:`DIMENSION`.  A backend
that truly cannot do a thing skips that one test with a reason; it never
loosens an assertion.
"""

from __future__ import annotations

import math
import string
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from ulid import ULID

from cleveragents.domain.models.acms.backends import (
    CountedUnits,
    GraphBackend,
    GraphIndex,
    GraphResult,
    IndexUnit,
    Literal,
    TextBackend,
    TextIndex,
    TextResult,
    VectorBackend,
    VectorIndex,
    VectorResult,
)
from cleveragents.domain.models.acms.errors import QueryError
from cleveragents.domain.models.acms.uko import (
    UKO,
    file_uri,
    resource_id_of,
    resource_uri,
    unit_uri,
)

__all__ = [
    "DIMENSION",
    "GraphBackendContract",
    "GraphIndexContract",
    "TextBackendContract",
    "TextIndexContract",
    "VectorBackendContract",
    "VectorIndexContract",
    "new_ulid",
]

DIMENSION = 8

BAD_SCOPES_TYPE: list[object] = [
    "01ARZ3NDEKTSV4RRFFQ69G5FAV",
    ["01ARZ3NDEKTSV4RRFFQ69G5FAV"],
    {"01ARZ3NDEKTSV4RRFFQ69G5FAV"},
    ("01ARZ3NDEKTSV4RRFFQ69G5FAV",),
    None,
    frozenset({42}),
]
BAD_SCOPES_VALUE: list[frozenset[str]] = [
    frozenset({"not-a-ulid"}),
    frozenset({""}),
    frozenset({"01ARZ3NDEKTSV4RRFFQ69G5FA"}),  # 25 characters
    frozenset({"81ARZ3NDEKTSV4RRFFQ69G5FAV"}),  # overflows 128 bits
    frozenset({"01ARZ3NDEKTSV4RRFFQ69G5FAV", "01ARZ3NDEKTSV4RRFFQ69G5FAU!"}),
]


def new_ulid() -> str:
    """A fresh canonical ULID."""
    return str(ULID())


def _unit(rid: str, path: str, n: int, content: str) -> IndexUnit:
    return IndexUnit(
        unit_uri(rid, path, f"L{n}-L{n + 9}"),
        content,
        {"path": path, "start_line": str(n), "end_line": str(n + 9)},
    )


# What agents paste (issue 12): each was an "invalid query" before the plain syntax.
PASTED_QUERIES = [
    "A wrapper for create_connection() returning a (reader, writer) pair.",
    "Debug a statement executed via the exec() function.",
    "D. (k[,d]) -> D.get(k,d)",
    "foo(",
    "self.transitive_objects(",
    string.punctuation,
    '"unbalanced OR (',
    "resource_id:* OR uko_uri:x",
    "NOT NOT AND OR",
    "a^-1 content:* /re.*/ x~99",
    "(" * 200 + "needle",
]


def _code_unit(
    rid: str, path: str, n: int, content: str, *, language: str = "python", symbols: str = ""
) -> IndexUnit:
    metadata = {"path": path, "start_line": str(n), "end_line": str(n + 9), "language": language}
    if symbols:
        metadata["symbols"] = symbols
    return IndexUnit(unit_uri(rid, path, f"L{n}-L{n + 9}"), content, metadata)


def _assert_ordered_scores(results: Sequence[TextResult | VectorResult]) -> None:
    scores = [r.score for r in results]
    assert scores == sorted(scores, reverse=True)
    assert all(0.0 <= s <= 1.0 and math.isfinite(s) for s in scores)


def _in_scope(uri: str, scope: frozenset[str]) -> bool:
    return resource_id_of(uri) in {s.upper() for s in scope}


# ======================================================================= text


class TextBackendContract:
    """Read-side contract of :class:`TextBackend`."""

    @pytest.fixture
    def backend(self) -> Any:
        raise NotImplementedError("the implementation's test class supplies `backend`")

    def test_satisfies_protocol(self, backend: Any) -> None:
        assert isinstance(backend, TextBackend)

    @pytest.mark.parametrize("query", ["", "   ", "\n\t"])
    def test_rejects_empty_query(self, backend: Any, query: str) -> None:
        with pytest.raises(ValueError, match="query"):
            backend.search(query, scope=frozenset({new_ulid()}))

    def test_rejects_non_str_query(self, backend: Any) -> None:
        with pytest.raises(TypeError):
            backend.search(b"bytes", scope=frozenset({new_ulid()}))

    @pytest.mark.parametrize("bad", [0, -1, -(10**9)])
    def test_rejects_non_positive_max_results(self, backend: Any, bad: int) -> None:
        with pytest.raises(ValueError, match="max_results"):
            backend.search("x", scope=frozenset({new_ulid()}), max_results=bad)

    @pytest.mark.parametrize("bad", [True, False, 1.0, "3", None])
    def test_rejects_non_int_max_results(self, backend: Any, bad: object) -> None:
        with pytest.raises(TypeError, match="max_results"):
            backend.search("x", scope=frozenset({new_ulid()}), max_results=bad)

    @pytest.mark.parametrize("scope", BAD_SCOPES_TYPE)
    def test_scope_must_be_frozenset_of_str(self, backend: Any, scope: object) -> None:
        with pytest.raises(TypeError):
            backend.search("x", scope=scope)

    @pytest.mark.parametrize("scope", BAD_SCOPES_VALUE)
    def test_scope_members_must_be_ulids(self, backend: Any, scope: frozenset[str]) -> None:
        with pytest.raises(ValueError, match="ULID"):
            backend.search("x", scope=scope)

    def test_empty_scope_returns_nothing(self, backend: Any) -> None:
        assert backend.search("anything", scope=frozenset()) == []

    def test_lower_case_ulid_is_a_valid_scope(self, backend: Any) -> None:
        assert backend.search("x", scope=frozenset({new_ulid().lower()})) == []

    @pytest.mark.parametrize("query", PASTED_QUERIES)
    def test_plain_syntax_accepts_pasted_text(self, backend: Any, query: str) -> None:
        assert backend.search(query, scope=frozenset({new_ulid()})) == []

    @pytest.mark.parametrize("syntax", ["", "lucene", "PLAIN", "regex"])
    def test_rejects_unknown_syntax(self, backend: Any, syntax: str) -> None:
        with pytest.raises(QueryError, match="syntax"):
            backend.search("x", scope=frozenset({new_ulid()}), syntax=syntax)

    @pytest.mark.parametrize(
        ("option", "value"),
        [("syntax", None), ("syntax", 1), ("path", b"a/*"), ("path", 3), ("lang", ["python"])],
    )
    def test_rejects_options_of_the_wrong_type(
        self, backend: Any, option: str, value: object
    ) -> None:
        with pytest.raises(TypeError):
            backend.search("x", scope=frozenset({new_ulid()}), **{option: value})

    @pytest.mark.parametrize(
        ("option", "value"),
        [("path", ""), ("path", "   "), ("path", "x" * 600), ("lang", "py thon")],
    )
    def test_rejects_bad_filters(self, backend: Any, option: str, value: str) -> None:
        with pytest.raises(QueryError):
            backend.search("x", scope=frozenset({new_ulid()}), **{option: value})


class TextIndexContract(TextBackendContract):
    """Data contract of :class:`TextIndex` (needs ``upsert`` / ``delete``)."""

    @pytest.fixture
    def corpus(self, backend: Any) -> dict[str, list[IndexUnit]]:
        """Three resources; each unit holds its resource's marker word.

        ``loud`` repeats the shared word ``needle`` many times so it would win
        any unscoped ranking.
        """
        a, b, loud = new_ulid(), new_ulid(), new_ulid()
        data = {
            a: [
                _unit(a, f"a/f{i}.py", 1, f"alpha marker needle def f{i}(): pass") for i in range(5)
            ],
            b: [_unit(b, f"b/g{i}.py", 1, f"bravo marker needle class G{i}") for i in range(5)],
            loud: [_unit(loud, f"l/h{i}.py", 1, "needle " * 20 + f"loud h{i}") for i in range(40)],
        }
        for rid, units in data.items():
            backend.upsert(rid, units)
        return data

    def test_satisfies_index_protocol(self, backend: Any) -> None:
        assert isinstance(backend, TextIndex)

    def test_results_stay_in_scope(self, backend: Any, corpus: dict[str, list[IndexUnit]]) -> None:
        a, b, _ = corpus
        for scope in (frozenset({a}), frozenset({b}), frozenset({a, b})):
            results = backend.search("needle", scope=scope, max_results=100)
            assert results, scope
            assert all(_in_scope(r.uko_uri, scope) for r in results)

    def test_exact_top_k_is_not_crowded_out(
        self, backend: Any, corpus: dict[str, list[IndexUnit]]
    ) -> None:
        a = next(iter(corpus))
        results = backend.search("needle", scope=frozenset({a}), max_results=3)
        assert len(results) == 3
        assert all(_in_scope(r.uko_uri, frozenset({a})) for r in results)

    def test_all_in_scope_matches_come_back(
        self, backend: Any, corpus: dict[str, list[IndexUnit]]
    ) -> None:
        a, b, _ = corpus
        results = backend.search("marker", scope=frozenset({a, b}), max_results=50)
        expected = {u.uko_uri for u in corpus[a] + corpus[b]}
        assert {r.uko_uri for r in results} == expected

    def test_scores_ordered_and_normalised(
        self, backend: Any, corpus: dict[str, list[IndexUnit]]
    ) -> None:
        scope = frozenset(corpus)
        results = backend.search("needle OR marker", scope=scope, max_results=60)
        assert len(results) == 50
        _assert_ordered_scores(results)

    def test_max_results_caps(self, backend: Any, corpus: dict[str, list[IndexUnit]]) -> None:
        results = backend.search("needle", scope=frozenset(corpus), max_results=7)
        assert len(results) == 7

    def test_scope_is_case_insensitive(
        self, backend: Any, corpus: dict[str, list[IndexUnit]]
    ) -> None:
        a = next(iter(corpus))
        upper = backend.search("marker", scope=frozenset({a}))
        lower = backend.search("marker", scope=frozenset({a.lower()}))
        assert [r.uko_uri for r in upper] == [r.uko_uri for r in lower]
        assert upper

    def test_unknown_resource_matches_nothing(
        self, backend: Any, corpus: dict[str, list[IndexUnit]]
    ) -> None:
        assert backend.search("needle", scope=frozenset({new_ulid()})) == []

    def test_marker_of_other_resource_is_not_found(
        self, backend: Any, corpus: dict[str, list[IndexUnit]]
    ) -> None:
        a, b, _ = corpus
        assert backend.search("bravo", scope=frozenset({a})) == []
        assert backend.search("alpha", scope=frozenset({b})) == []

    def test_field_syntax_cannot_widen_scope(
        self, backend: Any, corpus: dict[str, list[IndexUnit]]
    ) -> None:
        a, b, loud = corpus
        for query in (f"resource_id:{b} OR alpha", f"resource_id:{loud}", "bravo OR alpha"):
            for syntax in ("plain", "tantivy"):
                try:
                    results = backend.search(
                        query, scope=frozenset({a}), max_results=100, syntax=syntax
                    )
                except QueryError:
                    assert syntax == "tantivy", query
                    continue
                assert all(_in_scope(r.uko_uri, frozenset({a})) for r in results), query

    def test_bad_syntax_is_a_value_error(
        self, backend: Any, corpus: dict[str, list[IndexUnit]]
    ) -> None:
        with pytest.raises(ValueError):
            backend.search('"unbalanced OR (', scope=frozenset(corpus), syntax="tantivy")

    @pytest.mark.parametrize("query", PASTED_QUERIES)
    def test_plain_syntax_never_refuses(
        self, backend: Any, corpus: dict[str, list[IndexUnit]], query: str
    ) -> None:
        a, b, _ = corpus
        results = backend.search(query, scope=frozenset({a, b}), max_results=50)
        assert all(_in_scope(r.uko_uri, frozenset({a, b})) for r in results)

    def test_punctuation_alone_finds_nothing(
        self, backend: Any, corpus: dict[str, list[IndexUnit]]
    ) -> None:
        for query in ("()!?", string.punctuation, "-> ::"):
            assert backend.search(query, scope=frozenset(corpus)) == [], query

    def test_plain_words_partially_matching_still_rank(
        self, backend: Any, corpus: dict[str, list[IndexUnit]]
    ) -> None:
        a, _, _ = corpus
        # "alpha" is in every unit of a; the other words are nowhere.
        results = backend.search("where is alpha(x) defined?", scope=frozenset({a}))
        assert {r.uko_uri for r in results} == {u.uko_uri for u in corpus[a]}

    @pytest.fixture
    def code(self, backend: Any) -> tuple[str, list[IndexUnit]]:
        """One resource: a definition, its uses, and files of two languages."""
        rid = new_ulid()
        units = [
            _code_unit(
                rid,
                "net/conn.py",
                40,
                "def create_connection(host, port):\n    sock = socket(host)\n    return sock\n",
                symbols="create_connection",
            ),
            *(
                _code_unit(
                    rid,
                    f"app/use{i}.py",
                    1,
                    f"reader, writer = create_connection(h, p)  # create_connection {i}\n"
                    f"conn = create_connection(h{i}, p)\n",
                )
                for i in range(6)
            ),
            _code_unit(
                rid,
                "docs/conn.md",
                1,
                "Call create_connection to open a connection.\n",
                language="markdown",
            ),
            _code_unit(rid, "net/deep/x/util.py", 1, "def helper():\n    return connection\n"),
        ]
        backend.upsert(rid, units)
        return rid, units

    def test_the_definition_ranks_first_for_its_name(
        self, backend: Any, code: tuple[str, list[IndexUnit]]
    ) -> None:
        rid, units = code
        for query in ("create_connection", "where is create_connection defined?"):
            results = backend.search(query, scope=frozenset({rid}))
            assert results[0].uko_uri == units[0].uko_uri, query

    def test_lang_filter_keeps_one_language(
        self, backend: Any, code: tuple[str, list[IndexUnit]]
    ) -> None:
        rid, units = code
        results = backend.search("connection", scope=frozenset({rid}), lang="Markdown")
        assert [r.uko_uri for r in results] == [units[7].uko_uri]
        python = backend.search("connection", scope=frozenset({rid}), lang="python", max_results=50)
        assert {r.uko_uri for r in python} == {u.uko_uri for u in units if u is not units[7]}
        assert backend.search("connection", scope=frozenset({rid}), lang="go") == []

    @pytest.mark.parametrize(
        ("glob", "paths"),
        [
            ("net/*", {"net/conn.py"}),
            ("net/**/*.py", {"net/conn.py", "net/deep/x/util.py"}),
            ("net/", {"net/conn.py", "net/deep/x/util.py"}),
            ("**/*.md", {"docs/conn.md"}),
            ("app/use?.py", {f"app/use{i}.py" for i in range(6)}),
            ("*.py", set()),
            ("./docs/conn.md", {"docs/conn.md"}),
        ],
    )
    def test_path_glob_filter(
        self, backend: Any, code: tuple[str, list[IndexUnit]], glob: str, paths: set[str]
    ) -> None:
        rid, _ = code
        results = backend.search("connection", scope=frozenset({rid}), path=glob, max_results=50)
        assert {r.metadata["path"] for r in results} == paths

    def test_filters_restrict_without_changing_scores_or_order(
        self, backend: Any, code: tuple[str, list[IndexUnit]]
    ) -> None:
        rid, _ = code
        scope = frozenset({rid})
        full = backend.search("create_connection socket", scope=scope, max_results=50)
        for options in ({"lang": "python"}, {"path": "app/**"}, {"path": "**", "lang": "python"}):
            got = backend.search("create_connection socket", scope=scope, max_results=50, **options)
            kept = [
                (r.uko_uri, r.score)
                for r in full
                if (options.get("lang") is None or r.metadata["language"] == options["lang"])
                and (options.get("path") != "app/**" or r.metadata["path"].startswith("app/"))
            ]
            assert [(r.uko_uri, r.score) for r in got] == kept, options
            # The exact top k of the filtered matches, not a filtered top k.
            top = backend.search("create_connection socket", scope=scope, max_results=2, **options)
            assert [r.uko_uri for r in top] == [uri for uri, _ in kept[:2]]

    def test_match_lines_are_file_line_numbers_of_matching_lines(
        self, backend: Any, code: tuple[str, list[IndexUnit]]
    ) -> None:
        rid, units = code
        results = backend.search("socket", scope=frozenset({rid}))
        assert [r.uko_uri for r in results] == [units[0].uko_uri]
        assert results[0].metadata["match_lines"] == "41"  # the chunk starts at line 40
        (hit,) = backend.search("return helper", scope=frozenset({rid}), path="net/deep/**")
        assert hit.metadata["match_lines"] == "1,2"

    def test_result_carries_content_and_metadata(
        self, backend: Any, corpus: dict[str, list[IndexUnit]]
    ) -> None:
        a = next(iter(corpus))
        by_uri = {u.uko_uri: u for u in corpus[a]}
        for r in backend.search("alpha", scope=frozenset({a})):
            unit = by_uri[r.uko_uri]
            assert r.content == unit.content
            assert r.metadata["path"] == unit.metadata["path"]

    def test_upsert_replaces_same_uri(
        self, backend: Any, corpus: dict[str, list[IndexUnit]]
    ) -> None:
        a = next(iter(corpus))
        old = corpus[a][0]
        backend.upsert(a, [IndexUnit(old.uko_uri, "zulu replaced", dict(old.metadata))])
        assert backend.search("alpha", scope=frozenset({a}), max_results=50).__len__() == 4
        hits = backend.search("zulu", scope=frozenset({a}))
        assert [h.uko_uri for h in hits] == [old.uko_uri]

    def test_delete_uris_and_whole_resource(
        self, backend: Any, corpus: dict[str, list[IndexUnit]]
    ) -> None:
        a, b, _ = corpus
        gone = corpus[a][0].uko_uri
        backend.delete(a, [gone])
        assert gone not in {r.uko_uri for r in backend.search("alpha", scope=frozenset({a}))}
        assert gone not in backend.unit_uris(a)
        backend.delete(b)
        assert backend.search("bravo", scope=frozenset({b})) == []
        assert backend.unit_uris(b) == set()
        assert b not in backend.resource_ids()
        assert a in backend.resource_ids()

    def test_upsert_with_delete_uris_is_one_change(
        self, backend: Any, corpus: dict[str, list[IndexUnit]]
    ) -> None:
        a = next(iter(corpus))
        old = corpus[a][1]
        new = _unit(a, old.metadata["path"], 20, "yankee new version")
        backend.upsert(a, [new], delete_uris=[old.uko_uri])
        assert backend.unit_uris(a) == {u.uko_uri for u in corpus[a]} - {old.uko_uri} | {
            new.uko_uri
        }

    def test_unit_count_follows_upserts_and_deletes(
        self, backend: Any, corpus: dict[str, list[IndexUnit]]
    ) -> None:
        a, b, loud = _counted(backend, corpus)
        old = corpus[a][0]
        backend.upsert(a, [IndexUnit(old.uko_uri, "zulu replaced", dict(old.metadata))])
        backend.upsert(a, [_unit(a, "a/new.py", 1, "yankee")], delete_uris=[corpus[a][1].uko_uri])
        backend.delete(b, [corpus[b][0].uko_uri])
        backend.delete(loud)
        _assert_unit_counts(backend, {a: 5, b: 4, loud: 0, new_ulid(): 0})

    def test_upsert_rejects_unit_of_other_resource(
        self, backend: Any, corpus: dict[str, list[IndexUnit]]
    ) -> None:
        a, b, _ = corpus
        with pytest.raises(ValueError):
            backend.upsert(a, [corpus[b][0]])
        with pytest.raises(ValueError):
            backend.upsert(a, [], delete_uris=[corpus[b][0].uko_uri])
        assert backend.unit_uris(b) == {u.uko_uri for u in corpus[b]}


def _counted(backend: Any, corpus: dict[str, Any]) -> list[str]:
    """The corpus's resources, after checking the index counts them as it
    lists them (skips an index that counts by listing: not a CountedUnits)."""
    if not isinstance(backend, CountedUnits):
        pytest.skip("this index counts a resource's units by listing them")
    _assert_unit_counts(backend, {rid: len(units) for rid, units in corpus.items()})
    with pytest.raises(ValueError):
        backend.unit_count("not-a-ulid")
    return list(corpus)


def _assert_unit_counts(backend: Any, expected: dict[str, int]) -> None:
    for rid, n in expected.items():
        assert backend.unit_count(rid) == n == len(backend.unit_uris(rid)), rid


# ===================================================================== vector


def _vec(*hot: int, noise: float = 0.0, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    v = rng.normal(0, noise, DIMENSION) if noise else np.zeros(DIMENSION)
    for h in hot:
        v[h] += 1.0
    return [float(x) for x in v]


class VectorBackendContract:
    """Read-side contract of :class:`VectorBackend` (dimension :data:`DIMENSION`)."""

    @pytest.fixture
    def backend(self) -> Any:
        raise NotImplementedError("the implementation's test class supplies `backend`")

    def test_satisfies_protocol(self, backend: Any) -> None:
        assert isinstance(backend, VectorBackend)

    def test_rejects_empty_embedding(self, backend: Any) -> None:
        with pytest.raises(ValueError, match="embedding"):
            backend.similarity_search([], scope=frozenset({new_ulid()}))

    @pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
    def test_rejects_non_finite_embedding(self, backend: Any, bad: float) -> None:
        emb = _vec(0)
        emb[3] = bad
        with pytest.raises(ValueError, match=r"NaN|infin"):
            backend.similarity_search(emb, scope=frozenset({new_ulid()}))

    @pytest.mark.parametrize("size", [1, DIMENSION - 1, DIMENSION + 1, 10 * DIMENSION])
    def test_rejects_wrong_dimension(self, backend: Any, size: int) -> None:
        with pytest.raises(ValueError, match="dimension"):
            backend.similarity_search([0.5] * size, scope=frozenset({new_ulid()}))

    @pytest.mark.parametrize("bad", ["abc", None, [True] * DIMENSION, [[0.1] * DIMENSION]])
    def test_rejects_non_float_embedding(self, backend: Any, bad: object) -> None:
        with pytest.raises((TypeError, ValueError)):
            backend.similarity_search(bad, scope=frozenset({new_ulid()}))

    @pytest.mark.parametrize("bad", [0, -5])
    def test_rejects_non_positive_top_k(self, backend: Any, bad: int) -> None:
        with pytest.raises(ValueError, match="top_k"):
            backend.similarity_search(_vec(0), scope=frozenset({new_ulid()}), top_k=bad)

    @pytest.mark.parametrize("bad", [True, 2.0, "3"])
    def test_rejects_non_int_top_k(self, backend: Any, bad: object) -> None:
        with pytest.raises(TypeError, match="top_k"):
            backend.similarity_search(_vec(0), scope=frozenset({new_ulid()}), top_k=bad)

    @pytest.mark.parametrize("scope", BAD_SCOPES_TYPE)
    def test_scope_must_be_frozenset_of_str(self, backend: Any, scope: object) -> None:
        with pytest.raises(TypeError):
            backend.similarity_search(_vec(0), scope=scope)

    @pytest.mark.parametrize("scope", BAD_SCOPES_VALUE)
    def test_scope_members_must_be_ulids(self, backend: Any, scope: frozenset[str]) -> None:
        with pytest.raises(ValueError, match="ULID"):
            backend.similarity_search(_vec(0), scope=scope)

    def test_empty_scope_returns_nothing(self, backend: Any) -> None:
        assert backend.similarity_search(_vec(0), scope=frozenset()) == []

    def test_numpy_vector_is_accepted(self, backend: Any) -> None:
        emb = np.asarray(_vec(1), dtype=np.float32)
        assert backend.similarity_search(emb, scope=frozenset({new_ulid()})) == []


def _embeddings(rows: list[list[float]]) -> npt.NDArray[np.float32]:
    return np.asarray(rows, dtype=np.float32)


class VectorIndexContract(VectorBackendContract):
    """Data contract of :class:`VectorIndex` (needs ``upsert`` / ``delete``)."""

    @pytest.fixture
    def corpus(self, backend: Any) -> dict[str, list[tuple[IndexUnit, list[float]]]]:
        """Resource ``a`` points along axis 0 with noise, ``b`` along axis 1;
        ``loud`` holds 40 rows exactly on the query direction (axis 0)."""
        a, b, loud = new_ulid(), new_ulid(), new_ulid()
        data: dict[str, list[tuple[IndexUnit, list[float]]]] = {
            a: [
                (_unit(a, f"a{i}.py", 1, f"a{i}"), _vec(0, 2, noise=0.3, seed=i)) for i in range(6)
            ],
            b: [
                (_unit(b, f"b{i}.py", 1, f"b{i}"), _vec(1, noise=0.3, seed=50 + i))
                for i in range(6)
            ],
            loud: [(_unit(loud, f"l{i}.py", 1, f"l{i}"), _vec(0)) for i in range(40)],
        }
        for rid, pairs in data.items():
            backend.upsert(rid, [u for u, _ in pairs], _embeddings([e for _, e in pairs]))
        return data

    def test_satisfies_index_protocol(self, backend: Any) -> None:
        assert isinstance(backend, VectorIndex)
        assert backend.dimension == DIMENSION

    def test_results_stay_in_scope(self, backend: Any, corpus: dict[str, Any]) -> None:
        a, b, _ = corpus
        for scope in (frozenset({a}), frozenset({b}), frozenset({a, b})):
            results = backend.similarity_search(_vec(0), scope=scope, top_k=100)
            assert len(results) == sum(len(corpus[r]) for r in scope)
            assert all(_in_scope(r.uko_uri, scope) for r in results)

    def test_exact_top_k_matches_brute_force(self, backend: Any, corpus: dict[str, Any]) -> None:
        a, b, _ = corpus
        scope = frozenset({a, b})
        query = _vec(0, 1, noise=0.5, seed=99)
        rows = [(u.uko_uri, np.asarray(e)) for rid in scope for u, e in corpus[rid]]
        q = np.asarray(query) / np.linalg.norm(query)
        sims = sorted(((float(q @ (e / np.linalg.norm(e))), uri) for uri, e in rows), reverse=True)[
            :4
        ]
        results = backend.similarity_search(query, scope=scope, top_k=4)
        assert [r.uko_uri for r in results] == [uri for _, uri in sims]
        for r, (s, _) in zip(results, sims, strict=True):
            assert r.score == pytest.approx(max(0.0, s), abs=1e-5)

    def test_not_crowded_out(self, backend: Any, corpus: dict[str, Any]) -> None:
        b = list(corpus)[1]
        results = backend.similarity_search(_vec(0), scope=frozenset({b}), top_k=3)
        assert len(results) == 3
        assert all(_in_scope(r.uko_uri, frozenset({b})) for r in results)

    def test_scores_ordered_and_in_range(self, backend: Any, corpus: dict[str, Any]) -> None:
        results = backend.similarity_search(_vec(3, 5), scope=frozenset(corpus), top_k=100)
        assert len(results) == 52
        _assert_ordered_scores(results)

    def test_huge_top_k_returns_all_in_scope(self, backend: Any, corpus: dict[str, Any]) -> None:
        a = next(iter(corpus))
        results = backend.similarity_search(_vec(0), scope=frozenset({a}), top_k=10**9)
        assert {r.uko_uri for r in results} == {u.uko_uri for u, _ in corpus[a]}

    def test_unknown_resource_matches_nothing(self, backend: Any, corpus: dict[str, Any]) -> None:
        assert backend.similarity_search(_vec(0), scope=frozenset({new_ulid()})) == []

    def test_scope_is_case_insensitive(self, backend: Any, corpus: dict[str, Any]) -> None:
        a = next(iter(corpus))
        lower = backend.similarity_search(_vec(0), scope=frozenset({a.lower()}))
        assert {r.uko_uri for r in lower} == {u.uko_uri for u, _ in corpus[a]}

    def test_upsert_replaces_and_delete_removes(self, backend: Any, corpus: dict[str, Any]) -> None:
        a, b, _ = corpus
        unit, _ = corpus[a][0]
        backend.upsert(a, [unit], _embeddings([_vec(7)]))
        top = backend.similarity_search(_vec(7), scope=frozenset({a}), top_k=1)
        assert [r.uko_uri for r in top] == [unit.uko_uri]
        assert top[0].score == pytest.approx(1.0, abs=1e-5)
        backend.delete(a, [unit.uko_uri])
        assert unit.uko_uri not in backend.unit_uris(a)
        assert len(backend.similarity_search(_vec(7), scope=frozenset({a}), top_k=50)) == 5
        backend.delete(b)
        assert backend.similarity_search(_vec(1), scope=frozenset({b})) == []
        assert b not in backend.resource_ids()

    def test_unit_count_follows_upserts_and_deletes(
        self, backend: Any, corpus: dict[str, Any]
    ) -> None:
        a, b, loud = _counted(backend, corpus)
        unit, _ = corpus[a][0]
        backend.upsert(a, [unit], _embeddings([_vec(7)]))
        added = _unit(a, "a-new.py", 1, "a-new")
        backend.upsert(a, [added], _embeddings([_vec(3)]), delete_uris=[corpus[a][1][0].uko_uri])
        backend.delete(b, [corpus[b][0][0].uko_uri])
        backend.delete(loud)
        _assert_unit_counts(backend, {a: 6, b: 5, loud: 0, new_ulid(): 0})

    def test_upsert_rejects_bad_embeddings(self, backend: Any, corpus: dict[str, Any]) -> None:
        a = next(iter(corpus))
        unit, _ = corpus[a][0]
        bad: list[object] = [
            np.zeros((1, DIMENSION), dtype=np.float32),  # zero row cannot be normalised
            np.full((1, DIMENSION), np.nan, dtype=np.float32),
            np.ones((2, DIMENSION), dtype=np.float32),  # two rows, one unit
            np.ones((1, DIMENSION + 1), dtype=np.float32),
        ]
        for emb in bad:
            with pytest.raises(ValueError):
                backend.upsert(a, [unit], emb)
        assert unit.uko_uri in backend.unit_uris(a)


# ====================================================================== graph

_SELECT_ALL = "SELECT ?s ?p ?o WHERE { ?s ?p ?o }"


class GraphBackendContract:
    """Read-side contract of :class:`GraphBackend`."""

    @pytest.fixture
    def backend(self) -> Any:
        raise NotImplementedError("the implementation's test class supplies `backend`")

    def test_satisfies_protocol(self, backend: Any) -> None:
        assert isinstance(backend, GraphBackend)

    @pytest.mark.parametrize("query", ["", "  "])
    def test_rejects_empty_query(self, backend: Any, query: str) -> None:
        with pytest.raises(ValueError, match="query"):
            backend.sparql_query(query, scope=frozenset({new_ulid()}))

    @pytest.mark.parametrize("value", ["", " "])
    def test_rejects_empty_subject_and_start(self, backend: Any, value: str) -> None:
        with pytest.raises(ValueError, match="subject"):
            backend.get_triples(value)
        with pytest.raises(ValueError, match="start"):
            backend.traverse(value)

    def test_rejects_negative_depth(self, backend: Any) -> None:
        with pytest.raises(ValueError, match="depth"):
            backend.traverse("urn:x", depth=-1)

    @pytest.mark.parametrize("bad", [True, 1.5, "2"])
    def test_rejects_non_int_depth(self, backend: Any, bad: object) -> None:
        with pytest.raises(TypeError, match="depth"):
            backend.traverse("urn:x", depth=bad)

    @pytest.mark.parametrize("scope", BAD_SCOPES_TYPE)
    def test_scope_must_be_frozenset_of_str(self, backend: Any, scope: object) -> None:
        with pytest.raises(TypeError):
            backend.sparql_query(_SELECT_ALL, scope=scope)
        if scope is not None:  # None means unrestricted for these two
            with pytest.raises(TypeError):
                backend.get_triples("urn:x", scope=scope)
            with pytest.raises(TypeError):
                backend.traverse("urn:x", scope=scope)

    @pytest.mark.parametrize("scope", BAD_SCOPES_VALUE)
    def test_scope_members_must_be_ulids(self, backend: Any, scope: frozenset[str]) -> None:
        with pytest.raises(ValueError, match="ULID"):
            backend.sparql_query(_SELECT_ALL, scope=scope)
        with pytest.raises(ValueError, match="ULID"):
            backend.get_triples("urn:x", scope=scope)
        with pytest.raises(ValueError, match="ULID"):
            backend.traverse("urn:x", scope=scope)

    def test_empty_scope_returns_nothing(self, backend: Any) -> None:
        assert backend.sparql_query(_SELECT_ALL, scope=frozenset()).triples == []
        assert backend.get_triples("urn:x", scope=frozenset()).triples == []
        assert backend.traverse("urn:x", scope=frozenset()).triples == []

    @pytest.mark.parametrize("direction", ["up", "", "OUT"])
    def test_rejects_unknown_direction(self, backend: Any, direction: str) -> None:
        with pytest.raises(ValueError, match="direction"):
            backend.traverse("urn:x", scope=frozenset({new_ulid()}), direction=direction)

    @pytest.mark.parametrize(("predicates", "error"), [(frozenset(), ValueError), ("p", TypeError)])
    def test_rejects_bad_predicates(self, backend: Any, predicates: object, error: type) -> None:
        with pytest.raises(error, match="predicate"):
            backend.traverse("urn:x", scope=frozenset({new_ulid()}), predicates=predicates)

    def test_results_are_graph_results(self, backend: Any) -> None:
        scope = frozenset({new_ulid()})
        assert isinstance(backend.get_triples("urn:x", scope=scope), GraphResult)
        assert isinstance(backend.traverse("urn:x", depth=0, scope=scope), GraphResult)


class GraphIndexContract(GraphBackendContract):
    """Data contract of :class:`GraphIndex` (needs ``upsert`` / ``delete``)."""

    @pytest.fixture
    def corpus(self, backend: Any) -> dict[str, dict[str, str]]:
        """Two resources, each: resource contains two files, main imports util."""
        data: dict[str, dict[str, str]] = {}
        for name in ("alpha", "bravo"):
            rid = new_ulid()
            res, main, util = (
                resource_uri(rid),
                file_uri(rid, f"{name}/main.py"),
                file_uri(rid, f"{name}/util.py"),
            )
            backend.upsert(
                rid,
                [
                    (res, UKO + "contains", main),
                    (res, UKO + "contains", util),
                    (main, UKO + "path", Literal(f"{name}/main.py")),
                    (util, UKO + "path", Literal(f"{name}/util.py")),
                    (main, UKO + "imports", util),
                    (util, UKO + "defines", unit_uri(rid, f"{name}/util.py", f"sym={name}_fn")),
                ],
            )
            data[name] = {"rid": rid, "res": res, "main": main, "util": util}
        return data

    def test_satisfies_index_protocol(self, backend: Any) -> None:
        assert isinstance(backend, GraphIndex)

    def test_sparql_stays_in_scope(self, backend: Any, corpus: dict[str, dict[str, str]]) -> None:
        a, b = corpus["alpha"], corpus["bravo"]
        result = backend.sparql_query(_SELECT_ALL, scope=frozenset({a["rid"]}))
        assert len(result.triples) == 6
        assert all(resource_id_of(t[0]) == a["rid"] for t in result.triples)
        both = backend.sparql_query(_SELECT_ALL, scope=frozenset({a["rid"], b["rid"]}))
        assert len(both.triples) == 12

    def test_literals_are_lexical_forms(
        self, backend: Any, corpus: dict[str, dict[str, str]]
    ) -> None:
        a = corpus["alpha"]
        q = f"SELECT ?s ?p ?o WHERE {{ ?s ?p ?o . FILTER(?p = <{UKO}path>) }}"
        result = backend.sparql_query(q, scope=frozenset({a["rid"]}))
        assert sorted(t[2] for t in result.triples) == ["alpha/main.py", "alpha/util.py"]

    def test_ask_and_construct(self, backend: Any, corpus: dict[str, dict[str, str]]) -> None:
        a, b = corpus["alpha"], corpus["bravo"]
        ask = f"ASK {{ <{b['main']}> ?p ?o }}"
        assert backend.sparql_query(ask, scope=frozenset({b["rid"]})).metadata["boolean"] == "true"
        no = backend.sparql_query(ask, scope=frozenset({a["rid"]}))
        assert no.metadata["boolean"] == "false"
        assert no.triples == []
        construct = f"CONSTRUCT {{ ?a <urn:dep> ?b }} WHERE {{ ?a <{UKO}imports> ?b }}"
        got = backend.sparql_query(construct, scope=frozenset({a["rid"]}))
        assert got.triples == [(a["main"], "urn:dep", a["util"])]

    def test_select_needs_three_variables(
        self, backend: Any, corpus: dict[str, dict[str, str]]
    ) -> None:
        scope = frozenset({corpus["alpha"]["rid"]})
        for q in ("SELECT ?s ?p WHERE { ?s ?p ?o }", "SELECT * WHERE { ?s ?p ?o . ?o ?q ?r }"):
            with pytest.raises(ValueError):
                backend.sparql_query(q, scope=scope)

    @pytest.mark.parametrize(
        "query",
        [
            "SELECT ?s ?p ?o WHERE { GRAPH ?g { ?s ?p ?o } }",
            "SELECT ?s ?p ?o FROM <urn:other> WHERE { ?s ?p ?o }",
            "SELECT ?s ?p ?o FROM NAMED <urn:other> WHERE { ?s ?p ?o }",
            "SELECT ?s ?p ?o WHERE { SERVICE <http://127.0.0.1:9/> { ?s ?p ?o } }",
            "INSERT DATA { <urn:a> <urn:b> <urn:c> }",
            "DROP ALL",
            "SELECT ?s ?p WHERE { ?s ?p",
        ],
    )
    def test_forbidden_or_malformed_queries_are_query_errors(
        self, backend: Any, corpus: dict[str, dict[str, str]], query: str
    ) -> None:
        with pytest.raises(QueryError):
            backend.sparql_query(query, scope=frozenset({corpus["alpha"]["rid"]}))

    def test_get_triples_respects_scope(
        self, backend: Any, corpus: dict[str, dict[str, str]]
    ) -> None:
        a, b = corpus["alpha"], corpus["bravo"]
        assert len(backend.get_triples(a["res"], scope=frozenset({a["rid"]})).triples) == 2
        assert backend.get_triples(a["res"], scope=frozenset({b["rid"]})).triples == []
        every = frozenset(backend.resource_ids())  # maintenance: every graph, said explicitly
        assert len(backend.get_triples(a["res"], scope=every).triples) == 2

    def test_traverse_depth_and_scope(
        self, backend: Any, corpus: dict[str, dict[str, str]]
    ) -> None:
        a, b = corpus["alpha"], corpus["bravo"]
        scope = frozenset({a["rid"]})
        assert backend.traverse(a["res"], depth=0, scope=scope).triples == []
        one = backend.traverse(a["res"], depth=1, scope=scope).triples
        assert sorted(one) == sorted(
            [(a["res"], UKO + "contains", a["main"]), (a["res"], UKO + "contains", a["util"])]
        )
        two = backend.traverse(a["res"], depth=2, scope=scope).triples
        assert len(two) == 6  # everything in alpha is within two hops
        assert len(set(two)) == len(two)
        assert backend.traverse(a["res"], depth=5, scope=frozenset({b["rid"]})).triples == []

    def test_traverse_in_both_and_predicates(
        self, backend: Any, corpus: dict[str, dict[str, str]]
    ) -> None:
        a, b = corpus["alpha"], corpus["bravo"]
        scope = frozenset({a["rid"]})
        contains, imports = UKO + "contains", UKO + "imports"
        # Who points at util: the resource (contains) and main (imports).
        assert backend.traverse(a["util"], depth=1, scope=scope, direction="in").triples == sorted(
            [(a["res"], contains, a["util"]), (a["main"], imports, a["util"])]
        )
        # Two hops back: main is reached, and the resource points at main too.
        two = backend.traverse(a["util"], depth=2, scope=scope, direction="in").triples
        assert set(two) == {
            (a["res"], contains, a["util"]),
            (a["main"], imports, a["util"]),
            (a["res"], contains, a["main"]),
        }
        only = backend.traverse(
            a["util"], depth=3, scope=scope, direction="in", predicates=frozenset({imports})
        ).triples
        assert only == [(a["main"], imports, a["util"])]
        both = backend.traverse(
            a["main"], depth=1, scope=scope, direction="both", predicates=frozenset({imports})
        ).triples
        assert both == [(a["main"], imports, a["util"])]
        out = backend.traverse(a["res"], depth=1, scope=scope, predicates=frozenset({contains}))
        assert set(out.triples) == {
            (a["res"], contains, a["main"]),
            (a["res"], contains, a["util"]),
        }
        # The other resource's edges into nothing of ours never show.
        assert (
            backend.traverse(
                a["util"], depth=3, scope=frozenset({b["rid"]}), direction="both"
            ).triples
            == []
        )

    def test_upsert_delete_subjects_and_delete(
        self, backend: Any, corpus: dict[str, dict[str, str]]
    ) -> None:
        a, b = corpus["alpha"], corpus["bravo"]
        scope = frozenset({a["rid"]})
        backend.upsert(
            a["rid"], [(a["main"], UKO + "imports", "urn:x")], delete_subjects=[a["main"]]
        )
        assert backend.get_triples(a["main"], scope=scope).triples == [
            (a["main"], UKO + "imports", "urn:x")
        ]
        backend.delete(a["rid"], [a["main"]])
        assert backend.get_triples(a["main"], scope=scope).triples == []
        assert a["main"] not in backend.subjects(a["rid"])
        backend.delete(b["rid"])
        assert b["rid"] not in backend.resource_ids()
        assert backend.sparql_query(_SELECT_ALL, scope=frozenset({b["rid"]})).triples == []
