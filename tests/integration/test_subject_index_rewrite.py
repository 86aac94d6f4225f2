"""An index rewrite merges the old subject index in steps, never whole.

Oracle for the merge: the index file built in plain Python from every
(key, offset) entry, old and new, sorted (the format: header, keys column,
offsets column, CRC of all that).  The memory test watches the rewrite of a
resource's index with ``tracemalloc`` (numpy reports its arrays to it): what
it holds at its peak must be a small share of the index, which the old
rewrite (the whole index read, copied and sorted) held several times over.
"""

from __future__ import annotations

import os
import struct
import tracemalloc
import zlib
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cleveragents.domain.models.acms.uko import UKO, file_uri
from cleveragents.infrastructure.acms import graph_store
from cleveragents.infrastructure.acms.rdflib_graph import RdflibGraphBackend

RID = "01J0000000000000000000000A"
NONCE = bytes(range(16))
HEAD = struct.Struct("<8s16sQQ")
MAGIC = b"ACMSSIX\x03"


def _expected(covered: int, entries: list[tuple[int, int]]) -> bytes:
    ordered = sorted(entries)
    body = HEAD.pack(MAGIC, NONCE, covered, len(ordered))
    body += b"".join(struct.pack("<Q", key) for key, _ in ordered)
    body += b"".join(struct.pack("<Q", offset) for _, offset in ordered)
    return body + struct.pack("<I", zlib.crc32(body))


def _entries(pairs: list[tuple[int, int]]) -> graph_store._Entries:
    entries = graph_store._Entries()
    for key, offset in pairs:
        entries.add([key], offset)
    return entries


def _write(
    path: Path, covered: int, parts: list[graph_store._Entries], old: graph_store._OldIndex | None
) -> bytes:
    graph_store._write_advisory(path, graph_store._index_file(NONCE, covered, parts, old))
    return path.read_bytes()


# Few distinct keys (ties within and across old and new), and the extremes.
_KEYS = st.one_of(st.integers(0, 6), st.sampled_from([2**63, 2**64 - 1]))


@settings(max_examples=150, deadline=None)
@given(
    old=st.lists(st.tuples(_KEYS, st.integers(16, 999)), max_size=40),
    new=st.lists(st.tuples(_KEYS, st.integers(1000, 5000)), max_size=25),
    split=st.integers(0, 25),
    chunk=st.integers(1, 9),
)
def test_a_rewrite_writes_the_sorted_union_of_old_and_new_entries(
    tmp_path_factory: pytest.TempPathFactory,
    old: list[tuple[int, int]],
    new: list[tuple[int, int]],
    split: int,
    chunk: int,
) -> None:
    path = tmp_path_factory.mktemp("ix") / "g.subjects"
    saved = graph_store.INDEX_MERGE_CHUNK
    graph_store.INDEX_MERGE_CHUNK = chunk
    try:
        # The old index as a rewrite without one writes it, checked.
        assert _write(path, 1000, [_entries(old)], None) == _expected(1000, old)
        opened = graph_store._open_index(path, NONCE, 6000)
        assert opened is not None
        try:
            assert (opened.covered, opened.entries) == (1000, len(old))
            # The new entries in two parts, as a rewrite gets them (the
            # records another process appended, then this handle's).
            parts = [_entries(new[:split]), _entries(new[split:])]
            written = _write(path, 6000, parts, opened)
        finally:
            os.close(opened.fd)
    finally:
        graph_store.INDEX_MERGE_CHUNK = saved
    assert written == _expected(6000, old + new)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("damage", ["none", "crc", "short", "long", "nonce", "v2", "covered"])
def test_only_a_whole_current_index_is_merged_and_its_descriptor_is_closed_otherwise(
    tmp_path: Path, damage: str
) -> None:
    path = tmp_path / "g.subjects"
    old = [(key % 7, 16 + key) for key in range(50)]
    data = bytearray(_write(path, 1000, [_entries(old)], None))
    if damage == "crc":
        data[HEAD.size + 3] ^= 1
    elif damage == "short":
        del data[-1]
    elif damage == "long":
        data += b"\0"
    elif damage == "nonce":
        data[8] ^= 1
    elif damage == "v2":
        data[:8] = b"ACMSSIX\x02"
    path.write_bytes(bytes(data))
    size = 999 if damage == "covered" else 6000  # the graph file is shorter than it covers
    before = _open_fds()
    opened = graph_store._open_index(path, NONCE, size)
    if damage == "none":
        assert opened is not None
        os.close(opened.fd)
    else:
        assert opened is None
    assert _open_fds() == before
    assert graph_store._open_index(tmp_path / "missing", NONCE, size) is None


def _columns(index: Path) -> list[tuple[int, int]]:
    """The (key, offset) entries of a whole index file, in file order."""
    data = index.read_bytes()
    count = HEAD.unpack_from(data)[3]
    assert zlib.crc32(data[:-4]) == struct.unpack("<I", data[-4:])[0]
    keys = struct.unpack_from(f"<{count}Q", data, HEAD.size)
    offsets = struct.unpack_from(f"<{count}Q", data, HEAD.size + 8 * count)
    return list(zip(keys, offsets, strict=True))


