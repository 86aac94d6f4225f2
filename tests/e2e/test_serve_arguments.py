"""``acms serve``: a call's arguments are validated once, the same way over
MCP and the JSON API, and refused with a message naming the argument.

Two projects with distinct marker words are indexed through the CLI; the
server runs on 127.0.0.1 for one of them (and, where the scope line is
checked, for all of them).  Every case is sent over MCP (the SDK's own
client, at ``/mcp``) and over ``/api/<tool>`` and must come out the same.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client

from cleveragents.application.services.agent_session import SessionScope, render
from cleveragents.cli.serve import tool_functions
from cleveragents.domain.models.acms.uko import file_uri
from cli_process import indexed_projects, run_acms
from http_service import SERVE
from http_service import HttpServer as Server


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    env, ids = indexed_projects(
        tmp_path_factory.mktemp("serve_arguments"),
        {
            name: {
                "pkg/core.py": f"def {marker}_helper():\n    return '{marker}'\n",
                "docs/notes.md": f"# {marker} notes\n\nThe {marker} helper returns its name.\n",
            }
            for name, marker in (("alpha", "aardvark"), ("bravo", "bumblebee"))
        },
    )
    return {"env": env, "ids": ids}


@pytest.fixture(scope="module")
def server(world: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("serve_arguments_http") / "stderr"
    running = Server(world["env"], log, "--project", "local/alpha")
    yield running
    running.stop()


def _both(server: Server, calls: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each call over MCP and over HTTP: MCP's (is_error, text), HTTP's (status, body)."""

    async def run() -> list[tuple[bool, str]]:
        out = []
        async with Client(f"{server.base}/mcp", read_timeout_seconds=60) as client:
            for name, args in calls:
                result = await client.call_tool(name, args)
                text = "".join(getattr(c, "text", "") for c in result.content)
                out.append((bool(result.is_error), text))
        return out

    over_mcp = anyio.run(run)
    rows = []
    for (name, args), (is_error, text) in zip(calls, over_mcp, strict=True):
        r = httpx.post(f"{server.base}/api/{name}", json=args, timeout=60)
        rows.append(
            {
                "call": (name, args),
                "mcp_error": is_error,
                "mcp": text,
                "status": r.status_code,
                "http": r.text,
            }
        )
    return rows


# An argument that does not fit, the argument the message must name, and
# (part of) the arguments it must list.
BAD = [
    ("search", {"query": "aardvark", "bogus": 1}, "bogus", "search takes query (required)"),
    ("search", {"query": "aardvark", "syntax": "tantivy"}, "syntax", "path, lang"),
    ("search_vector", {"query": "aardvark", "path": "pkg/**"}, "path", "search_vector takes"),
    ("search", {"query": "aardvark", "projects": "local/alpha"}, "projects", "search takes"),
    ("search_text", {"query": "aardvark", "resources": "ALPHA"}, "resources", "syntax, path"),
    ("search", {"query": "aardvark", "resources": ["garbage"]}, "resources", "search takes"),
    ("context", {"task": "x", "projects": ["Not A Name"]}, "projects", "context takes task"),
    ("search", {"budget": 3000}, "query", "search takes query (required)"),
    ("traverse", {"start": "pkg/core.py", "depth": "two"}, "depth", "traverse takes"),
    ("traverse", {"start": "pkg/core.py", "predicates": "defines"}, "predicates", "direction"),
    ("search", {"query": "aardvark", "max_results": True}, "max_results", "search takes"),
    ("status", {"verbose": True}, "verbose", "status takes budget"),
]


def test_bad_arguments_are_refused_alike_naming_the_argument(
    server: Server, world: dict[str, Any]
) -> None:
    calls = [
        (name, {k: world["ids"]["alpha"] if v == "ALPHA" else v for k, v in args.items()})
        for name, args, _, _ in BAD
    ]
    for row, (_, _, argument, takes) in zip(_both(server, calls), BAD, strict=True):
        assert row["status"] == 400, row
        assert row["mcp_error"], row
        error = json.loads(row["http"])["error"]
        assert f"'{argument}'" in error and takes in error, row
        # The same message reaches the agent over MCP (within the SDK's framing).
        assert error in row["mcp"], row
        assert "unexpected keyword argument" not in error and "<locals>" not in error


