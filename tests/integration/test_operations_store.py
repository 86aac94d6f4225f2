"""Operations over a real data directory through the index store: owner-only
modes whatever the umask, overlapping resources refused, racy rewrites seen."""

from __future__ import annotations

import gc
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from cleveragents.application.services.operations import AcmsOperations
from cleveragents.bootstrap import bootstrap
from cleveragents.domain.models.acms.errors import (
    AcmsError,
    BusyError,
    ConflictError,
    IndexUnavailableError,
)
from cleveragents.domain.models.acms.uko import file_uri, path_of, resource_uri
from cleveragents.infrastructure.acms.index_store import coarse_clock_ns
from cleveragents.infrastructure.acms.reindex_lock import ReindexLock

REINDEX = Path(__file__).resolve().parents[2] / "scripts" / "reindex.py"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "core.py").write_text("def quokka_function():\n    return 1\n")
    return root


@pytest.fixture
def ops(tmp_path: Path) -> Iterator[AcmsOperations]:
    o = bootstrap(tmp_path / "data", embedding_dimension=16)
    yield o
    o._store().close()


def loose(root: Path) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        for path in [Path(dirpath), *(Path(dirpath) / n for n in (*dirnames, *filenames))]:
            st = os.lstat(path)
            if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o077:
                out.append(f"{path} {oct(st.st_mode & 0o777)}")
    return sorted(set(out))


@pytest.mark.parametrize("umask", [0o022, 0o000])
def test_a_library_host_gets_owner_only_files_without_changing_its_umask(
    tmp_path: Path, tree: Path, umask: int
) -> None:
    previous = os.umask(umask)
    try:
        ops = bootstrap(tmp_path / "data", embedding_dimension=16)
        try:
            ops.add_project("local/a")
            rid = ops.add_resource(str(tree), "local/a").resource_id
            ops.reindex()
            ops.rebuild()
            (tree / "pkg" / "more.py").write_text("def more():\n    pass\n")
            ops.reindex()
            assert os.umask(umask) == umask  # the library left the host's umask alone
            assert loose(tmp_path / "data") == []
            assert ops.status()["loose_modes"] == []
            ops.remove_resource(rid)
            assert loose(tmp_path / "data") == []
        finally:
            ops._store().close()
    finally:
        os.umask(previous)


def test_status_names_loose_paths(ops: AcmsOperations, tree: Path) -> None:
    ops.add_project("local/a")
    ops.add_resource(str(tree), "local/a")
    ops.reindex()
    os.chmod(ops.data_dir, 0o755)
    catalog = os.path.realpath(ops.data_dir / "catalog")
    os.chmod(catalog, 0o755)
    assert set(ops.status()["loose_modes"]) >= {str(ops.data_dir), catalog}


def test_overlapping_paths_in_one_project_need_force(ops: AcmsOperations, tree: Path) -> None:
    ops.add_project("local/a")
    ops.add_project("local/b")
    first = ops.add_resource(str(tree), "local/a")
    for path in (tree, tree / "pkg", tree.parent, Path(str(tree) + "/./")):
        with pytest.raises(ConflictError, match=first.resource_id):
            ops.add_resource(str(path), "local/a")
    assert ops.add_resource(str(tree), "local/b").resource_id != first.resource_id
    forced = ops.add_resource(str(tree / "pkg"), "local/a", force=True)
    assert {r.resource_id for r in ops.list_resources("local/a")} == {
        first.resource_id,
        forced.resource_id,
    }
    # A sibling that merely shares a prefix is not inside.
    sibling = tree.parent / (tree.name + "-other")
    sibling.mkdir()
    ops.add_resource(str(sibling), "local/a")


def test_a_same_size_rewrite_within_the_catalog_tick_is_indexed(
    ops: AcmsOperations, tree: Path
) -> None:
    """git's racily-clean case on disk: the file's mtime is not older than the
    catalog write (here set ahead of it, as a coarse-grained file system
    would round it), then it is rewritten with the same size and mtime."""
    ops.add_project("local/a")
    rid = ops.add_resource(str(tree), "local/a").resource_id
    racy = tree / "racy.txt"
    tick = coarse_clock_ns() + 60_000_000_000
    racy.write_text("alphaword one\n")
    os.utime(racy, ns=(tick, tick))
    ops.reindex()
    view = ops.view(frozenset({rid}))
    assert view.search("alphaword")
    racy.write_text("bravoword two\n")
    os.utime(racy, ns=(tick, tick))
    time.sleep(0.01)
    ops.reindex()
    assert view.search("bravoword")
    assert view.search("alphaword") == []


