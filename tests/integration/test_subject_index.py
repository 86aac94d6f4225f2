"""Reading a graph by subject from its file and subject index, without loading it.

Oracle: the graph loaded whole from the same file (``GraphStore.refresh``),
which every earlier question used.  For any sequence of writes (by a handle
that holds the graph, appending ``L`` records; by one that does not,
appending ``C`` records; deletions; compactions), every subject of the
vocabulary, present or not, must have the same edges through a
:class:`SubjectReader` as in the loaded graph, and the backend's
``get_triples`` and out-walks from a handle that loads nothing must answer as
one that loaded everything; so must every IRI's incoming edges, and the
walks backwards.
"""

from __future__ import annotations

import os
import tempfile
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cleveragents.domain.models.acms.backends import Literal
from cleveragents.domain.models.acms.errors import IndexUnavailableError
from cleveragents.domain.models.acms.uko import UKO, file_uri
from cleveragents.infrastructure.acms import graph_store
from cleveragents.infrastructure.acms.graph_store import GraphStore
from cleveragents.infrastructure.acms.rdflib_graph import RdflibGraphBackend

RIDS = ["01J0000000000000000000000A", "01J0000000000000000000000B"]


def _subjects(rid: str) -> list[str]:
    return [file_uri(rid, f"m{i}.py") for i in range(4)] + ["http://x/shared"]


PREDICATES = [UKO + "defines", UKO + "calls", UKO + "line", UKO + "name"]
LITERALS = [("1", None), ("a", None), ("b", None)]
ALONG = [
    frozenset({UKO + "calls"}),
    frozenset({UKO + "defines", UKO + "calls"}),
    frozenset({UKO + "named"}),
    None,
]


def _objects(rid: str) -> list[object]:
    return [*_subjects(rid)[:2], "http://x/lib", Literal("1"), Literal("a")]


@st.composite
def _write(draw: st.DrawFn) -> tuple[str, int, list[object], list[str], list[object]]:
    """(who, resource, triples to add, subjects to drop, triples to drop)."""
    i = draw(st.integers(0, 1))
    rid = RIDS[i]
    triple = st.tuples(
        st.sampled_from(_subjects(rid)), st.sampled_from(PREDICATES), st.sampled_from(_objects(rid))
    )
    who = draw(st.sampled_from(["holder", "writer", "delete"]))
    adds = draw(st.lists(triple, max_size=6))
    drops = draw(st.lists(st.sampled_from(_subjects(rid)), max_size=2))
    removes = draw(st.lists(triple, max_size=2))
    return who, i, list(adds), drops, list(removes)


# How C records are written now (a list of edges per subject), and how
# format 3 wrote them (the writer's sets as they are).
_as_written_now = graph_store._as_written


def _as_format_3_wrote(change: graph_store.Change) -> object:
    return change


def _agrees(reader: graph_store.SubjectReader, graph: graph_store.ResourceGraph, rid: str) -> None:
    for s in [*_subjects(rid), "http://x/none"]:
        assert reader.edges(s) == graph.by_subject.get(s, set()), s
        assert reader.edges_of(s) == graph.edges_of(s), s
    for o in [*_subjects(rid), "http://x/lib", "http://x/none"]:
        # Along some predicates first (their pair keys), then along
        # any (the object's key: what this reader already verified
        # must not change the answer).
        for predicates in ALONG:
            got = reader.incoming_of(o, predicates)
            assert got == graph.incoming_of(o, predicates), (o, predicates)
    assert reader.keys_literals(UKO + "name")
    assert not reader.keys_literals(UKO + "line")
    for literal in LITERALS:
        edge = (UKO + "name", literal)
        want = {s for s, edges in graph.by_subject.items() if edge in edges}
        assert reader.subjects_with_literal(*edge) == want, literal


