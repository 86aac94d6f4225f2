"""Compaction by a writer that does not hold the graph: record by record.

The oracle is the graph a full load of the file gives before the
compaction: the compacted file must load to exactly it, hold only snapshot
chunks with disjoint subjects, answer every subject by its index as the load
does, and count what it holds.  The compaction itself must never load the
graph (that made a reindex of many changed files peak at the whole graph).
"""

from __future__ import annotations

import marshal
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from ulid import ULID

from cleveragents.domain.models.acms.backends import Literal
from cleveragents.domain.models.acms.errors import IndexUnavailableError
from cleveragents.domain.models.acms.uko import UKO, file_uri
from cleveragents.infrastructure.acms import graph_store
from cleveragents.infrastructure.acms.graph_store import (
    Change,
    Edge,
    GraphStore,
    Op,
    ResourceGraph,
    WriteState,
)
from cleveragents.infrastructure.acms.rdflib_graph import RdflibGraphBackend

RID = str(ULID())
_S = [f"urn:s{i}" for i in range(4)]
_P = ["urn:p", "urn:q"]
_O: list[Any] = ["urn:x", "urn:s0", ("1", None), ("a", "urn:dt")]

_triple = st.tuples(st.sampled_from(_S), st.sampled_from(_P), st.sampled_from(_O))
_change = st.tuples(
    st.lists(st.sampled_from(_S), max_size=2, unique=True),  # subjects dropped
    st.lists(_triple, max_size=3),  # triples removed
    st.lists(_triple, max_size=6),  # triples added
)
_ops = st.lists(st.tuples(st.booleans(), _triple), min_size=1, max_size=6)
# A step: a C record (a writer without the graph) or an L record (one holding it).
_step = st.one_of(
    st.tuples(st.just("C"), _change),
    st.tuples(st.just("L"), _ops),
)


# The property tests' settings: files written by many random steps.
_PROPERTY = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _as_change(spec: tuple[list[str], list[Any], list[Any]]) -> Change:
    drops, removes, added = spec
    adds: dict[str, set[Edge]] = {}
    for s, p, o in added:
        adds.setdefault(s, set()).add((p, o))
    return list(drops), [tuple(t) for t in removes], adds


def _records(store: GraphStore) -> list[tuple[bytes, object]]:
    data = store.path(RID).read_bytes()
    pos, found = graph_store._HEADER, []
    while (record := graph_store._next_record(data, pos)) is not None:
        kind, payload, pos = record
        found.append((kind, graph_store._decode_any(kind, payload, store.path(RID))))
    assert pos == len(data)
    return found


def _loaded(store: GraphStore) -> dict[str, set[Edge]]:
    fresh = store.refresh(RID, None, None)
    assert fresh is not None
    return {s: set(edges) for s, edges in fresh[0].by_subject.items() if edges}


def _write(store: GraphStore, steps: list[Any], state: WriteState | None = None) -> WriteState:
    """The steps as records of one file after ``state``'s, or of a new one
    whose snapshot holds every subject (several chunks when they are small)."""
    if state is None:
        state = store.create(RID, ([], [], {s: {(_P[0], "urn:x"), (_P[1], s)} for s in _S}))
    for kind, spec in steps:
        if kind == "C":
            state = store.write_state(RID, state) or state
            store.append_change(RID, state, _as_change(spec))
        else:
            fresh = store.refresh(RID, None, None)
            assert fresh is not None
            graph, cursor, _ = fresh
            done = graph.apply([(add, s, p, o) for add, (s, p, o) in spec])
            if done:
                store.append(RID, cursor, done)
    current = store.write_state(RID, state)
    assert current is not None
    return current


