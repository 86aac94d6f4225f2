"""Swap two paths atomically (Linux ``renameat2(RENAME_EXCHANGE)``).

``reindex --rebuild`` builds fresh indexes beside the live ones and swaps each
in with one system call, so a reader resolving ``data/text`` sees the old
directory or the new one, never a missing or half-built one.

The C function is looked up on first use, in the symbols the interpreter
already has loaded: importing this module starts no process (``ctypes.util.
find_library`` would run ``ldconfig -p`` in every process that imports it).
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Callable
from pathlib import Path

__all__ = ["exchange_paths"]

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


@functools.cache
def _renameat2() -> Callable[..., int] | None:
    # CDLL(None) is the running process: libc is already mapped, no search.
    libc = ctypes.CDLL(None, use_errno=True)
    found: Callable[..., int] | None = getattr(libc, "renameat2", None)
    return found


def exchange_paths(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> None:
    """Atomically exchange ``a`` and ``b`` (both must exist, same filesystem).

    Raises:
        OSError: the kernel, C library or filesystem cannot exchange them.
    """
    renameat2 = _renameat2()
    if renameat2 is None:
        raise OSError("renameat2 is not available: atomic index swap needs Linux with glibc 2.28+")
    ra, rb = os.fsencode(Path(a)), os.fsencode(Path(b))
    if renameat2(_AT_FDCWD, ra, _AT_FDCWD, rb, _RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"cannot exchange {a} and {b}: {os.strerror(err)}")