def _check(root: Path) -> None:
    store = GraphStore(root)
    scans = graph_store._RECORD_SCANS
    try:
        for rid in RIDS:
            loaded = store.refresh(rid, None, None)
            reader = store.subject_reader(rid)
            if loaded is None:
                assert reader is None
                continue
            assert reader is not None, "a file written by this code has a usable index"
            _agrees(reader, loaded[0], rid)  # records scanned subject by subject
            graph_store._RECORD_SCANS = 0
            mapped = store.subject_reader(rid)
            assert mapped is not None
            _agrees(mapped, loaded[0], rid)  # each record's maps, built at once
            mapped.close()
            graph_store._RECORD_SCANS = scans
    finally:
        graph_store._RECORD_SCANS = scans
        store.close()


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    st.lists(_write(), min_size=1, max_size=14),
    st.sampled_from(["every", "some", "default"]),
    st.integers(0, 14),
)
# A change that adds to one subject and removes an edge of another.
@example(
    [
        ("writer", 0, [(_subjects(RIDS[0])[0], PREDICATES[0], "http://x/lib")], [], []),
        (
            "writer",
            0,
            [(_subjects(RIDS[0])[1], PREDICATES[0], "http://x/lib")],
            [],
            [(_subjects(RIDS[0])[0], PREDICATES[0], "http://x/lib")],
        ),
    ],
    "every",
    0,
)
def test_reading_by_subject_answers_as_the_loaded_graph(
    monkeypatch: pytest.MonkeyPatch,
    writes: list[tuple[str, int, list[object], list[str], list[object]]],
    rewrites: str,
    upgraded_at: int,
) -> None:
    # The index rewritten after every write, after some (the records between
    # two rewrites by one handle then include the other handle's; and the
    # file compacted often), or as deployed (below 64 KB past the index,
    # these files are read from their tail).  A rewrite merges the old
    # index a few entries at a time (one, three), as deployed 65,536.
    share, least, compact, chunk = {
        "every": (1 << 40, 0, 1 << 15, 1),
        "some": (1, 0, 256, 3),
        "default": (
            graph_store.INDEX_TAIL_SHARE,
            graph_store.INDEX_MIN_TAIL,
            1 << 15,
            graph_store.INDEX_MERGE_CHUNK,
        ),
    }[rewrites]
    monkeypatch.setattr(graph_store, "INDEX_TAIL_SHARE", share)
    monkeypatch.setattr(graph_store, "INDEX_MIN_TAIL", least)
    monkeypatch.setattr(graph_store, "COMPACT_MIN_BYTES", compact)
    monkeypatch.setattr(graph_store, "INDEX_MERGE_CHUNK", chunk)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        holder, writer = RdflibGraphBackend(root), RdflibGraphBackend(root)
        # Readers each made from the one before (what a long-lived reader
        # does after every commit): they lend their index, tail records and
        # folded edges, and must answer as the loaded graph all the same.
        store = GraphStore(root)
        chained: dict[str, graph_store.SubjectReader] = {}
        try:
            for step, (who, i, adds, drops, removes) in enumerate(writes):
                # C records before ``upgraded_at`` as format 3 wrote them
                # (sets of edges), the later ones as now (lists).
                monkeypatch.setattr(
                    graph_store,
                    "_as_written",
                    _as_format_3_wrote if step < upgraded_at else _as_written_now,
                )
                rid = RIDS[i]
                if who == "holder":
                    holder.subjects(rid)  # load it: its writes append operations
                    holder.upsert(rid, adds, delete_subjects=drops, delete_triples=removes)
                elif who == "writer":
                    writer.upsert(rid, adds, delete_subjects=drops, delete_triples=removes)
                else:
                    writer.delete(rid, drops)
                _check(root)
                for r in RIDS:
                    previous = chained.pop(r, None)
                    loaded = store.refresh(r, None, None)
                    reader = store.subject_reader(r, previous)
                    if previous is not None:
                        previous.close()
                    if loaded is not None and reader is not None:
                        _agrees(reader, loaded[0], r)
                        chained[r] = reader
            scope = frozenset(RIDS)
            with RdflibGraphBackend(root) as fresh, RdflibGraphBackend(root) as whole:
                for rid in RIDS:
                    whole.subjects(rid)  # loaded: the path every question took before
                for s in [*_subjects(RIDS[0]), *_subjects(RIDS[1]), "http://x/lib"]:
                    assert fresh.get_triples(s, scope=scope) == whole.get_triples(s, scope=scope)
                    for direction in ("out", "in", "both"):
                        for predicates in (None, frozenset({UKO + "calls"})):
                            walks = [
                                g.traverse(
                                    s,
                                    depth=2,
                                    scope=scope,
                                    direction=direction,
                                    predicates=predicates,
                                )
                                for g in (fresh, whole)
                            ]
                            assert walks[0] == walks[1]
                assert fresh.loaded_resource_ids() == set()  # it read by subject only
        finally:
            for reader in chained.values():
                reader.close()
            store.close()
            holder.close()
            writer.close()


