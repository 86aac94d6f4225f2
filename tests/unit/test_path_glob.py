"""``path_matches``: the same language as ``glob_regex`` (which Tantivy runs),
in time linear in the path, whatever the glob; syntax of other glob
languages refused."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cleveragents.domain.models.acms.errors import QueryError
from cleveragents.domain.models.acms.text_query import glob_regex, path_matches, text_options

globs = st.lists(st.sampled_from(["a", "b", "/", ".", "*", "**", "?", "**/", "é"]), max_size=8)
paths = st.text(alphabet="ab/.é", max_size=12)


@given(glob=globs.map("".join).filter(bool), path=paths)
def test_path_matches_agrees_with_the_regex_tantivy_runs(glob: str, path: str) -> None:
    assert path_matches(glob, path) == (re.fullmatch(glob_regex(glob), path) is not None)


def test_a_glob_that_makes_a_backtracking_regex_explode_is_answered() -> None:
    # Python's re needs exponential time for this glob against 40 a's (it ran
    # past 20 s); the child is given 60 s, so only a hang fails the test.
    code = (
        "from cleveragents.domain.models.acms.text_query import path_matches\n"
        "print(path_matches('*a' * 12 + '*b', 'a' * 40), path_matches('*a' * 12, 'a' * 40))\n"
    )
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "True"]


@pytest.mark.parametrize("glob", ["[", "src/[a-", "src/[ab]*.py", "a]"])
def test_class_syntax_is_refused_naming_the_glob(glob: str) -> None:
    """This glob language has no [...] classes: a glob written with them is
    refused in one line, not read as literals that match nothing."""
    with pytest.raises(QueryError) as caught:
        text_options(path=glob)
    message = str(caught.value)
    assert message.startswith(f"the path glob {glob!r} holds ")
    assert "no [...] classes" in message and "\n" not in message


@pytest.mark.parametrize(
    ("glob", "reason"),
    [
        ("**/*.{py,md", "has a '{' that no '}' closes"),
        ("b}", "has a '}' that no '{' opens"),
        ("}{a}", "has a '}' that no '{' opens"),
        ("{a,b}" * 6, "stands for more than 32 globs"),
    ],
)
def test_bad_braces_are_refused_naming_the_glob(glob: str, reason: str) -> None:
    with pytest.raises(QueryError) as caught:
        text_options(path=glob)
    assert str(caught.value) == f"the path glob {glob!r} {reason}"


# A glob of literal runs and brace groups (nested one level at most), and the
# globs it stands for, built independently of the code under test.
_piece = st.sampled_from(["a", "b", "/", ".", "*", "**", "?", "**/", "é", ""])
_alternative = st.lists(_piece, max_size=3).map("".join)
_group = st.lists(_alternative, min_size=1, max_size=3)


@st.composite
def brace_globs(draw: st.DrawFn) -> tuple[str, list[str]]:
    """(glob, the brace-free globs it stands for); it starts and ends with
    ``a``, so normalising (a leading ``./``, a trailing ``/``) changes nothing."""
    middle = draw(st.lists(st.one_of(_piece.map(lambda p: [p]), _group), max_size=3))
    parts = [["a"], *middle, ["a"]]  # at most 3 x 3 x 3 globs: within the limit of 32
    text = "".join("{" + ",".join(p) + "}" if len(p) > 1 else p[0] for p in parts)
    return text, ["".join(choice) for choice in itertools.product(*parts)]


@given(case=brace_globs(), path=paths.map(lambda p: "a" + p))
def test_braces_match_what_any_of_their_expansions_matches(
    case: tuple[str, list[str]], path: str
) -> None:
    glob, expanded = case
    assert text_options(path=glob).path == glob
    want = any(re.fullmatch(glob_regex(g), path) is not None for g in expanded)
    assert path_matches(glob, path) == want
    assert (re.fullmatch(glob_regex(glob), path) is not None) == want


@pytest.mark.parametrize(
    ("glob", "matching", "not_matching"),
    [
        ("{src,lib}/", ["src/a.py", "lib/x/b.ts"], ["app/a.py"]),
        ("{src/,lib/}", ["src/a.py", "lib/x/b.ts"], ["app/a.py"]),  # each alternative's '/'
        ("{./src,/lib}/**", ["src/a.py", "lib/b.ts"], ["x/src/a.py"]),  # and leading ./ or /
        ("**/*.{ts,tsx}", ["a.ts", "x/y/b.tsx"], ["a.tsxx", "a.js"]),
    ],
)
def test_each_brace_alternative_is_a_glob_of_its_own(
    glob: str, matching: list[str], not_matching: list[str]
) -> None:
    normal = text_options(path=glob).path
    assert normal is not None
    for path in matching:
        assert path_matches(normal, path), path
        assert re.fullmatch(glob_regex(normal), path), path
    for path in not_matching:
        assert not path_matches(normal, path), path
        assert not re.fullmatch(glob_regex(normal), path), path


@pytest.mark.parametrize("glob", ["{}", "{,}", "{/,./}"])
def test_a_glob_of_empty_alternatives_is_refused(glob: str) -> None:
    with pytest.raises(QueryError, match="is empty once its braces expand"):
        text_options(path=glob)


def test_question_mark_matches_a_bracket_in_a_name() -> None:
    glob = text_options(path="app/?id?/page.tsx").path
    assert glob is not None and path_matches(glob, "app/[id]/page.tsx")
