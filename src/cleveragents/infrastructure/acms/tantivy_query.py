"""Query text to a Tantivy query, in one step, with every limit checked first.

Also the code-aware analyzer that indexing and querying share: identifiers are
split (``parseJsonV2`` -> parse, json, v, 2; ``HTTPServer`` -> http, server;
``snake_case`` -> snake, case) and lower-cased.

Two syntaxes (``syntax=`` of the search):

- ``"plain"`` (:class:`PlainQueryBuilder`, the default): any string is a
  query.  Its first :data:`MAX_QUERY_CHARS` characters are analysed into
  terms (the first ``MAX_PLAIN_TERMS`` = 64 distinct ones are kept, so no
  plain query can be slow) and the query is
  built programmatically, never parsed, so punctuation is never an error.
  A string without an analysable term matches nothing.  Scoring, a sum
  (OR: partial matches still rank) of BM25 clauses:

  ==============================================  ==========================
  clause                                          weight
  ==============================================  ==========================
  ``content:t``, per distinct analysed term       1.0
  ``names:t`` (the path, split, and the names     :data:`W_NAMES` = 0.5
  defined in the unit, split), per term
  ``symbol_exact:w``, per identifier ``w`` of the   :data:`W_EXACT` = 4.0, for a
  query (:func:`identifiers`), case-folded        query naming one identifier
  ``symbol_case:w``, the same as written          :data:`W_CASE` x 4.0 = 2.0
  ``pairs:a|b``, per adjacent pair of parts of   :data:`W_PHRASE` = 2.0
  a multi-part identifier (at most 16)
  ``pairs:a|b``, per adjacent pair of query       :data:`W_PROXIMITY` = 2.0
  words, for a query of 3+ informative words
  (3+ letters, no stop word; at most 16)
  ``calls:w``, per word of a list of 2-6 names    :data:`W_CALLS` = 2.0
  ==============================================  ==========================

  ``pairs`` holds each adjacent pair of a unit's content terms as one token
  (``text_analysis.pair_terms``), so "a then b, adjacent" is one term lookup instead
  of a phrase query that checks positions in every document holding both
  words: over 100 synthetic shards the plain mode went from 1.74x the query
  language's time to 1.20x, and the full eval from 0.943 to 0.946 MRR@10
  (BM25 scores the pair as a term of its own, rarer than either word).  The
  index holds ~1.65x the text bytes and the writer ~0.2 ms more per unit.

  An identifier is a word with two or more parts (``create_connection``),
  one starting or ending with ``_``, one next to code punctuation
  (``obj.name``, ``name(``), or the whole query (``Manager``).  A query
  that is a qualified name (``Graph.parse``, as ``symbols`` and ``callers``
  print a method) is one identifier, its last part, whose definition it asks
  for; its qualifiers' words score in ``content`` at :data:`W_QUALIFIER`.
  ``symbol_exact`` holds each defined name whole and lower-cased, so a
  query that is (or contains) an identifier ranks the unit that *defines*
  it above units that only use it; ``symbol_case`` adds a smaller bonus for
  the name as written (``Manager`` the class over ``manager`` the
  property).  A query naming two or more identifiers (``Py_INCREF
  PyMethod_New Py_TYPE``: who calls these?) gets no definition boost
  (:data:`EXACT_LIST_MIN`): it asks where they meet, not for each
  definition.  Path and defined names share one field (``names``) because
  every clause costs a term lookup in every in-scope shard: with separate
  ``path`` and ``symbol`` clauses, plain queries took 1.5x the time of the
  same text in the tantivy syntax over 100 shards
  (``benchmarks/bench_backends.py``).

  Measured with ``benchmarks/tune_text_weights.py --full`` (the evaluation's
  854 questions over the stdlib and mypyc's C runtime, MRR@10 per kind, one
  run): ``names`` 0.5 beat 1 and 2 on every kind but identifiers; ``exact``
  4 beat 1 and 2 on identifiers; identifier phrases 2 beat 1 and 3.  A lone
  word as an identifier, the case bonus and no boost for lists of names
  took identifiers 0.981 -> 0.998 and calls 0.924 -> 0.930 (the 50-name
  acceptance test in ``tests/integration/test_exact_identifier.py``: 45 ->
  50 of 50); with the scope's IDF over the two resources and qualified
  names indexed, the case bonus at 0.5 instead of 0.25 took identifiers
  0.998/0.99 -> 1.000/1.00 (MRR/hit@1; all 0.947 either way, 1.0: 0.944),
  and rdflib's class ``Namespace`` from 4th, behind three ``def
  namespace``, to 1st.  Proximity phrases from 3 informative words instead of 5 took
  code lines 0.890 -> 0.951, paraphrases 0.313 -> 0.396 and docstrings
  0.987 -> 0.993 (all 0.910 -> 0.931; BM25 over 50-line windows 0.906).
  They check positions in every document holding both words, the one
  clause whose cost grows with the corpus (for every query: 1.4-1.6x the
  tantivy syntax's time over 100 synthetic shards; see the README for the
  row at 3 words).

- ``"tantivy"`` (:class:`QueryBuilder`): Tantivy's query syntax (fields,
  phrases, ``AND``/``OR``/``NOT``, prefixes) with every limit below; the
  user-facing fields ``content:``, ``path:``, ``symbol:`` and ``lang:`` may
  be named, the internal ones are refused.

Filters (both syntaxes) are required clauses scored 0 (:func:`filter_query`),
so they restrict the matches without changing a score.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from collections.abc import Sequence

import tantivy

from cleveragents.domain.models.acms.errors import QueryError
from cleveragents.domain.models.acms.text_query import MAX_PLAIN_TERMS
from cleveragents.infrastructure.acms.text_analysis import (
    MAX_TOKEN_CHARS,
    TOKEN_PATTERN,
    analysable,
    pair_term,
)

__all__ = [
    "ANALYZER_NAME",
    "KEYWORD_ANALYZER_NAME",
    "MAX_FUZZY_DISTANCE",
    "MAX_PHRASE_REPEATS",
    "MAX_PHRASE_SLOP",
    "MAX_QUERY_CHARS",
    "MAX_QUERY_DEPTH",
    "MAX_QUERY_TERMS",
    "MAX_SLOPPY_PHRASES",
    "MAX_SLOPPY_PHRASE_TERMS",
    "MAX_WILDCARD_TERMS",
    "PAIRS_ANALYZER_NAME",
    "SEARCH_FIELDS",
    "W_CASE",
    "W_EXACT",
    "W_NAMES",
    "W_PHRASE",
    "Clause",
    "PlainQueryBuilder",
    "QueryBuilder",
    "bm25_idf",
    "code_analyzer",
    "filter_query",
    "filtered",
    "filters",
    "identifiers",
    "keyword_analyzer",
    "pairs_analyzer",
    "query_terms",
    "reraise_fatal",
    "scope_idf_factors",
    "scope_queries",
    "scoring_query",
    "terms_analyzer",
    "token_analyzer",
]

# ``content``, ``path``, ``symbol`` and ``names``: a shard indexes the tokens
# a worker cut (terms_analyzer); the query parser analyses query text with
# code_analyzer under the same name.
ANALYZER_NAME = "cleveragents_code"
# Whole value, lower-cased: ``symbol_exact`` (one value per defined name) and ``lang``.
KEYWORD_ANALYZER_NAME = "cleveragents_keyword"
# ``pairs``: each adjacent pair of content terms as one token (see pair_terms).
PAIRS_ANALYZER_NAME = "cleveragents_pairs"

# Plain-mode weights (see the module docstring; measured, not guessed).
W_NAMES = 0.5
W_EXACT = 4.0
W_PHRASE = 2.0
W_PROXIMITY = 2.0  # phrases of adjacent query words (0: none)
MAX_PROXIMITY_PAIRS = 16
EXACT_SHARED = True
# The extra weight, as a share of the exact boost, of a definition whose name
# has the query's own case (``symbol_case``).
W_CASE = 0.5
# From this many identifiers on, a query is a list of names: no definition boost.
EXACT_LIST_MIN = 2
# ``names`` weight for such a list of names (their definitions are not the answer).
W_NAMES_LIST = 0.0
PROXIMITY_ALL_PAIRS = True
MIN_PROXIMITY_WORDS = 3  # informative words a query needs for proximity
# Whole identifiers of a plain query looked up in ``symbol_exact``.
MAX_PLAIN_IDENTIFIERS = 16
# Names the unit calls (``calls``), per word of a query of 2 to
# CALLS_MAX_WORDS identifier-like words (a list of names: who calls these?).
W_CALLS = 2.0
CALLS_MAX_WORDS = 6
# ``content`` weight of the terms of a qualified name's qualifiers (``graph``
# of ``Graph.parse``): they tell its class or module, and at 1.0 chunks that
# only mention the class outranked the method's definition.
W_QUALIFIER = 0.25
_IDENTIFIER = re.compile(r"[^\W\d]\w*")

# Query caps.  Tantivy's parser recurses once per nesting level (parentheses,
# NOT chains) and overflows the native stack, killing the process with
# SIGSEGV, at a few thousand levels on an 8 MB stack, at ~100 on a 256 KB
# thread stack; 32 levels need well under 128 KB.  Length and term caps keep
# one query's work (and a 20,000-term OR) small.
MAX_QUERY_CHARS = 10_000
MAX_QUERY_DEPTH = 32
MAX_QUERY_TERMS = 1_000
# Shapes whose cost explodes (issue 9, finding 1).  A sloppy phrase is matched
# by a search over position combinations that grows exponentially with its
# terms and slop when the terms are dense in a document: on documents of a
# few thousand tokens, "self x self x self x self x"~8 took 0.38 s, ~4 13 ms;
# 8 x "self" ~16 took 2.5 s, 16 x "self" ~4 0.6 s, 32 x "self" ~4 over a
# minute; 7 distinct terms ~1000 over 5 s.  Exact phrases (slop 0) stay
# linear.  Within these limits the worst shape measured took ~15 ms.
MAX_PHRASE_SLOP = 4
MAX_SLOPPY_PHRASE_TERMS = 8
MAX_PHRASE_REPEATS = 4  # occurrences of one term in one sloppy phrase
MAX_SLOPPY_PHRASES = 4  # sloppy phrases in one query
# Fuzzy matching is not enabled in the parser (``word~N`` is read as text);
# the cap keeps the syntax bounded should it ever be.  A prefix of several
# words (``"parse js"*``) expands to at most 50 terms in Tantivy; a prefix of
# one (``pars*``) is a range of terms, read from the term dictionary at
# once: 16 one-letter prefixes over the stdlib (2,238 files) took 0.26 s in a
# new process, against 0.17 s for one plain term.
MAX_FUZZY_DISTANCE = 2
MAX_WILDCARD_TERMS = 16
_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')
_INTERNAL_FIELD = re.compile(
    r"(?<![\w.])(resource_id|uko_uri|body|metadata|symbol_exact|symbol_case|names|path_raw)\s*:"
)
_BARE_STAR = re.compile(r"(?<![\w*:\\])\*(?![\w*])")
_FIELD_STAR = re.compile(r"(?<![\w\\])([A-Za-z_]\w*):\*(?![\w*])")  # content:*, path:*
_REGEX = re.compile(r"(?:^|[\s(:+-])/(?:[^/\\]|\\.)+/")
_FUZZY = re.compile(r"(?<=[^\s~])~(\d+)")
_OPERATORS = re.compile(r"\b(?:AND|OR|NOT)\b")

SEARCH_FIELDS = ["content", "path"]


def code_analyzer() -> tantivy.TextAnalyzer:
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.regex(TOKEN_PATTERN))
        .filter(tantivy.Filter.remove_long(MAX_TOKEN_CHARS))
        .filter(tantivy.Filter.lowercase())
        .build()
    )


def token_analyzer() -> tantivy.TextAnalyzer:
    """code_analyzer's tokenizer alone: its tokens as cut, before the filters."""
    return tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.regex(TOKEN_PATTERN)).build()


