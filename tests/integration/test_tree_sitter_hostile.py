"""Hostile files against the tree-sitter code parser: none may crash or hang it.

Each shape below once killed the indexing process (a grammar's scanner
overflowing on deep nesting) or made one file cost minutes and gigabytes
(qualified names as long as the nesting, query matching on deep trees).
Crashes are checked in a child process, whose exit status is the verdict;
costs are checked on bounded outputs, never on a clock.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from cleveragents.infrastructure.acms import tree_sitter_code
from cleveragents.infrastructure.acms.tree_sitter_code import TreeSitterCodeParser

# Shapes that crash a grammar when parsed (measured with
# tree-sitter-language-pack 0.13): Markdown segfaults at 255 open container
# blocks, Kotlin aborts at about 1,100 nested string templates.
CRASHERS = [
    pytest.param("markdown", "'>' * 300 + ' hi\\n'", id="md-block-quotes"),
    pytest.param("markdown", "'> ' * 300 + 'hi\\n'", id="md-spaced-quotes"),
    pytest.param("markdown", "'- ' * 300 + 'x\\n'", id="md-bullets"),
    pytest.param("markdown", "'1. ' * 300 + 'x\\n'", id="md-ordered"),
    pytest.param("markdown", "'> - ' * 200 + 'x\\n'", id="md-quote-list"),
    pytest.param(
        "markdown", "''.join('  ' * i + '- x\\n' for i in range(300))", id="md-indented-lists"
    ),
    pytest.param(
        "markdown", "''.join('> ' * i + 'x\\n' for i in range(300))", id="md-growing-quotes"
    ),
    pytest.param("markdown", "('>' * 300 + '\\n') * 1000", id="md-many-deep-lines"),
    pytest.param("kotlin", "'val s = ' + '\"${' * 5000 + '\\n'", id="kt-templates"),
    pytest.param("kotlin", "'val s = ' + '\"\"\"${' * 5000 + '\\n'", id="kt-raw-templates"),
]


def _run_child(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.parametrize(("language", "shape"), CRASHERS)
def test_crashing_shapes_complete_in_a_child(language: str, shape: str) -> None:
    result = _run_child(
        f"""
        from cleveragents.infrastructure.acms.tree_sitter_code import TreeSitterCodeParser
        facts = TreeSitterCodeParser().parse({shape}, {language!r})
        print("done", facts is None)
        """
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["done", "True"]


def test_a_skipped_file_is_logged_with_its_reason() -> None:
    with capture_logs() as logs:
        facts = TreeSitterCodeParser().parse(">" * 300 + " hi\n", "markdown")
    assert facts is None
    skipped = [e for e in logs if e["event"] == "tree_sitter_code.parse_skipped"]
    assert len(skipped) == 1
    assert skipped[0]["language"] == "markdown"
    assert skipped[0]["reason"] == "markdown container nesting"
    assert skipped[0]["depth"] > skipped[0]["limit"]


@pytest.mark.parametrize(
    ("language", "text"),
    [
        (
            "markdown",
            "> " * 20 + "quote\n\n" + "- a\n" + "".join("  " * i + "- x\n" for i in range(20)),
        ),
        ("markdown", "# Title\n\n" + "    code\n" * 10 + " " * 120 + "indented\n"),
        ("kotlin", 'fun f(x: Int) = "${x}"\n' * 400),
        # Many flat templates (600 ${, nesting 1): an ordinary big class.
        ("kotlin", 'fun f(x: Int) = "${x} or ${x + 1}"\n' * 300),
        # A wide diagram in a fenced block: indentation alone opens nothing.
        ("markdown", "# Diagram\n\n```\n" + " " * 210 + "+--+\n" + "\t" * 51 + "|\n```\n"),
    ],
    ids=["md-nested-20", "md-indented-code", "kt-400-templates", "kt-600-flat", "md-wide-fence"],
)
def test_ordinary_nesting_is_still_parsed(language: str, text: str) -> None:
    assert TreeSitterCodeParser().parse(text, language) is not None


def test_deep_definitions_have_bounded_names() -> None:
    """20,000 nested Ruby methods (200 KB) once gave 20,000 names of up to
    40 KB each: 142 s and 2.7 GB for one file."""
    n = 20_000
    facts = TreeSitterCodeParser().parse("def a\n" * n + "end\n" * n, "ruby")
    assert facts is not None
    assert 0 < len(facts.symbols) <= tree_sitter_code.MAX_DEFINITION_DEPTH
    total = sum(len(s.qualified_name) for s in facts.symbols)
    assert total <= tree_sitter_code.MAX_DEFINITION_DEPTH * tree_sitter_code.MAX_QUALIFIED_NAME


def test_long_names_do_not_multiply_with_depth() -> None:
    name = "n" * 200
    text = "".join("    " * i + f"def {name}():\n" for i in range(60)) + "    " * 60 + "pass\n"
    facts = TreeSitterCodeParser().parse(text, "python")
    assert facts is not None
    assert facts.symbols
    assert all(len(s.qualified_name) <= tree_sitter_code.MAX_QUALIFIED_NAME for s in facts.symbols)


def test_ordinary_nesting_keeps_every_definition() -> None:
    depth = 12
    text = "".join("    " * i + f"def f{i}():\n" for i in range(depth)) + "    " * depth + "g()\n"
    facts = TreeSitterCodeParser().parse(text, "python")
    assert facts is not None
    assert [s.qualified_name for s in facts.symbols][-1] == ".".join(f"f{i}" for i in range(depth))
    assert [c.caller for c in facts.calls] == [facts.symbols[-1].qualified_name]


# Deep nesting made query matching superlinear: JS f(f(f(...))) at 64,000
# levels took 86 s, a shell file of 100,000 nested $( 104 s.  Matches are
# now only looked for down to MAX_QUERY_DEPTH, so a deep file yields a
# bounded number of matches (and its cost stays linear in its size).
@pytest.mark.parametrize(
    ("language", "text"),
    [
        ("javascript", "f(" * 150_000 + ")" * 150_000 + ";\n"),
        ("shell", "echo $(" * 100_000 + ")" * 100_000 + "\n"),
        ("cpp", "int f(){" + "f(" * 150_000 + ")" * 150_000 + ";}\n"),
    ],
    ids=["js-calls", "shell-substitutions", "cpp-calls"],
)
def test_deeply_nested_calls_give_bounded_matches(language: str, text: str) -> None:
    facts = TreeSitterCodeParser().parse(text, language)
    assert facts is not None
    assert 0 < len(facts.calls) <= tree_sitter_code.MAX_QUERY_DEPTH


def test_calls_at_ordinary_depth_are_all_found() -> None:
    n = 200
    facts = TreeSitterCodeParser().parse("f(" * n + ")" * n + ";\n", "javascript")
    assert facts is not None
    assert len(facts.calls) == n


def test_planning_a_skipped_file_names_it_and_keeps_its_units() -> None:
    from cleveragents.application.services.code_graph import PathLookup
    from cleveragents.application.services.index_workers import plan_file

    path = "docs/deep.md"
    with capture_logs() as logs:
        plan = plan_file(
            "01ARZ3NDEKTSV4RRFFQ69G5FAV",
            path,
            b">" * 300 + b" hi\n",
            TreeSitterCodeParser(),
            PathLookup([path]),
        )
    assert plan.units
    named = [e for e in logs if e["event"] == "indexer.code_graph_skipped"]
    assert [(e["path"], e["language"]) for e in named] == [(path, "markdown")]


def test_deeply_nested_kotlin_comments_are_not_parsed() -> None:
    """The grammar's scanner is quadratic in comment nesting: 20,000 unclosed
    ``/*`` took 4.6 s (a 1 MB file: minutes); the count says why, not a clock."""
    with capture_logs() as logs:
        facts = TreeSitterCodeParser().parse("/*" * 20_000 + "\nfun a() {}\n", "kotlin")
    assert facts is None
    (skipped,) = [e for e in logs if e["event"] == "tree_sitter_code.parse_skipped"]
    assert skipped["reason"] == "kotlin nested block comments"
    assert skipped["depth"] == 20_000


def test_many_kotlin_doc_comments_one_level_deep_are_parsed() -> None:
    text = "".join(f"/** Doc {i}. */\nfun f{i}() {{}}\n" for i in range(2_000))
    facts = TreeSitterCodeParser().parse(text, "kotlin")
    assert facts is not None and len(facts.symbols) == 2_000


