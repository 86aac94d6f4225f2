"""The ``acms`` command line: argument parsing and output only.

Every command goes through :class:`AcmsOperations`.  Exit codes: 0 success,
1 failure at run time, 2 bad usage or bad input, 141 when the reader of
stdout went away (``acms ... | head -1``: the shell's status for a process
killed by SIGPIPE, printed without a "Broken pipe" message).  A failure
prints one line on stderr and never a traceback (``--log-level debug`` adds
the traceback to the log).

Every string that came from a repository or a query is printed through
:func:`~cleveragents.cli.terminal.printable` (human output, error lines and
the readable log on a TTY); ``--json`` output is exact JSON that is also
terminal-safe.  Python warnings and stdlib ``logging`` records from the
engines become one structured log line each, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import logging
import math
import os
import signal
import sys
import threading
import time
import types
import warnings
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

from cleveragents._logging import configure_on_first_event, get_logger
from cleveragents.cli.terminal import json_text, printable
from cleveragents.domain.models.acms.backends import GraphResult, TextResult, VectorResult
from cleveragents.domain.models.acms.errors import (
    AcmsError,
    ConflictError,
    NotFoundError,
    QueryError,
    QueryTimeoutError,
)

__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_FAILURE",
    "EXIT_OK",
    "EXIT_TERMINATED",
    "EXIT_USAGE",
    "LOG_LEVELS",
    "CommandParser",
    "Terminated",
    "build_parser",
    "console",
    "main",
    "reembed_reporter",
    "sigterm_unwinds",
]

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
EXIT_BROKEN_PIPE = 128 + 13  # what a shell reports for a process killed by SIGPIPE
EXIT_TERMINATED = 128 + 15  # what a shell reports for a process killed by SIGTERM
_PROG = "acms"
DEFAULT_LOCK_TIMEOUT = 60.0


class UsageError(Exception):
    """Bad command-line usage (exit 2)."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the main thread is (:func:`sigterm_unwinds`).

    A ``KeyboardInterrupt``, so it unwinds exactly as Ctrl-C does: every
    ``with`` and ``finally`` on the way runs (the worker pool is shut down,
    temporary directories are removed, the index store's session ends).
    """


@contextlib.contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """While inside, SIGTERM (what docker and systemd send) raises
    :class:`Terminated` in the main thread; :func:`guarded` reports it in one
    line and exits 143.  Ctrl-C raises KeyboardInterrupt as it always does,
    but, as SIGTERM, not while a worker pool starts (delivered again a
    moment later).  A second signal while unwinding is ignored (the
    cleanup finishes; SIGKILL still ends the process).  Outside the main
    thread (an in-process caller), nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    retry: list[threading.Timer] = []
    waiting = threading.Event()  # a delivery again is due

    def deliver_again(signum: int) -> None:
        # Cleared before the kill: the handler it runs may land inside
        # multiprocessing again and must then be able to ask for another.
        # (Asking whether the timer thread was still alive lost the signal
        # when the handler ran before that thread ended: the reindex then
        # ran to its end, exit 0.)
        waiting.clear()
        os.kill(os.getpid(), signum)

    def terminate(signum: int, frame: types.FrameType | None) -> None:
        if _inside_multiprocessing(frame):
            # Mid-way through starting a worker (the main thread waits for the
            # fork server to report its pid): unwinding from here leaves that
            # worker unknown to the pool, which does not wait for it, and it
            # dies with a traceback once the pool's semaphores are gone.
            # Delivered again in a moment, from outside.  Ctrl-C too: it
            # raised there as well ("cannot join thread before it is
            # started", exit 1).
            if not waiting.is_set():
                waiting.set()
                retry[:] = [threading.Timer(0.05, deliver_again, (signum,))]
                retry[0].daemon = True
                retry[0].start()
            return
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if signum == signal.SIGINT:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a second SIGTERM
            raise KeyboardInterrupt
        raise Terminated

    previous = signal.signal(signal.SIGTERM, terminate)
    previous_int = signal.getsignal(signal.SIGINT)
    if previous_int is signal.default_int_handler:  # an ignored Ctrl-C stays ignored
        signal.signal(signal.SIGINT, terminate)
    try:
        yield
    finally:
        for timer in retry:
            timer.cancel()
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)


# A process pool starting its manager thread: unwound from there, the pool
# holds a thread that never reported it started, and its shutdown fails
# ("RuntimeError: cannot join thread before it is started", exit 1, where
# a signal means 143 or 130).
_POOL_STARTING = frozenset({"_start_executor_manager_thread", "_adjust_process_count"})


def _inside_multiprocessing(frame: types.FrameType | None) -> bool:
    """Whether the stack from ``frame`` runs code of the ``multiprocessing``
    package, or a process pool starting (see :data:`_POOL_STARTING`)."""
    package = sys.modules.get("multiprocessing")
    if package is None or package.__file__ is None:
        return False  # not imported: no frame of it
    directory = os.path.join(os.path.dirname(package.__file__), "")
    while frame is not None:
        code = frame.f_code
        if code.co_filename.startswith(directory):
            return True
        if code.co_name in _POOL_STARTING and code.co_filename.endswith(
            os.path.join("concurrent", "futures", "process.py")
        ):
            return True
        frame = frame.f_back
    return False


def check_rebuild_options(args: argparse.Namespace, profile: str = "local") -> None:
    """``--rebuild`` rebuilds every resource from nothing: it takes no
    selection and no ``--full``, and it swaps local directories, so the
    remote profile refuses it (what ``acms reindex`` and
    ``scripts/reindex.py`` both refuse, in the same words)."""
    if profile != "local":
        raise UsageError(
            f"--rebuild swaps local directories; the {profile} profile takes --full instead"
        )
    if args.project or args.resource or args.full:
        raise UsageError("--rebuild rebuilds every resource: drop --project, --resource and --full")


class CommandParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line: :class:`UsageError`."""

    # The arguments of the last parse (a subcommand's parser is called with
    # what follows its name): what the '-' hint looks at.
    _given: tuple[str, ...] = ()

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        CommandParser._given = tuple(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        # One line, not argparse's usage block.
        raise UsageError(f"{message}{self._dash_hint(message)} (see '{self.prog} --help')")

    def _dash_hint(self, message: str) -> str:
        """How to pass a query or path that begins with '-' (``-x``,
        ``-rf.py``): argparse takes it for an unknown option and says only
        that the query is missing."""
        if not message.startswith(("the following arguments are required", "unrecognized")):
            return ""
        given = self._given[: self._given.index("--")] if "--" in self._given else self._given
        known = self._option_string_actions
        for token in given:
            name = token.split("=", 1)[0]
            # One dash: "--x" is more likely a mistyped option than a query.
            dashed = len(token) > 1 and token[0] == "-" and token[1] != "-"
            if dashed and not token[1].isdigit() and not any(o.startswith(name) for o in known):
                example = f" ({self.prog} --project P -- {token})" if " " in self.prog else ""
                return (
                    f"; {token!r} is taken for an option: put a query or path that "
                    f"begins with '-' after '--', the options before it{example}"
                )
        return ""


_Parser = CommandParser
LOG_LEVELS = ("debug", "info", "warning", "error")


def add_global_options(parser: argparse.ArgumentParser, *, suppress: bool = False) -> None:
    """``--data-dir``, ``--json`` and ``--log-level`` (shared with scripts/reindex.py).

    With ``suppress`` the options take no default, so a subcommand accepts them
    too (``acms search text X --json``) without overriding the top level.
    """

    def default(value: object) -> object:
        return argparse.SUPPRESS if suppress else value

    parser.add_argument(
        "--data-dir",
        type=_data_dir_argument,
        default=default(None),
        help="data directory (default: $ACMS_DATA_DIR, else ./data)",
    )
    parser.add_argument(
        "--json", action="store_true", default=default(False), help="JSON output on stdout"
    )
    parser.add_argument(
        "--log-level",
        default=default("warning"),
        choices=LOG_LEVELS,
        help="log level for the structured log on stderr (default: warning)",
    )


def _data_dir_argument(value: str) -> Path:
    """``--data-dir``'s value: an empty one (a variable that expanded to
    nothing) would be the working directory, a source tree perhaps."""
    if not value.strip():
        raise argparse.ArgumentTypeError("the data directory must not be empty")
    return Path(value)


def add_reindex_options(parser: argparse.ArgumentParser) -> None:
    """The options of ``acms reindex`` (shared with scripts/reindex.py)."""
    parser.add_argument("--project", action="append", default=[], metavar="NAME")
    parser.add_argument("--resource", action="append", default=[], metavar="ULID")
    parser.add_argument("--full", action="store_true", help="re-read and re-index every file")
    add_lock_timeout_option(parser)
    parser.add_argument(
        "--jobs",
        type=_jobs,
        default=None,
        metavar="N",
        help="worker processes that parse, chunk and embed (default: one per core; "
        "1: in this process)",
    )


def add_lock_timeout_option(parser: argparse.ArgumentParser) -> None:
    """``--lock-timeout SECONDS``: how long a writer waits for the data
    directory's reindex lock (a finite number >= 0; default 60)."""
    parser.add_argument(
        "--lock-timeout",
        type=lock_timeout,
        default=DEFAULT_LOCK_TIMEOUT,
        metavar="SECONDS",
        help="how long to wait for another reindex to finish (default: 60; 0: do not wait)",
    )


def lock_timeout(raw: str) -> float:
    """A lock timeout: a finite number of seconds, 0 or more."""
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(
            f"must be a finite number of seconds, 0 or more, not {raw!r}"
        )
    return value


def _jobs(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--jobs must be a positive integer, not {raw!r}"
        ) from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"--jobs must be a positive integer, not {raw!r}")
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {value}")
    return value


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {value}")
    return value


def _count_option(parser: argparse.ArgumentParser, default: int) -> None:
    """How many results, spelt the same in every search mode: ``--max-results``
    as the tools name it, ``--top-k`` as the vector Protocol does."""
    parser.add_argument(
        "--max-results",
        "--top-k",
        dest="max_results",
        type=_positive,
        default=default,
        metavar="N",
        help=f"how many results (default {default})",
    )


def _scope_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("scope (at least one)")
    group.add_argument("--project", action="append", default=[], metavar="NAME")
    group.add_argument("--resource", action="append", default=[], metavar="ULID")


def _text_options(parser: argparse.ArgumentParser, *, query_language: bool = True) -> None:
    """``--syntax``, ``--path``, ``--lang``; without ``query_language`` (hybrid
    search, plain only) ``--syntax`` is not offered in the help, and
    ``tantivy`` is refused with the reason."""
    parser.add_argument(
        "--syntax",
        choices=("plain", "tantivy"),
        default="plain",
        help=(
            "plain (default): any text, read as words; tantivy: the query language "
            "(fields content:, path:, symbol:, lang:, phrases, AND/OR/NOT, prefixes)"
        )
        if query_language
        else argparse.SUPPRESS,
    )
    parser.add_argument(
        "--path",
        metavar="GLOB",
        help="only files matching GLOB ('*' within a path segment, '**' across: "
        "'pkg/**/*.py'; '?' one character; a trailing '/' means everything below; "
        "'{a,b}' alternatives: '**/*.{ts,tsx}'; no [...] classes)",
    )
    parser.add_argument("--lang", metavar="NAME", help="only units of a language (python)")


def _budget_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--budget",
        type=_positive,
        default=8000,
        metavar="CHARS",
        help="the most characters the JSON answer may take (8000)",
    )


