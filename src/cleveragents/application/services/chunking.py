"""Split source files into line-range chunks, the units of text and vector search.

A file is first cut into *blocks* that start at top-level definitions
(language aware, best effort, see :func:`chunk_text`); consecutive small
blocks are packed into one chunk and oversized blocks are split, preferably
after a blank line.  Chunks are contiguous line ranges: every line of the
file lies in exactly one chunk, in order.

Lines are counted the way editors and ``git`` count them: ``\\r\\n``, ``\\r``
and ``\\n`` each end a line, and a final line ending does not start another
line.  So ``"a\\nb\\n"`` has two lines, ``"a\\n\\n"`` two (the second empty),
and ``""`` none.
"""

from __future__ import annotations

import bisect
import difflib
import itertools
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from cleveragents.domain.models.acms.backends import IndexUnit
from cleveragents.domain.models.acms.errors import QueryError
from cleveragents.domain.models.acms.uko import unit_uri
from cleveragents.domain.models.acms.ulids import canonical_ulid

__all__ = [
    "MAX_UNIT_CALLS",
    "Chunk",
    "chunk_text",
    "detect_language",
    "make_units",
    "split_lines",
]

# ---------------------------------------------------------------- languages

_EXTENSIONS: dict[str, str] = {
    ".py": "python",
    ".pyi": "python",
    ".pyw": "python",
    ".js": "javascript",
    ".jsx": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".ts": "typescript",
    ".tsx": "typescript",
    ".mts": "typescript",
    ".cts": "typescript",
    ".go": "go",
    ".rs": "rust",
    ".java": "java",
    ".kt": "kotlin",
    ".kts": "kotlin",
    ".scala": "scala",
    ".swift": "swift",
    ".c": "c",
    ".h": "c",
    ".cc": "cpp",
    ".cpp": "cpp",
    ".cxx": "cpp",
    ".c++": "cpp",
    ".hh": "cpp",
    ".hpp": "cpp",
    ".hxx": "cpp",
    ".ipp": "cpp",
    ".cs": "csharp",
    ".rb": "ruby",
    ".php": "php",
    ".lua": "lua",
    ".pl": "perl",
    ".pm": "perl",
    ".r": "r",
    ".sh": "shell",
    ".bash": "shell",
    ".zsh": "shell",
    ".ksh": "shell",
    ".fish": "shell",
    ".md": "markdown",
    ".markdown": "markdown",
    ".rst": "restructuredtext",
    ".json": "json",
    ".jsonc": "json",
    ".yaml": "yaml",
    ".yml": "yaml",
    ".toml": "toml",
    ".ini": "ini",
    ".cfg": "ini",
    ".html": "html",
    ".htm": "html",
    ".xml": "xml",
    ".css": "css",
    ".scss": "css",
    ".sass": "css",
    ".less": "css",
    ".sql": "sql",
    ".txt": "text",
}

_FILENAMES: dict[str, str] = {
    "dockerfile": "dockerfile",
    "containerfile": "dockerfile",
    "makefile": "makefile",
    "gnumakefile": "makefile",
    "cmakelists.txt": "cmake",
    "gemfile": "ruby",
    "rakefile": "ruby",
    "pipfile": "toml",
    ".bashrc": "shell",
    ".bash_profile": "shell",
    ".profile": "shell",
    ".zshrc": "shell",
}


def detect_language(rel_path: str) -> str:
    """Language name of a file from its name and extension; ``"text"`` if unknown.

    Names are lower case and stable (``"python"``, ``"typescript"``,
    ``"cpp"``, ``"csharp"``, ``"shell"``, ``"markdown"``, ...): they are
    stored in the indexes.
    """
    name = PurePosixPath(rel_path.replace("\\", "/")).name.lower()
    if name in _FILENAMES:
        return _FILENAMES[name]
    if name.startswith("dockerfile."):
        return "dockerfile"
    suffix = PurePosixPath(name).suffix
    return _EXTENSIONS.get(suffix, "text")


#: Every language name :func:`detect_language` gives (what ``lang`` filters match).
LANGUAGES = frozenset({*_EXTENSIONS.values(), *_FILENAMES.values(), "dockerfile", "text"})