def test_a_missing_damaged_or_foreign_index_means_loading(tmp_path: Path) -> None:
    """The index is advisory: without a valid one for this very file, the
    backend loads the graph and answers the same."""
    rid = RIDS[0]
    f = file_uri(rid, "a.py")
    with RdflibGraphBackend(tmp_path) as g:
        g.upsert(rid, [(f, UKO + "defines", file_uri(rid, "a.py#sym=x"))])
    index = tmp_path / "graphs" / f"{rid}.subjects"
    good = index.read_bytes()
    want = [(f, UKO + "defines", file_uri(rid, "a.py#sym=x"))]
    damaged = bytearray(good)
    damaged[-6] ^= 0xFF
    other = tmp_path / "other"
    with RdflibGraphBackend(other) as g:  # an index of another file (another name)
        g.upsert(rid, [(f, UKO + "defines", file_uri(rid, "a.py#sym=x"))])
    foreign = (other / "graphs" / f"{rid}.subjects").read_bytes()
    for content in (None, bytes(damaged), good[:30], foreign, good):
        if content is None:
            index.unlink()
        else:
            index.write_bytes(content)
        with RdflibGraphBackend(tmp_path) as g:
            assert g.get_triples(f, scope=frozenset({rid})).triples == want
            assert g.loaded_resource_ids() == (set() if content == good else {rid})


def test_a_reader_follows_appends_by_another_handle(tmp_path: Path) -> None:
    rid = RIDS[0]
    f = file_uri(rid, "a.py")
    scope = frozenset({rid})
    with RdflibGraphBackend(tmp_path) as reader, RdflibGraphBackend(tmp_path) as writer:
        writer.upsert(rid, [(f, UKO + "line", Literal("1"))])
        assert reader.get_triples(f, scope=scope).triples == [(f, UKO + "line", "1")]
        writer.upsert(rid, [(f, UKO + "line", Literal("2"))], delete_subjects=[f])
        assert reader.get_triples(f, scope=scope).triples == [(f, UKO + "line", "2")]
        os.utime(tmp_path / "graphs" / f"{rid}.graph", ns=(0, 0))  # an old stat: not racy
        writer.delete(rid)
        assert reader.get_triples(f, scope=scope).triples == []
        assert reader.loaded_resource_ids() == set()


@pytest.mark.parametrize("indexed", [True, False], ids=["index-every-write", "as-deployed"])
def test_after_a_commit_a_question_decodes_only_what_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, indexed: bool
) -> None:
    """O(change): a reader made after another handle's commit keeps the
    records its predecessor decoded (the same file, grown); asking again
    about every subject decodes the new record only.  As deployed, the
    records past the index (up to a quarter of the file) are the
    predecessor's too, and so is the index itself while its file is
    unchanged: neither is read again (both were, after every commit)."""
    if indexed:
        monkeypatch.setattr(graph_store, "INDEX_TAIL_SHARE", 1 << 40)  # index every write
        monkeypatch.setattr(graph_store, "INDEX_MIN_TAIL", 0)
    rid = RIDS[0]
    files = [file_uri(rid, f"m{i}.py") for i in range(6)]
    scope = frozenset({rid})
    decoded: list[int] = []
    whole_reads: list[Path] = []
    loads, read_small = graph_store._loads, graph_store._read_small

    def counting(payload: memoryview, want: type, path: Path) -> object:
        decoded.append(len(payload))
        return loads(payload, want, path)

    def reading(path: Path, size: int | None = None) -> bytes | None:
        if size is None:
            whole_reads.append(path)
        return read_small(path, size)

    with RdflibGraphBackend(tmp_path) as reader, RdflibGraphBackend(tmp_path) as writer:
        writer.upsert(rid, [(files[0], UKO + "line", Literal("0"))])
        index = tmp_path / "graphs" / f"{rid}.subjects"
        assert index.exists()
        for f in files:  # one record each
            writer.upsert(rid, [(f, UKO + "line", Literal("1"))])
        before = {f: reader.get_triples(f, scope=scope).triples for f in files}
        assert all(before.values())
        head = index.read_bytes()[: graph_store._INDEX_HEAD.size]
        writer.upsert(rid, [(files[0], UKO + "line", Literal("2"))])
        monkeypatch.setattr(graph_store, "_loads", counting)
        monkeypatch.setattr(graph_store, "_read_small", reading)
        after = {f: reader.get_triples(f, scope=scope).triples for f in files}
        # As deployed, these small writes leave the index as it was.
        assert (index.read_bytes()[: graph_store._INDEX_HEAD.size] == head) is not indexed
    assert after[files[0]] == [(files[0], UKO + "line", v) for v in "012"]
    assert {f: after[f] for f in files[1:]} == {f: before[f] for f in files[1:]}
    assert len(decoded) == 1, decoded
    assert whole_reads == ([index] if indexed else []), whole_reads


