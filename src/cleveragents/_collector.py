"""Pausing Python's cyclic garbage collector around bulk work.

Bulk loads and the indexing writer allocate containers by the million (an
edge set per subject, a tuple per planned triple) and free them without
reference cycles: reference counting reclaims them.  With the collector on,
the collections those allocations trigger walk every young container again
and again; in an indexing run of the standard library that was ~1.8 s of
the writer's ~6.5 s of Python time, to find 35 unreachable objects in all
(``benchmarks/bench_index.py``; ``benchmarks/HISTORY.md``, twelfth pass).

:func:`paused_collector` switches automatic collection off for a block and
back on when the last concurrent block ends, so two threads pausing at once
never leave it off, nor switch it on under each other.  A process whose
collector was already off (a host's choice, or the CLI's for a question)
keeps it off.  Explicit ``gc.collect()`` calls still run.

The pause is process-wide: other threads (a service answering queries while
it reindexes) may make cyclic garbage meanwhile.  Long bulk work therefore
calls :func:`collect_when_due` now and then, which collects in full once per
:data:`COLLECT_PERIOD` seconds of a pause (~50 ms per 10 s in the writer).
"""

from __future__ import annotations

import contextlib
import gc
import threading
import time
from collections.abc import Iterator

__all__ = ["COLLECT_PERIOD", "collect_when_due", "paused_collector"]

COLLECT_PERIOD = 10.0
_lock = threading.Lock()
_pausers = 0
_restore = False
_last_collection = 0.0


@contextlib.contextmanager
def paused_collector() -> Iterator[None]:
    """Automatic cyclic collection off for the block (see the module doc)."""
    global _pausers, _restore, _last_collection
    with _lock:
        if _pausers == 0:
            _restore = gc.isenabled()
            gc.disable()
            _last_collection = time.monotonic()
        _pausers += 1
    try:
        yield
    finally:
        with _lock:
            _pausers -= 1
            if _pausers == 0 and _restore:
                gc.enable()


def collect_when_due() -> None:
    """During a pause, a full collection once per :data:`COLLECT_PERIOD`
    seconds (a bound on the cycles any thread makes while it lasts)."""
    global _last_collection
    now = time.monotonic()
    with _lock:
        if not _pausers or now - _last_collection < COLLECT_PERIOD:
            return
        _last_collection = now
    gc.collect()
