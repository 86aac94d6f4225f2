"""``acms serve``: one long-lived, read-only query service for agent hosts.

- ``--mcp``: the Model Context Protocol over stdio (stdout carries only
  protocol messages; logs are JSON lines on stderr);
- ``--http HOST:PORT``: MCP over streamable HTTP at ``/mcp`` and a small JSON
  API at ``/api/<tool>`` (POST a JSON object of the tool's arguments).

The operator fixes the scope at start (``--project``, ``--resource``,
repeatable; neither: every project registered then, which a line on stderr
names); a call may narrow it (``projects``/``resources`` arguments) and
never widen it.  The tools, the same over MCP and HTTP, are the methods of
:class:`~cleveragents.application.services.agent_session.AgentSession`:
``search`` (hybrid), ``search_text``, ``search_vector``, ``sparql``,
``triples``, ``traverse``, ``read``, ``context``, ``symbols``, ``callers``,
``callees`` and ``status``; every answer is a JSON object within the call's
character ``budget``.

A call's arguments are validated once, by one model per tool derived from
the tool function's signature (:func:`service_tools`), whichever way the call
came: its JSON schema, with a description of each argument and the bounds
and choices the session enforces, is the MCP tool's input schema, and the
MCP tool and the JSON API both run it.  An unknown argument, a missing one,
a wrong type (a string where a list is expected), a value out of bounds or
a malformed project name or ULID is refused with one line naming the
argument and listing the tool's arguments; values the model coerces ("3000"
for an int, a JSON list given as a string) are coerced on both.

The backends stay open for the life of the server, so caches and loaded
graphs stay warm; each query picks up the indexes' latest commit, so the
service follows ``reindex``, ``watch`` and ``reindex --rebuild`` without a
restart.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import hmac
import inspect
import json
import logging
import math
import os
import re
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, get_args, get_origin

import structlog
from pydantic import AfterValidator, BeforeValidator, Field, ValidationError, create_model
from pydantic_core import PydanticCustomError
from starlette.responses import Response

from cleveragents.application.services.agent_session import (
    DEFAULT_BUDGET,
    MAX_BUDGET,
    MAX_LINE,
    MAX_RESULTS,
    MIN_BUDGET,
    AgentSession,
    SessionScope,
    check_budget,
    render,
)
from cleveragents.cli.terminal import printable
from cleveragents.domain.models.acms.backends import TraversalDirection
from cleveragents.domain.models.acms.cancellation import CancelToken, cancel_all, cancellable
from cleveragents.domain.models.acms.errors import (
    AcmsError,
    BusyError,
    CallCancelledError,
    IndexUnavailableError,
    ModelUnavailableError,
    QueryTimeoutError,
    ScopeError,
)
from cleveragents.domain.models.acms.registry import validate_project_name
from cleveragents.domain.models.acms.text_query import TextSyntax
from cleveragents.domain.models.acms.uko import PREDICATES
from cleveragents.domain.models.acms.ulids import canonical_ulid

if TYPE_CHECKING:
    # The SDK's server package takes ~0.6 s to import: only the service
    # needs it (``acms watch`` imports this module for its logging).
    from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
    from starlette.requests import Request

__all__ = [
    "MAX_REQUEST_BYTES",
    "BadArguments",
    "ServiceTool",
    "configure_stderr_logging",
    "main",
    "make_mcp_server",
    "service_tools",
    "tool_functions",
]

_T = TypeVar("_T")

#: The most bytes a JSON API request body may carry (a SPARQL query is at most
#: 128 KiB; arguments beyond that are not useful, and the body is buffered).
MAX_REQUEST_BYTES = 1 << 20

# A connection that has not sent a whole request head (its request line and
# headers) this many seconds after connecting, or after its last answer, is
# closed: uvicorn waits for a head forever once its first byte arrived, so
# connections sending a header line every few seconds (slowloris) held a
# descriptor each until the service could accept no one (a reviewer's run
# reached the 20,000-descriptor limit).
_HEAD_SECONDS = 10.0
# The limit on receiving a request's body whole, on /mcp as on /api (a body
# sent a byte a second held its connection for good).
_BODY_SECONDS = 30.0
# The largest body /mcp takes (the MCP SDK's own limit, checked here first).
_MCP_BODY_BYTES = 4 << 20
# The most body bytes all requests being read hold at once: past it a new
# byte is refused (503), so thousands of connections each sending 4 MiB
# cannot take the service's memory (a read-back).
_BODY_BUDGET = 256 << 20


def connection_cap() -> int:
    """Connections the HTTP service holds at once; a request past it gets 503.
    Half the process's descriptor limit (the rest are the indexes' and the
    SPARQL workers'), between 64 and 4,096: a fixed 256 let 256 idle
    connections, reopened every 10 s, lock every client out (a read-back)."""
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 4096
    return max(64, min(4096, soft // 2))


#: The longest query or task a tool takes: what the text engine reads of a
#: plain query.  Checked first, as an argument: a 3.9 MB query took seconds
#: of term splitting before any refusal.
MAX_QUERY_CHARS = 10_000
# Where an HTTP service may take its bearer token from.
TOKEN_ENV = "ACMS_SERVE_TOKEN"

#: A project name argument: a malformed one is bad input, refused with the
#: arguments (a well-formed one outside the scope is the session's refusal).
ProjectName = Annotated[str, AfterValidator(validate_project_name)]
#: A resource ULID argument (canonical, upper case, once validated).
ResourceId = Annotated[str, AfterValidator(canonical_ulid)]

# The arguments several tools share.  Each argument's description is what an
# agent chooses its value from; a bound is the session's own (its constant),
# checked by the argument model so that a refusal lists the tool's arguments.
Budget = Annotated[
    int,
    Field(
        ge=MIN_BUDGET,
        le=MAX_BUDGET,
        description="The most characters the answer (compact JSON) may take: results that "
        "do not fit are left out and counted in 'truncated'. "
        f"Default {DEFAULT_BUDGET}.",
    ),
]
MaxResults = Annotated[
    int,
    Field(
        ge=1,
        le=MAX_RESULTS,
        description="The most hits to return, best first (fewer when the budget is "
        "reached). Default 10.",
    ),
]
Projects = Annotated[
    list[ProjectName] | None,
    Field(
        description="Only these projects of the service's scope (names such as "
        "'local/app'; with resources: the union). Default: the whole scope."
    ),
]
Resources = Annotated[
    list[ResourceId] | None,
    Field(
        description="Only these resources of the service's scope (ULIDs; with projects: "
        "the union). Default: the whole scope."
    ),
]
PathGlob = Annotated[
    str | None,
    Field(
        description="Only files whose path (relative to the resource's root) matches this "
        "glob: '*' within a path segment, '**' across, '?' one character, a final '/' "
        "everything below ('pkg/**/*.py'), '{a,b}' alternatives ('**/*.{ts,tsx}'); [...] "
        "classes are refused. Default: every file."
    ),
]
Language = Annotated[
    str | None,
    Field(
        description="Only files of this language, as the indexer detects it ('python', "
        "'go', 'markdown'; any case). Default: every language."
    ),
]
Syntax = Annotated[
    TextSyntax,
    Field(
        description="'plain' (default: any text, matched by its words and identifier "
        "parts) or 'tantivy' (fields content:, path:, symbol:, lang:, phrases, AND/OR/NOT)."
    ),
]
Node = Annotated[
    str,
    Field(
        description="A node's URI (a file's uko://<ULID>/<path>, a symbol's ...#sym=<name>) "
        "or a file path relative to a resource's root (that file in each in-scope "
        "resource that indexes it) or absolute, inside a resource's root."
    ),
]


def tool_functions(session: AgentSession) -> dict[str, Callable[..., dict[str, Any]]]:
    """The service's tools by name, each returning a JSON-able answer."""

    def search(
        query: Annotated[
            str,
            Field(
                description="What to look for: plain words or identifiers (no syntax).",
                max_length=MAX_QUERY_CHARS,
            ),
        ],
        max_results: MaxResults = 10,
        budget: Budget = DEFAULT_BUDGET,
        projects: Projects = None,
        resources: Resources = None,
        path: PathGlob = None,
        lang: Language = None,
    ) -> dict[str, Any]:
        """Hybrid search (text and semantic rankings fused): hits with path,
        line range and the matching lines.

        The query is plain text (for the tantivy syntax use search_text).
        ``path``: a glob ("pkg/**/*.py"; "*" within a path segment, "**"
        across).  ``lang``: a language name ("python")."""
        return session.search(
            query,
            max_results=max_results,
            budget=budget,
            projects=projects,
            resources=resources,
            path=path,
            lang=lang,
        )

    def search_text(
        query: Annotated[
            str,
            Field(
                description="What to find: words or identifiers, or a query in the syntax.",
                max_length=MAX_QUERY_CHARS,
            ),
        ],
        max_results: MaxResults = 10,
        budget: Budget = DEFAULT_BUDGET,
        projects: Projects = None,
        resources: Resources = None,
        syntax: Syntax = "plain",
        path: PathGlob = None,
        lang: Language = None,
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
        query: Annotated[
            str,
            Field(
                description="Text whose meaning to match (a sentence, or code).",
                max_length=MAX_QUERY_CHARS,
            ),
        ],
        max_results: MaxResults = 10,
        budget: Budget = DEFAULT_BUDGET,
        projects: Projects = None,
        resources: Resources = None,
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
        query: Annotated[
            str,
            Field(
                description="A SPARQL 1.1 SELECT, ASK, CONSTRUCT or DESCRIBE query; the uko: "
                "prefix is predefined; SERVICE, FROM and GRAPH are refused."
            ),
        ],
        budget: Budget = DEFAULT_BUDGET,
        projects: Projects = None,
        resources: Resources = None,
    ) -> dict[str, Any]:
        """A sandboxed, time-limited SPARQL query over the scope's code graph."""
        return session.sparql(query, budget=budget, projects=projects, resources=resources)

    def triples(
        subject: Node,
        budget: Budget = DEFAULT_BUDGET,
        projects: Projects = None,
        resources: Resources = None,
    ) -> dict[str, Any]:
        """The triples of one subject URI (a file, chunk or symbol)."""
        return session.triples(subject, budget=budget, projects=projects, resources=resources)

    def traverse(
        start: Node,
        depth: Annotated[
            int, Field(ge=0, description="How many hops to walk from start (0: none). Default 2.")
        ] = 2,
        direction: Annotated[
            TraversalDirection,
            Field(
                description="'out' (default: subject to object), 'in' (object to subject) "
                "or 'both'."
            ),
        ] = "out",
        predicates: Annotated[
            list[str] | None,
            Field(
                description="Follow only these edges: UKO names ("
                + ", ".join(sorted(PREDICATES))
                + ") or full IRIs. Default: every edge."
            ),
        ] = None,
        budget: Budget = DEFAULT_BUDGET,
        projects: Projects = None,
        resources: Resources = None,
    ) -> dict[str, Any]:
        """Triples within ``depth`` hops of a start URI or file path (breadth
        first).  ``direction``: "out" (default: what it defines, imports,
        calls), "in" (who imports, calls or contains it) or "both";
        ``predicates``: only these edges, UKO names such as "imports",
        "calls", "defines", "contains" (or full IRIs).  A walk past 10,000
        triples after its first hop is refused, naming the depth that fits."""
        return session.traverse(
            start,
            depth=depth,
            direction=direction,
            predicates=predicates,
            budget=budget,
            projects=projects,
            resources=resources,
        )

    def read(
        uri: Annotated[
            str,
            Field(
                description="A file's URI (uko://<ULID>/<path>), with #L10-L42 for a line "
                "range or #sym=<name> for a symbol's lines; or a path relative to the root "
                "of the one in-scope resource that has it (path#L10-L42), or absolute."
            ),
        ],
        start_line: Annotated[
            int | None,
            Field(
                ge=1,
                le=MAX_LINE,
                description="The first line to return (1-based); start_line or end_line "
                "replaces the URI's range. Default: the URI's range, else line 1.",
            ),
        ] = None,
        end_line: Annotated[
            int | None,
            Field(
                ge=1,
                le=MAX_LINE,
                description="The last line to return (inclusive). Default: the URI's "
                "range, else the file's last line.",
            ),
        ] = None,
        budget: Budget = DEFAULT_BUDGET,
    ) -> dict[str, Any]:
        """An indexed file or chunk by URI (``uko://ULID/path#L10-L42``), or by its
        path in the one in-scope resource that has it (``path#L10-L42``); numbered lines."""
        return session.read(uri, start_line=start_line, end_line=end_line, budget=budget)

    def context(
        task: Annotated[
            str,
            Field(
                description="The task, in plain words ('add a retry to the HTTP client').",
                max_length=MAX_QUERY_CHARS,
            ),
        ],
        budget: Budget = DEFAULT_BUDGET,
        projects: Projects = None,
        resources: Resources = None,
    ) -> dict[str, Any]:
        """The best snippets for a task description, within a character budget."""
        return session.context(task, budget=budget, projects=projects, resources=resources)

    def symbols(
        path: Annotated[
            str,
            Field(
                description="A file path relative to a resource's root (that file in each "
                "in-scope resource that indexes it), an absolute path inside a resource's "
                "root, or a file's URI."
            ),
        ],
        budget: Budget = DEFAULT_BUDGET,
        projects: Projects = None,
        resources: Resources = None,
    ) -> dict[str, Any]:
        """The definitions of a file: qualified name, kind, line range, signature."""
        return session.symbols(path, budget=budget, projects=projects, resources=resources)

    def callers(
        target: Annotated[
            str,
            Field(
                description="The function called: a name ('parse'), a qualified name "
                "('Loader.run'), a symbol's URI (...#sym=<name>) "
                "or a file path with #sym=<name> (relative to a resource's root, or absolute "
                "inside one)."
            ),
        ],
        budget: Budget = DEFAULT_BUDGET,
        projects: Projects = None,
        resources: Resources = None,
    ) -> dict[str, Any]:
        """Who calls a function (a name, a qualified name or a symbol URI), with lines;
        ``defined`` counts its definitions in scope (0: a typo or a library name)."""
        return session.callers(target, budget=budget, projects=projects, resources=resources)

    def callees(
        source: Annotated[
            str,
            Field(
                description="The calling function: a name ('run'), a qualified name "
                "('Loader.run'), a symbol's URI (...#sym=<name>) "
                "or a file path with #sym=<name> (relative to a resource's root, or absolute "
                "inside one)."
            ),
        ],
        budget: Budget = DEFAULT_BUDGET,
        projects: Projects = None,
        resources: Resources = None,
    ) -> dict[str, Any]:
        """What a function calls, each name with its definitions in scope; ``defined``
        counts the function's own definitions in scope (0: no such name)."""
        return session.callees(source, budget=budget, projects=projects, resources=resources)

    def status(budget: Budget = DEFAULT_BUDGET) -> dict[str, Any]:
        """The session's scope: projects (name -> resource ULIDs) and resource ULIDs;
        ``removed``: those of the scope removed from the registry since the start."""
        return _status(session.scope, budget, session.removed())

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


