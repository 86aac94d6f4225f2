"""The CLI over the index store: overlapping resources need --force, and the
data directory is owner-only whatever the umask (``acms status`` names what
is not)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_process import MODULE, cli_env, run_acms

REPO = Path(__file__).resolve().parents[2]
REINDEX = REPO / "scripts" / "reindex.py"
MODULE_CMD = [sys.executable, *MODULE]


def run(
    data: Path, *args: str, umask: int | None = None, script: Path | None = None
) -> subprocess.CompletedProcess[str]:
    program = [str(script)] if script else MODULE
    return run_acms(cli_env(data), *args, program=program, umask=umask, timeout=120)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "pkg" / "core.py").write_text("def quokka_function():\n    return 1\n")
    (root / "pkg" / "sub" / "leaf.py").write_text("def leaf_function():\n    return 2\n")
    return root


def test_overlapping_resources_need_force(tmp_path: Path, tree: Path) -> None:
    data = tmp_path / "data"
    assert run(data, "project", "add", "local/a").returncode == 0
    assert run(data, "project", "add", "local/b").returncode == 0
    first = run(data, "resource", "add", str(tree), "--project", "local/a")
    assert first.returncode == 0, first.stderr
    rid = first.stdout.strip()
    for path in (tree, tree / "pkg", tree.parent):
        again = run(data, "resource", "add", str(path), "--project", "local/a")
        assert again.returncode == 2, (path, again.stderr)
        assert rid in again.stderr and "--force" in again.stderr
        assert again.stderr.count("\n") == 1 and "Traceback" not in again.stderr
    # Another project may hold the same path; --force overrides the check.
    assert run(data, "resource", "add", str(tree), "--project", "local/b").returncode == 0
    forced = run(data, "resource", "add", str(tree / "pkg"), "--project", "local/a", "--force")
    assert forced.returncode == 0, forced.stderr
    listed = run(data, "resource", "list", "--project", "local/a").stdout
    assert len(listed.strip().splitlines()) == 2


def loose_paths(root: Path) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [".", *dirnames, *filenames]:
            path = Path(dirpath) / name if name != "." else Path(dirpath)
            st = os.lstat(path)
            if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o077:
                out.append(f"{path} {oct(st.st_mode & 0o777)}")
    return out


@pytest.mark.parametrize("umask", [0o022, 0o000])
def test_the_data_directory_is_owner_only_whatever_the_umask(
    tmp_path: Path, tree: Path, umask: int
) -> None:
    data = tmp_path / "data"
    for args in (
        ("project", "add", "local/a"),
        ("resource", "add", str(tree), "--project", "local/a"),
        ("reindex",),
    ):
        done = run(data, *args, umask=umask)
        assert done.returncode == 0, done.stderr
    rebuilt = run(data, "--rebuild", umask=umask, script=REINDEX)
    assert rebuilt.returncode == 0, rebuilt.stderr
    (tree / "pkg" / "new.py").write_text("def added():\n    pass\n")
    assert run(data, "reindex", umask=umask).returncode == 0
    assert loose_paths(data) == []
    status = run(data, "status", umask=umask)
    assert status.returncode == 0 and "warning" not in status.stderr


def _umask_of(pid: int) -> str:
    with open(f"/proc/{pid}/status") as fh:
        return next(line.split()[1] for line in fh if line.startswith("Umask:"))


@pytest.mark.parametrize(
    "service", [("watch",), ("serve", "--http", "127.0.0.1:0", "--project", "local/a")]
)
def test_the_services_write_owner_only_files_whatever_the_umask(
    tmp_path: Path, tree: Path, service: tuple[str, ...]
) -> None:
    """Found by a reviewer: ``acms watch`` and ``acms serve`` were handed
    off before the CLI set its umask, so a watch killed mid-run (or out of
    space) left 0644 segment files that ``status`` then warned of."""
    data = tmp_path / "data"
    assert run(data, "project", "add", "local/a").returncode == 0
    assert run(data, "resource", "add", str(tree), "--project", "local/a").returncode == 0
    proc = subprocess.Popen(
        [*MODULE_CMD, *service],
        env=cli_env(data),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=lambda: os.umask(0o022),
    )
    try:
        deadline = time.monotonic() + 60
        while _umask_of(proc.pid) != "0077" and time.monotonic() < deadline:
            assert proc.poll() is None, "the service ended"
            time.sleep(0.05)
        assert _umask_of(proc.pid) == "0077"
    finally:
        proc.terminate()
        proc.wait(30)


def test_status_warns_about_loose_modes_and_names_them(tmp_path: Path, tree: Path) -> None:
    data = tmp_path / "data"
    assert run(data, "project", "add", "local/a").returncode == 0
    assert run(data, "resource", "add", str(tree), "--project", "local/a").returncode == 0
    assert run(data, "reindex").returncode == 0
    registry = data / "registry.sqlite3"
    os.chmod(registry, 0o644)
    status = run(data, "status")
    assert status.returncode == 0, status.stderr
    assert "warning" in status.stderr and str(registry) in status.stderr
    as_json = run(data, "--json", "status")
    assert str(registry) in as_json.stdout


def test_quickstart_twice_on_one_data_dir_reuses_its_resource(tmp_path: Path, tree: Path) -> None:
    quickstart = REPO / "scripts" / "quickstart.py"
    data = tmp_path / "data"
    for _ in range(2):
        done = run(data, str(tree), "--data-dir", str(data), script=quickstart)
        assert done.returncode == 0, done.stderr
    listed = run(data, "resource", "list")
    assert len(listed.stdout.strip().splitlines()) == 1
    assert loose_paths(data) == []