def test_same_inputs_give_the_same_answers(server: Server, world: dict[str, Any]) -> None:
    alpha, bravo = world["ids"]["alpha"], world["ids"]["bravo"]
    accepted = [
        ("search", {"query": "aardvark", "budget": "3000"}),  # coerced, as MCP always did
        ("search", {"query": "aardvark", "projects": '["local/alpha"]'}),  # a JSON list as text
        ("search_text", {"query": "aardvark", "resources": [alpha.lower()]}),
        ("read", {"uri": file_uri(alpha, "pkg/core.py"), "budget": 400}),
        ("status", {"budget": 300}),
        ("status", {}),
    ]
    refused = [
        ("search", {"query": "aardvark", "projects": ["local/bravo"]}),
        ("search_text", {"query": "aardvark", "resources": [bravo]}),
        ("search", {"query": "aardvark", "budget": 5}),
        ("status", {"budget": 100}),
    ]
    rows = _both(server, accepted + refused)
    for row in rows[: len(accepted)]:
        assert row["status"] == 200 and not row["mcp_error"], row
        assert row["mcp"] == row["http"], row
        assert "aardvark" in row["http"] or row["call"][0] in ("status", "read"), row
    status = json.loads(rows[4]["http"])
    assert status["projects"] == {"local/alpha": [alpha]} and status["truncated"] is False
    over, under = rows[len(accepted) :][:2], rows[len(accepted) :][2:]
    for row in over:  # a well-formed project or resource outside the scope: 403
        assert row["status"] == 403 and row["mcp_error"], row
        assert json.loads(row["http"])["error"] in row["mcp"]
    for row in under:  # below the schema's minimum: refused as a bad argument
        assert row["status"] == 400 and row["mcp_error"], row
        error = json.loads(row["http"])["error"]
        assert error.startswith("bad argument 'budget': Input should be greater than or equal")
        assert row["mcp"] == f"Error executing tool {row['call'][0]}: {error}", row


def test_hybrid_search_filters_by_path_and_lang(server: Server) -> None:
    calls = [
        ("search", {"query": "aardvark helper"}),
        ("search", {"query": "aardvark helper", "path": "docs/**"}),
        ("search", {"query": "aardvark helper", "lang": "python"}),
        ("search", {"query": "aardvark helper", "path": "pkg/*.py", "lang": "python"}),
        ("search", {"query": "aardvark helper", "path": "nowhere/**"}),
    ]
    rows = _both(server, calls)
    for row in rows:
        assert row["status"] == 200 and not row["mcp_error"], row
        assert row["mcp"] == row["http"], row
    paths = [{hit["path"] for hit in json.loads(row["http"])["results"]} for row in rows]
    assert paths[0] == {"pkg/core.py", "docs/notes.md"}  # unfiltered: both files match
    assert paths[1] == {"docs/notes.md"}
    assert paths[2] == {"pkg/core.py"}
    assert paths[3] == {"pkg/core.py"}
    assert paths[4] == set()


def test_tools_list_the_arguments_they_take(server: Server) -> None:
    async def run() -> dict[str, Any]:
        async with Client(f"{server.base}/mcp", read_timeout_seconds=60) as client:
            return {t.name: t.input_schema for t in (await client.list_tools()).tools}

    schemas = anyio.run(run)
    assert {"path", "lang"} <= set(schemas["search"]["properties"])
    assert "syntax" not in schemas["search"]["properties"]
    assert set(schemas["status"]["properties"]) == {"budget"}
    assert all(s.get("additionalProperties") is False for s in schemas.values())


def test_the_json_api_takes_only_post(server: Server) -> None:
    for method in ("GET", "PUT", "DELETE"):
        r = httpx.request(method, f"{server.base}/api/search", timeout=30)
        assert r.status_code == 405, (method, r.text)
        assert r.headers["allow"] == "POST"
        assert r.headers["content-type"] == "application/json"
        assert method in r.json()["error"]
    r = httpx.head(f"{server.base}/api/search", timeout=30)
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    r = httpx.get(f"{server.base}/api/search", params={"query": "aardvark"}, timeout=30)
    assert r.status_code == 405
    r = httpx.post(f"{server.base}/api/search", json={"query": "aardvark"}, timeout=30)
    assert r.status_code == 200