@contextmanager
def indexed_then_reopened(
    ops: AcmsOperations, tree: Path, data: Path
) -> Iterator[tuple[str, AcmsOperations]]:
    """``tree`` indexed as project ``local/s``, then the data directory opened
    afresh (as a new process would: nothing loaded yet)."""
    ops.add_project("local/s")
    rid = ops.add_resource(str(tree), "local/s").resource_id
    ops.reindex()
    fresh = bootstrap(data, embedding_dimension=16)
    try:
        yield rid, fresh
    finally:
        fresh._store().close()


def index_once(data: Path, tree: Path, project: str) -> str:
    """``tree`` registered in ``project`` of ``data`` and indexed, by a handle
    closed afterwards; the resource's ULID."""
    setup = bootstrap(data, embedding_dimension=16)
    try:
        setup.add_project(project)
        rid = setup.add_resource(str(tree), project).resource_id
        setup.reindex()
    finally:
        setup.close()
    return rid


@contextmanager
def reopened(data: Path, dimension: int = 16) -> Iterator[AcmsOperations]:
    """``data`` opened afresh (as a new process would), closed on leaving."""
    ops = bootstrap(data, embedding_dimension=dimension)
    try:
        yield ops
    finally:
        ops.close()


def test_status_counts_each_index_without_loading_a_graph(
    ops: AcmsOperations, tree: Path, tmp_path: Path
) -> None:
    """``status`` costs metadata: units from each index's commit records, the
    graph's file subjects from the catalog; the oracle lists them all."""
    (tree / "pkg" / "more.py").write_text("class Wombat:\n    def dig(self):\n        pass\n")
    with indexed_then_reopened(ops, tree, tmp_path / "data") as (rid, fresh):
        (row,) = fresh.status()["resources"]
        store = fresh._store()
        graph: Any = store.graph
        assert graph._graphs == {}  # the counts loaded no resource graph
        units = store.text.unit_uris(rid)
        assert row["text_units"] == len(units) == row["vector_units"] >= 2
        assert units == store.vector.unit_uris(rid)
        file_subjects = {s for s in graph.subjects(rid) if path_of(s) is not None}
        assert row["graph_subjects"] == len(file_subjects) > 2
        assert row["files"] == 2


def test_status_counts_the_files_a_reindex_indexed_empty_ones_too(
    ops: AcmsOperations, tree: Path
) -> None:
    """``files`` counted only the files with units: an empty file (an
    ``__init__.py``) is indexed, its file node in the graph, with none, and
    was left out; a binary one is skipped and recorded without a node."""
    (tree / "pkg" / "__init__.py").write_text("")
    (tree / "blob.txt").write_bytes(b"a\0b")
    ops.add_project("local/a")
    ops.add_resource(str(tree), "local/a")
    report = ops.reindex()
    assert report.total.skipped == {"binary": 1}
    (row,) = ops.status()["resources"]
    assert row["files"] == report.total.files_indexed == 2


def test_session_read_asks_the_catalog_and_loads_no_graph(
    ops: AcmsOperations, tree: Path, tmp_path: Path
) -> None:
    """``read`` serves indexed files only, decided from one catalog row: the
    resource's graph stays unloaded.  Oracle for "indexed": the graph holds
    the file's node (what ``read`` asked before)."""
    (tree / "blob.bin").write_bytes(b"\x00\x01binary\x00" * 10)
    (tree / ".env").write_text("API_KEY=hunter2\n")
    (tree / "empty.py").write_text("")
    with indexed_then_reopened(ops, tree, tmp_path / "data") as (rid, fresh):
        session = fresh.agent_session(projects=["local/s"])
        store = fresh._store()
        answer = session.read(file_uri(rid, "pkg/core.py"))
        assert answer["results"][0]["text"] == "def quokka_function():"
        paths = ("pkg/core.py", "empty.py", "blob.bin", ".env", "missing.py")
        readable = set()
        for path in paths:
            try:
                session.read(file_uri(rid, path))
                readable.add(path)
            except ValueError as exc:
                assert "not an indexed file" in str(exc)
        graph: Any = store.graph
        assert graph._graphs == {}  # no answer loaded the graph
        only = frozenset({rid})
        in_graph = {p for p in paths if graph.get_triples(file_uri(rid, p), scope=only).triples}
        assert readable == in_graph == {"pkg/core.py", "empty.py"}


