"""The compact text a sentence model embeds for a unit of code.

A neural embedder is slow on two cores (tens of chunks per second at 256
tokens), and it truncates anyway: what it sees should be what a unit is
*about*, first.  :func:`embedding_text` keeps, in this order, the path, the
signatures (definition lines), the docstring or leading comments, then the
first other lines, with identifiers split into words (``read_lines`` and
``readLines`` become ``read lines``: a WordPiece model knows the words, not
the identifier), cut at ``max_words`` words.  Pure and deterministic; the
indexer can call it per unit.
"""

from __future__ import annotations

import re

__all__ = ["DEFAULT_MAX_WORDS", "embedding_text", "split_identifiers"]

DEFAULT_MAX_WORDS = 96

_SIGNATURE = re.compile(
    r"^\s*(?:@\w|(?:export\s+|default\s+|pub(?:\(\w+\))?\s+|public\s+|private\s+|protected\s+"
    r"|static\s+|async\s+|abstract\s+|final\s+)*"
    r"(?:def|class|function\*?|func|fn|struct|enum|interface|trait|impl|type|module|macro"
    r"|cdef|cpdef|typedef)\b)"
)
# A C-family function head: a return type and a name, then a parameter list.
_C_HEAD = re.compile(r"^(?:[A-Za-z_][\w\s\*&:<>,]*[\s\*&])?[A-Za-z_][\w:]*\s*\([^;]*\)?\s*\{?\s*$")
_C_NOT_HEAD = re.compile(r"^\s*(?:if|for|while|switch|return|else|do|case|sizeof)\b")
_COMMENT = re.compile(r"^\s*(?:#(?!!)|//+|/\*+|\*(?!/)|--|;+|%)\s?")
_DOC_QUOTES = ('"""', "'''")
_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_WORD_SPLIT = re.compile(r"[_\s]+")


def split_identifiers(text: str) -> str:
    """``text`` with ``snake_case`` and ``camelCase`` identifiers split into words."""
    return _WORD_SPLIT.sub(" ", _HUMP.sub(" ", text)).strip()


def _is_signature(line: str) -> bool:
    if _SIGNATURE.match(line):
        return True
    stripped = line.strip()
    return (
        bool(_C_HEAD.match(stripped)) and not _C_NOT_HEAD.match(stripped) and not line[:1].isspace()
    )


def embedding_text(
    content: str,
    *,
    path: str = "",
    language: str = "",
    max_words: int = DEFAULT_MAX_WORDS,
) -> str:
    """The compact text to embed for a unit with ``content`` at ``path``.

    Args:
        content: the unit's text (a chunk of a file).
        path: its relative path (``asyncio/streams.py``); may be empty.
        language: the unit's language name; used only to name it, when given.
        max_words: at most this many whitespace-separated words come back
            (positive).  A model's own token limit still applies after this.

    Returns:
        One line per kept piece, joined with newlines; empty only when the
        unit, path and language are all empty.

    Raises:
        TypeError / ValueError: a non-``str`` text or a non-positive ``max_words``.
    """
    for name, value in (("content", content), ("path", path), ("language", language)):
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    if isinstance(max_words, bool) or not isinstance(max_words, int):
        raise TypeError(f"max_words must be an int, not {type(max_words).__name__}")
    if max_words < 1:
        raise ValueError(f"max_words must be positive, got {max_words}")

    signatures: list[str] = []
    docs: list[str] = []
    body: list[str] = []
    in_doc: str | None = None
    for raw in content.splitlines():
        line = raw.strip()
        if not line:
            continue
        if in_doc is not None:
            end = line.find(in_doc)
            docs.append(line[:end] if end >= 0 else line)
            if end >= 0:
                in_doc = None
            continue
        quote = next((q for q in _DOC_QUOTES if line.lstrip("rRbBuU").startswith(q)), None)
        if quote is not None:
            inner = line.lstrip("rRbBuU")[3:]
            end = inner.find(quote)
            docs.append(inner[:end] if end >= 0 else inner)
            in_doc = None if end >= 0 else quote
        elif _is_signature(raw):
            signatures.append(line)
        elif _COMMENT.match(raw):
            docs.append(_COMMENT.sub("", raw, count=1).rstrip("*/ ").strip())
        else:
            body.append(line)

    head = " ".join(p for p in (path, f"({language})" if language else "") if p)
    pieces = [head, *signatures, " ".join(d for d in docs if d), *body]
    out: list[str] = []
    budget = max_words
    for piece in pieces:
        words = split_identifiers(piece).split()
        if not words:
            continue
        out.append(" ".join(words[:budget]))
        budget -= min(len(words), budget)
        if budget == 0:
            break
    return "\n".join(out)
