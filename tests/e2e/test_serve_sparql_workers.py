"""``acms serve`` never leaves a SPARQL worker running for nobody.

A worker is a process forked per query and killed at the query's time limit.
Found by an agent-host tester: a server stopped by SIGTERM or Ctrl-C left its
worker running at 100% CPU, reparented to init; a cancelled call
(``notifications/cancelled``), an HTTP client gone, or stdin closed kept the
worker to the time limit (12 abandoned HTTP calls: 12 workers of ~140 MB).
Here each of those ends the worker within a second or two, and the server
answers on where it should.

The query is the tester's: a count over a cross join of every triple, which
runs for minutes over a few thousand triples.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.types import LATEST_PROTOCOL_VERSION

from cli_process import indexed_projects
from http_service import HttpServer

SERVE = [sys.executable, "-m", "cleveragents.cli.serve"]
ENDLESS = "SELECT (COUNT(*) AS ?c) WHERE { ?a ?p ?b . ?c ?q ?d . ?e ?r ?f }"
# Asked first: it loads the graph (a query over a graph not loaded first
# runs a short-lived worker that asks for the load; the test must watch the
# worker that evaluates ENDLESS, not that one).
WARM = "SELECT ?s ?p ?o WHERE { ?s ?p ?o } LIMIT 1"
# How long a killed worker may take to be gone (the parent looks at its
# call's cancellation every 50 ms; a loaded machine needs slack).
GONE_WITHIN = 3.0
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": LATEST_PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}


def _module(i: int) -> str:
    lines = [f"from pkg import m{(i + 1) % 12}\n\n"]
    for j in range(25):
        lines.append(f"def f{j}(x):\n    return m{(i + 1) % 12}.f{(j + 1) % 25}(x) + {j}\n\n")
    return "".join(lines)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    base = tmp_path_factory.mktemp("workers")
    files = {f"pkg/m{i}.py": _module(i) for i in range(12)}
    env, _ = indexed_projects(base, {"big": files})
    return env


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                found.update(int(p) for p in fh.read().split())
        except FileNotFoundError:
            continue
    return found


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie is not: it runs nothing)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rpartition(")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def _worker_of(pid: int, within: float = 60.0) -> int:
    """The server's worker, once it has run for half a second."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = [c for c in _children(pid) if _running(c)]
        if found:
            time.sleep(0.5)
            if _running(found[0]):
                return found[0]
        time.sleep(0.02)
    pytest.fail("no SPARQL worker started")


def _gone(pid: int, within: float = GONE_WITHIN) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not _running(pid):
            return True
        time.sleep(0.02)
    return False