@_PROPERTY
@given(
    steps=st.lists(_step, max_size=12),
    more=st.lists(_step, max_size=6),
    chunk=st.sampled_from([1, 2, 4096]),
)
def test_a_compaction_keeps_exactly_the_graph_a_load_gives(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    steps: list[Any],
    more: list[Any],
    chunk: int,
) -> None:
    # Chunks of 1 or 2 subjects: the first snapshot is several chunks,
    # records' surviving edges fill several chunks, and subjects whose
    # edges several records add are held.  Then a compacted file (its
    # snapshot in many chunks) is written to and compacted again.
    monkeypatch.setattr(graph_store, "SNAPSHOT_SUBJECTS", chunk)
    store = GraphStore(tmp_path_factory.mktemp("compact"))
    with store.writer_lock():
        state = _write(store, steps)
        expected = _loaded(store)
        first = store.compact(RID, state)
        assert _loaded(store) == expected
        again = _write(store, more, first)
        expected = _loaded(store)
        fresh = store.compact(RID, again)
    assert _loaded(store) == expected
    records = _records(store)
    assert {kind for kind, _ in records} == {graph_store._SNAPSHOT}
    subjects = [s for _, chunk_ in records for s in chunk_]  # type: ignore[attr-defined]
    assert len(subjects) == len(set(subjects))  # disjoint chunks
    assert all(len(c) <= max(chunk, 1) for _, c in records)  # type: ignore[arg-type]
    assert fresh.live == sum(map(len, expected.values()))
    assert fresh.dead == 0
    assert fresh.cursor.offset == fresh.cursor.snapshot_end == store.path(RID).stat().st_size
    reader = store.subject_reader(RID)
    assert reader is not None  # the new file's index covers it
    try:
        for s in _S:
            assert reader.edges(s) == expected.get(s, set())
    finally:
        reader.close()
    # The next write goes on from the returned state.
    with store.writer_lock():
        store.append_change(RID, fresh, ([_S[1]], [], {_S[1]: {(_P[1], "urn:x")}}))
    expected[_S[1]] = {(_P[1], "urn:x")}
    assert _loaded(store) == expected


def test_the_record_order_rules(tmp_path: Path) -> None:
    """Hand-made cases, each a rule of the order records apply in."""
    store = GraphStore(tmp_path)
    a, b = _S[0], _S[1]
    x, y = (_P[0], "urn:x"), (_P[0], "urn:y")
    with store.writer_lock():
        state = store.create(RID, ([], [], {a: {x}, b: {x}}))
        # A change's own drop and removal come before its additions.
        store.append_change(RID, state, ([a], [(b, *x)], {a: {y}, b: {x}}))
        # A later removal kills an earlier addition; a re-addition after it lives.
        store.append_change(RID, state, ([], [(a, *y)], {}))
        store.append_change(RID, state, ([], [], {a: {y}}))
        # An L record: add then remove in one record leaves nothing.
        fresh = store.refresh(RID, None, None)
        assert fresh is not None
        ops: list[Op] = [(True, _S[2], *x), (False, _S[2], *x), (True, _S[3], *y)]
        store.append(RID, fresh[1], fresh[0].apply(ops))
        state = store.write_state(RID, state)
        assert state is not None
        store.compact(RID, state)
    assert _loaded(store) == {a: {y}, b: {x}, _S[3]: {y}}


def _spread(rid: str, files: int, rounds: int) -> list[tuple[list[Any], list[str]]]:
    """Upserts as the indexer writes them: each file's triples replace its
    subjects; a node that every file points to gains an edge per file."""
    node = f"uko://resource/{rid}"
    writes = []
    for r in range(rounds):
        for i in range(files):
            f = file_uri(rid, f"m{i}.py")
            triples = [(f, UKO + "round", Literal(str(r))), (f, UKO + "inResource", node)]
            writes.append((triples, [f]))
    return writes


def _counting_loads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    loads: list[Path] = []
    real_parse = GraphStore._parse

    def parse(self: GraphStore, data: bytes, st: Any, path: Path) -> Any:
        loads.append(path)
        return real_parse(self, data, st, path)

    monkeypatch.setattr(GraphStore, "_parse", parse)
    return loads


