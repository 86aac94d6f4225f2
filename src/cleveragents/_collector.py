"""Pausing Python's cyclic garbage collector around bulk work.

Bulk loads and the indexing writer allocate containers by the million (an
edge set per subject, a tuple per planned triple) and free them without
reference cycles: reference counting reclaims them.  With the collector on,
the collections those allocations trigger walk every young container again
and again; in an indexing run of the standard library that was ~1.8 s of
the writer's ~6.5 s of Python time, to find 35 unreachable objects in all
(``benchmarks/bench_index.py``; the README's twelfth pass).

:func:`paused_collector` switches automatic collection off for a block and
back on when the last concurrent block ends, so two threads pausing at once
never leave it off, nor switch it on under each other.  A process whose
collector was already off (a host's choice, or the CLI's for a question)
keeps it off.  Explicit ``gc.collect()`` calls still run.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

__all__ = ["paused_collector"]

_lock = threading.Lock()
_pausers = 0
_restore = False


@contextlib.contextmanager
def paused_collector() -> Iterator[None]:
    """Automatic cyclic collection off for the block (see the module doc)."""
    global _pausers, _restore
    with _lock:
        if _pausers == 0:
            _restore = gc.isenabled()
            gc.disable()
        _pausers += 1
    try:
        yield
    finally:
        with _lock:
            _pausers -= 1
            if _pausers == 0 and _restore:
                gc.enable()
