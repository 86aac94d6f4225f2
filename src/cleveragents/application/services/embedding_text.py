"""The compact text a sentence model embeds for a unit of code.

A neural embedder is slow on two cores (tens of chunks per second at 256
tokens), and it truncates anyway: what it sees should be what a unit is
*about*, first.  :func:`embedding_text` keeps, in this order, the path, each
definition line (signature) followed by its own docstring or the comment
right above it, in source order, then the first other lines, with
identifiers split into words (``read_lines`` and
``readLines`` become ``read lines``: a WordPiece model knows the words, not
the identifier), cut at ``max_words`` words.  Pure and deterministic; the
indexer can call it per unit.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from cleveragents.domain.models.acms.embedding import Embedder

__all__ = ["DEFAULT_MAX_WORDS", "CompactTextEmbedder", "embedding_text", "split_identifiers"]

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

    # Each definition is kept with its own documentation: ``[signature, doc]``
    # pairs in source order (a comment block right above a signature, as in C,
    # goes after it); documentation that belongs to no signature stays in
    # place; other lines come after all of them.
    described: list[list[str]] = []  # [signature or "", documentation lines...]
    pending: list[str] = []  # comment lines waiting for the next line
    body: list[str] = []
    in_doc: str | None = None

    def document(text: str) -> None:
        if not described:
            described.append([""])
        described[-1].append(text)

    def flush() -> None:
        if pending:
            described.append(["", *pending])
            pending.clear()

    for raw in content.splitlines():
        line = raw.strip()
        if not line:
            if in_doc is None:
                flush()  # a blank line: the comment above belongs to no definition
            continue
        if in_doc is not None:
            end = line.find(in_doc)
            document(line[:end] if end >= 0 else line)
            if end >= 0:
                in_doc = None
            continue
        if _COMMENT.match(raw) and not _is_signature(raw):
            pending.append(_COMMENT.sub("", raw, count=1).rstrip("*/ ").strip())
            continue
        if _is_signature(raw):
            described.append([line, *pending])
            pending.clear()
            continue
        if raw[:1].isspace() or line.endswith(";"):
            flush()  # a statement: the comment above documents it, not a definition
        # else: perhaps a C return type above the function head; keep waiting
        quote = next((q for q in _DOC_QUOTES if line.lstrip("rRbBuU").startswith(q)), None)
        if quote is not None:
            inner = line.lstrip("rRbBuU")[3:]
            end = inner.find(quote)
            document(inner[:end] if end >= 0 else inner)
            in_doc = None if end >= 0 else quote
        else:
            body.append(line)
    flush()

    head = " ".join(p for p in (path, f"({language})" if language else "") if p)
    pieces = [head]
    for signature, *doc in described:
        pieces += [signature, " ".join(d for d in doc if d)]
    pieces += body
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


class CompactTextEmbedder:
    """An :class:`~cleveragents.domain.models.acms.embedding.Embedder` that
    embeds :func:`embedding_text` of each text with ``inner``: what a sentence
    model should see of a chunk (and of a query, so both sides match).

    Its name records the wrapping (``minilm-l6-int8+compact96``), so an index
    built from whole chunks is re-embedded, not mixed.
    """

    def __init__(self, inner: Embedder, max_words: int = DEFAULT_MAX_WORDS) -> None:
        if max_words <= 0:
            raise ValueError("max_words must be positive")
        self.inner = inner
        self.max_words = max_words

    @property
    def name(self) -> str:
        return f"{self.inner.name}+compact{self.max_words}"

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of str")
        return self.inner.embed([embedding_text(t, max_words=self.max_words) for t in texts])
