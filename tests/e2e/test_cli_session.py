"""The CLI gives the service's answers: ``search hybrid``, ``read``,
``context``, ``symbols``, ``callers``, ``callees``, within ``--budget``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from cleveragents.domain.models.acms.uko import file_uri
from cli_process import cli_env, run_acms

CODE = (
    "class AardvarkEngine:\n"
    '    """The aardvark engine."""\n\n'
    "    def run(self):\n        return aardvark_helper()\n\n\n"
    "def aardvark_helper():\n    return 'aardvark'\n"
)


# A line past the 200 characters a hit's line shows.
WIDE = "SCALES = [" + ", ".join(f"'pangolin_scale_{i}'" for i in range(30)) + "]\n"


def acms(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_acms(env, *args)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], str]:
    base = tmp_path_factory.mktemp("clisession")
    (base / "p" / "pkg").mkdir(parents=True)
    (base / "p" / "pkg" / "core.py").write_text(CODE)
    (base / "p" / "pkg" / "uses.py").write_text("def measure(items):\n    return len(items)\n")
    (base / "p" / "pkg" / "wide.py").write_text(WIDE)
    env = cli_env(base / "data")
    assert acms(env, "project", "add", "local/a").returncode == 0
    rid = acms(env, "resource", "add", str(base / "p"), "--project", "local/a").stdout.strip()
    assert acms(env, "reindex").returncode == 0
    return env, rid


def test_code_graph_commands(world: tuple[dict[str, str], str]) -> None:
    env, _ = world
    done = acms(env, "symbols", "pkg/core.py", "--project", "local/a")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "        1-5  class        class AardvarkEngine",
        "        4-5  method       def run(self)",
        "        8-9  function     def aardvark_helper()",
    ]
    callers = acms(env, "callers", "aardvark_helper", "--project", "local/a")
    assert callers.stdout.strip() == "pkg/core.py:5  AardvarkEngine.run"
    callees = json.loads(
        acms(env, "--json", "callees", "AardvarkEngine.run", "--project", "local/a").stdout
    )
    assert [c["name"] for c in callees["results"]] == ["aardvark_helper"]


def test_an_empty_code_graph_answer_says_whether_the_name_is_defined(
    world: tuple[dict[str, str], str],
) -> None:
    # "no results" alone read the same for a typo and for a function nobody calls.
    env, _ = world
    typo = acms(env, "callers", "aardvrak_helper", "--project", "local/a")
    assert (typo.returncode, typo.stdout.strip()) == (
        0,
        "no results: nothing in scope defines this name or calls it",
    )
    uncalled = acms(env, "callers", "AardvarkEngine.run", "--project", "local/a")
    assert uncalled.stdout.strip() == "no results"
    library = acms(env, "callers", "len", "--project", "local/a")
    assert library.stdout.splitlines() == [
        "pkg/uses.py:2  measure",
        "(nothing in scope defines this name: a library or built-in one)",
    ]
    assert (
        json.loads(acms(env, "--json", "callers", "len", "--project", "local/a").stdout)["defined"]
        == 0
    )
    none = acms(env, "callees", "aardvrak_helper", "--project", "local/a")
    assert none.stdout.strip() == "no results: nothing in scope defines this name"


@pytest.mark.parametrize("command", ["callers", "callees"])
def test_a_name_with_undecodable_bytes_is_one_clear_line(
    world: tuple[dict[str, str], str], command: str
) -> None:
    # The shell passes b"aardvark\xff" (read as a lone surrogate): it was
    # "acms: error: 'utf-8' codec can't encode character '\udcff' ...".
    env, _ = world
    done = acms(env, command, "aardvark\udcff", "--project", "local/a")
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "codec" not in lines[0], done.stderr
    assert lines[0].startswith("acms: error: the name 'aardvark\\udcff' holds bytes")


def test_read_and_budgets(world: tuple[dict[str, str], str]) -> None:
    env, rid = world
    uri = file_uri(rid, "pkg/core.py")
    done = acms(env, "read", uri, "--lines", "4-5", "--project", "local/a")
    assert done.stdout.splitlines() == [
        "     4      def run(self):",
        "     5          return aardvark_helper()",
    ]
    for budget in (300, 600, 2000):
        for args in (("context", "run the aardvark"), ("search", "hybrid", "aardvark")):
            out = acms(env, "--json", *args, "--project", "local/a", "--budget", str(budget))
            assert out.returncode == 0, out.stderr
            assert len(out.stdout.rstrip("\n")) <= budget
            assert json.loads(out.stdout)["results"]
    bad = acms(env, "read", uri, "--lines", "x-y", "--project", "local/a")
    assert bad.returncode == 2 and "--lines" in bad.stderr


def test_search_shows_the_matching_lines(world: tuple[dict[str, str], str]) -> None:
    env, _ = world
    out = acms(env, "search", "text", "aardvark_helper", "--project", "local/a").stdout
    assert "       5          return aardvark_helper()" in out


@pytest.mark.parametrize("command", [("search", "hybrid"), ("context",)])
def test_a_cut_line_says_how_much_was_left_out_as_the_json_does(
    world: tuple[dict[str, str], str], command: tuple[str, ...]
) -> None:
    """A hit's line past 200 characters (or cut to fit the budget) carries
    ``cut`` in the JSON; the human output showed it as if it ended there."""
    env, _ = world
    args = (*command, "pangolin_scale_3", "--project", "local/a")
    answer = json.loads(acms(env, "--json", *args).stdout)
    (hit,) = [r for r in answer["results"] if r["path"] == "pkg/wide.py"]
    (line,) = hit["lines"]
    assert line["cut"] == len(WIDE) - 1 - 200
    shown = acms(env, *args).stdout.splitlines()
    assert f"       1  {line['text']}… {line['cut']} more characters" in shown


def test_a_hit_the_budget_shortened_says_how_many_lines_it_lost(
    world: tuple[dict[str, str], str],
) -> None:
    """At a small budget a hit kept fewer of its lines, and neither the JSON
    nor the text said so (``truncated`` counts hits, not lines)."""
    env, _ = world
    for budget in range(300, 1_000, 50):
        args = (
            "context",
            "aardvark engine helper",
            "--budget",
            str(budget),
            "--project",
            "local/a",
        )
        answer = json.loads(acms(env, "--json", *args).stdout)
        short = [r for r in answer["results"] if r.get("lines_cut")]
        if short:
            break
    else:
        pytest.fail("no budget shortened a hit")
    whole = json.loads(
        acms(
            env,
            "--json",
            "context",
            "aardvark engine helper",
            "--budget",
            "20000",
            "--project",
            "local/a",
        ).stdout
    )
    (full,) = [r for r in whole["results"] if r["uri"] == short[0]["uri"]]
    assert len(short[0].get("lines", [])) + short[0]["lines_cut"] == len(full["lines"])
    shown = acms(env, *args).stdout.splitlines()
    assert f"  … {short[0]['lines_cut']} more lines (raise --budget)" in shown


def test_a_path_of_two_resources_names_each_lines_resource(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``symbols m.py`` over two resources that both have ``m.py`` listed
    both files' definitions as if they were one file."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "m.py").write_text("def main():\n    helper()\n")
    (tmp_path / "b" / "m.py").write_text("class Other:\n    def run(self):\n        helper()\n")
    env = cli_env(tmp_path / "data")
    assert acms(env, "project", "add", "local/t").returncode == 0
    first = acms(env, "resource", "add", str(tmp_path / "a"), "--project", "local/t").stdout.strip()
    second = acms(
        env, "resource", "add", str(tmp_path / "b"), "--project", "local/t"
    ).stdout.strip()
    assert acms(env, "reindex").returncode == 0

    symbols = acms(env, "symbols", "m.py", "--project", "local/t").stdout.splitlines()
    callers = acms(env, "callers", "helper", "--project", "local/t").stdout.splitlines()
    alone = acms(env, "symbols", "m.py", "--resource", first).stdout.splitlines()

    assert symbols == [
        f"        1-2  function     def main()  [{first}]",
        f"        1-3  class        class Other  [{second}]",
        f"        2-3  method       def run(self)  [{second}]",
    ]
    assert callers == [
        f"m.py:2  main  [{first}]",
        f"m.py:3  Other.run  [{second}]",
        "(nothing in scope defines this name: a library or built-in one)",  # helper
    ]
    assert alone == ["        1-2  function     def main()"]  # one resource: as before


def test_a_file_may_be_named_by_its_absolute_path(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """An agent holds absolute paths: ``symbols``, ``read`` and ``callers
    path#sym=`` take one inside an in-scope resource; one outside every
    in-scope resource (another resource's, or out through a symlink) is
    exit 2 and one line naming the scope's roots."""
    root, other = tmp_path / "p", tmp_path / "q"
    (root / "pkg").mkdir(parents=True)
    other.mkdir()
    (root / "pkg" / "core.py").write_text(CODE)
    (other / "core.py").write_text(CODE)
    (root / "out").symlink_to(other)
    env = cli_env(tmp_path / "data")
    assert acms(env, "project", "add", "local/a").returncode == 0
    assert acms(env, "project", "add", "local/b").returncode == 0
    assert acms(env, "resource", "add", str(root), "--project", "local/a").returncode == 0
    assert acms(env, "resource", "add", str(other), "--project", "local/b").returncode == 0
    assert acms(env, "reindex").returncode == 0
    core = str(root / "pkg" / "core.py")

    assert (
        acms(env, "symbols", core, "--project", "local/a").stdout
        == acms(env, "symbols", "pkg/core.py", "--project", "local/a").stdout
        != ""
    )
    read = acms(env, "read", core + "#L8", "--project", "local/a")
    assert read.stdout.splitlines() == ["     8  def aardvark_helper():"], read.stderr
    callers = acms(env, "callers", core + "#sym=aardvark_helper", "--project", "local/a")
    assert callers.stdout.strip() == "pkg/core.py:5  AardvarkEngine.run"
    for outside in (str(other / "core.py"), str(root / "out" / "core.py")):
        refused = acms(env, "symbols", outside, "--project", "local/a")
        assert refused.returncode == 2
        assert refused.stdout == ""
        assert len(refused.stderr.splitlines()) == 1
        assert f"lies in none of the scope's resources: {os.path.realpath(root)}" in refused.stderr


def test_read_says_why_an_indexed_file_cannot_be_read_now(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A file indexed, then deleted, grown past read's 1 MB, or replaced by a
    directory or a symlink: exit 2 and one line saying which (a deleted one
    naming the fix), not one vague line for all of them."""
    root = tmp_path / "p"
    (root / "pkg").mkdir(parents=True)
    for name in ("core", "gone", "big", "dir", "link"):
        (root / "pkg" / f"{name}.py").write_text(CODE)
    (root / "sub").mkdir()
    (root / "sub" / "away.py").write_text(CODE)
    env = cli_env(tmp_path / "data")
    assert acms(env, "project", "add", "local/a").returncode == 0
    rid = acms(env, "resource", "add", str(root), "--project", "local/a").stdout.strip()
    assert acms(env, "reindex").returncode == 0
    (root / "pkg" / "gone.py").unlink()
    (root / "pkg" / "big.py").write_text("x = 1\n" * 200_000)  # 1.2 MB
    (root / "pkg" / "dir.py").unlink()
    (root / "pkg" / "dir.py").mkdir()
    (root / "pkg" / "link.py").unlink()
    (root / "pkg" / "link.py").symlink_to("core.py")
    # A directory on the path now leads out of the resource, to a larger file
    # of the same name: its size (or absence) is not told.
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "away.py").write_text("x = 1\n" * 200_000)
    shutil.rmtree(root / "sub")
    (root / "sub").symlink_to(outside)
    expected = {
        "gone": "pkg/gone.py was indexed but no longer exists on disk (run `acms reindex`)",
        "big": "pkg/big.py is 1200000 bytes now, over the 1048576 bytes read serves",
        "dir": "pkg/dir.py is no longer a regular file (a directory now)",
        "link": "pkg/link.py is a symlink now, not the file indexed: not served",
        "sub/away": "sub/away.py cannot be read now: a directory on its path leads out of "
        "the resource",
    }
    for name, message in expected.items():
        rel = name if "/" in name else f"pkg/{name}"
        done = acms(env, "read", file_uri(rid, f"{rel}.py"), "--project", "local/a")
        assert done.returncode == 2, (name, done.stdout)
        assert done.stderr.splitlines() == [f"acms: error: {message}"], name
    assert acms(env, "read", file_uri(rid, "pkg/core.py"), "--project", "local/a").returncode == 0
    # The whole root gone: a reindex keeps its files, so "run acms reindex"
    # would change nothing (a reviewer found the loop).
    root.rename(tmp_path / "p.away")
    done = acms(env, "read", file_uri(rid, "pkg/core.py"), "--project", "local/a")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"acms: error: pkg/core.py cannot be read: its resource's directory {root} is gone or "
        "not a directory (its indexed files are kept; 'acms resource remove' deletes them)"
    ]
