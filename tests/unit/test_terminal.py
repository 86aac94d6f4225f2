"""printable() leaves no character a terminal acts on; json_text() is exact JSON."""

from __future__ import annotations

import json
import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st

from cleveragents.cli.terminal import json_text, printable

BIDI = set("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def dangerous(char: str) -> bool:
    """What must never reach a terminal raw (the oracle, written independently)."""
    code = ord(char)
    return (
        (code < 0x20 and char != "\t")
        or 0x7F <= code <= 0x9F
        or char in ("\u2028", "\u2029")
        or char in BIDI
        or unicodedata.category(char) == "Cs"
    )


# Text that favours the interesting characters: escapes, controls, bidi, surrogates.
_interesting = st.sampled_from(
    ["\x1b", "\x07", "\n", "\r", "\t", "\x00", "\x7f", "\x9b", "\x9d", "\u202e", "\u2066",
     "\u2028", "\udc80", "\udcff", "[", "]", "\\", "é", "\u4e2d", "😀", "a"]
)  # fmt: skip
hostile_text = st.lists(st.one_of(_interesting, st.characters()), max_size=60).map("".join)


@settings(max_examples=500, deadline=None)
@given(hostile_text)
def test_no_control_character_survives(text: str) -> None:
    out = printable(text)
    assert not any(dangerous(c) for c in out), repr(out)
    assert "\n" not in out and "\r" not in out
    out.encode("utf-8")  # printable on any UTF-8 terminal, even from undecodable names


@settings(max_examples=500, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cc", "Cs"))))
def test_printable_text_is_unchanged(text: str) -> None:
    text = "".join(c for c in text if not dangerous(c))
    assert printable(text) == text


@settings(max_examples=300, deadline=None)
@given(hostile_text)
def test_each_dangerous_character_becomes_a_visible_ascii_escape(text: str) -> None:
    """Character by character: safe ones kept, dangerous ones a backslash escape."""
    assert printable(text) == "".join(printable(c) for c in text)
    for c in text:
        if dangerous(c):
            escaped = printable(c)
            assert escaped.startswith("\\") and escaped.isascii() and escaped.isprintable()
        else:
            assert printable(c) == c


def test_known_attacks_are_neutralised() -> None:
    assert printable("\x1b[31mred\x1b[0m") == "\\x1b[31mred\\x1b[0m"
    assert printable("\x1b]52;c;SGVsbG8=\x07") == "\\x1b]52;c;SGVsbG8=\\x07"
    assert printable("\x1b]0;title\x07") == "\\x1b]0;title\\x07"
    assert printable("a.py\n0.999  forged.py:1-1") == "a.py\\n0.999  forged.py:1-1"
    assert printable("evil\u202egnp.py") == "evil\\u202egnp.py"
    assert printable("\x9b31m") == "\\x9b31m"
    assert printable("caf\udce9.py") == "caf\\udce9.py"
    assert printable("tab\tkept") == "tab\tkept"
    assert printable(42) == "42"


def _pairs_joined(value: object) -> object:
    """``value`` as JSON can carry it: in each string, a lone high surrogate
    followed by a lone low one becomes the character they pair into (JSON's
    ``\ud800\udc80`` is that character); every other string is unchanged."""
    if isinstance(value, str):
        return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    if isinstance(value, list):
        return [_pairs_joined(v) for v in value]
    if isinstance(value, dict):
        return {_pairs_joined(k): _pairs_joined(v) for k, v in value.items()}
    return value


def test_only_an_adjacent_surrogate_pair_is_joined() -> None:
    assert json.loads(json_text("\ud800\udc80")) == "\U00010080"
    for lone in ("\ud800", "\udc80", "\udc80\ud800", "caf\udce9", "\ud800x\udc80"):
        assert json.loads(json_text(lone)) == lone == _pairs_joined(lone)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | hostile_text,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(hostile_text, children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_json_round_trips_exactly_and_is_terminal_safe(value: object) -> None:
    text = json_text(value)
    assert json.loads(text) == _pairs_joined(value)
    assert not any(dangerous(c) for c in text if c != "\n"), repr(text)
    text.encode("utf-8")
