"""Reciprocal rank fusion against a naive oracle, and its input checks."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cleveragents.application.services.fusion import (
    DEFAULT_K,
    definition_query,
    query_identifiers,
    reads_as_prose,
    reciprocal_rank_fusion,
)

URIS = [f"uko://01JD5TD11B0000000000000000/f{i}.py#L1-L{i + 1}" for i in range(12)]
SOURCES = ["text", "vector", "graph", "extra"]


def oracle(rankings, k, weights, limit):
    """The definition, written out the slow way with exact fractions."""
    weights = weights or {}
    scores: dict[str, Fraction] = {}
    ranks: dict[str, dict[str, int]] = {}
    for source, ranking in rankings.items():
        w = weights.get(source, 1.0)
        if w == 0:
            continue
        for i in range(len(ranking)):
            uri = ranking[i]
            scores[uri] = scores.get(uri, Fraction(0)) + Fraction(w) / (k + i + 1)
            ranks.setdefault(uri, {})[source] = i + 1
    order = sorted(scores, key=lambda u: (-scores[u], u))
    if limit is not None:
        order = order[:limit]
    return [(u, float(scores[u]), ranks[u]) for u in order]


rankings_st = st.dictionaries(
    st.sampled_from(SOURCES),
    st.lists(st.sampled_from(URIS), unique=True, max_size=len(URIS)),
    max_size=len(SOURCES),
)
weights_st = st.none() | st.dictionaries(
    st.sampled_from(SOURCES),
    st.sampled_from([0.0, 0.25, 0.5, 1.0, 2.0]) | st.floats(0, 10, allow_nan=False),
)


@settings(max_examples=500, deadline=None)
@given(rankings_st, st.integers(0, 100), weights_st, st.none() | st.integers(1, 15))
def test_fusion_equals_the_naive_oracle(rankings, k, weights, limit) -> None:
    got = reciprocal_rank_fusion(rankings, k=k, weights=weights, limit=limit)
    assert [(h.uko_uri, h.score, dict(h.ranks)) for h in got] == oracle(rankings, k, weights, limit)
    scores = [h.score for h in got]
    assert scores == sorted(scores, reverse=True)


@settings(max_examples=300, deadline=None)
@given(rankings_st, st.integers(0, 100), weights_st, st.randoms(use_true_random=False))
def test_fusion_is_invariant_under_permutation_of_the_inputs(rankings, k, weights, rnd) -> None:
    items = list(rankings.items())
    rnd.shuffle(items)
    shuffled_weights = None
    if weights is not None:
        w_items = list(weights.items())
        rnd.shuffle(w_items)
        shuffled_weights = dict(w_items)
    assert reciprocal_rank_fusion(dict(items), k=k, weights=shuffled_weights) == (
        reciprocal_rank_fusion(rankings, k=k, weights=weights)
    )


def test_equal_scores_are_tied_exactly_and_broken_by_uri() -> None:
    a, b = URIS[0], URIS[1]
    got = reciprocal_rank_fusion({"x": [b, a], "y": [a, b]}, k=60)
    assert [h.uko_uri for h in got] == [a, b]
    assert got[0].score == got[1].score
    # Three terms summed in another order can differ as floats ((x+y)+z vs
    # (z+y)+x); the fused scores must still tie, and the URI decide.
    rnd = random.Random(7)
    for _ in range(300):
        k = rnd.randrange(0, 100)
        r = rnd.sample(range(1, 40), 3)
        pad = [f"pad{i}" for i in range(40)]
        rankings = {
            "a1": [*pad[: r[0] - 1], b],
            "a2": [*pad[: r[1] - 1], b],
            "a3": [*pad[: r[2] - 1], b],
            "b1": [*pad[: r[2] - 1], a],
            "b2": [*pad[: r[1] - 1], a],
            "b3": [*pad[: r[0] - 1], a],
        }
        order = [h.uko_uri for h in reciprocal_rank_fusion(rankings, k=k) if h.uko_uri in (a, b)]
        assert order == [a, b], (k, r)


def test_a_single_source_keeps_its_order_and_ranks() -> None:
    got = reciprocal_rank_fusion({"text": URIS[:5]})
    assert [h.uko_uri for h in got] == URIS[:5]
    assert [dict(h.ranks) for h in got] == [{"text": i} for i in range(1, 6)]
    assert math.isclose(got[0].score, 1 / (DEFAULT_K + 1))


def test_weights_and_zero_weight_sources() -> None:
    got = reciprocal_rank_fusion(
        {"text": [URIS[0]], "graph": [URIS[1]]}, weights={"graph": 2.0, "text": 1.0}
    )
    assert [h.uko_uri for h in got] == [URIS[1], URIS[0]]
    dropped = reciprocal_rank_fusion({"text": [URIS[0]], "graph": [URIS[1]]}, weights={"graph": 0})
    assert [h.uko_uri for h in dropped] == [URIS[0]]
    assert reciprocal_rank_fusion({}) == []


def test_hits_are_immutable() -> None:
    hit = reciprocal_rank_fusion({"text": [URIS[0]]})[0]
    with pytest.raises(AttributeError):
        hit.score = 1.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        hit.ranks["text"] = 3  # type: ignore[index]


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"rankings": {"text": "uko://x"}}, TypeError),
        ({"rankings": [("text", [URIS[0]])]}, TypeError),
        ({"rankings": {"": [URIS[0]]}}, TypeError),
        ({"rankings": {1: [URIS[0]]}}, TypeError),
        ({"rankings": {"text": [URIS[0], 3]}}, TypeError),
        ({"rankings": {"text": [""]}}, ValueError),
        ({"rankings": {"text": [URIS[0], URIS[0]]}}, ValueError),
        ({"rankings": {"text": []}, "k": -1}, ValueError),
        ({"rankings": {"text": []}, "k": 1.5}, TypeError),
        ({"rankings": {"text": []}, "k": True}, TypeError),
        ({"rankings": {"text": []}, "limit": 0}, ValueError),
        ({"rankings": {"text": []}, "weights": {"text": -1.0}}, ValueError),
        ({"rankings": {"text": []}, "weights": {"text": float("nan")}}, ValueError),
        ({"rankings": {"text": []}, "weights": {"text": float("inf")}}, ValueError),
        ({"rankings": {"text": []}, "weights": {"text": "1"}}, TypeError),
        ({"rankings": {"text": []}, "weights": [("text", 1.0)]}, TypeError),
    ],
)
def test_bad_inputs_are_refused(kwargs, error) -> None:
    rankings = kwargs.pop("rankings")
    with pytest.raises(error):
        reciprocal_rank_fusion(rankings, **kwargs)


def test_query_identifiers_take_code_not_prose() -> None:
    assert query_identifiers("open_connection") == ["open_connection"]
    assert query_identifiers("StreamReader") == ["StreamReader"]
    assert query_identifiers("read") == ["read"]
    assert query_identifiers("self.transitive_objects(") == ["self.transitive_objects"]
    assert query_identifiers("how do I call parseJsonV2 or foo() here") == ["parseJsonV2", "foo"]
    assert query_identifiers("open a file and read it") == []
    assert query_identifiers("D. (k[,d]) -> D.get(k,d)") == ["D.get"]


def test_definition_query_refuses_non_identifiers() -> None:
    assert 'VALUES ?name { "a_b" "C.d" }' in definition_query(["a_b", "C.d"])
    assert "STRENDS" not in definition_query(["a_b"])  # a full scan of names: too slow
    with pytest.raises(ValueError):
        definition_query(['x" } . ?s ?p ?o . { "'])
    with pytest.raises(ValueError):
        definition_query([])


@pytest.mark.parametrize(
    ("query", "prose"),
    [
        ("where are HTTP redirects followed", True),
        ("strip ANSI color codes from output", True),
        ("TimeoutError handling in the transport", True),
        ("Order the items from largest to smallest.", True),
        ("parse_config", False),
        ("HTTPServer", False),
        ("open a file", True),
        ("read file", False),  # two words: too short to tell
        ("if not isinstance(value, str): raise TypeError", False),
        ("foo_bar baz_qux quux_corge", False),
        ("self._send(request) follow_redirects=True timeout", False),
    ],
)
def test_a_question_in_words_is_told_from_code(query: str, prose: bool) -> None:
    assert reads_as_prose(query) is prose