def _secret_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--allow-secret-pattern",
        action="append",
        default=[],
        metavar="GLOB",
        help="let files matching GLOB through the secret deny-list (repeatable)",
    )
    parser.add_argument(
        "--no-secret-filter",
        action="store_true",
        help="index secret files too (.env, *.pem, id_rsa, ...): the deny-list is off",
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``acms`` argument parser."""
    parser = _Parser(prog=_PROG, description="ACMS backends: index projects and query them.")
    add_global_options(parser)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    project = commands.add_parser("project", help="manage projects").add_subparsers(
        dest="action", required=True, parser_class=_Parser
    )
    project.add_parser("add", help="create a project").add_argument("name")
    project.add_parser("list", help="list projects")
    project.add_parser("remove", help="delete a project").add_argument("name")

    resource = commands.add_parser("resource", help="manage resources").add_subparsers(
        dest="action", required=True, parser_class=_Parser
    )
    add = resource.add_parser("add", help="register a directory and link it to a project")
    add.add_argument("path")
    add.add_argument("--project", required=True, metavar="NAME")
    add.add_argument("--type", choices=["git-checkout", "directory"], default=None)
    add.add_argument(
        "--force",
        action="store_true",
        help="register even if the path is, is inside or contains a resource of the project",
    )
    _secret_options(add)
    secrets = resource.add_parser(
        "secrets",
        help="replace a resource's secret override (no option: the default deny-list)",
    )
    secrets.add_argument("resource_id", metavar="ULID")
    _secret_options(secrets)
    listing = resource.add_parser("list", help="list resources")
    listing.add_argument("--project", metavar="NAME")
    remove = resource.add_parser("remove", help="forget a resource and delete its units")
    remove.add_argument("resource_id", metavar="ULID")
    add_lock_timeout_option(remove)

    reindex = commands.add_parser("reindex", help="bring the indexes up to date")
    add_reindex_options(reindex)
    reindex.add_argument(
        "--rebuild",
        action="store_true",
        help="build fresh indexes of every resource and swap them in (e.g. after a change "
        "of embedder dimension)",
    )

    search = commands.add_parser("search", help="search text or vectors").add_subparsers(
        dest="kind", required=True, parser_class=_Parser
    )
    text = search.add_parser("text", help="BM25 full-text search")
    text.add_argument("query")
    _count_option(text, 20)
    _text_options(text)
    _scope_options(text)
    vector = search.add_parser("vector", help="similarity search (embeds TEXT)")
    vector.add_argument("text")
    _count_option(vector, 20)
    _scope_options(vector)
    hybrid = search.add_parser("hybrid", help="text and vector rankings fused (RRF)")
    hybrid.add_argument("query")
    _count_option(hybrid, 10)
    _text_options(hybrid, query_language=False)
    _budget_option(hybrid)
    _scope_options(hybrid)

    read = commands.add_parser(
        "read", help="an indexed file or chunk by URI (or a path in one resource), numbered"
    )
    read.add_argument("uri")
    read.add_argument("--lines", metavar="A-B", help="a line range, e.g. 10-40")
    _budget_option(read)
    _scope_options(read)
    context = commands.add_parser("context", help="the best snippets for a task, in a budget")
    context.add_argument("task")
    _budget_option(context)
    _scope_options(context)
    symbols = commands.add_parser("symbols", help="the definitions of a file")
    symbols.add_argument(
        "path", help="a file's path (relative to a resource's root, or absolute inside one) or URI"
    )
    _budget_option(symbols)
    _scope_options(symbols)
    for command, argument, says in (
        ("callers", "target", "who calls NAME (or a symbol's URI, or PATH#sym=NAME)"),
        ("callees", "source", "what NAME (or a symbol's URI, or PATH#sym=NAME) calls"),
    ):
        walk = commands.add_parser(command, help=says)
        walk.add_argument(argument, metavar="NAME|URI", help=_SYMBOL_HELP)
        _budget_option(walk)
        _scope_options(walk)

    sparql = commands.add_parser("sparql", help="SPARQL over the in-scope graphs")
    sparql.add_argument("query")
    sparql.add_argument(
        "--results",
        action="store_true",
        help="answer any SELECT (any variables), ASK or CONSTRUCT as SPARQL 1.1 JSON results",
    )
    _scope_options(sparql)
    triples = commands.add_parser("triples", help="triples of one subject")
    triples.add_argument("subject")
    _scope_options(triples)
    traverse = commands.add_parser("traverse", help="breadth-first walk from a node")
    traverse.add_argument("start")
    traverse.add_argument("--depth", type=_non_negative, default=2, metavar="N")
    traverse.add_argument(
        "--direction",
        choices=["out", "in", "both"],
        default="out",
        help="out: what the node points at (default); in: what points at it "
        "(who imports, calls or contains it); both",
    )
    traverse.add_argument(
        "--predicate",
        action="append",
        default=None,
        metavar="NAME",
        help="follow only these edges: a UKO name (imports, calls, defines, contains, ...) "
        "or a full IRI (repeatable)",
    )
    _scope_options(traverse)

    commands.add_parser("status", help="resources, unit counts and sizes on disk")
    for leaf in _leaves(parser):
        if leaf is not parser:
            add_global_options(leaf, suppress=True)
    # The long-lived services take options of their own and are run before
    # this parser (`_service_call`), global options given before them passed
    # on; they are listed here for --help and the invalid-choice message.
    for name, summary in (
        ("serve", "the query service for agent hosts: MCP (stdio or HTTP) and a JSON API"),
        ("watch", "reindex resources as their files change"),
    ):
        service = commands.add_parser(
            name, help=f"{summary} (see 'acms {name} --help')", add_help=False
        )
        service.add_argument("options", nargs=argparse.REMAINDER, action=_ServiceFirst)
    return parser


class _ServiceFirst(argparse.Action):
    """A service reached through this parser (`_service_call` passed it by:
    something before it is not a global option): say how it is called."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        name = parser.prog.rsplit(" ", 1)[-1]
        parser.error(
            f"'{name}' takes only --data-dir and --log-level before it: "
            f"acms [--data-dir DIR] [--log-level LEVEL] {name} ..."
        )


SERVICES = ("serve", "watch")
_NO_JSON = {
    "serve": "its stdout carries MCP messages, or nothing with --http",
    "watch": "it prints nothing on stdout; its log on stderr is JSON lines",
}


def _service_call(args: Sequence[str]) -> tuple[str, list[str]] | None:
    """``(service, its arguments)`` when ``args`` run ``serve`` or ``watch``,
    perhaps after global options (``acms --data-dir D watch``): those are
    passed on, before the service's own (which win when given twice).

    Raises:
        UsageError: an option before the service that it cannot take
            (``--json``: a service prints no results).
    """
    if args[:1] in (["serve"], ["watch"]):
        return args[0], list(args[1:])
    if not any(arg in SERVICES for arg in args):
        return None
    front = _Parser(prog=_PROG, add_help=False)
    add_global_options(front)
    front.set_defaults(log_level=None)
    front.add_argument("command", nargs="?")
    front.add_argument("rest", nargs=argparse.REMAINDER)
    try:
        known, extras = front.parse_known_args(list(args))
    except UsageError:
        return None  # the full parser says what is wrong
    name = known.command
    if name not in SERVICES or "-h" in extras or "--help" in extras:
        return None
    if extras:
        raise UsageError(f"unrecognized arguments: {' '.join(extras)} (see 'acms --help')")
    if known.json:
        raise UsageError(f"--json does not apply to '{name}': {_NO_JSON[name]}")
    passed = [] if known.data_dir is None else ["--data-dir", str(known.data_dir)]
    passed += [] if known.log_level is None else ["--log-level", known.log_level]
    return name, passed + list(known.rest)


def _leaves(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return [parser]
    return [leaf for child in subs[0].choices.values() for leaf in _leaves(child)]


_cli_log = get_logger("cleveragents.acms.cli")


def configure_logging(level: str) -> None:
    """structlog to stderr: JSON lines, or readable output on a TTY.

    Python warnings and stdlib ``logging`` records (rdflib logs a traceback
    for an ill-typed literal) are routed into the same log, one line each,
    without the traceback.  structlog is configured (and imported: ~50 ms)
    by the first event at ``level`` or above; a question that logs nothing
    never imports it.
    """
    numeric = getattr(logging, level.upper())
    on_tty = sys.stderr.isatty()

    def configure() -> None:
        import structlog

        renderer: Any = (
            structlog.dev.ConsoleRenderer(colors=False)
            if on_tty
            else structlog.processors.JSONRenderer()
        )
        processors: list[Any] = [
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.processors.format_exc_info,
        ]
        if on_tty:
            processors.append(_printable_values)  # JSON lines escape on their own
        processors.append(renderer)
        structlog.configure(
            processors=processors,
            wrapper_class=structlog.make_filtering_bound_logger(numeric),
            logger_factory=structlog.PrintLoggerFactory(sys.stderr),
            cache_logger_on_first_use=False,
        )

    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _OneLineHandler)]:
        root.removeHandler(handler)
    root.addHandler(_OneLineHandler())
    root.setLevel(numeric)  # what is emitted until structlog is configured
    configure_on_first_event(configure)
    warnings.showwarning = _show_warning


