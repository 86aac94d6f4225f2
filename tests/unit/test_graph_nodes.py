"""The graph tools' node names: an IRI stands for itself, a file path for its
node in each in-scope resource that indexes it, anything else is refused.

Over the in-memory reference indexes (the same contract suite as the real
engines), so the resolution and the scope it keeps are tested without disk.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rdflib import Literal

from cleveragents.application.services.agent_session import (
    AgentSession,
    FileText,
    SessionScope,
    union_graphs,
)
from cleveragents.domain.models.acms.backends import (
    GraphBackend,
    GraphResult,
    IndexUnit,
    TextBackend,
    VectorBackend,
)
from cleveragents.domain.models.acms.errors import QueryLimitError, ScopeError
from cleveragents.domain.models.acms.uko import PREDICATES, file_uri, unit_uri
from cleveragents.infrastructure.acms.hashing_embedder import HashingEmbedder
from cleveragents.infrastructure.acms.memory_indexes import (
    MemoryGraphIndex,
    MemoryTextIndex,
    MemoryVectorIndex,
)

A = "01JD5TD11B0000000000000000"
B = "01JD5TD11B0000000000000001"
C = "01JD5TD11B0000000000000002"  # indexed, but outside the session's scope

# pkg/core.py in A, B and C; pkg/only_a.py in A alone.
INDEXED = {(A, "pkg/core.py"), (B, "pkg/core.py"), (C, "pkg/core.py"), (A, "pkg/only_a.py")}


def session() -> AgentSession:
    graph = MemoryGraphIndex()
    for rid, path in sorted(INDEXED):
        node = file_uri(rid, path)
        helper = file_uri(rid, "pkg/helpers.py")
        graph.upsert(
            rid,
            [
                (node, PREDICATES["imports"], helper),
                (helper, PREDICATES["imports"], file_uri(rid, "pkg/deep.py")),
                (node, PREDICATES["language"], "python"),
            ],
        )
    return over(
        graph,
        SessionScope(frozenset({A, B}), {"p/a": frozenset({A}), "p/b": frozenset({B})}),
        lambda rid, path: f"{rid} {path}\nline two\nline three\n",
        INDEXED,
    )


def over(
    graph: MemoryGraphIndex,
    scope: SessionScope,
    text_of: Callable[[str, str], str],
    indexed: set[tuple[str, str]],
) -> AgentSession:
    """A session over ``graph`` (empty text and vector indexes) whose files
    read as ``text_of(rid, path)`` and whose indexed files are ``indexed``."""
    dim = 16
    return AgentSession(
        text=cast(TextBackend, MemoryTextIndex()),
        vector=cast(VectorBackend, MemoryVectorIndex(dim)),
        graph=cast(GraphBackend, graph),
        embedder=HashingEmbedder(dim),
        scope=scope,
        read_file=lambda rid, path, size: FileText(text_of(rid, path)),
        is_indexed=lambda rid, path: (rid, path) in indexed,
    )


def test_an_iri_or_blank_node_stands_for_itself_whatever_it_names() -> None:
    s = session()
    for node in (file_uri(A, "pkg/helpers.py"), "urn:x", "https://e.org/a", "uko:x", "_:b1"):
        assert s.graph_nodes(node) == [node]


def test_a_node_of_the_scopes_resources_that_its_graph_lacks_is_refused() -> None:
    """A typo in a uko:// IRI must not answer "no edges": an indexed file,
    a node with edges out or in, or the resource stands for itself; anything
    else of an in-scope resource is an error."""
    s = session()
    assert s.graph_nodes(file_uri(A, "pkg/deep.py")) == [file_uri(A, "pkg/deep.py")]  # edges in
    assert s.graph_nodes("uko://" + A) == ["uko://" + A]
    for node in (file_uri(A, "x.py"), file_uri(A, "pkg/core.py") + "#sym=Nope"):
        with pytest.raises(ValueError, match="is no node of this scope's graph"):
            s.graph_nodes(node)
        with pytest.raises(ValueError, match="is no node of this scope's graph"):
            s.traverse(node, direction="in")


def test_a_path_stands_for_its_node_in_each_in_scope_resource_and_no_other() -> None:
    s = session()
    assert s.graph_nodes("pkg/core.py") == [file_uri(A, "pkg/core.py"), file_uri(B, "pkg/core.py")]
    assert s.graph_nodes("./pkg/core.py") == s.graph_nodes("pkg/core.py")
    assert s.graph_nodes("pkg/core.py", projects=["p/b"]) == [file_uri(B, "pkg/core.py")]
    assert s.graph_nodes("pkg/only_a.py") == [file_uri(A, "pkg/only_a.py")]
    with pytest.raises(ValueError, match="neither an IRI nor a file path"):
        s.graph_nodes("pkg/only_a.py", resources=[B])


@pytest.mark.parametrize("node", ["pkg/absent.py", "helpers", "core.py", "/pkg/core.py", "../x"])
def test_anything_else_is_refused_with_the_form_to_use(node: str) -> None:
    with pytest.raises(ValueError, match=r"uko://<ULID>/<path>"):
        session().graph_nodes(node)


@pytest.mark.parametrize(("node", "error"), [("", ValueError), ("  ", ValueError), (3, TypeError)])
def test_an_empty_or_non_string_node_is_refused(node: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        session().triples(node)
    with pytest.raises(error):
        session().traverse(node)


def test_the_tools_answer_for_every_node_a_path_stands_for() -> None:
    s = session()
    core = {rid: file_uri(rid, "pkg/core.py") for rid in (A, B)}
    by_path = s.triples("pkg/core.py")
    assert by_path["nodes"] == [core[A], core[B]]
    expected = sorted(
        (t["s"], t["p"], t["o"]) for rid in (A, B) for t in s.triples(core[rid])["results"]
    )
    assert [(t["s"], t["p"], t["o"]) for t in by_path["results"]] == expected
    assert "nodes" not in s.triples(core[A])
    walked = s.traverse("pkg/core.py", depth=2)
    assert walked["nodes"] == [core[A], core[B]] and walked["depth"] == 2
    rows = [(t["s"], t["p"], t["o"]) for t in walked["results"]]
    assert rows == [
        (t["s"], t["p"], t["o"])
        for rid in (A, B)
        for t in s.traverse(core[rid], depth=2)["results"]
    ]
    assert all(C not in "".join(row) for row in rows)


triple = st.tuples(*(st.sampled_from(["a", "b", "c", "d"]) for _ in range(3)))
results = st.lists(st.lists(triple, max_size=8), min_size=1, max_size=5)


@settings(max_examples=200, deadline=None)
@given(results=results, ordered=st.booleans())
def test_a_union_holds_each_triple_once_in_the_order_asked(
    results: list[list[tuple[str, str, str]]], ordered: bool
) -> None:
    graphs = [GraphResult(list(r), {"rows": str(len(r))}) for r in results]
    union = union_graphs(graphs, ordered=ordered)
    if len(graphs) == 1:
        assert union is graphs[0]
        return
    first_seen: list[tuple[str, str, str]] = []
    for r in results:
        for t in r:
            if t not in first_seen:
                first_seen.append(t)
    assert union.triples == (sorted(first_seen) if ordered else first_seen)
    assert union.metadata == {"rows": str(len(first_seen))}


def test_read_takes_the_path_of_the_one_in_scope_file_with_its_range() -> None:
    s = session()
    by_path = s.read("pkg/only_a.py#L2-L3")
    assert by_path == s.read(file_uri(A, "pkg/only_a.py") + "#L2-L3")
    assert by_path["uri"] == file_uri(A, "pkg/only_a.py")
    assert [r["line"] for r in by_path["results"]] == [2, 3]
    assert s.read("./pkg/only_a.py")["results"][0]["text"] == f"{A} pkg/only_a.py"


def test_read_by_a_path_several_resources_have_names_their_uris() -> None:
    with pytest.raises(ValueError, match="2 resources") as err:
        session().read("pkg/core.py")
    assert file_uri(A, "pkg/core.py") in str(err.value)
    assert file_uri(B, "pkg/core.py") in str(err.value)
    assert C not in str(err.value)  # indexed there, but outside the scope


@pytest.mark.parametrize("given", ["pkg/absent.py", "pkg/helpers.py#L1-L2", "_:b1", ""])
def test_read_by_a_path_no_in_scope_resource_indexes_is_refused(given: str) -> None:
    with pytest.raises(ValueError):
        session().read(given)


def test_an_iri_of_a_resource_outside_the_scope_is_refused_not_answered_empty() -> None:
    s = session()
    outside = file_uri(C, "pkg/core.py")  # indexed, with triples, in C
    for call in (s.triples, s.traverse, s.symbols, s.graph_nodes):
        with pytest.raises(ScopeError, match="outside this session's scope"):
            call(outside)
    with pytest.raises(ScopeError):
        s.triples(file_uri(B, "pkg/core.py"), projects=["p/a"])


@pytest.mark.parametrize("path", ["pkg/absent.py", "/pkg/core.py", "core.py"])
def test_symbols_of_a_path_no_in_scope_resource_indexes_is_an_error(path: str) -> None:
    with pytest.raises(ValueError, match="neither an IRI nor a file path"):
        session().symbols(path)


def test_symbols_take_a_files_uri_or_its_path() -> None:
    s = session()
    assert s.symbols(file_uri(A, "pkg/only_a.py"))["results"] == []  # no defines edges here
    assert s.symbols("pkg/only_a.py")["results"] == []


@pytest.mark.parametrize("mode", ["hybrid", "text", "vector"])
@pytest.mark.parametrize("query", ["???", "?!.,", "-- ::"])
def test_a_query_with_no_letters_or_digits_answers_nothing_in_every_mode(
    mode: str, query: str
) -> None:
    # Any plain text is a valid query; punctuation alone is not ranked by
    # vector noise.  The vector index holds a unit, so noise would show.
    s = session()
    vectors = cast(MemoryVectorIndex, s._vector)
    unit = IndexUnit(file_uri(A, "pkg/core.py") + "#L1-L3", "quokka", {})
    vectors.upsert(A, [unit], [[1.0] * 16])
    assert s.search("quokka wombat", mode="vector")["results"]  # a word: ranked
    assert s.search(query, mode=mode)["results"] == []
    assert s.context(query)["results"] == []


def test_traverse_walks_in_a_direction_along_the_predicates_named() -> None:
    """Who imports pkg/helpers.py (in), what pkg/core.py imports (out, by
    name or by IRI), and both: each the backend's walk for every node the
    path stands for, within the scope (C's pkg/core.py imports its own
    helpers, outside the scope: never an answer)."""
    s = session()
    helpers = {rid: file_uri(rid, "pkg/helpers.py") for rid in (A, B)}
    imports = PREDICATES["imports"]
    importers = s.traverse(helpers[A], depth=1, direction="in")
    assert [(t["s"], t["p"], t["o"]) for t in importers["results"]] == [
        (file_uri(A, "pkg/core.py"), imports, helpers[A]),
        (file_uri(A, "pkg/only_a.py"), imports, helpers[A]),
    ]
    assert importers["direction"] == "in" and "predicates" not in importers
    out = s.traverse("pkg/core.py", depth=1, predicates=["imports"])
    assert [(t["s"], t["p"], t["o"]) for t in out["results"]] == [
        (file_uri(A, "pkg/core.py"), imports, helpers[A]),
        (file_uri(B, "pkg/core.py"), imports, helpers[B]),
    ]
    assert out["predicates"] == [imports] and "direction" not in out
    assert s.traverse("pkg/core.py", depth=1, predicates=[imports])["results"] == out["results"]
    # The prefixed name the SPARQL examples use means the same predicate.
    assert s.traverse("pkg/core.py", depth=1, predicates=["uko:imports"]) == out
    both = s.traverse(helpers[B], depth=1, direction="both", predicates=["imports"])
    assert {(t["s"], t["o"]) for t in both["results"]} == {
        (file_uri(B, "pkg/core.py"), helpers[B]),
        (helpers[B], file_uri(B, "pkg/deep.py")),
    }
    # Every edge, not only imports: the language literal comes too.
    assert len(s.traverse("pkg/core.py", depth=1)["results"]) == 4


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"direction": "up"}, ValueError, "direction"),
        ({"predicates": ["importz"]}, ValueError, "unknown predicate 'importz'.*imports"),
        ({"predicates": []}, ValueError, "must not be empty"),
        ({"predicates": "imports"}, TypeError, "a list"),
        ({"predicates": [3]}, TypeError, "a list"),
        ({"predicates": ["has space:x y"]}, ValueError, "unknown predicate"),
        ({"predicates": ["rdf:type"]}, ValueError, "unknown predicate 'rdf:type'.*full IRI"),
        ({"predicates": ["uko:importz"]}, ValueError, "unknown predicate 'uko:importz'"),
        (
            {"predicates": ["https://cleveragents.dev/ns/uko#importz"]},
            ValueError,
            "UKO's are",
        ),
    ],
)
def test_a_bad_direction_or_predicate_is_refused_naming_it(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        session().traverse("pkg/core.py", **kwargs)


def test_a_path_in_several_resources_is_told_the_depth_that_answers_for_all() -> None:
    """pkg/core.py in A (walked first) passes the limit at hop 4; in B at
    hop 2.  The error names depth 1, the one that answers for both, not the
    first walk's advice (depth 3, which B cannot answer)."""
    graph = MemoryGraphIndex(max_rows=3)
    calls = PREDICATES["calls"]
    a = [file_uri(A, f"pkg/{n}.py") for n in ("core", "a1", "a2", "a3", "a4", "a5")]
    chain = [(a[0], calls, a[1]), (a[1], calls, a[2]), (a[2], calls, a[3])]
    graph.upsert(A, [*chain, (a[3], calls, a[4]), (a[3], calls, a[5])])
    b = [file_uri(B, f"pkg/{n}.py") for n in ("core", "b1", "b2", "b3", "b4")]
    graph.upsert(B, [(b[0], calls, b[1])] + [(b[1], calls, x) for x in b[2:]])
    dim = 16
    s = AgentSession(
        text=cast(TextBackend, MemoryTextIndex()),
        vector=cast(VectorBackend, MemoryVectorIndex(dim)),
        graph=cast(GraphBackend, graph),
        embedder=HashingEmbedder(dim),
        scope=SessionScope(frozenset({A, B}), {"p/a": frozenset({A}), "p/b": frozenset({B})}),
        read_file=lambda rid, path, size: FileText("x\n"),
        is_indexed=lambda rid, path: path == "pkg/core.py",
    )
    assert len(s.traverse("pkg/core.py", depth=3, projects=["p/a"])["results"]) == 3
    for depth in (2, 3, 5):
        with pytest.raises(QueryLimitError, match="at hop 2: ask for depth 1 or less"):
            s.traverse("pkg/core.py", depth=depth)
    assert len(s.traverse("pkg/core.py", depth=1)["results"]) == 2