def terms_analyzer() -> tantivy.TextAnalyzer:
    """code_analyzer for text that is its tokens joined by single spaces
    (``text_analysis.prepare_content``): the same filters after a split at
    the spaces, so the same terms at the same positions, without the regex."""
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace())
        .filter(tantivy.Filter.remove_long(MAX_TOKEN_CHARS))
        .filter(tantivy.Filter.lowercase())
        .build()
    )


def keyword_analyzer() -> tantivy.TextAnalyzer:
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.raw())
        .filter(tantivy.Filter.lowercase())
        .build()
    )


def pairs_analyzer() -> tantivy.TextAnalyzer:
    return tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace()).build()


def _nesting(query: str) -> int:
    """How deep the parser recurses: parentheses and ``NOT`` chains, outside quotes.

    Each ``(`` counts one level plus the ``NOT`` run in front of it; escaped
    parentheses and phrases do not count.  Errs on the high side.
    """
    opened: list[int] = []  # levels each open parenthesis added
    depth = deepest = nots = 0
    word: list[str] = []
    chars = iter(query)

    def end_word() -> None:
        nonlocal nots
        if word:
            nots = nots + 1 if "".join(word) == "NOT" else 0
            word.clear()

    for char in chars:
        if char == "\\":
            next(chars, None)
            word.append(char)
        elif char == '"':
            end_word()
            for quoted in chars:  # a phrase: nothing inside nests
                if quoted == "\\":
                    next(chars, None)
                elif quoted == '"':
                    break
        elif char == "(":
            end_word()
            opened.append(nots + 1)
            depth += nots + 1
            nots = 0
        elif char == ")":
            end_word()
            depth -= opened.pop() if opened else 0
            nots = 0
        elif char.isspace():
            end_word()
        else:
            word.append(char)
        deepest = max(deepest, depth + nots)
    end_word()
    return max(deepest, depth + nots)