def _status(
    scope: SessionScope, budget: int, removed: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """The ``status`` answer within ``budget`` characters: every project and
    resource ULID that fits, and ``truncated`` as the other tools say it.
    The scope's resources no longer registered are listed only as ``removed``
    (present when there are any).  Resources are left out first (each
    project lists its own), then removed ones, then projects."""
    budget = check_budget(budget)
    projects = [(name, sorted(rids - removed)) for name, rids in sorted(scope.projects.items())]
    resources = sorted(scope.resources - removed)
    gone = sorted(removed)

    def answer(kept_projects: int, kept_resources: int, kept_gone: int) -> dict[str, Any]:
        more = len(projects) - kept_projects + len(resources) - kept_resources
        more += len(gone) - kept_gone
        return {
            "tool": "status",
            "projects": dict(projects[:kept_projects]),
            "resources": resources[:kept_resources],
            **({"removed": gone[:kept_gone]} if gone else {}),
            "truncated": {"more": more} if more else False,
        }

    def fits(kept_projects: int, kept_resources: int, kept_gone: int) -> bool:
        return len(render(answer(kept_projects, kept_resources, kept_gone))) <= budget

    def most(fit: Callable[[int], bool], high: int) -> int:
        low = 0  # fit(0) holds: the bare envelope is far below MIN_BUDGET
        while low < high:
            mid = (low + high + 1) // 2
            low, high = (mid, high) if fit(mid) else (low, mid - 1)
        return low

    p, r, g = len(projects), len(resources), len(gone)
    if fits(p, r, g):
        return answer(p, r, g)
    if fits(p, 0, g):
        return answer(p, most(lambda k: fits(p, k, g), r), g)
    if fits(p, 0, 0):
        return answer(p, 0, most(lambda k: fits(p, 0, k), g))
    return answer(most(lambda k: fits(k, 0, 0), p), 0, 0)


# ------------------------------------------------------------ arguments


class BadArguments(ValueError):
    """A call's arguments do not fit the tool (the JSON API answers 400)."""


def _not_a_bool(value: object) -> object:
    # JSON true is not a count; pydantic's lax int would take it as 1.
    if isinstance(value, bool):
        raise ValueError("a boolean is not a number")  # noqa: TRY004 - pydantic wants ValueError
    return value


@functools.cache
def _arguments_base() -> type[ArgModelBase]:
    """The base of every tool's argument model: each failure is reported
    naming the argument, with the tool's arguments listed (so an agent can
    correct its call), and an unknown argument is refused, not ignored."""
    from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
    from pydantic import ConfigDict, ModelWrapValidatorHandler, model_validator

    class Arguments(ArgModelBase):
        model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

        @model_validator(mode="wrap")
        @classmethod
        def _explained(cls, data: Any, handler: ModelWrapValidatorHandler[Any]) -> Any:  # noqa: ANN401
            try:
                return handler(data)
            except ValidationError as exc:
                raise _explain(cls, exc) from None

    return Arguments


def _explain(model: type[ArgModelBase], exc: ValidationError) -> ValidationError:
    """``exc`` with each error's message replaced by one an agent can act on.

    The message of each names the argument and lists the tool's arguments
    (:func:`_message` joins them into one line)."""
    tool = model.__name__.removesuffix("Arguments")
    takes = f"{tool} takes " + ", ".join(
        (field.alias or name) + (" (required)" if field.is_required() else "")
        for name, field in model.model_fields.items()
    )
    errors = exc.errors()
    line_errors: list[Any] = []
    for error in errors[:_MAX_REASONS]:
        # What the caller sent is echoed quoted (repr: control characters
        # escaped) and cut.
        loc = tuple(_quoted(part) for part in error["loc"][:4])
        name = loc[0] if loc else ""
        if not loc:
            reason = f"the arguments must be an object: {error['msg']}"
        elif error["type"] == "missing":
            reason = f"missing argument {name}"
        elif error["type"] == "extra_forbidden":
            reason = f"unknown argument {name}"
        else:
            item = "".join(f"[{part}]" for part in loc[1:])
            message = str(error["msg"]).removeprefix("Value error, ")
            reason = f"bad argument {name}{item}: {printable(message)[:200]}"
        line_errors.append(
            {
                "type": PydanticCustomError(
                    "bad_argument", "{reason} ({takes})", {"reason": reason, "takes": takes}
                ),
                "loc": loc,
                "input": None,
            }
        )
    if len(errors) > _MAX_REASONS:
        more = f"and {len(errors) - _MAX_REASONS} more problem(s) with the arguments"
        line_errors.append(
            {
                "type": PydanticCustomError(
                    "bad_argument", "{reason} ({takes})", {"reason": more, "takes": takes}
                ),
                "loc": (),
                "input": None,
            }
        )
    return ValidationError.from_exception_data(model.__name__, line_errors)


#: The most problems one refusal names (100,000 bad names made a 31 MB error).
_MAX_REASONS = 5


def _quoted(part: object) -> str | int:
    """A location part as an error shows it: an index as is, a name
    repr-quoted (control and bidi characters escaped), at most 80 characters."""
    if isinstance(part, int):
        return part
    text = repr(str(part))
    return text if len(text) <= 80 else text[:77] + "..."


def _arguments_model(name: str, fn: Callable[..., Any]) -> type[ArgModelBase]:
    """The argument model of tool ``name``: one field per parameter of ``fn``
    (its annotation and default), unknown arguments forbidden."""
    fields: dict[str, Any] = {}
    for param in inspect.signature(fn, eval_str=True).parameters.values():
        annotation = param.annotation
        bare = get_args(annotation)[0] if get_origin(annotation) is Annotated else annotation
        if bare is int or bare == (int | None):
            annotation = Annotated[annotation, BeforeValidator(_not_a_bool)]
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (annotation, default)
    model: type[ArgModelBase] = create_model(
        f"{name}Arguments", __base__=_arguments_base(), **fields
    )
    return model


@dataclass(frozen=True, slots=True)
class ServiceTool:
    """One tool of the service: its function and the validation of its
    arguments, shared by MCP and the JSON API."""

    name: str
    fn: Callable[..., dict[str, Any]]
    arguments: FuncMetadata

    def validate(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """The call's keyword arguments, validated and coerced as MCP does.

        Raises:
            BadArguments: naming the bad argument and listing the tool's arguments.
        """
        try:
            return self.arguments.validate_arguments(dict(raw))
        except ValidationError as exc:
            raise BadArguments(_message(exc)) from None


def _message(exc: ValidationError) -> str:
    """One line for an HTTP caller: the reasons, then the tool's arguments."""
    errors = exc.errors()
    reasons = [str((e.get("ctx") or {}).get("reason") or e["msg"]) for e in errors]
    takes = next((str(e["ctx"]["takes"]) for e in errors if "takes" in (e.get("ctx") or {})), "")
    return "; ".join(reasons) + (f" ({takes})" if takes else "")


def service_tools(session: AgentSession) -> dict[str, ServiceTool]:
    """The service's tools by name, each with its argument validation."""
    from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata

    return {
        name: ServiceTool(name, fn, FuncMetadata(arg_model=_arguments_model(name, fn)))
        for name, fn in tool_functions(session).items()
    }


# ------------------------------------------------------------ MCP and HTTP


def make_mcp_server(session: AgentSession, tools: Mapping[str, ServiceTool] | None = None) -> Any:  # noqa: ANN401 - mcp.server.MCPServer
    """An MCP server whose tools are :func:`service_tools` (or ``tools``),
    each answering with one text content: the JSON answer (:func:`render`).

    Each tool's input schema is its argument model's, and the tool itself
    validates its arguments with that model (:meth:`ServiceTool.validate`):
    the SDK passes them on as sent.  A refusal raised in the SDK's own
    validation would reach the agent as pydantic's report ("1 validation
    error for ...", a line per error, "[type=...]"); raised in the tool, it
    is the JSON API's one line."""
    from mcp.server import MCPServer
    from mcp.server.mcpserver.tools import Tool
    from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata
    from mcp_types import ToolAnnotations

    # Every tool only reads, and asks nothing outside the served scope: a
    # host may run them without asking its user each time.
    read_only = ToolAnnotations(
        read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
    )
    registered = []
    for tool in (service_tools(session) if tools is None else tools).values():
        made = Tool.from_function(
            _as_text(tool),
            name=tool.name,
            description=inspect.cleandoc(tool.fn.__doc__ or ""),
            annotations=read_only,
            structured_output=False,
        )
        schema = tool.arguments.arg_model.model_json_schema(by_alias=True)
        as_sent = FuncMetadata(arg_model=_as_sent_model())
        registered.append(made.model_copy(update={"fn_metadata": as_sent, "parameters": schema}))
    return MCPServer(
        "acms",
        version=_package_version(),
        instructions=(
            "Search and read one code base's files and its code graph. Answers are JSON "
            "within the budget (characters) you pass; 'truncated' says how many were left out."
        ),
        tools=registered,
    )


@functools.cache
def _package_version() -> str:
    """This package's version, as installed (``""`` when it is not)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("cleveragents-acms")
    except PackageNotFoundError:
        return ""


@functools.cache
def _as_sent_model() -> type[ArgModelBase]:
    """The argument model the SDK runs: any arguments, passed on as sent."""
    from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
    from pydantic import ConfigDict

    class AsSent(ArgModelBase):
        model_config = ConfigDict(extra="allow")

        def model_dump_one_level(self) -> dict[str, Any]:
            return dict(self.model_extra or {})

    return AsSent


def _as_text(tool: ServiceTool) -> Callable[..., Awaitable[str]]:
    from mcp.server.mcpserver.exceptions import ToolError

    def run(arguments: dict[str, Any]) -> str:
        try:
            return render(tool.fn(**tool.validate(arguments)))
        except (AcmsError, ValueError, TypeError) as exc:
            # Bad arguments (BadArguments), bad input, out of scope, an
            # engine's error: the SDK passes a ToolError's message to the
            # agent, so it can correct the call, and logs it without a
            # traceback.  Any other exception is a crash to the SDK: the
            # agent would read only "Error executing tool <name>".
            raise ToolError(str(exc)) from None

    # Async, so that a cancelled call (notifications/cancelled, stdin
    # closed) stops its work: a sync tool runs in a thread the SDK waits for.
    @functools.wraps(tool.fn)
    async def call(**arguments: Any) -> str:  # noqa: ANN401 - the tool's own arguments
        try:
            return await _in_thread(functools.partial(run, arguments), tool.name)
        except QueryTimeoutError as exc:  # its lane is full (raised before any thread)
            raise ToolError(str(exc)) from None

    call.__annotations__ = {**tool.fn.__annotations__, "return": str}
    return call


# Threads one tool's calls hold at most at once.  Each tool has its own
# lane: a flood of one tool's slow calls (SPARQL queries waiting for the
# SPARQL workers, cold traversals) waits in its lane holding no thread, while
# every other tool keeps its own.  With one shared pool (anyio's 40 threads)
# 40 queued SPARQL queries held every thread and ``status`` waited 9-29 s.
# A call that waited _LANE_WAIT seconds for its lane is refused (503: try
# again; the SPARQL time limit) rather than queued for minutes behind others.
_LANE_THREADS = 8
_LANE_WAIT = 10.0


class _Lanes:
    """A capacity limiter per tool, made in the running event loop on first
    use (a limiter belongs to its loop; a new loop, as in a new server of
    the same process, gets new ones)."""

    def __init__(self) -> None:
        self._loop: object = None
        self._lanes: dict[str, Any] = {}

    def get(self, name: str) -> Any:  # noqa: ANN401 - anyio.CapacityLimiter
        import asyncio

        import anyio

        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            # The threads' own limiter: no bound but the lanes'.
            self._loop, self._lanes = loop, {"": anyio.CapacityLimiter(math.inf)}
        lane = self._lanes.get(name)
        if lane is None:
            lane = self._lanes[name] = anyio.CapacityLimiter(_LANE_THREADS)
        return lane


_LANES = _Lanes()


async def _in_thread(work: Callable[[], _T], tool: str) -> _T:
    """``work()`` in a worker thread of ``tool``'s lane (see
    :data:`_LANE_THREADS`), as a call that cancelling this task cancels.

    Python cannot stop the thread, but the work watches the call's
    :class:`CancelToken` (a SPARQL worker is killed at once); the task itself
    returns at once, abandoning the thread to end on its own.
    """
    import anyio.to_thread

    lane = _LANES.get(tool)
    with anyio.move_on_after(_LANE_WAIT) as waited:
        await lane.acquire()
    if waited.cancelled_caught:
        raise QueryTimeoutError(
            f"the service was busy with {lane.borrowed_tokens:g} {tool!r} calls for "
            f"{_LANE_WAIT:g} s and {lane.statistics().tasks_waiting} more wait; try again shortly"
        )
    token = CancelToken()

    def run() -> _T:
        with cancellable(token):
            return work()

    try:
        return await anyio.to_thread.run_sync(run, abandon_on_cancel=True, limiter=_LANES.get(""))
    except anyio.get_cancelled_exc_class():
        token.cancel()
        raise
    finally:
        lane.release()


def _http_app(
    tools: Mapping[str, ServiceTool],
    server: Any,  # noqa: ANN401 - mcp.server.MCPServer
    allowed: HostAllowList | None = None,
    token: str | None = None,
) -> Any:  # noqa: ANN401 - an ASGI app
    """The service's Starlette app: MCP at ``/mcp``, the JSON API at
    ``/api/<tool>``, both behind the same Host/Origin allow-list (see
    :class:`HostAllowList`; default: loopback names only) and, with a
    ``token``, behind :class:`_BearerToken`."""
    from mcp.server.transport_security import TransportSecuritySettings
    from starlette.requests import ClientDisconnect

    allowed = allowed or HostAllowList.for_bind("127.0.0.1")

    async def api(request: Request) -> Response:
        refused = allowed.refusal(request.headers.get("host"), request.headers.get("origin"))
        if refused is not None:
            return _json({"error": refused[1]}, refused[0])
        if request.method != "POST":
            return _json(
                {"error": f"method {request.method} not allowed: call a tool with POST"},
                405,
                headers={"Allow": "POST"},
            )
        name = request.path_params.get("tool", "")
        tool = tools.get(name)
        if tool is None:
            what = f"unknown tool {name[:80]!r}" if name else "no tool named"
            known = ", ".join(sorted(tools))
            return _json({"error": f"{what}: POST to /api/<tool>, one of {known}"}, 404)
        try:
            # Whole, within its time and size limits: _BodyDeadline read it.
            body = await request.body()
        except ClientDisconnect:
            # The client hung up before its body arrived whole (a call
            # cancelled, an agent closed): normal, and no one is left to
            # answer.  Uncaught, it was an error-level traceback.
            structlog.get_logger("cleveragents.acms.serve").info(
                "acms.serve.client_disconnected", path=request.url.path
            )
            return Response(status_code=499)  # nginx's "client closed request", for access logs
        try:
            args = json.loads(body) if body.strip() else {}
        except RecursionError:  # "[[[[..." nests past the parser
            return _json({"error": "bad request: the JSON body nests too deeply"}, 400)
        except ValueError as exc:
            why = str(exc)[:200]
            if "integer string conversion" in why:  # a 5,000-digit number
                why = "a number in the JSON body has too many digits"
            return _json({"error": f"bad request: {why}"}, 400)
        if not isinstance(args, dict):
            return _json({"error": "bad request: the body must be a JSON object"}, 400)
        try:
            kwargs = tool.validate(args)  # what the MCP SDK runs for the same call
        except BadArguments as exc:
            return _json({"error": str(exc)}, 400)
        try:
            answer = await _unless_client_leaves(request, lambda: tool.fn(**kwargs), tool.name)
        except _ClientLeft:
            # The client hung up while its call ran: the work was stopped.
            structlog.get_logger("cleveragents.acms.serve").info(
                "acms.serve.client_disconnected", path=request.url.path, received=len(body)
            )
            return Response(status_code=499)
        except ScopeError as exc:
            return _json({"error": str(exc)}, 403)
        except _UNAVAILABLE as exc:
            # The service's fault, for now (a server down, an index locked or
            # missing): a load balancer retries elsewhere, a client later.
            return _json({"error": str(exc)}, 503, headers={"Retry-After": "5"})
        except (AcmsError, ValueError, TypeError) as exc:
            return _json({"error": str(exc)}, 400)
        return Response(render(answer), media_type="application/json")

    # POST only: any other method is a 405 naming POST in its Allow header,
    # with a JSON body like every other refusal (Starlette's own is plain text).
    # Every path under /api is the API's, so that one naming no tool (/api,
    # /api/, /api/search/x) is its JSON 404, not Starlette's plain text.
    for path in ("/api", "/api/{tool:path}"):
        server.custom_route(path, methods=list(_HTTP_METHODS))(api)
    app = server.streamable_http_app(
        transport_security=TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=allowed.hosts,
            allowed_origins=allowed.origins,
        )
    )
    app = _BodyDeadline(app)
    return app if token is None else _BearerToken(app, token)


class _BodyDeadline:
    """ASGI middleware: a request's body is read here, whole, within
    :data:`_BODY_SECONDS` (else 408) and at most the path's limit (else 413;
    :data:`MAX_REQUEST_BYTES` under ``/api``, :data:`_MCP_BODY_BYTES`
    elsewhere), then handed to the app as one message.  A client that
    leaves first is passed on as its disconnect."""

    def __init__(self, app: Any) -> None:  # noqa: ANN401 - an ASGI app
        self._app = app
        self.held = 0  # body bytes buffered now, across requests (one event loop)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:  # noqa: ANN401
        import anyio

        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self._app(scope, receive, send)
            return
        path = str(scope.get("path", ""))
        limit = MAX_REQUEST_BYTES if path == "/api" or path.startswith("/api/") else _MCP_BODY_BYTES
        chunks: list[bytes] = []
        size, more, first = 0, True, None
        try:
            with anyio.fail_after(_BODY_SECONDS):
                while more:
                    message = await receive()
                    if message["type"] != "http.request":
                        first = message  # the client left
                        break
                    body = message.get("body", b"")
                    size += len(body)
                    self.held += len(body)
                    if size > limit or self.held > _BODY_BUDGET:
                        refusal = (
                            _json({"error": f"request body over {limit} bytes"}, 413)
                            if size > limit
                            else _json(
                                {"error": "too many request bodies in flight; try again"},
                                503,
                                headers={"Retry-After": "5"},
                            )
                        )
                        await refusal(scope, receive, send)
                        return
                    chunks.append(body)
                    more = message.get("more_body", False)
        except TimeoutError:
            late = f"the request body did not arrive within {_BODY_SECONDS:g} s"
            await _json({"error": late}, 408)(scope, receive, send)
            return
        finally:
            self.held -= size
        whole = first or {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        given = False

        async def replay() -> Any:  # noqa: ANN401 - an ASGI message
            nonlocal given
            if not given:
                given = True
                return whole
            return await receive()

        await self._app(scope, replay, send)


class _BearerToken:
    """ASGI middleware: an HTTP request without ``Authorization: Bearer
    <token>`` (compared in constant time) gets 401 and a JSON error, on
    ``/mcp`` and ``/api`` alike; anything else (the lifespan) passes."""

    def __init__(self, app: Any, token: str) -> None:  # noqa: ANN401 - an ASGI app
        self._app = app
        self._token = token.encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:  # noqa: ANN401
        if scope["type"] == "http":
            given = b""
            for name, value in scope["headers"]:
                if name == b"authorization":
                    given = value
            kind, _, credential = given.partition(b" ")
            if not (
                kind.lower() == b"bearer" and hmac.compare_digest(credential.strip(), self._token)
            ):
                refusal = _json(
                    {"error": "this service needs its token: Authorization: Bearer <token>"},
                    401,
                    headers={"WWW-Authenticate": 'Bearer realm="acms"'},
                )
                await refusal(scope, receive, send)
                return
        await self._app(scope, receive, send)


def read_token(path: str | None) -> str | None:
    """The HTTP service's bearer token: the first line of ``path`` (``--token-file``),
    else ``$ACMS_SERVE_TOKEN``, else ``None`` (no token).

    Raises:
        ValueError: the file cannot be read, or the token is empty or holds
            a character a header cannot carry (space, control, non-ASCII).
    """
    if path is not None:
        try:
            with open(path, encoding="utf-8") as fh:
                token = fh.readline().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"cannot read the token file {path}: {exc}") from None
        source = f"the token file {path}"
    else:
        env = os.environ.get(TOKEN_ENV)
        if env is None or not env.strip():
            return None
        token, source = env.strip(), TOKEN_ENV
    if not token or not all("!" <= c <= "~" for c in token):
        raise ValueError(f"{source} holds no token (printable ASCII, no spaces)")
    return token


def _head_deadline_protocol() -> type:
    """uvicorn's HTTP/1.1 protocol, closing a connection that does not send a
    whole request head within :data:`_HEAD_SECONDS` of connecting or of its
    last answer (uvicorn's own keep-alive timer stops at the first byte)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeadDeadline(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm_head_deadline()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm_head_deadline()
            super().connection_lost(exc)

        def handle_events(self) -> None:
            super().handle_events()
            if self._serving():
                self._disarm_head_deadline()  # a request's head arrived whole

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self._serving() and not self.transport.is_closing():
                self._arm_head_deadline()  # the next request's head

        def _serving(self) -> bool:
            return self.cycle is not None and not self.cycle.response_complete

        def _arm_head_deadline(self) -> None:
            self._disarm_head_deadline()
            self._head_timer = self.loop.call_later(_HEAD_SECONDS, self._head_late)

        def _disarm_head_deadline(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_late(self) -> None:
            self._head_timer = None
            if not self._serving() and not self.transport.is_closing():
                self.transport.close()

    return HeadDeadline


_LOOPBACK = ("127.0.0.1", "localhost", "[::1]")
_HOST_NAME = re.compile(r"(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::(?:[0-9]{1,5}|\*))?")
_WILDCARD = ("0.0.0.0", "::", "[::]")


@dataclass(frozen=True)
class HostAllowList:
    """The ``Host`` and ``Origin`` headers the HTTP service answers.

    A web page the user visits can make the browser send requests to a
    loopback port; with DNS rebinding (its own name resolving to 127.0.0.1)
    it can also read the answers: every file of the scope.  A request whose
    ``Host`` names no allowed host is refused (421), and one with an
    ``Origin`` (browsers send it on every cross-site POST; agents and curl
    send none) that is not an allowed host is refused (403), on ``/api``
    as on ``/mcp``.  Allowed: the loopback names, the bound address, on a
    wildcard bind this machine's host name, and each ``--allow-host``.
    """

    hosts: list[str]
    origins: list[str]

    @classmethod
    def for_bind(cls, host: str, extra: Sequence[str] = ()) -> HostAllowList:
        names = list(_LOOPBACK)
        if host in _WILDCARD:
            names.append(socket.gethostname())
        elif host not in ("127.0.0.1", "localhost", "::1"):
            names.append(f"[{host}]" if ":" in host and not host.startswith("[") else host)
        hosts: list[str] = []
        # Lower case: host names are case-blind, and the MCP SDK compares
        # exactly (browsers and HTTP clients send them lower-cased).
        for name in (n.lower() for n in [*names, *extra]):
            hosts += [name] if _has_port(name) else [name, f"{name}:*"]
        origins = [f"{scheme}://{h}" for h in hosts for scheme in ("http", "https")]
        return cls(hosts, origins)

    def admits_host(self, host: str | None) -> bool:
        return host is not None and _matches(host.lower(), self.hosts)

    def refusal(self, host: str | None, origin: str | None) -> tuple[int, str] | None:
        """``(status, reason)`` when the headers are refused, else None."""
        if not self.admits_host(host):
            return 421, "this service does not answer for that Host (see acms serve --allow-host)"
        if origin and not _matches(origin.lower(), self.origins):
            return 403, "cross-origin requests are refused (see acms serve --allow-host)"
        return None


def _has_port(name: str) -> bool:
    return name.rpartition("]")[2].count(":") == 1 if name.startswith("[") else ":" in name


def _matches(value: str, allowed: Sequence[str]) -> bool:
    for pattern in allowed:
        if pattern.endswith(":*"):
            head, _, port = value.rpartition(":")
            if head == pattern[:-2].lower() and port.isdigit():
                return True
        elif value == pattern.lower():
            return True
    return False


async def _unless_client_leaves(request: Request, work: Callable[[], _T], tool: str) -> _T:
    """``work()`` in a worker thread of ``tool``'s lane (:func:`_in_thread`), cancelled if the
    client disconnects first (the request body is read already, so the next
    ASGI message is the disconnect).

    Raises:
        _ClientLeft: the client went away; the work was cancelled.
    """
    import anyio

    outcome: list[_T] = []
    failed: list[Exception] = []
    gone = False

    async def watch(scope: anyio.CancelScope) -> None:
        nonlocal gone
        while (await request.receive())["type"] != "http.disconnect":
            pass
        gone = True
        scope.cancel()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(watch, tasks.cancel_scope)
        try:
            outcome.append(await _in_thread(work, tool))
        except Exception as exc:
            failed.append(exc)
        tasks.cancel_scope.cancel()
    if failed:
        try:
            raise failed[0]
        finally:
            failed.clear()  # no cycle through this frame keeps the error's frames alive
    if gone or not outcome:
        raise _ClientLeft
    return outcome[0]


class _ClientLeft(Exception):
    """The HTTP client disconnected before its call was answered."""


# Refusals that are not the caller's fault: 503, not 400.  A query stopped
# at its time limit, or that found every worker busy, may be answered later;
# a call cancelled while the client waits means the service is stopping.
_UNAVAILABLE = (
    IndexUnavailableError,
    BusyError,
    ModelUnavailableError,
    QueryTimeoutError,
    CallCancelledError,
)

_HTTP_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def _json(body: dict[str, Any], status: int, headers: Mapping[str, str] | None = None) -> Response:
    return Response(
        render(body), status_code=status, media_type="application/json", headers=headers
    )


class JsonLineFormatter(logging.Formatter):
    """A standard ``logging`` record as one JSON line, with the keys of the
    structlog lines beside it (``event``, ``level``, ``timestamp``) and the
    record's ``logger``: the libraries' records (uvicorn, the MCP SDK,
    watchfiles) in the same format as ours."""

    def format(self, record: logging.LogRecord) -> str:
        event: dict[str, Any] = {
            "event": record.getMessage(),
            "logger": record.name,
            "level": record.levelname.lower(),
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.created % 1 * 1_000_000):06d}Z",
        }
        if record.exc_info:
            event["exception"] = self.formatException(record.exc_info)
        return json.dumps(event, default=str)


