"""What a test compares to prove files were left alone (shared by the
embedder-switch tests): each file's inode, mtime and size."""

from __future__ import annotations

import os
from pathlib import Path


def snapshot(root: Path) -> dict[str, tuple[int, int, int]]:
    """(inode, mtime_ns, size) of every file under ``root`` (links followed
    at the top: a live index directory), by path relative to it."""
    real = root.resolve()
    out = {}
    for base, _dirs, files in os.walk(real):
        for name in files:
            st = os.stat(os.path.join(base, name))
            out[os.path.relpath(os.path.join(base, name), real)] = (
                st.st_ino,
                st.st_mtime_ns,
                st.st_size,
            )
    assert out, f"no files under {root}"
    return out
