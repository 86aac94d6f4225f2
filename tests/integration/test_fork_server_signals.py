"""The fork server of the planning workers ignores SIGTERM (a signal to the
writer's process group must not kill it while the writer waits for a
worker's pid), and importing its preload module anywhere else changes
nothing."""

from __future__ import annotations

import subprocess
import sys

from cleveragents.application.services.index_workers import FORK_SERVER_MODULE

_SIGTERM_BIT = 1 << (15 - 1)


def test_importing_the_preload_elsewhere_leaves_sigterm_alone() -> None:
    code = (
        f"import signal, {FORK_SERVER_MODULE}; "
        "print(signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "True", done.stderr


def test_the_fork_server_ignores_sigterm() -> None:
    """Read in a fresh interpreter (the fork server ends with its parent):
    the ``SigIgn`` mask of the fork server a pool's preloads start."""
    code = (
        "import multiprocessing\n"
        "from multiprocessing import forkserver\n"
        "ctx = multiprocessing.get_context('forkserver')\n"
        f"ctx.set_forkserver_preload([{FORK_SERVER_MODULE!r}])\n"
        "p = ctx.Process(target=len, args=((),)); p.start(); p.join()\n"
        "pid = forkserver._forkserver._forkserver_pid\n"
        "status = open(f'/proc/{pid}/status').read().splitlines()\n"
        "print(next(r for r in status if r.startswith('SigIgn:')).split()[1])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(done.stdout.split()[-1], 16) & _SIGTERM_BIT, done.stdout + done.stderr
