"""``acms serve`` driven by the MCP SDK's own client, over stdio and HTTP.

Two projects with distinct marker words are indexed through the CLI; the
server is started for one of them.  Every tool answers within its budget, a
call may narrow the scope and never widen it, and nothing of the other
project comes back, in any tool, including errors.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from cleveragents.domain.models.acms.uko import file_uri
from cli_process import indexed_projects
from remote_servers import free_port

SERVE = [sys.executable, "-m", "cleveragents.cli.serve"]


def _cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "cleveragents.acms", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("serve")
    env, ids = indexed_projects(
        base,
        {
            name: {
                "pkg/core.py": f"class {marker.title()}Engine:\n"
                f'    """The {marker} engine."""\n\n'
                f"    def run(self):\n        return {marker}_helper()\n\n\n"
                f"def {marker}_helper():\n    return '{marker}'\n"
            }
            for name, marker in (("alpha", "aardvark"), ("bravo", "bumblebee"))
        },
    )
    return {"env": env, "ids": ids, "data": base / "data"}


def _text(result: Any) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


async def _calls(client: Client, world: dict[str, Any]) -> dict[str, Any]:
    alpha, bravo = world["ids"]["alpha"], world["ids"]["bravo"]
    out: dict[str, Any] = {"tools": sorted(t.name for t in (await client.list_tools()).tools)}
    ok = {
        "search": {"query": "aardvark helper", "budget": 2000},
        "search_text": {"query": "aardvark"},
        "search_vector": {"query": "aardvark engine"},
        "sparql": {"query": "SELECT ?s ?p ?o WHERE { ?s ?p ?o } LIMIT 5"},
        "triples": {"subject": file_uri(alpha, "pkg/core.py")},
        "traverse": {"start": file_uri(alpha, "pkg/core.py"), "depth": 1},
        "read": {"uri": file_uri(alpha, "pkg/core.py") + "#L1-L3"},
        "context": {"task": "what does the aardvark engine run", "budget": 1500},
        "symbols": {"path": "pkg/core.py"},
        "callers": {"target": "aardvark_helper"},
        "callees": {"source": "AardvarkEngine.run"},
        "status": {},
    }
    for name, args in ok.items():
        result = await client.call_tool(name, args)
        out[name] = (bool(result.is_error), _text(result))
    # A file path stands for its node in each in-scope resource with that
    # file: only alpha's here, though bravo has a pkg/core.py too.
    out["alpha_core"] = file_uri(alpha, "pkg/core.py")
    by_path = {
        "triples_by_path": ("triples", {"subject": "pkg/core.py"}),
        "traverse_by_path": ("traverse", {"start": "./pkg/core.py", "depth": 1}),
        "read_by_path": ("read", {"uri": "pkg/core.py#L1-L3"}),
    }
    for key, (name, args) in by_path.items():
        result = await client.call_tool(name, args)
        out[key] = (bool(result.is_error), _text(result))
    refused = {
        "other_project": ("search", {"query": "bumblebee", "projects": ["local/bravo"]}),
        "other_resource": ("search_text", {"query": "bumblebee", "resources": [bravo]}),
        "other_read": ("read", {"uri": file_uri(bravo, "pkg/core.py")}),
        "other_triples": ("triples", {"subject": file_uri(bravo, "pkg/core.py")}),
        "other_traverse": ("traverse", {"start": file_uri(bravo, "pkg/core.py")}),
        "unknown_path": ("traverse", {"start": "pkg/absent.py"}),
        "other_path": ("triples", {"subject": "pkg/core.py", "projects": ["local/bravo"]}),
        "sparql_graph": ("sparql", {"query": "SELECT ?s ?p ?o WHERE { GRAPH ?g { ?s ?p ?o } }"}),
        "other_callers": ("callers", {"target": "bumblebee_helper", "projects": ["local/bravo"]}),
        "bad_budget": ("search", {"query": "x", "budget": 5}),
        "empty_query": ("search", {"query": "   "}),
    }
    for key, (name, args) in refused.items():
        result = await client.call_tool(name, args)
        out[key] = (bool(result.is_error), _text(result))
    out["after_errors"] = _text(await client.call_tool("search_text", {"query": "aardvark"}))
    return out


REASONS = {
    "other_project": "is not in this session's scope",
    "other_resource": "is not in this session's scope",
    "other_read": "is not in this session's scope",
    "other_callers": "is not in this session's scope",
    "other_path": "is not in this session's scope",
    # Another resource's node: refused as read refuses it, not an empty
    # answer that reads as "no edges".
    "other_triples": "outside this session's scope",
    "other_traverse": "outside this session's scope",
    "unknown_path": "neither an IRI nor a file path",
    "sparql_graph": "GRAPH",
    # Refused by the argument model, at the bound its schema states.
    "bad_budget": "bad argument 'budget': Input should be greater than or equal to 256",
    "empty_query": "query",
}


def _check(out: dict[str, Any]) -> None:
    assert out["tools"] == sorted(
        [
            "callees",
            "callers",
            "context",
            "read",
            "search",
            "search_text",
            "search_vector",
            "sparql",
            "status",
            "symbols",
            "traverse",
            "triples",
        ]
    )
    for name in (
        "search",
        "search_text",
        "search_vector",
        "sparql",
        "triples",
        "traverse",
        "read",
        "context",
        "status",
    ):
        is_error, text = out[name]
        assert not is_error, (name, text)
        assert isinstance(json.loads(text), dict)
        assert "Bumblebee" not in text
    search = json.loads(out["search"][1])
    assert len(out["search"][1]) <= 2000
    hit = search["results"][0]
    assert hit["path"] == "pkg/core.py"
    assert isinstance(hit["start_line"], int)
    assert any("aardvark" in line["text"] for line in hit["lines"])
    read = json.loads(out["read"][1])
    assert [line["line"] for line in read["results"]] == [1, 2, 3]
    assert read["results"][0]["text"] == "class AardvarkEngine:"
    assert len(out["context"][1]) <= 1500
    symbols = json.loads(out["symbols"][1])["results"]
    assert [(r["name"], r["kind"], r["line"], r["end_line"]) for r in symbols] == [
        ("AardvarkEngine", "class", 1, 5),
        ("AardvarkEngine.run", "method", 4, 5),
        ("aardvark_helper", "function", 8, 9),
    ]
    callers = json.loads(out["callers"][1])["results"]
    assert [(r["caller"], r["lines"]) for r in callers] == [("AardvarkEngine.run", [5])]
    callees = json.loads(out["callees"][1])["results"]
    assert [c["name"] for c in callees] == ["aardvark_helper"]
    assert callees[0]["definitions"][0].endswith("#sym=aardvark_helper")
    for key in (
        "other_callers",
        "other_project",
        "other_resource",
        "other_read",
        "other_triples",
        "other_traverse",
        "unknown_path",
        "other_path",
        "sparql_graph",
        "bad_budget",
        "empty_query",
    ):
        is_error, text = out[key]
        assert "Bumblebee" not in text and "bumblebee_helper" not in text, key
        assert is_error, key
        # The agent reads why, to correct its call (not only "Error executing
        # tool <name>", what the SDK says of a crash).
        assert REASONS[key] in text, (key, text)
    assert "AardvarkEngine" in out["after_errors"]
    for key, tool, field, given in (
        ("triples_by_path", "triples", "subject", "pkg/core.py"),
        ("traverse_by_path", "traverse", "start", "./pkg/core.py"),
    ):
        is_error, text = out[key]
        assert not is_error, (key, text)
        answer, by_iri = json.loads(text), json.loads(out[tool][1])
        assert answer[field] == given and answer["nodes"] == [out["alpha_core"]]
        assert answer["results"] == by_iri["results"] and answer["results"]
        assert "nodes" not in by_iri  # an IRI stands for itself
    assert out["read_by_path"] == out["read"]  # the one in-scope pkg/core.py


def test_mcp_over_stdio_every_tool_and_scope_narrowing(world: dict[str, Any]) -> None:
    params = StdioServerParameters(
        command=SERVE[0],
        args=[*SERVE[1:], "--mcp", "--project", "local/alpha", "--data-dir", str(world["data"])],
        env={k: v for k, v in world["env"].items() if k != "ACMS_DATA_DIR"},
    )

    async def run() -> dict[str, Any]:
        async with Client(params, read_timeout_seconds=60) as client:
            return await _calls(client, world)

    _check(anyio.run(run))


def test_stdout_of_serve_mcp_carries_only_json_rpc(world: dict[str, Any], tmp_path: Path) -> None:
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "search_text", "arguments": {"query": "aardvark"}},
        },
        {"jsonrpc": "2.0", "id": 4, "method": "no/such/method"},
        {
            "jsonrpc": "2.0",
            "id": 5,
            "method": "tools/call",
            "params": {"name": "search", "arguments": {"query": 42}},
        },
    ]
    replies: list[dict[str, Any]] = []
    with (
        (tmp_path / "stderr").open("wb") as errors,
        subprocess.Popen(
            [*SERVE, "--mcp", "--project", "local/alpha", "--log-level", "debug"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            env=world["env"],
        ) as proc,
    ):
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("".join(json.dumps(m) + "\n" for m in messages).encode())
        proc.stdin.flush()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not {1, 2, 3, 4, 5} <= {r.get("id") for r in replies}:
            line = proc.stdout.readline()
            if not line:
                break
            if line.strip():
                replies.append(json.loads(line))  # every line on stdout is JSON
        proc.kill()
    assert (tmp_path / "stderr").stat().st_size > 0  # the debug logs went there
    assert all(r.get("jsonrpc") == "2.0" for r in replies)
    by_id = {r.get("id"): r for r in replies}
    assert {1, 2, 3, 4, 5} <= set(by_id)
    assert "error" in by_id[4]
    assert "AardvarkEngine" in json.dumps(by_id[3])


@pytest.fixture(scope="module")
def http_server(world: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Any:
    port = free_port()
    log = tmp_path_factory.mktemp("http") / "stderr"
    errors = log.open("wb")
    proc = subprocess.Popen(
        [*SERVE, "--http", f"127.0.0.1:{port}", "--project", "local/alpha"],
        stdout=subprocess.DEVNULL,
        stderr=errors,
        env=world["env"],
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.post(f"{base}/api/status", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.2)
    else:
        proc.kill()
        proc.wait(timeout=20)
        errors.close()
        pytest.fail(f"server did not start: {log.read_text()}")
    yield base
    proc.terminate()
    proc.wait(timeout=20)
    errors.close()


def test_http_json_api(http_server: str, world: dict[str, Any]) -> None:
    bravo = world["ids"]["bravo"]
    r = httpx.post(f"{http_server}/api/search_text", json={"query": "aardvark"}, timeout=30)
    assert r.status_code == 200
    assert r.json()["results"][0]["path"] == "pkg/core.py"
    r = httpx.post(
        f"{http_server}/api/search", json={"query": "x", "projects": ["local/bravo"]}, timeout=30
    )
    assert r.status_code == 403
    r = httpx.post(f"{http_server}/api/read", json={"uri": file_uri(bravo, "pkg/core.py")})
    assert r.status_code == 403
    assert "bumblebee" not in r.text.lower()
    assert httpx.post(f"{http_server}/api/nope", json={}).status_code == 404
    assert httpx.post(f"{http_server}/api/search", content=b"{not json").status_code == 400
    assert httpx.post(f"{http_server}/api/search", json=[1, 2]).status_code == 400
    assert httpx.post(f"{http_server}/api/search", json={"bogus": 1}).status_code == 400
    # An oversized body is refused without being buffered whole; the server keeps serving.
    huge = b'{"query": "' + b"x" * (2 << 20) + b'"}'
    assert httpx.post(f"{http_server}/api/search", content=huge, timeout=30).status_code == 413
    assert httpx.post(f"{http_server}/api/search_text", json={"query": "aardvark"}).is_success
    # The text search's options: pasted code, filters, the tantivy syntax.
    api = f"{http_server}/api/search_text"
    r = httpx.post(api, json={"query": "self.aardvark_helper(", "path": "pkg/c*.py"}, timeout=30)
    assert r.status_code == 200
    assert {hit["path"] for hit in r.json()["results"]} == {"pkg/core.py"}
    r = httpx.post(api, json={"query": "aardvark", "path": "pkg/h*.py"}, timeout=30)
    assert r.status_code == 200 and r.json()["results"] == []
    r = httpx.post(api, json={"query": "aardvark", "lang": "markdown"}, timeout=30)
    assert r.status_code == 200 and r.json()["results"] == []
    r = httpx.post(api, json={"query": "path:core AND aardvark", "syntax": "tantivy"}, timeout=30)
    assert [hit["path"] for hit in r.json()["results"]] == ["pkg/core.py"]
    r = httpx.post(api, json={"query": "foo(", "syntax": "tantivy"}, timeout=30)
    assert r.status_code == 400 and "invalid query" in r.text
    r = httpx.post(api, json={"query": "x", "syntax": "lucene"}, timeout=30)
    assert r.status_code == 400


def test_http_on_a_port_in_use_is_one_line_and_exit_1(world: dict[str, Any]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = subprocess.run(
            [*SERVE, "--http", f"127.0.0.1:{port}", "--project", "local/alpha"],
            capture_output=True,
            text=True,
            env=world["env"],
            timeout=60,
        )
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"acms serve: cannot listen on 127.0.0.1:{port}:")
    assert "in use" in lines[0].lower()


def test_mcp_over_streamable_http(http_server: str, world: dict[str, Any]) -> None:
    async def run() -> dict[str, Any]:
        async with Client(f"{http_server}/mcp", read_timeout_seconds=60) as client:
            return await _calls(client, world)

    _check(anyio.run(run))


def test_the_readme_agent_host_example_runs(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "ACMS_DATA_DIR": str(tmp_path / "data")}
    env.pop("ACMS_PROFILE", None)
    _cli(env, "project", "add", "local/sample")
    _cli(env, "resource", "add", str(repo / "data" / "sample"), "--project", "local/sample")
    _cli(env, "reindex")
    done = subprocess.run(
        [
            sys.executable,
            str(repo / "scripts" / "agent_host_example.py"),
            str(tmp_path / "data"),
            "local/sample",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "inventory/" in done.stdout
    assert "context:" in done.stdout


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        ((), 2, "usage: "),
        (("only-one",), 2, "usage: "),
        (("DATA", "local/nope"), 1, "agent_host_example: no project named 'local/nope'"),
        (("DATA", "local/empty"), 1, "agent_host_example: no results: is local/empty indexed?"),
    ],
    ids=["no arguments", "one argument", "unknown project", "nothing indexed"],
)
def test_the_agent_host_example_fails_in_one_line(
    tmp_path: Path, args: tuple[str, ...], code: int, says: str
) -> None:
    repo = Path(__file__).resolve().parents[2]
    data = tmp_path / "data"
    env = {**os.environ, "ACMS_DATA_DIR": str(data)}
    env.pop("ACMS_PROFILE", None)
    _cli(env, "project", "add", "local/empty")
    done = subprocess.run(
        [
            sys.executable,
            str(repo / "scripts" / "agent_host_example.py"),
            *(str(data) if a == "DATA" else a for a in args),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        check=False,
    )
    assert done.returncode == code, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], done.stderr
    assert "Traceback" not in done.stderr
