"""A hostile tree: symlinks, loops, FIFOs, sockets and files swapped under the reader.

Every test builds the tree for real on ``tmp_path`` (and a real git repository
where git behaviour matters) and checks that nothing outside the root is ever
listed or read, and that nothing blocks.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from types import FrameType

import pytest
from structlog.testing import capture_logs

from cleveragents.application.services import resource_files
from cleveragents.application.services.resource_files import ListedFile, list_files, read_file
from cleveragents.domain.models.acms.errors import ResourceListingError
from gitrepo import git, make_foreign

_GIT_ENV_DROP = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY")
PASSWD = "/etc/passwd"


def commit_all(root: Path) -> None:
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "c")


class Blocked(Exception):
    pass


@contextlib.contextmanager
def must_not_block(seconds: int = 5) -> Iterator[None]:
    """Fail instead of hanging if the body blocks (e.g. opening a FIFO)."""

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        raise Blocked(f"blocked for {seconds}s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def skipped(logs: Iterable[Mapping[str, object]]) -> dict[object, object]:
    return {e["path"]: e["reason"] for e in logs if e["event"] == "context_hydrator.file_skipped"}


def only(root: Path, rel: str) -> ListedFile:
    [listed] = [f for f in list_files(root, "directory") if f.rel_path == rel]
    return listed


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory next to the root with a secret in it."""
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.txt").write_text("OUTSIDE SECRET\n")
    return out


@pytest.fixture
def hostile(tmp_path: Path, outside: Path) -> Path:
    """A committed checkout full of symlinks, plus untracked special files."""
    root = tmp_path / "root"
    root.mkdir()
    (root / "ok.py").write_text("ok = True\n")
    (root / "pkg").mkdir()
    (root / "pkg" / "mod.py").write_text("x = 1\n")
    (root / "passwd_link").symlink_to(PASSWD)
    (root / "zero_link").symlink_to("/dev/zero")
    (root / "self_loop").symlink_to("self_loop")
    (root / "loop_a").symlink_to("loop_b")
    (root / "loop_b").symlink_to("loop_a")
    (root / "dir_link").symlink_to(outside, target_is_directory=True)
    (root / "pkg" / "up_link").symlink_to("..", target_is_directory=True)
    (root / "dangling").symlink_to(root / "nowhere")
    commit_all(root)
    os.mkfifo(root / "fifo")
    return root


EXPECTED = ["ok.py", "pkg/mod.py"]
SYMLINKS = [
    "dangling",
    "dir_link",
    "loop_a",
    "loop_b",
    "passwd_link",
    "pkg/up_link",
    "self_loop",
    "zero_link",
]


@pytest.mark.parametrize("kind", ["git-checkout", "directory"])
def test_symlinks_and_fifos_are_never_listed(hostile: Path, kind: str) -> None:
    with must_not_block(), capture_logs() as logs:
        listed = [f.rel_path for f in list_files(hostile, kind)]
    assert listed == EXPECTED
    reasons = skipped(logs)
    for link in SYMLINKS:
        assert reasons[link] == "symlink", link
    # git ls-files --others leaves special files out; the walk sees the FIFO and drops it.
    assert reasons.get("fifo", "not_regular") == "not_regular"
    assert all(e["log_level"] == "debug" for e in logs)


def test_git_really_lists_committed_symlinks(hostile: Path) -> None:
    """The danger is real: git hands back the symlinks; the listing drops them."""
    out = subprocess.run(
        ["git", "-C", str(hostile), "ls-files", "-z"], capture_output=True, check=True
    ).stdout
    assert {b"passwd_link", b"dir_link", b"zero_link"} <= set(out.split(b"\0"))


def test_walk_does_not_enter_a_directory_symlink_to_outside(hostile: Path) -> None:
    listed = [f.rel_path for f in list_files(hostile, "directory")]
    assert not any(p.startswith("dir_link/") for p in listed)
    assert "dir_link/secret.txt" not in listed


@pytest.mark.parametrize("rel", ["passwd_link", "zero_link", "self_loop", "loop_a", "dir_link"])
def test_reading_a_symlink_is_refused(hostile: Path, rel: str) -> None:
    with must_not_block(), capture_logs() as logs:
        assert read_file(hostile, ListedFile(rel, 1, 0)) is None
    assert skipped(logs)[rel] in {"symlink", "not_regular"}


def test_reading_through_a_directory_symlink_is_refused(hostile: Path) -> None:
    with capture_logs() as logs:
        assert read_file(hostile, ListedFile("dir_link/secret.txt", 1, 0)) is None
        assert read_file(hostile, ListedFile("pkg/up_link/ok.py", 1, 0)) is None
    assert set(skipped(logs).values()) == {"symlink"}


def test_reading_a_fifo_does_not_block(hostile: Path) -> None:
    with must_not_block(), capture_logs() as logs:
        assert read_file(hostile, ListedFile("fifo", 0, 0)) is None
    assert skipped(logs)["fifo"] == "not_regular"