def test_session_read_reports_an_unreadable_catalog(
    ops: AcmsOperations, tree: Path, tmp_path: Path
) -> None:
    """A catalog that cannot be read is an error the caller sees, not a file
    said to be unindexed."""
    with indexed_then_reopened(ops, tree, tmp_path / "data") as (rid, fresh):
        session = fresh.agent_session(projects=["local/s"])
        catalog: Any = fresh._store().catalog
        Path(catalog._path).unlink()
        with pytest.raises(IndexUnavailableError, match="catalog"):
            session.read(file_uri(rid, "pkg/core.py"))


def test_a_rebuild_with_nothing_to_index_swaps_in_empty_indexes(tmp_path: Path) -> None:
    """No resource, or only empty ones: every index is still swapped in (the
    swap failed on the text index nobody wrote: "No such file or directory")."""
    ops = bootstrap(tmp_path / "data", embedding_dimension=16)
    try:
        assert ops.rebuild().resources == {}
        ops.add_project("local/e")
        empty = tmp_path / "empty"
        empty.mkdir()
        rid = ops.add_resource(str(empty), "local/e").resource_id
        assert ops.rebuild().resources[rid].files_indexed == 0
        assert ops.verify() == []
        (empty / "core.py").write_text("def quokka_function():\n    return 1\n")
        ops.reindex()
        view = ops.view(ops.scope(["local/e"], []))
        assert [r.uko_uri for r in view.search("quokka_function")]
        assert ops.rebuild().resources[rid].files_indexed == 1
        assert ops.verify() == []
    finally:
        ops._store().close()