def reraise_fatal(exc: BaseException) -> None:
    if isinstance(exc, KeyboardInterrupt | SystemExit | GeneratorExit):
        raise exc


# ---------------------------------------------------------------- query building

# A quoted phrase (left alone unless a one-term prefix), or a prefix term
# with its field: ``sel*``, ``symbol:creat*``, ``parseJs*``, ``os.pa*``.
_PREFIX = re.compile(
    r'(?<![\w\\*.:])(?:(?P<pfield>[A-Za-z_]\w*):)?(?P<phrase>"(?:[^"\\]|\\.)*")\*(?![\w*])'
    r'|"(?:[^"\\]|\\.)*"'
    r"|(?<![\w\\*.:])(?:(?P<field>[A-Za-z_]\w*):)?(?P<word>\w+(?:\.\w+)*)\*(?![\w*])"
)


_AND_NOT = re.compile(r'"(?:[^"\\]|\\.)*"|\bAND\s+NOT\s+(?=\S)')


def and_not(query: str) -> str:
    """``a AND NOT b`` as ``a AND -b``: Tantivy's parser makes ``NOT b`` a
    clause of its own that matches nothing (no document is only 'not b'),
    so ``a AND NOT b`` answered nothing at all.  Phrases are left alone."""
    if "NOT" not in query:
        return query
    return _AND_NOT.sub(lambda m: m.group() if m.group().startswith('"') else "AND -", query)


