"""Run git in a test repository as a user would, isolated from the caller's
repository, hooks and configuration (shared by the test modules)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

_GIT_ENV_DROP = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY")


def git(root: Path, *args: str) -> None:
    """Run ``git -C root ARGS`` with a throwaway identity and no global config."""
    env = {k: v for k, v in os.environ.items() if k not in _GIT_ENV_DROP}
    env["GIT_CONFIG_GLOBAL"] = os.devnull
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    subprocess.run(
        [
            "git",
            "-c",
            "user.email=t@example.com",
            "-c",
            "user.name=T",
            "-c",
            "commit.gpgsign=false",
            "-C",
            str(root),
            *args,
        ],
        check=True,
        capture_output=True,
        env=env,
    )


FOREIGN_UID = 54321


def make_foreign(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make git see ``root`` as a checkout owned by another user ("dubious ownership").

    As root (CI containers) the tree really is handed to another uid; otherwise
    git's own test switch makes it assume a different owner.  Either way no
    global config may trust it: ``GIT_CONFIG_GLOBAL`` points at an empty file.
    """
    if os.geteuid() == 0:
        for dirpath, dirnames, filenames in os.walk(root):
            for name in (*dirnames, *filenames):
                os.lchown(os.path.join(dirpath, name), FOREIGN_UID, FOREIGN_UID)
        os.lchown(root, FOREIGN_UID, FOREIGN_UID)
    else:
        monkeypatch.setenv("GIT_TEST_ASSUME_DIFFERENT_OWNER", "1")
    empty = root.parent / "empty-gitconfig"
    empty.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(empty))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