def test_status_honours_its_budget() -> None:
    rid = "01ARZ3NDEKTSV4RRFFQ69G5F{:02d}"
    projects = {f"local/p{i:02d}": frozenset({rid.format(i)}) for i in range(40)}
    scope = SessionScope(resources=frozenset(rid.format(i) for i in range(40)), projects=projects)
    session = SimpleNamespace(scope=scope, removed=frozenset)
    status = tool_functions(session)["status"]  # type: ignore[arg-type]
    whole = status()
    assert len(whole["projects"]) == 40 and len(whole["resources"]) == 40
    assert whole["truncated"] is False
    assert len(render(whole)) > 2500
    for budget in (256, 700, 2500):
        answer = status(budget=budget)
        assert len(render(answer)) <= budget
        kept = len(answer["projects"]) + len(answer["resources"])
        assert answer["truncated"] == {"more": 80 - kept}
        assert list(answer["projects"]) == sorted(projects)[: len(answer["projects"])]
        assert answer["resources"] == sorted(scope.resources)[: len(answer["resources"])]
    # Resources are left out first: the projects name them too.
    assert len(status(budget=2500)["projects"]) == 40
    assert status(budget=256)["truncated"]["more"] > 40
    with pytest.raises(ValueError, match="budget must be between"):
        status(budget=255)
    # Resources removed from the registry since the start: listed only as removed.
    gone = frozenset(rid.format(i) for i in range(10, 40))
    session.removed = lambda: gone
    whole = status()
    assert whole["removed"] == sorted(gone) and whole["truncated"] is False
    assert whole["resources"] == sorted(scope.resources - gone)
    assert all(not set(rids) & gone for rids in whole["projects"].values())
    for budget in (256, 700, 2500):
        answer = status(budget=budget)
        assert len(render(answer)) <= budget
        kept = len(answer["projects"]) + len(answer["resources"]) + len(answer["removed"])
        assert answer["truncated"] == ({"more": 80 - kept} if kept < 80 else False)
    assert status(budget=700)["truncated"]  # some left out, counted