def _prefix_end(term: str) -> str | None:
    """The smallest analysed term above every term that starts with ``term``
    (an exclusive upper bound the analyzer keeps whole), or None when
    there is none (``zz``: the range is open).  A term is a run of
    letters or a run of digits: trailing ``z`` (letters) or ``9`` (digits)
    carry, and non-ASCII letters carry too (so ``café*`` reaches ``cag``:
    a non-ASCII letter after the prefix may match beyond it)."""
    chars = list(term)
    digits = term.isdigit()
    while chars:
        last = chars.pop()
        if digits and last != "9":
            return "".join(chars) + chr(ord(last) + 1)
        if not digits and "a" <= last < "z":
            return "".join(chars) + chr(ord(last) + 1)
    return "a" if digits else None


def _prefix_clause(field: str | None, terms: list[str]) -> str:
    """The parser's clause for a prefix of ``terms`` (analysed) on ``field``
    (None: the default fields)."""
    fields = [field] if field else SEARCH_FIELDS
    if len(terms) > 1:
        phrase = '"' + " ".join(terms) + '"*'
        return phrase if field is None else f"{field}:{phrase}"
    term = terms[0]
    end = _prefix_end(term)
    ranges = [f"{f}:[{term} TO {end}}}" if end else f"{f}:>={term}" for f in fields]
    return ranges[0] if len(ranges) == 1 else "(" + " OR ".join(ranges) + ")"


# An escape (skipped) or a phrase with its optional ``~slop``.
_PHRASE_OR_ESCAPE = re.compile(r'\\.|"((?:[^"\\]|\\.)*)"(?:~(\d+))?', re.DOTALL)


