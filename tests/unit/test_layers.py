"""The dependency direction, checked on the source: the domain imports neither
application nor infrastructure; services never import the container or an
adapter (they receive what they need from the bootstrap); adapters never
import the application."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "cleveragents"


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node except those under ``if TYPE_CHECKING:`` (never executed)."""
    out: list[ast.AST] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            stack.extend(node.orelse)
            continue
        out.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return out


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def modules(folder: str) -> list[Path]:
    return sorted((SRC / folder).rglob("*.py"))


@pytest.mark.parametrize(
    ("folder", "forbidden"),
    [
        ("domain", ("cleveragents.application", "cleveragents.infrastructure")),
        (
            "application/services",
            ("cleveragents.application.container", "cleveragents.infrastructure"),
        ),
        ("infrastructure", ("cleveragents.application", "cleveragents.cli")),
    ],
)
def test_layers_import_one_way(folder: str, forbidden: tuple[str, ...]) -> None:
    bad = [
        f"{path.relative_to(SRC)} imports {name}"
        for path in modules(folder)
        for name in imported(path)
        if name.startswith(forbidden)
    ]
    assert bad == []


def test_the_planner_calls_no_engine() -> None:
    names = imported(SRC / "application" / "services" / "indexer.py")
    assert not {n for n in names if n.split(".")[0] in ("tantivy", "faiss", "rdflib", "sqlite3")}
    source = (SRC / "application" / "services" / "indexer.py").read_text()
    for call in (".upsert(", ".set_meta(", ".put(", "checkpoint("):
        assert call not in source, call
