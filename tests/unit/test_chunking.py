"""Chunking: language detection, code-aware chunks, index units."""

from __future__ import annotations

import itertools
import sysconfig
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cleveragents.application.services import chunking
from cleveragents.application.services.chunking import (
    MAX_UNIT_CALLS,
    Chunk,
    chunk_text,
    detect_language,
    make_units,
    split_lines,
)
from cleveragents.domain.models.acms.errors import QueryError
from cleveragents.domain.models.acms.uko import path_of, resource_id_of

RID = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
LANGUAGES = [
    "python",
    "javascript",
    "typescript",
    "go",
    "rust",
    "java",
    "c",
    "cpp",
    "csharp",
    "ruby",
    "php",
    "shell",
    "markdown",
    "json",
    "yaml",
    "toml",
    "text",
]


def assert_partition(chunks: list[Chunk], text: str, max_lines: int, max_chars: int) -> None:
    lines = split_lines(text)
    if not lines:
        assert chunks == []
        return
    assert chunks[0].start_line == 1
    assert chunks[-1].end_line == len(lines)
    for before, after in itertools.pairwise(chunks):
        assert after.start_line == before.end_line + 1
    for chunk in chunks:
        n = chunk.end_line - chunk.start_line + 1
        assert n <= max_lines
        assert chunk.text == "\n".join(lines[chunk.start_line - 1 : chunk.end_line])
        if n > 1:
            assert len(chunk.text) + 1 <= max_chars
    assert "\n".join(c.text for c in chunks) == "\n".join(lines)


@pytest.mark.parametrize(
    ("path", "language"),
    [
        ("a/b.py", "python"),
        ("stubs/x.PYI", "python"),
        ("web/app.tsx", "typescript"),
        ("web/app.mjs", "javascript"),
        ("main.go", "go"),
        ("src/lib.rs", "rust"),
        ("A.java", "java"),
        ("x.h", "c"),
        ("x.hpp", "cpp"),
        ("x.cs", "csharp"),
        ("x.rb", "ruby"),
        ("x.php", "php"),
        ("run.sh", "shell"),
        ("README.md", "markdown"),
        ("cfg.json", "json"),
        ("ci.yml", "yaml"),
        ("pyproject.toml", "toml"),
        ("index.html", "html"),
        ("s.css", "css"),
        ("q.sql", "sql"),
        ("docker/Dockerfile", "dockerfile"),
        ("Makefile", "makefile"),
        ("LICENSE", "text"),
        ("weird.unknownext", "text"),
    ],
)
def test_detect_language(path: str, language: str) -> None:
    assert detect_language(path) == language


def test_split_lines_counts_like_an_editor() -> None:
    assert split_lines("") == []
    assert split_lines("a") == ["a"]
    assert split_lines("a\n") == ["a"]
    assert split_lines("a\n\n") == ["a", ""]
    assert split_lines("\n") == [""]
    assert split_lines("a\r\nb\rc\n") == ["a", "b", "c"]


def test_empty_text_has_no_chunks() -> None:
    assert chunk_text("", "python") == []


def test_crlf_and_cr_are_line_endings() -> None:
    chunks = chunk_text("a = 1\r\nb = 2\rc = 3\r\n", "python")
    assert chunks == [Chunk(1, 3, "a = 1\nb = 2\nc = 3")]


def test_python_blocks_start_at_definitions_and_keep_decorators() -> None:
    funcs = []
    for i in range(4):
        body = "\n".join(f"    x{j} = {j}" for j in range(8))
        funcs.append(f"# about f{i}\n@decorator(\n    arg={i},\n)\n@other\ndef f{i}():\n{body}\n")
    text = "import os\n\n\n" + "\n\n".join(funcs)
    chunks = chunk_text(text, "python", max_lines=16)
    assert_partition(chunks, text, 16, 4000)
    starts = [c.text.split("\n")[0] for c in chunks]
    assert starts == ["import os", "# about f0", "# about f1", "# about f2", "# about f3"]
    for chunk in chunks[1:]:
        assert chunk.text.count("def f") == 1


def test_small_blocks_are_packed_together() -> None:
    text = "\n".join(f"def f{i}():\n    return {i}\n" for i in range(10))
    chunks = chunk_text(text, "python", max_lines=60)
    assert len(chunks) == 1
    chunks = chunk_text(text, "python", max_lines=9)
    assert all(c.text.startswith("def f") for c in chunks)
    assert len(chunks) == 4


