"""The MCP tools' input schemas, what an agent chooses its arguments from:
every argument described, and each bound and choice the schema states the
one the session enforces; a refused argument reaches an MCP client as the
JSON API's one line.

Over the in-memory reference indexes, through the MCP SDK's in-memory client.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, cast

import anyio
import pytest
from mcp import Client

from cleveragents.application.services.agent_session import (
    AgentSession,
    FileText,
    SessionScope,
)
from cleveragents.cli.serve import BadArguments, make_mcp_server, service_tools
from cleveragents.domain.models.acms.backends import (
    TRAVERSAL_DIRECTIONS,
    GraphBackend,
    TextBackend,
    VectorBackend,
)
from cleveragents.domain.models.acms.errors import AcmsError
from cleveragents.domain.models.acms.text_query import SYNTAXES
from cleveragents.domain.models.acms.uko import PREDICATES, file_uri
from cleveragents.infrastructure.acms.hashing_embedder import HashingEmbedder
from cleveragents.infrastructure.acms.memory_indexes import (
    MemoryGraphIndex,
    MemoryTextIndex,
    MemoryVectorIndex,
)

A = "01JD5TD11B0000000000000000"
CORE = file_uri(A, "pkg/core.py")


def _session() -> AgentSession:
    graph = MemoryGraphIndex()
    graph.upsert(A, [(CORE, PREDICATES["imports"], file_uri(A, "pkg/util.py"))])
    dim = 16
    return AgentSession(
        text=cast(TextBackend, MemoryTextIndex()),
        vector=cast(VectorBackend, MemoryVectorIndex(dim)),
        graph=cast(GraphBackend, graph),
        embedder=HashingEmbedder(dim),
        scope=SessionScope(frozenset({A}), {"local/a": frozenset({A})}),
        read_file=lambda rid, path, size: FileText("one\ntwo\nthree\n"),
        is_indexed=lambda rid, path: path == "pkg/core.py",
    )


# The required arguments of each tool, valid for the session above.
CALLS: dict[str, dict[str, Any]] = {
    "search": {"query": "helper"},
    "search_text": {"query": "helper"},
    "search_vector": {"query": "helper"},
    "sparql": {"query": "ASK { ?s ?p ?o }"},
    "triples": {"subject": "pkg/core.py"},
    "traverse": {"start": "pkg/core.py"},
    "read": {"uri": "pkg/core.py"},
    "context": {"task": "add a helper"},
    "symbols": {"path": "pkg/core.py"},
    "callers": {"target": "helper"},
    "callees": {"source": "helper"},
    "status": {},
}


def _schemas() -> dict[str, dict[str, Any]]:
    """The input schema of each tool, as an MCP client lists them."""

    async def listed() -> dict[str, dict[str, Any]]:
        async with Client(make_mcp_server(_session())) as client:
            return {t.name: t.input_schema for t in (await client.list_tools()).tools}

    return anyio.run(listed)


def _choices(prop: dict[str, Any]) -> dict[str, Any]:
    """The part of a property's schema that states its values (an optional
    argument's is its non-null alternative)."""
    alternatives = [p for p in prop.get("anyOf", [prop]) if p.get("type") != "null"]
    assert len(alternatives) == 1, prop
    return cast(dict[str, Any], alternatives[0])


def _refusal(call: Callable[[], object]) -> str | None:
    """Why ``call`` was refused (None: it answered)."""
    try:
        call()
    except (AcmsError, ValueError, TypeError) as exc:
        return str(exc)
    return None


def test_every_argument_of_every_tool_is_described() -> None:
    schemas = _schemas()
    assert set(schemas) == set(CALLS)
    for name, schema in schemas.items():
        for argument, prop in schema["properties"].items():
            description = prop.get("description")
            assert isinstance(description, str) and description.strip(), (name, argument)


