"""Evaluate one checked SPARQL query in a forked, killable child process.

rdflib has no query timeout, and ``REGEX`` runs Python's ``re``, which can
backtrack for ages inside C code that no Python-level interrupt reaches.  So
every evaluation runs in a child forked from the caller:

- the child inherits the union graph (already built in the parent)
  copy-on-write, evaluates with the row cap, writes its answer as JSON of
  plain strings through a pipe and leaves with ``os._exit`` (no parent
  cleanup, no ``atexit``, no finalizers, no buffered output flushed);
- the parent waits on the pipe until the deadline, then ``SIGKILL``\\ s the
  child; every child is reaped and every descriptor closed on every path.

The child first points fds 0-2 at ``/dev/null`` (nothing it does can reach the
parent's stdout, e.g. CLI ``--json`` output), closes every other inherited
descriptor but its end of the pipe, disables the cyclic GC (so no finalizer
of a parent object, e.g. a SQLite connection, runs in the child), caps its
address space, and installs an audit hook refusing sockets, subprocesses
and ``exec``: a second line of defence behind :mod:`.sparql_guard`.
Only the forking thread exists in the child, so it takes no lock another
parent thread might hold (no logging, no stdio).

Linux/POSIX only (``os.fork``).  Python 3.12+ emits a ``DeprecationWarning``
when forking a multi-threaded process; the child here runs no code that
needs another thread's lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import json
import math
import os
import resource
import select
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, NoReturn

import rdflib.plugins.sparql as rdflib_sparql
from rdflib import BNode, Graph, Variable
from rdflib.plugins.sparql.evaluate import evalQuery
from rdflib.term import Node

from cleveragents.domain.models.acms.backends import Triple
from cleveragents.domain.models.acms.errors import (
    IndexUnavailableError,
    QueryError,
    QueryLimitError,
)
from cleveragents.infrastructure.acms.sparql_guard import CheckedQuery

__all__ = ["WorkerAnswer", "evaluate"]

# Address space the child may add to what it inherited.  A cross join under
# ORDER BY / DISTINCT materialises every row before the row cap can see one;
# without a cap it could exhaust the host's memory within the time limit.
CHILD_MEMORY_BUDGET = 2 * 1024**3

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


@dataclass(frozen=True, slots=True)
class WorkerAnswer:
    """What an evaluation gave: triples (SELECT/CONSTRUCT/DESCRIBE) or a boolean (ASK)."""

    triples: list[Triple] = field(default_factory=list)
    boolean: bool | None = None


def evaluate(graph: Graph, checked: CheckedQuery, *, timeout: float, max_rows: int) -> WorkerAnswer:
    """Evaluate ``checked`` against ``graph`` in a child process.

    SELECT rows with an unbound variable are skipped; results are sorted
    unless the outer query has an ORDER BY.

    Args:
        graph: the graph to query (read in the child only).
        checked: a query that passed :func:`.sparql_guard.check_query`.
        timeout: seconds from the call until the child is killed.
        max_rows: the most triples (SELECT rows, CONSTRUCT/DESCRIBE triples)
            an answer may hold.

    Raises:
        QueryLimitError: the time limit or the row cap was reached.
        QueryError: the evaluation raised, or the child died.
        IndexUnavailableError: no child process could be started.
    """
    deadline = time.monotonic() + timeout
    read_fd, write_fd = os.pipe()
    pid = -1
    try:
        pid = _fork()
        if pid == 0:  # the child: never returns
            _child(read_fd, write_fd, graph, checked, max_rows)
        os.close(write_fd)
        write_fd = -1
        data = _read_all(read_fd, deadline)
        if data is None:
            raise QueryLimitError(
                f"the SPARQL query was stopped at its time limit of {timeout:g} s"
            )
        status = _reap(pid, deadline)
        pid = -1
        return _decode(data, status, max_rows)
    finally:
        if pid > 0:
            _kill_and_reap(pid)
        for fd in (read_fd, write_fd):
            if fd >= 0:
                os.close(fd)


# ---------------------------------------------------------------- parent side


def _fork() -> int:
    with _FORK_LOCK:
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


def _read_all(fd: int, deadline: float) -> bytes | None:
    """Everything the child writes until it closes the pipe; ``None`` at the deadline."""
    chunks: list[bytes] = []
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        if not poller.poll(math.ceil(remaining * 1000)):
            continue
        chunk = os.read(fd, _READ_CHUNK)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _reap(pid: int, deadline: float) -> int:
    """The exit status of a child that closed its pipe (it is exiting)."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() >= deadline:
            # Closed its pipe but lingers: treat as stopped at the deadline.
            _kill_and_reap(pid)
            raise QueryLimitError("the SPARQL query was stopped at its time limit")
        time.sleep(0.001)