def _printable_values(
    _logger: object, _method: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """Escape control characters in every value of a log event (console output)."""
    return {
        key: printable(value) if isinstance(value, str) else value for key, value in event.items()
    }


class _OneLineHandler(logging.Handler):
    """Turns a stdlib ``logging`` record into one structlog line, no traceback."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = one_line(record.getMessage())
            fields: dict[str, Any] = {"logger": record.name, "message": message}
            if record.exc_info and record.exc_info[1] is not None:
                exc = record.exc_info[1]
                fields["error"] = f"{type(exc).__name__}: {one_line(exc)}"
            _cli_log.log(record.levelno, "cli.library_log", **fields)
        except BrokenPipeError:
            raise
        except Exception:  # a logging handler must never raise into the caller
            self.handleError(record)


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """``warnings.showwarning`` for the CLI: one log line, no source line."""
    _cli_log.warning(
        "cli.warning",
        category=category.__name__,
        message=one_line(message),
        where=f"{os.path.basename(filename)}:{lineno}",
    )


def data_dir_of(args: argparse.Namespace) -> Path:
    """``--data-dir``, else ``$ACMS_DATA_DIR``, else ``./data``."""
    return Path(args.data_dir or os.environ.get("ACMS_DATA_DIR") or "data")


def require_data_dir(args: argparse.Namespace) -> None:
    """Refuse a data directory that does not exist (only ``project add`` and
    ``resource add`` make one).

    A mistyped ``--data-dir``, or ``./data`` of another working directory:
    made here, a query would answer "no project" and a reindex "resources:
    0" (exit 0, from cron too) as if the data were gone.

    Raises:
        UsageError: naming the path.
    """
    if not data_dir_of(args).is_dir():
        raise UsageError(
            f"no data directory at {printable(os.path.abspath(data_dir_of(args)))} "
            "(is --data-dir or ACMS_DATA_DIR the one you indexed? "
            "'acms project add NAME' makes one)"
        )


def operations_for(args: argparse.Namespace, profile: str | None = None) -> Any:  # noqa: ANN401 - AcmsOperations, lazily imported
    """The operations over the chosen data directory, with the engines of
    ``profile`` (default ``$ACMS_PROFILE``, else ``local``)."""
    from cleveragents.bootstrap import bootstrap

    return bootstrap(data_dir_of(args), profile=profile)


def announce_lock_wait(prog: str, data_dir: Path, timeout: float) -> None:
    """One stderr line when another writer holds the data directory's reindex
    lock, before this one waits up to ``timeout`` seconds for it (a look, not
    a hold: the writer then takes the lock itself)."""
    if timeout <= 0:
        return  # no wait: the writer fails at once, saying so
    from cleveragents.domain.models.acms.errors import BusyError
    from cleveragents.infrastructure.acms.reindex_lock import ReindexLock

    try:
        with ReindexLock(data_dir, timeout=0):
            return
    except BusyError:
        _err(
            f"{prog}: another reindex holds {printable(str(data_dir))}; "
            f"waiting up to {timeout:g} s for it to finish"
        )


# ---------------------------------------------------------------- output


class Output:
    """Writes human text or JSON to stdout."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json

    def emit(self, data: object, human: Callable[[], str]) -> None:
        """Print ``data`` as JSON, or ``human()`` as text.

        The formatters escape each field from a repository or a query with
        :func:`printable`; each line is passed through it once more here, so a
        field a formatter missed still cannot drive the terminal.
        """
        if self.as_json:
            print(json_text(data, default=_jsonable))
        else:
            text = human()
            if text:
                print("\n".join(printable(line) for line in text.split("\n")))


def _jsonable(value: object) -> object:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, Path | frozenset | set):
        return sorted(value) if not isinstance(value, Path) else str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _snippet(content: str, width: int = 100) -> str:
    for line in content.splitlines():
        if line.strip():
            line = line.strip()
            return printable(line if len(line) <= width else line[: width - 1] + "…")
    return ""


def _hits(results: Sequence[TextResult | VectorResult], query: str = "") -> str:
    """Each hit with the lines that match the query (a line of context each),
    numbered; the chunk's first line when none does."""
    from cleveragents.application.services.agent_session import matching_lines, query_terms

    if not results:
        return "no results"
    terms = query_terms(query)
    out = []
    for r in results:
        m = r.metadata
        where = f"{m.get('path', '?')}:{m.get('start_line', '?')}-{m.get('end_line', '?')}"
        out.append(f"{r.score:.3f}  {printable(where)}  {printable(r.uko_uri)}")
        try:
            start = int(m.get("start_line", "1"))
        except ValueError:
            start = 1
        shown = matching_lines(r.content, start, terms, max_lines=4) if terms else []
        if shown:
            out += [f"  {n['line']:>6}  {printable(n['text'])}{_cut_mark(n)}" for n in shown]
            # Lines that match and did not fit in four: said, not dropped
            # (a reviewer found them silently left out).
            seen = {n["line"] for n in shown}
            more = sum(
                1
                for i, line in enumerate(r.content.split("\n"))
                if start + i not in seen and terms & query_terms(line)
            )
            if more:
                plural = "s" if more > 1 else ""
                out.append(f"          … {more} more matching line{plural} (acms read the URI)")
        else:
            out.append(f"         {_snippet(r.content)}")
    return "\n".join(out)


