"""``path_matches``: the same language as ``glob_regex`` (which Tantivy runs),
in time linear in the path, whatever the glob; syntax of other glob
languages refused."""

from __future__ import annotations

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


@pytest.mark.parametrize("glob", ["[", "src/[a-", "src/[ab]*.py", "**/*.{py,md}", "a]", "b}"])
def test_class_and_brace_syntax_is_refused_naming_the_glob(glob: str) -> None:
    """This glob language has no [...] classes and no {a,b} braces: a glob
    written with them is refused in one line, not read as literals that
    match nothing."""
    with pytest.raises(QueryError) as caught:
        text_options(path=glob)
    message = str(caught.value)
    assert message.startswith(f"the path glob {glob!r} holds ")
    assert "no [...] classes" in message and "\n" not in message


def test_question_mark_matches_a_bracket_in_a_name() -> None:
    glob = text_options(path="app/?id?/page.tsx").path
    assert glob is not None and path_matches(glob, "app/[id]/page.tsx")