def test_long_class_is_split_before_methods() -> None:
    methods = "\n".join(
        f"    def m{i}(self):\n" + "\n".join(f"        y = {j}" for j in range(10)) + "\n"
        for i in range(12)
    )
    text = f"class Big:\n    '''Doc.\n\n    More.\n    '''\n\n{methods}"
    chunks = chunk_text(text, "python", max_lines=40)
    assert_partition(chunks, text, 40, 4000)
    assert len(chunks) > 1
    for chunk in chunks[1:]:
        assert chunk.text.startswith("    def m")


def test_block_without_blank_lines_is_split_hard() -> None:
    text = "\n".join(f"x{i} = {i}" for i in range(250))
    chunks = chunk_text(text, "text", max_lines=60)
    assert [c.end_line - c.start_line + 1 for c in chunks] == [60, 60, 60, 60, 10]


def test_max_chars_is_respected_and_a_huge_line_stands_alone() -> None:
    text = "a = 1\n" + "b" * 10_000 + "\nc = 3\nd = 4\n"
    chunks = chunk_text(text, "python", max_chars=100)
    assert_partition(chunks, text, 60, 100)
    assert any(c.text == "b" * 10_000 for c in chunks)


@pytest.mark.parametrize(
    ("language", "text", "starts"),
    [
        (
            "javascript",
            "import x from 'x';\n\nexport function a() {\n}\nconst b = () => 1;\nclass C {\n}\n",
            [1, 3, 5, 6],
        ),
        ("go", 'package p\n\nimport "fmt"\n\nfunc A() {\n}\ntype T struct{}\n', [1, 3, 5, 7]),
        (
            "rust",
            "use std::io;\n\n#[derive(Debug)]\npub struct S;\nimpl S {\n}\npub(crate) fn f() {}\n",
            [1, 3, 5, 7],
        ),
        (
            "java",
            "package p;\n\nimport a.B;\n\n/**\n * Doc.\n */\npublic class C {\n}\n",
            [1, 3, 5],
        ),
        ("markdown", "# T\ntext\n```\n# not a heading\n```\n## U\n", [1, 6]),
    ],
)
def test_block_starts_per_language(language: str, text: str, starts: list[int]) -> None:
    chunks = chunk_text(text, language, max_lines=1_000)
    assert len(chunks) == 1
    # With a tiny budget every block becomes its own chunk, so the starts show.
    lines = split_lines(text)
    small = chunk_text(text, language, max_lines=2)
    assert_partition(small, text, 2, 4000)
    got = {c.start_line for c in small}
    assert set(starts) <= got, (got, lines)


def test_invalid_limits_are_rejected() -> None:
    with pytest.raises(ValueError):
        chunk_text("x", "python", max_lines=0)
    with pytest.raises(ValueError):
        chunk_text("x", "python", max_chars=0)


def test_real_stdlib_file_is_partitioned() -> None:
    path = Path(sysconfig.get_paths()["stdlib"]) / "collections" / "__init__.py"
    text = path.read_text(encoding="utf-8")
    chunks = chunk_text(text, "python")
    assert_partition(chunks, text, 60, 4000)
    assert any(c.text.startswith("class OrderedDict(dict):") for c in chunks)


def test_make_units_names_chunks_and_sets_metadata() -> None:
    text = "def a():\n    return 1\n"
    units = make_units(RID.lower(), "pkg/m od.py", text)
    assert len(units) == 1
    unit = units[0]
    assert unit.uko_uri == f"uko://{RID}/pkg/m%20od.py#L1-L2"
    assert resource_id_of(unit.uko_uri) == RID
    assert path_of(unit.uko_uri) == "pkg/m od.py"
    assert unit.content == "def a():\n    return 1"
    assert dict(unit.metadata) == {
        "path": "pkg/m od.py",
        "start_line": "1",
        "end_line": "2",
        "language": "python",
        "resource_id": RID,
    }
    assert make_units(RID, "x.txt", "hello", language="markdown")[0].metadata["language"] == (
        "markdown"
    )
    assert make_units(RID, "empty.py", "") == []


def test_make_units_names_the_definitions_that_start_in_each_chunk() -> None:
    text = "\n".join(f"line {n}" for n in range(1, 11))
    chunks = [Chunk(1, 4, "\n".join(text.splitlines()[0:4])), Chunk(5, 10, "x")]
    units = make_units(
        RID,
        "m.py",
        text,
        chunks=chunks,
        # (name, first line); out of order, one repeated, one past the end
        definitions=[("beta", 5), ("alpha", 1), ("gamma", 4), ("beta", 9), ("late", 11)],
    )
    assert [u.metadata.get("symbols") for u in units] == ["alpha gamma", "beta"]
    plain = make_units(RID, "m.py", text, chunks=chunks)
    assert all("symbols" not in u.metadata for u in plain)


