"""The Milvus text backend's terms (``code_terms``, pure Python) are the
terms Tantivy's analyzer gives (the oracle: ``text_analysis.content_terms``,
which asks the engine for non-ASCII text), so a query finds the same words
on either engine."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cleveragents.infrastructure.acms.milvus_text import code_terms
from cleveragents.infrastructure.acms.text_analysis import analysable, content_terms


def _tantivy_terms(text: str) -> list[str]:
    return content_terms(analysable(text))


_WORDS = st.one_of(
    st.text(alphabet="abcXYZ019_", min_size=1, max_size=12),
    st.sampled_from(["HTTPServer", "parseJsonV2", "snake_case", "getHTTPResponseCode"]),
    st.integers(95, 105).map(lambda n: "a" * n),  # around the length limit
    st.integers(95, 105).map(lambda n: "Ab" * (n // 2)),
)


@given(st.lists(st.tuples(_WORDS, st.sampled_from([" ", ".", "(", "\n", "-", ""])), max_size=12))
def test_ascii_terms_equal_the_tantivy_analyzer(parts: list[tuple[str, str]]) -> None:
    text = "".join(word + sep for word, sep in parts)
    assert code_terms(text).split() == _tantivy_terms(text)


@pytest.mark.parametrize(
    "token",
    ["a" * 99, "a" * 100, "a" * 101, "é" * 49, "é" * 50, "é" * 60, "日本" * 16, "日本" * 17],
)
def test_the_length_limit_is_tantivys_in_bytes(token: str) -> None:
    text = f"{token} kept"
    assert code_terms(text).split() == _tantivy_terms(text)