def check_language(lang: str) -> str:
    """``lang`` (any case) if it is a name the indexes hold, lower-cased.

    Raises:
        QueryError: an unknown name, with the language it may have meant (a
            file extension such as ``py``, or a known name's prefix) and the
            list of names; a filter on it would match nothing, silently.
    """
    name = lang.strip().lower()
    if name in LANGUAGES:
        return name
    meant = _EXTENSIONS.get("." + name.lstrip("."))
    if meant is None:
        close = difflib.get_close_matches(name, sorted(LANGUAGES), n=1, cutoff=0.6)
        meant = close[0] if close else None
    hint = f" (did you mean {meant!r}?)" if meant else ""
    raise QueryError(
        f"unknown language {lang[:40]!r}{hint}; the languages are: {', '.join(sorted(LANGUAGES))}"
    )


# ---------------------------------------------------------------- lines


@dataclass(frozen=True, slots=True)
class Chunk:
    """Lines ``start_line..end_line`` (1-based, inclusive) of a file, joined with ``\\n``."""

    start_line: int
    end_line: int
    text: str

    def __post_init__(self) -> None:
        if self.start_line < 1 or self.end_line < self.start_line:
            raise ValueError(f"invalid line range {self.start_line}..{self.end_line}")


def split_lines(text: str) -> list[str]:
    """The lines of ``text``, without line endings (see the module docstring).

    ``"\\n".join(split_lines(t))`` is ``t`` with line endings normalised to
    ``\\n`` and one final line ending removed.
    """
    if not text:
        return []
    normalised = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = normalised.split("\n")
    if normalised.endswith("\n"):
        lines.pop()
    return lines


# ---------------------------------------------------------------- block starts

_Kind = int
_PLAIN, _START, _DECORATOR, _CLOSER = 0, 1, 2, 3

# Called names kept in one unit's ``calls`` metadata.
MAX_UNIT_CALLS = 64
_PY_START = re.compile(r"(?:async[ \t]+def|def|class)\b")
_JS_START = re.compile(
    r"(?:export[ \t]+)?(?:default[ \t]+)?(?:declare[ \t]+)?(?:async[ \t]+)?(?:abstract[ \t]+)?"
    r"(?:function\b|class\b|interface\b|enum\b|namespace\b|module\.exports\b|exports\.|"
    r"(?:const|let|var|type)[ \t]+[\w$])"
)
_GO_START = re.compile(r"(?:func|type|var|const|import)\b")
_RUST_START = re.compile(
    r"(?:pub(?:\([^)]*\))?[ \t]+)?"
    r"(?:(?:async|unsafe|const|default|extern(?:[ \t]+\"[^\"]*\")?)[ \t]+)*"
    r"(?:fn|impl|struct|enum|trait|mod|type|static|const|union|macro_rules!)\b"
)
_RUBY_START = re.compile(r"(?:def|class|module)\b")
_PHP_START = re.compile(
    r"(?:(?:abstract|final|readonly)[ \t]+)*(?:function|class|interface|trait|enum)\b"
)
_SHELL_START = re.compile(r"(?:function[ \t]+[\w.:-]+|[\w.:-]+[ \t]*\(\))")
_MD_HEADING = re.compile(r"#{1,6}(?:[ \t]|$)")
_MD_FENCE = re.compile(r"(```|~~~)")
_YAML_START = re.compile(r"[^\s#\-][^:]*:(?:[ \t]|$)|---")
_TOML_START = re.compile(r"\[")
_BRACE_ONLY = re.compile(r"[\s{}()\[\];,]*")

_HASH_COMMENT = ("#",)
_SLASH_COMMENT = ("//", "/*", "*", "*/")
_COMMENTS: dict[str, tuple[str, ...]] = {
    "python": _HASH_COMMENT,
    "ruby": _HASH_COMMENT,
    "shell": _HASH_COMMENT,
    "yaml": _HASH_COMMENT,
    "toml": _HASH_COMMENT,
    "javascript": _SLASH_COMMENT,
    "typescript": _SLASH_COMMENT,
    "go": _SLASH_COMMENT,
    "rust": _SLASH_COMMENT,
    "php": (*_SLASH_COMMENT, "#"),
}
_C_FAMILY = frozenset({"c", "cpp", "csharp", "java", "kotlin", "scala", "swift"})


def _regex_classifier(start: re.Pattern[str], decorator: str | None) -> Callable[[str], _Kind]:
    def classify(line: str) -> _Kind:
        if not line or line[0] in " \t":
            return _PLAIN
        if decorator is not None and line.startswith(decorator):
            return _DECORATOR
        if start.match(line):
            return _START
        if line[0] in ")]}":
            return _CLOSER
        return _PLAIN

    return classify


