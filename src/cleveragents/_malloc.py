"""The C heap of a process that indexes (glibc only; no-ops elsewhere).

Indexing allocates and frees large blocks batch after batch: a batch's numpy
arrays, its pickled plans, Tantivy's indexing arena, the graph index's sorted
columns.  glibc serves a block at least as large as its mmap threshold
(128 KiB at start) from a mapping of its own, which ``free`` returns to the
system.  But each time such a block is freed, glibc raises the threshold to
that block's size (up to 32 MiB), so the next batches' blocks come from the
heap instead, interleaved with long-lived small objects, and the heap keeps
the high-water mark of every batch (``malloc_trim`` can only return pages
that hold nothing at all).  :func:`keep_large_blocks_mapped` fixes the
threshold at its start value, which also turns that raising off.

Measured on the standard library (41 MB of source, interleaved runs in new
processes, ``benchmarks/bench_index.py``), peak RSS: at one job 217-219 ->
199 MB for the same CPU time; at two jobs 443-466 -> 410-412 MB.  Only the
writer sets it: fixing it in the planning workers as well saved another
~10 MB at two jobs but cost them up to 1 s of CPU in those runs (their large
blocks, the pickled plans, are made and freed once per batch, each then a
fresh mapping).

The setting stays for the life of the process, so a host that indexes and
answers in one process answers with it: warm query p50 on the stdlib with it
fixed, against the default, was the same for text and vector, and up to 12%
slower for traverse and 7% for SPARQL in some runs (``benchmarks/HISTORY.md``,
seventeenth pass).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

__all__ = ["MMAP_THRESHOLD", "keep_large_blocks_mapped", "release_memory"]

# glibc's own start value: what the threshold is before any large free.
MMAP_THRESHOLD = 128 * 1024
_M_MMAP_THRESHOLD = -3  # <malloc.h>


def _libc_function(name: str) -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        function: Callable[..., int] = getattr(libc, name)
    except (OSError, AttributeError):  # not glibc (musl has neither function)
        return None
    return function


_trim = _libc_function("malloc_trim")
_mallopt = _libc_function("mallopt")
_fixed = False


def release_memory() -> None:
    """Return the heap's free pages to the system (``malloc_trim(0)``)."""
    if _trim is not None:
        _trim(0)


def keep_large_blocks_mapped() -> bool:
    """Fix glibc's mmap threshold at :data:`MMAP_THRESHOLD` in this process
    (once; later calls do nothing).  True if glibc took it.

    A process-wide setting: called by the index store when a write session
    starts (the writer), never on import.
    """
    global _fixed
    if _fixed:
        return True
    if _mallopt is None:
        return False
    _fixed = bool(_mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    return _fixed
