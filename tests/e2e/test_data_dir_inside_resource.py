"""A data directory inside the resource it indexes (``./data`` in a checkout
registered as ``.``, what the README's commands give when run from the
repository): the indexes' own files are never indexed, so a second reindex
finds nothing changed and no query answers with an index file.  The data
directory itself as a resource is refused (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_process import cli_env, run_acms
from gitrepo import git


def _checkout(root: Path, *, as_git: bool) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "loader.py").write_text("def load_catalog_rows():\n    return []\n")
    (root / "README.md").write_text("# demo\n")
    if as_git:
        git(root, "init", "-q")
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", "initial")
    return root


@pytest.mark.parametrize("as_git", [False, True], ids=["directory", "git"])
def test_a_data_directory_inside_the_resource_is_left_out(tmp_path: Path, as_git: bool) -> None:
    root = _checkout(tmp_path / "repo", as_git=as_git)
    env = cli_env(root / "data")
    assert run_acms(env, "project", "add", "local/p").returncode == 0
    added = run_acms(env, "resource", "add", str(root), "--project", "local/p")
    assert added.returncode == 0, added.stderr

    first = run_acms(env, "--json", "reindex")
    second = run_acms(env, "--json", "reindex")

    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    stats = json.loads(second.stdout)["resources"][added.stdout.strip()]
    assert (stats["files_seen"], stats["files_read"], stats["files_indexed"]) == (2, 0, 0), stats
    found = run_acms(env, "--json", "search", "text", "catalog meta json", "--project", "local/p")
    assert found.returncode == 0, found.stderr
    hits = {r["metadata"]["path"] for r in json.loads(found.stdout)}
    assert hits <= {"pkg/loader.py", "README.md"}, hits
    assert "pkg/loader.py" in hits


def test_the_data_directory_itself_is_refused_as_a_resource(tmp_path: Path) -> None:
    root = _checkout(tmp_path / "repo", as_git=False)
    env = cli_env(root)
    assert run_acms(env, "project", "add", "local/p").returncode == 0

    done = run_acms(env, "resource", "add", str(root), "--project", "local/p")

    assert done.returncode == 2
    assert done.stderr.startswith("acms: error: ") and "is the data directory" in done.stderr
    assert "Traceback" not in done.stderr
    assert json.loads(run_acms(env, "--json", "resource", "list").stdout) == []
