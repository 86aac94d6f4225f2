"""Imported only in ``multiprocessing``'s fork server, as its first preload
(:class:`~cleveragents.application.services.index_workers.PlannerPool`).

The fork server starts the planning workers on the writer's request.  A
SIGTERM sent to the whole process group (systemd's KillMode=control-group,
GNU ``timeout``, ``kill -- -PGID``) would kill it while the writer waits for
the pid of a worker it asked for: the writer then fails with ``EOFError``
instead of unwinding as the SIGTERM asks.  So the fork server ignores
SIGTERM, as ``multiprocessing``'s resource tracker does; it still ends with
the writer (its ``alive`` pipe reaches EOF), and SIGKILL still ends it.  The
workers it forks inherit the ignored SIGTERM and take it back
(``index_workers._init_worker``): the pool terminates them with it.
"""

from __future__ import annotations

import signal

signal.signal(signal.SIGTERM, signal.SIG_IGN)
