"""``TantivyTextBackend.resource_ids`` from a fresh process reads each shard's
commit record instead of opening the shard; the answer must be the one the
opened shards give (the oracle: the same backend after it loaded each shard).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import tantivy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ulid import ULID

from cleveragents.domain.models.acms.backends import IndexUnit
from cleveragents.domain.models.acms.uko import unit_uri
from cleveragents.infrastructure.acms import tantivy_text
from cleveragents.infrastructure.acms.tantivy_text import TantivyTextBackend

RIDS = [str(ULID()) for _ in range(3)]


def _unit(rid: str, n: int) -> IndexUnit:
    return IndexUnit(unit_uri(rid, f"f{n}.py", "L1-L2"), f"word{n} shared", {"path": f"f{n}.py"})


def _opened(path: Path) -> set[str]:
    """The answer of a backend that opened every shard first."""
    b = TantivyTextBackend(path)
    try:
        for rid in b._present():
            b._shard(rid)
        return b.resource_ids()
    finally:
        b.close()


def _opened_counts(path: Path) -> dict[str, int]:
    """Units per resource, listed by a backend that opened every shard."""
    b = TantivyTextBackend(path)
    try:
        return {rid: len(b.unit_uris(rid)) for rid in RIDS}
    finally:
        b.close()


def _fresh_counts(path: Path) -> tuple[dict[str, int], int]:
    """A new backend's ``unit_count`` of each resource, and the shards it opened."""
    b = TantivyTextBackend(path)
    try:
        return {rid: b.unit_count(rid) for rid in RIDS}, len(b._shards)
    finally:
        b.close()


def _fresh(path: Path) -> tuple[set[str], int]:
    """A new backend's answer, and how many shards it opened for it."""
    b = TantivyTextBackend(path)
    try:
        return b.resource_ids(), len(b._shards)
    finally:
        b.close()


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["add", "delete_some", "delete_all"]), st.sampled_from(RIDS)),
        max_size=10,
    )
)
def test_fresh_answer_equals_the_opened_shards(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, str]]
) -> None:
    path = tmp_path_factory.mktemp("ids") / "text"
    writer = TantivyTextBackend(path)
    for op, rid in ops:
        if op == "add":
            writer.upsert(rid, [_unit(rid, n) for n in range(3)])
        elif op == "delete_some":
            writer.delete(rid, [unit_uri(rid, "f0.py", "L1-L2")])
        else:
            writer.delete(rid)
    writer.close()
    ids, opened = _fresh(path)
    assert ids == _opened(path)
    assert opened == 0  # answered from the commit records alone
    counts, opened = _fresh_counts(path)
    assert counts == _opened_counts(path)
    assert opened == 0


def test_unit_count_follows_another_writers_commits(tmp_path: Path) -> None:
    """A reader that has the shard open still counts the latest commit."""
    path = tmp_path / "text"
    rid = RIDS[0]
    writer, reader = TantivyTextBackend(path), TantivyTextBackend(path)
    try:
        writer.upsert(rid, [_unit(rid, n) for n in range(3)])
        assert reader.search("shared", scope=frozenset([rid]))  # opens the shard
        assert reader.unit_count(rid) == 3
        writer.delete(rid, [unit_uri(rid, "f0.py", "L1-L2")])
        assert reader.unit_count(rid) == 2
        writer.delete(rid)
        assert reader.unit_count(rid) == 0
    finally:
        writer.close()
        reader.close()


def test_an_emptied_shard_left_behind_is_not_a_resource(tmp_path: Path) -> None:
    """A shard whose documents were all deleted but whose directory stayed
    (a writer killed before removing it) holds no resource, either way."""
    path = tmp_path / "text"
    rid = RIDS[0]
    b = TantivyTextBackend(path)
    b.upsert(rid, [_unit(rid, n) for n in range(2)])
    b.close()
    index = tantivy.Index.open(str(path / rid))
    w = index.writer(heap_size=15_000_000, num_threads=1)
    w.delete_all_documents()
    w.commit()
    w.wait_merging_threads()
    del w, index
    assert (path / rid).is_dir()
    assert _fresh(path)[0] == set() == _opened(path)


@pytest.mark.parametrize("content", [b"{not json", b'{"segments": 3}', b"[]", b'{"x": 1}'])
def test_a_commit_record_of_another_shape_is_not_read(tmp_path: Path, content: bytes) -> None:
    """None (the caller opens the shard instead) for anything but the shape read."""
    path = tmp_path / "text"
    rid = RIDS[0]
    b = TantivyTextBackend(path)
    b.upsert(rid, [_unit(rid, 0)])
    b.close()
    assert tantivy_text._committed_docs(str(path / rid / "meta.json")) == 1
    (path / "scratch.json").write_bytes(content)
    assert tantivy_text._committed_docs(str(path / "scratch.json")) is None
    assert tantivy_text._committed_docs(str(path / "missing.json")) is None