_CLASSIFIERS: dict[str, Callable[[str], _Kind]] = {
    "python": _regex_classifier(_PY_START, "@"),
    "javascript": _regex_classifier(_JS_START, "@"),
    "typescript": _regex_classifier(_JS_START, "@"),
    "go": _regex_classifier(_GO_START, None),
    "rust": _regex_classifier(_RUST_START, "#["),
    "ruby": _regex_classifier(_RUBY_START, None),
    "php": _regex_classifier(_PHP_START, "#["),
    "shell": _regex_classifier(_SHELL_START, None),
    "yaml": _regex_classifier(_YAML_START, None),
    "toml": _regex_classifier(_TOML_START, None),
}


def _block_starts(lines: list[str], language: str) -> list[int]:
    """0-based indexes of the lines that begin a top-level block (always 0)."""
    if language == "markdown":
        starts = _markdown_starts(lines)
    elif language in _C_FAMILY:
        starts = _c_family_starts(lines)
    elif language in _CLASSIFIERS:
        starts = _classified_starts(lines, _CLASSIFIERS[language])
    else:
        starts = []
    comments = _COMMENTS.get(language, _SLASH_COMMENT if language in _C_FAMILY else ())
    if comments:
        starts = [_attach_comments(lines, i, comments) for i in starts]
    return sorted({0, *starts})


def _given_starts(lines: list[str], language: str, starts: Sequence[int]) -> list[int]:
    """0-based block starts from 1-based definition lines: each moved up over
    the decorators/attributes and column-0 comments directly above it."""
    classify = _CLASSIFIERS.get(language)
    comments = _COMMENTS.get(language, _SLASH_COMMENT if language in _C_FAMILY else ())
    out = {0}
    for line in starts:
        i = line - 1
        if not 0 < i < len(lines):
            continue
        while i > 0 and classify is not None and classify(lines[i - 1].lstrip()) == _DECORATOR:
            i -= 1
        out.add(_attach_comments(lines, i, comments) if comments else i)
    return sorted(out)


def _classified_starts(lines: list[str], classify: Callable[[str], _Kind]) -> list[int]:
    # A decorator (or attribute) opens a block; the definition it decorates,
    # possibly after a multi-line decorator, stays in that block.
    starts: list[int] = []
    pending = False
    for i, line in enumerate(lines):
        kind = classify(line)
        if kind == _DECORATOR:
            if not pending:
                starts.append(i)
                pending = True
        elif kind == _START:
            if not pending:
                starts.append(i)
            pending = False
        elif kind == _PLAIN and line and line[0] not in " \t#/":
            pending = False
    return starts


def _c_family_starts(lines: list[str]) -> list[int]:
    # Best effort: a non-blank line at column 0 right after a blank line, unless
    # it is a comment continuation or only braces.
    starts: list[int] = []
    for i in range(1, len(lines)):
        line = lines[i]
        if lines[i - 1].strip() or not line or line[0] in " \t":
            continue
        if line.startswith(("*", "*/")) or _BRACE_ONLY.fullmatch(line):
            continue
        starts.append(i)
    return starts


def _markdown_starts(lines: list[str]) -> list[int]:
    starts: list[int] = []
    fence: str | None = None
    for i, line in enumerate(lines):
        stripped = line.lstrip()
        m = _MD_FENCE.match(stripped)
        if m is not None and len(line) - len(stripped) < 4:
            if fence is None:
                fence = m.group(1)
            elif fence == m.group(1):
                fence = None
            continue
        if fence is None and _MD_HEADING.match(line):
            starts.append(i)
    return starts


def _attach_comments(lines: list[str], start: int, prefixes: tuple[str, ...]) -> int:
    """Move a block start up over the column-0 comment lines right above it."""
    i = start
    while i > 0:
        above = lines[i - 1]
        if not above or above[0] in " \t" or not above.startswith(prefixes):
            break
        if above.startswith("#!") or above.startswith(("#[", "#![")):
            break
        i -= 1
    return i


# ---------------------------------------------------------------- chunking