def test_a_reader_of_a_file_cut_below_what_it_read_starts_over(tmp_path: Path) -> None:
    """A reader lends its records past the index only to a file that still
    holds them: one cut below them (whatever cut it) is read again from
    its index, and a record that is gone is not answered from memory."""
    rid = RIDS[0]
    f = file_uri(rid, "m.py")
    path = tmp_path / "graphs" / f"{rid}.graph"
    with RdflibGraphBackend(tmp_path) as writer:
        for value in "123":  # a new file (indexed), then two records past its index
            writer.upsert(rid, [(f, UKO + "line", Literal(value))])
            if value == "2":
                cut_at = path.stat().st_size
    store = GraphStore(tmp_path)
    try:
        first = store.subject_reader(rid)
        assert first is not None
        assert first.edges(f) == {(UKO + "line", (v, None)) for v in "123"}
        assert first.covered < cut_at < first.end
        os.truncate(path, cut_at)
        second = store.subject_reader(rid, first)
        assert second is not None
        assert second.edges(f) == {(UKO + "line", (v, None)) for v in "12"}
        assert second.end == cut_at
        first.close()
        second.close()
    finally:
        store.close()


def test_a_reader_that_saw_a_record_rolled_back_does_not_lend_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write whose ``fsync`` fails cuts the record it appended, which a
    reader may have decoded meanwhile; the next write puts another record
    where it was.  A reader made from that one must not keep the vanished
    record nor resume inside the new one: it answers as the loaded graph."""
    rid = RIDS[0]
    f, g = file_uri(rid, "m.py"), file_uri(rid, "n.py")
    store = GraphStore(tmp_path)
    seen: list[graph_store.SubjectReader] = []
    append = graph_store._append

    def fsync_fails(path: Path, ino: int, data: bytes) -> os.stat_result:
        append(path, ino, data)  # written whole, then "the fsync failed"
        reader = store.subject_reader(rid)
        assert reader is not None
        seen.append(reader)
        raise OSError("fsync: EIO")

    try:
        with RdflibGraphBackend(tmp_path) as writer:
            writer.upsert(rid, [(f, UKO + "line", Literal("0"))])  # a new file, indexed
            monkeypatch.setattr(graph_store, "_append", fsync_fails)
            with pytest.raises(IndexUnavailableError):
                writer.upsert(rid, [(f, UKO + "line", Literal("1"))])
            monkeypatch.setattr(graph_store, "_append", append)
            (first,) = seen
            assert first.edges(f) == {(UKO + "line", (v, None)) for v in "01"}
            assert first.tail  # the rolled-back record, read past the index
            writer.upsert(rid, [(g, UKO + "line", Literal("2" * 40))])  # longer, same offset
        loaded = store.refresh(rid, None, None)
        assert loaded is not None
        second = store.subject_reader(rid, first)
        assert second is not None
        for s in (f, g):
            assert second.edges(s) == loaded[0].by_subject.get(s, set()), s
        first.close()
        second.close()
    finally:
        store.close()


def test_a_reader_follows_an_index_rewritten_over_what_its_predecessor_read(
    tmp_path: Path,
) -> None:
    """The race where an index is rewritten after a reader read the file
    (covering exactly what that reader decoded past the old index), then
    a record is appended: the next reader takes the new index, files its
    predecessor's tail records under their offsets, decodes the new record
    alone, and answers as the loaded graph."""
    rid = RIDS[0]
    f, g = file_uri(rid, "m.py"), file_uri(rid, "n.py")
    store = GraphStore(tmp_path)
    try:
        with RdflibGraphBackend(tmp_path) as writer:
            writer.upsert(rid, [(f, UKO + "line", Literal("0"))])  # a new file, indexed
            writer.upsert(rid, [(f, UKO + "line", Literal("1"))], delete_subjects=[f])
            writer.upsert(rid, [(g, UKO + "calls", f)])
            first = store.subject_reader(rid)
            assert first is not None and len(first.tail) == 2
            assert first.edges(f) == {(UKO + "line", ("1", None))}
            assert first.edges(g) == {(UKO + "calls", f)}
            st_ = (tmp_path / "graphs" / f"{rid}.graph").stat()
            nonce = first._nonce
            cursor = graph_store.Cursor(st_.st_ino, nonce, 0, first.end, (0, 0, 0), False)
            pending = graph_store._Unindexed(nonce, first.end, first.end, graph_store._Entries())
            store._write_index(rid, cursor, pending)  # covers exactly what ``first`` read
            writer.upsert(rid, [(f, UKO + "line", Literal("2"))])
        second = store.subject_reader(rid, first)
        assert second is not None
        assert first.covered < second.covered == first.end
        assert len(second.tail) == 1  # the new record; the two before are indexed now
        assert second.edges(g) is first.edges(g)  # continued: g's fold lent, f's redone
        loaded = store.refresh(rid, None, None)
        assert loaded is not None
        graph = loaded[0]
        for s in (f, g):
            assert second.edges(s) == graph.by_subject.get(s, set()), s
            assert second.edges_of(s) == graph.edges_of(s), s
        assert second.incoming_of(f) == graph.incoming_of(f)
        first.close()
        second.close()
    finally:
        store.close()


def test_an_index_of_other_entries_under_the_same_header_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader lends its index arrays only while the index file's header
    and the CRC of its entries are unchanged: other entries under the same
    header (same file, coverage and count) are read and checked again."""
    monkeypatch.setattr(graph_store, "INDEX_TAIL_SHARE", 1 << 40)  # index every write
    monkeypatch.setattr(graph_store, "INDEX_MIN_TAIL", 0)
    rid = RIDS[0]
    with RdflibGraphBackend(tmp_path) as writer:
        for i in range(3):
            writer.upsert(rid, [(file_uri(rid, f"m{i}.py"), UKO + "line", Literal("1"))])
    store = GraphStore(tmp_path)
    try:
        first = store.subject_reader(rid)
        assert first is not None
        again = store.subject_reader(rid, first)
        assert again is not None and again.index is first.index  # unchanged: lent
        index = tmp_path / "graphs" / f"{rid}.subjects"
        data = bytearray(index.read_bytes())
        head = graph_store._INDEX_HEAD
        count = head.unpack_from(data)[3]
        assert count >= 2
        keys = head.size
        data[keys : keys + 8], data[keys + 8 : keys + 16] = (
            data[keys + 8 : keys + 16],
            data[keys : keys + 8],
        )  # two keys swapped: other entries, the same header
        end = head.size + 16 * count
        data[end:] = graph_store._INDEX_CRC.pack(zlib.crc32(bytes(data[:end])))
        index.write_bytes(bytes(data))
        second = store.subject_reader(rid, again)
        assert second is not None and second.index is not first.index
        assert list(second.index.keys) != list(first.index.keys)
        for reader in (first, again, second):
            reader.close()
    finally:
        store.close()