def _large_graph(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[RdflibGraphBackend, Path]:
    monkeypatch.setattr(graph_store, "INDEX_TAIL_SHARE", 1 << 40)  # index every write
    monkeypatch.setattr(graph_store, "INDEX_MIN_TAIL", 0)
    monkeypatch.setattr(graph_store, "INDEX_MERGE_CHUNK", 4096)
    graph = RdflibGraphBackend(tmp_path)
    graph.upsert(RID, [(_file(i), UKO + "imports", f"http://x/{i}") for i in range(40_000)])
    return graph, graph_store.GraphStore(tmp_path).index_path(RID)


def _file(i: int) -> str:
    return file_uri(RID, f"m{i}.py")


def test_an_index_rewrite_holds_a_chunk_not_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph, index = _large_graph(tmp_path, monkeypatch)
    before = _columns(index)
    assert len(before) > 40_000  # the index this test is about

    peaks: list[int] = []
    rewrite = graph_store.GraphStore._write_index

    def watched(self: graph_store.GraphStore, *args: object) -> None:
        tracing = tracemalloc.is_tracing()
        if not tracing:
            tracemalloc.start()
        tracemalloc.reset_peak()
        held = tracemalloc.get_traced_memory()[0]
        try:
            rewrite(self, *args)  # type: ignore[arg-type]
            peaks.append(tracemalloc.get_traced_memory()[1] - held)
        finally:
            if not tracing:
                tracemalloc.stop()

    monkeypatch.setattr(graph_store.GraphStore, "_write_index", watched)
    graph.upsert(RID, [(_file(0), UKO + "calls", _file(1))])
    graph.close()
    assert len(peaks) == 1, "the write rewrote the index"
    after = _columns(index)
    # The old entries and the new record's, in (key, offset) order.
    assert after == sorted(after)
    assert not Counter(before) - Counter(after)
    assert len(after) > len(before)
    # 16 bytes an entry on disk: the rewrite held under a tenth of that.
    assert peaks[0] < 16 * len(before) // 10, (peaks[0], len(before))


def test_a_rewrite_that_fails_midway_leaves_the_old_index_and_no_descriptor_or_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph, index = _large_graph(tmp_path, monkeypatch)
    before = index.read_bytes()
    offsets_at = HEAD.size + 8 * HEAD.unpack_from(before)[3]
    reads = graph_store._pread_all
    calls = [0]

    def failing(fd: int, size: int | None, offset: int) -> bytes:
        # The third chunk of the old offsets column: the merge has written
        # the keys column and two pieces of offsets to its file by then.
        if size == 8 * 4096 and offset >= offsets_at:
            calls[0] += 1
            if calls[0] == 3:
                raise OSError("injected read failure")
        return reads(fd, size, offset)

    listed = sorted(os.listdir(index.parent))
    fds = _open_fds()
    monkeypatch.setattr(graph_store, "_pread_all", failing)
    graph.upsert(RID, [(_file(0), UKO + "calls", _file(1))])  # the write stands
    monkeypatch.setattr(graph_store, "_pread_all", reads)
    assert calls[0] == 3
    assert index.read_bytes() == before  # advisory: the old one is kept
    assert sorted(os.listdir(index.parent)) == listed
    assert _open_fds() == fds
    assert (_file(0), UKO + "calls", _file(1)) in graph.get_triples(
        _file(0), scope=frozenset({RID})
    ).triples
    graph.close()


def test_an_old_index_covering_records_the_pending_run_holds_is_not_merged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Never so when writes go through the store; if it were, merging would
    # name the records twice. The rewrite is then built from the file.
    monkeypatch.setattr(graph_store, "INDEX_TAIL_SHARE", 1 << 40)  # index every write
    monkeypatch.setattr(graph_store, "INDEX_MIN_TAIL", 0)
    graph = RdflibGraphBackend(tmp_path)
    for i in range(3):
        graph.upsert(RID, [(_file(i), UKO + "imports", f"http://x/{i}")])
    graph.close()
    store = graph_store.GraphStore(tmp_path)
    index = store.index_path(RID)
    whole = _columns(index)
    state = store.write_state(RID, None)
    assert state is not None
    cursor = state.cursor
    assert HEAD.unpack_from(index.read_bytes())[2] == cursor.offset  # it covers all
    # The last record, as if this process had appended it and not indexed it.
    path = store.path(RID)
    data = path.read_bytes()
    pos = graph_store._HEADER
    last = None
    while (found := graph_store._next_record(data, pos)) is not None:
        last, pos = (pos, found), found[2]
    assert last is not None
    start, (kind, payload, _) = last
    pending = graph_store._Unindexed(cursor.nonce, start, cursor.offset, graph_store._Entries())
    pending.entries.add(
        graph_store._record_keys(kind, graph_store._decode_any(kind, payload, path)), start
    )
    store._write_index(RID, cursor, pending)
    assert _columns(index) == whole  # no entry twice
    store.close()
