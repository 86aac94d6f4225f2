"""A file named by its absolute path, as an agent holds it: the file of each
in-scope resource whose root holds it, resolved as the operating system
opens it, so ``..`` and symlinks never reach outside the scope.

One function (``AgentSession._graph_nodes``) resolves the path of every tool
that takes one: ``symbols``, ``read``, ``triples``, ``traverse`` and
``callers``/``callees`` given ``path#sym=<name>``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import cast

import pytest

from cleveragents.application.services.agent_session import (
    AgentSession,
    FileText,
    SessionScope,
)
from cleveragents.domain.models.acms.backends import GraphBackend, TextBackend, VectorBackend
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

INDEXED = {
    (A, "pkg/core.py"),
    (B, "pkg/core.py"),
    (C, "pkg/core.py"),
    (C, "secret.py"),
    # What a symlink of A would be indexed as, were it indexed: the file it
    # names is C's, so its absolute path must still not reach it.
    (A, "link/secret.py"),
}


@pytest.fixture
def roots(tmp_path: Path) -> dict[str, Path]:
    found = {}
    for rid, name in ((A, "a"), (B, "b"), (C, "c")):
        root = tmp_path / name
        (root / "pkg").mkdir(parents=True)
        (root / "pkg" / "core.py").write_text(f"# {name}\ndef run():\n    pass\n")
        found[rid] = root
    (found[C] / "secret.py").write_text("TOKEN = 1\n")
    (found[A] / "link").symlink_to(found[C])
    (found[A] / "pkg" / "deep").symlink_to(found[C] / "pkg")
    return found


def session(roots: dict[str, Path], *, locations: bool = True) -> AgentSession:
    graph = MemoryGraphIndex()
    for rid, path in sorted(INDEXED):
        node = file_uri(rid, path)
        sym = unit_uri(rid, path, "sym=run")
        graph.upsert(
            rid,
            [
                (node, PREDICATES["defines"], sym),
                (sym, PREDICATES["name"], "run"),
                (sym, PREDICATES["kind"], "function"),
                (sym, PREDICATES["line"], "2"),
                (sym, PREDICATES["endLine"], "3"),
            ],
        )

    def read(rid: str, path: str, size: int) -> FileText:
        return FileText((roots[rid] / path).read_text())

    dim = 16
    return AgentSession(
        text=cast(TextBackend, MemoryTextIndex()),
        vector=cast(VectorBackend, MemoryVectorIndex(dim)),
        graph=cast(GraphBackend, graph),
        embedder=HashingEmbedder(dim),
        scope=SessionScope(frozenset({A, B}), {"p/a": frozenset({A}), "p/b": frozenset({B})}),
        read_file=read,
        is_indexed=lambda rid, path: (rid, path) in INDEXED,
        locations=(lambda: {rid: str(root) for rid, root in roots.items()}) if locations else None,
    )


def test_an_absolute_path_is_the_file_of_the_resource_whose_root_holds_it(
    roots: dict[str, Path],
) -> None:
    s = session(roots)
    core = str(roots[A] / "pkg" / "core.py")
    assert s.graph_nodes(core) == [file_uri(A, "pkg/core.py")]
    assert s.graph_nodes(str(roots[B] / "pkg" / "core.py")) == [file_uri(B, "pkg/core.py")]
    # ``..`` inside the root, and a trailing fragment, as for a relative path.
    assert s.graph_nodes(str(roots[A] / "pkg" / ".." / "pkg" / "core.py")) == [
        file_uri(A, "pkg/core.py")
    ]
    assert s.graph_nodes(core + "#sym=run") == [unit_uri(A, "pkg/core.py", "sym=run")]
    got = s.symbols(core)
    assert [(r["uri"], r["name"], r["line"]) for r in got["results"]] == [
        (unit_uri(A, "pkg/core.py", "sym=run"), "run", 2)
    ]
    assert s.symbols("./pkg/core.py")["results"] == s.symbols("pkg/core.py")["results"]
    read = s.read(core + "#L1")
    assert (read["uri"], [r["text"] for r in read["results"]]) == (
        file_uri(A, "pkg/core.py"),
        ["# a"],
    )
    assert [r["text"] for r in s.read(core + "#sym=run")["results"]] == ["def run():", "    pass"]
    assert s.triples(core)["nodes"] == [file_uri(A, "pkg/core.py")]
    assert s.callers(core + "#sym=run")["defined"] == 1


def test_a_root_reached_through_a_symlink_is_the_same_root(
    roots: dict[str, Path], tmp_path: Path
) -> None:
    (tmp_path / "alias").symlink_to(roots[B])
    s = session(roots)
    assert s.graph_nodes(str(tmp_path / "alias" / "pkg" / "core.py")) == [
        file_uri(B, "pkg/core.py")
    ]


@pytest.mark.parametrize(
    "where",
    [
        "c/pkg/core.py",  # another resource's file
        "a/../c/secret.py",  # out of A by ``..``
        "a/link/secret.py",  # out of A through a symlink (even were it indexed)
        # ``..`` after a symlink is taken from its target, as the system
        # takes it: not A's pkg/core.py, as the text alone would read.
        "a/pkg/deep/../core.py",
        "a/pkg/deep/../pkg/core.py",
        "elsewhere.py",
    ],
)
def test_an_absolute_path_outside_the_scope_is_refused_naming_the_scopes_roots(
    roots: dict[str, Path], tmp_path: Path, where: str
) -> None:
    s = session(roots)
    path = os.path.join(str(tmp_path), where)
    for call in (s.symbols, s.read, s.triples, s.graph_nodes):
        with pytest.raises(ValueError, match="lies in none of the scope's resources") as info:
            call(path)
        message = str(info.value)
        assert str(roots[A]) in message and str(roots[B]) in message
        assert str(roots[C]) not in message.replace(path, "")


def test_an_absolute_path_of_an_in_scope_file_not_indexed_says_which_file_it_is(
    roots: dict[str, Path],
) -> None:
    with pytest.raises(ValueError, match=f"'pkg/absent.py' of resource {A}"):
        session(roots).symbols(str(roots[A] / "pkg" / "absent.py"))


def test_without_the_resources_locations_an_absolute_path_is_refused(
    roots: dict[str, Path],
) -> None:
    with pytest.raises(ValueError, match="neither an IRI nor a file path"):
        session(roots, locations=False).symbols(str(roots[A] / "pkg" / "core.py"))


@pytest.mark.parametrize("path", ["/", "/\x00x", "/" + "a" * 5000])
def test_odd_absolute_paths_are_refused_in_one_line(roots: dict[str, Path], path: str) -> None:
    with pytest.raises(ValueError):
        session(roots).symbols(path)
