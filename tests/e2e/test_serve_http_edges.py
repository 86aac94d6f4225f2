"""``acms serve --http`` at its edges: a client that hangs up, paths under
``/api`` that name no tool.

The real server runs in a subprocess on 127.0.0.1 over one indexed project,
its stderr (JSON log lines) kept in a file the tests read.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from cli_process import indexed_projects, run_acms
from http_service import HttpServer as Server


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    env, ids = indexed_projects(
        tmp_path_factory.mktemp("serve_edges"),
        {"alpha": {"pkg/core.py": "def aardvark_helper():\n    return 'aardvark'\n"}},
    )
    return {"env": env, "ids": ids}


@pytest.fixture(scope="module")
def server(world: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("serve_edges_http") / "stderr"
    running = Server(world["env"], log, "--project", "local/alpha", "--log-level", "info")
    yield running
    running.stop()


def test_a_client_hanging_up_mid_upload_is_one_info_line(server: Server) -> None:
    """A client gone before its body arrived whole (a cancelled call, an
    agent closed) is a normal event: one info line, no error, no traceback,
    and the server goes on answering; at the JSON API as at MCP's endpoint."""
    for path in ("/api/search", "/mcp"):
        head = (
            f"POST {path} HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{server.port}\r\n"
            "Content-Type: application/json\r\n"
            "Accept: application/json, text/event-stream\r\n"
            "Content-Length: 500000\r\n\r\n"
        )
        # Counted before the call: the server may log the hang-up at once.
        seen = len([r for r in server.records() if r["event"] == "acms.serve.client_disconnected"])
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as conn:
            conn.sendall(head.encode() + b'{"query": "' + b"x" * 10_000)
            time.sleep(0.3)  # the server is reading the body when the client goes
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            records = server.records()
            gone = [r for r in records if r["event"] == "acms.serve.client_disconnected"]
            errors = [r for r in records if r["level"] in ("error", "critical")]
            if len(gone) > seen or errors:
                break
            time.sleep(0.1)
        assert errors == [], errors[0]
        assert len(gone) == seen + 1, records
        assert gone[-1]["level"] == "info" and "exception" not in gone[-1]
    assert gone[0]["path"] == "/api/search"
    assert "Traceback" not in server.log.read_text()
    r = httpx.post(f"{server.base}/api/search_text", json={"query": "aardvark"}, timeout=30)
    assert r.status_code == 200 and r.json()["results"]


@pytest.mark.parametrize("path", ["/api", "/api/", "/api/search/extra", "/api/a/b/c"])
@pytest.mark.parametrize("method", ["POST", "GET"])
def test_every_answer_under_api_is_json(server: Server, path: str, method: str) -> None:
    """A path under /api that names no tool is a JSON refusal like an
    unknown tool's (it was Starlette's plain-text "Not Found"), naming the
    tools; another method than POST is the JSON 405 a tool's path gives."""
    r = httpx.request(method, f"{server.base}{path}", json={}, timeout=30)
    assert r.headers["content-type"] == "application/json", (r.status_code, r.text)
    error = r.json()["error"]
    if method == "POST":
        assert r.status_code == 404
        assert "search_text" in error and "status" in error  # the tools there are
    else:
        assert r.status_code == 405 and r.headers["allow"] == "POST"


@pytest.mark.parametrize("tool", ["search", "search_text"])
def test_a_glob_in_another_glob_language_is_a_400_naming_path(server: Server, tool: str) -> None:
    r = httpx.post(
        f"{server.base}/api/{tool}", json={"query": "aardvark", "path": "pkg/[a-"}, timeout=30
    )
    assert r.status_code == 400, r.text
    assert r.json()["error"].startswith("the path glob 'pkg/[a-' holds '['")


def test_status_names_the_resources_removed_since_the_start(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The scope is fixed when the server starts; a resource removed from
    the registry since (``acms resource remove``) is no longer listed as
    served by ``status`` but named under ``removed``."""
    base = tmp_path_factory.mktemp("serve_removed")
    env, ids = indexed_projects(
        base,
        {name: {"pkg/core.py": f"def {name}_helper():\n    pass\n"} for name in ("one", "two")},
    )
    server = Server(env, base / "stderr", "--project", "local/one", "--project", "local/two")
    try:
        before = httpx.post(f"{server.base}/api/status", json={}, timeout=30).json()
        assert sorted(before["resources"]) == sorted(ids.values())
        assert "removed" not in before
        done = run_acms(env, "resource", "remove", ids["two"])
        assert done.returncode == 0, done.stderr
        after = httpx.post(f"{server.base}/api/status", json={}, timeout=30).json()
    finally:
        server.stop()
    assert after["resources"] == [ids["one"]]
    assert after["removed"] == [ids["two"]]
    assert after["projects"] == {"local/one": [ids["one"]], "local/two": []}
