"""A batch's graph change is written as several upserts of whole files.

Each upsert is one record of the resource's graph file, and a question read
by subject decodes whole records: a small record keeps such questions small
(see ``graph_store``).  Oracle: the same session with the batch written as
one upsert.  Parts never share a subject, so in sequence they must leave
the same graph, through first indexing, changed, deleted and new files.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cleveragents.application.container import build_container
from cleveragents.application.services.operations import AcmsOperations
from cleveragents.domain.models.acms.uko import file_uri, resource_uri
from cleveragents.infrastructure.acms import graph_store, index_store
from cleveragents.infrastructure.acms.graph_store import GraphStore
from cleveragents.infrastructure.acms.rdflib_graph import RdflibGraphBackend


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, body in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(body)


FIRST = {
    f"pkg/m{i}.py": f"import os\n\nclass C{i}:\n    def run(self):\n"
    f"        return helper{i}(os.sep)\n\ndef helper{i}(x):\n    return len(x)\n"
    for i in range(6)
}
FIRST["README.md"] = "# parts\n"


def _graph(data: Path, rid: str) -> set[tuple[str, str, object]]:
    store = GraphStore(data / "graph")
    try:
        loaded = store.refresh(rid, None, None)
        assert loaded is not None
        return {
            (s.replace(rid, "RID"), p, o.replace(rid, "RID") if isinstance(o, str) else o)
            for s, edges in loaded[0].by_subject.items()
            for p, o in edges
        }
    finally:
        store.close()


def _run(
    base: Path, part: int, monkeypatch: pytest.MonkeyPatch
) -> list[tuple[set[tuple[str, str, object]], int]]:
    """Index, change, re-index; the graph and the graph writes after each."""
    monkeypatch.setattr(index_store, "_GRAPH_PART_TRIPLES", part)
    root, data = base / "repo", base / "data"
    _write(root, FIRST)
    ops = AcmsOperations.from_container(build_container("local", data))
    ops.add_project("t/parts")
    rid = ops.add_resource(str(root), "t/parts", "directory").resource_id
    states = []
    for step in range(3):
        if step == 1:  # a changed file, a new one, a deleted one
            _write(root, {"pkg/m0.py": "def helper0(y):\n    return y\n", "pkg/new.py": "X = 1\n"})
            (root / "pkg" / "m3.py").unlink()
        if step == 2:  # a file emptied of symbols, another changed back
            _write(root, {"pkg/m1.py": "", "pkg/m0.py": FIRST["pkg/m0.py"]})
        stats = ops.reindex(resources=[rid], jobs=1).resources[rid]
        states.append((_graph(data, rid), stats.index_writes))
    return states


def test_graph_parts_leave_the_graph_one_upsert_leaves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parted = _run(tmp_path / "parted", 1, monkeypatch)  # one upsert per file
    whole = _run(tmp_path / "whole", 10**9, monkeypatch)
    for (graph, writes), (expected, whole_writes) in zip(parted, whole, strict=True):
        assert graph == expected
        assert writes > whole_writes  # it did write in parts
    assert any("helper3" in s for s, _, _ in whole[0][0])
    assert not any("helper3" in s for s, _, _ in whole[1][0])


def test_the_resource_nodes_edges_are_a_part_of_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A walk through the resource node (``traverse`` from a file at depth 2)
    reads the records that hold its ``contains`` edges: with those edges in
    every file's part, it decoded the whole graph."""
    monkeypatch.setattr(index_store, "_GRAPH_PART_TRIPLES", 1)  # one part per file
    monkeypatch.setattr(graph_store, "INDEX_TAIL_SHARE", 1 << 40)  # index every write
    monkeypatch.setattr(graph_store, "INDEX_MIN_TAIL", 0)
    root, data = tmp_path / "repo", tmp_path / "data"
    _write(root, FIRST)
    ops = AcmsOperations.from_container(build_container("local", data))
    ops.add_project("t/parts")
    rid = ops.add_resource(str(root), "t/parts", "directory").resource_id
    ops.reindex(resources=[rid], jobs=1)
    decoded: list[int] = []
    loads = graph_store._loads

    def counting(payload: memoryview, want: type, path: Path) -> object:
        decoded.append(len(payload))
        return loads(payload, want, path)

    monkeypatch.setattr(graph_store, "_loads", counting)
    with RdflibGraphBackend(data / "graph") as reader:
        edges = reader.get_triples(resource_uri(rid), scope=frozenset({rid})).triples
        assert reader.loaded_resource_ids() == set()
    assert sorted(o for _, _, o in edges) == sorted(file_uri(rid, rel) for rel in FIRST)
    assert len(decoded) == 1, decoded  # the batch's resource part, not 7 file parts