class Stdio:
    """``acms serve --mcp`` spoken to line by line (so that it can be
    stopped mid-call, which the SDK's client does not do)."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.errors = log.open("wb")
        self.log = log
        self.proc = subprocess.Popen(
            [*SERVE, "--mcp", "--project", "local/big"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.errors,
            env=env,
        )
        self.buffer = b""
        self.send(INITIALIZE)
        self.answer(0)
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        self.call(100, "sparql", {"query": WARM})
        assert "error" not in self.answer(100)

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def call(self, ident: int, tool: str, arguments: dict[str, Any]) -> None:
        self.send(
            {
                "jsonrpc": "2.0",
                "id": ident,
                "method": "tools/call",
                "params": {"name": tool, "arguments": arguments},
            }
        )

    def answer(self, ident: int, within: float = 60.0) -> dict[str, Any]:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            while b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                message: dict[str, Any] = json.loads(line)
                if message.get("id") == ident:
                    return message
            if select.select([fd], [], [], 0.1)[0]:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    break
                self.buffer += chunk
        pytest.fail(f"no answer to {ident}: {self.log.read_text()[-2000:]}")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        self.errors.close()


@pytest.fixture
def stdio(env: dict[str, str], tmp_path: Path) -> Any:
    server = Stdio(env, tmp_path / "stderr")
    yield server
    server.close()


@pytest.mark.parametrize(
    ("signum", "code", "word"),
    [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")],
)
def test_stopping_the_stdio_server_mid_query_leaves_no_worker(
    stdio: Stdio, signum: int, code: int, word: str
) -> None:
    stdio.call(1, "sparql", {"query": ENDLESS})
    worker = _worker_of(stdio.proc.pid)
    stdio.proc.send_signal(signum)
    assert stdio.proc.wait(10) == code
    assert f"acms serve: {word}" in stdio.log.read_text()
    assert _gone(worker), f"worker {worker} still runs after the server ended"


def test_a_cancelled_call_stops_its_worker_and_the_server_answers_on(stdio: Stdio) -> None:
    stdio.call(1, "sparql", {"query": ENDLESS})
    worker = _worker_of(stdio.proc.pid)
    stdio.send(
        {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": 1, "reason": "the agent moved on"},
        }
    )
    assert _gone(worker), "the cancelled call's worker still runs"
    stdio.call(2, "status", {})
    answer = stdio.answer(2, within=10)
    assert "local/big" in answer["result"]["content"][0]["text"]
    assert stdio.proc.poll() is None


def test_closing_stdin_mid_query_ends_the_server_and_its_worker_promptly(stdio: Stdio) -> None:
    stdio.call(1, "sparql", {"query": ENDLESS})
    worker = _worker_of(stdio.proc.pid)
    closed = time.monotonic()
    assert stdio.proc.stdin is not None
    stdio.proc.stdin.close()
    stdio.proc.wait(15)
    assert time.monotonic() - closed < GONE_WITHIN
    assert _gone(worker)


def _warm(server: HttpServer) -> None:
    r = httpx.post(f"{server.base}/api/sparql", json={"query": WARM}, timeout=60)
    assert r.status_code == 200, r.text


def test_abandoned_http_calls_stop_their_workers(env: dict[str, str], tmp_path: Path) -> None:
    server = HttpServer(env, tmp_path / "stderr", "--project", "local/big", "--log-level", "info")
    try:
        _warm(server)
        workers = set()
        for _ in range(3):
            with pytest.raises(httpx.TimeoutException):  # the client gives up
                httpx.post(f"{server.base}/api/sparql", json={"query": ENDLESS}, timeout=1.5)
            workers |= {c for c in _children(server.proc.pid) if _running(c)}
        assert workers, "no worker seen"
        assert all(_gone(w) for w in workers), "an abandoned call's worker still runs"
        r = httpx.post(f"{server.base}/api/status", json={}, timeout=10)
        assert r.status_code == 200
        assert any(r.get("event") == "acms.serve.client_disconnected" for r in server.records())
    finally:
        server.stop()


def test_stopping_the_http_server_mid_query_is_prompt_and_leaves_no_worker(
    env: dict[str, str], tmp_path: Path
) -> None:
    server = HttpServer(env, tmp_path / "stderr", "--project", "local/big")
    try:
        _warm(server)
        with httpx.Client(timeout=30) as client:
            answers: list[httpx.Response] = []
            call = threading.Thread(
                target=lambda: answers.append(
                    client.post(f"{server.base}/api/sparql", json={"query": ENDLESS})
                )
            )
            call.start()
            worker = _worker_of(server.proc.pid)
            stopped = time.monotonic()
            server.proc.send_signal(signal.SIGTERM)
            assert server.proc.wait(15) == 143
            assert time.monotonic() - stopped < GONE_WITHIN
            assert _gone(worker)
            call.join(10)
            # The caller is told to come back, not that its query was bad.
            assert answers and answers[0].status_code == 503, answers
    finally:
        server.stop()  # closes its pipes, whether it still runs or not


def _mcp_post(
    client: httpx.Client, url: str, message: dict[str, Any], session: str | None = None
) -> httpx.Response:
    headers = {"Accept": "application/json, text/event-stream"}
    if session is not None:
        headers["Mcp-Session-Id"] = session
    return client.post(url, json=message, headers=headers)


def test_a_call_cancelled_over_streamable_http_stops_its_worker(
    env: dict[str, str], tmp_path: Path
) -> None:
    """The stdio test above, through ``/mcp``: the cancel arrives as its own
    POST while the call's response stream is still open."""
    server = HttpServer(env, tmp_path / "stderr", "--project", "local/big")
    url = f"{server.base}/mcp"
    try:
        _warm(server)
        with httpx.Client(timeout=60) as client:
            init = _mcp_post(
                client,
                url,
                INITIALIZE,
            )
            assert init.status_code == 200, init.text
            session = init.headers["mcp-session-id"]
            notice = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            assert _mcp_post(client, url, notice, session).status_code == 202
            answers: list[httpx.Response] = []
            call = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "sparql", "arguments": {"query": ENDLESS}},
            }
            streaming = httpx.Client(timeout=60)
            running = threading.Thread(
                target=lambda: answers.append(_mcp_post(streaming, url, call, session))
            )
            running.start()
            worker = _worker_of(server.proc.pid)
            cancel = {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": 1, "reason": "the agent moved on"},
            }
            assert _mcp_post(client, url, cancel, session).status_code == 202
            assert _gone(worker), "the cancelled call's worker still runs"
            status = {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "status", "arguments": {}},
            }
            answer = _mcp_post(client, url, status, session)
            assert answer.status_code == 200 and "local/big" in answer.text, answer.text
            running.join(10)
            streaming.close()
            # The cancelled call's stream ends with the SDK's "Request cancelled".
            assert answers and '"code":-32800' in answers[0].text, answers
        assert server.proc.poll() is None
    finally:
        server.stop()


def test_a_flood_of_slow_sparql_calls_leaves_the_other_tools_their_threads(
    env: dict[str, str], tmp_path: Path
) -> None:
    """Found by a reviewer: 45-120 slow SPARQL calls at once held every
    thread of the service's one pool (anyio's 40, each call waiting for one
    of the few SPARQL workers), and ``status`` waited 9-29 s for a thread.
    Each tool has its own lane now: ``status`` answers while every SPARQL
    call is still running or waiting (each takes at least its time limit)."""
    server = HttpServer(env, tmp_path / "stderr", "--project", "local/big")
    try:
        _warm(server)

        async def flood() -> tuple[httpx.Response, int, int]:
            limits = httpx.Limits(max_connections=100)
            async with httpx.AsyncClient(timeout=60, limits=limits) as client:
                slow = [
                    asyncio.ensure_future(
                        client.post(f"{server.base}/api/sparql", json={"query": ENDLESS})
                    )
                    for _ in range(60)  # more than the 40 threads of anyio's one pool
                ]
                await asyncio.to_thread(_worker_of, server.proc.pid)
                await asyncio.sleep(1.0)  # the rest arrive and take threads or wait
                started = sum(t.done() for t in slow)
                status = await client.post(f"{server.base}/api/status", json={})
                finished = sum(t.done() for t in slow)
                for task in slow:
                    task.cancel()
                await asyncio.gather(*slow, return_exceptions=True)
            return status, started, finished

        status, started, finished = asyncio.run(flood())
        assert started == 0, "a SPARQL call ended before status was asked: nothing was tested"
        assert status.status_code == 200, status.text
        assert finished == 0, f"status waited for {finished} SPARQL calls to end first"
        # The flood is gone with its callers: the service answers at once.
        assert httpx.post(f"{server.base}/api/status", json={}, timeout=10).status_code == 200
    finally:
        server.stop()
