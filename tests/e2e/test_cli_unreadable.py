"""Directories the reindex cannot read, as an operator meets them: a
subdirectory without permissions, and a resource root that became unreadable.

Before: an unreadable subdirectory was logged at debug level only (the
reindex said nothing, its files were dropped silently), and an unreadable
root listed as "no files": the reindex deleted every indexed file of the
resource, exit 0.  Now the first is a warning that counts the directories,
and the second fails that resource (exit 1) and keeps its indexed files.

As root, permissions are not checked; the CLI then runs without the
capabilities that skip them (``setpriv``), as an ordinary user would.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitrepo import git

_UNPRIVILEGED = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]


def _prefix() -> list[str]:
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: permissions would not be checked")
    if subprocess.run([*_UNPRIVILEGED, "true"], capture_output=True).returncode != 0:
        pytest.skip("running as root where setpriv cannot drop capabilities (no CAP_SETPCAP)")
    return _UNPRIVILEGED


class Cli:
    def __init__(self, data: Path) -> None:
        self.env = {**os.environ, "ACMS_DATA_DIR": str(data)}
        self.env.pop("ACMS_PROFILE", None)
        self.prefix = _prefix()

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.prefix, sys.executable, "-m", "cleveragents.acms", *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=180,
        )

    def ok(self, *args: str) -> str:
        done = self.run(*args)
        assert done.returncode == 0, done.stderr
        return done.stdout


def _add(cli: Cli, tree: Path, *kind: str) -> str:
    cli.ok("project", "add", "local/p")
    return cli.ok("resource", "add", str(tree), "--project", "local/p", *kind).strip()


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "repo"
    (root / "private").mkdir(parents=True)
    (root / "open.py").write_text("def visiblemarker():\n    pass\n")
    (root / "private" / "inner.py").write_text("def privatemarker():\n    pass\n")
    yield root
    for path in (root, root / "private"):  # pytest must be able to delete it
        path.chmod(0o755)


def test_a_root_that_lists_but_cannot_be_entered_fails_and_keeps_its_files(
    tmp_path: Path, tree: Path
) -> None:
    """``r--`` (a review found it): the root opens and lists its names, but
    no file's ``stat`` is allowed, so every file was "unreadable" and the
    reindex deleted them all, exit 0."""
    cli = Cli(tmp_path / "data")
    rid = _add(cli, tree, "--type", "directory")
    cli.ok("reindex")
    tree.chmod(0o444)
    done = cli.run("reindex")
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert f"failed: resource {rid}: cannot read the directory" in done.stderr
    assert "deleted: 0" in done.stdout
    assert "visiblemarker" in cli.ok("search", "text", "visiblemarker", "--project", "local/p")


@pytest.mark.parametrize("mode", [0, 0o444])
def test_unreadable_directories_of_a_git_resource_or_entered_ones_are_warned_of(
    tmp_path: Path, tree: Path, mode: int
) -> None:
    """A git resource lists its files by path: under a ``---`` directory
    each file's ``stat`` is refused, and those files were dropped with no
    word; a walked ``r--`` directory listed names it could not stat."""
    git(tree, "init", "-q")
    git(tree, "add", "-A")
    git(tree, "commit", "-qm", "c")
    cli = Cli(tmp_path / "data")
    rid = _add(cli, tree)
    cli.ok("reindex")
    (tree / "private").chmod(mode)
    done = cli.run("reindex")
    assert done.returncode == 0, done.stderr
    assert f"resource {rid}: 1 file under it cannot be read" in done.stderr
    assert "no results" in cli.ok("search", "text", "privatemarker", "--project", "local/p")
    walked = Cli(tmp_path / "walked")
    rid = _add(walked, tree, "--type", "directory")
    done = walked.run("reindex")
    assert done.returncode == 0, done.stderr
    assert f"resource {rid}: 1 directory under it cannot be read" in done.stderr
    assert "visiblemarker" in walked.ok("search", "text", "visiblemarker", "--project", "local/p")


def test_an_unreadable_subdirectory_is_a_warning_that_counts_it(tmp_path: Path, tree: Path) -> None:
    cli = Cli(tmp_path / "data")
    rid = _add(cli, tree, "--type", "directory")
    cli.ok("reindex")
    assert "privatemarker" in cli.ok("search", "text", "privatemarker", "--project", "local/p")
    (tree / "private").chmod(0)
    done = cli.run("reindex")
    assert done.returncode == 0, done.stderr
    [line] = [ln for ln in done.stderr.splitlines() if "cannot be read" in ln]
    assert f"resource {rid}: 1 directory under it cannot be read" in line
    assert "Traceback" not in done.stderr
    # What it cannot read is not served; the rest is.
    assert "no results" in cli.ok("search", "text", "privatemarker", "--project", "local/p")
    assert "visiblemarker" in cli.ok("search", "text", "visiblemarker", "--project", "local/p")
    # Readable again: indexed again, and no warning.
    (tree / "private").chmod(0o755)
    done = cli.run("reindex")
    assert done.returncode == 0 and "cannot be read" not in done.stderr, done.stderr
    assert "privatemarker" in cli.ok("search", "text", "privatemarker", "--project", "local/p")


def test_an_unreadable_root_fails_the_resource_and_keeps_its_files(
    tmp_path: Path, tree: Path
) -> None:
    cli = Cli(tmp_path / "data")
    rid = _add(cli, tree, "--type", "directory")
    cli.ok("reindex")
    tree.chmod(0)
    done = cli.run("reindex")
    assert done.returncode == 1, (done.stdout, done.stderr)
    [line] = [ln for ln in done.stderr.splitlines() if rid in ln]
    assert "failed" in line and "cannot read the directory" in line
    assert "Permission denied" in line and "indexed files are kept" in line
    assert "Traceback" not in done.stderr
    # Kept, not deleted as "the directory lists no file".
    for marker in ("visiblemarker", "privatemarker"):
        assert marker in cli.ok("search", "text", marker, "--project", "local/p")
