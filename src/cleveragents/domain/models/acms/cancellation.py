"""A call's cancellation, seen by the work it runs in another thread.

A service runs each tool call in a worker thread, and Python cannot stop a
thread; the work it started (a SPARQL worker process) would run on for its
whole time limit after the caller cancelled the call, hung up, or the
service was asked to stop.  The service runs the call inside
:func:`cancellable` with a :class:`CancelToken` and cancels the token when
the call is abandoned; long waits in the adapters (:func:`current_token`)
watch it and stop their work at once.

Pure Python: threads and a context variable, no engine.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["CancelToken", "cancel_all", "cancellable", "current_token"]


class CancelToken:
    """Set once, by any thread, when nobody waits for the call any more."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        """Mark the call cancelled (idempotent, from any thread)."""
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds; whether the call was cancelled."""
        return self._event.wait(timeout)


_current: contextvars.ContextVar[CancelToken | None] = contextvars.ContextVar(
    "acms_cancel_token", default=None
)
_live: set[CancelToken] = set()
_live_lock = threading.Lock()


def current_token() -> CancelToken | None:
    """The token of the call this thread runs, if it runs one."""
    return _current.get()


@contextmanager
def cancellable(token: CancelToken) -> Iterator[CancelToken]:
    """Run the block as a call that ``token`` (or :func:`cancel_all`) cancels."""
    reset = _current.set(token)
    with _live_lock:
        _live.add(token)
    try:
        yield token
    finally:
        with _live_lock:
            _live.discard(token)
        _current.reset(reset)


def cancel_all() -> None:
    """Cancel every call running inside :func:`cancellable` (the service is stopping)."""
    with _live_lock:
        tokens = list(_live)
    for token in tokens:
        token.cancel()
