"""Swap two paths atomically (Linux ``renameat2(RENAME_EXCHANGE)``).

``reindex --rebuild`` builds fresh indexes beside the live ones and swaps each
in with one system call, so a reader resolving ``data/text`` sees the old
directory or the new one, never a missing or half-built one.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path

__all__ = ["exchange_paths"]

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_renameat2 = getattr(_libc, "renameat2", None)


def exchange_paths(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> None:
    """Atomically exchange ``a`` and ``b`` (both must exist, same filesystem).

    Raises:
        OSError: the kernel, C library or filesystem cannot exchange them.
    """
    if _renameat2 is None:
        raise OSError("renameat2 is not available: atomic index swap needs Linux with glibc 2.28+")
    ra, rb = os.fsencode(Path(a)), os.fsencode(Path(b))
    if _renameat2(_AT_FDCWD, ra, _AT_FDCWD, rb, _RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"cannot exchange {a} and {b}: {os.strerror(err)}")
