"""Keep the ACMS indexes fresh: the maintenance entry point.

    python scripts/reindex.py [--data-dir DIR] [--json] [--log-level LEVEL]
                              [--project NAME]... [--resource ULID]... [--full]
                              [--verify | --rebuild] [--lock-timeout SECONDS]
                              [--profile local|remote] [--jobs N]

Default: every registered resource, incrementally (and the units of resources
no longer registered are deleted; a git resource git cannot list, e.g.
"dubious ownership", is named on stderr with the fix and makes the exit
status 1, while the other resources are still indexed).  ``--verify`` re-opens every index and
checks that catalog, text, vector and graph agree on each resource's units
(exit 1 on disagreement).  ``--rebuild`` builds fresh indexes beside the live
ones and swaps them in atomically.  ``--profile remote`` writes to the Milvus
and SPARQL servers the environment names (see
``cleveragents.application.remote_profile``); there, ``--full`` re-reads
everything (``--rebuild`` swaps local directories and is refused).  Without
``--profile``, ``$ACMS_PROFILE`` chooses, else ``local``.  SIGTERM stops a run
as Ctrl-C does (workers stopped, temporary files removed, the indexes
consistent), with one line on stderr and exit 143.  Exit codes: 0 ok,
1 failure, 2 bad usage, 130 interrupted, 143 terminated.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

from cleveragents.bootstrap import (
    ENTRY_PROFILES,
    entry_profile,
    lean_container_import,
    private_umask,
)
from cleveragents.cli.main import (
    EXIT_FAILURE,
    EXIT_OK,
    Output,
    UsageError,
    add_global_options,
    add_reindex_options,
    announce_lock_wait,
    check_rebuild_options,
    configure_logging,
    format_report,
    guarded,
    operations_for,
    reembed_reporter,
    report_failures,
    require_data_dir,
    sigterm_unwinds,
)

PROG = "reindex"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # noqa: ANN401 - never returns
        raise UsageError(f"{message} (see '{self.prog} --help')")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description=__doc__.split("\n")[0])
    add_global_options(parser)
    add_reindex_options(parser)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--verify", action="store_true", help="check the indexes agree; no writes")
    mode.add_argument("--rebuild", action="store_true", help="build fresh indexes and swap them in")
    parser.add_argument(
        "--profile",
        choices=ENTRY_PROFILES,
        default=None,
        help="local engines in the data directory, or the remote servers (ACMS_MILVUS_URI, ...) "
        "(default: $ACMS_PROFILE, else local)",
    )
    return parser


def operations(args: argparse.Namespace) -> Any:  # noqa: ANN401 - AcmsOperations, lazily imported
    """The operations of the chosen profile (``--profile``, else ``$ACMS_PROFILE``)."""
    profile = entry_profile(args.profile)
    if args.rebuild:
        check_rebuild_options(args, profile)
    require_data_dir(args)
    return operations_for(args, profile)


def progress_reporter(as_json: bool) -> tuple[Callable[[str, int, int], None], Callable[[], None]]:
    """A progress bar on a TTY, periodic plain lines on stderr otherwise."""
    if sys.stderr.isatty() and not as_json:
        from tqdm import tqdm

        bars: dict[str, Any] = {}

        def bar(resource_id: str, done: int, total: int) -> None:
            if resource_id not in bars:
                for old in bars.values():
                    old.close()
                bars[resource_id] = tqdm(total=total, desc=resource_id[:10], unit="file")
            bars[resource_id].update(done - bars[resource_id].n)

        def close() -> None:
            for b in bars.values():
                b.close()

        return bar, close

    last = [0.0]

    def line(resource_id: str, done: int, total: int) -> None:
        now = time.monotonic()
        if done == total or now - last[0] >= 2.0:
            last[0] = now
            print(f"{PROG}: {resource_id} {done}/{total} files", file=sys.stderr)

    return line, lambda: None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()

    def body() -> int:
        args = parser.parse_args(argv)
        configure_logging(args.log_level)
        out = Output(args.json)
        ops = operations(args)
        if args.verify:
            if args.project or args.resource or args.full or args.jobs is not None:
                raise UsageError("--verify checks every resource; it takes no other options")
            # It holds the reindex lock: indexes read mid-write disagree by design.
            announce_lock_wait(PROG, ops.data_dir, args.lock_timeout)
            problems = ops.verify(lock_timeout=args.lock_timeout)
            out.emit(
                {"ok": not problems, "problems": problems},
                lambda: (
                    "\n".join(
                        f"{p.resource_id} {p.index}: {p.missing} missing, {p.extra} extra "
                        f"(e.g. {p.sample})"
                        # A run stopped mid-write (SIGTERM, Ctrl-C, a crash) left
                        # it marked: its next reindex repairs it.
                        + (
                            " (a stopped run's; the next reindex repairs it)"
                            if getattr(p, "interrupted", False)
                            else ""
                        )
                        for p in problems
                    )
                    or "ok: catalog, text, vector and graph agree"
                ),
            )
            if problems:
                lost = {p.resource_id for p in problems if not getattr(p, "interrupted", False)}
                # Units of a resource this registry does not know (another
                # deployment's, on shared servers, or one removed): a plain
                # reindex prunes them; --resource would name an unknown one.
                known = {r.resource_id for r in ops.list_resources()}
                ours, strays = sorted(lost & known), lost - known
                named = "".join(f" --resource {rid}" for rid in ours) if len(ours) <= 5 else ""
                fixes = []
                if ours:
                    # The remote profile has no --rebuild: it swaps local directories.
                    remote = entry_profile(args.profile) == "remote"
                    every = "" if remote else " (or --rebuild, every resource)"
                    fixes.append(f"'reindex --full{named}' writes their units again{every}")
                if strays:
                    fixes.append(
                        f"{len(strays)} resource(s) not registered here hold units (removed "
                        "ones, or another deployment's on the same servers): a plain "
                        "'reindex' deletes them"
                    )
                fix = "; " + "; ".join(fixes) if fixes else ""
                print(
                    f"{PROG}: verify failed: {len(problems)} disagreement(s){fix}", file=sys.stderr
                )
                return EXIT_FAILURE
            return EXIT_OK
        announce_lock_wait(PROG, ops.data_dir, args.lock_timeout)
        progress, done = progress_reporter(args.json)
        try:
            if args.rebuild:
                report = ops.rebuild(
                    lock_timeout=args.lock_timeout, progress=progress, jobs=args.jobs
                )
            else:
                report = ops.reindex(
                    args.project,
                    args.resource,
                    full=args.full,
                    lock_timeout=args.lock_timeout,
                    progress=progress,
                    jobs=args.jobs,
                    reembed_progress=reembed_reporter(PROG),
                )
        finally:
            done()
        out.emit(report.as_dict(), lambda: format_report(report))
        return report_failures(PROG, report)

    def terminable() -> int:
        with sigterm_unwinds():  # SIGTERM unwinds as Ctrl-C does: see the function
            return body()

    private_umask()  # this process owns the data directory: owner-only files
    lean_container_import()  # an entry point: see the function
    return guarded(PROG, terminable)


if __name__ == "__main__":
    sys.exit(main())