class QueryBuilder:
    """Query text -> ``tantivy.Query`` in one step: caps, explosive shapes, parser.

    This is Tantivy's query syntax (fields, phrases, ``AND``/``OR``/``NOT``,
    prefixes).  Another syntax (a plain-text mode) would be another builder
    with the same :meth:`build`.
    """

    def __init__(self) -> None:
        self._analyzer = code_analyzer()

    def build(self, parser: tantivy.Index, query: str) -> tantivy.Query:
        """Check ``query`` against every limit, then parse it with ``parser``.

        Raises:
            QueryError: a limit is exceeded (the message names it) or the
                parser rejects the query.
        """
        self.check(query)
        return self._parse(parser, and_not(self.prefixes(query)))

    def prefixes(self, query: str) -> str:
        """``query`` with each prefix term written as the parser matches it.

        Tantivy's parser reads ``sel*`` as the term ``sel`` and refuses a
        one-term phrase prefix (``"sel"*``), so a prefix of one analysed
        term becomes a range of terms (``content:[sel TO sem}``, on the
        default fields or the one named), which matches every term that
        starts with it, each document scored 1 by the range; a prefix
        that analyses to several terms (``parseJs*``) becomes the phrase
        prefix ``"parse js"*``, which the parser expands to at most 50 terms.
        """
        if "*" not in query:
            return query

        def rewrite(match: re.Match[str]) -> str:
            if match.group("phrase") is not None:
                phrase = match.group("phrase")
                terms = self._terms(phrase[1:-1])
                if len(terms) != 1:
                    return match.group(0)
                return _prefix_clause(match.group("pfield"), terms)
            field, word = match.group("field"), match.group("word")
            if word is None:  # a phrase: its words are not prefixes
                return match.group(0)
            terms = self._terms(word)
            if not terms:
                return match.group(0)
            return _prefix_clause(field, terms)

        return _PREFIX.sub(rewrite, query)

    def check(self, query: str) -> None:
        if len(query) > MAX_QUERY_CHARS:
            raise QueryError(
                f"the query is {len(query)} characters long; the limit is {MAX_QUERY_CHARS}"
            )
        depth = _nesting(query)
        if depth > MAX_QUERY_DEPTH:
            raise QueryError(
                f"the query nests parentheses / NOT {depth} deep; the limit is {MAX_QUERY_DEPTH}"
            )
        terms = len(self._terms(_OPERATORS.sub(" ", query)))
        if terms > MAX_QUERY_TERMS:
            raise QueryError(f"the query has {terms} terms; the limit is {MAX_QUERY_TERMS}")
        unquoted = _QUOTED.sub(" ", query)
        field = _INTERNAL_FIELD.search(unquoted)
        if field is not None:
            # The scope already selects resources; these fields are bookkeeping.
            raise QueryError(
                f"the field {field.group(1)!r} cannot be searched; "
                "search content, path, symbol, calls or lang"
            )
        if _REGEX.search(unquoted):
            # Tantivy's parser refuses them too; a regex's automaton is unbounded.
            raise QueryError("regular-expression queries (/.../) are not supported")
        if _BARE_STAR.search(_QUOTED.sub("q", query)):  # a phrase prefix ("a b"*) is not bare
            # Tantivy scores a match-all clause 0 or 1 depending on its segment
            # layout, so scores would no longer depend on the documents alone.
            raise QueryError("a bare '*' (match everything) is not supported; search for terms")
        field_star = _FIELD_STAR.search(_QUOTED.sub("q", query))
        if field_star:
            # Tantivy's "has the field" query, which only its fast fields answer
            # ("Schema error: Field content is not a fast field"): every
            # document has every field here, so it is match-everything too.
            raise QueryError(
                f"'{field_star.group(0)}' (every document with the field) is not supported; "
                "search for terms"
            )
        self._check_shapes(query, unquoted)

    def _terms(self, text: str) -> list[str]:
        return self._analyzer.analyze(analysable(text))

    def _check_shapes(self, query: str, unquoted: str) -> None:
        if '"' in query:
            self._check_phrases(query)
        for match in _FUZZY.finditer(unquoted):
            digits = match.group(1)
            if len(digits) > 3 or int(digits) > MAX_FUZZY_DISTANCE:
                raise QueryError(
                    f"the fuzzy distance is {digits[:12]}; the limit is {MAX_FUZZY_DISTANCE}"
                )
        wildcards = unquoted.count("*") - unquoted.count("\\*")
        if wildcards > MAX_WILDCARD_TERMS:
            raise QueryError(
                f"the query has {wildcards} wildcard (prefix) terms; "
                f"the limit is {MAX_WILDCARD_TERMS}"
            )

    def _check_phrases(self, query: str) -> None:
        sloppy = 0
        for match in _PHRASE_OR_ESCAPE.finditer(query):
            phrase, digits = match.group(1), match.group(2)
            if phrase is None or digits is None:
                continue
            if len(digits) > 3 or int(digits) > MAX_PHRASE_SLOP:
                raise QueryError(
                    f"the phrase slop is {digits[:12]}; the limit is {MAX_PHRASE_SLOP}"
                )
            if int(digits) == 0:
                continue
            sloppy += 1
            terms = self._terms(phrase)
            if len(terms) > MAX_SLOPPY_PHRASE_TERMS:
                raise QueryError(
                    f"a phrase with slop has {len(terms)} terms; "
                    f"the limit is {MAX_SLOPPY_PHRASE_TERMS}"
                )
            if terms:
                term, repeats = Counter(terms).most_common(1)[0]
                if repeats > MAX_PHRASE_REPEATS:
                    raise QueryError(
                        f"the term {term[:40]!r} is repeated {repeats} times in a phrase "
                        f"with slop; the limit is {MAX_PHRASE_REPEATS}"
                    )
        if sloppy > MAX_SLOPPY_PHRASES:
            raise QueryError(
                f"the query has {sloppy} phrases with slop; the limit is {MAX_SLOPPY_PHRASES}"
            )

    @staticmethod
    def _parse(parser: tantivy.Index, query: str) -> tantivy.Query:
        try:
            return parser.parse_query(analysable(query), default_field_names=SEARCH_FIELDS)
        except ValueError as exc:
            if "Regex" in str(exc):
                raise QueryError("regular-expression queries are not supported") from exc
            raise QueryError(f"invalid query: {exc}") from exc
        except BaseException as exc:  # PyO3 PanicException derives from BaseException
            reraise_fatal(exc)
            raise QueryError(f"the query engine failed on this query: {exc}") from exc


# ---------------------------------------------------------------- plain syntax


def query_terms(analyzer: tantivy.TextAnalyzer, query: str, *, syntax: str) -> list[str]:
    """The distinct analysed terms of ``query`` in order (for ``match_lines``).

    Tantivy syntax: field prefixes and operators are left out first.
    """
    query = query[:MAX_QUERY_CHARS]
    if syntax == "tantivy":
        query = _OPERATORS.sub(" ", _FIELD_PREFIX.sub(" ", query))
    terms = analyzer.analyze(analysable(query))
    return list(dict.fromkeys(terms))[:MAX_PLAIN_TERMS]