def test_an_indexing_writer_compacts_without_loading_the_graph(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rid = str(ULID())
    monkeypatch.setattr(graph_store, "COMPACT_MIN_BYTES", 256)
    loads = _counting_loads(monkeypatch)
    with RdflibGraphBackend(tmp_path) as writer:
        path = writer._store.path(rid)  # type: ignore[union-attr]
        names = set()  # each file's random name (inodes are reused)
        for triples, doomed in _spread(rid, files=40, rounds=4):
            writer.upsert(rid, triples, delete_subjects=doomed)
            names.add(path.read_bytes()[: graph_store._HEADER])
        assert len(names) > 2  # compacted more than once
        assert loads == []  # never by loading the graph
    with RdflibGraphBackend(tmp_path) as reader:
        scope = frozenset({rid})
        f = file_uri(rid, "m7.py")
        assert reader.get_triples(f, scope=scope).triples == sorted(
            [(f, UKO + "inResource", f"uko://resource/{rid}"), (f, UKO + "round", "3")]
        )
        assert len(reader.subjects(rid)) == 40


def test_a_compacted_file_holds_what_the_graph_holding_writer_would_write(
    tmp_path: Path,
) -> None:
    """The same changes, compacted by each kind of writer: equal graphs."""
    roots = [tmp_path / "streamed", tmp_path / "loaded"]
    for root in roots:
        store = GraphStore(root)
        with store.writer_lock():
            state = store.create(RID, ([], [], {_S[0]: {(_P[0], "urn:x")}}))
            for i in range(30):
                s = _S[i % 4]
                store.append_change(
                    RID, state, ([s], [], {s: {(_P[0], f"urn:o{i}"), (_P[1], ("v", None))}})
                )
            if root.name == "streamed":
                store.compact(RID, state)
            else:
                fresh = store.refresh(RID, None, None)
                assert fresh is not None
                store.create_from(RID, ResourceGraph(fresh[0].by_subject))
    graphs = []
    for root in roots:
        fresh = GraphStore(root).refresh(RID, None, None)
        assert fresh is not None
        graphs.append(fresh[0].by_subject)
    assert graphs[0] == graphs[1]


# ---------------------------------------------------------------- deletions


def test_a_deletion_by_a_writer_without_the_graph_loads_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deleting a file's subjects (the indexer after a file was removed)
    appends a record; it loaded the whole graph before."""
    rid = str(ULID())
    with RdflibGraphBackend(tmp_path) as writer:
        for triples, doomed in _spread(rid, files=3000, rounds=1):
            writer.upsert(rid, triples, delete_subjects=doomed)
    loads = _counting_loads(monkeypatch)
    gone = file_uri(rid, "m5.py")
    with RdflibGraphBackend(tmp_path) as writer:
        writer.upsert(rid, [], delete_subjects=[gone])
        writer.delete(rid, [file_uri(rid, "m6.py")])
        assert loads == []
    monkeypatch.undo()
    with RdflibGraphBackend(tmp_path) as reader:
        scope = frozenset({rid})
        assert reader.get_triples(gone, scope=scope).triples == []
        assert reader.get_triples(file_uri(rid, "m6.py"), scope=scope).triples == []
        assert len(reader.get_triples(file_uri(rid, "m7.py"), scope=scope).triples) == 2
        assert len(reader.subjects(rid)) == 2998
        assert rid in reader.resource_ids()


def test_deleting_every_subject_removes_the_graph_without_loading_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rid, other = str(ULID()), str(ULID())
    files = [file_uri(rid, f"m{i}.py") for i in range(2500)]  # 5,000 triples: big
    with RdflibGraphBackend(tmp_path) as writer:
        for triples, doomed in _spread(rid, files=2500, rounds=1):
            writer.upsert(rid, triples, delete_subjects=doomed)
        writer.upsert(other, _spread(other, files=1, rounds=1)[0][0])
    loads = _counting_loads(monkeypatch)
    with RdflibGraphBackend(tmp_path) as writer:
        path = writer._store.path(rid)  # type: ignore[union-attr]
        writer.upsert(rid, [], delete_subjects=files)
        assert not path.exists()
        assert writer.resource_ids() == {other}
        # Deleting from a resource with no graph creates none.
        writer.upsert(rid, [], delete_subjects=files[:1])
        writer.delete(rid, files[:1])
        assert not path.exists()
        assert loads == []


def test_edges_added_again_then_removed_leave_no_graph(tmp_path: Path) -> None:
    """The write counts say 4,200 triples are left (each edge added three
    times); that up to all of them may be counted twice is known, so the
    exact count of a compaction runs, finds none, and the file goes."""
    rid = str(ULID())
    edges = [(file_uri(rid, f"m{i % 100}.py"), UKO + "tag", Literal(str(i))) for i in range(2100)]
    with RdflibGraphBackend(tmp_path) as writer:
        for _ in range(3):
            writer.upsert(rid, edges)
        writer.upsert(rid, [], delete_triples=edges)
        assert writer.resource_ids() == set()
        assert not writer._store.path(rid).exists()  # type: ignore[union-attr]
    with RdflibGraphBackend(tmp_path) as reader:
        assert reader.resource_ids() == set()


def test_deletions_from_a_small_graph_load_it_once_and_compact_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A graph the counts say is small is loaded for a deletion and held, as
    before (compacting it for an exact count at every deletion cost ~14 ms
    a call); deleting what is not there writes nothing."""
    rid = str(ULID())
    with RdflibGraphBackend(tmp_path) as writer:
        for triples, doomed in _spread(rid, files=200, rounds=1):
            writer.upsert(rid, triples, delete_subjects=doomed)
    compactions: list[str] = []
    real_compact = GraphStore.compact

    def compact(self: GraphStore, rid_: str, state: WriteState) -> WriteState:
        compactions.append(rid_)
        return real_compact(self, rid_, state)

    monkeypatch.setattr(GraphStore, "compact", compact)
    with RdflibGraphBackend(tmp_path) as writer:
        path = writer._store.path(rid)  # type: ignore[union-attr]
        for i in range(20):
            writer.delete(rid, [file_uri(rid, f"m{i}.py")])
        size = path.stat().st_size
        writer.delete(rid, [file_uri(rid, "absent.py")])
        assert path.stat().st_size == size
        assert compactions == []
        assert len(writer.subjects(rid)) == 180


# ---------------------------------------------------------------- failures and memory


def _three_records(store: GraphStore) -> WriteState:
    state = store.create(RID, ([], [], {s: {(_P[0], "urn:x")} for s in _S}))
    store.append_change(RID, state, ([_S[0]], [], {_S[0]: {(_P[1], "urn:y")}}))
    store.append_change(RID, state, ([_S[1]], [], {_S[1]: {(_P[1], "urn:y")}}))
    return state


def test_a_compaction_that_fails_leaves_the_file_and_the_state_as_they_were(
    tmp_path: Path,
) -> None:
    store = GraphStore(tmp_path)
    with store.writer_lock():
        state = _three_records(store)
        path = store.path(RID)
        data = bytearray(path.read_bytes())
        first = graph_store._next_record(bytes(data), graph_store._HEADER)
        assert first is not None
        data[first[2] + graph_store._RECORD.size + 2] ^= 0xFF  # the second record's payload
        path.write_bytes(bytes(data))  # the same file (inode, name), damaged
        with pytest.raises(graph_store.IndexUnavailableError, match="bad record"):
            store.compact(RID, state)
        assert path.read_bytes() == bytes(data)
        assert [p.name for p in tmp_path.rglob("*.tmp")] == []
        # The state still appends.
        store.append_change(RID, state, ([], [], {_S[2]: {(_P[1], "urn:z")}}))
        assert path.stat().st_size > len(data)


def test_a_compaction_of_a_state_of_another_file_fails(tmp_path: Path) -> None:
    store = GraphStore(tmp_path)
    with store.writer_lock():
        stale = _three_records(store)
        fresh = store.refresh(RID, None, None)
        assert fresh is not None
        store.create_from(RID, fresh[0])  # another writer compacted meanwhile
        before = store.path(RID).read_bytes()
        with pytest.raises(graph_store.IndexUnavailableError, match="changed under"):
            store.compact(RID, stale)
        assert store.path(RID).read_bytes() == before


def test_a_compaction_holds_far_less_than_the_graph(tmp_path: Path) -> None:
    """Python allocations at their peak during a compaction, against a load
    of the same file: only subjects whose edges span records are held."""
    import tracemalloc

    store = GraphStore(tmp_path)
    files = 3000
    with store.writer_lock():
        state: WriteState | None = None
        for rnd in range(2):
            for start in range(0, files, 100):
                adds = {
                    f"urn:f{i}#s{j}": {(_P[0], (f"{rnd}-{i}-{j}-{k}", None)) for k in range(6)}
                    for i in range(start, start + 100)
                    for j in range(4)
                }
                drops = list(adds)
                if state is None:
                    state = store.create(RID, (drops, [], adds))
                else:
                    store.append_change(RID, state, (drops, [], adds))
        assert state is not None
        tracemalloc.start()
        try:
            store.refresh(RID, None, None)
            load_peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            store.compact(RID, state)
            compact_peak = tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()
    assert compact_peak < load_peak / 3, (compact_peak, load_peak)


@_PROPERTY
@given(
    steps=st.lists(_step, max_size=12),
    chunk=st.sampled_from([1, 2, 4096]),
    torn=st.sampled_from([b"", b"C", b"C\x05\x00\x00\x00\x00\x00\x00\x00abc"]),
    compacted=st.booleans(),
    damaged=st.one_of(st.none(), st.integers(1, 20)),
)
# Every subject dropped: an empty graph whose file remains (CI found it),
# before and after a compaction.
@example(
    steps=[("C", (["urn:s0", "urn:s1"], [], [])), ("C", (["urn:s2", "urn:s3"], [], []))],
    chunk=1,
    torn=b"",
    compacted=False,
    damaged=None,
)
@example(
    steps=[("C", (["urn:s0", "urn:s1"], [], [])), ("C", (["urn:s2", "urn:s3"], [], []))],
    chunk=1,
    torn=b"",
    compacted=True,
    damaged=None,
)
def test_the_subjects_read_record_by_record_are_those_a_load_holds(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    steps: list[Any],
    chunk: int,
    torn: bytes,
    compacted: bool,
    damaged: int | None,
) -> None:
    # What verify and the repair sweep ask of every resource: answered
    # without loading the graph, exactly as the loaded graph would, after
    # any records, a compaction, and a torn tail a killed writer left.
    monkeypatch.setattr(graph_store, "SNAPSHOT_SUBJECTS", chunk)
    root = tmp_path_factory.mktemp("subjects")
    store = GraphStore(root)
    with store.writer_lock():
        state = _write(store, steps)
        if compacted:
            store.compact(RID, state)
    with store.path(RID).open("ab") as fh:
        fh.write(torn)
    if damaged is not None:  # a bad CRC in some record after the first: a load stops there
        data = bytearray(store.path(RID).read_bytes())
        starts, pos = [], graph_store._HEADER
        while (record := graph_store._next_record(bytes(data), pos)) is not None:
            starts.append(pos)
            pos = record[2]
        if len(starts) > 1:
            at = starts[1 + damaged % (len(starts) - 1)] + graph_store._RECORD.size
            data[at] ^= 0xFF
            store.path(RID).write_bytes(bytes(data))
    expected = set(_loaded(store))
    loads = _counting_loads(monkeypatch)
    assert store.live_subjects(RID) == expected
    backend = RdflibGraphBackend(root)
    try:
        assert backend.subjects(RID) == expected
        assert loads == []  # neither loaded the graph
        with backend._lock:
            backend._load([RID])  # held, as after a query that loads it
        # Held, an empty graph too: its file remains when every subject is dropped.
        assert RID in backend._graphs
        assert backend.subjects(RID) == expected  # the same from the held graph
    finally:
        backend.close()
    assert store.live_subjects(str(ULID())) is None  # no file


def test_subjects_of_a_file_without_a_whole_snapshot_fail_as_a_load_does(tmp_path: Path) -> None:
    store = GraphStore(tmp_path)
    with store.writer_lock():
        store.create(RID, ([], [], {_S[0]: {(_P[0], "urn:x")}}))
    path = store.path(RID)
    path.write_bytes(path.read_bytes()[: graph_store._HEADER + 3])
    with pytest.raises(IndexUnavailableError, match="no whole snapshot"):
        store.live_subjects(RID)
    with pytest.raises(IndexUnavailableError, match="no whole snapshot"):
        store.refresh(RID, None, None)


def test_snapshot_chunks_sharing_a_subject_read_as_their_union_everywhere(tmp_path: Path) -> None:
    # Writers keep chunks disjoint; a file that is not (hand-made here) must
    # still read the same through a load and live_subjects (and compaction
    # and the subject reader, which take the union too).  Before, a load kept
    # only the later chunk's edges.
    store = GraphStore(tmp_path)
    e1, e2 = (_P[0], "urn:x"), (_P[0], "urn:y")
    s = _S[0]
    store.path(RID).write_bytes(
        graph_store._MAGIC
        + os.urandom(16)
        + graph_store._record(graph_store._SNAPSHOT, marshal.dumps({s: {e1}, _S[1]: {e1}}, 4))
        + graph_store._record(graph_store._SNAPSHOT, marshal.dumps({s: {e2}}, 4))
        + graph_store._record(graph_store._CHANGE, marshal.dumps(([], [(s, *e2)], {}), 4))
    )
    assert _loaded(store) == {s: {e1}, _S[1]: {e1}}
    assert store.live_subjects(RID) == {s, _S[1]}
