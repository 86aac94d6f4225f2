"""Imported in ``multiprocessing``'s fork server, as its first preload
(:class:`~cleveragents.application.services.index_workers.PlannerPool`).

The fork server starts the planning workers on the writer's request.  A
SIGTERM sent to the whole process group (GNU ``timeout``, ``kill -- -PGID``,
systemd) would kill it while the writer waits for the pid of a worker it
asked for: the writer then fails with ``EOFError`` instead of unwinding as
the SIGTERM asks.  So the fork server ignores SIGTERM, as
``multiprocessing``'s resource tracker does; it still ends with the writer
(its ``alive`` pipe reaches EOF), and SIGKILL still ends it.  The workers it
forks inherit the ignored SIGTERM and take it back
(``index_workers._init_worker``): the pool terminates them with it.

Imported anywhere else (a tool that imports every module), it changes
nothing: only a process whose stack runs the fork server's ``main`` ignores
SIGTERM.
"""

from __future__ import annotations

import signal
import sys


def _in_fork_server() -> bool:
    """Whether this import runs inside ``multiprocessing.forkserver.main``."""
    frame = sys._getframe(1)
    while frame is not None:
        if (
            frame.f_code.co_name == "main"
            and frame.f_globals.get("__name__") == "multiprocessing.forkserver"
        ):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


if _in_fork_server():
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