def test_verify_holds_the_reindex_lock_and_names_an_interrupted_run(
    tmp_path: Path, tree: Path
) -> None:
    """Indexes read mid-session disagree by design: verify waits for a running
    reindex (a cron job beside ``watch`` reported "extra" units three times in
    a row). A run killed mid-write is named as such: the next reindex repairs it."""
    data = tmp_path / "data"
    rid = index_once(data, tree, "local/v")
    with reopened(data) as ops:
        assert ops.verify() == []
        with ReindexLock(data, timeout=0):
            with pytest.raises(BusyError, match="another reindex"):
                ops.verify(lock_timeout=0.2)
            # So does removing a resource (it waited 60 s whatever was asked).
            with pytest.raises(BusyError, match=r"waited 0\.2 s"):
                ops.remove_resource(rid, lock_timeout=0.2)
        assert [r.resource_id for r in ops.list_resources()] == [rid]
    (tree / "pkg" / "more.py").write_text("def wombat_function():\n    return 2\n")
    env = {**os.environ, "ACMS_DATA_DIR": str(data), "ACMS_EMBEDDING_DIM": "16"}
    env["ACMS_FAULT_AT"] = "index.vector"
    killed = subprocess.run(
        [sys.executable, str(REINDEX), "--full"], env=env, capture_output=True, timeout=120
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    with reopened(data) as ops:
        # status says so too (a reviewer found it silent: exit 0, counts
        # that disagree, and a deleted file still served).
        assert [r["interrupted"] for r in ops.status()["resources"]] == [1]
        # While a writer holds the lock, the marker is its session's: a run
        # in progress, not a stopped one (a read-back found status calling
        # every running reindex "interrupted").
        with ReindexLock(data, timeout=0):
            rows = ops.status()["resources"]
        assert [(r["interrupted"], r["reindexing"]) for r in rows] == [(0, 1)]
        problems = ops.verify()
        assert problems and all(p.resource_id == rid and p.interrupted for p in problems)
        ops.reindex()
        assert ops.verify() == []
        assert [(r["interrupted"], r["reindexing"]) for r in ops.status()["resources"]] == [(0, 0)]


def test_an_owned_session_releases_its_files_when_closed(tmp_path: Path, tree: Path) -> None:
    """A host that opens a session per task must not run out of descriptors:
    the graph's lock, SQLite connections and index files are released."""

    def descriptors() -> int:
        return len(os.listdir("/proc/self/fd"))

    data = tmp_path / "data"
    rid = index_once(data, tree, "local/f")
    before = descriptors()
    for _ in range(5):
        with bootstrap(data, embedding_dimension=16).agent_session(
            ["local/f"], owned=True
        ) as session:
            assert session.search("quokka_function", mode="text")["results"]
            assert session.sparql("SELECT ?s ?p ?o WHERE { ?s ?p ?o } LIMIT 3")["results"]
            assert session.read(file_uri(rid, "pkg/core.py"))["results"]
            assert session.traverse(file_uri(rid, "pkg/core.py"))["results"]
    assert descriptors() <= before, (before, descriptors())


@pytest.mark.parametrize("damaged", ["catalog/catalog.sqlite3", "vectors/vectors.sqlite3"])
def test_a_damaged_index_can_be_rebuilt_and_its_error_says_how(
    tmp_path: Path, tree: Path, damaged: str
) -> None:
    data = tmp_path / "data"
    index_once(data, tree, "local/d")
    (data / damaged).write_bytes(b"not a database, " * 512)
    with reopened(data) as ops:
        with pytest.raises(IndexUnavailableError, match="reindex --rebuild"):
            ops.status()
        report = ops.rebuild()  # it needs nothing of the live indexes
        assert [s.files_indexed for s in report.resources.values()] == [1]
    with reopened(data) as ops:
        assert ops.verify() == []
        view = ops.view(ops.scope(["local/d"], []))
        assert [r.uko_uri for r in view.search("quokka_function")]


def test_a_text_shard_that_is_a_file_is_an_error_not_an_empty_answer(
    tmp_path: Path, tree: Path
) -> None:
    data = tmp_path / "data"
    rid = index_once(data, tree, "local/t")
    shard = data / "text" / rid
    shutil.rmtree(shard)
    shard.write_text("not a shard")
    with reopened(data) as ops:
        view = ops.view(ops.scope(["local/t"], []))
        with pytest.raises(IndexUnavailableError, match=r"is not a directory.*--rebuild"):
            view.search("quokka_function")
        ops.rebuild()
    with reopened(data) as ops:
        assert ops.view(ops.scope(["local/t"], [])).search("quokka_function")


def test_open_data_dir_sessions_release_their_files_closed_or_dropped(
    tmp_path: Path, tree: Path
) -> None:
    from cleveragents.acms import open_data_dir

    def descriptors() -> int:
        return len(os.listdir("/proc/self/fd"))

    data = tmp_path / "data"
    index_once(data, tree, "local/o")
    env = {"ACMS_EMBEDDING_DIM": "16"}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        before = descriptors()
        for _ in range(4):
            with open_data_dir(data, projects="local/o") as session:
                assert session.sparql("SELECT ?s ?p ?o WHERE { ?s ?p ?o } LIMIT 2")["results"]
        for _ in range(4):  # never closed: dropped
            session = open_data_dir(data, projects=["local/o"])
            assert session.search("quokka_function", mode="text")["results"]
            del session
        gc.collect()
        assert descriptors() <= before, (before, descriptors())


@pytest.mark.parametrize("lost", ["text", "vectors", "graph"])
def test_a_lost_index_is_an_error_naming_the_rebuild_never_an_empty_one(
    tmp_path: Path, tree: Path, lost: str
) -> None:
    """A live index deleted (or left out of a restore) while the catalog lists
    indexed files: opening it used to make an empty one in its place, so
    every query answered nothing and every reindex skipped the unchanged
    files it should have written again."""
    data = tmp_path / "data"
    index_once(data, tree, "local/l")
    (data / lost).unlink()  # the live link
    before = sorted(p.name for p in (data / ".gen").iterdir())
    with reopened(data) as ops:
        view = ops.view(ops.scope(["local/l"], []))
        with pytest.raises(IndexUnavailableError, match=rf"the \w+ index .*{lost}.*--rebuild"):
            ops.status()
        with pytest.raises(IndexUnavailableError, match="--rebuild"):
            ops.reindex()
        with pytest.raises(IndexUnavailableError, match="--rebuild"):
            if lost == "text":
                view.search("quokka_function")
            elif lost == "vectors":
                view.similarity_search(ops.embed_query("quokka_function"))
            else:
                view.get_triples(file_uri(ops.list_resources()[0].resource_id, "pkg/core.py"))
    assert not (data / lost).exists() and not (data / lost).is_symlink()
    assert sorted(p.name for p in (data / ".gen").iterdir()) == before  # nothing made
    with reopened(data) as ops:
        ops.rebuild()  # it needs nothing of the live indexes
    with reopened(data) as ops:
        assert ops.verify() == []
        assert [r.uko_uri for r in ops.view(ops.scope(["local/l"], [])).search("quokka_function")]


@pytest.mark.parametrize("how", ["deleted", "emptied"])
def test_a_lost_vector_database_is_an_error_naming_the_rebuild_never_an_empty_one(
    tmp_path: Path, tree: Path, how: str
) -> None:
    """Found by reviewers: ``vectors.sqlite3`` deleted (its directory kept),
    or cut to 0 bytes, opened as a new, empty database: ``status`` exit 0
    with ``vector=0``, vector search "no results", hybrid search text alone."""
    data = tmp_path / "data"
    index_once(data, tree, "local/l")
    database = data / "vectors" / "vectors.sqlite3"
    for path in data.glob("vectors/vectors.sqlite3?*"):  # -wal, -shm
        path.unlink()
    if how == "deleted":
        database.unlink()
    else:
        database.write_bytes(b"")
    gone = "is missing" if how == "deleted" else "is empty"
    with reopened(data) as ops:
        view = ops.view(ops.scope(["local/l"], []))
        with pytest.raises(IndexUnavailableError, match=rf"{database} {gone}.*--rebuild"):
            ops.status()
        with pytest.raises(IndexUnavailableError, match="--rebuild"):
            view.similarity_search(ops.embed_query("quokka_function"))
    # Nothing made in its place.
    assert not database.exists() if how == "deleted" else database.stat().st_size == 0
    with reopened(data) as ops:
        ops.rebuild()
    with reopened(data) as ops:
        assert ops.verify() == []
        hits = ops.view(ops.scope(["local/l"], [])).similarity_search(
            ops.embed_query("quokka_function")
        )
        assert hits


def test_the_vector_database_name_is_the_vector_index_s() -> None:
    from cleveragents.infrastructure.acms.faiss_vector import DB_FILENAME
    from cleveragents.infrastructure.acms.index_store import VECTOR_DATABASE

    assert VECTOR_DATABASE == DB_FILENAME


@pytest.mark.parametrize("lost", ["text", "graph"])
def test_an_index_moved_away_under_a_running_session_is_an_error_not_empty(
    tmp_path: Path, tree: Path, lost: str
) -> None:
    data = tmp_path / "data"
    index_once(data, tree, "local/m")
    with reopened(data) as ops:
        session = ops.agent_session(["local/m"])
        assert session.search("quokka_function")["results"]
        assert session.symbols("pkg/core.py")["results"]
        (data / lost).rename(data / (lost + ".away"))
        with pytest.raises(IndexUnavailableError, match=r"has disappeared.*--rebuild"):
            if lost == "text":
                session.search("quokka_function", mode="text")
            else:
                session.symbols("pkg/core.py")
        (data / (lost + ".away")).rename(data / lost)
        assert session.search("quokka_function")["results"]
        session.close()


def test_a_new_data_dir_and_a_resource_of_binary_files_answer_empty_not_lost(
    tmp_path: Path,
) -> None:
    """The lost-index check must not fire where nothing was ever written: a
    data directory before its first reindex, and a resource whose files give
    no units (every index still exists once the catalog has rows)."""
    data = tmp_path / "data"
    binary = tmp_path / "bin"
    binary.mkdir()
    (binary / "blob.dat").write_bytes(bytes(range(256)) * 8)
    with reopened(data) as ops:
        ops.add_project("local/b")
        ops.add_resource(str(binary), "local/b")
        assert ops.view(ops.scope(["local/b"], [])).search("anything") == []
        ops.status()
        ops.reindex()
    with reopened(data) as ops:
        assert ops.status()["resources"][0]["files"] == 0
        assert ops.view(ops.scope(["local/b"], [])).search("anything") == []
        assert ops.verify() == []


def test_a_resource_rightly_without_units_costs_a_query_no_catalog_decoding(
    tmp_path: Path, tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resource whose files give no units (binary content) has no shard and
    no graph file; each query over it asks the catalog whether that is a
    loss.  It must not decode the resource's rows to learn "none" (5,000
    binary files made every search 20x slower: ~35 ms instead of ~1.5)."""
    from cleveragents.infrastructure.acms.sqlite_catalog import SqliteCatalog

    data = tmp_path / "data"
    binary = tmp_path / "bin"
    binary.mkdir()
    for i in range(20):
        (binary / f"blob{i}.dat").write_bytes(bytes(range(256)))
    index_once(data, tree, "local/hit")
    blobs = index_once(data, binary, "local/blobs")
    decoded: list[str] = []
    records = SqliteCatalog.records

    def counted(self: SqliteCatalog, resource_id: str) -> Any:
        decoded.append(resource_id)
        return records(self, resource_id)

    with reopened(data) as ops:
        assert len(ops._store().catalog.records(blobs)) == 20  # rows, no units
        monkeypatch.setattr(SqliteCatalog, "records", counted)
        view = ops.view(ops.scope(["local/hit", "local/blobs"], []))
        assert view.search("quokka_function")
        assert view.traverse(resource_uri(blobs), depth=1).triples == []
        assert blobs not in decoded


def lose(data: Path, rid: str, what: str) -> None:
    """Damage one resource's files as a disk or a careless restore would."""
    shard = data / "text" / rid
    graph = data / "graph" / "graphs" / f"{rid}.graph"
    if what == "text shard":
        shutil.rmtree(shard)
    elif what == "text segment":
        next(shard.glob("*.idx")).unlink()
    elif what == "text store":
        with next(shard.glob("*.store")).open("r+b") as fh:
            fh.truncate(100)
    elif what == "graph file":
        graph.unlink()
    elif what == "graph directory":  # said "Is a directory", naming neither file nor repair
        graph.unlink()
        graph.mkdir()
    else:  # "graph snapshot": cut inside the first record
        with graph.open("r+b") as fh:
            fh.truncate(60)


@pytest.mark.parametrize(
    "what",
    ["text shard", "text segment", "text store", "graph file", "graph directory", "graph snapshot"],
)
def test_one_resources_lost_or_damaged_files_fail_status_and_its_queries(
    tmp_path: Path, tree: Path, what: str
) -> None:
    """A shard or graph file of one resource deleted or cut short, its other
    indexes whole: ``status`` and the queries that read it fail naming the
    repair, never answer without that resource (a missing shard or graph
    file read as "no units"); the other resource answers as before."""
    data = tmp_path / "data"
    rid = index_once(data, tree, "local/hit")
    other = tmp_path / "other"
    (other / "pkg").mkdir(parents=True)
    (other / "pkg" / "side.py").write_text("def quokka_function():\n    return 2\n")
    index_once(data, other, "local/fine")
    lose(data, rid, what)
    repair = "reindex --resource" if what in ("text shard", "graph file") else "--rebuild"
    with reopened(data) as ops:
        with pytest.raises(IndexUnavailableError, match=rf"{rid}.*{repair}"):
            ops.status()
        hit = ops.view(ops.scope(["local/hit"], []))
        with pytest.raises(IndexUnavailableError, match=repair):
            if what.startswith("text"):
                hit.search("quokka_function")
            else:
                hit.traverse(resource_uri(rid), depth=1)
        fine = ops.view(ops.scope(["local/fine"], []))
        assert fine.search("quokka_function")
        (other_rid,) = {r.resource_id for r in ops.resources.list()} - {rid}
        assert fine.traverse(resource_uri(other_rid), depth=1).triples
        if repair == "--rebuild":
            ops.rebuild()
        else:  # a plain reindex finds the loss and writes the resource again
            assert ops.reindex().resources[rid].files_indexed == 1
    with reopened(data) as ops:
        assert ops.status()["resources"]
        assert ops.verify() == []
        assert ops.view(ops.scope(["local/hit"], [])).search("quokka_function")


@pytest.mark.parametrize("step", ["index.commit", "rebuild.swap:1", "rebuild.swap:3"])
def test_a_write_under_way_that_drops_a_resources_last_units_is_not_a_loss(
    tmp_path: Path, tree: Path, step: str
) -> None:
    """A resource's only file made binary: the session drops its shard and
    graph file before the catalog rows follow, and a rebuild swaps the text
    and graph indexes before the catalog.  A query or ``status`` in that
    window (frozen here by a crash) sees a missing shard or graph file while
    the catalog still records units: a write under way, not a loss, so no
    error (a watcher's or a rebuild's readers got one per few queries)."""
    data = tmp_path / "data"
    rid = index_once(data, tree, "local/hit")
    (tree / "pkg" / "core.py").write_bytes(b"\x00\x01\x02 binary now")
    env = {**os.environ, "ACMS_DATA_DIR": str(data), "ACMS_EMBEDDING_DIM": "16"}
    env["ACMS_FAULT_AT"] = step
    args = ["--rebuild"] if step.startswith("rebuild") else []
    killed = subprocess.run(
        [sys.executable, str(REINDEX), "--jobs", "1", *args],
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    # The window: the shard or the graph file gone, the catalog rows not yet.
    shard, graph = data / "text" / rid, data / "graph" / "graphs" / f"{rid}.graph"
    assert not (shard.exists() and graph.exists())
    with reopened(data) as ops:
        hit = ops.view(ops.scope(["local/hit"], []))
        errors = []
        for name, call in (
            ("search", lambda: hit.search("quokka_function")),
            ("traverse", lambda: hit.traverse(resource_uri(rid), depth=1)),
            ("status", ops.status),
        ):
            try:
                call()
            except IndexUnavailableError as exc:
                errors.append(f"{name}: {exc}")
        assert errors == []
        ops.reindex()
        assert ops.verify() == []
        assert [row["files"] for row in ops.status()["resources"]] == [0]


@pytest.mark.parametrize("what", ["text shard", "graph file"])
def test_a_change_after_a_loss_writes_the_whole_resource_again(
    tmp_path: Path, tree: Path, what: str
) -> None:
    """A lost shard or graph file, then one file changed (what ``acms watch``
    sees next): the session that writes the change made a new shard or
    graph file holding that file alone, and queries, ``status`` and every
    later incremental reindex took the resource as whole.  The session now
    finds the loss and writes every file again."""
    (tree / "pkg" / "other.py").write_text("def numbat_helper():\n    return 3\n")
    data = tmp_path / "data"
    rid = index_once(data, tree, "local/w")
    lose(data, rid, what)
    (tree / "pkg" / "core.py").write_text("def quokka_function():\n    return 2\n")
    with reopened(data) as ops:
        report = ops.reindex()
        assert report.resources[rid].files_indexed == 2
        view = ops.view(ops.scope(["local/w"], []))
        assert [r.uko_uri for r in view.search("numbat_helper")]
        assert view.traverse(file_uri(rid, "pkg/other.py"), depth=1).triples
        assert ops.verify() == []
        (row,) = ops.status()["resources"]
        assert row["files"] == 2


@pytest.mark.parametrize("repair", ["rebuild", "restore"])
@pytest.mark.parametrize("lost", ["text", "vectors", "graph", "dimension"])
def test_a_resource_is_removed_while_an_index_only_a_rebuild_repairs_is_lost(
    tmp_path: Path, tree: Path, lost: str, repair: str
) -> None:
    """A live index lost (or a vector index of another dimension) while
    another resource's files are indexed: the removal used to fail part way,
    the resource still registered with its catalog rows gone and its dirty
    marker left (a restored index then showed it with ``files=0`` and made
    the next reindex read it all again); with its directory gone too, the
    rebuild named the removal and the removal named the rebuild."""
    data = tmp_path / "data"
    other = tmp_path / "other"
    other.mkdir()
    (other / "wombat.py").write_text("def wombat_function():\n    return 2\n")
    gone = index_once(data, tree, "local/l")
    index_once(data, other, "local/k")
    dimension = 8 if lost == "dimension" else 16
    if lost != "dimension":
        (data / lost).rename(data / (lost + ".away"))
    shutil.rmtree(tree)
    with reopened(data, dimension) as ops:
        ops.remove_resource(gone)
        assert [r.resource_id for r in ops.list_resources()] == list(
            ops.project("local/k").resource_ids
        )
        assert ops._store().catalog.get_meta(f"dirty:{gone}") is None
        with pytest.raises(IndexUnavailableError, match="--rebuild"):
            ops.status()  # the other resource's files still need the lost index
        if repair == "rebuild":
            ops.rebuild()  # no longer refused for the directory that is gone
    if repair == "restore":
        dimension = 16
        if lost != "dimension":
            (data / (lost + ".away")).rename(data / lost)
    with reopened(data, dimension) as ops:
        # Restored, the index still holds the resource's units: pruned.
        assert ops.reindex().pruned == ([gone] if repair == "restore" else [])
        assert ops.verify() == []
        assert [row["files"] for row in ops.status()["resources"]] == [1]
        assert ops.view(ops.scope(["local/k"], [])).search("wombat_function")


@pytest.mark.parametrize("how", ["deleted", "emptied"])
def test_a_lost_registry_never_makes_a_reindex_drop_every_index(
    tmp_path: Path, tree: Path, how: str
) -> None:
    """Found by a reviewer: ``registry.sqlite3`` deleted or cut to 0 bytes
    opened as a new registry, ``status`` said "projects: 0", exit 0, and the
    next reindex pruned every resource's units.  Now ``status`` lists the
    indexed resources the registry lacks, a reindex refuses to drop them
    all, and registering again (the documented way to start over) prunes
    the old units as before."""
    data = tmp_path / "data"
    rid = index_once(data, tree, "local/r")
    registry = data / "registry.sqlite3"
    for path in data.glob("registry.sqlite3?*"):  # -wal, -shm
        path.unlink()
    if how == "deleted":
        registry.unlink()
    else:
        registry.write_bytes(b"")
    with reopened(data) as ops:
        status = ops.status()
        assert status["resources"] == [] and status["unregistered"] == [rid]
        with pytest.raises(AcmsError, match="lists no projects while the indexes hold 1"):
            ops.reindex()
        assert rid in ops._store().text.resource_ids()
        ops.add_project("local/r")
        again = ops.add_resource(str(tree), "local/r").resource_id
        assert ops.reindex().pruned == [rid]
        assert ops.status()["unregistered"] == []
        assert ops.view(ops.scope(["local/r"], [])).search("quokka_function")
        assert again != rid


def test_a_vector_index_that_lost_one_resources_rows_fails_status_until_a_reindex(
    tmp_path: Path, tree: Path
) -> None:
    """Every row of one resource gone from the vector index (a Milvus
    collection restored from an older snapshot, in a reviewer's run): status
    said ``vector=0`` and exit 0.  Now it names the resource and the repair,
    and a plain reindex writes the rows again."""
    data = tmp_path / "data"
    rid = index_once(data, tree, "local/u")
    with reopened(data) as ops:
        vector = ops._store().vector
        vector.delete(rid, vector.unit_uris(rid))
        assert vector.unit_uris(rid) == set()
    with reopened(data) as ops:
        lost = rf"vector index holds no unit of resource {rid}"
        with pytest.raises(IndexUnavailableError, match=lost):
            ops.status()
        ops.reindex()
        (row,) = ops.status()["resources"]
        assert row["vector_units"] == row["text_units"] > 0
        assert ops.verify() == []