def test_a_failed_append_never_truncates_a_file_that_replaced_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The truncate that undoes a failed append cuts only the file it wrote
    to: when the failure is that another file took its place, that file
    stays whole."""
    rid = RIDS[0]
    path = tmp_path / "graphs" / f"{rid}.graph"
    with RdflibGraphBackend(tmp_path) as writer:
        writer.upsert(rid, [(file_uri(rid, "m.py"), UKO + "line", Literal("0"))])
        short = path.stat().st_size
        writer.upsert(rid, [(file_uri(rid, "n.py"), UKO + "line", Literal("1"))])
        other = path.read_bytes()  # a longer file in its place (a new inode)
        os.truncate(path, short)
        append = graph_store._append

        def replaced(target: Path, ino: int, data: bytes) -> os.stat_result:
            fresh = target.with_name(target.name + ".other")
            fresh.write_bytes(other)
            os.replace(fresh, target)
            return append(target, ino, data)  # raises: replaced under the lock

        monkeypatch.setattr(graph_store, "_append", replaced)
        with pytest.raises(IndexUnavailableError, match="replaced"):
            writer.upsert(rid, [(file_uri(rid, "o.py"), UKO + "line", Literal("2"))])
    assert path.read_bytes() == other


_IRIS = st.sampled_from(["http://x/a", "http://x/\u00e9", "urn:uko:name:f", "http://x/b c"])
_EDGES = st.sets(
    st.tuples(
        st.sampled_from(PREDICATES),
        st.one_of(_IRIS, st.tuples(st.sampled_from(["1", "x"]), st.none())),
    ),
    max_size=4,
)


@given(
    st.sampled_from(["S", "L", "C"]),
    st.dictionaries(_IRIS, _EDGES, max_size=4),
    st.lists(st.tuples(st.booleans(), _IRIS, st.sampled_from(PREDICATES), _IRIS), max_size=6),
    st.lists(_IRIS, max_size=2),
)
def test_a_records_keys_are_its_subjects_objects_and_pairs(
    kind: str,
    by_subject: dict[str, set[tuple[str, object]]],
    ops: list[tuple[bool, str, str, str]],
    drops: list[str],
) -> None:
    """Oracle: the keys by definition (``subject_key``, ``object_key``,
    ``pair_key``); the writer computes them another, faster way."""
    if kind == "S":
        value: object = by_subject
        subjects = set(by_subject)
        added = {(p, o) for edges in by_subject.values() for p, o in edges}
    elif kind == "L":
        value = ops
        subjects = {s for _, s, _, _ in ops}
        added = {(p, o) for add, _, p, o in ops if add}
    else:
        removes = [(s, p, o) for _, s, p, o in ops]
        value = (drops, removes, by_subject)
        subjects = set(drops) | {s for s, _, _ in removes} | set(by_subject)
        added = {(p, o) for edges in by_subject.values() for p, o in edges}
    iris = {(p, o) for p, o in added if isinstance(o, str)}
    literals = {
        (p, o) for p, o in added if not isinstance(o, str) and p in graph_store.LITERAL_KEYED
    }
    expected = (
        {graph_store.subject_key(s) for s in subjects}
        | {graph_store.object_key(o) for _, o in iris}
        | {graph_store.pair_key(p, o) for p, o in iris}
        | {graph_store.literal_key(p, o) for p, o in literals}
    )
    assert graph_store._record_keys(kind.encode(), value) == expected


def test_a_walk_backwards_along_a_predicate_decodes_only_records_with_such_edges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``callers``/``callees`` find a name's definitions by its incoming
    ``uko:named`` edges; the name's call sites (``uko:calls`` edges to the
    same node, in every file) must not make the walk decode their records."""
    monkeypatch.setattr(graph_store, "INDEX_TAIL_SHARE", 1 << 40)  # index every write
    monkeypatch.setattr(graph_store, "INDEX_MIN_TAIL", 0)
    rid = RIDS[0]
    name = "urn:uko:name:decode"
    files = [file_uri(rid, f"m{i}.py") for i in range(6)]
    decoded: list[int] = []
    loads = graph_store._loads

    def counting(payload: memoryview, want: type, path: Path) -> object:
        decoded.append(len(payload))
        return loads(payload, want, path)

    with RdflibGraphBackend(tmp_path) as writer:
        writer.upsert(rid, [(files[0] + "#sym=decode", UKO + "named", name)])
        for f in files[1:]:  # one record each
            writer.upsert(rid, [(f + "#sym=main", UKO + "calls", name)])
    monkeypatch.setattr(graph_store, "_loads", counting)
    with RdflibGraphBackend(tmp_path) as reader:
        walk = reader.traverse(
            name,
            depth=1,
            scope=frozenset({rid}),
            direction="in",
            predicates=frozenset({UKO + "named"}),
        )
        assert walk.triples == [(files[0] + "#sym=decode", UKO + "named", name)]
        assert reader.loaded_resource_ids() == set()
    assert len(decoded) == 1, decoded


