"""The compact embedding text of a unit."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cleveragents.application.services.embedding_text import embedding_text, split_identifiers

PY = '''
    x = compute()   # a body line before the definition
    async def open_connection(host=None, port=None, *, limit=_DEFAULT_LIMIT):
        """A wrapper for create_connection() returning a (reader, writer) pair.

        The reader returned is a StreamReader instance.
        """
        loop = events.get_running_loop()
        reader = StreamReader(limit=limit, loop=loop)
'''


def test_path_then_signature_then_docstring_then_body() -> None:
    lines = embedding_text(PY, path="asyncio/streams.py", language="python").splitlines()
    assert lines[0] == "asyncio/streams.py (python)"
    assert lines[1].startswith("async def open connection(host=None")
    assert lines[2].startswith("A wrapper for create connection() returning")
    assert "Stream Reader instance." in lines[2]
    assert lines[3] == "x = compute() # a body line before the definition"
    assert lines[4] == "loop = events.get running loop()"


def test_comments_count_as_documentation_in_c_and_js() -> None:
    c = "/* Return the length of a string */\nstatic size_t\nmy_strlen(const char *s)\n{\n"
    lines = embedding_text(c, path="lib/str.c").splitlines()
    assert lines[:3] == ["lib/str.c", "my strlen(const char *s)", "Return the length of a string"]
    js = "export function parseJsonV2(text) {\n  // parse it\n  return JSON.parse(text)\n}"
    lines = embedding_text(js).splitlines()
    assert lines[:2] == ["export function parse Json V2(text) {", "parse it"]


def test_each_definition_keeps_its_own_documentation() -> None:
    py = (
        "def first(a):\n"
        '    """Open the first door."""\n'
        "    return a + 1\n"
        "\n"
        "def second(b):\n"
        '    """Close the second door.\n'
        "\n"
        '    Quietly."""\n'
        "    return b\n"
    )
    assert embedding_text(py).splitlines() == [
        "def first(a):",
        "Open the first door.",
        "def second(b):",
        "Close the second door. Quietly.",
        "return a + 1",
        "return b",
    ]
    c = (
        "/* Add one. */\nint inc(int x)\n{\n    /* not a doc of dec */\n    x++;\n}\n\n"
        "/* Subtract one. */\nstatic int\ndec(int x)\n{\n    return x - 1;\n}\n"
    )
    lines = embedding_text(c).splitlines()
    assert lines[:4] == ["int inc(int x)", "Add one.", "not a doc of dec", "dec(int x)"]
    assert lines[4] == "Subtract one."


def test_cut_at_max_words() -> None:
    text = embedding_text(PY, path="asyncio/streams.py", max_words=5)
    assert len(text.split()) == 5
    assert text.splitlines()[0] == "asyncio/streams.py"


def test_split_identifiers() -> None:
    assert split_identifiers("read_lines readLines HTTPServer __init__") == (
        "read lines read Lines HTTP Server init"
    )


def test_bad_arguments() -> None:
    with pytest.raises(TypeError):
        embedding_text(b"x")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        embedding_text("x", max_words=0)
    with pytest.raises(TypeError):
        embedding_text("x", max_words=True)
    assert embedding_text("") == ""


@settings(max_examples=300, deadline=None)
@given(st.text(), st.text(max_size=40), st.integers(1, 200))
def test_any_text_gives_a_bounded_deterministic_text(content: str, path: str, n: int) -> None:
    out = embedding_text(content, path=path, max_words=n)
    assert len(out.split()) <= n
    assert out == embedding_text(content, path=path, max_words=n)
    # Nothing is invented: every word comes from the unit, its path or the
    # language marker, once identifiers are split.
    source = set(split_identifiers(content + " " + path).split())
    for word in out.split():
        assert word in source or any(word in s for s in source)
