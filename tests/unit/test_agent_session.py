"""Agent-sized answers: budgets never exceeded, matching lines, scope narrowing."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cleveragents.application.services.agent_session import (
    MIN_BUDGET,
    SessionScope,
    _echo,
    fit,
    matching_lines,
    query_terms,
    render,
)
from cleveragents.domain.models.acms.errors import ScopeError

A = "01JD5TD11B0000000000000000"
B = "01JD5TD11B0000000000000001"
C = "01JD5TD11B0000000000000002"

line = st.fixed_dictionaries({"line": st.integers(1, 10**6), "text": st.text(max_size=300)})
hit = st.fixed_dictionaries(
    {
        "uri": st.text(min_size=1, max_size=120),
        "path": st.text(max_size=80),
        "start_line": st.integers(1, 10**6),
        "score": st.floats(0, 1),
        "lines": st.lists(line, max_size=10),
    }
)


@settings(max_examples=300, deadline=None)
@given(
    items=st.lists(hit, max_size=40),
    budget=st.integers(MIN_BUDGET, 20_000),
    query=st.text(max_size=100),
)
def test_an_answer_never_exceeds_its_budget(items, budget, query) -> None:
    answer = fit({"tool": "search", "query": query[:50]}, items, budget)
    assert len(render(answer)) <= budget
    kept = len(answer["results"])
    assert answer["truncated"] == ({"more": len(items) - kept} if kept < len(items) else False)
    # Best first: what is kept is a prefix of the ranking (by URI).
    assert [r["uri"] for r in answer["results"]] == [i["uri"] for i in items[:kept]]
    # A hit shortened to fit keeps a prefix of its lines and counts the rest.
    for got, item in zip(answer["results"], items, strict=False):
        shown = got.get("lines", [])
        assert len(shown) + got.get("lines_cut", 0) == len(item["lines"])
        assert ("lines_cut" in got) == (len(shown) < len(item["lines"]))
        assert [n["line"] for n in shown] == [n["line"] for n in item["lines"][: len(shown)]]


numbered = st.fixed_dictionaries(
    {"line": st.integers(1, 10**6), "text": st.text(max_size=3_000) | st.just("z" * 30_000)}
)


@settings(max_examples=300, deadline=None)
@given(
    items=st.lists(numbered, max_size=12),
    budget=st.integers(MIN_BUDGET, 40_000),
    left_out=st.integers(0, 10**6),
)
def test_lines_cut_to_fit_say_how_much_was_cut(items, budget, left_out) -> None:
    answer = fit({"tool": "read"}, items, budget, left_out=left_out)
    assert len(render(answer)) <= budget
    kept = answer["results"]
    more = len(items) - len(kept) + left_out
    assert answer["truncated"] == ({"more": more} if more else False)
    for got, item in zip(kept, items, strict=False):
        assert got["line"] == item["line"]
        assert item["text"].startswith(got["text"])
        assert len(got["text"]) + got.get("cut", 0) == len(item["text"])
        assert ("cut" in got) == (got["text"] != item["text"])
    # Only the last kept line can be cut: the ones before it fit whole.
    assert all("cut" not in got for got in kept[:-1])


def test_a_cut_takes_the_most_that_fits() -> None:
    item = {"line": 1, "text": "q" * 100_000}
    for budget in (MIN_BUDGET, 5_000, 50_000):
        answer = fit({}, [item], budget)
        text = answer["results"][0]["text"]
        assert len(render(answer)) <= budget
        # One character more would not fit.
        longer = {
            **answer["results"][0],
            "text": "q" * (len(text) + 1),
            "cut": 100_000 - len(text) - 1,
        }
        assert len(render({**answer, "results": [longer]})) > budget


def test_a_generous_budget_keeps_everything_and_a_small_one_says_how_many_more() -> None:
    items = [{"uri": f"u{i}", "lines": [{"line": i, "text": "x" * 100}]} for i in range(20)]
    assert fit({}, items, 100_000)["truncated"] is False
    small = fit({}, items, MIN_BUDGET)
    assert small["truncated"]["more"] == 20 - len(small["results"]) > 0


def test_a_hit_too_large_is_shortened_before_it_is_dropped() -> None:
    item = {"uri": "u", "lines": [{"line": n, "text": "y" * 150} for n in range(8)]}
    answer = fit({}, [item], 400)
    assert answer["results"] and len(answer["results"][0]["lines"]) < 8
    assert answer["results"][0]["lines_cut"] == 8 - len(answer["results"][0]["lines"])
    assert len(render(answer)) <= 400


def test_matching_lines_are_the_lines_with_query_terms_and_their_context() -> None:
    chunk = "def a():\n    pass\n\ndef parse_json(x):\n    return x\n\nz = 1"
    got = matching_lines(chunk, 10, query_terms("parseJson"))
    assert [g["line"] for g in got] == [12, 13, 14]
    assert got[1]["text"] == "def parse_json(x):"
    assert [g["line"] for g in matching_lines("a\nb", 5, {"nothing"})] == [5, 6]


def test_query_terms_split_identifiers() -> None:
    assert {"parsejson", "parse", "json", "get", "http", "url"} <= query_terms(
        "parseJson getHTTPUrl"
    )


def test_a_call_may_narrow_the_scope_and_never_widen_it() -> None:
    scope = SessionScope(
        resources=frozenset({A, B}), projects={"p/a": frozenset({A}), "p/b": frozenset({B})}
    )
    assert scope.narrow() == {A, B}
    assert scope.narrow(projects=["p/a"]) == {A}
    assert scope.narrow(resources=[B.lower()]) == {B}
    for bad in ({"projects": ["p/c"]}, {"resources": [C]}, {"resources": ["not-a-ulid"]}):
        with pytest.raises(ScopeError):
            scope.narrow(**bad)  # type: ignore[arg-type]


def test_hits_whose_lines_are_numbers_shrink_too() -> None:
    items = [{"uri": "u" * 50, "lines": list(range(200))}]
    answer = fit({}, items, 300)
    assert answer["results"] and len(render(answer)) <= 300


@settings(max_examples=200, deadline=None)
@given(
    given_text=st.text(min_size=1, max_size=8_000) | st.just("\x7f" * 8_000),
    key=st.sampled_from(["query", "target", "source", "subject", "start"]),
    items=st.lists(hit, max_size=5),
    budget=st.integers(MIN_BUDGET, 9_000),
)
def test_an_echoed_argument_is_cut_to_leave_the_envelope_room(
    given_text, key, items, budget
) -> None:
    """A node argument or query of any length (escapes included) is echoed
    cut, with ``query_cut`` counting the rest, never failing the call."""
    answer = fit({"tool": "callers", **_echo(given_text, key)}, items, budget)
    assert len(render(answer)) <= budget
    assert given_text.startswith(answer[key])
    assert len(answer[key]) + answer.get("query_cut", 0) == len(given_text)
    assert ("query_cut" in answer) == (answer[key] != given_text)


@settings(max_examples=300, deadline=None)
@given(
    length=st.integers(150, 300),
    extra=st.integers(0, 40),
    count=st.integers(1, 3),
    key=st.sampled_from(["query", "target", "subject"]),
)
def test_an_answer_with_no_hit_fitting_holds_its_marker_within_the_budget(
    length, extra, count, key
) -> None:
    """Found by review: an envelope that fit with ``"truncated": false`` but
    not with the ``{"more": N}`` it then carried went up to 5 characters over
    the budget (a 198-character IRI at budgets 259-263)."""
    envelope = {"tool": "callers", **_echo("x" * length, key)}
    base = len(render({**envelope, "results": [], "truncated": False}))
    budget = max(MIN_BUDGET, base + extra)
    items = [{"uri": "u" * 2_000}] * count  # never fits, cannot shrink
    answer = fit(envelope, items, budget)
    assert len(render(answer)) <= budget
    assert answer["truncated"] == {"more": count}