def test_a_writer_removes_what_killed_writers_left(tmp_path: Path) -> None:
    """A temporary file (a writer killed before its rename) and the index of
    a graph file that is gone (killed between the two unlinks of a removal)
    are removed by the next writer; the live files stay."""
    a, b = RIDS
    with RdflibGraphBackend(tmp_path) as g:
        g.upsert(a, [(file_uri(a, "x.py"), UKO + "line", Literal("1"))])
    graphs = tmp_path / "graphs"
    leftovers = [graphs / f".{b}.graph.k3j2.tmp", graphs / f".{a}.subjects.x9.tmp"]
    for path in leftovers:
        path.write_bytes(b"torn")
    (graphs / f"{b}.subjects").write_bytes((graphs / f"{a}.subjects").read_bytes())
    with RdflibGraphBackend(tmp_path) as g:
        g.upsert(a, [(file_uri(a, "y.py"), UKO + "line", Literal("2"))])
    assert sorted(p.name for p in graphs.iterdir()) == [f"{a}.graph", f"{a}.subjects"]


def test_a_reader_answers_from_its_file_when_another_process_replaces_it(
    tmp_path: Path,
) -> None:
    """A question may read records after another process compacted the file
    (a new file renamed over it): the reader keeps its file open and answers
    for the state it was made at, never a mix and never an error; the next
    question sees the new file."""
    rid = RIDS[0]
    files = [file_uri(rid, f"m{i}.py") for i in range(3)]
    scope = frozenset({rid})
    with RdflibGraphBackend(tmp_path) as writer:
        for f in files:
            writer.upsert(rid, [(f, UKO + "line", Literal("1"))])
    store = GraphStore(tmp_path)
    try:
        reader = store.subject_reader(rid)
        assert reader is not None
        assert reader.edges(files[0]) == {(UKO + "line", ("1", None))}
        with RdflibGraphBackend(tmp_path) as other:  # loads, drops a subject, compacts
            other.subjects(rid)
            other.delete(rid, [files[1]])
            graph = other._graphs[rid]
            other._store.replace(rid, graph)  # type: ignore[union-attr]
        assert not reader.current()
        assert reader.edges(files[1]) == {(UKO + "line", ("1", None))}  # its own state
        reader.close()
    finally:
        store.close()
    with RdflibGraphBackend(tmp_path) as fresh:
        assert fresh.get_triples(files[1], scope=scope).triples == []
        assert fresh.get_triples(files[2], scope=scope).triples == [(files[2], UKO + "line", "1")]


