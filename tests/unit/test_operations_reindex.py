"""``AcmsOperations`` reindex, verify and prune over the in-memory reference
store (the lock and the registry on a temporary directory)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from cleveragents.application.services.indexer import Indexer
from cleveragents.application.services.operations import AcmsOperations
from cleveragents.domain.models.acms.errors import BusyError
from cleveragents.infrastructure.acms.hashing_embedder import HashingEmbedder
from cleveragents.infrastructure.acms.index_store import ManagedIndexStore
from cleveragents.infrastructure.acms.reindex_lock import ReindexLock
from cleveragents.infrastructure.acms.sqlite_registry import open_registry

DIM = 16


@pytest.fixture
def ops(tmp_path: Path) -> AcmsOperations:
    data = tmp_path / "data"
    store = ManagedIndexStore.in_memory(DIM, data_dir=data)
    embedder = HashingEmbedder(DIM)
    indexer = Indexer(store, embedder)
    projects, resources = open_registry(data / "registry.sqlite3")
    return AcmsOperations(
        data_dir=data,
        projects=projects,
        resources=resources,
        store=lambda: store,
        text=lambda: store.text,
        vector=lambda: store.vector,
        graph=lambda: store.graph,
        embedder=lambda: embedder,
        indexer=lambda: indexer,
    )


def make_tree(root: Path, marker: str) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "core.py").write_text(f"def {marker}_function():\n    return 1\n")
    (root / "README.md").write_text(f"# {marker}\n")
    return root


def test_reindex_verify_and_prune(ops: AcmsOperations, tmp_path: Path) -> None:
    ops.add_project("local/a")
    ops.add_project("local/b")
    a = ops.add_resource(str(make_tree(tmp_path / "a", "alphamark")), "local/a").resource_id
    b = ops.add_resource(str(make_tree(tmp_path / "b", "bravomark")), "local/b").resource_id

    report = ops.reindex(projects=["local/a"])
    assert set(report.resources) == {a}
    assert ops.view(frozenset({a})).search("alphamark")
    assert ops.view(frozenset({b})).search("bravomark") == []

    report = ops.reindex()
    assert set(report.resources) == {a, b} and report.pruned == []
    assert report.resources[a].files_read == 0
    assert ops.verify() == []
    rows = {r["resource_id"]: r for r in ops.status()["resources"]}
    assert rows[b]["files"] == 2 and rows[b]["text_units"] == rows[b]["vector_units"]

    # A vanished location is reported, not an error; an unregistered resource
    # is pruned by a full reindex.
    shutil.rmtree(tmp_path / "a")
    ops.resources.remove(a)
    report = ops.reindex()
    assert report.pruned == [a]
    assert ops.view(frozenset({a})).search("alphamark") == []
    assert ops.verify() == []

    shutil.rmtree(tmp_path / "b")
    assert ops.reindex().missing == [b]


def test_verify_reports_an_index_that_lost_units(ops: AcmsOperations, tmp_path: Path) -> None:
    ops.add_project("local/a")
    rid = ops.add_resource(str(make_tree(tmp_path / "a", "alphamark")), "local/a").resource_id
    ops.reindex()
    store: Any = ops._store()
    store.text.delete(rid)
    problems = ops.verify()
    assert [(p.resource_id, p.index, p.extra) for p in problems] == [(rid, "text", 0)]
    assert problems[0].missing > 0


def test_remove_resource_deletes_its_units(ops: AcmsOperations, tmp_path: Path) -> None:
    ops.add_project("local/a")
    rid = ops.add_resource(str(make_tree(tmp_path / "a", "alphamark")), "local/a").resource_id
    ops.reindex()
    ops.remove_resource(rid)
    store: Any = ops._store()
    assert list(store.iter_resource_ids()) == []


def test_one_writer_at_a_time(ops: AcmsOperations, tmp_path: Path) -> None:
    ops.add_project("local/a")
    ops.add_resource(str(make_tree(tmp_path / "a", "alphamark")), "local/a")
    with ReindexLock(ops.data_dir), pytest.raises(BusyError, match="another reindex"):
        ops.reindex(lock_timeout=0.1)
