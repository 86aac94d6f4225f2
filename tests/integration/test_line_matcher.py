"""``LineMatcher`` (the per-query ``match_lines`` the Tantivy adapter uses)
answers exactly what the per-line ``match_lines`` answered.

The oracle below is ``match_lines`` as it was before the matcher existed
(tokenize every line that holds a term as a substring), kept here verbatim
so a later change to the domain function cannot move the reference with it.
The analyzer is the adapter's own (``_line_terms``: the Python rule on ASCII
lines, the engine's analyzer otherwise), with its ASCII token pattern.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cleveragents.domain.models.acms.text_query import MAX_MATCH_LINES, LineMatcher
from cleveragents.infrastructure.acms.tantivy_text import TantivyTextBackend
from cleveragents.infrastructure.acms.text_analysis import ASCII_TOKEN


def match_lines_oracle(
    content: str,
    start_line: str | None,
    terms: Iterable[str],
    analyse: Callable[[str], Iterable[str]],
) -> str:
    lower = content.lower()
    wanted = {t for t in terms if t and t in lower}
    if not wanted:
        return ""
    try:
        first = int(start_line) if start_line is not None else 1
    except ValueError:
        first = 1
    lines = content.split("\n")
    lowered = lower.split("\n")
    if len(lowered) != len(lines):  # defensive: lower() never adds a line break
        lowered = [line.lower() for line in lines]
    out: list[str] = []
    for offset, (line, low) in enumerate(zip(lines, lowered, strict=True)):
        if any(t in low for t in wanted) and not wanted.isdisjoint(analyse(line)):
            out.append(str(first + offset))
            if len(out) >= MAX_MATCH_LINES:
                break
    return ",".join(out)


@pytest.fixture(scope="module")
def analyse() -> Callable[[str], Iterable[str]]:
    return TantivyTextBackend()._line_terms


# Fragments that split into tokens in every way the ASCII rule knows:
# camelCase, acronyms before a word, digits, words inside longer words.
_FRAGMENTS = [
    "parse", "Parse", "PARSE", "json", "Json", "JSON", "jsonify", "parseJSON",
    "HTTPServer", "xml2json", "json_value", "toJSONString", "token", "a", "2",
    "42", "x", " ", " ", "\n", "\n", ".", "_", "(", "-", "\t", "é", "Été", "\r",
]  # fmt: skip
_content = st.lists(st.sampled_from(_FRAGMENTS), max_size=80).map("".join) | st.text(
    alphabet=st.characters(max_codepoint=0x10FF, blacklist_categories=("Cs",)), max_size=200
)
_TERMS = [
    "parse", "json", "token", "a", "2", "42", "http", "server", "xml", "string", "to",
    "é", "été", "a_b", "json value", "jsonify", "value", "x", "",
]  # fmt: skip
_terms = st.lists(
    st.sampled_from(_TERMS) | st.text(alphabet="abcjnopsx2", min_size=1, max_size=5),
    max_size=6,
)
_start = st.none() | st.sampled_from(["1", "40", " 7", "x", ""]) | st.integers(-3, 10**6).map(str)


@settings(max_examples=1500, deadline=None)
@given(content=_content, terms=_terms, start=_start)
def test_line_matcher_equals_the_per_line_oracle(
    analyse: Callable[[str], Iterable[str]], content: str, terms: list[str], start: str | None
) -> None:
    matcher = LineMatcher(terms, analyse, ascii_token=ASCII_TOKEN)
    assert matcher.lines(content, start) == match_lines_oracle(content, start, terms, analyse)


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(st.sampled_from(["parse it", "jsonify", "no", "x.parse()", ""]), max_size=60),
    start=_start,
)
def test_line_matcher_keeps_the_first_lines_only(
    analyse: Callable[[str], Iterable[str]], lines: list[str], start: str | None
) -> None:
    content = "\n".join(lines)
    matcher = LineMatcher(["parse"], analyse, ascii_token=ASCII_TOKEN)
    got = matcher.lines(content, start)
    assert got == match_lines_oracle(content, start, ["parse"], analyse)
    assert len([n for n in got.split(",") if n]) <= MAX_MATCH_LINES


def test_worked_example(analyse: Callable[[str], Iterable[str]]) -> None:
    content = "def parseJSON(x):\n    return jsonify(x)\n\n# JSON here\nxml2json"
    matcher = LineMatcher(["json"], analyse, ascii_token=ASCII_TOKEN)
    # line 41 (parse|JSON), not 42 (jsonify is one token), 44, 45 (xml|2|json)
    assert matcher.lines(content, "41") == "41,44,45"
