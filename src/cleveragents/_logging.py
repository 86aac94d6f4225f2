"""The package's logging default: quiet on stdout, standard ``logging`` underneath.

structlog's own default prints every event, debug included, on **stdout**,
which corrupts any protocol a host speaks there (an MCP server over stdio
first of all).  When the package is imported and nobody has configured
structlog yet, events are routed through the standard :mod:`logging` module
instead: a host that configures ``logging`` sees them under the
``cleveragents.*`` logger names at the levels it chose; a host that configures
nothing gets Python's last-resort handler, warnings and errors on stderr and
nothing else.  A host (or an entry point such as the CLI) that calls
``structlog.configure`` itself keeps full control.
"""

from __future__ import annotations

import structlog

__all__ = ["quiet_default"]


def quiet_default() -> None:
    """Route structlog through :mod:`logging` unless structlog is already configured."""
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
