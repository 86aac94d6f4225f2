"""The planner and the index store over the in-memory reference indexes:
indexing, re-runs, the write order, crash repair at every step, verify and
prune, in milliseconds."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cleveragents.application.services.indexer import Indexer
from cleveragents.application.services.resource_files import ListedFile
from cleveragents.domain.models.acms.backends import IndexUnit
from cleveragents.domain.models.acms.index_store import FileDelta, IndexStore
from cleveragents.domain.models.acms.indexing import FileRecord
from cleveragents.domain.models.acms.uko import UKO, file_uri, path_of, resource_uri, unit_uri
from cleveragents.infrastructure.acms import index_store as store_module
from cleveragents.infrastructure.acms.hashing_embedder import HashingEmbedder
from cleveragents.infrastructure.acms.index_store import ManagedIndexStore
from cleveragents.infrastructure.acms.memory_indexes import (
    MemoryCatalog,
    MemoryGraphIndex,
    MemoryTextIndex,
    MemoryVectorIndex,
)

DIM = 16
RID = "01JD0000000000000000000000"
OTHER = "01JD0000000000000000000001"
SCOPE = frozenset({RID})
EPOCH = 1_700_000_000_000_000_000  # file mtimes are set explicitly: no racy entries


class Clock:
    """A settable coarse clock (the store's racily-clean stamp)."""

    def __init__(self) -> None:
        self.now = EPOCH + 10**15

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(clock: Clock) -> ManagedIndexStore:
    return ManagedIndexStore.in_memory(DIM, clock=clock)


@pytest.fixture
def indexer(store: ManagedIndexStore) -> Indexer:
    return Indexer(store, HashingEmbedder(DIM))


class Tree:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.tick = EPOCH

    def write(self, path: str, text: str, *, mtime: int | None = None) -> None:
        target = self.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        if mtime is None:
            self.tick += 1_000_000_000
            mtime = self.tick
        os.utime(target, ns=(mtime, mtime))

    def remove(self, path: str) -> None:
        (self.root / path).unlink()


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    t = Tree(tmp_path / "repo")
    t.write("pkg/__init__.py", "")
    t.write("pkg/core.py", "from pkg import util\n\n\nclass AlphaEngine:\n    pass\n")
    t.write("pkg/util.py", "def helper_function():\n    return 42\n")
    t.write("README.md", "# Demo\n\nzebracorn marker word\n")
    return t


def paths_in(store: ManagedIndexStore, rid: str = RID) -> set[str]:
    return {p for p in (path_of(u) for u in store.text.unit_uris(rid)) if p is not None}


def index(indexer: Indexer, tree: Tree, **kw: Any) -> Any:
    return indexer.index_resource(RID, tree.root, "directory", **kw)


def test_the_store_satisfies_its_port(store: ManagedIndexStore) -> None:
    assert isinstance(store, IndexStore)


def test_index_rerun_change_and_delete(
    indexer: Indexer, store: ManagedIndexStore, tree: Tree
) -> None:
    first = index(indexer, tree)
    assert first.files_indexed == 4
    assert paths_in(store) == {"pkg/core.py", "pkg/util.py", "README.md"}
    assert store.text.search("zebracorn", scope=SCOPE)
    assert store.verify([RID]) == []

    again = index(indexer, tree)
    assert (again.files_read, again.index_writes, again.units_written) == (0, 0, 0)

    tree.write("pkg/util.py", "def renamed_function():\n    return 43\n")
    changed = index(indexer, tree)
    assert (changed.files_read, changed.files_indexed) == (1, 1)
    assert store.text.search("renamed", scope=SCOPE)
    assert not any(
        r.metadata["path"] == "pkg/util.py" for r in store.text.search("helper", scope=SCOPE)
    )

    tree.remove("README.md")
    gone = index(indexer, tree)
    assert gone.files_deleted == 1
    assert "README.md" not in paths_in(store)
    contains = store.graph.get_triples(resource_uri(RID)).triples
    assert (resource_uri(RID), UKO + "contains", file_uri(RID, "README.md")) not in contains
    assert store.verify([RID]) == []


def test_touch_only_rewrites_the_catalog_row(
    indexer: Indexer, store: ManagedIndexStore, tree: Tree
) -> None:
    index(indexer, tree)
    later = EPOCH + 10**12
    os.utime(tree.root / "README.md", ns=(later, later))
    touched = index(indexer, tree)
    assert (touched.files_read, touched.files_touched, touched.index_writes) == (1, 1, 0)
    assert store.catalog.records(RID)["README.md"].mtime_ns == later


def test_a_new_embedder_identity_re_embeds_every_unit(store: ManagedIndexStore, tree: Tree) -> None:
    """Only the embedder changed: the stored units are re-embedded, no file
    is read or re-indexed (tests/integration/test_embedder_switch.py checks
    the vectors and the files on disk)."""
    Indexer(store, HashingEmbedder(DIM)).index_resource(RID, tree.root, "directory")
    units = store.text.unit_uris(RID)

    class Renamed(HashingEmbedder):
        name = "another-model"

    stats = Indexer(store, Renamed(DIM)).index_resource(RID, tree.root, "directory")
    assert (stats.files_read, stats.files_indexed, stats.units_written) == (0, 0, 0)
    assert stats.units_reembedded == len(units) > 0
    again = Indexer(store, Renamed(DIM)).index_resource(RID, tree.root, "directory")
    assert (again.files_read, again.units_reembedded) == (0, 0)


def test_an_embedder_change_reindexes_every_resource_not_only_the_first(
    store: ManagedIndexStore, tree: Tree
) -> None:
    """The identity is recorded per resource: the first round kept one global
    flag, cleared by the first session, so later resources kept old vectors."""
    old = Indexer(store, HashingEmbedder(DIM))
    for rid in (RID, OTHER):
        old.index_resource(rid, tree.root, "directory")

    class Renamed(HashingEmbedder):
        name = "another-model"

    new = Indexer(store, Renamed(DIM))
    for rid in (RID, OTHER):
        units = len(store.text.unit_uris(rid))
        assert new.index_resource(rid, tree.root, "directory").units_reembedded == units > 0, rid


def test_prune_and_delete_resource(indexer: Indexer, store: ManagedIndexStore, tree: Tree) -> None:
    index(indexer, tree)
    indexer.index_resource(OTHER, tree.root, "directory")
    assert indexer.prune(keep=[OTHER]) == [RID]
    for index_ in (store.text, store.vector, store.graph):
        assert index_.resource_ids() == {OTHER}
    assert store.catalog.resource_ids() == {OTHER}
    indexer.delete_resource(OTHER)
    assert list(store.iter_resource_ids()) == []
    assert store.verify([]) == []


def test_verify_names_each_disagreement(
    indexer: Indexer, store: ManagedIndexStore, tree: Tree
) -> None:
    index(indexer, tree)
    victim = sorted(store.vector.unit_uris(RID))[0]
    store.vector.delete(RID, [victim])
    store.graph.delete(RID, [file_uri(RID, "pkg/util.py")])
    problems = {(p.index, p.missing, p.extra) for p in store.verify([RID])}
    assert ("vector", 1, 0) in problems
    assert any(index_ == "graph" and missing >= 1 for index_, missing, _ in problems)
    # A resource that is no longer registered: everything it holds is extra.
    assert {p.index for p in store.verify([])} == {"text", "vector", "graph"}


@pytest.mark.parametrize("lost", ["text", "vectors", "graph"])
def test_a_plain_run_writes_again_a_resource_an_index_lost(
    indexer: Indexer, store: ManagedIndexStore, tree: Tree, lost: str
) -> None:
    """An index that holds nothing of a resource the catalog names units of
    (its shard or collection lost): the next incremental run finds it and
    indexes every file again, not none (nothing changed) or the changed
    ones alone."""
    index(indexer, tree)
    {"text": store.text, "vectors": store.vector, "graph": store.graph}[lost].delete(RID)
    assert store.lost_parts(RID) == [lost]
    tree.write("pkg/util.py", "def renamed_function():\n    return 43\n")
    again = index(indexer, tree)
    # Every file whose row names what the lost index held: the empty
    # __init__.py has a file node but no unit.
    assert again.files_indexed == (4 if lost == "graph" else 3)
    assert store.lost_parts(RID) == []
    assert store.verify([RID]) == []
    assert store.text.search("zebracorn", scope=SCOPE)


def test_the_racy_same_size_rewrite_is_seen(
    indexer: Indexer, store: ManagedIndexStore, tree: Tree, clock: Clock
) -> None:
    """A file rewritten with the same size and mtime within the timestamp tick
    of the catalog write (git's racily clean entry) is re-hashed next time."""
    tick = clock.now  # the file's mtime is in the tick of the catalog write
    tree.write("racy.txt", "alphaword one\n", mtime=tick)
    index(indexer, tree)
    assert store.text.search("alphaword", scope=SCOPE)
    tree.write("racy.txt", "bravoword two\n", mtime=tick)  # same size, same mtime
    clock.now += 5_000_000_000
    rerun = index(indexer, tree)
    assert rerun.files_read == 1
    assert store.text.search("bravoword", scope=SCOPE)
    assert store.text.search("alphaword", scope=SCOPE) == []
    # Once re-hashed after its tick, the entry is clean: the next run reads nothing.
    clock.now += 5_000_000_000
    assert index(indexer, tree).files_read == 0


def test_entries_older_than_the_catalog_write_are_not_reread(
    indexer: Indexer, tree: Tree, clock: Clock
) -> None:
    index(indexer, tree)
    clock.now += 10**9
    assert index(indexer, tree).files_read == 0


# ---------------------------------------------------------------- write order


class Recorder:
    """Wraps the four stores and logs every write call, in order."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def wrap(self, name: str, target: Any) -> Any:
        recorder = self
        writes = {"upsert", "delete", "put", "remove", "set_meta", "delete_meta", "commit_staged"}

        class Wrapped:
            def __getattr__(self, attr: str) -> Any:
                value = getattr(target, attr)
                if attr not in writes:
                    return value

                def call(*args: Any, **kwargs: Any) -> Any:
                    key = args[0] if attr in ("set_meta", "delete_meta") else ""
                    recorder.calls.append(
                        f"{name}.{attr}{'(' + key.split(':')[0] + ')' if key else ''}"
                    )
                    return value(*args, **kwargs)

                return call

        return Wrapped()


@pytest.fixture
def recorded(clock: Clock) -> tuple[ManagedIndexStore, Recorder]:
    rec = Recorder()
    store = ManagedIndexStore.over(
        rec.wrap("text", MemoryTextIndex()),
        rec.wrap("vector", MemoryVectorIndex(DIM)),
        rec.wrap("graph", MemoryGraphIndex()),
        rec.wrap("catalog", MemoryCatalog()),
        clock=clock,
    )
    return store, rec


def test_the_write_order_of_a_session(
    recorded: tuple[ManagedIndexStore, Recorder], tree: Tree
) -> None:
    store, rec = recorded
    indexer = Indexer(store, HashingEmbedder(DIM))
    index(indexer, tree)
    assert rec.calls == [
        "catalog.set_meta(dirty)",
        "text.upsert",
        "vector.upsert",
        "graph.upsert",  # the files' triples
        "graph.upsert",  # the resource node's edges, a part of their own
        "text.commit_staged",  # the text is durable before a row names it
        "catalog.put",
        "catalog.delete_meta(dirty)",
        "catalog.set_meta(catalog_written_ns)",
        "catalog.set_meta(identity)",
    ]
    rec.calls.clear()
    tree.remove("README.md")
    later = EPOCH + 10**12
    os.utime(tree.root / "pkg" / "util.py", ns=(later, later))
    index(indexer, tree)
    # Touches, then the vanished file: catalog row first, then the units.
    assert rec.calls == [
        "catalog.put",
        "catalog.set_meta(dirty)",
        "catalog.remove",
        "text.delete",
        "vector.delete",
        "graph.upsert",
        "text.commit_staged",  # the deletion is durable before the marker goes
        "catalog.delete_meta(dirty)",
        "catalog.set_meta(catalog_written_ns)",
    ]
    rec.calls.clear()
    index(indexer, tree)
    assert rec.calls == []  # a clean re-run writes nothing, not even the marker


# ---------------------------------------------------------------- crash repair


class Crash(BaseException):
    """Stands for SIGKILL: nothing after it runs (not even `except Exception`)."""


SESSION_STEPS = [
    "index.dirty",
    "index.text",
    "index.vector",
    "index.graph",
    "index.commit",  # the in-memory text index stages, as Tantivy does
    "index.catalog",
    "index.touch",
    "delete.catalog",
    "delete.text",
    "delete.vector",
    "delete.graph",
    "index.clean",
]


def crash_at(monkeypatch: pytest.MonkeyPatch, step: str) -> Callable[[], bool]:
    fired = []

    def checkpoint(name: str) -> None:
        if name == step and not fired:
            fired.append(name)
            raise Crash(name)

    monkeypatch.setattr(store_module, "checkpoint", checkpoint)
    return lambda: bool(fired)


def change(tree: Tree) -> None:
    tree.write("pkg/util.py", "def renamed_function():\n    return 43\n")
    later = EPOCH + 10**12
    os.utime(tree.root / "pkg" / "__init__.py", ns=(later, later))
    tree.remove("README.md")
    tree.write("added.py", "def added_function():\n    pass\n")


def expected_units(tree: Tree) -> set[str]:
    fresh = ManagedIndexStore.in_memory(DIM)
    Indexer(fresh, HashingEmbedder(DIM)).index_resource(RID, tree.root, "directory")
    return fresh.text.unit_uris(RID)


@pytest.mark.parametrize("step", SESSION_STEPS)
def test_a_crash_at_any_session_step_is_repaired_by_the_next_run(
    step: str,
    monkeypatch: pytest.MonkeyPatch,
    indexer: Indexer,
    store: ManagedIndexStore,
    tree: Tree,
) -> None:
    index(indexer, tree)
    change(tree)
    fired = crash_at(monkeypatch, step)
    with pytest.raises(Crash):
        index(indexer, tree)
    assert fired()
    # Never lost: every file present before and after has units in text.
    assert {"pkg/core.py", "pkg/util.py"} <= paths_in(store)
    # Changed again (the crashed version's units become orphans), then repaired.
    tree.write("pkg/util.py", "def third_version():\n    return 3\n")
    monkeypatch.setattr(store_module, "checkpoint", lambda name: None)
    index(indexer, tree)
    assert store.verify([RID]) == []
    want = expected_units(tree)
    assert store.text.unit_uris(RID) == want
    assert store.vector.unit_uris(RID) == want
    assert store.catalog.get_meta(f"dirty:{RID}") is None


def test_a_crash_between_a_batchs_graph_parts_is_repaired(
    monkeypatch: pytest.MonkeyPatch, indexer: Indexer, store: ManagedIndexStore, tree: Tree
) -> None:
    """Killed after the files' part, before the resource node's part (its
    ``contains`` edges): the next run ends with the graph a fresh index has."""
    index(indexer, tree)
    change(tree)
    fired: list[str] = []

    def checkpoint(name: str) -> None:
        if name == "index.graph":
            fired.append(name)
            if len(fired) == 2:
                raise Crash(name)

    monkeypatch.setattr(store_module, "checkpoint", checkpoint)
    with pytest.raises(Crash):
        index(indexer, tree)
    monkeypatch.setattr(store_module, "checkpoint", lambda name: None)
    index(indexer, tree)
    assert store.verify([RID]) == []
    fresh = ManagedIndexStore.in_memory(DIM)
    Indexer(fresh, HashingEmbedder(DIM)).index_resource(RID, tree.root, "directory")
    scope = frozenset({RID})
    node = resource_uri(RID)
    assert sorted(store.graph.get_triples(node, scope=scope).triples) == sorted(
        fresh.graph.get_triples(node, scope=scope).triples
    )
    assert store.graph.subjects(RID) == fresh.graph.subjects(RID)


@pytest.mark.parametrize("step", ["sweep.text", "sweep.vector", "sweep.graph"])
def test_a_crash_during_the_sweep_is_repaired(
    step: str,
    monkeypatch: pytest.MonkeyPatch,
    indexer: Indexer,
    store: ManagedIndexStore,
    tree: Tree,
) -> None:
    index(indexer, tree)
    change(tree)
    crash_at(monkeypatch, "index.graph")
    with pytest.raises(Crash):
        index(indexer, tree)
    tree.write("pkg/util.py", "def third_version():\n    return 3\n")
    crash_at(monkeypatch, step)
    with pytest.raises(Crash):
        index(indexer, tree)
    monkeypatch.setattr(store_module, "checkpoint", lambda name: None)
    index(indexer, tree)
    assert store.verify([RID]) == []
    assert store.text.unit_uris(RID) == expected_units(tree)


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_a_crash_while_deleting_a_resource_is_finished_by_prune(
    n: int, monkeypatch: pytest.MonkeyPatch, indexer: Indexer, store: ManagedIndexStore, tree: Tree
) -> None:
    index(indexer, tree)
    seen = []

    def checkpoint(name: str) -> None:
        if name == "resource.delete":
            seen.append(name)
            if len(seen) == n:
                raise Crash(name)

    monkeypatch.setattr(store_module, "checkpoint", checkpoint)
    with pytest.raises(Crash):
        indexer.delete_resource(RID)
    assert store.catalog.records(RID) == {}  # the rows go first
    monkeypatch.setattr(store_module, "checkpoint", lambda name: None)
    assert store.verify([]) != [] or n == 4
    indexer.prune(keep=[])
    assert list(store.iter_resource_ids()) == []


# ---------------------------------------------------------------- deltas


def test_deltas_are_validated() -> None:
    rec = FileRecord("a.py", 1, 1, "x")
    unit = IndexUnit(unit_uri(RID, "a.py", "L1-L1"), "a")
    with pytest.raises(ValueError, match="kind"):
        FileDelta("upsert", "a.py", record=rec)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="old record"):
        FileDelta("delete", "a.py")
    with pytest.raises(ValueError, match="new record"):
        FileDelta("index", "b.py", record=rec)
    with pytest.raises(ValueError, match="embedding"):
        FileDelta("index", "a.py", record=rec, units=(unit,))
    FileDelta("index", "a.py", record=rec, units=(unit,), embeddings=np.ones((1, DIM), np.float32))


def test_a_delta_of_another_resource_is_refused(store: ManagedIndexStore) -> None:
    rec = FileRecord("a.py", 1, 1, "x")
    unit = IndexUnit(unit_uri(OTHER, "a.py", "L1-L1"), "a")
    delta = FileDelta(
        "index", "a.py", record=rec, units=(unit,), embeddings=np.ones((1, DIM), np.float32)
    )
    with store.session(RID, identity="x") as tx, pytest.raises(ValueError, match="not of"):
        tx.apply(delta)


def test_an_exception_leaves_the_session_uncommitted(store: ManagedIndexStore, tree: Tree) -> None:
    indexer = Indexer(store, HashingEmbedder(DIM))
    with pytest.raises(RuntimeError), indexer.session(RID, tree.root, []) as session:
        session.update(ListedFile("a.py", 3, 1), b"abc")
        raise RuntimeError("interrupted")
    assert store.catalog.records(RID) == {}
    assert store.catalog.get_meta(f"identity:{RID}") is None  # nothing committed


@pytest.fixture(autouse=True)
def _no_fault_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("ACMS_FAULT_AT", raising=False)
    yield