def _kill_and_reap(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _decode(data: bytes, status: int, max_rows: int) -> WorkerAnswer:
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
    if "error" in payload:
        raise QueryError(f"SPARQL evaluation failed: {payload['error']}")
    if "boolean" in payload and isinstance(payload["boolean"], bool):
        return WorkerAnswer(boolean=payload["boolean"])
    rows = payload.get("triples")
    if not isinstance(rows, list) or not all(_is_triple(row) for row in rows):
        raise QueryError("SPARQL evaluation failed: the worker process sent garbage")
    return WorkerAnswer(triples=[(s, p, o) for s, p, o in rows])


def _is_triple(row: object) -> bool:
    return isinstance(row, list) and len(row) == 3 and all(isinstance(t, str) for t in row)


def _describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"was killed by signal {os.WTERMSIG(status)}"
    return f"exited with status {os.waitstatus_to_exitcode(status)} and no answer"


# ---------------------------------------------------------------- child side


def _child(
    read_fd: int, write_fd: int, graph: Graph, checked: CheckedQuery, max_rows: int
) -> NoReturn:
    code = 0
    try:
        try:
            write_fd = _isolate(read_fd, write_fd)
            payload = _answer(graph, checked, max_rows)
        except _RowCapError:
            payload = {"limit": True}
        except BaseException as exc:  # everything, KeyboardInterrupt too, becomes an answer
            payload = {"error": f"{type(exc).__name__}: {exc}"}
        _write_all(write_fd, json.dumps(payload).encode("ascii"))
    except BaseException:  # the parent reports "no answer"
        code = 1
    finally:
        os._exit(code)


def _isolate(read_fd: int, write_fd: int) -> int:
    """Cut the child off from the parent's descriptors; the pipe's new fd."""
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
    # flock) is closed, so the child can use none and holds none open.
    os.closerange(3, write_fd)
    os.closerange(write_fd + 1, _max_fd())
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = _address_space() + CHILD_MEMORY_BUDGET
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    if soft == resource.RLIM_INFINITY or cap < soft:
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    # The child is thrown away: changing rdflib's globals here is harmless.
    rdflib_sparql.SPARQL_LOAD_GRAPHS = False
    sys.addaudithook(_refuse_egress)
    return write_fd


def _max_fd() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def _address_space() -> int:
    with open("/proc/self/statm", "rb") as fh:
        return int(fh.read().split()[0]) * resource.getpagesize()


def _refuse_egress(event: str, args: tuple[object, ...]) -> None:
    if event in _REFUSED_EVENTS:
        raise PermissionError(f"{event} is not allowed while evaluating SPARQL")


class _RowCapError(Exception):
    pass


def _answer(graph: Graph, checked: CheckedQuery, max_rows: int) -> dict[str, Any]:
    result = evalQuery(graph, checked.prepared, {}, None)
    if checked.form == "ASK":
        return {"boolean": bool(result["askAnswer"])}
    triples: list[Triple] = []
    if checked.form == "SELECT":
        s_var, p_var, o_var = (Variable(name) for name in checked.projection)
        # The bindings are a generator: the cap stops the evaluation itself.
        for row in result["bindings"]:
            s, p, o = row.get(s_var), row.get(p_var), row.get(o_var)
            if s is not None and p is not None and o is not None:
                if len(triples) >= max_rows:
                    raise _RowCapError
                triples.append((_term(s), _term(p), _term(o)))
        if not checked.ordered:
            triples.sort()
    else:
        built: Graph = result["graph"]
        if len(built) > max_rows:
            raise _RowCapError
        triples = sorted((_term(s), _term(p), _term(o)) for s, p, o in built)
    return {"triples": triples}


def _term(node: Node) -> str:
    if isinstance(node, BNode):
        return f"_:{node}"
    return str(node)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