# Found by a reviewer: read cut a path at its first "#" and looked a symbol
# up by its name as given, unquoted; the index quotes both.
NAMED = {(A, "README.md"), (A, "sp ace#1.py")}


def named_session() -> AgentSession:
    graph = MemoryGraphIndex()
    triples = []
    for path, name, first, last in (
        ("README.md", "Getting Started", 1, 2),
        ("README.md", "café", 3, 3),
        ("sp ace#1.py", "gamma", 2, 3),
    ):
        symbol = unit_uri(A, path, f"sym={name}")
        triples += [
            (file_uri(A, path), PREDICATES["defines"], symbol),
            (symbol, PREDICATES["name"], Literal(name)),
            (symbol, PREDICATES["kind"], Literal("function")),
            (symbol, PREDICATES["line"], Literal(first)),
            (symbol, PREDICATES["endLine"], Literal(last)),
        ]
    graph.upsert(A, triples)
    scope = SessionScope(frozenset({A}), {"p/a": frozenset({A})})
    return over(graph, scope, lambda rid, path: "one\ntwo\nthree\n", NAMED)


@pytest.mark.parametrize(
    ("written", "lines"),
    [
        ("README.md#sym=Getting Started", [1, 2]),
        ("README.md#sym=Getting%20Started", [1, 2]),
        (file_uri(A, "README.md") + "#sym=Getting Started", [1, 2]),
        ("README.md#sym=café", [3]),
        (file_uri(A, "README.md") + "#sym=café", [3]),
        ("sp ace#1.py", [1, 2, 3]),
        ("sp ace#1.py#sym=gamma", [2, 3]),
        ("sp ace#1.py#L3", [3]),
    ],
)
def test_read_takes_a_symbol_or_a_file_name_as_written(written: str, lines: list[int]) -> None:
    got = named_session().read(written)
    assert [r["line"] for r in got["results"]] == lines


def test_read_of_a_symbol_the_file_lacks_names_it_as_written() -> None:
    with pytest.raises(ValueError, match="defines no symbol 'Getting Startd'"):
        named_session().read("README.md#sym=Getting Startd")


def test_symbols_of_a_file_with_a_hash_in_its_name() -> None:
    s = named_session()
    for written in ("sp ace#1.py", "sp ace#1.py#sym=gamma", file_uri(A, "sp ace#1.py")):
        assert [r["uri"] for r in s.symbols(written)["results"]] == [
            unit_uri(A, "sp ace#1.py", "sym=gamma")
        ], written


def test_a_doubled_slash_is_named_and_dot_slash_slash_is_relative() -> None:
    s = named_session()
    with pytest.raises(ValueError, match=r"starts or ends with '/' \(the file's URI is"):
        s.read(f"uko://{A}//README.md")
    assert s.read(".//README.md")["uri"] == file_uri(A, "README.md")
