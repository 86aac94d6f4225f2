"""The text index's analysis of a unit's content, importable without Tantivy.

A unit's content is analysed as ``tantivy_query.code_analyzer`` does (a
regex tokenizer, over-long terms dropped, lower-cased), on text whose
acronyms were split first (:func:`analysable`); the ``pairs`` field holds
each adjacent pair of those terms.  On ASCII text the tokens come from
Python's ``re`` here (property-tested equal to the engine's tokenizer in
``test_pairs_field.py`` and ``test_content_tokens.py``), so a planning worker
prepares a unit's fields (:func:`prepare_content`) without loading the
engine; other text asks the engine's analyzers, imported on first need.

The text fields get their *tokens*, as the tokenizer cut them, joined by
single spaces (:func:`prepare_content` for ``content``, :func:`tokens_of`
for the short ones): a shard's analyzer for them
(``tantivy_query.terms_analyzer``) only splits at the spaces before the
same filters, so the index holds the same terms at the same positions with
the same field lengths, and the writer process does not run the regex
tokenizer again (2.3 s of the writer's 11 s on the standard library).  The
schema keeps the analyzer's name: code that analyses text with the regex
under that name (an earlier version) cuts tokens joined by spaces into the
same tokens, so either version writes into a shard of the other.
"""

from __future__ import annotations

import itertools
import re
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tantivy

__all__ = [
    "ACRONYM_BOUNDARY",
    "ASCII_TOKEN",
    "MAX_TOKEN_CHARS",
    "TOKEN_PATTERN",
    "analysable",
    "content_terms",
    "pair_term",
    "pair_terms",
    "prepare_content",
    "tokens_of",
]

# The engine tokenizer's pattern (Rust regex, no look-around): a capitalised
# or lower-case word, an upper-case run, a number, or any other run of
# letters.  Acronym runs ("HTTPServer") are split before analysis by
# ACRONYM_BOUNDARY.
TOKEN_PATTERN = r"\p{Lu}?\p{Ll}+|\p{Lu}+|\p{N}+|\p{L}+"
ACRONYM_BOUNDARY = re.compile(r"(?<=[A-Z])(?=[A-Z][a-z])")
MAX_TOKEN_CHARS = 100
# The analyzer on ASCII text (the acronym split, then TOKEN_PATTERN), for
# pairs and ``match_lines``.  Over-long tokens are not dropped here: callers
# that need it drop them (a query term is never one).  The leading lookahead
# (every branch starts with one of those characters) changes no match; it
# lets ``re`` skip the other characters in C, without trying each branch at
# each of them: ~1.35x faster on code.
ASCII_TOKEN = re.compile(r"(?=[A-Za-z0-9])(?:[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+)")
# ASCII_TOKEN on text whose acronyms are split (:func:`analysable`): there
# an upper-case run is never followed by a capitalised word (a ``_`` was put
# between them), so its first branch never matches and is left out (~1.8x).
_READY_TOKEN = re.compile(r"(?=[A-Za-z0-9])(?:[A-Z]?[a-z]+|[A-Z]+|[0-9]+)")
# ACRONYM_BOUNDARY as a match of the run's last letter, which ``re`` finds
# by skipping to upper-case letters (~1.8x faster than a zero-width match
# tried at every position).  Two boundaries are never adjacent (the second
# letter of "Ab" is not upper case), so no letter is needed by two matches.
_ACRONYM_END = re.compile(r"([A-Z])(?=[A-Z][a-z])")

_ANALYZERS = threading.local()


def analysable(text: str) -> str:
    """Text as the analyzer should see it: acronyms split, surrogates replaced."""
    if not text.isascii():
        text = text.encode("utf-8", "replace").decode("utf-8")
    return _ACRONYM_END.sub(r"\1_", text)  # = ACRONYM_BOUNDARY.sub("_", text)


def _engine_analyzer(name: str) -> tantivy.TextAnalyzer:
    """This thread's engine analyzer ``tokens`` (the tokenizer alone) or
    ``terms`` (the filters on joined tokens), built once."""
    analyzer: tantivy.TextAnalyzer | None = getattr(_ANALYZERS, name, None)
    if analyzer is None:
        from cleveragents.infrastructure.acms import tantivy_query

        build = tantivy_query.token_analyzer if name == "tokens" else tantivy_query.terms_analyzer
        analyzer = build()
        setattr(_ANALYZERS, name, analyzer)
    return analyzer


def _tokens(ready: str) -> str:
    """The tokenizer's tokens of :func:`analysable` text joined by spaces."""
    if ready.isascii():
        return " ".join(_READY_TOKEN.findall(ready))
    return " ".join(_engine_analyzer("tokens").analyze(ready))


def _terms(tokens: str) -> list[str]:
    """The analyzer's filters on :func:`_tokens`: on ASCII tokens in Python
    (lower-cased, terms of 100+ characters dropped as ``remove_long``
    does; ~1.5x faster than a call into the engine), else the engine's."""
    if not tokens.isascii():
        found: list[str] = _engine_analyzer("terms").analyze(tokens)
        return found
    terms = tokens.lower().split()
    if terms and max(map(len, terms)) >= MAX_TOKEN_CHARS:  # rare: filter only then
        terms = [t for t in terms if len(t) < MAX_TOKEN_CHARS]
    return terms


def tokens_of(text: str) -> str:
    """A text field's value as a shard takes it: the tokens of
    :func:`analysable` ``text``, joined by single spaces."""
    return _tokens(analysable(text))


def content_terms(ready: str) -> list[str]:
    """The content field's terms of :func:`analysable` text, in order (what
    ``code_analyzer`` gives, property-tested)."""
    return _terms(_tokens(ready))


def pair_term(a: str, b: str) -> str:
    """The ``pairs`` token of the analysed terms ``a`` then ``b`` (adjacent)."""
    return f"{a}|{b}"


def pair_terms(terms: list[str]) -> str:
    """The ``pairs`` field text of a unit: each adjacent pair of its analysed
    content terms, in order and with repeats (a pair's frequency is what a
    two-word phrase query on content counts).  A term query on this field
    finds "a b" adjacent at the cost of one term lookup, where a phrase
    query checks positions in every document holding both words."""
    return " ".join(map("|".join, itertools.pairwise(terms)))  # = pair_term of each


def prepare_content(content: str) -> tuple[str, str]:
    """A unit's ``content`` field text (its tokens, see the module doc) and
    its ``pairs`` field text: the analysis a planning worker does ahead of
    the write (``PreparedWrites.preparer`` of the Tantivy text index)."""
    tokens = tokens_of(content)
    return tokens, pair_terms(_terms(tokens))