def _bindings_text(answer: dict[str, Any]) -> str:
    if "boolean" in answer:
        return "true" if answer["boolean"] else "false"
    names = answer["head"]["vars"]
    rows = answer["results"]["bindings"]
    lines = ["  ".join(printable(n) for n in names)]
    lines += [
        "  ".join(printable(row[n]["value"]) if n in row else "-" for n in names) for row in rows
    ]
    return "\n".join(lines) if rows else "no rows"


def _graph(result: GraphResult) -> str:
    lines = [f"{printable(s)}  {printable(p)}  {printable(o)}" for s, p, o in result.triples]
    if "boolean" in result.metadata:
        lines.insert(0, printable(result.metadata["boolean"]))
    return "\n".join(lines) if lines else "no triples"


# ---------------------------------------------------------------- commands


def run(args: argparse.Namespace, out: Output) -> int:
    """Dispatch one parsed command."""
    from cleveragents.bootstrap import entry_profile

    profile = entry_profile()  # before anything is opened: a bad one is refused first
    command = args.command
    if command == "reindex" and args.rebuild:
        check_rebuild_options(args, profile)
    if command == "sparql" and args.results and profile != "local":
        raise UsageError(
            f"sparql --results needs the local profile (ACMS_PROFILE is {profile}): the "
            "SPARQL endpoint adapter answers triples only (SELECT ?s ?p ?o, without --results)"
        )
    if command in _READING_COMMANDS or (
        command in ("project", "resource") and args.action != "add"
    ):
        require_data_dir(args)
    ops = operations_for(args, profile)
    if command == "project":
        return _project(ops, args, out)
    if command == "resource":
        return _resource(ops, args, out)
    if command == "reindex":
        announce_lock_wait(_PROG, ops.data_dir, args.lock_timeout)
        if args.rebuild:
            report = ops.rebuild(lock_timeout=args.lock_timeout, jobs=args.jobs)
        else:
            report = ops.reindex(
                args.project,
                args.resource,
                full=args.full,
                lock_timeout=args.lock_timeout,
                jobs=args.jobs,
                reembed_progress=reembed_reporter(_PROG),
            )
        out.emit(report.as_dict(), lambda: format_report(report))
        return report_failures(_PROG, report)
    if command == "status":
        status = {"profile": profile, **ops.status()}
        if profile != "local":
            # Only the catalog and the registry are on this disk; the index
            # directories of the local profile are empty here.
            sizes = status["bytes_on_disk"]
            status["bytes_on_disk"] = {k: v for k, v in sizes.items() if k not in _ENGINE_DIRS}
        out.emit(status, lambda: _status(status))
        if status.get("loose_modes"):
            loose = status["loose_modes"]
            print(
                f"{_PROG}: warning: {len(loose)} path(s) in the data directory are readable "
                f"by others (chmod go-rwx): {', '.join(loose[:5])}",
                file=sys.stderr,
            )
        unregistered = status.get("unregistered") or []
        if unregistered and not status["resources"] and not status["projects"]:
            print(
                f"{_PROG}: warning: the registry lists no projects while the indexes hold "
                f"{len(unregistered)}: if registry.sqlite3 was lost or replaced, restore it "
                "from a backup (a reindex refuses to drop them all)",
                file=sys.stderr,
            )
        elif unregistered:
            print(
                f"{_PROG}: warning: {len(unregistered)} indexed resource(s) are not in the "
                f"registry (the next reindex drops their units): {', '.join(unregistered[:5])}",
                file=sys.stderr,
            )
        return EXIT_OK
    if command in _SESSION_COMMANDS or (command == "search" and args.kind == "hybrid"):
        return _session_command(ops, args, out)
    view = ops.view(ops.scope(args.project, args.resource))
    if command == "search" and args.kind == "text":
        if args.lang is not None:
            from cleveragents.application.services.chunking import check_language
            from cleveragents.domain.models.acms.text_query import text_options

            # A malformed name first, as the engine checks it; then an unknown
            # one, which would match nothing, silently.
            lang = text_options(args.syntax, args.path, args.lang).lang
            check_language(lang or "")
        results: Sequence[Any] = view.search(
            args.query,
            max_results=args.max_results,
            syntax=args.syntax,
            path=args.path,
            lang=args.lang,
        )
        out.emit(results, lambda: _hits(results, args.query))
    elif command == "search":
        embedding = ops.embed_query(args.text, view.scope)
        results = view.similarity_search(embedding, top_k=args.max_results)
        out.emit(results, lambda: _hits(results, args.text))
    else:
        if command == "sparql" and args.results:
            answer = ops.sparql_results(args.query, view.scope)
            print(json_text(answer) if out.as_json else _bindings_text(answer))
            return EXIT_OK
        if command == "sparql":
            try:
                graph = view.sparql_query(args.query)
            except QueryError as exc:
                if "exactly three variables" not in str(exc) or profile != "local":
                    raise  # (--results needs the local engines)
                raise QueryError(f"{exc}; --results answers any SELECT, ASK or CONSTRUCT") from None
        else:
            # A file path stands for its node in each in-scope resource that
            # indexes it; anything else that is not an IRI is refused (see
            # AgentSession.graph_nodes), never answered with "no triples".
            from cleveragents.application.services.agent_session import (
                predicate_iris,
                union_graphs,
                walk_nodes,
            )

            given = args.subject if command == "triples" else args.start
            chosen = None if command == "triples" else predicate_iris(args.predicate)
            nodes = ops.agent_session(args.project, args.resource).graph_nodes(given)
            if command == "triples":
                graph = union_graphs((view.get_triples(n) for n in nodes), ordered=True)
            else:
                graph = walk_nodes(
                    view,
                    given,
                    nodes,
                    depth=args.depth,
                    direction=args.direction,
                    predicates=chosen,
                )
        out.emit(graph, lambda: _graph(graph))
    return EXIT_OK


_SYMBOL_HELP = (
    "a bare name; a symbol's URI; or a file path (relative to a resource's root, or "
    "absolute inside one) with #sym=QUALIFIED_NAME"
)
_SESSION_COMMANDS = ("read", "context", "symbols", "callers", "callees")
# Refused where there is no data directory, as are the project and resource
# actions but ``add``.  (``status`` is not: on a new deployment it shows the
# empty data directory and, with the remote profile, whether the servers
# answer.)
_READING_COMMANDS = frozenset(
    {"search", "sparql", "triples", "traverse", "reindex", "status", *_SESSION_COMMANDS}
)


