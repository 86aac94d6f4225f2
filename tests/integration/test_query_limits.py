"""Bounded queries: SPARQL time limit and row cap (forked worker), Tantivy query caps."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import faiss
import numpy as np
import pytest
from ulid import ULID

from cleveragents.domain.models.acms.backends import IndexUnit, Literal
from cleveragents.domain.models.acms.cancellation import CancelToken, cancellable
from cleveragents.domain.models.acms.errors import (
    CallCancelledError,
    QueryError,
    QueryLimitError,
    QueryTimeoutError,
)
from cleveragents.domain.models.acms.uko import file_uri
from cleveragents.infrastructure.acms import sparql_worker
from cleveragents.infrastructure.acms.rdflib_graph import RdflibGraphBackend
from cleveragents.infrastructure.acms.tantivy_text import TantivyTextBackend

TIMEOUT = 2.0  # long enough for the normal queries under load, short for CI
# The bound: a stopped query ends within its limit plus one second.
SLACK = 1.0
EVIL_REGEX = 'SELECT ?s ?p ?o WHERE { ?s ?p ?o FILTER(REGEX(?o, "^(a+)+$")) }'
PLAIN = "SELECT ?s ?p ?o WHERE { ?s ?p ?o }"

# ------------------------------------------------------------------ helpers


def _children() -> set[int]:
    """Live or zombie children of this process (any thread's)."""
    found: set[int] = set()
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as fh:
                found.update(int(pid) for pid in fh.read().split())
        except FileNotFoundError:  # the thread ended since the listing
            continue
    return found


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _timed_limit(backend: RdflibGraphBackend, query: str, scope: frozenset[str]) -> str:
    started = time.monotonic()
    with pytest.raises(QueryLimitError) as info:
        backend.sparql_query(query, scope=scope)
    elapsed = time.monotonic() - started
    assert elapsed < TIMEOUT + SLACK, elapsed
    # Too slow, not malformed: a service answers 503 (try again), not 400.
    assert isinstance(info.value, QueryTimeoutError)
    assert isinstance(info.value, QueryError)
    assert isinstance(info.value, ValueError)
    return str(info.value)


# ------------------------------------------------------------------ fixtures


@pytest.fixture
def rid() -> str:
    return str(ULID())


def _dense_triples(rid: str) -> list:
    nodes = 300
    triples: list = [(file_uri(rid, "evil.txt"), "urn:text", Literal("a" * 36 + "b"))]
    for i in range(nodes):
        for j in (1, 2, 3, 5, 8):
            triples.append(
                (file_uri(rid, f"n{i}"), "urn:p", file_uri(rid, f"n{(i * j + 1) % nodes}"))
            )
    return triples


@pytest.fixture
def graph(tmp_path: Path, rid: str) -> Iterator[RdflibGraphBackend]:
    """A small graph: one regex-hostile literal and a dense ``urn:p`` graph of
    300 nodes (~1,500 edges) whose ``(p|^p)*`` closure has 90,000 rows."""
    backend = RdflibGraphBackend(tmp_path / "graph", query_timeout=TIMEOUT, max_rows=10_000)
    triples = _dense_triples(rid)
    backend.upsert(rid, triples)
    backend.rows = str(len(set(triples)))  # type: ignore[attr-defined]
    yield backend
    backend.close()


# ------------------------------------------------------------------ SPARQL: time limit

# Each would run for minutes (the regex for hours) without the limit.
RUNAWAY = {
    "catastrophic regex": EVIL_REGEX,
    "property path closure": (
        "SELECT ?s ?p ?o WHERE { ?s (<urn:p>|^<urn:p>)* ?o BIND(<urn:p> AS ?p) } ORDER BY ?s"
    ),
    "cross join": "SELECT ?a ?p ?b WHERE { ?a ?p ?b . ?c ?q ?d . ?e ?r ?f } ORDER BY ?a",
    "cross join ask": "ASK { ?a ?p ?b . ?c ?q ?d . ?e ?r ?f FILTER(?a = <urn:none>) }",
    "construct": "CONSTRUCT { ?a <urn:x> ?f } WHERE { ?a ?p ?b . ?c ?q ?d . ?e ?r ?f }",
}


@pytest.mark.parametrize("query", RUNAWAY.values(), ids=RUNAWAY.keys())
def test_runaway_query_is_stopped_at_the_time_limit(graph, rid, query: str) -> None:
    scope = frozenset({rid})
    children, fds = _children(), _fds()
    message = _timed_limit(graph, query, scope)
    assert "time limit" in message and f"{TIMEOUT:g} s" in message, message
    # The next query is served normally, and nothing is left behind.
    assert graph.sparql_query(PLAIN, scope=scope).metadata["rows"] == graph.rows
    assert _children() <= children  # none left behind (others may have ended)
    assert _fds() <= fds  # none leaked


def test_next_queries_after_a_timeout_are_served(graph, rid) -> None:
    scope = frozenset({rid})
    _timed_limit(graph, EVIL_REGEX, scope)
    ok = 'SELECT ?s ?p ?o WHERE { ?s ?p ?o FILTER(REGEX(?o, "^a+b$")) }'
    for _ in range(3):
        assert len(graph.sparql_query(ok, scope=scope).triples) == 1
    assert graph.sparql_query("ASK { ?s <urn:p> ?o }", scope=scope).metadata["boolean"] == "true"


def test_timeout_with_threads_running_in_the_parent(tmp_path, graph, rid) -> None:
    """Engines start threads (tantivy, FAISS/OpenMP); forking beside them is safe,
    and concurrent SPARQL queries each get their own worker."""
    text = TantivyTextBackend(tmp_path / "text")
    text.upsert(rid, [IndexUnit(file_uri(rid, "a.py"), "def parse_json(): pass")])
    index = faiss.IndexFlatIP(16)
    index.add(np.random.default_rng(0).random((500, 16), dtype=np.float32))
    stop = threading.Event()

    def engines() -> None:
        while not stop.is_set():
            text.search("json", scope=frozenset({rid}))
            index.search(np.ones((2, 16), dtype=np.float32), 5)

    scope = frozenset({rid})
    results: dict[str, object] = {}

    def query(name: str, sparql: str) -> None:
        try:
            results[name] = graph.sparql_query(sparql, scope=scope).metadata["rows"]
        except QueryError as exc:
            results[name] = exc

    background = [threading.Thread(target=engines) for _ in range(2)]
    workers = [
        threading.Thread(target=query, args=("evil", EVIL_REGEX)),
        threading.Thread(target=query, args=("plain", PLAIN)),
        threading.Thread(target=query, args=("plain2", PLAIN)),
    ]
    children = _children()
    for thread in background:
        thread.start()
    try:
        started = time.monotonic()
        for thread in workers:
            thread.start()
        for thread in workers:
            thread.join(TIMEOUT + 10)
        assert time.monotonic() - started < TIMEOUT + 10
    finally:
        stop.set()
        for thread in background:
            thread.join()
        text.close()
    assert isinstance(results["evil"], QueryLimitError)
    assert results["plain"] == results["plain2"] == graph.rows
    assert _children() <= children  # none left behind (others may have ended)


def _wait_for_children(known: set[int], count: int, within: float = 20.0) -> set[int]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        new = _children() - known
        if len(new) >= count:
            return new
        time.sleep(0.01)
    pytest.fail(f"{count} worker(s) did not start")


def test_a_cancelled_query_kills_its_worker_at_once(tmp_path, rid) -> None:
    """A call cancelled (its client gone, a cancel notification) stops its
    worker now, not at the time limit."""
    backend = RdflibGraphBackend(tmp_path / "g", query_timeout=60.0, max_rows=10_000)
    backend.upsert(rid, _dense_triples(rid))
    scope = frozenset({rid})
    token = CancelToken()
    outcome: list[BaseException] = []

    def call() -> None:
        with cancellable(token):
            try:
                backend.sparql_query(EVIL_REGEX, scope=scope)
            except BaseException as exc:
                outcome.append(exc)

    known = _children()
    thread = threading.Thread(target=call)
    thread.start()
    try:
        (worker,) = _wait_for_children(known, 1)
        cancelled = time.monotonic()
        token.cancel()
        thread.join(5)
        assert not thread.is_alive()
        assert time.monotonic() - cancelled < 1.0
        assert isinstance(outcome[0], CallCancelledError), outcome
        assert not os.path.exists(f"/proc/{worker}")  # killed and reaped
    finally:
        token.cancel()
        thread.join()
        backend.close()


def test_workers_running_at_once_are_capped(tmp_path, graph, rid) -> None:
    """No more than MAX_WORKERS workers at once, in any backend of the
    process; a query over the cap waits within its own time limit, then is
    refused as too slow, saying why (try again)."""
    cap = sparql_worker.MAX_WORKERS
    scope = frozenset({rid})
    # Its time limit ends before the runaway queries': it never gets a slot.
    hurried = RdflibGraphBackend(tmp_path / "hurried", query_timeout=0.5, max_rows=10_000)
    hurried.upsert(rid, _dense_triples(rid))
    # Loaded: a query over a graph read by subject first asks for the load
    # in a short-lived worker, which frees its slot.
    graph.sparql_query(PLAIN, scope=scope)
    outcomes: list[object] = []
    late: list[object] = []
    known = _children()
    runaway = [
        threading.Thread(target=lambda: outcomes.append(_outcome(graph, EVIL_REGEX, scope)))
        for _ in range(cap)
    ]
    waiting = [
        threading.Thread(target=lambda: late.append(_outcome(hurried, PLAIN, scope)))
        for _ in range(2)
    ]
    try:
        for thread in runaway:
            thread.start()
        _wait_for_children(known, cap)
        for thread in waiting:
            thread.start()
        most = 0
        while any(t.is_alive() for t in waiting):
            most = max(most, len(_children() - known))
            time.sleep(0.005)
        assert most == cap, most
        assert len(late) == 2 and all(isinstance(o, QueryTimeoutError) for o in late), late
        message = str(late[0])
        assert "not started" in message and f"all {cap} SPARQL workers" in message
        assert "try again" in message
    finally:
        for thread in runaway:
            thread.join()
    try:
        assert all(isinstance(o, QueryTimeoutError) for o in outcomes), outcomes
        # The slots are free again: a plain query is answered.
        assert hurried.sparql_query(PLAIN, scope=scope).metadata["rows"] == graph.rows
    finally:
        hurried.close()
    assert _children() <= known


def _outcome(graph: RdflibGraphBackend, query: str, scope: frozenset[str]) -> object:
    try:
        return graph.sparql_query(query, scope=scope)
    except QueryError as exc:
        return exc


# ------------------------------------------------------------------ SPARQL: row cap


def test_row_cap_is_an_error_naming_the_cap(tmp_path, rid) -> None:
    backend = RdflibGraphBackend(tmp_path / "g", query_timeout=5.0, max_rows=5)
    backend.upsert(rid, [(file_uri(rid, f"f{i}"), "urn:p", "urn:o") for i in range(6)])
    scope = frozenset({rid})
    at_cap = "SELECT ?s ?p ?o WHERE { ?s ?p ?o } LIMIT 5"
    assert len(backend.sparql_query(at_cap, scope=scope).triples) == 5
    for query in (
        PLAIN,
        "CONSTRUCT WHERE { ?s ?p ?o }",
        "DESCRIBE ?s WHERE { ?s ?p ?o }",
    ):
        with pytest.raises(QueryLimitError, match=r"more than 5 rows .*max_rows"):
            backend.sparql_query(query, scope=scope)
    # Rows with an unbound variable are not returned, so they do not count.
    unbound = "SELECT ?s ?p ?x WHERE { ?s ?p ?o OPTIONAL { ?s <urn:none> ?x } }"
    assert backend.sparql_query(unbound, scope=scope).triples == []
    backend.close()


def test_row_cap_stops_an_endless_select_early(rid, tmp_path) -> None:
    # Without ORDER BY rows stream out of the engine: the cap ends the query
    # (~3.4 billion rows), not the time limit.  The limit here is generous, so
    # a loaded machine cannot turn the cap's answer into a timeout.
    patient = RdflibGraphBackend(tmp_path / "patient", query_timeout=60.0, max_rows=10_000)
    patient.upsert(rid, _dense_triples(rid))
    started = time.monotonic()
    with pytest.raises(QueryLimitError, match="10000 rows"):
        patient.sparql_query(
            "SELECT ?a ?p ?b WHERE { ?a ?p ?b . ?c ?q ?d . ?e ?r ?f }", scope=frozenset({rid})
        )
    assert time.monotonic() - started < 30
    patient.close()


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"query_timeout": 0}, ValueError),
        ({"query_timeout": -1.0}, ValueError),
        ({"query_timeout": float("nan")}, ValueError),
        ({"query_timeout": float("inf")}, ValueError),
        ({"query_timeout": "10"}, TypeError),
        ({"query_timeout": True}, TypeError),
        ({"max_rows": 0}, ValueError),
        ({"max_rows": -5}, ValueError),
        ({"max_rows": 1.5}, TypeError),
        ({"max_rows": True}, TypeError),
    ],
)
def test_limits_are_validated(kwargs, error) -> None:
    with pytest.raises(error):
        RdflibGraphBackend(**kwargs)


