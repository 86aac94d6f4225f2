"""Prefix terms in the Tantivy syntax match the terms that start with them.

Tantivy's parser reads ``sel*`` as the term ``sel`` (and refuses the
one-term phrase prefix ``"sel"*``), so every prefix query documented in the
README answered nothing.  Oracle: the documents holding a term (of their
content or their path) that starts with the analysed prefix.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ulid import ULID

from cleveragents.domain.models.acms.backends import IndexUnit
from cleveragents.domain.models.acms.uko import unit_uri
from cleveragents.infrastructure.acms.tantivy_text import TantivyTextBackend

RID = str(ULID())
SCOPE = frozenset({RID})
_RNG = random.Random(7)
# Words the analyzer keeps whole: a run of lower-case letters or of digits.
WORDS = sorted(
    {"".join(_RNG.choices("abcdez", k=_RNG.randint(1, 5))) for _ in range(60)}
    | {"".join(_RNG.choices("0919", k=_RNG.randint(1, 4))) for _ in range(20)}
)
DOCS = {f"doc{i}.txt": _RNG.sample(WORDS, 6) for i in range(25)}


def _terms(path: str, words: list[str]) -> set[str]:
    return {"doc", path[3:-4], "txt", *words}  # doc12.txt: doc, 12, txt


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TantivyTextBackend]:
    text = TantivyTextBackend(tmp_path_factory.mktemp("prefix") / "text")
    text.upsert(
        RID,
        [
            IndexUnit(unit_uri(RID, path, "L1-L1"), " ".join(words), {"path": path})
            for path, words in DOCS.items()
        ],
    )
    yield text
    text.close()


def _found(backend: TantivyTextBackend, query: str) -> set[str]:
    hits = backend.search(query, scope=SCOPE, max_results=100, syntax="tantivy")
    return {hit.metadata["path"] for hit in hits}


def _expected(prefix: str) -> set[str]:
    return {p for p, words in DOCS.items() if any(t.startswith(prefix) for t in _terms(p, words))}


prefixes = st.one_of(
    st.text("abcdez", min_size=1, max_size=4),
    st.text("0129", min_size=1, max_size=3),
    st.sampled_from(WORDS),
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(prefix=prefixes, upper=st.booleans(), quoted=st.booleans())
def test_a_prefix_matches_exactly_the_documents_with_a_term_that_starts_with_it(
    backend: TantivyTextBackend, prefix: str, upper: bool, quoted: bool
) -> None:
    written = prefix.upper() if upper else prefix
    query = f'"{written}"*' if quoted else f"{written}*"

    assert _found(backend, query) == _expected(prefix)


def test_prefixes_combine_with_fields_operators_and_phrases(backend: TantivyTextBackend) -> None:
    word = max(WORDS, key=len)
    holders = {p for p, words in DOCS.items() if word in words}
    assert holders  # the test can fail: some document holds the word

    assert _found(backend, f"content:{word[:2]}*") == {
        p for p, words in DOCS.items() if any(w.startswith(word[:2]) for w in words)
    }
    assert _found(backend, "path:1*") == {p for p in DOCS if p[3:-4].startswith("1")}
    assert _found(backend, f"{word[:2]}* AND {word}") == holders
    assert _found(backend, f"{word[:2]}* -{word}") == _expected(word[:2]) - holders
    assert _found(backend, "txt*") == set(DOCS)


def test_a_phrase_prefix_of_two_words_and_camel_case_prefixes(tmp_path: Path) -> None:
    text = TantivyTextBackend(tmp_path / "text")
    try:
        text.upsert(
            RID,
            [
                IndexUnit(
                    unit_uri(RID, "a.py", "L1-L2"), "def select_rows(t): pass", {"path": "a.py"}
                ),
                IndexUnit(unit_uri(RID, "b.py", "L1-L2"), "rows select = 1", {"path": "b.py"}),
            ],
        )

        def found(query: str) -> set[str]:
            hits = text.search(query, scope=SCOPE, syntax="tantivy")
            return {hit.metadata["path"] for hit in hits}

        assert found('"select ro"*') == {"a.py"}  # in that order only
        assert found("selectRo*") == {"a.py"}
        assert found("Sel*") == {"a.py", "b.py"}
        assert found('symbol:"sel"*') == found("symbol:sel*")
        assert found("xyz*") == set()
    finally:
        text.close()


def _holding(word: str) -> set[str]:
    return {p for p, words in DOCS.items() if word in _terms(p, words)}


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(x=st.sampled_from(WORDS), y=st.sampled_from(WORDS), z=st.sampled_from(WORDS))
def test_and_not_excludes_what_it_names(
    backend: TantivyTextBackend, x: str, y: str, z: str
) -> None:
    """``a AND NOT b`` answered nothing: Tantivy's parser made ``NOT b`` a
    clause of its own, which no document matches."""
    assert _found(backend, f"{x} AND NOT {y}") == _holding(x) - _holding(y)
    assert _found(backend, f"{x} AND NOT ({y} OR {z})") == _holding(x) - _holding(y) - _holding(z)
    assert _found(backend, f"{x} AND NOT {y} AND {z}") == (_holding(x) & _holding(z)) - _holding(y)
