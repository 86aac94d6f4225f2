"""A repository of a few files indexed for real on disk (Tantivy, FAISS,
the graph store) through the bootstrap, as a host does, and an agent
session over it (shared by the test modules)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path

from cleveragents.application.services.agent_session import AgentSession
from cleveragents.bootstrap import bootstrap


@contextlib.contextmanager
def indexed_session(
    base: Path, files: Mapping[str, str], project: str = "local/r"
) -> Iterator[AgentSession]:
    """``files`` (relative path -> text) written under ``base/repo``, indexed
    in ``base/data`` as project ``project``; its session within the block."""
    root = base / "repo"
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    ops = bootstrap(base / "data", embedding_dimension=16)
    ops.add_project(project)
    ops.add_resource(str(root), project)
    ops.reindex()
    try:
        yield ops.agent_session(projects=[project])
    finally:
        ops._store().close()
