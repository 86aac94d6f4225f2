"""Imported in ``multiprocessing``'s fork server, as its first preload
(:class:`~cleveragents.application.services.index_workers.PlannerPool`).

The fork server starts the planning workers on the writer's request.  A
SIGTERM sent to the whole process group (GNU ``timeout``, ``kill -- -PGID``,
systemd) would kill it while the writer waits for the pid of a worker it
asked for: the writer then fails with ``EOFError`` instead of unwinding as
the SIGTERM asks.  So the fork server ignores SIGTERM, as
``multiprocessing``'s resource tracker does (SIGINT too, as soon as it
can: see ``index_workers._start_fork_server_deaf_to_ctrl_c``); it still ends with the writer
(its ``alive`` pipe reaches EOF), and SIGKILL still ends it.  The workers it
forks inherit the ignored SIGTERM and take it back
(``index_workers._init_worker``): the pool terminates them with it.

Imported anywhere else (a tool that imports every module), it changes
nothing: only a process whose stack runs the fork server's ``main`` ignores
SIGTERM.
"""

from __future__ import annotations

import os
import signal
import sys
from types import TracebackType


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


def _quiet_if_the_writer_left(
    kind: type[BaseException], value: BaseException, tb: TracebackType | None
) -> None:
    """The fork server's (and its children's) last word on an uncaught error.

    A child forked for a worker that the writer gave up on meanwhile (Ctrl-C
    while the pool started) fails to unpickle what the writer already
    removed (its semaphore: ``FileNotFoundError``) or finds the pipe closed;
    the writer has said "acms: interrupted", and a traceback under it says
    nothing more.  Anything else is printed as usual."""
    gone = EOFError | ConnectionError | FileNotFoundError | KeyboardInterrupt
    if isinstance(value, gone) and _only_multiprocessing(tb):
        return  # a worker's own code never ran: its start failed, not the worker
    sys.__excepthook__(kind, value, tb)


def _only_multiprocessing(tb: TracebackType | None) -> bool:
    """Whether every frame of ``tb`` is ``multiprocessing``'s own code (a
    worker's start), none the planner's: a worker that crashed is printed."""
    import multiprocessing

    directory = os.path.join(os.path.dirname(multiprocessing.__file__ or ""), "")
    while tb is not None:
        if not tb.tb_frame.f_code.co_filename.startswith(directory):
            return False
        tb = tb.tb_next
    return True


if _in_fork_server():
    sys.excepthook = _quiet_if_the_writer_left
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # Ctrl-C reaches the whole process group: the fork server ignores it
    # once its preloads are imported, but one arriving while they import
    # (numpy, the grammars: ~0.5 s) printed a traceback under the writer's
    # one line "acms: interrupted".  The writer handles it (its workers
    # ignore it too, see index_workers._init_worker).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