def _session_command(ops: Any, args: argparse.Namespace, out: Output) -> int:  # noqa: ANN401
    """The commands answered by the agent session: the same answers as the
    service's tools (``acms serve``), as JSON with ``--json``."""
    from cleveragents.application.services.agent_session import render

    ops.scope(args.project, args.resource)  # a scope is required, as for every query
    session = ops.agent_session(args.project, args.resource)
    command, budget = args.command, args.budget
    if command == "search":
        answer = session.search(
            args.query,
            max_results=args.max_results,
            budget=budget,
            syntax=args.syntax,
            path=args.path,
            lang=args.lang,
        )
    elif command == "read":
        first = last = None
        if args.lines:
            a, _, b = args.lines.partition("-")
            if not (a.isdigit() and b.isdigit()):
                raise ValueError("--lines must look like 10-40")
            first, last = int(a), int(b)
        answer = session.read(args.uri, start_line=first, end_line=last, budget=budget)
    elif command == "context":
        answer = session.context(args.task, budget=budget)
    elif command == "symbols":
        answer = session.symbols(args.path, budget=budget)
    elif command == "callers":
        answer = session.callers(args.target, budget=budget)
    else:
        answer = session.callees(args.source, budget=budget)
    if out.as_json:
        # Exactly the service's compact answer, so --budget bounds what is printed.
        print(render(answer))
    else:
        out.emit(answer, lambda: _session_text(answer))
    return EXIT_OK


def _session_text(answer: dict[str, Any]) -> str:
    from cleveragents.domain.models.acms.uko import resource_id_of

    tool, rows = answer["tool"], answer["results"]
    lines: list[str] = []
    # Rows of several resources (one path in each): each line names its
    # resource, or the same path of two resources reads as one file.
    several = tool in ("symbols", "callers") and len({resource_id_of(r["uri"]) for r in rows}) > 1
    target = str(answer.get("target", ""))
    qualified = "." in target.rsplit("sym=", 1)[-1]
    for r in rows:
        before = len(lines)
        if tool in ("search", "context"):
            where = f"{r['path']}:{r['start_line']}-{r['end_line']}"
            lines.append(f"{r['score']:.3f}  {printable(where)}  {printable(r['uri'])}")
            lines += [
                f"  {n['line']:>6}  {printable(n['text'])}{_cut_mark(n)}"
                for n in r.get("lines", [])
            ]
            if r.get("lines_cut"):  # the budget took some of the hit's lines
                lines.append(f"  … {r['lines_cut']} more lines (raise --budget)")
        elif tool == "read":
            lines.append(f"{r['line']:>6}  {printable(r['text'])}{_cut_mark(r)}")
        elif tool == "symbols":
            span = f"{r.get('line', '?')}-{r.get('end_line', '?')}"
            sig = r.get("signature") or r.get("name", "")
            lines.append(f"{span:>11}  {r.get('kind', '?'):<11}  {printable(sig)}")
        elif tool == "callers":
            at = ",".join(map(str, r["lines"])) or "?"
            who = r["caller"] or "(module level)"
            # Asked for Class.method, a call of x.method() may be another's.
            maybe = "  (by name)" if r.get("by_name") and qualified else ""
            lines.append(f"{printable(r['path'])}:{at}  {printable(who)}{maybe}")
        else:
            defs = ", ".join(printable(d) for d in r["definitions"]) or "(not defined in scope)"
            lines.append(f"{printable(r['name'])}  ->  {defs}")
        if several and len(lines) > before:
            lines[-1] += f"  [{resource_id_of(r['uri'])}]"
    if answer.get("truncated"):
        lines.append(f"… {answer['truncated']['more']} more (raise --budget)")
    if answer.get("defined") == 0:  # callers, callees: say why it is empty
        lines.append(
            "(nothing in scope defines this name: a library or built-in one)"
            if lines
            else "no results: nothing in scope defines this name"
            + ("" if tool == "callees" else " or calls it")
        )
    return "\n".join(lines) if lines else "no results"


def _cut_mark(line: dict[str, Any]) -> str:
    """What ends a line shown cut short (past 200 characters, or to fit the
    budget): how much was left out, as the JSON's ``cut`` says, in the style
    of the ``… N more`` that ends an answer the budget cut.  Without it the
    line reads as if it ended there."""
    cut = line.get("cut")
    return f"… {cut} more characters" if cut else ""


def _project(ops: Any, args: argparse.Namespace, out: Output) -> int:  # noqa: ANN401
    if args.action == "add":
        project = ops.add_project(args.name)
        out.emit(project, lambda: f"created project {project.name}")
    elif args.action == "list":
        projects = ops.list_projects()
        out.emit(
            projects,
            lambda: (
                "\n".join(f"{p.name}  {len(p.resource_ids)} resource(s)" for p in projects)
                or "no projects"
            ),
        )
    else:
        linked = ops.project(args.name).resource_ids
        ops.remove_project(args.name)
        # Its resources stay registered, indexed and queryable by ULID: say
        # which of them no project names any more, and how to remove them.
        named = {rid for p in ops.list_projects() for rid in p.resource_ids}
        kept = sorted(rid for rid in linked if rid not in named)
        out.emit(
            {"removed": args.name, "resources_kept": kept},
            lambda: (
                f"removed project {printable(args.name)}"
                + (
                    f"; its {len(kept)} resource(s) stay registered and indexed "
                    f"('{_PROG} resource remove ULID' deletes one): {', '.join(kept)}"
                    if kept
                    else ""
                )
            ),
        )
    return EXIT_OK


