"""``acms serve``: one long-lived, read-only query service for agent hosts.

- ``--mcp``: the Model Context Protocol over stdio (stdout carries only
  protocol messages; logs are JSON lines on stderr);
- ``--http HOST:PORT``: MCP over streamable HTTP at ``/mcp`` and a small JSON
  API at ``/api/<tool>`` (POST a JSON object of the tool's arguments).

The operator fixes the scope at start (``--project``, ``--resource``,
repeatable); a call may narrow it (``projects``/``resources`` arguments) and
never widen it.  The tools, the same over MCP and HTTP, are the methods of
:class:`~cleveragents.application.services.agent_session.AgentSession`:
``search`` (hybrid), ``search_text``, ``search_vector``, ``sparql``,
``triples``, ``traverse``, ``read``, ``context`` and ``status``; every answer
is a JSON object within the call's character ``budget``.

The backends stay open for the life of the server, so caches and loaded
graphs stay warm; each query picks up the indexes' latest commit, so the
service follows ``reindex``, ``watch`` and ``reindex --rebuild`` without a
restart.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import structlog
from starlette.responses import Response

from cleveragents.application.services.agent_session import AgentSession, render
from cleveragents.domain.models.acms.errors import AcmsError, ScopeError

__all__ = [
    "MAX_REQUEST_BYTES",
    "configure_stderr_logging",
    "main",
    "make_mcp_server",
    "tool_functions",
]

#: The most bytes a JSON API request body may carry (a SPARQL query is at most
#: 128 KiB; arguments beyond that are not useful, and the body is buffered).
MAX_REQUEST_BYTES = 1 << 20


def tool_functions(session: AgentSession) -> dict[str, Callable[..., dict[str, Any]]]:
    """The service's tools by name, each returning a JSON-able answer."""

    def search(
        query: str,
        max_results: int = 10,
        budget: int = 8000,
        projects: list[str] | None = None,
        resources: list[str] | None = None,
    ) -> dict[str, Any]:
        """Hybrid search (text and semantic rankings fused): hits with path,
        line range and the matching lines."""
        return session.search(
            query, max_results=max_results, budget=budget, projects=projects, resources=resources
        )

    def search_text(
        query: str,
        max_results: int = 10,
        budget: int = 8000,
        projects: list[str] | None = None,
        resources: list[str] | None = None,
        syntax: str = "plain",
        path: str | None = None,
        lang: str | None = None,
    ) -> dict[str, Any]:
        """Full-text (BM25) search: hits with path, line range and matching lines.

        ``syntax``: "plain" (default, any text) or "tantivy" (fields content:,
        path:, symbol:, lang:, phrases, AND/OR/NOT).  ``path``: a glob
        ("pkg/**/*.py"; "*" within a path segment, "**" across).  ``lang``: a
        language name ("python")."""
        return session.search(
            query,
            mode="text",
            max_results=max_results,
            budget=budget,
            projects=projects,
            resources=resources,
            syntax=syntax,
            path=path,
            lang=lang,
        )

    def search_vector(
        query: str,
        max_results: int = 10,
        budget: int = 8000,
        projects: list[str] | None = None,
        resources: list[str] | None = None,
    ) -> dict[str, Any]:
        """Similarity search: the query embedded with the index's own embedder."""
        return session.search(
            query,
            mode="vector",
            max_results=max_results,
            budget=budget,
            projects=projects,
            resources=resources,
        )

    def sparql(
        query: str,
        budget: int = 8000,
        projects: list[str] | None = None,
        resources: list[str] | None = None,
    ) -> dict[str, Any]:
        """A sandboxed, time-limited SPARQL query over the scope's code graph."""
        return session.sparql(query, budget=budget, projects=projects, resources=resources)

    def triples(
        subject: str,
        budget: int = 8000,
        projects: list[str] | None = None,
        resources: list[str] | None = None,
    ) -> dict[str, Any]:
        """The triples of one subject URI (a file, chunk or symbol)."""
        return session.triples(subject, budget=budget, projects=projects, resources=resources)

    def traverse(
        start: str,
        depth: int = 2,
        budget: int = 8000,
        projects: list[str] | None = None,
        resources: list[str] | None = None,
    ) -> dict[str, Any]:
        """Triples within ``depth`` hops of a start URI (breadth first)."""
        return session.traverse(
            start, depth=depth, budget=budget, projects=projects, resources=resources
        )

    def read(
        uri: str,
        start_line: int | None = None,
        end_line: int | None = None,
        budget: int = 8000,
    ) -> dict[str, Any]:
        """An indexed file or chunk by URI (``uko://ULID/path#L10-L42``), or by its
        path in the one in-scope resource that has it (``path#L10-L42``); numbered lines."""
        return session.read(uri, start_line=start_line, end_line=end_line, budget=budget)

    def context(
        task: str,
        budget: int = 8000,
        projects: list[str] | None = None,
        resources: list[str] | None = None,
    ) -> dict[str, Any]:
        """The best snippets for a task description, within a character budget."""
        return session.context(task, budget=budget, projects=projects, resources=resources)

    def symbols(
        path: str,
        budget: int = 8000,
        projects: list[str] | None = None,
        resources: list[str] | None = None,
    ) -> dict[str, Any]:
        """The definitions of a file: qualified name, kind, line range, signature."""
        return session.symbols(path, budget=budget, projects=projects, resources=resources)

    def callers(
        target: str,
        budget: int = 8000,
        projects: list[str] | None = None,
        resources: list[str] | None = None,
    ) -> dict[str, Any]:
        """Who calls a function (a name, a qualified name or a symbol URI), with lines."""
        return session.callers(target, budget=budget, projects=projects, resources=resources)

    def callees(
        source: str,
        budget: int = 8000,
        projects: list[str] | None = None,
        resources: list[str] | None = None,
    ) -> dict[str, Any]:
        """What a function calls, each name with its definitions in scope."""
        return session.callees(source, budget=budget, projects=projects, resources=resources)

    def status() -> dict[str, Any]:
        """The session's scope: projects and resource ULIDs."""
        scope = session.scope
        return {
            "tool": "status",
            "projects": {name: sorted(rids) for name, rids in sorted(scope.projects.items())},
            "resources": sorted(scope.resources),
        }

    return {
        f.__name__: f
        for f in (
            search,
            search_text,
            search_vector,
            sparql,
            triples,
            traverse,
            read,
            context,
            symbols,
            callers,
            callees,
            status,
        )
    }


