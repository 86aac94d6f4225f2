"""The JSON API's status codes: the caller's fault (400, 403) or the
service's (503, with Retry-After), so a load balancer or client can tell;
and the Host/Origin allow-list that keeps a web page out (421, 403)."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from cleveragents.cli.serve import (
    HostAllowList,
    ServiceTool,
    _arguments_model,
    _http_app,
    main,
    make_mcp_server,
)
from cleveragents.domain.models.acms import errors
from cleveragents.domain.models.acms.errors import (
    BusyError,
    IndexUnavailableError,
    ModelUnavailableError,
    QueryError,
    QueryLimitError,
    ScopeError,
)


def _app(error: Exception, allowed: HostAllowList | None = None) -> Any:
    from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata

    def probe(query: str) -> dict[str, Any]:
        """Raises the error under test."""
        raise error

    tools = {
        "probe": ServiceTool(
            "probe", probe, FuncMetadata(arg_model=_arguments_model("probe", probe))
        )
    }
    return _http_app(tools, make_mcp_server(None, tools), allowed)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (IndexUnavailableError("the Milvus server at http://milvus:19530 is unreachable"), 503),
        (BusyError("another reindex holds the lock"), 503),
        (ModelUnavailableError("the model file is missing"), 503),
        (ScopeError("resource X is not in this service's scope"), 403),
        (QueryError("invalid query"), 400),
        (ValueError("bad value"), 400),
    ],
)
def test_errors_map_to_whose_fault_they_are(error: Exception, status: int) -> None:
    client = TestClient(_app(error), base_url="http://127.0.0.1:8765")
    r = client.post("/api/probe", json={"query": "x"})
    assert r.status_code == status
    assert r.json() == {"error": str(error)}
    assert ("retry-after" in r.headers) == (status == 503)


def _timeout_error(message: str) -> Exception:
    # Looked up when the test runs: the class the SPARQL time limit raises.
    return getattr(errors, "QueryTimeoutError", QueryLimitError)(message)


SPARQL_TIMEOUT = "the SPARQL query was stopped at its time limit of 10 s"
SPARQL_BUSY = "the SPARQL query was not started: all 2 SPARQL workers of the service were busy"


@pytest.mark.parametrize("message", [SPARQL_TIMEOUT, SPARQL_BUSY])
def test_a_query_too_slow_now_is_a_503_to_retry_and_one_line_over_mcp(message: str) -> None:
    """A time-out is not bad input (400): the same query may be answered
    when the service is less busy."""
    client = TestClient(_app(_timeout_error(message)), base_url="http://127.0.0.1:8765")
    r = client.post("/api/probe", json={"query": "x"})
    assert (r.status_code, r.json()) == (503, {"error": message})
    assert r.headers["retry-after"] == "5"
    assert issubclass(errors.QueryTimeoutError, QueryLimitError)


def test_the_row_cap_stays_a_400() -> None:
    error = QueryLimitError("the SPARQL query gives more than 10000 rows (the row cap)")
    r = TestClient(_app(error), base_url="http://127.0.0.1:8765").post(
        "/api/probe", json={"query": "x"}
    )
    assert r.status_code == 400


MCP_HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


@pytest.mark.parametrize(
    ("bind", "extra", "host", "origin", "status"),
    [
        ("127.0.0.1", (), "127.0.0.1:8765", None, 200),
        ("127.0.0.1", (), "localhost:8765", "http://localhost:8765", 200),
        ("127.0.0.1", (), "[::1]:8765", None, 200),
        # DNS rebinding: the attacker's name resolves to 127.0.0.1.
        ("127.0.0.1", (), "attacker.example:8765", None, 421),
        ("127.0.0.1", (), "attacker.example", None, 421),
        ("127.0.0.1", (), "127.0.0.1.attacker.example:8765", None, 421),
        # A cross-site page: the browser names its origin.
        ("127.0.0.1", (), "127.0.0.1:8765", "http://attacker.example", 403),
        ("127.0.0.1", (), "127.0.0.1:8765", "null", 403),
        ("0.0.0.0", ("acms",), "acms:8765", None, 200),
        ("0.0.0.0", ("acms",), "acms:8765", "http://acms:8765", 200),
        ("0.0.0.0", ("Serve",), "serve:8765", "http://serve:8765", 200),
        ("0.0.0.0", ("acms:8765",), "acms:9999", None, 421),
        ("0.0.0.0", (), "acms:8765", None, 421),
        ("10.1.2.3", (), "10.1.2.3:8765", None, 200),
    ],
)
def test_only_allowed_hosts_and_origins_are_answered(
    bind: str, extra: tuple[str, ...], host: str, origin: str | None, status: int
) -> None:
    allowed = HostAllowList.for_bind(bind, extra)
    headers = {"host": host, **({"origin": origin} if origin else {})}
    with TestClient(_app(QueryError("x"), allowed)) as client:  # runs the MCP lifespan
        r = client.post("/api/probe", json={"query": "x"}, headers=headers)
        # /mcp keeps to the same list (the MCP SDK's check, given our settings).
        m = client.post("/mcp", json={}, headers={**MCP_HEADERS, **headers})
    assert r.status_code == (400 if status == 200 else status), r.text
    assert "error" in r.json()
    assert (m.status_code in (421, 403)) == (status != 200), (m.status_code, m.text)


def test_a_bad_allow_host_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--http", "127.0.0.1:1", "--allow-host", "evil host/x"]) == 2
    assert "--allow-host takes NAME or NAME:PORT" in capsys.readouterr().err
