"""``acms serve`` against clients that do not play fair: no token, slow
request heads, a host that closes stdout; and what it tells hosts about its
tools (read-only, clean descriptions, its version).

The real server runs in a subprocess on 127.0.0.1 over one indexed project.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx
import pytest

from cli_process import indexed_projects
from http_service import SERVE
from http_service import HttpServer as Server
from remote_servers import free_port

TOKEN = "s3cret-token-for-tests"
_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}
_MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    env, ids = indexed_projects(
        tmp_path_factory.mktemp("serve_hardening"),
        {"alpha": {"pkg/core.py": "def aardvark_helper():\n    return 'aardvark'\n"}},
    )
    return {"env": env, "ids": ids}


@pytest.fixture(scope="module")
def guarded(world: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("serve_token") / "stderr"
    env = {**world["env"], "ACMS_SERVE_TOKEN": TOKEN}
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    running = Server(env, log, "--project", "local/alpha", headers=bearer)
    yield running
    running.stop()


@pytest.mark.parametrize(
    "authorization", [None, "Bearer wrong-token", f"Basic {TOKEN}", f"Bearer {TOKEN}x", "Bearer"]
)
def test_with_a_token_every_path_refuses_a_request_without_it(
    guarded: Server, authorization: str | None
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    for path, body, extra in (
        ("/api/status", {}, {}),
        ("/api/search_text", {"query": "aardvark"}, {}),
        ("/mcp", _INITIALIZE, _MCP_HEADERS),
    ):
        r = httpx.post(f"{guarded.base}{path}", json=body, headers={**headers, **extra})
        assert r.status_code == 401, (path, r.text)
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert "Authorization: Bearer" in r.json()["error"]


def test_with_a_token_a_request_carrying_it_is_answered(guarded: Server) -> None:
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    r = httpx.post(f"{guarded.base}/api/search_text", json={"query": "aardvark"}, headers=bearer)
    assert r.status_code == 200 and r.json()["results"]
    r = httpx.post(f"{guarded.base}/mcp", json=_INITIALIZE, headers={**bearer, **_MCP_HEADERS})
    assert r.status_code == 200, r.text
    assert TOKEN not in guarded.log.read_text()  # never logged


def _started(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``acms serve`` that must stop at once (a refusal): its exit and stderr."""
    return subprocess.run(
        [*SERVE, *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_a_token_file_without_a_token_is_refused(world: dict[str, Any], tmp_path: Path) -> None:
    empty = tmp_path / "token"
    empty.write_text("\n")
    for path in (empty, tmp_path / "absent"):
        done = _started(
            world["env"], "--http", f"127.0.0.1:{free_port()}", "--token-file", str(path)
        )
        assert done.returncode == 2, done.stderr
        assert "token" in done.stderr and "Traceback" not in done.stderr


def test_a_wildcard_bind_without_a_token_says_so(world: dict[str, Any], tmp_path: Path) -> None:
    port = free_port()
    errors = tmp_path / "stderr"
    with errors.open("wb") as sink:
        proc = subprocess.Popen(
            [*SERVE, "--http", f"0.0.0.0:{port}", "--project", "local/alpha"],
            env=world["env"],
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )
        try:
            deadline = time.monotonic() + 60
            while "without a token" not in errors.read_text() and time.monotonic() < deadline:
                assert proc.poll() is None, errors.read_text()
                time.sleep(0.2)
        finally:
            proc.terminate()
            proc.wait(timeout=20)
    assert "whoever can reach it reads the served scope" in errors.read_text()


@pytest.fixture(scope="module")
def open_server(
    world: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("serve_open") / "stderr"
    running = Server(world["env"], log, "--project", "local/alpha")
    yield running
    running.stop()


def test_a_request_head_sent_too_slowly_is_cut_off(open_server: Server) -> None:
    """A header line every 2 s (slowloris) kept the connection, and a
    descriptor, forever: uvicorn waits for a head without a limit once its
    first byte came.  Now the head must be whole within 10 s."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", open_server.port), timeout=30) as conn:
        conn.sendall(
            f"POST /api/status HTTP/1.1\r\nHost: 127.0.0.1:{open_server.port}\r\n".encode()
        )
        closed = False
        for i in range(15):  # 30 s of trickle at most
            time.sleep(2)
            try:
                conn.sendall(f"X-Slow-{i}: {i}\r\n".encode())
                conn.settimeout(0.01)
                closed = conn.recv(1) == b""
            except TimeoutError:
                continue
            except OSError:
                closed = True
            finally:
                conn.settimeout(30)
            if closed:
                break
    assert closed, "the connection stayed open"
    assert time.monotonic() - started < 20
    r = httpx.post(f"{open_server.base}/api/status", timeout=30)
    assert r.status_code == 200  # and the service answers the next client


def test_tools_say_they_only_read_and_the_server_its_version(open_server: Server) -> None:
    headers = {**_MCP_HEADERS, "Content-Type": "application/json"}
    with httpx.Client(base_url=open_server.base, timeout=30) as client:
        r = client.post("/mcp", json=_INITIALIZE, headers=headers)
        assert r.status_code == 200, r.text
        session = {"Mcp-Session-Id": r.headers["mcp-session-id"], **headers}
        info = _sse_json(r.text)["result"]["serverInfo"]
        assert info["version"] == version("cleveragents-acms")
        client.post(
            "/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session
        )
        listed = client.post(
            "/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=session
        )
        tools = _sse_json(listed.text)["result"]["tools"]
    assert len(tools) == 12
    for tool in tools:
        assert tool["annotations"]["readOnlyHint"] is True, tool["name"]
        assert tool["annotations"]["destructiveHint"] is False
        description = tool["description"]
        assert description == description.strip() and "\n    " not in description, tool["name"]


def _sse_json(text: str) -> Any:
    """The JSON-RPC message of a one-event SSE answer (or a JSON body)."""
    for line in text.splitlines():
        if line.startswith("data:"):
            return json.loads(line[5:])
    return json.loads(text)


def test_a_host_that_closes_stdout_ends_the_stdio_service_quietly(
    world: dict[str, Any],
) -> None:
    """The SDK's stdout writer fails inside its task group: the service said
    "internal error: ExceptionGroup ..." and exit 1; now it ends as any
    command whose reader went away (141, nothing on stderr but its logs)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "cleveragents.acms", "serve", "--mcp", "--project", "local/alpha"],
        env=world["env"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdout.close()  # the host stops reading
    message = json.dumps(_INITIALIZE) + "\n"
    try:
        for _ in range(50):
            proc.stdin.write(message.encode())
            proc.stdin.flush()
            time.sleep(0.05)
            if proc.poll() is not None:
                break
    except BrokenPipeError:
        pass
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 141, err.decode()
    assert b"internal error" not in err and b"Traceback" not in err