def test_serving_every_project_says_so_once_on_stderr(
    world: dict[str, Any], server: Server, tmp_path: Path
) -> None:
    # Scoped by the operator: no such line (at the default level).
    assert "serving all" not in server.log.read_text()
    everything = Server(world["env"], tmp_path / "http.stderr")
    assert everything.stop() == b""
    lines = [
        line for line in (tmp_path / "http.stderr").read_text().splitlines() if "serving" in line
    ]
    assert len(lines) == 1, lines
    event = json.loads(lines[0])  # a JSON log line
    assert event["message"].startswith("serving all 2 projects")
    assert "local/alpha, local/bravo" in event["message"]
    assert event["projects"] == ["local/alpha", "local/bravo"]
    # Over stdio the line goes to stderr too: stdout carries only MCP.
    errors = tmp_path / "stdio.stderr"
    with errors.open("wb") as sink:
        proc = subprocess.Popen(
            [*SERVE, "--mcp"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=sink,
            env=world["env"],
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "serving all" not in errors.read_text():
            time.sleep(0.1)
        out, _ = proc.communicate(input=b"", timeout=30)
    assert out == b""
    assert "serving all 2 projects" in errors.read_text()


def test_acms_help_lists_serve_and_watch(world: dict[str, Any]) -> None:
    done = run_acms(world["env"], "--help")
    assert done.returncode == 0, done.stderr
    listed = [line.split()[0] for line in done.stdout.splitlines() if line.startswith("    ")]
    assert "serve" in listed and "watch" in listed
    done = run_acms(world["env"], "frobnicate")
    assert done.returncode == 2
    assert "'serve'" in done.stderr and "'watch'" in done.stderr
    # Global options before a service are passed on to it (tests/e2e/
    # test_entry_points.py); one that makes no sense for it is refused.
    done = run_acms(world["env"], "--json", "serve", "--mcp")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "acms: error: --json does not apply to 'serve': its stdout carries MCP messages, "
        "or nothing with --http"
    ]
    done = run_acms(world["env"], "serve", "--help")
    assert done.returncode == 0 and "--mcp" in done.stdout


def test_hostile_arguments_get_a_short_escaped_refusal(server: Server) -> None:
    """What a caller sends is echoed quoted and cut, never raw or whole: a
    list of 100,000 bad names made a 31 MB error, a bidi or ESC character in
    an argument's name reached the agent raw, and JSON nested 2,000 deep was
    a 500."""
    raw = ("\u202e", "\x9b", "\x1b")
    calls = [
        ("search", {"query": "aardvark", "projects": ["B"] * 100_000}),
        ("search", {"query": "aardvark", "b\u202e\x9b\x1bz" + "k" * 5_000: 1}),
    ]
    rows = _both(server, calls)
    many, odd = rows
    assert many["status"] == 400 and many["mcp_error"]
    assert len(many["http"]) < 4_000 and len(many["mcp"]) < 8_000
    assert "and 99995 more problem(s)" in json.loads(many["http"])["error"]
    assert odd["status"] == 400 and odd["mcp_error"]
    for text in (json.loads(odd["http"])["error"], odd["mcp"]):
        assert not any(c in text for c in raw), text[:200]
        assert "unknown argument" in text and len(text) < 4_000
    deep = httpx.post(f"{server.base}/api/search", content=b"[" * 2_000, timeout=30)
    assert deep.status_code == 400 and "bad request" in deep.json()["error"]
    long_name = httpx.post(f"{server.base}/api/" + "t" * 5_000, json={}, timeout=30)
    assert long_name.status_code == 404 and len(long_name.text) < 300


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        ([*SERVE, "--mcp", "\x1b[31mRED\u202e"], 2),
        ([*SERVE, "--http", "\x1b[31mbad:80"], 1),  # well-formed, cannot listen there
        ([*SERVE, "--http", "127.0.0.1:99999"], 2),
        ([sys.executable, "-m", "cleveragents.cli.watch", "\x1b[31mRED"], 2),
    ],
    ids=["serve-argument", "serve-host", "serve-port", "watch-argument"],
)
def test_a_bad_command_line_is_one_escaped_line(
    world: dict[str, Any], argv: list[str], code: int
) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, env=world["env"], timeout=60)
    assert done.returncode == code, done.stderr
    assert done.stdout == "" and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "\x1b" not in done.stderr and "\u202e" not in done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr


def test_traverse_takes_a_direction_and_predicates(server: Server, world: dict[str, Any]) -> None:
    """The symbol pkg/core.py defines, and back from it to the file: the
    same answer over MCP and HTTP; a predicate name that is not UKO's is
    refused, naming the ones there are."""
    alpha = world["ids"]["alpha"]
    core = file_uri(alpha, "pkg/core.py")
    calls = [
        ("traverse", {"start": "pkg/core.py", "depth": 1, "predicates": ["defines"]}),
        ("traverse", {"start": "pkg/core.py", "depth": 1, "direction": "in"}),
        ("traverse", {"start": "pkg/core.py", "predicates": ["definez"]}),
        ("traverse", {"start": "pkg/core.py", "direction": "sideways"}),
    ]
    rows = _both(server, calls)
    for row in rows[:2]:
        assert row["status"] == 200 and not row["mcp_error"], row
        assert row["mcp"] == row["http"], row
    defines = json.loads(rows[0]["http"])
    symbols = [t["o"] for t in defines["results"]]
    assert symbols and all(
        t["s"] == core and t["p"].endswith("defines") for t in defines["results"]
    )
    assert any(s.endswith("aardvark_helper") for s in symbols)
    into = json.loads(rows[1]["http"])
    assert into["direction"] == "in"
    assert {t["o"] for t in into["results"]} == {core}
    assert any(t["p"].endswith("contains") for t in into["results"])  # the resource node
    for row, what in zip(rows[2:], ("unknown predicate 'definez'", "direction"), strict=True):
        assert row["status"] == 400 and row["mcp_error"], row
        assert what in row["http"] and what in row["mcp"], row