def make_mcp_server(session: AgentSession) -> Any:  # noqa: ANN401 - mcp.server.MCPServer
    """An MCP server whose tools are :func:`tool_functions`, each answering
    with one text content: the JSON answer (:func:`render`)."""
    from mcp.server import MCPServer

    server = MCPServer(
        "acms",
        instructions=(
            "Search and read one code base's files and its code graph. Answers are JSON "
            "within the budget (characters) you pass; 'truncated' says how many were left out."
        ),
    )
    for name, fn in tool_functions(session).items():
        server.tool(name=name, description=fn.__doc__, structured_output=False)(_as_text(fn))
    return server


def _as_text(fn: Callable[..., dict[str, Any]]) -> Callable[..., str]:
    import functools

    from mcp.server.mcpserver.exceptions import ToolError

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> str:  # noqa: ANN401 - the tool's own arguments
        try:
            return render(fn(*args, **kwargs))
        except (AcmsError, ValueError, TypeError) as exc:
            # An anticipated failure (bad input, out of scope, an engine's
            # error): the SDK passes a ToolError's message to the agent, so
            # it can correct the call, and logs it without a traceback.  Any
            # other exception is a crash to the SDK: the agent would read
            # only "Error executing tool <name>".
            raise ToolError(str(exc)) from None

    call.__annotations__ = {**fn.__annotations__, "return": str}
    return call


def _http_app(session: AgentSession, server: Any) -> Any:  # noqa: ANN401 - Starlette
    from starlette.requests import Request

    tools = tool_functions(session)

    async def api(request: Request) -> Response:
        import anyio.to_thread

        name = request.path_params["tool"]
        fn = tools.get(name)
        if fn is None:
            return _json({"error": f"unknown tool {name!r}"}, 404)
        body = bytearray()
        async for chunk in request.stream():  # read at most the cap, whatever is sent
            body += chunk
            if len(body) > MAX_REQUEST_BYTES:
                return _json({"error": f"request body over {MAX_REQUEST_BYTES} bytes"}, 413)
        try:
            args = json.loads(body) if body.strip() else {}
        except ValueError as exc:
            return _json({"error": f"bad request: {exc}"}, 400)
        if not isinstance(args, dict):
            return _json({"error": "bad request: the body must be a JSON object"}, 400)
        try:
            answer = await anyio.to_thread.run_sync(lambda: fn(**args))
        except ScopeError as exc:
            return _json({"error": str(exc)}, 403)
        except (AcmsError, ValueError, TypeError) as exc:
            return _json({"error": str(exc)}, 400)
        return Response(render(answer), media_type="application/json")

    server.custom_route("/api/{tool}", methods=["GET", "POST"])(api)
    return server.streamable_http_app()


def _json(body: dict[str, Any], status: int) -> Response:
    return Response(render(body), status_code=status, media_type="application/json")


def configure_stderr_logging(level: str) -> None:
    """JSON lines on stderr for structlog and the standard logging module."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, level.upper()))
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the service until interrupted; exit 2 on bad usage."""
    parser = argparse.ArgumentParser(prog="acms serve", description=__doc__.split("\n\n")[0])
    how = parser.add_mutually_exclusive_group(required=True)
    how.add_argument("--mcp", action="store_true", help="MCP over stdio")
    how.add_argument("--http", metavar="HOST:PORT", help="MCP at /mcp and JSON at /api/<tool>")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--project", action="append", default=[])
    parser.add_argument("--resource", action="append", default=[])
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    configure_stderr_logging(args.log_level)
    data_dir = Path(args.data_dir or os.environ.get("ACMS_DATA_DIR") or "data")
    try:
        from cleveragents.acms import open_data_dir

        session = open_data_dir(data_dir, projects=args.project, resources=args.resource)
    except (AcmsError, ValueError) as exc:
        print(f"acms serve: {exc}", file=sys.stderr)
        return 2
    server = make_mcp_server(session)
    if args.mcp:
        server.run("stdio")
        return 0
    host, _, port = str(args.http).rpartition(":")
    if not host or not port.isdigit():
        print("acms serve: --http needs HOST:PORT, e.g. 127.0.0.1:8765", file=sys.stderr)
        return 2
    try:
        # Bound here, so a port in use is one line of ours, not uvicorn's.
        listener = _listen(host, int(port))
    except OSError as exc:
        print(f"acms serve: cannot listen on {host}:{port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    import uvicorn

    config = uvicorn.Config(_http_app(session, server), log_level=args.log_level)
    with listener:
        uvicorn.Server(config).run(sockets=[listener])
    return 0


def _listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (IPv4 or IPv6, address reuse as uvicorn)."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host.strip("[]"), port))
        listener.listen(2048)
    except OSError:
        listener.close()
        raise
    listener.set_inheritable(True)
    return listener


if __name__ == "__main__":
    sys.exit(main())
