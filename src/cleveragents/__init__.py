"""cleveragents layer.

The package's log events go through the standard :mod:`logging` module
unless the host configures structlog; structlog is imported by the first
event emitted (see :mod:`cleveragents._logging`), or now if the host has
already imported it.
"""

import sys as _sys

from cleveragents._logging import quiet_default as _quiet_default

if "structlog" in _sys.modules:
    _quiet_default()