def test_defaults_are_ten_seconds_and_ten_thousand_rows() -> None:
    backend = RdflibGraphBackend()
    assert backend._query_timeout == 10.0
    assert backend._max_rows == 10_000


# ------------------------------------------------------------------ SPARQL: worker hygiene


def test_worker_output_never_reaches_the_parent_stdout(graph, rid, capfd, monkeypatch) -> None:
    """CLI ``--json`` output must stay clean: whatever the worker prints is lost."""
    real = sparql_worker._answer

    def noisy(*args):  # runs in the worker
        print("LEAK stdout", flush=True)
        os.write(1, b"LEAK fd1\n")
        os.write(2, b"LEAK fd2\n")
        return real(*args)

    monkeypatch.setattr(sparql_worker, "_answer", noisy)
    result = graph.sparql_query(PLAIN, scope=frozenset({rid}))
    assert result.metadata["rows"] == graph.rows
    out, err = capfd.readouterr()
    assert "LEAK" not in out
    assert "LEAK" not in err


def test_worker_refuses_sockets_even_past_the_guard(graph, rid, monkeypatch) -> None:
    """Defence in depth: a network call inside the worker fails, and the
    listener, which counts connections from any process, stays empty."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.setblocking(False)
    address = sock.getsockname()

    def connect(*args):  # runs in the worker
        socket.create_connection(address, timeout=1).close()
        raise AssertionError("connected")

    monkeypatch.setattr(sparql_worker, "_answer", connect)
    try:
        with pytest.raises(QueryError, match=r"socket\.\S+ is not allowed"):
            graph.sparql_query(PLAIN, scope=frozenset({rid}))
        with pytest.raises(BlockingIOError):
            sock.accept()
    finally:
        sock.close()


def test_worker_memory_is_capped(graph, rid, monkeypatch) -> None:
    monkeypatch.setattr(sparql_worker, "CHILD_MEMORY_BUDGET", 256 * 1024**2)

    def hog(*args):  # runs in the worker
        bytearray(512 * 1024**2)
        return {"triples": []}

    monkeypatch.setattr(sparql_worker, "_answer", hog)
    with pytest.raises(QueryError, match="MemoryError"):
        graph.sparql_query(PLAIN, scope=frozenset({rid}))


def test_worker_holds_none_of_the_parent_descriptors(graph, rid, monkeypatch) -> None:
    """Inherited descriptors (sockets, index files, the store's lock) are
    closed in the worker before it evaluates anything."""
    read_fd, write_fd = os.pipe()

    def write(*args):  # runs in the worker
        os.write(write_fd, b"inherited")
        return {"triples": []}

    monkeypatch.setattr(sparql_worker, "_answer", write)
    try:
        with pytest.raises(QueryError, match="Bad file descriptor"):
            graph.sparql_query(PLAIN, scope=frozenset({rid}))
        os.set_blocking(read_fd, False)
        with pytest.raises(BlockingIOError):
            os.read(read_fd, 100)
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_worker_that_dies_is_a_query_error(graph, rid, monkeypatch) -> None:
    def die(*args):  # runs in the worker
        os.kill(os.getpid(), 9)

    monkeypatch.setattr(sparql_worker, "_answer", die)
    children = _children()
    with pytest.raises(QueryError, match="killed by signal 9"):
        graph.sparql_query(PLAIN, scope=frozenset({rid}))
    assert _children() <= children  # none left behind (others may have ended)


# ------------------------------------------------------------------ Tantivy


@pytest.fixture
def text(tmp_path: Path, rid: str) -> Iterator[TantivyTextBackend]:
    backend = TantivyTextBackend(tmp_path / "text")
    backend.upsert(
        rid,
        [
            IndexUnit(file_uri(rid, f"f{i}.py"), f"def parse_json_{i}(x): return load(x) alpha")
            for i in range(30)
        ],
    )
    yield backend
    backend.close()


PATHOLOGICAL = {
    "20000 OR terms": (" OR ".join(f"t{i}" for i in range(20_000)), "characters long"),
    "1001 OR terms": (" OR ".join(["alpha"] * 1_001), "1001 terms"),
    "one word of 2000 parts": ("_".join(["json"] * 1_999), "terms"),
    "10000 nested parentheses": ("(" * 10_000 + "json" + ")" * 10_000, "characters long"),
    "4000 nested parentheses": ("(" * 4_000 + "json" + ")" * 4_000, "nests"),
    "33 nested parentheses": ("(" * 33 + "json" + ")" * 33, "33 deep"),
    "NOT chain": ("x OR " + "NOT " * 40 + "json", "deep"),
    "NOT and parentheses": ("x OR NOT (" * 20 + "json" + ")" * 20, "40 deep"),
    "1 MB query": ("json " * 200_000, "1000000 characters"),
    # Issue 9, finding 1: a sloppy phrase's cost explodes with its slop.
    "slop of a million": ('"parse json"~1000000', "slop is 1000000"),
}


@pytest.mark.parametrize(("query", "words"), PATHOLOGICAL.values(), ids=PATHOLOGICAL.keys())
def test_pathological_text_queries_are_refused_quickly(text, rid, query, words) -> None:
    started = time.monotonic()
    with pytest.raises(QueryError, match=f"{words}.*the limit is"):
        text.search(query, scope=frozenset({rid}), syntax="tantivy")
    assert time.monotonic() - started < 1.0
    assert len(text.search("json", scope=frozenset({rid}))) == 20


ACCEPTED = [
    "*",
    "p*",
    "json~2",
    '"parse json"~4',
    "content:[a TO z]",
    "content: IN [json alpha load]",
    "(" * 32 + "json" + ")" * 32,
    '"' + "(" * 100 + '" json',
    "\\(" * 100 + " json",
    " OR ".join(["alpha"] * 999) + " OR json",
    "json AND NOT (x OR NOT (y))",
]


@pytest.mark.parametrize("query", ACCEPTED)
def test_heavy_but_bounded_text_queries_end_normally_or_with_query_error(text, rid, query) -> None:
    started = time.monotonic()
    try:
        results = text.search(query, scope=frozenset({rid}), max_results=10**9, syntax="tantivy")
    except QueryError as exc:
        assert "limit" not in str(exc)  # refused by the parser, not a cap
    else:
        assert len(results) <= 30
    assert time.monotonic() - started < 2.0


@pytest.mark.parametrize("max_results", [10**9, 2**63 - 1, 2**63, 10**30])
def test_absurd_max_results_is_clamped(text, rid, capfd, max_results) -> None:
    results = text.search("json", scope=frozenset({rid}), max_results=max_results)
    assert len(results) == 30
    assert text.search("zzz", scope=frozenset({rid}), max_results=max_results) == []
    # No engine panic message on stderr (it would break the CLI's one-line errors).
    assert "panicked" not in capfd.readouterr().err


def test_deep_nesting_does_not_crash_a_small_thread_stack(tmp_path, rid) -> None:
    """Unchecked, tantivy's parser overflows the native stack and the process
    dies with SIGSEGV; run in a child so a regression fails instead of
    killing the test run."""
    script = f"""
import threading
from cleveragents.domain.models.acms.backends import IndexUnit
from cleveragents.domain.models.acms.errors import QueryError
from cleveragents.domain.models.acms.uko import file_uri
from cleveragents.infrastructure.acms.tantivy_text import TantivyTextBackend

rid = {rid!r}
backend = TantivyTextBackend()
backend.upsert(rid, [IndexUnit(file_uri(rid, "a.py"), "json")])
outcomes = []

def run():
    for depth in (32, 300, 3000):
        query = "(" * depth + "json" + ")" * depth
        try:
            outcomes.append(
                len(backend.search(query, scope=frozenset({{rid}}), syntax="tantivy"))
            )
        except QueryError as exc:
            outcomes.append(str(exc))

threading.stack_size(512 * 1024)
thread = threading.Thread(target=run)
thread.start()
thread.join()
print(outcomes)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "[1, 'the query nests parentheses / NOT 300 deep" in done.stdout