class _ClientGone(logging.Filter):
    """A client that hung up mid-request, as the MCP SDK logs it at ``/mcp``
    (an error with ``ClientDisconnect``'s traceback): one info line, as
    ``/api`` logs it.  A normal event, not the server's fault."""

    def filter(self, record: logging.LogRecord) -> bool:
        from starlette.requests import ClientDisconnect

        if not (record.exc_info and isinstance(record.exc_info[1], ClientDisconnect)):
            return True
        if not logging.getLogger(record.name).isEnabledFor(logging.INFO):
            return False  # demoted below the level asked for
        record.levelno, record.levelname = logging.INFO, "INFO"
        record.msg, record.args = "acms.serve.client_disconnected", ()
        record.exc_info, record.exc_text = None, None
        return True


def configure_stderr_logging(level: str) -> None:
    """JSON lines on stderr for structlog and the standard logging module."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLineFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    logging.captureWarnings(True)  # Python warnings: JSON lines too, not plain text
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


_PROG = "acms serve"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the service until SIGINT or SIGTERM (exit 0, or 143 after
    SIGTERM, with one line on stderr); exit 2 on bad usage."""
    from cleveragents.cli.main import (
        EXIT_TERMINATED,
        LOG_LEVELS,
        CommandParser,
        Terminated,
        UsageError,
        one_line,
        sigterm_unwinds,
    )

    parser = CommandParser(prog=_PROG, description=__doc__.split("\n\n")[0])
    how = parser.add_mutually_exclusive_group(required=True)
    how.add_argument("--mcp", action="store_true", help="MCP over stdio")
    how.add_argument("--http", metavar="HOST:PORT", help="MCP at /mcp and JSON at /api/<tool>")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--project", action="append", default=[])
    parser.add_argument("--resource", action="append", default=[])
    parser.add_argument("--log-level", default="warning", choices=LOG_LEVELS)
    parser.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME[:PORT]",
        help="also answer requests for this Host (repeatable; loopback names always)",
    )
    parser.add_argument(
        "--token-file",
        metavar="PATH",
        help=f"HTTP: answer only requests carrying 'Authorization: Bearer <the file's first "
        f"line>' (default: ${TOKEN_ENV}, else no token)",
    )
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        print(f"{_PROG}: error: {one_line(exc)}", file=sys.stderr)
        return 2
    bad = [h for h in args.allow_host if not _HOST_NAME.fullmatch(h)]
    if bad:
        print(
            f"{_PROG}: error: --allow-host takes NAME or NAME:PORT, not {one_line(bad[0])[:80]!r}",
            file=sys.stderr,
        )
        return 2
    from cleveragents.bootstrap import private_umask

    private_umask()  # it may open or repair the data directory: owner-only files
    configure_stderr_logging(args.log_level)
    try:
        with sigterm_unwinds():
            return _serve(args)
    except Terminated:
        print(f"{_PROG}: terminated", file=sys.stderr)
        return EXIT_TERMINATED