def test_make_units_names_the_qualified_definitions_that_start_in_each_chunk() -> None:
    text = "\n".join(f"line {n}" for n in range(1, 11))
    chunks = [Chunk(1, 4, "a"), Chunk(5, 10, "b")]
    units = make_units(
        RID,
        "m.py",
        text,
        chunks=chunks,
        # (qualified name, first line): only names with a qualifier, each once,
        # none with white space or past the end
        qualified=[
            ("Graph.parse", 6),
            ("Graph", 2),
            ("Graph.add", 3),
            ("Graph.parse", 8),
            ("A. b", 7),
            ("Late.x", 11),
        ],
    )
    assert [u.metadata.get("qualified") for u in units] == ["Graph.add", "Graph.parse"]


def test_make_units_lists_the_names_called_in_each_chunk() -> None:
    text = "\n".join(f"line {n}" for n in range(1, 11))
    chunks = [Chunk(1, 4, "a"), Chunk(5, 10, "b")]
    units = make_units(
        RID,
        "m.c",
        text,
        chunks=chunks,
        # (called name, line): in source order per chunk, each once, none past the end
        calls=[("free", 6), ("malloc", 2), ("memcpy", 4), ("malloc", 3), ("free", 9), ("x", 12)],
    )
    assert [u.metadata.get("calls") for u in units] == ["malloc memcpy", "free"]
    many = make_units(
        RID, "m.c", text, chunks=chunks, calls=[(f"f{i}", 1) for i in range(MAX_UNIT_CALLS + 5)]
    )
    assert many[0].metadata["calls"].split() == [f"f{i}" for i in range(MAX_UNIT_CALLS)]
    assert "calls" not in many[1].metadata
    # A name with white space (any Unicode space) or none is never a callee.
    odd = make_units(
        RID,
        "m.c",
        text,
        chunks=chunks,
        calls=[("a b", 2), ("", 2), ("c\u00a0d", 3), ("e\tf", 4), ("ok", 4), (" ", 6)],
    )
    assert [u.metadata.get("calls") for u in odd] == ["ok", None]


line_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30)
code_line = st.one_of(
    st.sampled_from(
        [
            "",
            "",
            "def f():",
            "class C:",
            "@dec",
            "    return 1",
            "# c",
            "}",
            "fn main() {",
            "pub struct S;",
            "func F() {",
            "export const x = 1;",
            "# Heading",
            "```",
            "key: value",
            "[table]",
            "#[derive(X)]",
        ]
    ),
    line_text,
)


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(code_line, max_size=200),
    ending=st.sampled_from(["\n", "\r\n", "\r"]),
    trailing=st.booleans(),
    language=st.sampled_from(LANGUAGES),
    max_lines=st.integers(1, 40),
    max_chars=st.integers(1, 2000),
)
def test_chunks_partition_every_text(
    lines: list[str],
    ending: str,
    trailing: bool,
    language: str,
    max_lines: int,
    max_chars: int,
) -> None:
    text = ending.join(lines) + (ending if trailing and lines else "")
    chunks = chunk_text(text, language, max_lines=max_lines, max_chars=max_chars)
    assert_partition(chunks, text, max_lines, max_chars)


@settings(max_examples=200, deadline=None)
@given(text=st.text(), language=st.sampled_from(LANGUAGES))
def test_chunks_partition_arbitrary_text(text: str, language: str) -> None:
    chunks = chunk_text(text, language, max_lines=5, max_chars=50)
    assert_partition(chunks, text, 5, 50)


def test_the_language_names_are_every_name_detect_language_gives() -> None:
    given = {detect_language("f" + ext) for ext in chunking._EXTENSIONS}
    given |= {detect_language(name) for name in chunking._FILENAMES}
    given |= {detect_language("Dockerfile.dev"), detect_language("README")}
    assert given == chunking.LANGUAGES
    assert all(chunking.check_language(name.upper()) == name for name in given)


@pytest.mark.parametrize(
    ("lang", "meant"),
    [("py", "python"), (".rs", "rust"), ("ts", "typescript"), ("pyhton", "python"), ("zzz", None)],
)
def test_an_unknown_language_name_is_refused_with_what_it_may_mean(lang, meant) -> None:
    with pytest.raises(QueryError) as err:
        chunking.check_language(lang)
    message = str(err.value)
    assert (f"did you mean {meant!r}" in message) if meant else ("did you mean" not in message)
    assert "python" in message and "typescript" in message  # the list of names
