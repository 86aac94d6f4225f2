"""The text search controls every text backend shares: syntax, path glob, language.

Pure Python (no engine), so the Tantivy adapter, the in-memory reference,
the Milvus adapter and the stub read the options the same way.

- ``syntax``: ``"plain"`` (default: any non-empty string is a valid query,
  analysed into terms; punctuation is never an error) or ``"tantivy"`` (the
  engine's query language, with its limits).
- ``path``: a glob matched against the whole relative path of a unit's file
  (``metadata["path"]``, ``/``-separated).  ``*`` matches any run of
  characters within one segment (never ``/``), ``?`` one character within a
  segment, ``**`` any run across segments: ``pkg/**/*.py`` matches
  ``pkg/a.py`` and ``pkg/x/y/a.py``; ``rdflib/plugins/*`` matches the files
  directly in ``rdflib/plugins``.  A pattern ending in ``/`` means everything
  below that directory (``rdflib/plugins/`` is ``rdflib/plugins/**``).
  Braces give alternatives, nested or not (``**/*.{ts,tsx}``,
  ``{src,lib}/**/*.py``; at most :data:`MAX_BRACE_ALTERNATIVES` globs in
  all; an unclosed brace is refused).  There are no ``[...]`` classes: a
  glob holding ``[`` or ``]`` is refused (:class:`QueryError`), as one
  written for another glob language would silently match nothing here
  (``?`` matches one such character in a file's name:
  ``app/?id?/page.tsx`` for ``app/[id]/page.tsx``).  Every other character
  is literal; matching is case-sensitive.  A leading ``./`` or ``/`` is
  ignored.
- ``lang``: a language name as the chunker detects it (``python``, ``go``,
  ``markdown``...; ``metadata["language"]``), case-insensitive.

:func:`match_lines` computes ``TextResult.metadata["match_lines"]``: the
1-based line numbers within the file (the unit's ``start_line`` plus the
offset in the chunk) of the chunk's lines that hold a query term after
analysis, comma separated, at most :data:`MAX_MATCH_LINES`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from typing import Literal, get_args

from cleveragents.domain.models.acms.errors import QueryError

__all__ = [
    "MAX_GLOB_CHARS",
    "MAX_MATCH_LINES",
    "MAX_PLAIN_TERMS",
    "SYNTAXES",
    "LineMatcher",
    "TextOptions",
    "TextSyntax",
    "glob_regex",
    "match_lines",
    "path_matches",
    "text_options",
]

#: A text query's syntax (the type the service's tool schema lists).
TextSyntax = Literal["plain", "tantivy"]
SYNTAXES: tuple[TextSyntax, ...] = get_args(TextSyntax)
#: Distinct analysed terms a plain query keeps (the first ones, in query order):
#: a pasted page of code is still a bounded query.
MAX_PLAIN_TERMS = 64
MAX_MATCH_LINES = 20
MAX_GLOB_CHARS = 512
_MAX_LANG_CHARS = 64
_LANG = re.compile(r"[a-z0-9][a-z0-9_+#.-]*")


class TextOptions:
    """Validated ``syntax``/``path``/``lang`` of one search."""

    __slots__ = ("lang", "path", "syntax")

    def __init__(self, syntax: str, path: str | None, lang: str | None) -> None:
        self.syntax = syntax
        self.path = path
        self.lang = lang

    @property
    def filtered(self) -> bool:
        return self.path is not None or self.lang is not None

    def key(self) -> tuple[str, str | None, str | None]:
        return (self.syntax, self.path, self.lang)


def text_options(syntax: object = "plain", path: object = None, lang: object = None) -> TextOptions:
    """Validate and normalise the keyword-only search controls.

    Raises:
        TypeError: an option has the wrong type.
        QueryError: an unknown syntax, an empty or over-long glob, a glob
            holding ``[``, ``]``, ``{`` or ``}`` (see the module doc), a
            malformed language name.
    """
    if not isinstance(syntax, str):
        raise TypeError("syntax must be a string")
    if syntax not in SYNTAXES:
        raise QueryError(f"syntax must be one of {', '.join(SYNTAXES)}, not {syntax[:40]!r}")
    glob: str | None = None
    if path is not None:
        if not isinstance(path, str):
            raise TypeError("path must be a glob string or None")
        glob = _normal_glob(path)
    language: str | None = None
    if lang is not None:
        if not isinstance(lang, str):
            raise TypeError("lang must be a string or None")
        language = lang.strip().lower()
        if len(language) > _MAX_LANG_CHARS or not _LANG.fullmatch(language):
            raise QueryError(f"not a language name: {lang[:40]!r}")
    return TextOptions(syntax, glob, language)


def _normal_glob(path: str) -> str:
    glob = path.strip()
    while glob.startswith("./"):
        glob = glob[2:]
    glob = glob.lstrip("/")
    if glob.endswith("/"):
        glob += "**"
    if not glob:
        raise QueryError("the path glob is empty")
    if len(glob) > MAX_GLOB_CHARS:
        raise QueryError(f"the path glob is {len(glob)} characters; the limit is {MAX_GLOB_CHARS}")
    if "\x00" in glob:
        raise QueryError("the path glob holds a NUL character")
    reserved = next((c for c in glob if c in _NOT_GLOB_SYNTAX), None)
    if reserved is not None:
        raise QueryError(
            f"the path glob {path.strip()[:80]!r} holds {reserved!r}: path globs have "
            "'*', '**', '?' and {a,b} (no [...] classes; '?' matches one such character "
            "in a name)"
        )
    try:
        alternatives = _alternatives(glob)
    except ValueError as exc:
        raise QueryError(f"the path glob {path.strip()[:80]!r} {exc}") from None
    if not any(alternatives):
        raise QueryError(f"the path glob {path.strip()[:80]!r} is empty once its braces expand")
    return glob


#: Characters that are syntax in other glob languages (classes) but not in
#: this one: refused rather than read as literals that match nothing.
_NOT_GLOB_SYNTAX = frozenset("[]")
#: The most globs one glob's braces may expand to.
MAX_BRACE_ALTERNATIVES = 32


@functools.lru_cache(maxsize=64)
def _alternatives(glob: str) -> tuple[str, ...]:
    """The brace-free globs ``glob`` stands for (``a{b,c}d`` -> abd, acd).

    Raises:
        ValueError: an unclosed ``{`` or an unopened ``}``, or more than
            :data:`MAX_BRACE_ALTERNATIVES` globs.
    """
    start = glob.find("{")
    close = glob.find("}")
    if start < 0:
        if close >= 0:
            raise ValueError("has a '}' that no '{' opens")
        # Each alternative is a glob of its own: ``{src/,./lib}`` is
        # ``src/**`` or ``lib`` (see _normal_glob).
        while glob.startswith("./"):
            glob = glob[2:]
        glob = glob.lstrip("/")
        return (glob + "**" if glob.endswith("/") else glob,)
    if 0 <= close < start:
        raise ValueError("has a '}' that no '{' opens")
    depth, parts, begin = 0, [], start + 1
    for i in range(start, len(glob)):
        char = glob[i]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                parts.append(glob[begin:i])
                end = i
                break
        elif char == "," and depth == 1:
            parts.append(glob[begin:i])
            begin = i + 1
    else:
        raise ValueError("has a '{' that no '}' closes")
    out: list[str] = []
    for part in parts:
        for glob_ in _alternatives(glob[:start] + part + glob[end + 1 :]):
            if glob_ not in out:
                out.append(glob_)
            if len(out) > MAX_BRACE_ALTERNATIVES:
                raise ValueError(f"stands for more than {MAX_BRACE_ALTERNATIVES} globs")
    return tuple(out)


def glob_regex(glob: str) -> str:
    """The regular expression (to match the whole path) of a normalised glob.

    Written in the subset that Python's ``re`` and Rust's ``regex`` (Tantivy's
    regex query) read the same way: ASCII punctuation as ``\\xNN`` escapes,
    ``(?s)``, ``[^/]``, ``.``, ``(?:...)?``, ``(?:...|...)`` and ``*``.
    """
    bodies = [_regex_body(g) for g in _alternatives(glob)]
    return "(?s)" + (bodies[0] if len(bodies) == 1 else "(?:" + "|".join(bodies) + ")")


def _regex_body(glob: str) -> str:
    out: list[str] = []
    i, n = 0, len(glob)
    while i < n:
        char = glob[i]
        if glob.startswith("**", i):
            while glob.startswith("*", i):
                i += 1
            if i < n and glob[i] == "/":
                out.append("(?:.*/)?")  # zero or more whole segments
                i += 1
            elif i == n and out and out[-1] == "\\x2f":
                out[-1] = "(?:/.*)?"  # ``dir/**``: dir itself and all below
            else:
                out.append(".*")
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char.isascii() and not char.isalnum():
            out.append(f"\\x{ord(char):02x}")
        else:
            out.append(char)
        i += 1
    return "".join(out)


# Glob steps for :func:`path_matches`: a character, one non-``/`` character,
# a run of non-``/`` characters, a run of anything, or a fork (go on, or jump
# past an optional group).
_Step = tuple[str, str | int]


@functools.lru_cache(maxsize=64)
def _steps(glob: str) -> tuple[_Step, ...]:
    """A brace-free glob of :func:`glob_regex` as steps of a state machine (same language)."""
    steps: list[_Step] = []
    i, n = 0, len(glob)
    while i < n:
        if glob.startswith("**", i):
            while glob.startswith("*", i):
                i += 1
            if i < n and glob[i] == "/":  # (?:.*/)?: zero or more whole segments
                steps += [("fork", len(steps) + 3), ("any*", 0), ("char", "/")]
                i += 1
            elif i == n and steps and steps[-1] == ("char", "/"):  # dir/**
                steps[-1] = ("fork", len(steps) + 2)
                steps += [("char", "/"), ("any*", 0)]
            else:
                steps.append(("any*", 0))
            continue
        char = glob[i]
        steps.append(("seg*", 0) if char == "*" else ("seg1", 0) if char == "?" else ("char", char))
        i += 1
    return tuple(steps)


def path_matches(glob: str, path: str) -> bool:
    """Whether ``path`` matches the normalised ``glob`` (see the module doc).

    A set-of-states simulation, linear in ``len(path) x len(glob)``: a
    backtracking regex took exponential time on globs such as ``*a*a*a...*b``
    (a hybrid search's path filter runs in this process).
    """
    return any(_matches(g, path) for g in _alternatives(glob))


def _matches(glob: str, path: str) -> bool:
    steps = _steps(glob)
    end = len(steps)

    def closure(states: set[int]) -> set[int]:
        todo = list(states)
        while todo:
            at = todo.pop()
            if at >= end:
                continue
            kind, arg = steps[at]
            follow = [at + 1] if kind in ("seg*", "any*") else []
            if kind == "fork":
                follow = [at + 1, int(arg)]
            for nxt in follow:
                if nxt not in states:
                    states.add(nxt)
                    todo.append(nxt)
        return states

    current = closure({0})
    for char in path:
        moved: set[int] = set()
        for at in current:
            if at >= end:
                continue
            kind, arg = steps[at]
            if (kind == "char" and char == arg) or (kind == "seg1" and char != "/"):
                moved.add(at + 1)
            elif kind == "any*" or (kind == "seg*" and char != "/"):
                moved.add(at)
        if not moved:
            return False
        current = closure(moved)
    return end in current


def match_lines(
    content: str,
    start_line: str | None,
    terms: Iterable[str],
    analyse: Callable[[str], Iterable[str]],
) -> str:
    """Comma-separated absolute line numbers of the lines holding a term.

    ``terms`` are analysed (lower-case) terms; ``analyse`` is the backend's
    analyzer, applied to a line only if the line holds one of the chunk's
    terms as a lower-case substring (a necessary condition, since analysis
    only splits and lower-cases), so the cost stays near a substring scan.
    """
    lower = content.lower()
    wanted = {t for t in terms if t and t in lower}
    if not wanted:
        return ""
    first = _first_line(start_line)
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


def _first_line(start_line: str | None) -> int:
    try:
        return int(start_line) if start_line is not None else 1
    except ValueError:
        return 1


_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
_RUN_END = re.compile(r"[A-Za-z0-9]*")  # matches everywhere (maybe empty)


def _run_end(content: str, at: int) -> int:
    found = _RUN_END.match(content, at)
    return at if found is None else found.end()


class LineMatcher:
    """:func:`match_lines` for one query, built once and used for each of its hits.

    ``ascii_token`` (optional) is the analyzer's rule for ASCII text: a
    pattern whose ``findall`` over an ASCII line, lower-cased, is what
    ``analyse`` returns for that line, and which matches (and looks around)
    ``[A-Za-z0-9]`` characters only.  A line's tokens are then the tokens of
    its maximal runs of those characters, each on its own, and a token equal
    to a term lies in a run holding the term as a substring (lower-cased).
    So for an ASCII chunk one precompiled alternation of the terms scans the
    lower-cased chunk (in C), and only the runs around its hits are
    tokenized, instead of every line that holds a term anywhere: the same
    answer as :func:`match_lines`, at about the cost of a substring scan.
    Other chunks (and a matcher without ``ascii_token``) take
    :func:`match_lines` itself.
    """

    __slots__ = ("_analyse", "_terms", "_token", "_wanted", "_words")

    def __init__(
        self,
        terms: Iterable[str],
        analyse: Callable[[str], Iterable[str]],
        *,
        ascii_token: re.Pattern[str] | None = None,
    ) -> None:
        self._terms = tuple(dict.fromkeys(t for t in terms if t))
        self._wanted = frozenset(self._terms)
        self._analyse = analyse
        self._token = ascii_token
        # Only an ASCII alphanumeric term can equal a token of an ASCII run.
        self._words = tuple(t for t in self._terms if t.isascii() and t.isalnum())

    def lines(self, content: str, start_line: str | None) -> str:
        """``match_lines(content, start_line, terms, analyse)``."""
        if self._token is None or not content.isascii():
            return match_lines(content, start_line, self._terms, self._analyse)
        lower = content.lower()  # ASCII: the same offsets as ``content``
        # The next occurrence of each term (``str.find``: a C substring scan).
        ahead = {t: at for t in self._words if (at := lower.find(t)) >= 0}
        findall, wanted = self._token.findall, self._wanted
        out: list[str] = []
        first = 0  # the first line's number, read on the first match
        line = 0  # line breaks before ``counted``
        counted = pos = 0  # no run holding a term-token starts before ``pos``
        while ahead:
            at = min(ahead.values())
            # The run around the hit: back to its start (``pos`` is a line
            # start or the end of a run), forward to its end.
            start = pos + len(content[pos:at].rstrip(_ALNUM))
            end = _run_end(content, at)
            if wanted.isdisjoint(map(str.lower, findall(content, start, end))):
                pos = end
            else:
                line += content.count("\n", counted, start)
                counted = start
                if not out:
                    first = _first_line(start_line)
                out.append(str(first + line))
                if len(out) >= MAX_MATCH_LINES:
                    break
                pos = content.find("\n", end) + 1  # on to the next line
                if pos == 0:
                    break
                line += 1  # the break just found (none inside a run)
                counted = pos
            for term, next_at in list(ahead.items()):
                if next_at < pos:
                    found = lower.find(term, pos)
                    if found < 0:
                        del ahead[term]
                    else:
                        ahead[term] = found
        return ",".join(out)
