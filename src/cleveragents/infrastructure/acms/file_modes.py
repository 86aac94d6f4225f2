"""Owner-only files in the data directory, whatever the process umask.

Engines (Tantivy, SQLite, the graph store) create their own files with the
process umask.  The store therefore (1) creates every directory it owns with
mode 0700, so nothing below is reachable by another user even for a moment,
and (2) after it writes, narrows what the engines created to owner-only
(:func:`tighten`).  Entry points may also set ``umask(0o077)`` at start-up; a
library never changes a host's umask.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

__all__ = ["PRIVATE_DIR", "PRIVATE_FILE", "loose", "make_private_dirs", "tighten"]

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
_OTHERS = 0o077


def make_private_dirs(path: Path) -> None:
    """``mkdir -p`` with mode 0700 for every directory it creates (not the existing ones)."""
    missing: list[Path] = []
    current = path
    while not current.exists() and not current.is_symlink():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=PRIVATE_DIR)
        except FileExistsError:
            continue
        # mkdir's mode is masked by the umask, which only removes bits:
        # chmod states the mode exactly (0700 even under umask 0o777).
        os.chmod(directory, PRIVATE_DIR)


def _walk(roots: Iterable[Path]) -> Iterator[tuple[Path, os.stat_result]]:
    for root in roots:
        try:
            st = os.lstat(root)
        except FileNotFoundError:
            continue
        yield root, st
        if not stat.S_ISDIR(st.st_mode):
            continue
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            for name in (*dirnames, *filenames):
                path = Path(dirpath) / name
                try:
                    yield path, os.lstat(path)
                except FileNotFoundError:
                    continue


def loose(roots: Iterable[Path]) -> list[Path]:
    """Files and directories under ``roots`` that group or others may access."""
    return [
        path for path, st in _walk(roots) if not stat.S_ISLNK(st.st_mode) and st.st_mode & _OTHERS
    ]


def tighten(roots: Iterable[Path]) -> int:
    """Remove group and other permissions under ``roots``; return how many changed."""
    changed = 0
    for path, st in _walk(roots):
        if stat.S_ISLNK(st.st_mode) or not st.st_mode & _OTHERS:
            continue
        try:
            os.chmod(path, stat.S_IMODE(st.st_mode) & ~_OTHERS)
        except FileNotFoundError:
            continue
        changed += 1
    return changed