def test_reading_a_fifo_with_a_writer_does_not_read_it(hostile: Path) -> None:
    writer = os.open(hostile / "fifo", os.O_RDWR)  # O_RDWR never blocks on Linux
    try:
        os.write(writer, b"from the pipe")
        with must_not_block():
            assert read_file(hostile, ListedFile("fifo", 0, 0)) is None
    finally:
        os.close(writer)


def test_reading_a_directory_is_refused(hostile: Path) -> None:
    with capture_logs() as logs:
        assert read_file(hostile, ListedFile("pkg", 0, 0)) is None
    assert skipped(logs)["pkg"] == "not_regular"


def test_unix_socket_is_neither_listed_nor_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a.txt").write_text("a")
    monkeypatch.chdir(tmp_path)  # a relative bind keeps under the 108-byte sun_path limit
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind("app.sock")
        sock.listen(1)
        with must_not_block(), capture_logs() as logs:
            assert [f.rel_path for f in list_files(tmp_path, "directory")] == ["a.txt"]
        assert skipped(logs)["app.sock"] == "not_regular"
        # A git resource must be a git checkout now (no walk fallback).
        git(tmp_path, "init", "-q")
        with must_not_block(), capture_logs() as logs:
            assert [f.rel_path for f in list_files(tmp_path, "git-checkout")] == ["a.txt"]
        assert skipped(logs).get("app.sock", "not_regular") == "not_regular"
        with must_not_block(), capture_logs() as logs:
            assert read_file(tmp_path, ListedFile("app.sock", 0, 0)) is None
        assert skipped(logs)["app.sock"] == "not_regular"


def test_file_deleted_between_list_and_read(tmp_path: Path) -> None:
    (tmp_path / "gone.txt").write_text("bye")
    listed = only(tmp_path, "gone.txt")
    (tmp_path / "gone.txt").unlink()
    with capture_logs() as logs:
        assert read_file(tmp_path, listed) is None
    assert skipped(logs)["gone.txt"] == "vanished"
    assert any(e["event"] == "context_hydrator.vanished" for e in logs)


def test_file_deleted_between_git_listing_and_lstat(tmp_path: Path) -> None:
    """git --cached still lists a file deleted from the worktree; it is skipped quietly."""
    (tmp_path / "kept.txt").write_text("k")
    (tmp_path / "deleted.txt").write_text("d")
    commit_all(tmp_path)
    (tmp_path / "deleted.txt").unlink()
    with capture_logs() as logs:
        assert [f.rel_path for f in list_files(tmp_path)] == ["kept.txt"]
    assert skipped(logs)["deleted.txt"] == "vanished"


def test_file_replaced_by_symlink_between_list_and_read(tmp_path: Path) -> None:
    target = tmp_path / "notes.txt"
    target.write_text("harmless")
    listed = only(tmp_path, "notes.txt")
    target.unlink()
    target.symlink_to(PASSWD)
    with capture_logs() as logs:
        assert read_file(tmp_path, listed) is None
    assert skipped(logs)["notes.txt"] == "symlink"


def test_file_replaced_by_fifo_between_list_and_read(tmp_path: Path) -> None:
    target = tmp_path / "notes.txt"
    target.write_text("harmless")
    listed = only(tmp_path, "notes.txt")
    target.unlink()
    os.mkfifo(target)
    with must_not_block(), capture_logs() as logs:
        assert read_file(tmp_path, listed) is None
    assert skipped(logs)["notes.txt"] == "not_regular"


def test_directory_component_swapped_for_symlink_after_listing(
    tmp_path: Path, outside: Path
) -> None:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "secret.txt").write_text("inside\n")
    listed = only(root, "sub/secret.txt")

    (root / "sub").rename(tmp_path / "moved")
    (root / "sub").symlink_to(outside, target_is_directory=True)

    # Control: O_NOFOLLOW alone on the full path only guards the last component.
    fd = os.open(root / "sub" / "secret.txt", os.O_RDONLY | os.O_NOFOLLOW)
    try:
        assert os.read(fd, 100) == b"OUTSIDE SECRET\n"
    finally:
        os.close(fd)

    with capture_logs() as logs:
        assert read_file(root, listed) is None
    assert skipped(logs)["sub/secret.txt"] == "symlink"


def test_git_index_path_under_a_component_now_a_symlink_is_not_listed(
    tmp_path: Path, outside: Path
) -> None:
    """The index says sub/secret.txt; the worktree's sub/ now points outside."""
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "secret.txt").write_text("inside\n")
    (root / "top.txt").write_text("t\n")
    commit_all(root)
    (root / "sub").rename(tmp_path / "moved")
    (root / "sub").symlink_to(outside, target_is_directory=True)
    with capture_logs() as logs:
        listed = [f.rel_path for f in list_files(root, "git-checkout")]
    assert listed == ["top.txt"]
    assert skipped(logs).get("sub/secret.txt", "symlink") == "symlink"


