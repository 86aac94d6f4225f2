"""The package's logging default: quiet on stdout, standard ``logging`` underneath.

structlog's own default prints every event, debug included, on **stdout**,
which corrupts any protocol a host speaks there (an MCP server over stdio
first of all).  When the package logs its first event and nobody has
configured structlog yet, events are routed through the standard
:mod:`logging` module instead: a host that configures ``logging`` sees them
under the ``cleveragents.*`` logger names at the levels it chose; a host that
configures nothing gets Python's last-resort handler, warnings and errors on
stderr and nothing else.  A host (or an entry point such as the CLI) that
calls ``structlog.configure`` itself keeps full control.

structlog itself (~50 ms to import, a fifth of a CLI question) is imported
by the first event that will be emitted: :func:`get_logger` gives a
:class:`Logger` that, while structlog is not configured, drops an event its
standard ``logging`` logger would drop (exactly what the default's
``filter_by_level`` does) without importing anything.  The standard
loggers are looked up per event, never created at import (``dictConfig``
disables the loggers that exist when it runs).

One corner differs from configuring at import: a host that never
configures structlog but enters ``structlog.testing.capture_logs()`` before
the package's first event leaves structlog configured with its own
defaults (stdout) when the block ends, for its events and the package's.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Protocol

__all__ = ["Logger", "configure_on_first_event", "get_logger", "quiet_default"]

# An entry point's structlog configuration, run (instead of the default) by
# the first event emitted, if structlog is still unconfigured then.
_pending: Callable[[], None] | None = None
_resolving = threading.RLock()


def quiet_default() -> None:
    """Route structlog through :mod:`logging` unless structlog is already configured."""
    import structlog

    if structlog.is_configured():
        return
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            structlog.processors.format_exc_info,
            structlog.processors.KeyValueRenderer(key_order=["event"], sort_keys=True),
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )


def configure_on_first_event(configure: Callable[[], None]) -> None:
    """Run ``configure`` (a ``structlog.configure`` call) before the first
    event is emitted, not now; the standard ``logging`` levels the caller
    set decide meanwhile which events are emitted.  If structlog is already
    imported, ``configure`` runs now (a host, or an earlier configuration,
    may have set it up: the caller's must win, as an eager call's would)."""
    global _pending
    with _resolving:  # never between another thread's taking and applying it
        if "structlog" in sys.modules:
            _pending = None
            configure()
        else:
            _pending = configure


def _structlog() -> ModuleType:
    """structlog, configured (the entry point's pending configuration, else
    the quiet default, if nobody configured it)."""
    global _pending
    import structlog  # blocks until another thread's import of it is done

    with _resolving:
        if not structlog.is_configured():
            configure, _pending = _pending, None
            (configure or quiet_default)()
    return structlog


class _Bound(Protocol):
    """What the package calls on a structlog logger."""

    def log(self, level: int, event: str, **fields: object) -> None: ...
    def debug(self, event: str, **fields: object) -> None: ...
    def info(self, event: str, **fields: object) -> None: ...
    def warning(self, event: str, **fields: object) -> None: ...
    def error(self, event: str, **fields: object) -> None: ...


class Logger:
    """A structlog logger, imported on the first event that is emitted."""

    __slots__ = ("_name", "_real")

    def __init__(self, name: str) -> None:
        self._name = name
        self._real: _Bound | None = None

    def _at(self, level: int) -> _Bound | None:
        """The structlog logger, or ``None`` if an event at ``level`` is dropped."""
        module = sys.modules.get("structlog")
        configured = getattr(module, "is_configured", None)  # None: not imported, or mid-import
        if configured is None or not configured():
            # Unconfigured, structlog would route through this logger and
            # its filter_by_level; an entry point's pending configuration
            # filters at the level it set on the standard loggers.
            if not logging.getLogger(self._name).isEnabledFor(level):
                return None
            module = _structlog()
        if self._real is None:
            self._real = (module or _structlog()).get_logger(self._name)
        return self._real

    def log(self, level: int, event: str, **fields: object) -> None:
        """An event at the standard ``logging`` level ``level``."""
        if (real := self._at(level)) is not None:
            real.log(level, event, **fields)

    def debug(self, event: str, **fields: object) -> None:
        if (real := self._at(logging.DEBUG)) is not None:
            real.debug(event, **fields)

    def info(self, event: str, **fields: object) -> None:
        if (real := self._at(logging.INFO)) is not None:
            real.info(event, **fields)

    def warning(self, event: str, **fields: object) -> None:
        if (real := self._at(logging.WARNING)) is not None:
            real.warning(event, **fields)

    def error(self, event: str, **fields: object) -> None:
        if (real := self._at(logging.ERROR)) is not None:
            real.error(event, **fields)


def get_logger(name: str) -> Logger:
    """The package's logger ``name`` (see the module docstring)."""
    return Logger(name)