def chunk_text(
    text: str,
    language: str,
    *,
    max_lines: int = 60,
    max_chars: int = 4000,
    starts: Sequence[int] | None = None,
) -> list[Chunk]:
    """Split ``text`` into contiguous chunks that cover every line exactly once.

    Blocks begin at top-level definitions, best effort per language:

    * Python: ``def``, ``async def``, ``class`` and decorators at column 0
      (a decorator keeps its definition in its block);
    * JavaScript/TypeScript: ``function``, ``class``, ``export``,
      ``const``/``let``/``var``/``type``/``interface``/``enum`` at column 0;
    * Go: ``func``, ``type``, ``var``, ``const``, ``import``;
    * Rust: ``fn``, ``impl``, ``struct``, ``enum``, ``trait``, ``mod``, ...
      (with ``pub``), attributes ``#[...]`` kept with their item;
    * Ruby, PHP, shell functions, YAML top-level keys, TOML tables;
    * C, C++, C#, Java, Kotlin, Scala, Swift: a non-blank column-0 line after
      a blank line that is neither a comment continuation nor only braces;
    * Markdown: headings outside fenced code.

    ``starts`` (1-based lines, e.g. the top-level definitions a parser found:
    ``code_graph.chunk_starts``) replaces these rules when given.

    Comment lines at column 0 directly above a block start join that block.
    Consecutive blocks are packed into one chunk while it stays within
    ``max_lines`` lines and ``max_chars`` characters.  A longer block is
    split into pieces within the limits, each at least a quarter of
    ``max_lines`` long where possible: before the last indented definition
    (a method; languages with a definition pattern), else after the last
    blank line, else hard at the limit.  A single line longer than
    ``max_chars`` becomes a chunk of its own.

    Returns ``[]`` for an empty text.  ``"\\n".join`` of the chunk texts equals
    ``"\\n".join(split_lines(text))``.

    Raises:
        ValueError: ``max_lines`` or ``max_chars`` is less than 1.
    """
    if max_lines < 1 or max_chars < 1:
        raise ValueError("max_lines and max_chars must be positive")
    lines = split_lines(text)
    if not lines:
        return []
    sizes = [len(line) + 1 for line in lines]
    if starts is None:
        block_starts = _block_starts(lines, language)
    else:
        block_starts = _given_starts(lines, language, starts)
    bounds = [*block_starts, len(lines)]

    ranges: list[tuple[int, int]] = []  # 0-based, end exclusive
    cur_start = cur_end = 0
    cur_chars = 0
    for b_start, b_end in itertools.pairwise(bounds):
        b_chars = sum(sizes[b_start:b_end])
        if b_end - b_start > max_lines or b_chars > max_chars:
            if cur_end > cur_start:
                ranges.append((cur_start, cur_end))
            ranges.extend(
                _split_block(lines, sizes, (b_start, b_end), max_lines, max_chars, language)
            )
            cur_start = cur_end = b_end
            cur_chars = 0
        elif cur_end - cur_start + b_end - b_start <= max_lines and (
            cur_chars + b_chars <= max_chars
        ):
            cur_end = b_end
            cur_chars += b_chars
        else:
            if cur_end > cur_start:
                ranges.append((cur_start, cur_end))
            cur_start, cur_end, cur_chars = b_start, b_end, b_chars
    if cur_end > cur_start:
        ranges.append((cur_start, cur_end))
    return [Chunk(s + 1, e, "\n".join(lines[s:e])) for s, e in ranges]