_FIELD_PREFIX = re.compile(r"(?<![\w.])\w+\s*:")


_STOP_WORDS = frozenset(
    {
        "the",
        "and",
        "for",
        "are",
        "but",
        "not",
        "you",
        "her",
        "was",
        "our",
        "has",
        "his",
        "how",
        "its",
        "who",
        "did",
        "she",
        "too",
        "from",
        "that",
        "this",
        "with",
        "have",
        "they",
        "will",
        "your",
        "what",
        "when",
        "where",
        "which",
        "their",
        "there",
        "them",
        "then",
        "than",
        "been",
        "were",
        "into",
        "each",
        "more",
        "some",
        "such",
        "only",
        "also",
        "very",
        "just",
        "over",
    }
)


# Words of a sentence, never of a list of names (see ``_called_names``).
_SENTENCE_WORDS = _STOP_WORDS | frozenset(
    [
        "a",
        "an",
        "as",
        "at",
        "be",
        "by",
        "do",
        "if",
        "in",
        "is",
        "it",
        "no",
        "of",
        "on",
        "or",
        "so",
        "to",
        "we",
    ]
)


def _informative(term: str) -> bool:
    return len(term) > 2 and term not in _STOP_WORDS


# ``obj.name`` (not a sentence's ". Name"), ``name(`` and ``name.attr``
# (not a sentence's last word and its full stop).
_ATTRIBUTE_BEFORE = re.compile(r"[\w)\]]\.")
# ``~2``: a later definition of the name in its file, as the graph names it.
_QUALIFIED_NAME = re.compile(r"([^\W\d]\w*(?:\.[^\W\d]\w*)+)(?:~\d+)?")
_CALL_OR_ATTRIBUTE_AFTER = re.compile(r"\(|\.[^\W\d]")


def qualified_name(query: str) -> tuple[str, str] | None:
    """``(qualifiers, last part)`` of a query that is a qualified name
    (``Graph.parse`` -> ``("Graph", "parse")``; ``Graph.parse~2``, one
    overload as ``callers`` prints it, the same), else None."""
    found = _QUALIFIED_NAME.fullmatch(query.strip())
    if found is None:
        return None
    qualifiers, _, last = found.group(1).rpartition(".")
    return qualifiers, last


def identifiers(analyzer: tantivy.TextAnalyzer, query: str) -> list[tuple[str, list[str]]]:
    """The words of a plain query that name code, as typed, with their parts.

    A word is taken for an identifier when it has two or more parts
    (``create_connection``, ``HTTPServer``), starts or ends with ``_``, sits
    next to code punctuation (``.name``, ``name(``, ``name.``), or is the
    whole query (``Manager``; of a query that is a qualified name,
    ``Graph.parse``, only the last part).  Other one-part words of a sentence
    (``running the loop``) are left to the term clauses: a definition named
    ``running`` is not what a sentence using the word asks for.  At most
    :data:`MAX_PLAIN_IDENTIFIERS`, each once.
    """
    found: dict[str, list[str]] = {}
    qualified = qualified_name(query)
    if qualified is not None:
        # The whole query is a qualified name (``Graph.parse``, as symbols,
        # callers and read#sym= print names): it asks for the definition of
        # its last part, the qualifiers being its class or module, whose
        # words rank among the term clauses.
        last = qualified[1]
        parts = analyzer.analyze(analysable(last))
        return [(last, parts)] if parts and len(last) <= MAX_TOKEN_CHARS else []
    matches = list(_IDENTIFIER.finditer(query))
    alone = len(matches) == 1
    for match in matches:
        word = match.group()
        if word in found or len(word) > MAX_TOKEN_CHARS:
            continue
        parts = analyzer.analyze(analysable(word))
        if not parts:
            continue
        before = query[max(0, match.start() - 2) : match.start()]
        after = query[match.end() : match.end() + 2]
        if (
            len(parts) >= 2
            or alone
            or word.startswith("_")
            or word.endswith("_")
            or _ATTRIBUTE_BEFORE.fullmatch(before) is not None
            or _CALL_OR_ATTRIBUTE_AFTER.match(after) is not None
        ):
            found[word] = parts
            if len(found) >= MAX_PLAIN_IDENTIFIERS:
                break
    return list(found.items())


