"""``acms resource add`` of a directory that its git work tree ignores
entirely (a ``.pyenv`` clone ignoring ``/versions``, a Python installed under
it registered as a resource): registered as asked, with one warning on stderr
that nothing will be indexed and what indexes it; ``acms reindex`` repeats it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cli_process import cli_env, run_acms
from gitrepo import git

ULID = re.compile(r"[0-9A-HJKMNP-TV-Z]{26}")


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A git clone that tracks a script and ignores ``/versions``, under
    which an installed library holds a module (and a ``__pycache__``)."""
    root = tmp_path / "pyenv"
    root.mkdir()
    git(root, "init", "-q")
    (root / ".gitignore").write_text("/versions\n")
    (root / "pyenv.sh").write_text("echo pyenv\n")
    git(root, "add", ".gitignore", "pyenv.sh")
    git(root, "commit", "-q", "-m", "initial")
    lib = root / "versions" / "3.11.7" / "lib"
    (lib / "__pycache__").mkdir(parents=True)
    (lib / "zebra_module.py").write_text("def zebra_stripes():\n    return 'zebra'\n")
    (lib / "__pycache__" / "cached.py").write_text("x = 1\n")
    return root


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    env = cli_env(tmp_path / "data")
    done = run_acms(env, "project", "add", "local/p")
    assert done.returncode == 0, done.stderr
    return env


def _warning_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "warning" in line]


def test_an_ignored_directory_is_registered_with_one_warning_on_stderr(
    checkout: Path, env: dict[str, str]
) -> None:
    lib = checkout / "versions" / "3.11.7" / "lib"

    done = run_acms(env, "resource", "add", str(lib), "--project", "local/p")

    assert done.returncode == 0, done.stderr
    assert ULID.fullmatch(done.stdout.strip()), done.stdout  # stdout as before: the ULID alone
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("acms: warning: ")
    assert f"work tree {checkout.resolve()}" in lines[0]
    assert "ignores every file under" in lines[0]
    assert str(lib.resolve()) in lines[0]
    assert "nothing will be indexed" in lines[0]
    assert "--type directory" in lines[0]
    listed = json.loads(run_acms(env, "--json", "resource", "list").stdout)
    assert [(r["resource_id"], r["resource_type"]) for r in listed] == [
        (done.stdout.strip(), "git-checkout")
    ]


def test_json_output_carries_the_warning_beside_the_unchanged_resource(
    checkout: Path, env: dict[str, str]
) -> None:
    lib = checkout / "versions" / "3.11.7" / "lib"

    done = run_acms(env, "--json", "resource", "add", str(lib), "--project", "local/p")

    assert done.returncode == 0, done.stderr
    added = json.loads(done.stdout)
    warning = added.pop("warning")
    assert f"work tree {checkout.resolve()}" in warning
    assert "--type directory" in warning
    assert _warning_lines(done.stderr) == [f"acms: warning: {warning}"]
    # Every other field is the resource, as `resource list` shows it.
    (listed,) = json.loads(run_acms(env, "--json", "resource", "list").stdout)
    assert added == listed


def test_an_explicit_git_checkout_type_warns_too(checkout: Path, env: dict[str, str]) -> None:
    lib = checkout / "versions" / "3.11.7" / "lib"

    done = run_acms(
        env, "resource", "add", str(lib), "--project", "local/p", "--type", "git-checkout"
    )

    assert done.returncode == 0, done.stderr
    assert len(_warning_lines(done.stderr)) == 1, done.stderr
    assert "--type directory" in done.stderr


def test_type_directory_gives_no_warning_and_indexes_the_file(
    checkout: Path, env: dict[str, str]
) -> None:
    lib = checkout / "versions" / "3.11.7" / "lib"

    done = run_acms(env, "resource", "add", str(lib), "--project", "local/p", "--type", "directory")

    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert ULID.fullmatch(done.stdout.strip()), done.stdout
    reindexed = run_acms(env, "--json", "reindex", "--jobs", "1")
    assert reindexed.returncode == 0, reindexed.stderr
    assert _warning_lines(reindexed.stderr) == []
    assert json.loads(reindexed.stdout)["total"]["files_indexed"] == 1
    found = run_acms(env, "search", "text", "zebra_stripes", "--project", "local/p")
    assert found.returncode == 0, found.stderr
    assert "zebra_module.py" in found.stdout