# Noise the lexer must see through: in code (inside ``${ }``), and inside
# a plain or a raw string.
_CODE_NOISE = st.sampled_from(
    [
        "",
        " x ",
        "{ y }",
        "'\"'",
        "'}'",
        "'\\''",
        '/* } " /* ${ */ */',
        '// } " ${\n',
        '"plain }"',
        '"""raw "}"""',
    ]
)
_STRING_NOISE = st.sampled_from(["", "text", '\\"', "$name", "}", "{", "'", "\\${"])
_RAW_NOISE = st.sampled_from(["", "text", '"', "}", "{", "\n", "$name", "''", "\\", '\\"'])


@st.composite
def _kotlin_templates(draw: st.DrawFn, depth: int) -> str:
    """A Kotlin expression whose string templates nest exactly ``depth``
    deep (at the innermost)."""
    if depth == 0:
        return "1"
    inner = draw(_kotlin_templates(depth - 1))
    raw = draw(st.booleans())
    quote, noise = ('"""', _RAW_NOISE) if raw else ('"', _STRING_NOISE)
    before, after = draw(_CODE_NOISE), draw(_CODE_NOISE)
    return f"{quote}a{draw(noise)}${{ {before} {inner} {after} }}b{draw(noise)}{quote}"


@given(
    st.integers(min_value=0, max_value=12).flatmap(
        lambda d: st.tuples(st.just(d), _kotlin_templates(d))
    )
)
@settings(max_examples=300, deadline=None)
def test_property_the_kotlin_lexer_measures_template_nesting(case: tuple[int, str]) -> None:
    depth, expr = case
    assert tree_sitter_code._kotlin_template_depth(f"val v = {expr}\n") == depth