def test_the_schema_bounds_are_the_ones_the_session_enforces() -> None:
    """At each bound the schema states, the session (called directly, past
    the argument model) takes the value; one past it, the session refuses
    it naming the argument, and so does the tool's argument model, in one
    line listing the tool's arguments."""
    tools = service_tools(_session())
    bounded = set()
    for name, schema in _schemas().items():
        tool = tools[name]
        for argument, prop in schema["properties"].items():
            choices = _choices(prop)
            if choices.get("type") != "integer":
                continue
            assert "minimum" in choices, (name, argument)  # every count has a floor
            for key, step in (("minimum", -1), ("maximum", 1)):
                if key not in choices:
                    continue
                bounded.add((name, argument, key))
                at, past = choices[key], choices[key] + step
                args = {**CALLS[name], argument: at}
                why = _refusal(partial(tool.fn, **args))
                # At the bound: answered, or refused for another reason
                # (read's start_line at its maximum is past the file's end).
                assert why is None or argument not in why, (name, argument, at, why)
                tool.validate(args)
                args = {**CALLS[name], argument: past}
                why = _refusal(partial(tool.fn, **args))
                assert why is not None and argument in why, (name, argument, past, why)
                with pytest.raises(BadArguments) as refused:
                    tool.validate(args)
                message = str(refused.value)
                assert f"'{argument}'" in message and f"{name} takes" in message
                assert "\n" not in message
    searches = ("search", "search_text", "search_vector")
    assert {(n, a) for n, a, k in bounded if k == "maximum"} == {
        *((n, "budget") for n in CALLS),
        *((n, "max_results") for n in searches),
        ("read", "start_line"),
        ("read", "end_line"),
    }
    assert ("traverse", "depth", "minimum") in bounded  # no maximum: the walk limit is


@pytest.mark.parametrize(
    ("tool", "argument", "values"),
    [("search_text", "syntax", SYNTAXES), ("traverse", "direction", TRAVERSAL_DIRECTIONS)],
)
def test_the_schema_lists_the_choices_the_session_takes(
    tool: str, argument: str, values: tuple[str, ...]
) -> None:
    assert _choices(_schemas()[tool]["properties"][argument])["enum"] == list(values)
    served = service_tools(_session())[tool]
    for value in values:
        args = {**CALLS[tool], argument: value}
        why = _refusal(partial(served.fn, **served.validate(args)))
        assert why is None, (value, why)
    args = {**CALLS[tool], argument: "sideways"}
    assert argument in str(_refusal(partial(served.fn, **args)))
    with pytest.raises(BadArguments, match=f"'{argument}'"):
        served.validate(args)


@pytest.mark.parametrize(
    "args",
    [
        {"query": "x", "max_results": "abc"},
        {"query": "x", "max_results": 101},
        {"query": "x", "bogus": 1},
        {"max_results": 3},
        {"query": "x", "projects": ["Not A Name"]},
    ],
    ids=["not-a-number", "too-many", "unknown", "missing", "bad-project"],
)
def test_an_mcp_client_reads_the_json_apis_one_line(args: dict[str, Any]) -> None:
    """What the JSON API answers (400, ``{"error": line}``), the MCP client
    reads after the SDK's "Error executing tool search: " and nothing more:
    not pydantic's "1 validation error for ..." and "[type=...]" lines."""
    session = _session()
    with pytest.raises(BadArguments) as refused:
        service_tools(session)["search"].validate(args)
    line = str(refused.value)

    async def call() -> tuple[bool, str]:
        async with Client(make_mcp_server(session)) as client:
            result = await client.call_tool("search", args)
            return bool(result.is_error), "".join(getattr(c, "text", "") for c in result.content)

    is_error, text = anyio.run(call)
    assert is_error
    assert text == f"Error executing tool search: {line}"
    assert "\n" not in text and "validation error" not in text and "[type=" not in text


# The arguments the session resolves as a node, so as a file path too
# (``AgentSession._graph_nodes``): relative to a resource's root or absolute
# inside one, and, for callers/callees, ``path#sym=<name>``.
PATH_ARGUMENTS = {
    "triples": "subject",
    "traverse": "start",
    "read": "uri",
    "symbols": "path",
    "callers": "target",
    "callees": "source",
}


def test_every_argument_that_takes_a_file_path_says_it_may_be_relative_or_absolute() -> None:
    schemas = _schemas()
    for name, argument in PATH_ARGUMENTS.items():
        description = schemas[name]["properties"][argument]["description"]
        assert "relative" in description and "absolute" in description, (name, description)


def test_a_query_or_task_past_its_length_is_refused_as_an_argument() -> None:
    """A 3.9 MB query spent seconds splitting terms (and embedding them, for
    ``search``) before anything refused it; the argument model now refuses
    it first, naming the argument, and the schema states the bound."""
    from cleveragents.cli.serve import MAX_QUERY_CHARS

    tools = service_tools(_session())
    schemas = _schemas()
    for name, argument in (
        ("search", "query"),
        ("search_text", "query"),
        ("search_vector", "query"),
        ("context", "task"),
    ):
        assert _choices(schemas[name]["properties"][argument])["maxLength"] == MAX_QUERY_CHARS
        tools[name].validate({**CALLS[name], argument: "x" * MAX_QUERY_CHARS})
        with pytest.raises(BadArguments) as refused:
            tools[name].validate({**CALLS[name], argument: "word " * MAX_QUERY_CHARS})
        assert f"'{argument}'" in str(refused.value) and "\n" not in str(refused.value)
