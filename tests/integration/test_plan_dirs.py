"""The planner pool's listing directories do not pile up in the temporary directory.

A pool keeps its listing files in a directory of its own and removes it when
it closes; a run killed before that (SIGKILL, SIGTERM, the OOM killer) cannot.
The next pool removes the directories whose owner process is gone, and only
those: a live owner's, another user's or PID namespace's, or one holding
anything but listing files stays.
"""

from __future__ import annotations

import ast
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from cleveragents.application.services import index_workers
from cleveragents.application.services.index_workers import (
    make_plan_dir,
    sweep_plan_dirs,
)

# A reindex's pool at work; then the process is killed before it can close
# the pool (``kill``), or it closes the pool and exits (``close``).
_HOST = textwrap.dedent(
    """
    import functools, os, signal, sys
    from cleveragents.application.services.index_workers import PlanFailure, PlannerPool
    from cleveragents.application.services.indexer import PlannerSpec
    from cleveragents.infrastructure.acms.hashing_embedder import HashingEmbedder
    from cleveragents.infrastructure.acms.tree_sitter_code import TreeSitterCodeParser

    spec = PlannerSpec(functools.partial(HashingEmbedder, 64), TreeSitterCodeParser)
    pool = PlannerPool(spec, 2)
    outcome = pool.submit(
        "01J0000000000000000000WKRS", pool.listing(["a.py"]), [("a.py", b"x = 1\\n")]
    ).result()[0]
    assert not isinstance(outcome, PlanFailure), outcome
    import multiprocessing.util
    mp = multiprocessing.util.get_temp_dir()
    print(repr((sorted(os.listdir(os.environ["TMPDIR"])), mp)), flush=True)
    if sys.argv[1] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    pool.close()
    """
)


def host(tmp_path: Path, how: str) -> tuple[int, list[str], Path]:
    """Run :data:`_HOST` with ``TMPDIR=tmp_path``: its exit status, what the
    temporary directory held while its pool ran, and multiprocessing's
    directory."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    run = subprocess.run(
        [sys.executable, "-c", _HOST, how], env=env, capture_output=True, text=True, timeout=120
    )
    assert run.stdout, run.stderr
    listed, mp = ast.literal_eval(run.stdout)
    return run.returncode, listed, Path(mp)


def dead_pid() -> int:
    """The PID of a process that has ended (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def plan_dir_name(
    pid: int, namespace: str | None = None, *, suffix: str = "abc123", kind: str = "acms-plan"
) -> str:
    ns = index_workers._pid_namespace() if namespace is None else namespace
    return f"{kind}-{ns}-{pid}-{suffix}"


def stale_dir(
    parent: Path, pid: int, *files: str, suffix: str = "abc123", kind: str = "acms-plan"
) -> Path:
    path = parent / plan_dir_name(pid, suffix=suffix, kind=kind)
    path.mkdir()
    for name in files:
        (path / name).write_bytes(b"\x80\x05]\x94.")
    return path


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temporary directory with a short path (pytest's are too long for the
    fork server's socket in an owner-tagged directory: see the last test)."""
    path = Path(tempfile.mkdtemp(prefix="acms-t-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_killed_runs_directories_are_removed_by_the_next_pool(short_tmp: Path) -> None:
    tmp_path = short_tmp
    code, killed, mp = host(tmp_path, "kill")
    assert code == -signal.SIGKILL
    assert mp.parent == tmp_path and mp.name in killed
    # What it leaves: its listing directory and multiprocessing's (the fork
    # server's socket), each named with its owner.
    prefix = f"-{index_workers._pid_namespace()}-"
    assert sorted(name.split(prefix)[0] for name in killed) == ["acms-mp", "acms-plan"]
    assert sorted(p.name for p in tmp_path.iterdir()) == killed
    assert (
        tmp_path / next(n for n in killed if n.startswith("acms-plan")) / "listing-1.pickle"
    ).is_file()
    assert any((tmp_path / next(n for n in killed if n.startswith("acms-mp"))).iterdir())

    code, during, mp = host(tmp_path, "close")
    assert code == 0
    assert mp.name in during
    assert len(during) == 2 and not set(during) & set(killed)  # the killed run's are gone
    assert list(tmp_path.iterdir()) == []  # and the closed run's too, at its exit


def test_a_tmpdir_too_long_for_the_socket_puts_it_in_tmp(tmp_path: Path) -> None:
    # Python 3.11's own directory under such a TMPDIR makes the fork server
    # fail to start ("AF_UNIX path too long"): the pool could not run.
    long_parent = tmp_path / ("d" * 60)
    long_parent.mkdir()
    code, during, mp = host(long_parent, "close")
    assert code == 0
    assert mp.parent == Path("/tmp") and mp.name.startswith("acms-mp-")
    assert [name.split(f"-{index_workers._pid_namespace()}-")[0] for name in during] == [
        "acms-plan"
    ]
    assert list(long_parent.iterdir()) == []
    assert not mp.exists()  # removed at its exit


def test_a_directory_names_its_owner(tmp_path: Path) -> None:
    made = Path(make_plan_dir(str(tmp_path)))
    assert made.name.startswith(plan_dir_name(os.getpid())[: -len("abc123")])
    assert oct(made.stat().st_mode & 0o777) == oct(0o700)
    assert sweep_plan_dirs(str(tmp_path)) == 0  # its owner (this process) runs
    assert made.is_dir()


def test_only_what_a_gone_owner_left_is_removed(tmp_path: Path) -> None:
    gone = dead_pid()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        removable = [
            stale_dir(tmp_path, gone),  # made, killed before any listing
            stale_dir(tmp_path, gone, "listing-1.pickle", "listing-12.pickle", suffix="xyz"),
            stale_dir(tmp_path, gone, "listener-ab_12cd3", kind="acms-mp"),
        ]
        kept = [
            stale_dir(tmp_path, live.pid, "listing-1.pickle"),  # its owner runs
            tmp_path / plan_dir_name(gone, namespace="1"),  # another PID namespace
            tmp_path / f"acms-plan-{index_workers._pid_namespace()}-x{gone}-abc",  # not a PID
            tmp_path / "acms-plan-oldform",  # no owner in the name
        ]
        for path in kept[1:]:
            path.mkdir()
        odd = tmp_path / "odd"
        odd.mkdir()
        unexpected = stale_dir(odd, gone, "listing-1.pickle", "notes.txt")
        link_target = tmp_path / "target"
        link_target.mkdir()
        link = odd / plan_dir_name(gone).replace("abc123", "link")
        link.symlink_to(link_target)
        plain = odd / plan_dir_name(gone).replace("abc123", "file")
        plain.write_text("")

        assert sweep_plan_dirs(str(tmp_path)) == 3
        assert not any(path.exists() for path in removable)
        assert all(path.is_dir() for path in kept)
        assert (kept[0] / "listing-1.pickle").is_file()

        assert sweep_plan_dirs(str(odd)) == 0
        assert (unexpected / "notes.txt").is_file() and (unexpected / "listing-1.pickle").is_file()
        assert link.is_symlink() and link_target.is_dir()
        assert plain.is_file()
    finally:
        live.kill()
        live.wait()


def test_a_missing_parent_sweeps_nothing(tmp_path: Path) -> None:
    assert sweep_plan_dirs(str(tmp_path / "absent")) == 0