def _serve(args: argparse.Namespace) -> int:
    from cleveragents.cli.main import one_line

    data_dir = Path(args.data_dir or os.environ.get("ACMS_DATA_DIR") or "data")
    where = one_line(os.path.abspath(data_dir))
    where += " (is --data-dir or ACMS_DATA_DIR the one you indexed?)"
    if not data_dir.is_dir():
        # A mistyped path, or ./data of another working directory: serving
        # a store made here would answer every call with nothing.
        print(f"acms serve: no data directory at {where}", file=sys.stderr)
        return 2
    try:
        from cleveragents.acms import open_data_dir

        session = open_data_dir(data_dir, projects=args.project, resources=args.resource)
    except (AcmsError, ValueError) as exc:
        print(f"acms serve: {one_line(exc)}", file=sys.stderr)
        return 2
    chosen = bool(args.project or args.resource)  # else every project (none: refused above)
    tools = service_tools(session)
    server = make_mcp_server(session, tools)
    if args.mcp:
        # Before the scope line, which tells a host the service is up.
        signal.signal(signal.SIGTERM, _end_stdio)
        signal.signal(signal.SIGINT, _end_stdio)
        _log_scope(session.scope, chosen=chosen)
        try:
            server.run("stdio")
        except BaseExceptionGroup as group:
            # The host closed its end of stdout: the SDK's writer task failed
            # inside its task group.  As a vanished reader of any command's
            # output (quiet, 141), not "internal error: ExceptionGroup".
            _broken, rest = group.split(BrokenPipeError)
            if rest is not None:
                raise
            raise BrokenPipeError("the MCP host closed stdout") from None
        return 0
    host, _, port = str(args.http).rpartition(":")
    if not host or not (port.isascii() and port.isdigit() and int(port) <= 65535):
        print("acms serve: --http needs HOST:PORT, e.g. 127.0.0.1:8765", file=sys.stderr)
        return 2
    try:
        token = read_token(args.token_file)
    except ValueError as exc:
        print(f"acms serve: {one_line(exc)}", file=sys.stderr)
        return 2
    try:
        # Bound here, so a port in use is one line of ours, not uvicorn's.
        listener = _listen(host, int(port))
    except OSError as exc:
        where, why = one_line(f"{host}:{port}"), one_line(exc.strerror or exc)
        print(f"acms serve: cannot listen on {where}: {why}", file=sys.stderr)
        return 1
    if token is None and host.strip("[]") not in ("127.0.0.1", "localhost", "::1"):
        print(
            f"acms serve: warning: serving {one_line(host)}:{port} without a token: whoever "
            f"can reach it reads the served scope (set {TOKEN_ENV} or --token-file)",
            file=sys.stderr,
        )
    _log_scope(session.scope, chosen=chosen)
    import uvicorn

    # log_config=None: uvicorn's records go to the root logger's JSON lines,
    # not to plain-text handlers of its own.
    allowed = HostAllowList.for_bind(host, args.allow_host)
    logging.getLogger("mcp.server.streamable_http").addFilter(_ClientGone())
    config = uvicorn.Config(
        _http_app(tools, server, allowed, token),
        log_level=args.log_level,
        log_config=None,
        http=_head_deadline_protocol(),
        limit_concurrency=connection_cap(),
    )

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            # Asked to stop: uvicorn waits for the calls in flight, and no
            # one will read their answers: stop their work (SPARQL workers)
            # now, not at their time limit.
            cancel_all()
            super().handle_exit(sig, frame)

    with listener:
        Server(config).run(sockets=[listener])
    return 0