def _called_names(query: str) -> list[str]:
    """The words of a short list of names, lower-cased, for the ``calls`` field.

    A query of 2 to :data:`CALLS_MAX_WORDS` words, each an identifier
    (``Py_INCREF PyMethod_New Py_TYPE``, ``getaddrinfo iter next``); none
    for longer text, a single word (its definition is wanted) or words that
    only a sentence has (``read the json stream``: a stop word).
    """
    words = query[: CALLS_MAX_WORDS * 100].split()
    if not 2 <= len(words) <= CALLS_MAX_WORDS:
        return []
    names = [w.lower() for w in words if _IDENTIFIER.fullmatch(w)]
    if len(names) < len(words) or any(n in _SENTENCE_WORDS for n in names):
        return []
    return list(dict.fromkeys(names))


class PlainQueryBuilder:
    """Any text -> a ``tantivy.Query`` built from its terms (see the module doc)."""

    def __init__(self) -> None:
        self._analyzer = code_analyzer()

    def terms(self, query: str) -> list[str]:
        return query_terms(self._analyzer, query, syntax="plain")

    def _qualifier_terms(
        self, qualified: tuple[str, str] | None, multi: list[tuple[str, list[str]]]
    ) -> frozenset[str]:
        """The terms only the qualifiers of a qualified-name query hold
        (``graph`` of ``Graph.parse``); none for any other query."""
        if qualified is None:
            return frozenset()
        return frozenset(self._analyzer.analyze(analysable(qualified[0]))) - set(multi[0][1])

    def build(self, schema: tantivy.Schema, query: str) -> tantivy.Query | None:
        """The scoring query of ``query``; ``None`` when it has no analysable term.

        Never raises :class:`QueryError` for the text: every string is valid.
        """
        clauses = self.clauses(query)
        return None if clauses is None else scoring_query(schema, clauses)

    def clauses(self, query: str) -> tuple[Clause, ...] | None:
        """The weighted term clauses of ``query`` (summed: OR); ``None`` when
        it has no analysable term.  Every string is valid."""
        terms = self.terms(query)
        if not terms:
            return None
        clauses: list[Clause] = []
        # Identifiers (see :func:`identifiers`): the whole name among the
        # unit's definitions (case-folded, plus a bonus when the case is the
        # query's too: ``Manager`` the class over ``manager`` the property),
        # and the parts of a multi-part name adjacent in content.
        multi = identifiers(self._analyzer, query[:MAX_QUERY_CHARS])
        names = W_NAMES_LIST if len(multi) >= EXACT_LIST_MIN else W_NAMES
        # A qualified name (``Graph.parse``) asks for one definition.
        qualified = qualified_name(query[:MAX_QUERY_CHARS]) if len(multi) == 1 else None
        qualifiers = self._qualifier_terms(qualified, multi)
        for t in terms:
            clauses.append(("content", t, W_QUALIFIER if t in qualifiers else 1.0))
            if names > 0:
                clauses.append(("names", t, names))
        # The definition boost is shared: a query about one name favours its
        # definition fully; a list of names (calls) favours none of them much.
        exact = W_EXACT / len(multi) if multi and EXACT_SHARED else W_EXACT
        if len(multi) >= EXACT_LIST_MIN:
            # A list of names asks where they meet (a caller), not for each definition.
            exact = 0.0
        part_pairs = dict.fromkeys(
            (a, b) for _, parts in multi for a, b in itertools.pairwise(parts) if a != b
        )
        for word, _ in multi if exact > 0 else ():
            clauses.append(("symbol_exact", word.lower(), exact))
            if W_CASE > 0:
                clauses.append(("symbol_case", word, exact * W_CASE))
        if qualified is not None:
            # ``Graph.parse``: the method of that class over other ``parse``s.
            whole = ".".join(qualified)
            clauses.append(("symbol_exact", whole.lower(), W_EXACT))
            if W_CASE > 0:
                clauses.append(("symbol_case", whole, W_EXACT * W_CASE))
        for a, b in list(part_pairs)[:MAX_PROXIMITY_PAIRS]:
            clauses.append(("pairs", pair_term(a, b), W_PHRASE))
        for name in _called_names(query) if W_CALLS > 0 else ():
            clauses.append(("calls", name, W_CALLS))
        informative = sum(1 for t in terms if _informative(t))
        if W_PROXIMITY > 0 and informative >= MIN_PROXIMITY_WORDS:
            # Adjacent words of the query (a pasted sentence) found adjacent,
            # in the query's order.  Pairs with a stop word or a one- or
            # two-letter term are left out: frequent, they carry little and
            # cost the most (every phrase checks positions in each document
            # holding both terms).
            sequence = self._analyzer.analyze(analysable(query[:MAX_QUERY_CHARS]))
            seen = part_pairs
            pairs = dict.fromkeys(
                (a, b)
                for a, b in itertools.pairwise(sequence)
                if a != b
                and (PROXIMITY_ALL_PAIRS or (_informative(a) and _informative(b)))
                and (a, b) not in seen
            )
            for a, b in list(pairs)[:MAX_PROXIMITY_PAIRS]:
                clauses.append(("pairs", pair_term(a, b), W_PROXIMITY))
        return tuple(clauses)