def test_an_unreadable_index_costs_a_load_never_a_failed_question_or_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index is advisory: when it cannot be read or written (here a
    directory stands at its path), questions load the graph and writes
    commit, both with a warning."""
    monkeypatch.setattr(graph_store, "INDEX_MIN_TAIL", 0)  # every write tries the index
    rid = RIDS[0]
    f = file_uri(rid, "a.py")
    scope = frozenset({rid})
    with RdflibGraphBackend(tmp_path) as g:
        g.upsert(rid, [(f, UKO + "line", Literal("1"))])
    index = tmp_path / "graphs" / f"{rid}.subjects"
    index.unlink()
    index.mkdir()
    with RdflibGraphBackend(tmp_path) as g:
        assert g.get_triples(f, scope=scope).triples == [(f, UKO + "line", "1")]
        assert g.loaded_resource_ids() == {rid}
    with RdflibGraphBackend(tmp_path) as g:  # a writer that does not hold the graph
        for i in range(2, 6):
            g.upsert(rid, [(f, UKO + "line", Literal(str(i)))])
    with RdflibGraphBackend(tmp_path) as g:
        lines = {o for _s, _p, o in g.get_triples(f, scope=scope).triples}
    assert lines == {"1", "2", "3", "4", "5"}


def test_a_damaged_record_read_by_subject_answers_as_a_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record the subject index names fails its CRC: ``get_triples`` and
    the walks (as SPARQL does) load the graph and answer as the load does
    (the graph ends at the damaged record), never with an error."""
    monkeypatch.setattr(graph_store, "INDEX_TAIL_SHARE", 1 << 40)  # index every write
    monkeypatch.setattr(graph_store, "INDEX_MIN_TAIL", 0)
    rid = RIDS[0]
    f, lib = file_uri(rid, "m0.py"), "http://x/lib"
    with RdflibGraphBackend(tmp_path) as writer:
        writer.upsert(rid, [(f, UKO + "line", Literal("1"))])
        writer.upsert(rid, [(f, UKO + "calls", lib)])
    path = tmp_path / "graphs" / f"{rid}.graph"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # the last record's payload: same size, bad CRC
    path.write_bytes(bytes(data))
    scope = frozenset({rid})
    asks = {
        "get_triples": lambda b: b.get_triples(f, scope=scope).triples,
        "out": lambda b: b.traverse(f, depth=2, scope=scope).triples,
        "in": lambda b: b.traverse(lib, depth=1, scope=scope, direction="in").triples,
    }
    answers = {}
    for name, ask in asks.items():
        with RdflibGraphBackend(tmp_path) as whole:
            whole.subjects(rid)  # loads the graph
            expected = ask(whole)
        with RdflibGraphBackend(tmp_path) as fresh:
            assert ask(fresh) == expected, name
            assert fresh.loaded_resource_ids() == scope, name
        answers[name] = expected
    assert answers == {
        "get_triples": [(f, UKO + "line", "1")],
        "out": answers["get_triples"],
        "in": [],
    }


