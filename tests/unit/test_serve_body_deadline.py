"""The service reads each request body whole, within a deadline and a size
limit, before any route sees it: a body sent a byte a second to ``/mcp`` held
its connection for good (the SDK reads bodies with no deadline of ours)."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from cleveragents.cli import serve


class App:
    """An ASGI app that records the messages it receives and answers 200."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.messages.append(await receive())
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def _run(
    path: str,
    method: str,
    chunks: list[bytes],
    pause: float = 0.0,
    gates: list[Any] | None = None,
) -> tuple[App, dict[str, Any]]:
    """The middleware over a recording app, fed ``chunks`` (``pause`` apart);
    the middleware is appended to ``gates`` when given."""
    app = App()
    sent: list[dict[str, Any]] = []
    pending = list(chunks)

    async def receive() -> dict[str, Any]:
        if not pending:
            await anyio.sleep(3600)  # nothing more: a client that stalls
        await anyio.sleep(pause)
        body = pending.pop(0)
        return {"type": "http.request", "body": body, "more_body": bool(pending)}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "headers": []}
    gate = serve._BodyDeadline(app)
    if gates is not None:
        gates.append(gate)
    anyio.run(gate, scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return app, {"status": start["status"], "body": body}


def test_a_body_that_arrives_whole_reaches_the_app_as_one_message() -> None:
    app, answer = _run("/mcp", "POST", [b'{"a":', b" 1}"])
    assert answer["status"] == 200
    assert app.messages == [{"type": "http.request", "body": b'{"a": 1}', "more_body": False}]


def test_a_body_too_slow_is_408_and_never_reaches_the_app(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serve, "_BODY_SECONDS", 0.3)
    for path in ("/mcp", "/api/search"):
        app, answer = _run(path, "POST", [b"{"] * 50, pause=0.05)
        assert answer["status"] == 408 and app.messages == []
        assert "did not arrive within" in json.loads(answer["body"])["error"]


@pytest.mark.parametrize(
    ("path", "limit"), [("/api/status", serve.MAX_REQUEST_BYTES), ("/mcp", serve._MCP_BODY_BYTES)]
)
def test_a_body_over_its_paths_limit_is_413(path: str, limit: int) -> None:
    app, answer = _run(path, "POST", [b"x" * limit, b"x"])
    assert answer["status"] == 413 and app.messages == []
    _, fits = _run(path, "POST", [b"x" * limit])
    assert fits["status"] == 200


def test_a_request_without_a_body_is_passed_on_untouched() -> None:
    app, answer = _run("/mcp", "GET", [b""])
    assert answer["status"] == 200 and app.messages == [
        {"type": "http.request", "body": b"", "more_body": False}
    ]


def test_the_connection_cap_follows_the_descriptor_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    import resource

    for soft, cap in ((1024, 512), (20_000, 4096), (100, 64)):
        monkeypatch.setattr(resource, "getrlimit", lambda _which, soft=soft: (soft, soft))
        assert serve.connection_cap() == cap


def test_bodies_past_the_shared_budget_are_503_and_the_budget_is_given_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """All requests being read hold at most _BODY_BUDGET bytes: thousands of
    connections each sending 4 MiB took the service's memory."""
    monkeypatch.setattr(serve, "_BODY_BUDGET", 100)
    gates: list[Any] = []
    app, answer = _run("/mcp", "POST", [b"x" * 60, b"x" * 60], gates=gates)
    assert answer["status"] == 503 and app.messages == []
    assert gates[0].held == 0  # a refused body's bytes are given back
    _, fits = _run("/mcp", "POST", [b"x" * 90], gates=gates)
    assert fits["status"] == 200 and gates[1].held == 0
