"""cleveragents layer.

Importing the package makes structlog quiet on stdout unless the host has
configured it (see :mod:`cleveragents._logging`).
"""

from cleveragents._logging import quiet_default as _quiet_default

_quiet_default()