#: One scoring clause of a plain query: (field, term as indexed, weight).
Clause = tuple[str, str, float]


def scoring_query(
    schema: tantivy.Schema,
    clauses: Sequence[Clause],
    terms: Sequence[tantivy.Query] | None = None,
) -> tantivy.Query:
    """The sum (OR) of ``clauses``: each a BM25 term query (``terms[i]``
    when given, already built) times its weight."""
    should = tantivy.Occur.Should
    term = tantivy.Query.term_query
    boost = tantivy.Query.boost_query
    built: list[tuple[tantivy.Occur, tantivy.Query]] = []
    for i, (field, value, weight) in enumerate(clauses):
        query = term(schema, field, value) if terms is None else terms[i]
        built.append((should, query if weight == 1.0 else boost(query, weight)))
    return tantivy.Query.boolean_query(built)


def bm25_idf(docs: int, doc_freq: int) -> float:
    """BM25's inverse document frequency, as Tantivy computes it."""
    return math.log(1.0 + (docs - doc_freq + 0.5) / (doc_freq + 0.5))


def scope_idf_factors(
    stats: Sequence[tuple[int, Sequence[int]]],
) -> list[list[float] | None]:
    """Per shard, the factor of each clause that turns the shard's own IDF
    into the scope's: ``idf(N, n) / idf(N_s, n_s)``.

    ``stats`` holds, per in-scope shard, its document count ``N_s`` and the
    document frequency ``n_s`` of each clause's term in it; ``N`` and ``n``
    are their sums over the shards, i.e. the statistics of one index of
    exactly the in-scope documents.  A clause whose term a shard lacks
    matches nothing there (factor 1); ``None`` for a shard where no clause
    matches (it has no hit to give).
    """
    if not stats:
        return []
    docs = sum(n for n, _ in stats)
    freqs = [sum(column) for column in zip(*(dfs for _, dfs in stats), strict=True)]
    scope = [bm25_idf(docs, n) for n in freqs]
    out: list[list[float] | None] = []
    for shard_docs, dfs in stats:
        if not any(dfs):
            out.append(None)
            continue
        out.append([scope[i] / bm25_idf(shard_docs, n) if n else 1.0 for i, n in enumerate(dfs)])
    return out


def scope_queries(
    terms: Sequence[tantivy.Query],
    clauses: Sequence[Clause],
    stats: Sequence[tuple[int, Sequence[int]]],
) -> list[tantivy.Query | None]:
    """Per shard, the plain query of ``clauses`` (``terms`` their term
    queries) weighted to the scope's IDF (:func:`scope_idf_factors`), with
    only the clauses whose term the shard holds; ``None`` where it holds none."""
    should = tantivy.Occur.Should
    boost = tantivy.Query.boost_query
    out: list[tantivy.Query | None] = []
    for (_, dfs), factors in zip(stats, scope_idf_factors(stats), strict=True):
        if factors is None:
            out.append(None)
            continue
        out.append(
            tantivy.Query.boolean_query(
                [
                    (should, boost(terms[i], clauses[i][2] * factors[i]))
                    for i, n in enumerate(dfs)
                    if n
                ]
            )
        )
    return out


def filter_query(
    schema: tantivy.Schema,
    scoring: tantivy.Query,
    *,
    path_regex: str | None,
    lang: str | None,
) -> tantivy.Query:
    """``scoring`` restricted to a path regex and/or a language, scores unchanged.

    Each filter is a required clause with a constant score of 0, evaluated by
    the engine itself, so the top k stay exact.

    Raises:
        QueryError: the engine refuses the path pattern.
    """
    return filtered(scoring, filters(schema, path_regex=path_regex, lang=lang))


def filters(
    schema: tantivy.Schema, *, path_regex: str | None, lang: str | None
) -> list[tantivy.Query]:
    """The filter clauses of :func:`filter_query`, to add to several queries.

    Raises:
        QueryError: the engine refuses the path pattern.
    """
    out: list[tantivy.Query] = []
    if lang is not None:
        lang_term = tantivy.Query.term_query(schema, "lang", lang)
        out.append(tantivy.Query.const_score_query(lang_term, 0.0))
    if path_regex is not None:
        try:
            glob = tantivy.Query.regex_query(schema, "path_raw", path_regex)
        except ValueError as exc:
            raise QueryError(f"the path glob cannot be used: {exc}") from exc
        out.append(tantivy.Query.const_score_query(glob, 0.0))
    return out


def filtered(scoring: tantivy.Query, clauses: Sequence[tantivy.Query]) -> tantivy.Query:
    """``scoring`` with each of ``clauses`` (see :func:`filters`) required."""
    must = tantivy.Occur.Must
    return tantivy.Query.boolean_query([(must, scoring), *((must, c) for c in clauses)])