def _resource(ops: Any, args: argparse.Namespace, out: Output) -> int:  # noqa: ANN401
    if args.action == "add":
        resource = ops.add_resource(
            args.path,
            args.project,
            args.type,
            force=args.force,
            secret_filter=not args.no_secret_filter,
            secret_allow=args.allow_secret_pattern,
        )
        work_tree = ops.git_ignoring_work_tree(resource)
        if work_tree is None:
            out.emit(resource, lambda: resource.resource_id)
        else:
            # Registered all the same: a resource git keeps empty may be meant.
            warning = _git_ignored_warning(resource.location, work_tree)
            _err(f"{_PROG}: warning: {warning}")
            out.emit(
                {**dataclasses.asdict(resource), "warning": warning},
                lambda: resource.resource_id,
            )
    elif args.action == "list":
        resources = ops.list_resources(args.project)
        out.emit(
            resources,
            lambda: (
                "\n".join(
                    f"{r.resource_id}  {r.resource_type:<12}  {printable(r.location)}  "
                    f"indexed: {r.last_indexed_at or 'never'}" + _secret_status(_secret_row(r))
                    for r in resources
                )
                or "no resources"
            ),
        )
    elif args.action == "secrets":
        resource = ops.set_secret_policy(
            args.resource_id,
            secret_filter=not args.no_secret_filter,
            secret_allow=args.allow_secret_pattern,
        )
        out.emit(
            resource,
            lambda: f"{resource.resource_id}{_secret_status(_secret_row(resource))}",
        )
    else:
        _remove_resource(ops, args.resource_id, args.lock_timeout)
        out.emit(
            {"removed": args.resource_id}, lambda: f"removed resource {printable(args.resource_id)}"
        )
    return EXIT_OK


def _git_ignored_warning(location: str, work_tree: str) -> str:
    """What to tell of a git resource whose work tree ignores all its files."""
    return (
        f"git (work tree {printable(work_tree)}) ignores every file under "
        f"{printable(location)}, so nothing will be indexed; '--type directory' "
        "indexes it as a plain directory"
    )


def _remove_resource(ops: Any, resource_id: str, timeout: float) -> None:  # noqa: ANN401
    """``ops.remove_resource``, waiting at most ``timeout`` seconds for the
    reindex lock, with a line on stderr when it waits."""
    from cleveragents.domain.models.acms.ulids import canonical_ulid

    rid = canonical_ulid(resource_id)
    if ops.resources.get(rid) is None:  # bad input first, never after a wait
        raise NotFoundError(f"no resource {rid} (see 'acms resource list')")
    announce_lock_wait(_PROG, ops.data_dir, timeout)
    ops.remove_resource(rid, lock_timeout=timeout)


def reembed_reporter(prog: str) -> Callable[[str, str, int, int], None]:
    """Stderr lines for a changed embedder's re-embed: one when a resource's
    starts, then at most one every 2 s, and one when it ends."""
    last = [0.0]

    def report(resource_id: str, name: str, done: int, total: int) -> None:
        now = time.monotonic()
        if done == 0:
            last[0] = now
            _err(f"{prog}: re-embedding {total} units with {printable(name)} ({resource_id})")
        elif done == total or now - last[0] >= 2.0:
            last[0] = now
            _err(f"{prog}: {resource_id} re-embedded {done}/{total} units")

    return report


def format_report(report: Any) -> str:  # noqa: ANN401 - a ReindexReport
    """The human summary of a reindex."""
    t = report.total
    lines = [
        f"resources: {len(report.resources)}  files seen: {t.files_seen}  read: {t.files_read}  "
        f"indexed: {t.files_indexed}  deleted: {t.files_deleted}  skipped: {t.files_skipped}  "
        f"secrets skipped: {t.skipped.get('secret', 0)}  "
        f"bytes read: {t.bytes_read}  seconds: {report.seconds:.2f}"
    ]
    lines += [f"missing location: {rid}" for rid in report.missing]
    lines += [f"empty location: {rid}" for rid in getattr(report, "empty", [])]
    lines += [f"pruned: {rid}" for rid in report.pruned]
    lines += [f"failed: {rid}" for rid in getattr(report, "failed", {})]
    return "\n".join(lines)


def report_failures(prog: str, report: Any) -> int:  # noqa: ANN401 - a ReindexReport
    """One stderr line per resource that could not be listed, and one per
    resource whose directory is gone or empty (its units are kept: an
    unmounted volume must not empty the index, but the operator must hear
    of it), whose git work tree ignores every file of it, or that holds
    directories it cannot read; the exit code (1 when one could not be
    listed)."""
    failed: dict[str, str] = getattr(report, "failed", {})
    for rid, message in failed.items():
        _err(f"{prog}: failed: resource {rid}: {one_line(message)}")
    for rid in getattr(report, "missing", []):
        _err(
            f"{prog}: warning: resource {rid}: its directory is gone; its indexed files are "
            f"kept and still answer queries ('acms resource remove {rid}' deletes them)"
        )
    for rid in getattr(report, "empty", []):
        _err(
            f"{prog}: warning: resource {rid}: its directory is empty (an unmounted volume?); "
            f"its indexed files are kept and still answer queries; if it was emptied on "
            f"purpose, 'acms resource remove {rid}' deletes them"
        )
    for rid, work_tree in getattr(report, "git_ignored", {}).items():
        _err(
            f"{prog}: warning: resource {rid}: git (work tree {printable(work_tree)}) ignores "
            f"every file under its directory, so nothing is indexed; registered again with "
            f"'--type directory' it is indexed as a plain directory"
        )
    for rid, stats in getattr(report, "resources", {}).items():
        dirs = stats.skipped.get("unreadable_directory", 0)
        files = stats.skipped.get("unreadable", 0)
        if dirs or files:
            parts = [f"{dirs} {'directory' if dirs == 1 else 'directories'}"] if dirs else []
            parts += [f"{files} {'file' if files == 1 else 'files'}"] if files else []
            what = " and ".join(parts)
            _err(
                f"{prog}: warning: resource {rid}: {what} under it cannot be read "
                "(permissions), so they are not indexed (the debug log names them: "
                "--log-level debug)"
            )
    return EXIT_FAILURE if failed else EXIT_OK


_ENGINE_DIRS = frozenset({"text", "vectors", "graph"})


def _status(status: dict[str, Any]) -> str:
    lines = [
        f"data dir: {printable(status['data_dir'])}  projects: {status['projects']}  "
        f"profile: {status['profile']}"
    ]
    for r in status["resources"]:
        lines.append(
            f"{r['resource_id']}  {r['type']:<12} files={r['files']} text={r['text_units']} "
            f"vector={r['vector_units']} graph={r['graph_subjects']}  "
            f"indexed: {r['last_indexed_at'] or 'never'}  {printable(r['location'])}"
            + _secret_status(r)
            + (
                f"  quarantined={r['quarantined']} "
                "(planned without tree-sitter: their parse crashed it)"
                if r.get("quarantined")
                else ""
            )
            + (
                "  interrupted: a reindex of it stopped midway; what it serves may be older "
                "than its files until the next reindex, which repairs it"
                if r.get("interrupted")
                else ""
            )
            + ("  reindexing: a reindex is writing it now" if r.get("reindexing") else "")
        )
    sizes = "  ".join(f"{k}={v}" for k, v in status["bytes_on_disk"].items())
    lines.append(f"bytes on disk: {sizes}")
    return "\n".join(lines)


