"""Text that is safe to print on a terminal, and JSON that is too.

Paths, snippets, URIs, SPARQL literals and error messages come from
repositories and queries that somebody else wrote.  Printed raw, an escape
sequence in them drives the terminal (``ESC[31m`` colours, ``ESC]0;...BEL``
sets the title, ``ESC]52;c;...`` writes the clipboard on some terminals), a
newline in a file name forges a result line, and a bidi override reorders
what the reader sees (Trojan Source).  :func:`printable` is the one function
every human output string goes through at the output boundary; it replaces

* C0 controls except TAB (``\\n`` -> ``\\n`` as two characters, ESC ->
  ``\\x1b``, ...), DEL and the C1 controls (U+0080-U+009F: 8-bit CSI, OSC);
* line and paragraph separators (U+2028, U+2029) and the bidi controls
  (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069);
* lone surrogates (undecodable bytes of a file name, kept by ``os.fsdecode``),
  which could not even be encoded for output;

with visible backslash escapes, and leaves every other character alone.

:func:`json_text` is ``json.dumps`` whose output is exact (``json.loads``
gives the same data back) and also terminal-safe: JSON already escapes C0,
and this escapes DEL, C1, the separators, bidi controls and lone surrogates
as ``\\uXXXX`` too (valid JSON escapes, so nothing changes for a parser).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

__all__ = ["json_text", "printable"]

_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_UNSAFE = re.compile(f"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029{_BIDI}\ud800-\udfff]")
# What JSON leaves raw (it escapes C0 itself).
_JSON_UNSAFE = re.compile(f"[\x7f-\x9f\u2028\u2029{_BIDI}\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: object) -> str:
    """``str(text)`` with every control, separator, bidi and surrogate
    character replaced by a visible escape (see the module docstring).

    The result holds no character a terminal acts on and no line break; text
    without such characters comes back unchanged.
    """
    return _UNSAFE.sub(_escape, text if isinstance(text, str) else str(text))


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def json_text(data: object, *, default: Callable[[Any], Any] | None = None) -> str:
    """``data`` as indented JSON that round-trips exactly and is safe on a terminal.

    One exception JSON itself imposes: a string holding a lone high surrogate
    right before a lone low surrogate (never valid text; file names decoded
    with ``surrogateescape`` hold low surrogates only) reads back as the one
    character the pair encodes, as ``\ud800\udc80`` means in any JSON.

    Raises:
        TypeError: ``data`` holds a value ``default`` cannot convert.
    """
    text = json.dumps(data, indent=2, ensure_ascii=False, default=default)
    # Only string contents can hold these characters, and \\uXXXX is a valid
    # escape there, so the replacement changes no value.
    return _JSON_UNSAFE.sub(_json_escape, text)