def _end_stdio(signum: int, frame: object) -> None:
    """SIGTERM or Ctrl-C over stdio: end now, with one line on stderr and
    exit 143 or 130.

    Unwinding would wait for the MCP SDK's stdin reader, a thread blocked
    reading a line that may never come (Ctrl-C was ignored until the client
    closed stdin, and a second one printed a traceback); the service writes
    nothing but its answers (flushed here), so there is nothing else to finish.
    """
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
    word = "terminated" if signum == signal.SIGTERM else "interrupted"
    with contextlib.suppress(OSError, ValueError):
        print(f"{_PROG}: {word}", file=sys.stderr, flush=True)
    logging.shutdown()
    os._exit(128 + signum)


def _log_scope(scope: SessionScope, *, chosen: bool) -> None:
    """One log line on stderr naming what the service serves: a warning when
    the operator named nothing (every project registered at start is then
    served), else at info level."""
    names = sorted(scope.projects)
    shown = ", ".join(names[:20]) + (f", ... ({len(names) - 20} more)" if len(names) > 20 else "")
    count = f"{len(names)} project{'' if len(names) == 1 else 's'}"
    resources = f"{len(scope.resources)} resource{'' if len(scope.resources) == 1 else 's'}"
    log = structlog.get_logger("cleveragents.acms.serve")
    fields = {"projects": names, "resources": len(scope.resources)}
    if chosen:
        message = f"serving {count}" + (f": {shown}" if names else "") + f" ({resources})"
        log.info("acms.serve.scope", message=message, **fields)
    else:
        message = (
            f"serving all {count} (no --project or --resource given)"
            + (f": {shown}" if names else "")
            + f" ({resources})"
        )
        log.warning("acms.serve.scope", message=message, **fields)


def _listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (IPv4 or IPv6, address reuse as uvicorn).

    Made with protocol ``IPPROTO_TCP``, not 0: asyncio turns Nagle's
    algorithm off (``TCP_NODELAY``) only on connections whose socket says it
    is TCP, and an accepted socket inherits the listener's protocol.  With
    Nagle on, a response's body waited for the client's delayed ACK of its
    headers: every call on a kept-alive connection (what an HTTP client
    library does) took ~44 ms more (``bench_service.py``: 51 ms vs 5 ms in
    process; one call in 1.3 ms with it off).
    """
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
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
