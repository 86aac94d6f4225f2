"""Check and evaluate one SPARQL query in a forked, killable child process.

rdflib has no query timeout, and ``REGEX`` runs Python's ``re``, which can
backtrack for ages inside C code that no Python-level interrupt reaches.
Parsing is no safer: pyparsing reads 15-45 KB/s and deep nesting recurses.
So everything after a size check runs in a child forked from the caller:

- the child inherits the union graph (already built in the parent)
  copy-on-write, parses and checks the query (:func:`.sparql_guard.check_query`),
  evaluates it with the row cap and the result size cap, writes its answer as
  JSON of plain strings through a pipe and leaves with ``os._exit`` (no parent
  cleanup, no ``atexit``, no finalizers, no buffered output flushed);
- the parent waits on the pipe until the deadline, then ``SIGKILL``\\ s the
  child; it reads the answer in chunks and stops at the result size cap (its
  memory grows by at most that much); every child is reaped and every
  descriptor closed on every path;
- the parent also kills the child as soon as the call is cancelled (the
  :class:`~cleveragents.domain.models.acms.cancellation.CancelToken` the
  service runs the call under: a cancel notification, a client gone, the
  service stopping), and the kernel kills it when the thread that forked it
  dies (``PR_SET_PDEATHSIG``): a parent ended by a signal, even SIGKILL, or
  by ``os._exit`` leaves no worker running;
- at most :data:`MAX_WORKERS` children (one per CPU) run at once in a
  process; a query over that waits for one to end, within its own time
  limit, and is then refused as too slow (:class:`QueryTimeoutError`).

Deep queries (hundreds of nested groups, thousand-item object lists) need
more than Python's default recursion limit, which is the only obstacle for
them: the child works in a thread with a :data:`STACK_BYTES` native stack and a
recursion limit of :data:`RECURSION_LIMIT`, sized so the limit is reached (a
clear error) long before the stack overflows (which would kill the child).

The child first points fds 0-2 at ``/dev/null`` (nothing it does can reach the
parent's stdout, e.g. CLI ``--json`` output), closes every other inherited
descriptor but its end of the pipe, disables the cyclic GC (so no finalizer
of a parent object, e.g. a SQLite connection, runs in the child), caps its
address space, and installs an audit hook refusing sockets, subprocesses
and ``exec``: a second line of defence behind :mod:`.sparql_guard`.
Only the forking thread exists in the child, so it takes no lock another
parent thread might hold; it turns logging and warnings off (rdflib's literal
warnings carry tracebacks, and nobody would read them).

Linux/POSIX only (``os.fork``).  Python 3.12+ emits a ``DeprecationWarning``
when forking a multi-threaded process; the child here runs no code that
needs another thread's lock.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import gc
import json
import logging
import math
import os
import resource
import select
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

import rdflib.plugins.sparql as rdflib_sparql
from rdflib import BNode, Graph, Variable
from rdflib import Literal as RdfLiteral
from rdflib.plugins.sparql.evaluate import evalQuery
from rdflib.term import Node

from cleveragents.domain.models.acms.backends import Triple
from cleveragents.domain.models.acms.cancellation import CancelToken, current_token
from cleveragents.domain.models.acms.errors import (
    CallCancelledError,
    IndexUnavailableError,
    QueryError,
    QueryLimitError,
    QueryTimeoutError,
)
from cleveragents.infrastructure.acms.graph_view import WholeGraphNeeded
from cleveragents.infrastructure.acms.sparql_guard import CheckedQuery, check_query, parser_lock

__all__ = ["MAX_RESULT_BYTES", "MAX_WORKERS", "WorkerAnswer", "evaluate"]

# Address space the child may add to what it inherited.  A cross join under
# ORDER BY / DISTINCT materialises every row before the row cap can see one;
# without a cap it could exhaust the host's memory within the time limit.
CHILD_MEMORY_BUDGET = 2 * 1024**3

# The most bytes an answer may carry back to the caller (its JSON encoding).
# 10,000 rows (the default row cap) of 1.6 KB each fit; a 1.8 KB query whose
# CONCAT-doubling BIND returned 410 MB (and took the caller to 1.2-1.4 GB) does
# not.  The parent holds the raw bytes and their decoding, about twice this.
MAX_RESULT_BYTES = 16 * 1024**2
# Room for the JSON envelope and an error message beyond the rows' own bytes.
_ENVELOPE_BYTES = 64 * 1024
# The native stack of the child's working thread and the recursion limit
# inside it.  A Python frame reached through C (generators, __getattr__)
# used 280-560 bytes of C stack here; 256 MiB / 50,000 leaves over 5 KB each.
STACK_BYTES = 256 * 1024**2
RECURSION_LIMIT = 50_000
# Error text carried back: enough to say what failed, never a whole query.
_MESSAGE_CHARS = 1000

# Audit events the child refuses: anything that reaches the network or
# starts a program.  rdflib's SERVICE / FROM use urllib, which passes here.
_REFUSED_EVENTS = frozenset(
    {
        "socket.__new__",
        "socket.connect",
        "socket.getaddrinfo",
        "socket.sendto",
        "urllib.Request",
        "subprocess.Popen",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.system",
        "os.fork",
        "os.forkpty",
    }
)

_READ_CHUNK = 1 << 16
# One fork at a time: the GC is switched off around it (see _fork).
_FORK_LOCK = threading.Lock()


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


#: The most workers that run at once in this process: one per CPU this
#: process may use (more would only share them, and each holds up to ~140 MB
#: of its own), and at least two, so that one runaway query never stalls the
#: next.  A query over the cap waits for a free one within its own time limit.
MAX_WORKERS = max(2, _cpus())
_SLOTS = threading.BoundedSemaphore(MAX_WORKERS)
# How often a waiting parent looks at its call's cancel token (seconds).
_CANCEL_POLL = 0.05

_PR_SET_PDEATHSIG = 1


def _load_prctl() -> Callable[..., int] | None:
    """libc's ``prctl``, looked up in the parent (the child must not load a
    library); ``None`` where there is none (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (AttributeError, OSError):
        return None
    return prctl


_PRCTL = _load_prctl()


@dataclass(frozen=True, slots=True)
class WorkerAnswer:
    """What an evaluation gave: triples (SELECT/CONSTRUCT/DESCRIBE) or a boolean (ASK)."""

    triples: list[Triple] = field(default_factory=list)
    boolean: bool | None = None
    # With bindings=True, a SELECT's variables and rows in the SPARQL 1.1
    # JSON results form ({"type": "uri"|"literal"|"bnode", "value": ...}).
    variables: list[str] | None = None
    bindings: list[dict[str, dict[str, str]]] | None = None


def evaluate(
    graph: Graph,
    query: str,
    *,
    init_ns: Mapping[str, str],
    timeout: float,
    max_rows: int,
    max_bytes: int | None = None,
    bindings: bool = False,
    hold: contextlib.AbstractContextManager[object] | None = None,
    keep_fds: Iterable[int] = (),
    started: float | None = None,
) -> WorkerAnswer:
    """Check and evaluate ``query`` against ``graph`` in a child process.

    With ``bindings``, a SELECT may project any variables and its rows come
    back as SPARQL JSON bindings (:attr:`WorkerAnswer.bindings`); otherwise

    The query is parsed and checked (:func:`.sparql_guard.check_query`) in the
    child, inside the time limit.  A SELECT must project exactly three
    variables, read as (s, p, o); rows with an unbound one are skipped.
    Results are sorted unless the outer query has an ORDER BY.

    Args:
        graph: the graph to query (read in the child only).
        query: SPARQL query text (callers check its size first with
            :func:`.sparql_guard.check_query_size`).
        init_ns: prefixes available without a PREFIX declaration.
        timeout: seconds from the call until the child is killed.
        max_rows: the most triples (SELECT rows, CONSTRUCT/DESCRIBE triples)
            an answer may hold.
        max_bytes: the most bytes the answer may carry back (its JSON);
            ``None`` is :data:`MAX_RESULT_BYTES`, read at call time.
        hold: entered around the ``fork()`` only (after this module's own
            locks): the lock the graph's writers hold, so that the child's
            copy holds no half-applied change made by another thread.
        keep_fds: descriptors the child keeps open (the read-only graph
            files of members read by subject); it closes every other.
        started: the ``time.monotonic()`` the time limit counts from
            (default: now), for a query asked again after
            :class:`WholeGraphNeeded`.

    Raises:
        WholeGraphNeeded: the graph reads some members by subject, and the
            query asked what only loaded graphs answer.
        IndexUnavailableError: such a member's file could not be read.
        QueryTimeoutError: the time limit was reached, or no worker slot
            came free before it (see :data:`MAX_WORKERS`).
        QueryLimitError: the row cap or the size cap was reached.
        QueryError: the query was refused (see ``check_query``; a SELECT of
            other than three variables), the evaluation raised, or the child died.
        IndexUnavailableError: no child process could be started.
        CallCancelledError: the call's cancel token
            (:func:`~cleveragents.domain.models.acms.cancellation.current_token`)
            was cancelled while the query waited or ran; the child is killed.
    """
    cap = MAX_RESULT_BYTES if max_bytes is None else max_bytes
    deadline = (time.monotonic() if started is None else started) + timeout
    token = current_token()
    _warm_parser()
    slots = _SLOTS  # the one acquired is the one released
    _take_slot(slots, deadline, timeout, token)
    try:
        return _run_child(
            graph, query, init_ns, timeout, max_rows, cap, bindings, hold, keep_fds, deadline, token
        )
    finally:
        slots.release()


def _run_child(
    graph: Graph,
    query: str,
    init_ns: Mapping[str, str],
    timeout: float,
    max_rows: int,
    cap: int,
    bindings: bool,
    hold: contextlib.AbstractContextManager[object] | None,
    keep_fds: Iterable[int],
    deadline: float,
    token: CancelToken | None,
) -> WorkerAnswer:
    read_fd, write_fd = os.pipe()
    parent = os.getpid()
    pid = -1
    try:
        pid = _fork(hold)
        if pid == 0:  # the child: never returns
            _child(
                read_fd,
                write_fd,
                graph,
                query,
                dict(init_ns),
                max_rows,
                cap,
                bindings,
                frozenset(keep_fds),
                parent,
            )
        os.close(write_fd)
        write_fd = -1
        data = _read_all(read_fd, deadline, cap + _ENVELOPE_BYTES, token)
        if data is None:
            raise QueryTimeoutError(
                f"the SPARQL query was stopped at its time limit of {timeout:g} s "
                "(too slow: make it more selective, or try again when the service is less busy)"
            )
        if len(data) > cap + _ENVELOPE_BYTES:
            raise QueryLimitError(_size_message(cap))
        status = _reap(pid, deadline)
        pid = -1
        return _decode(data, status, max_rows, cap)
    finally:
        if pid > 0:
            _kill_and_reap(pid)
        for fd in (read_fd, write_fd):
            if fd >= 0:
                os.close(fd)


def _take_slot(
    slots: threading.BoundedSemaphore,
    deadline: float,
    timeout: float,
    token: CancelToken | None,
) -> None:
    """Wait for a free worker slot until ``deadline``, or until the call is cancelled."""
    while not slots.acquire(timeout=max(0.0, min(_CANCEL_POLL, deadline - time.monotonic()))):
        if token is not None and token.cancelled:
            raise CallCancelledError("the SPARQL query was cancelled")
        if time.monotonic() >= deadline:
            raise QueryTimeoutError(
                f"the SPARQL query was not started: all {MAX_WORKERS} SPARQL workers of the "
                f"service were busy for its time limit of {timeout:g} s; try again"
            )
    if token is not None and token.cancelled:
        slots.release()
        raise CallCancelledError("the SPARQL query was cancelled")


def _size_message(cap: int) -> str:
    return (
        f"the SPARQL answer is larger than {cap} bytes (the result size cap, "
        "MAX_RESULT_BYTES); select fewer or shorter values, or add a LIMIT"
    )


# ---------------------------------------------------------------- parent side

# A fixed query the parent parses once: pyparsing prepares the SPARQL grammar
# on its first use (~130 ms here), and a child forked from a parent that never
# parsed would pay that on every query.  Our own text, so bounded.
_WARM_QUERY = (
    "PREFIX x: <urn:x:> SELECT ?s ?p ?o WHERE { ?s ?p ?o . OPTIONAL { ?s x:q ?v } "
    'FILTER(?o != "1"^^<http://www.w3.org/2001/XMLSchema#integer> || REGEX(STR(?o), "a")) '
    "} ORDER BY ?s LIMIT 5"
)


_warmed = False
_WARM_LOCK = threading.Lock()


def _warm_parser() -> None:
    """Parse :data:`_WARM_QUERY` once per process, however many threads ask at once."""
    global _warmed
    if _warmed:
        return
    with _WARM_LOCK:
        if not _warmed:
            check_query(_WARM_QUERY, init_ns={})
            _warmed = True


def _fork(hold: contextlib.AbstractContextManager[object] | None) -> int:
    # No other thread may be inside the SPARQL parser while this one forks
    # (see ``sparql_guard.parser_lock``): the child parses with that grammar.
    with _FORK_LOCK, parser_lock(), hold if hold is not None else contextlib.nullcontext():
        # The GC stays off in the child from its first instruction: a
        # collection there could finalise parent objects (closing a SQLite
        # connection can checkpoint and delete the parent's WAL).
        enabled = gc.isenabled()
        gc.disable()
        pid = 0
        try:
            pid = os.fork()
        except OSError as exc:
            raise IndexUnavailableError(f"cannot start a SPARQL worker process: {exc}") from exc
        finally:
            if pid != 0 and enabled:
                gc.enable()
        return pid


def _read_all(
    fd: int, deadline: float, limit: int, token: CancelToken | None = None
) -> bytearray | None:
    """What the child writes until it closes the pipe; ``None`` at the deadline.

    Reading stops as soon as more than ``limit`` bytes arrived (the caller
    refuses such an answer), so the parent never holds more than that.

    Raises:
        CallCancelledError: ``token`` was cancelled (looked at every
            :data:`_CANCEL_POLL` seconds).
    """
    data = bytearray()
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    while True:
        if token is not None and token.cancelled:
            raise CallCancelledError("the SPARQL query was cancelled")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        if token is not None:
            remaining = min(remaining, _CANCEL_POLL)
        if not poller.poll(math.ceil(remaining * 1000)):
            continue
        chunk = os.read(fd, min(_READ_CHUNK, limit + 1 - len(data)))
        if not chunk:
            return data
        data += chunk
        if len(data) > limit:
            return data


def _reap(pid: int, deadline: float) -> int:
    """The exit status of a child that closed its pipe (it is exiting)."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() >= deadline:
            # Closed its pipe but lingers: treat as stopped at the deadline.
            _kill_and_reap(pid)
            raise QueryTimeoutError("the SPARQL query was stopped at its time limit")
        time.sleep(0.001)


def _kill_and_reap(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _decode(data: bytearray, status: int, max_rows: int, max_bytes: int) -> WorkerAnswer:
    if not data:
        raise QueryError(f"SPARQL evaluation failed: the worker process {_describe(status)}")
    try:
        payload = json.loads(data)
    except ValueError as exc:
        raise QueryError("SPARQL evaluation failed: the worker process sent garbage") from exc
    if not isinstance(payload, dict):
        raise QueryError("SPARQL evaluation failed: the worker process sent garbage")
    if "limit" in payload:
        raise QueryLimitError(
            f"the SPARQL query gives more than {max_rows} rows (the row cap, max_rows); "
            "narrow it or add a LIMIT"
        )
    if "bytes" in payload:
        raise QueryLimitError(_size_message(max_bytes))
    if "refused" in payload:
        raise QueryError(str(payload["refused"]))
    if "load" in payload:
        raise WholeGraphNeeded
    if "unavailable" in payload:  # a graph read by subject could not be read
        raise IndexUnavailableError(str(payload["unavailable"]))
    if "error" in payload:
        raise QueryError(f"SPARQL evaluation failed: {payload['error']}")
    if "boolean" in payload and isinstance(payload["boolean"], bool):
        return WorkerAnswer(boolean=payload["boolean"])
    if "bindings" in payload:
        names, found = payload.get("vars"), payload["bindings"]
        if (
            not isinstance(names, list)
            or not all(isinstance(n, str) for n in names)
            or not isinstance(found, list)
            or not all(_is_binding(b) for b in found)
        ):
            raise QueryError("SPARQL evaluation failed: the worker process sent garbage")
        return WorkerAnswer(variables=names, bindings=found)
    rows = payload.get("triples")
    if not isinstance(rows, list) or not all(_is_triple(row) for row in rows):
        raise QueryError("SPARQL evaluation failed: the worker process sent garbage")
    return WorkerAnswer(triples=[(s, p, o) for s, p, o in rows])


def _is_binding(row: object) -> bool:
    return isinstance(row, dict) and all(
        isinstance(k, str)
        and isinstance(v, dict)
        and all(isinstance(a, str) and isinstance(b, str) for a, b in v.items())
        for k, v in row.items()
    )


def _is_triple(row: object) -> bool:
    return isinstance(row, list) and len(row) == 3 and all(isinstance(t, str) for t in row)


def _describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"was killed by signal {os.WTERMSIG(status)}"
    return f"exited with status {os.waitstatus_to_exitcode(status)} and no answer"


# ---------------------------------------------------------------- child side


def _child(
    read_fd: int,
    write_fd: int,
    graph: Graph,
    query: str,
    init_ns: dict[str, str],
    max_rows: int,
    max_bytes: int,
    bindings: bool = False,
    keep_fds: frozenset[int] = frozenset(),
    parent: int = 0,
) -> NoReturn:
    code = 0
    try:
        _die_with_parent(parent)
        try:
            write_fd = _isolate(read_fd, write_fd, keep_fds)
            payload = _on_big_stack(
                lambda: _payload(graph, query, init_ns, max_rows, max_bytes, bindings)
            )
        except BaseException as exc:  # everything, KeyboardInterrupt too, becomes an answer
            payload = {"error": _error_text(exc)}
        _write_all(write_fd, json.dumps(payload).encode("ascii"))
    except BaseException:  # the parent reports "no answer"
        code = 1
    finally:
        os._exit(code)


def _die_with_parent(parent: int) -> None:
    """Have the kernel SIGKILL this child when the thread that forked it
    ends (with its process: a signal, ``os._exit``, a crash), and end now if
    that happened before this line (then the child was reparented)."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if parent and os.getppid() != parent:
        os._exit(1)


def _isolate(read_fd: int, write_fd: int, keep_fds: frozenset[int] = frozenset()) -> int:
    """Cut the child off from the parent's descriptors but ``keep_fds``; the
    pipe's new fd."""
    os.close(read_fd)
    if write_fd < 3:  # a parent without stdio: keep the pipe clear of fds 0-2
        write_fd = fcntl.fcntl(write_fd, fcntl.F_DUPFD, 3)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    # sys.stdout may wrap another descriptor (closed below, then reusable):
    # with None, print() and warnings write nothing.
    sys.stdin = sys.stdout = sys.stderr = None
    # Every other inherited descriptor (sockets, index files, the store's
    # flock) is closed, so the child can use none and holds none open; but
    # the graph files it reads by subject (opened read-only).
    low = 3
    for fd in sorted({write_fd, *(fd for fd in keep_fds if fd >= 3)}):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, _max_fd())
    # The child is thrown away: changing process-wide state here is harmless.
    # No record is built, no traceback formatted, nothing written.
    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")
    rdflib_sparql.SPARQL_LOAD_GRAPHS = False
    sys.addaudithook(_refuse_egress)
    return write_fd