def test_submodule_contents_are_not_followed(tmp_path: Path) -> None:
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "inner.py").write_text("i = 1\n")
    commit_all(inner)
    root = tmp_path / "root"
    root.mkdir()
    (root / "top.py").write_text("t = 1\n")
    git(root, "init", "-q")
    git(root, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(inner), "vendor")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "c")
    with capture_logs() as logs:
        listed = [f.rel_path for f in list_files(root, "git-checkout")]
    assert listed == [".gitmodules", "top.py"]
    assert skipped(logs)["vendor"] == "not_regular"


def _listing_error(root: Path) -> str:
    """List ``root`` as a git checkout, expecting a ResourceListingError; its message."""
    with pytest.raises(ResourceListingError) as caught:
        list_files(root, "git-checkout").__next__()
    return str(caught.value)


def test_not_a_git_directory_is_an_error_not_a_walk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Registered as git but git finds no repository: an error naming the fix."""
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    (tmp_path / "a.py").write_text("a")
    (tmp_path / ".git_not").mkdir()
    with capture_logs() as logs:
        message = _listing_error(tmp_path)
    assert "not a git repository" in message and "--type directory" in message
    [failed] = [e for e in logs if e["event"] == "context_hydrator.git_failed"]
    assert failed["reason"] == "git_failed" and failed["log_level"] == "debug"
    assert not skipped(logs)  # nothing was walked
    # The same tree registered as a plain directory is walked as before.
    assert [f.rel_path for f in list_files(tmp_path, "directory")] == ["a.py"]


def test_missing_git_is_an_error_and_ignored_files_are_not_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.py").write_text("a")
    (root / "ignored.log").write_text("i")
    (root / ".gitignore").write_text("ignored.log\n")
    commit_all(root)
    empty = tmp_path / "empty_bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with capture_logs() as logs:
        message = _listing_error(root)
    assert "git is not installed" in message and "install git" in message
    [failed] = [e for e in logs if e["event"] == "context_hydrator.git_failed"]
    assert failed["reason"] == "git_missing"


def test_hanging_git_times_out_as_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.py").write_text("a")
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    fake_git = fake_bin / "git"
    fake_git.write_text("#!/bin/sh\nexec sleep 30\n")
    fake_git.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake_bin}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(resource_files, "GIT_TIMEOUT_SECONDS", 0.5)
    with must_not_block(10), capture_logs() as logs:
        message = _listing_error(root)
    assert "did not finish within 0.5 s" in message
    [failed] = [e for e in logs if e["event"] == "context_hydrator.git_failed"]
    assert failed["reason"] == "timeout"


def test_checkout_owned_by_another_user_is_an_error_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Docker case: the checkout's owner is not our uid, git says "dubious
    ownership".  Listing must fail naming the fix, never walk the tree (which
    would list the git-ignored secret)."""
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.py").write_text("a")
    (root / ".gitignore").write_text("local-notes.txt\n")
    commit_all(root)
    (root / "local-notes.txt").write_text("password=hunter2\n")
    make_foreign(root, monkeypatch)
    with capture_logs() as logs:
        message = _listing_error(root)
    assert "dubious ownership" in message
    assert f"git config --global --add safe.directory {root}" in message
    [failed] = [e for e in logs if e["event"] == "context_hydrator.git_failed"]
    assert failed["reason"] == "dubious_ownership"
    # The operator's fix works: git lists it again, still without the ignored file.
    trust = tmp_path / "gitconfig"
    trust.write_text(f"[safe]\n\tdirectory = {root}\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(trust))
    assert [f.rel_path for f in list_files(root, "git-checkout")] == [".gitignore", "a.py"]


def test_git_redirect_variables_do_not_leak_another_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside a git hook GIT_DIR is set; listing must still describe ``root``."""
    other = tmp_path / "other"
    other.mkdir()
    (other / "other.py").write_text("o")
    commit_all(other)
    root = tmp_path / "root"
    root.mkdir()
    (root / "mine.py").write_text("m")
    commit_all(root)
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(other))
    assert [f.rel_path for f in list_files(root, "git-checkout")] == ["mine.py"]


def test_repository_fsmonitor_command_is_not_run(tmp_path: Path) -> None:
    """A checkout's .git/config is attacker-controlled; ls-files must not run its fsmonitor."""
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.py").write_text("a")
    commit_all(root)
    marker = tmp_path / "pwned"
    hook = tmp_path / "monitor.sh"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    git(root, "config", "core.fsmonitor", str(hook))
    assert [f.rel_path for f in list_files(root, "git-checkout")] == ["a.py"]
    assert not marker.exists()


def test_unreadable_file_is_skipped(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads files regardless of permissions")
    path = tmp_path / "locked.txt"
    path.write_text("no")
    listed = only(tmp_path, "locked.txt")
    path.chmod(0)
    try:
        with capture_logs() as logs:
            assert read_file(tmp_path, listed) is None
        assert skipped(logs)["locked.txt"] == "unreadable"
    finally:
        path.chmod(0o644)