def test_a_version_2_index_is_rebuilt_by_the_next_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the smallest tail an index may leave (64 KB), the first append
    to a file whose index keys no literals rebuilds it: a store written
    before literal keys does not keep loading for its literal lookups until
    a quarter of the file has been appended."""
    rid = RIDS[0]
    index = tmp_path / "graphs" / f"{rid}.subjects"
    with monkeypatch.context() as old:
        old.setattr(graph_store, "_INDEX_MAGIC", b"ACMSSIX\x02")
        old.setattr(graph_store, "LITERAL_KEYED", frozenset())
        old.setattr(graph_store, "INDEX_MIN_TAIL", 0)  # index every write
        with RdflibGraphBackend(tmp_path) as writer:
            writer.upsert(
                rid,
                [(file_uri(rid, f"m{i}.py"), UKO + "name", Literal("x" * 40)) for i in range(1500)],
            )
    assert (tmp_path / "graphs" / f"{rid}.graph").stat().st_size > graph_store.INDEX_MIN_TAIL
    assert index.read_bytes()[:8] == b"ACMSSIX\x02"
    with RdflibGraphBackend(tmp_path) as writer:
        writer.upsert(rid, [(file_uri(rid, "late.py"), UKO + "name", Literal("run"))])
    assert index.read_bytes()[:8] == b"ACMSSIX\x03"


def test_an_index_without_literal_keys_is_read_and_rebuilt_with_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A version 2 index (written before literal keys) still answers by
    subject; a lookup by literal loads the graph instead of trusting keys
    the index never had; the next rewrite makes it version 3, whole."""
    monkeypatch.setattr(graph_store, "INDEX_TAIL_SHARE", 1 << 40)  # index every write
    monkeypatch.setattr(graph_store, "INDEX_MIN_TAIL", 0)
    rid, scope = RIDS[0], frozenset(RIDS[:1])
    f, g = file_uri(rid, "m0.py"), file_uri(rid, "m1.py")
    index = tmp_path / "graphs" / f"{rid}.subjects"
    query = f'PREFIX uko: <{UKO}>\nSELECT ?s ?p ?o WHERE {{ ?s uko:name "run" . ?s ?p ?o }}'
    with monkeypatch.context() as old:
        old.setattr(graph_store, "_INDEX_MAGIC", b"ACMSSIX\x02")
        old.setattr(graph_store, "LITERAL_KEYED", frozenset())
        with RdflibGraphBackend(tmp_path) as writer:
            writer.upsert(rid, [(f, UKO + "name", Literal("run"))])
    assert index.read_bytes()[:8] == b"ACMSSIX\x02"
    want = [(f, UKO + "name", "run")]
    with RdflibGraphBackend(tmp_path) as fresh:
        assert fresh.get_triples(f, scope=scope).triples == want
        assert fresh.loaded_resource_ids() == set()  # read by subject
        assert fresh.sparql_query(query, scope=scope).triples == want
        assert fresh.loaded_resource_ids() == scope  # the literal: a load
    with RdflibGraphBackend(tmp_path) as writer:
        writer.upsert(rid, [(g, UKO + "name", Literal("run"))])
    assert index.read_bytes()[:8] == b"ACMSSIX\x03"
    with RdflibGraphBackend(tmp_path) as fresh:
        got = fresh.sparql_query(query, scope=scope).triples
        assert sorted(got) == sorted([*want, (g, UKO + "name", "run")])
        assert fresh.loaded_resource_ids() == set()  # the old record's key too