def _on_big_stack(work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``work()`` in a thread with :data:`STACK_BYTES` of stack, memory capped."""
    outcome: list[dict[str, Any]] = []

    def run() -> None:
        try:
            # Capped here, after the stack is mapped: the budget is for data.
            _cap_memory()
            sys.setrecursionlimit(RECURSION_LIMIT)
            outcome.append(work())
        except BaseException as exc:
            outcome.append({"error": _error_text(exc)})

    try:
        threading.stack_size(STACK_BYTES)
        thread = threading.Thread(target=run, name="sparql-worker")
        thread.start()
    except (RuntimeError, ValueError, MemoryError):  # no room for the stack: work here
        run()
    else:
        thread.join()
    return outcome[0] if outcome else {"error": "the worker thread gave no answer"}


def _cap_memory() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = _address_space() + CHILD_MEMORY_BUDGET
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    if soft == resource.RLIM_INFINITY or cap < soft:
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))


def _max_fd() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def _address_space() -> int:
    with open("/proc/self/statm", "rb") as fh:
        return int(fh.read().split()[0]) * resource.getpagesize()


def _refuse_egress(event: str, args: tuple[object, ...]) -> None:
    if event in _REFUSED_EVENTS:
        raise PermissionError(f"{event} is not allowed while evaluating SPARQL")


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:_MESSAGE_CHARS]


class _RowCapError(Exception):
    pass


class _ByteCapError(Exception):
    pass


def _payload(
    graph: Graph,
    query: str,
    init_ns: dict[str, str],
    max_rows: int,
    max_bytes: int,
    bindings: bool = False,
) -> dict[str, Any]:
    """The answer to send back, refusals and limits included."""
    try:
        checked = check_query(query, init_ns=init_ns)
    except QueryError as exc:
        return {"refused": str(exc)[:_MESSAGE_CHARS]}
    if bindings and checked.form == "SELECT":
        try:
            return _select_bindings(graph, checked, max_rows, max_bytes)
        except WholeGraphNeeded:
            return {"load": True}
        except IndexUnavailableError as exc:
            return {"unavailable": str(exc)[:_MESSAGE_CHARS]}
        except _RowCapError:
            return {"limit": True}
        except _ByteCapError:
            return {"bytes": True}
        except RecursionError:
            return {"refused": "the SPARQL query nests too deeply to evaluate; flatten it"}
    if checked.form == "SELECT" and len(checked.projection) != 3:
        return {
            "refused": "a SELECT query must project exactly three variables (subject, "
            f"predicate, object), got {len(checked.projection)}"
        }
    try:
        return _answer(graph, checked, max_rows, max_bytes)
    except WholeGraphNeeded:
        return {"load": True}
    except IndexUnavailableError as exc:
        return {"unavailable": str(exc)[:_MESSAGE_CHARS]}
    except _RowCapError:
        return {"limit": True}
    except _ByteCapError:
        return {"bytes": True}
    except RecursionError:
        return {
            "refused": "the SPARQL query nests too deeply to evaluate (recursion limit "
            f"{RECURSION_LIMIT}); flatten it"
        }


class _Collector:
    """Rows of an answer, counted against the row cap and the size cap as they come."""

    __slots__ = ("max_bytes", "max_rows", "rows", "size")

    def __init__(self, max_rows: int, max_bytes: int) -> None:
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.rows: list[Triple] = []
        self.size = 0

    def add(self, triple: Triple) -> None:
        if len(self.rows) >= self.max_rows:
            raise _RowCapError
        # Bytes as sent: the JSON of the row and its separator.
        self.size += len(json.dumps(triple)) + 2
        if self.size > self.max_bytes:
            raise _ByteCapError
        self.rows.append(triple)


def _answer(graph: Graph, checked: CheckedQuery, max_rows: int, max_bytes: int) -> dict[str, Any]:
    result = evalQuery(graph, checked.prepared, {}, None)
    if checked.form == "ASK":
        return {"boolean": bool(result["askAnswer"])}
    rows = _Collector(max_rows, max_bytes)
    if checked.form == "SELECT":
        s_var, p_var, o_var = (Variable(name) for name in checked.projection)
        # The bindings are a generator: the caps stop the evaluation itself.
        for row in result["bindings"]:
            s, p, o = row.get(s_var), row.get(p_var), row.get(o_var)
            if s is not None and p is not None and o is not None:
                rows.add((_term(s), _term(p), _term(o)))
        if not checked.ordered:
            rows.rows.sort()
    else:
        built: Graph = result["graph"]
        if len(built) > max_rows:
            raise _RowCapError
        for s, p, o in built:
            rows.add((_term(s), _term(p), _term(o)))
        rows.rows.sort()
    return {"triples": rows.rows}


def _select_bindings(
    graph: Graph, checked: CheckedQuery, max_rows: int, max_bytes: int
) -> dict[str, Any]:
    """A SELECT's rows as SPARQL JSON bindings, under the same caps."""
    result = evalQuery(graph, checked.prepared, {}, None)
    names = list(checked.projection)
    variables = [Variable(name) for name in names]
    rows: list[dict[str, dict[str, str]]] = []
    size = 0
    for row in result["bindings"]:
        if len(rows) >= max_rows:
            raise _RowCapError
        binding = {
            name: _json_term(node)
            for name, var in zip(names, variables, strict=True)
            if (node := row.get(var)) is not None
        }
        size += len(json.dumps(binding)) + 2
        if size > max_bytes:
            raise _ByteCapError
        rows.append(binding)
    if not checked.ordered:
        rows.sort(key=lambda b: json.dumps(b, sort_keys=True))
    return {"vars": names, "bindings": rows}


def _json_term(node: Node) -> dict[str, str]:
    if isinstance(node, BNode):
        return {"type": "bnode", "value": str(node)}
    if isinstance(node, RdfLiteral):
        out = {"type": "literal", "value": str(node)}
        if node.language:
            out["xml:lang"] = node.language
        elif node.datatype is not None:
            out["datatype"] = str(node.datatype)
        return out
    return {"type": "uri", "value": str(node)}


def _term(node: Node) -> str:
    if isinstance(node, BNode):
        return f"_:{node}"
    return str(node)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
