"""The ``pairs`` field: each adjacent pair of content terms as one token, so
the plain syntax's phrase boosts are term lookups.  Its Python tokenizer for
ASCII text must produce exactly the engine analyzer's terms (oracle: the
analyzer itself), and a pair query finds what a two-word phrase finds."""

from __future__ import annotations

import itertools
import re

import tantivy
from hypothesis import given, settings
from hypothesis import strategies as st

from cleveragents.infrastructure.acms import tantivy_text
from cleveragents.infrastructure.acms.tantivy_query import code_analyzer
from cleveragents.infrastructure.acms.text_analysis import (
    ACRONYM_BOUNDARY,
    ASCII_TOKEN,
    analysable,
    content_terms,
    pair_term,
    pair_terms,
)

CODE_CHARS = st.sampled_from(
    [
        *list("abcxyzABCXYZ019_ .,:;()[]{}'\"\n\t-+*/=<>#@!?"),
        "HTTPServer",
        "parseJsonV2",
        "ABCDef",
        "aBCd",
        "x" * 120,
    ]
)
# The plain forms of the faster patterns text_analysis uses (the oracles).
PLAIN_ASCII_TOKEN = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


@settings(max_examples=400, deadline=None)
@given(st.lists(CODE_CHARS, max_size=80).map("".join))
def test_python_terms_of_ascii_text_are_the_analyzers(text: str) -> None:
    ready = analysable(text)
    assert ready.isascii()
    assert content_terms(ready) == code_analyzer().analyze(ready)


@settings(max_examples=400, deadline=None)
@given(st.lists(CODE_CHARS, max_size=80).map("".join))
def test_faster_patterns_match_their_plain_forms(text: str) -> None:
    assert analysable(text) == ACRONYM_BOUNDARY.sub("_", text)
    assert ASCII_TOKEN.findall(text) == PLAIN_ASCII_TOKEN.findall(text)
    ready = analysable(text)
    assert content_terms(ready) == [
        t.lower() for t in PLAIN_ASCII_TOKEN.findall(ready) if len(t) < 100
    ]
    # Text whose acronyms were not split still gets the engine's terms.
    assert content_terms(text) == code_analyzer().analyze(text)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_faster_patterns_match_their_plain_forms_on_any_text(text: str) -> None:
    assert analysable(text) == ACRONYM_BOUNDARY.sub(
        "_", text.encode("utf-8", "replace").decode("utf-8")
    )
    assert ASCII_TOKEN.findall(text) == PLAIN_ASCII_TOKEN.findall(text)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=60))
def test_any_text_gets_the_analyzers_terms(text: str) -> None:
    ready = analysable(text)
    assert content_terms(ready) == code_analyzer().analyze(ready)


def test_pair_terms_are_adjacent_pairs_in_order_with_repeats() -> None:
    assert pair_terms(["a", "b", "a", "b"]) == "a|b b|a a|b"
    assert pair_terms(["solo"]) == ""
    assert pair_term("json", "token") == "json|token"


def test_a_pair_query_matches_what_a_phrase_query_matches(tmp_path: object) -> None:
    schema = tantivy_text._schema()
    index = tantivy.Index(schema)
    tantivy_text._register(index, parses_queries=False)
    writer = index.writer(15_000_000, 1)
    texts = [
        "read the json token stream",
        "token json read",  # both words, never adjacent in order
        "parseJson token_stream; JSON Token",
        "json\ntoken",
    ]
    for i, text in enumerate(texts):
        writer.add_document(tantivy_text._document(f"u{i}", "R", text, {}))
    writer.commit()
    index.reload()
    searcher = index.searcher()
    words = ["read", "the", "json", "token", "stream", "parse"]
    for a, b in itertools.product(words, words):
        phrase = tantivy.Query.phrase_query(schema, "content", [a, b])
        pair = tantivy.Query.term_query(schema, "pairs", pair_term(a, b))
        want = {searcher.doc(d)["uko_uri"][0] for _, d in searcher.search(phrase, 10).hits}
        got = {searcher.doc(d)["uko_uri"][0] for _, d in searcher.search(pair, 10).hits}
        assert got == want, (a, b)
