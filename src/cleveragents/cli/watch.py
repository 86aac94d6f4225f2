"""``acms watch``: keep the indexes following the files.

A writer process: it watches the location of every registered resource
(PyPI ``watchfiles``, inotify on Linux), gathers the changes of a short quiet
period (``--debounce``, default 0.2 s), then reindexes incrementally only the
resources that changed, under the data directory's reindex lock, so it never
races ``acms reindex`` or ``scripts/reindex.py``.  Resources registered or
removed while it runs are noticed within ``--rescan`` seconds, and a new one
is indexed by the end of the next ``--rescan`` (the watch of the new set goes
live first, then catches up).  An
incremental reindex reads only the files whose size or mtime changed, so a
saved file is searchable about debounce + its own indexing time after the
write.  Exit with SIGINT or SIGTERM; a reindex in progress stops where it is
(the next reindex or watch repairs it, as after ``acms reindex`` stopped).
A reindex that fails for a reason that passes (a remote server down, the
lock held past ``--lock-timeout``, git refusing a resource for a while) is
logged (``acms.watch.reindex_failed``) and retried, ever more slowly up to a
minute apart, until it succeeds (``acms.watch.recovered``): the watch goes on
(stopped while failing, it exits 1).  What only an operator repairs (a lost
index, another embedding dimension, a data directory of the other profile)
ends it, exit 1.

It uses the profile of ``$ACMS_PROFILE`` (default ``local``; ``remote``
writes to the servers the environment names).  Its log is JSON lines on
stderr, the libraries' records included (the watcher's own "N changes
detected" only at ``--log-level debug``).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from cleveragents._logging import get_logger

__all__ = ["indexed_change", "main", "resources_for"]

_log = get_logger("cleveragents.acms.watch")


def resources_for(changed: Iterable[str], roots: Mapping[str, str]) -> set[str]:
    """The resources whose location contains one of the ``changed`` paths
    (nested locations: every resource that contains the path)."""
    prepared = [(rid, os.path.join(os.path.realpath(root), "")) for rid, root in roots.items()]
    hit: set[str] = set()
    for path in changed:
        real = os.path.realpath(path)
        for rid, root in prepared:
            if real.startswith(root) or real == root[:-1]:
                hit.add(rid)
    return hit


# Under a ``.git``, only what changes what git lists: a nested repository
# appearing or going (its ``.git``) and the repository's own ignore rules.
_GIT_EVENTS = (os.sep + ".git", os.path.join(os.sep + ".git", "info", "exclude"))


def indexed_change(path: str, roots: Iterable[str]) -> bool:
    """Whether a change at ``path`` (under one of ``roots``, each ending in
    the separator) can change what a reindex lists or reads: anything but
    what the listing never enters (``SKIP_DIRS`` below the root, git's
    internals).  watchfiles' default filter also dropped editors' files
    (``notes~``, ``flycheck_util.py``, ``.#x``), which the reindex indexes,
    and every event under ``.git`` (a nested repository appearing or
    removed changes what git lists): a reviewer found both stale."""
    from cleveragents.application.services.resource_files import BINARY_EXTENSIONS, SKIP_DIRS

    rel = path
    for root in roots:
        if path.startswith(root):
            rel = path[len(root) :]
            break
    parts = rel.split(os.sep)
    if ".git" in parts:
        return path.endswith(_GIT_EVENTS)
    if os.path.splitext(parts[-1])[1].lower() in BINARY_EXTENSIONS:
        return False  # never read (vim's swap file, rewritten every few seconds)
    return not any(part in SKIP_DIRS for part in parts[:-1])


def _roots(ops: Any) -> dict[str, str]:  # noqa: ANN401 - AcmsOperations
    return {r.resource_id: r.location for r in ops.list_resources() if os.path.isdir(r.location)}


def run(
    ops: Any,  # noqa: ANN401 - AcmsOperations
    *,
    debounce: float,
    rescan: float,
    stop: threading.Event,
    data_dir: str | os.PathLike[str],
    lock_timeout: float = 60.0,
) -> bool:
    """Watch and reindex until ``stop`` is set; whether it stopped while its
    reindexes were failing (see :class:`_Retry`).  Changes inside
    ``data_dir`` (the indexes' own writes, when the data directory sits
    inside a watched resource) are ignored, or every reindex would trigger
    the next."""
    import watchfiles
    from watchfiles._rust_notify import WatchfilesRustInternalError

    own = os.path.join(os.path.realpath(data_dir), "")
    watched: list[str] = []  # the roots of the current watch, each ending in "/"

    def wanted(change: watchfiles.Change, path: str) -> bool:
        return indexed_change(path, watched) and not os.path.realpath(path).startswith(own)

    failures = 0  # watcher errors in a row
    retry = _Retry(debounce)
    while not stop.is_set():
        roots = retry.roots(ops, stop)
        if roots is None:
            continue  # the registry could not be read: retried after a wait
        if not roots:
            stop.wait(rescan)
            continue
        watched[:] = sorted({os.path.join(root, "") for root in roots.values()})
        _log.info("acms.watch.watching", resources=len(roots))
        # The file system watch is live from the generator's first step, not
        # before: a file saved between the last reindex and then would never
        # raise an event.  The first yield (a change, or the rescan timeout)
        # comes after the watch is live, so one incremental reindex of every
        # root there catches up on whatever changed before.
        caught_up = False
        changes_of = watchfiles.watch(
            *sorted(set(roots.values())),
            watch_filter=wanted,
            debounce=int(debounce * 1000),
            step=50,
            stop_event=stop,
            rust_timeout=int(rescan * 1000),
            yield_on_timeout=True,
            raise_interrupt=False,
        )
        while True:
            try:
                changes = next(changes_of)
            except StopIteration:
                break
            except WatchfilesRustInternalError as exc:
                # watchfiles cannot name a path that is not UTF-8 (or failed
                # otherwise) and drops the whole batch of changes.  Catch up
                # on every watched resource now (the reindex reads such names
                # as bytes), then watch again: the new watch catches up once
                # more when live.  An error that keeps coming is retried ever
                # more slowly (up to a minute), not in a tight loop.
                _log.warning("acms.watch.changes_lost", error=str(exc)[:200], retry=failures)
                retry.reindex(ops, set(roots), lock_timeout, stop)
                stop.wait(min(60.0, debounce * 2**failures))
                failures += 1
                break
            failures = 0
            touched = resources_for((path for _, path in changes or ()), roots)
            if not caught_up:
                caught_up = True
                touched = set(roots)
            touched |= retry.pending & set(roots)
            if touched:
                retry.reindex(ops, touched, lock_timeout, stop)
            now = retry.roots(ops, None)
            if now is not None and now != roots:
                break  # resources added or removed: watch the new set
    return retry.failures > 0 or retry.registry_failures > 0


class _Retry:
    """Reindexes that failed for a reason that passes (a remote server down
    or restarting, another reindex holding the lock, a git resource git
    refused for a moment), retried instead of ending the watch.

    Ending it left the index stale with nobody told but a log line: the
    changes of every later save were never indexed.  The failed resources
    (an exception, or the report's ``failed``) stay ``pending`` and join
    the next reindex (the next change, or the watch's rescan timeout),
    after a wait that doubles with each failure in a row, from the debounce
    (at least 1 s) up to a minute; from the third in a row the log line is
    an error.  A session the failure stopped half way left its dirty
    marker: the retry repairs it.

    What only an operator repairs (:class:`RepairNeededError`: a lost
    index, another dimension, the other profile's data directory) is not
    retried: it ends the watch, exit 1, as it always did.  The lock is
    waited for a second at a time, so that SIGTERM is not held up by
    another writer's lock for up to ``--lock-timeout`` (docker's stop
    timeout is 10 s): only a wait longer than ``--lock-timeout`` in all
    counts as a failure.
    """

    def __init__(self, debounce: float) -> None:
        self.base = max(1.0, debounce)
        self.failures = 0
        self.registry_failures = 0  # the registry unreadable, in a row
        self.pending: set[str] = set()
        self._busy_since: float | None = None

    def reindex(
        self,
        ops: Any,  # noqa: ANN401 - AcmsOperations
        touched: set[str],
        lock_timeout: float,
        stop: threading.Event,
    ) -> None:
        from cleveragents.domain.models.acms.errors import (
            BusyError,
            IndexUnavailableError,
            RepairNeededError,
        )

        try:
            _Stopping.reindexing = True
            try:
                report = ops.reindex(resources=sorted(touched), lock_timeout=min(lock_timeout, 1.0))
            finally:
                _Stopping.reindexing = False
        except RepairNeededError:
            raise
        except BusyError as exc:
            now = time.monotonic()
            self._busy_since = self._busy_since or now
            if now - self._busy_since < lock_timeout:
                self.pending = set(touched)
                _log.info("acms.watch.waiting_for_lock", resources=sorted(touched))
                stop.wait(0.5)
                return
            self._failed(touched, str(exc), stop)
            return
        except IndexUnavailableError as exc:
            self._failed(touched, str(exc), stop)
            return
        self._busy_since = None
        failed = {rid for rid in report.failed if rid in touched}
        if failed:
            self._failed(failed, "; ".join(report.failed[r] for r in sorted(failed)), stop)
            return
        if self.failures:
            _log.info("acms.watch.recovered", failures=self.failures)
        self.failures, self.pending = 0, set()
        _log.info(
            "acms.watch.reindexed", resources=sorted(touched), seconds=round(report.seconds, 3)
        )

    def roots(
        self,
        ops: Any,  # noqa: ANN401 - AcmsOperations
        stop: threading.Event | None,
    ) -> dict[str, str] | None:
        """The registered resources' roots; ``None`` when the registry cannot
        be read now (a full disk: "disk I/O error"), logged and, given
        ``stop``, waited out as a failed reindex is.  The watch ended, exit
        1, on the first such error (a reviewer found it on a full disk)."""
        from cleveragents.domain.models.acms.errors import (
            IndexUnavailableError,
            RepairNeededError,
        )

        try:
            found = _roots(ops)
        except RepairNeededError:
            raise
        except IndexUnavailableError as exc:
            if stop is None:  # between changes: the watch goes on as it is
                _log.warning("acms.watch.registry_unavailable", error=str(exc)[:300])
                return None
            self.registry_failures += 1
            self._wait_out(
                "acms.watch.registry_unavailable",
                self.registry_failures,
                stop,
                error=str(exc)[:300],
            )
            return None
        if self.registry_failures and stop is not None:
            _log.info("acms.watch.registry_recovered", failures=self.registry_failures)
            self.registry_failures = 0
        return found

    def _failed(self, resources: set[str], error: str, stop: threading.Event) -> None:
        self._busy_since = None
        self.failures += 1
        self.pending = set(resources)
        self._wait_out(
            "acms.watch.reindex_failed",
            self.failures,
            stop,
            resources=sorted(resources),
            error=error[:300],
        )

    def _wait_out(self, event: str, failures: int, stop: threading.Event, **fields: object) -> None:
        """Log the ``failures``-th failure in a row (an error from the third)
        and wait before the next try: from the debounce (at least 1 s),
        doubling with each failure, up to a minute."""
        wait = min(60.0, self.base * 2 ** (failures - 1))
        log = _log.error if failures >= 3 else _log.warning
        log(event, **fields, failures=failures, retry_in=wait)
        stop.wait(wait)


class _Stopping(KeyboardInterrupt):
    """SIGINT or SIGTERM while a reindex runs: it unwinds, as ``acms
    reindex`` does on either (the index store's marker makes the next run
    repair the stopped session).  It finished first, which took 20-30 s for
    3,000 files, past the 10 s ``docker stop`` waits before SIGKILL (a
    reviewer found it).  A KeyboardInterrupt, as ``acms reindex``'s
    Terminated: every ``except`` on the way that lets Ctrl-C through
    (``reraise_fatal``) lets it through, and none takes it for a failure to
    retry.  Not raised while a worker pool starts (see
    ``cli.main._inside_multiprocessing``): delivered again a moment later."""

    reindexing = False  # set by _Retry.reindex around the reindex (the main thread)
    raised = False  # once: a second signal must not break the unwinding


def _on_stop_signal(stop: threading.Event) -> Callable[[int, FrameType | None], None]:
    from cleveragents.cli.main import _inside_multiprocessing

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()
        if not _Stopping.reindexing or _Stopping.raised:
            return
        if _inside_multiprocessing(frame):
            again = threading.Timer(0.05, os.kill, (os.getpid(), signum))
            again.daemon = True
            again.start()
            return
        _Stopping.raised = True
        raise _Stopping

    return handler


_PROG = "acms watch"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the watcher until SIGINT/SIGTERM; exit 2 on bad usage."""
    from cleveragents.cli.main import (
        LOG_LEVELS,
        CommandParser,
        UsageError,
        add_lock_timeout_option,
        one_line,
        require_data_dir,
    )

    parser = CommandParser(prog=_PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--debounce", type=float, default=0.2, help="seconds of quiet (0.2)")
    parser.add_argument("--rescan", type=float, default=5.0, help="registry re-read (5 s)")
    add_lock_timeout_option(parser)
    parser.add_argument("--log-level", default="info", choices=LOG_LEVELS)
    try:
        args = parser.parse_args(argv)
        if not 0 <= args.debounce <= 60 or not 0.1 <= args.rescan <= 3600:
            parser.error("--debounce must be within 0..60 s and --rescan within 0.1..3600 s")
    except UsageError as exc:
        print(f"{_PROG}: error: {one_line(exc)}", file=sys.stderr)
        return 2
    from cleveragents.bootstrap import private_umask
    from cleveragents.cli.serve import configure_stderr_logging

    private_umask()  # it writes the data directory: owner-only files, as acms reindex
    configure_stderr_logging(args.log_level)
    if args.log_level != "debug":
        # One line per batch of changes ("2 changes detected"): the reindex
        # that follows logs acms.watch.reindexed, which says more.
        logging.getLogger("watchfiles").setLevel(logging.WARNING)
    from cleveragents.bootstrap import bootstrap

    data_dir = Path(args.data_dir or os.environ.get("ACMS_DATA_DIR") or "data")
    try:
        require_data_dir(args)
    except UsageError as exc:
        print(f"{_PROG}: error: {one_line(exc)}", file=sys.stderr)
        return 2
    try:
        ops = bootstrap(data_dir)
    except ValueError as exc:  # an unknown profile, or one the environment does not configure
        print(f"{_PROG}: error: {one_line(exc)}", file=sys.stderr)
        return 2
    stop = threading.Event()
    _Stopping.reindexing = _Stopping.raised = False  # a host may run the watch again
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _on_stop_signal(stop))
    try:
        failing = run(
            ops,
            debounce=args.debounce,
            rescan=args.rescan,
            stop=stop,
            data_dir=data_dir,
            lock_timeout=args.lock_timeout,
        )
    except _Stopping:
        _log.info("acms.watch.stopped_mid_reindex", repaired_by="the next reindex or watch")
        return 0
    except Exception as exc:
        print(f"{_PROG}: {one_line(exc)}", file=sys.stderr)
        return 1
    if failing:
        # A supervisor must not read "stopped cleanly" into a watch whose
        # every reindex was failing when it was stopped.
        print(
            f"{_PROG}: stopped while its reindexes failed (acms.watch.reindex_failed)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