def _split_block(
    lines: list[str],
    sizes: list[int],
    block: tuple[int, int],
    max_lines: int,
    max_chars: int,
    language: str,
) -> list[tuple[int, int]]:
    start, end = block
    classify = _CLASSIFIERS.get(language)
    comments = _COMMENTS.get(language, ())

    def nested_start(i: int) -> bool:
        # An indented definition (a method), not the one a decorator above owns.
        line = lines[i]
        if classify is None or not line or line[0] not in " \t":
            return False
        if classify(line.lstrip()) not in (_START, _DECORATOR):
            return False
        return classify(lines[i - 1].lstrip()) != _DECORATOR

    out: list[tuple[int, int]] = []
    min_piece = max(1, max_lines // 4)
    s = start
    while s < end:
        # The furthest cut (exclusive end) that keeps the piece within limits.
        limit = min(end, s + max_lines)
        chars = 0
        cut = s
        while cut < limit and (cut == s or chars + sizes[cut] <= max_chars):
            chars += sizes[cut]
            cut += 1
        if cut < end:
            cut = _best_cut(lines, s + min_piece, cut, nested_start, comments)
        out.append((s, cut))
        s = cut
    return out


def _best_cut(
    lines: list[str],
    low: int,
    high: int,
    nested_start: Callable[[int], bool],
    comments: tuple[str, ...],
) -> int:
    """The latest cut in ``(low, high]``: before a nested definition, else after a blank line."""
    for c in range(high, low, -1):
        if nested_start(c):
            while c - 1 > low and comments and lines[c - 1].lstrip().startswith(comments):
                c -= 1
            return c
    for c in range(high, low, -1):
        if not lines[c - 1].strip():
            return c
    return high


# ---------------------------------------------------------------- units


def make_units(
    resource_id: str,
    rel_path: str,
    text: str,
    *,
    language: str | None = None,
    chunks: Sequence[Chunk] | None = None,
    definitions: Iterable[tuple[str, int]] = (),
    calls: Iterable[tuple[str, int]] = (),
    qualified: Iterable[tuple[str, int]] = (),
) -> list[IndexUnit]:
    """One :class:`IndexUnit` per chunk of a file, named ``<file uri>#L<start>-L<end>``.

    ``language`` defaults to :func:`detect_language` of ``rel_path``.  Metadata
    holds ``path``, ``start_line``, ``end_line``, ``language`` and
    ``resource_id`` (canonical upper case), all strings.  Pass ``chunks``
    when the caller already chunked ``text`` (they are used as given).

    ``definitions`` are ``(bare name, start line)`` of what the file defines;
    a chunk holding the first line of one or more definitions also gets
    ``symbols``: their names, space-separated, in source order, each once
    (the text index's symbol field; absent when the chunk defines nothing).
    ``qualified`` are ``(qualified name, start line)`` of the definitions
    that have a qualifier (``Graph.parse``); a chunk holding the first line
    of one gets ``qualified``: those names, likewise (the text index matches
    a query that is a qualified name against them, whole).

    ``calls`` are ``(called name, line)`` of the file's call sites; a chunk
    holding call sites gets ``calls``: the distinct names, space-separated, in
    source order, at most :data:`MAX_UNIT_CALLS` (the text index's calls
    field: a list of names finds the code that calls them).

    Raises:
        TypeError / ValueError: ``resource_id`` is not a ULID or ``rel_path`` is empty.
    """
    rid = canonical_ulid(resource_id)
    lang = language if language is not None else detect_language(rel_path)
    defined = sorted((line, order, name) for order, (name, line) in enumerate(definitions))
    qualified_names = sorted(
        (line, order, name)
        for order, (name, line) in enumerate(qualified)
        if "." in name and not any(map(str.isspace, name))
    )
    # A name with white space would be several terms of the calls field: never one.
    called = sorted(
        (line, order, name)
        for order, (name, line) in enumerate(calls)
        if name and not any(map(str.isspace, name))
    )
    units: list[IndexUnit] = []
    for chunk in chunks if chunks is not None else chunk_text(text, lang):
        metadata = {
            "path": rel_path,
            "start_line": str(chunk.start_line),
            "end_line": str(chunk.end_line),
            "language": lang,
            "resource_id": rid,
        }
        lo = bisect.bisect_left(defined, (chunk.start_line,))
        hi = bisect.bisect_left(defined, (chunk.end_line + 1,))
        names = dict.fromkeys(name for _, _, name in defined[lo:hi] if name and not name.isspace())
        if names:
            metadata["symbols"] = " ".join(names)
        lo = bisect.bisect_left(qualified_names, (chunk.start_line,))
        hi = bisect.bisect_left(qualified_names, (chunk.end_line + 1,))
        if hi > lo:
            metadata["qualified"] = " ".join(
                dict.fromkeys(name for _, _, name in qualified_names[lo:hi])
            )
        lo = bisect.bisect_left(called, (chunk.start_line,))
        hi = bisect.bisect_left(called, (chunk.end_line + 1,))
        callees = dict.fromkeys(name for _, _, name in called[lo:hi])
        if callees:
            metadata["calls"] = " ".join(list(callees)[:MAX_UNIT_CALLS])
        units.append(
            IndexUnit(
                uko_uri=unit_uri(rid, rel_path, f"L{chunk.start_line}-L{chunk.end_line}"),
                content=chunk.text,
                metadata=metadata,
            )
        )
    return units