def _secret_row(resource: Any) -> dict[str, Any]:  # noqa: ANN401 - a Resource
    return {
        "secret_filter": {"enabled": resource.secret_filter, "allow": list(resource.secret_allow)},
        "secrets_skipped": resource.secrets_skipped,
    }


def _secret_status(row: dict[str, Any]) -> str:
    secret = row.get("secret_filter")
    if not isinstance(secret, dict):
        return ""
    allow = secret.get("allow") or []
    state = "on" if secret.get("enabled") else "OFF"
    if allow:
        state += " (allow: " + ", ".join(printable(a) for a in allow) + ")"
    skipped = row.get("secrets_skipped")
    return f"  secrets: {state} skipped={'?' if skipped is None else skipped}"


def guarded(prog: str, body: Callable[[], int]) -> int:
    """Run ``body`` and turn every failure into an exit code and one line."""
    log = _cli_log
    try:
        code = body()
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
    except BrokenPipeError:
        return _broken_pipe()
    except UsageError as exc:
        _err(f"{prog}: error: {one_line(exc)}")
        return EXIT_USAGE
    except QueryTimeoutError as exc:
        # Out of time (a slow or stalled server, a busy machine): not the
        # caller's mistake, as HTTP's 503 says; a row or size cap is.
        _err(f"{prog}: failed: {one_line(exc)}")
        return EXIT_FAILURE
    except (ValueError, TypeError, NotFoundError, ConflictError) as exc:
        # Bad input: malformed ULID, unknown project, bad query syntax, ...
        _err(f"{prog}: error: {one_line(exc)}")
        return EXIT_USAGE
    except (AcmsError, OSError) as exc:
        _err(f"{prog}: failed: {one_line(exc)}")
        return EXIT_FAILURE
    except Terminated:
        _err(f"{prog}: terminated")
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        _err(f"{prog}: interrupted")
        return 130
    except SystemExit:
        raise  # argparse's --help and explicit exits keep their code
    except BaseException as exc:  # native panics (pyo3) derive from BaseException
        log.debug("cli.internal_error", exc_info=True)
        _err(f"{prog}: internal error: {type(exc).__name__}: {one_line(exc)}")
        return EXIT_FAILURE
    return code


def _broken_pipe() -> int:
    """The reader of stdout is gone: end quietly with the SIGPIPE status.

    What is still buffered for stdout is sent to /dev/null, so the
    interpreter's final flush does not fail and print "Broken pipe" again.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass  # not a real file descriptor (an in-process test's capture)
    return EXIT_BROKEN_PIPE


def _err(line: str) -> None:
    """Print one line on stderr; quietly nothing if stderr is a closed pipe."""
    with contextlib.suppress(BrokenPipeError, ValueError):
        print(line, file=sys.stderr, flush=True)


def one_line(exc: object) -> str:
    """A message on one terminal-safe line, at most 500 characters."""
    text = printable(" ".join(str(exc).split()))
    return text[:500] if text else type(exc).__name__


# Commands that answer one question and change nothing.  While one runs, the
# cyclic GC is off: a loaded graph is about a million containers, and each
# full collection walks all of them (a stdlib-sized resource: 0.2-0.3 s per
# collection).  The console script then leaves without tearing down what the
# question loaded (freeing it took longer than loading it); see `console`.
_QUESTIONS = frozenset(
    {
        "search",
        "read",
        "context",
        "symbols",
        "callers",
        "callees",
        "sparql",
        "triples",
        "traverse",
        "status",
    }
)


@contextlib.contextmanager
def _collector_off(restore: bool) -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled and restore:
            gc.enable()


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``acms`` command in this process; its exit code."""
    return _main(argv, console=False)[0]


def _main(argv: Sequence[str] | None, *, console: bool) -> tuple[int, bool]:
    """The exit code, and whether the command was a question (`_QUESTIONS`).

    ``console`` says the caller is the console script, whose process ends
    after a question.  Such a process declares one question (so a backend
    builds nothing for later ones, see :mod:`cleveragents._process`) and
    leaves the GC off after it: what it loaded may still be referenced (the
    stores' caches), and a collection after switching it back on would walk
    all of it for nothing.  :func:`main` (its caller may ask again) declares
    nothing and turns the GC back on.
    """
    from cleveragents.bootstrap import lean_container_import, private_umask

    lean_container_import()  # this process is an entry point: see the function
    args_in = list(sys.argv[1:] if argv is None else argv)
    call: tuple[str, list[str]] | None = None

    def find_service() -> int:
        nonlocal call
        call = _service_call(args_in)
        return EXIT_OK

    code = guarded(_PROG, find_service)
    if code != EXIT_OK:
        return code, False
    if call is not None:
        # Long-lived services with options of their own (cli/serve.py, cli/watch.py).
        from importlib import import_module

        name, service_args = call
        service: Callable[[Sequence[str]], int] = import_module(f"cleveragents.cli.{name}").main
        return guarded(_PROG, lambda: service(service_args)), False
    parser = build_parser()
    question = False

    def body() -> int:
        nonlocal question
        args = parser.parse_args(argv)
        configure_logging(args.log_level)
        question = args.command in _QUESTIONS
        if question and console:  # one question, then the process exits
            from cleveragents._process import asks_one_question

            asks_one_question()
        with (
            sigterm_unwinds(),
            _collector_off(restore=not console) if question else contextlib.nullcontext(),
        ):
            return run(args, Output(args.json))

    private_umask()  # this process owns the data directory: owner-only files
    return guarded(_PROG, body), question


def console() -> NoReturn:
    """Entry point of the ``acms`` console script.

    After a question, the process ends with ``os._exit`` once stdout, stderr
    and the log handlers are flushed: a question holds no lock, no open
    transaction and no child process past its return, so the interpreter's
    teardown (freeing every object one by one) would only cost time.  Other
    commands (indexing, registration, the services) exit normally.
    """
    code, question = _main(None, console=True)
    if not question:
        sys.exit(code)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:
            if stream is sys.stdout and code == EXIT_OK:
                code = EXIT_BROKEN_PIPE
        except (OSError, ValueError):
            pass  # a stream closed or replaced: nothing more can be written to it
    os._exit(code)


if __name__ == "__main__":
    console()