def test_a_checkout_with_tracked_files_gives_no_warning(
    checkout: Path, env: dict[str, str]
) -> None:
    for args in (
        ("resource", "add", str(checkout), "--project", "local/p"),
        ("--json", "resource", "add", str(checkout), "--project", "local/q"),
    ):
        if "local/q" in args:
            assert run_acms(env, "project", "add", "local/q").returncode == 0
        done = run_acms(env, *args)
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""
        if "--json" in args:
            assert "warning" not in json.loads(done.stdout)


@pytest.mark.parametrize("content", ["nothing", "only_skipped_dirs"])
def test_an_ignored_directory_without_a_file_to_index_gives_no_warning(
    checkout: Path, env: dict[str, str], content: str
) -> None:
    # Nothing to index either way: '--type directory' would not help.
    target = checkout / "versions" / "empty"
    target.mkdir()
    if content == "only_skipped_dirs":
        (target / "node_modules").mkdir()
        (target / "node_modules" / "index.js").write_text("module.exports = 1\n")

    done = run_acms(env, "resource", "add", str(target), "--project", "local/p")

    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_reindex_names_a_git_resource_whose_git_ignores_every_file(
    checkout: Path, env: dict[str, str]
) -> None:
    lib = checkout / "versions" / "3.11.7" / "lib"
    rid = run_acms(env, "resource", "add", str(lib), "--project", "local/p").stdout.strip()

    done = run_acms(env, "reindex", "--jobs", "1")

    assert done.returncode == 0, done.stderr
    assert "files seen: 0" in done.stdout
    (line,) = _warning_lines(done.stderr)
    assert line.startswith(f"acms: warning: resource {rid}: ")
    assert f"work tree {checkout.resolve()}" in line
    assert "--type directory" in line
    as_json = run_acms(env, "--json", "reindex", "--jobs", "1")
    assert json.loads(as_json.stdout)["git_ignored"] == {rid: str(checkout.resolve())}
    rebuilt = run_acms(env, "--json", "reindex", "--rebuild", "--jobs", "1")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert json.loads(rebuilt.stdout)["git_ignored"] == {rid: str(checkout.resolve())}
    (line,) = _warning_lines(rebuilt.stderr)
    assert line.startswith(f"acms: warning: resource {rid}: ")


def test_type_git_checkout_outside_any_work_tree_is_refused_at_registration(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Accepted, it would only fail at the next reindex, and the fix would
    need a remove and a new add: refused now, naming the type that fits."""
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "a.py").write_text("def plain():\n    pass\n")
    env = {**env, "GIT_CEILING_DIRECTORIES": str(tmp_path)}

    done = run_acms(
        env, "resource", "add", str(plain), "--project", "local/p", "--type", "git-checkout"
    )

    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert "not a git work tree" in line and str(plain.resolve()) in line
    assert "--type directory" in line
    assert json.loads(run_acms(env, "--json", "resource", "list").stdout) == []
    # Without --type it is a directory, as before.
    added = run_acms(env, "resource", "add", str(plain), "--project", "local/p")
    assert added.returncode == 0 and added.stderr == "", added.stderr
    (listed,) = json.loads(run_acms(env, "--json", "resource", "list").stdout)
    assert listed["resource_type"] == "directory"


def test_type_git_checkout_given_as_a_home_relative_path_is_a_work_tree(
    checkout: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """Found by review: git -C does not expand "~", so a quoted ``~/repo``
    (or one sent by an API caller) was refused as "not a git work tree"."""
    env = {**env, "HOME": str(tmp_path)}
    done = run_acms(
        env, "resource", "add", "~/pyenv", "--project", "local/p", "--type", "git-checkout"
    )
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(run_acms(env, "--json", "resource", "list").stdout)
    assert row["location"] == str(checkout.resolve())
