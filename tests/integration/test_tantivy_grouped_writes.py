"""``TantivyTextBackend.grouped_writes``: one writer for a session's batches.

Oracle: the same writes made one by one on a backend that groups nothing
(every query's URIs, order and scores, and the stored units, must agree).
The writer lock is what grouping changes; it is checked from a second
backend on the same directory (as another process's writer would see it).
Staged writes are checked on Tantivy and on the in-memory reference, which
the store's fast unit tests run on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ulid import ULID

from cleveragents.application.services.indexer import Indexer
from cleveragents.domain.models.acms.backends import GroupedWrites, IndexUnit, StagedWrites
from cleveragents.domain.models.acms.errors import IndexUnavailableError
from cleveragents.domain.models.acms.uko import unit_uri
from cleveragents.infrastructure.acms.hashing_embedder import HashingEmbedder
from cleveragents.infrastructure.acms.index_store import _COMMIT_BATCHES, ManagedIndexStore
from cleveragents.infrastructure.acms.memory_indexes import (
    MemoryCatalog,
    MemoryGraphIndex,
    MemoryTextIndex,
    MemoryVectorIndex,
)
from cleveragents.infrastructure.acms.tantivy_text import TantivyTextBackend

RID = str(ULID())
OTHER = str(ULID())
WORDS = ["alpha", "beta", "gamma", "delta", "needle", "hay"]


def _unit(rid: str, n: int, text: str) -> IndexUnit:
    return IndexUnit(unit_uri(rid, f"f{n}.py", "L1-L5"), text, {"path": f"f{n}.py"})


def _state(b: TantivyTextBackend, rid: str) -> tuple[object, ...]:
    scope = frozenset({rid})
    found = [
        [(r.uko_uri, round(r.score, 6)) for r in b.search(w, scope=scope, max_results=50)]
        for w in WORDS
    ]
    return (sorted(b.unit_uris(rid)), found)


def _hits(b: TantivyTextBackend, rid: str) -> tuple[object, ...]:
    """:func:`_state` without scores: Tantivy counts deleted documents in
    its statistics until their segment goes, and a write replaced in the same
    commit leaves one where two commits drop the first segment whole."""
    scope = frozenset({rid})
    found = [sorted(r.uko_uri for r in b.search(w, scope=scope, max_results=50)) for w in WORDS]
    return (sorted(b.unit_uris(rid)), found)


def _apply(b: TantivyTextBackend | MemoryTextIndex, op: str, arg: list[object]) -> None:
    """One write of the strategies below (``commit`` is the caller's)."""
    if op == "upsert":
        b.upsert(RID, [_unit(RID, n, " ".join(ws)) for n, ws in arg])  # type: ignore[misc]
    elif op == "delete":
        b.delete(RID, [unit_uri(RID, f"f{n}.py", "L1-L5") for n in arg])
    elif op == "delete_all":
        b.delete(RID)


def test_is_a_grouped_writes_index_and_the_memory_index_is_not(tmp_path: Path) -> None:
    b = TantivyTextBackend(tmp_path / "t")
    assert isinstance(b, GroupedWrites)
    assert isinstance(b, StagedWrites)
    assert not isinstance(MemoryTextIndex(), GroupedWrites)
    assert isinstance(MemoryTextIndex(), StagedWrites)  # the store's fast tests stage too
    b.close()


_OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("upsert"),
            st.lists(
                st.tuples(st.integers(0, 5), st.lists(st.sampled_from(WORDS), min_size=1)),
                min_size=1,
                max_size=4,
            ),
        ),
        st.tuples(st.just("delete"), st.lists(st.integers(0, 5), max_size=3)),
        st.tuples(st.just("delete_all"), st.just([])),
    ),
    min_size=1,
    max_size=8,
)


def _replay_staged(
    staged: Any,
    plain: Any,
    ops: list[tuple[str, list[object]]],
    fail: bool,
    observe: Callable[[Any], object],
    after_each: Callable[[], None] = lambda: None,
) -> object:
    """Apply ``ops`` to ``plain`` one by one and to ``staged`` inside one
    staged block of RID (``commit`` commits it); after each, ``staged`` must
    show what ``plain`` showed at the last commit.  ``fail`` ends the block
    with an error.  Returns that last committed state."""
    committed = observe(plain)
    with contextlib.suppress(RuntimeError), staged.staged_writes(RID):
        for op, arg in ops:
            _apply(plain, op, arg)
            if op == "commit":
                staged.commit_staged(RID)
                committed = observe(plain)
            else:
                _apply(staged, op, arg)
            assert observe(staged) == committed  # nothing shows before a commit
            after_each()
        if fail:
            raise RuntimeError("the session failed")
    return committed


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=_OPS)
def test_grouped_writes_equal_the_same_writes_ungrouped(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, list[object]]]
) -> None:
    root = tmp_path_factory.mktemp("grouped")
    grouped, plain = TantivyTextBackend(root / "g"), TantivyTextBackend(root / "p")

    try:
        with grouped.grouped_writes(RID):
            for op, arg in ops:
                _apply(grouped, op, arg)
                _apply(plain, op, arg)
                # Every write is committed and visible when it returns.
                assert _state(grouped, RID) == _state(plain, RID)
        assert _state(grouped, RID) == _state(plain, RID)
        grouped.upsert(RID, [_unit(RID, 9, "after the block")])  # a fresh writer
        assert unit_uri(RID, "f9.py", "L1-L5") in grouped.unit_uris(RID)
    finally:
        grouped.close()
        plain.close()


def _other_writer_blocked(path: Path, rid: str) -> bool:
    """Whether another backend's writer of ``rid`` waits for the lock."""
    other = TantivyTextBackend(path, lock_timeout=0.2)
    try:
        other.upsert(rid, [_unit(rid, 7, "from another writer")])
    except IndexUnavailableError as exc:
        assert "locked" in str(exc)
        return True
    finally:
        other.close()
    return False


def test_the_lock_is_held_in_the_block_and_released_after(tmp_path: Path) -> None:
    path = tmp_path / "t"
    b = TantivyTextBackend(path)
    b.upsert(RID, [_unit(RID, 0, "alpha")])
    b.upsert(OTHER, [_unit(OTHER, 0, "alpha")])
    with b.grouped_writes(RID):
        assert not _other_writer_blocked(path, RID)  # nothing written yet: no writer
        b.upsert(RID, [_unit(RID, 1, "beta")])
        assert _other_writer_blocked(path, RID)  # positive control: the kept writer
        assert not _other_writer_blocked(path, OTHER)  # another shard's lock is free
    assert not _other_writer_blocked(path, RID)
    b.close()


def test_an_error_in_the_block_releases_the_writer(tmp_path: Path) -> None:
    path = tmp_path / "t"
    b = TantivyTextBackend(path)
    with pytest.raises(RuntimeError, match="caller failed"), b.grouped_writes(RID):
        b.upsert(RID, [_unit(RID, 1, "beta")])
        raise RuntimeError("caller failed")
    assert not _other_writer_blocked(path, RID)
    b.close()


def test_close_in_the_block_releases_the_writer(tmp_path: Path) -> None:
    path = tmp_path / "t"
    b = TantivyTextBackend(path)
    with b.grouped_writes(RID):
        b.upsert(RID, [_unit(RID, 1, "beta")])
        b.close()
        assert not _other_writer_blocked(path, RID)


def test_a_removed_shard_is_written_again_in_the_same_block(tmp_path: Path) -> None:
    b = TantivyTextBackend(tmp_path / "t")
    with b.grouped_writes(RID):
        b.upsert(RID, [_unit(RID, 1, "beta")])
        b.delete(RID)  # the shard is removed; its writer goes with it
        assert RID not in b.resource_ids()
        b.upsert(RID, [_unit(RID, 2, "gamma")])
        assert b.unit_uris(RID) == {unit_uri(RID, "f2.py", "L1-L5")}
    assert [r.uko_uri for r in b.search("gamma", scope=frozenset({RID}))] == [
        unit_uri(RID, "f2.py", "L1-L5")
    ]
    b.close()


def test_grouping_twice_is_refused(tmp_path: Path) -> None:
    b = TantivyTextBackend(tmp_path / "t")
    with (
        b.grouped_writes(RID),
        pytest.raises(ValueError, match="already grouped"),
        b.grouped_writes(RID),
    ):
        pass
    with b.grouped_writes(RID):  # the refused block left nothing behind
        b.upsert(RID, [_unit(RID, 1, "beta")])
    with pytest.raises(ValueError), b.grouped_writes("not-a-ulid"):
        pass
    b.close()


class _Watching(TantivyTextBackend):
    """Records, per write, whether a writer was kept for it (by a grouped
    block, from an earlier write of the block)."""

    seen: list[bool]

    def upsert(self, *args: Any, **kwargs: Any) -> None:
        self.seen.append(self._held.get(RID) is not None)
        super().upsert(*args, **kwargs)


class _Ungrouped(TantivyTextBackend):
    """The reference: grouping is a no-op, every write waits for its merges."""

    @contextlib.contextmanager
    def grouped_writes(self, resource_id: str) -> Iterator[None]:
        yield

    @contextlib.contextmanager
    def staged_writes(self, resource_id: str) -> Iterator[None]:
        yield


def test_a_store_session_groups_its_text_writes(tmp_path: Path) -> None:
    """The index store's session keeps the writer across its batches (one
    unit per batch here), and the index equals one written without grouping."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for n in range(6):
        (repo / f"m{n}.py").write_text(f"def function_{n}():\n    return {n}  # needle\n")
    grouped, plain = _Watching(tmp_path / "g"), _Ungrouped(tmp_path / "p")
    grouped.seen = []
    for text in (grouped, plain):
        store = ManagedIndexStore.over(
            text, MemoryVectorIndex(8), MemoryGraphIndex(), MemoryCatalog(), batch_units=1
        )
        Indexer(store, HashingEmbedder(8)).index_resource(RID, repo, "directory")
    # The first batch opened the writer; every later one wrote through it.
    assert len(grouped.seen) >= 6 and grouped.seen[0] is False and all(grouped.seen[1:])
    assert not grouped._held  # released when the session ended
    assert _state(grouped, RID) == _state(plain, RID)
    assert not _other_writer_blocked(tmp_path / "g", RID)
    grouped.close()
    plain.close()


# ---------------------------------------------------------------- staged writes

_STAGED_OPS = st.lists(
    st.one_of(_OPS.map(lambda ops: ops[0]), st.just(("commit", []))), min_size=1, max_size=10
)


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=_STAGED_OPS, fail=st.booleans())
def test_staged_writes_show_at_each_commit_what_the_same_writes_show_unstaged(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, list[object]]], fail: bool
) -> None:
    """Oracle: the same writes on a backend that commits each one.  Readers
    see the state of the last commit; leaving the block commits the rest,
    or (``fail``) drops it, as a crash would."""
    root = tmp_path_factory.mktemp("staged")
    staged, plain = TantivyTextBackend(root / "s"), TantivyTextBackend(root / "p")
    oracle = TantivyTextBackend(root / "p")  # a reader of the plain index
    try:
        committed = _replay_staged(staged, plain, ops, fail, lambda b: _hits(b, RID))
        want = committed if fail else _hits(oracle, RID)
        assert _hits(staged, RID) == want
        reopened = TantivyTextBackend(root / "s")
        assert _hits(reopened, RID) == want  # durable, as committed
        reopened.close()
        assert not _other_writer_blocked(root / "s", RID)  # (it writes when free)
    finally:
        for b in (staged, plain, oracle):
            b.close()


@settings(max_examples=60, deadline=None)
@given(ops=_STAGED_OPS, fail=st.booleans())
def test_the_memory_index_stages_as_the_contract_says(
    ops: list[tuple[str, list[object]]], fail: bool
) -> None:
    """The same oracle for the in-memory reference (its BM25 has no deleted
    documents, so scores are compared too), and the other resource's writes
    are never staged with this one's."""
    staged, plain = MemoryTextIndex(), MemoryTextIndex()

    def other_resource_not_staged() -> None:
        staged.upsert(OTHER, [_unit(OTHER, 0, "needle")])  # shows at once
        assert staged.unit_uris(OTHER) == {unit_uri(OTHER, "f0.py", "L1-L5")}

    committed = _replay_staged(
        staged, plain, ops, fail, lambda b: _state(b, RID), other_resource_not_staged
    )
    assert _state(staged, RID) == (committed if fail else _state(plain, RID))
    with staged.staged_writes(RID):  # the block ended: the resource can stage again
        pass


def test_the_memory_index_refuses_staging_twice_and_a_commit_after_close() -> None:
    b = MemoryTextIndex()
    with (
        b.staged_writes(RID),
        pytest.raises(ValueError, match="already grouped"),
        b.staged_writes(RID),
    ):
        pass
    # close() inside a block loses its writes: the block's end reports it.
    with pytest.raises(IndexUnavailableError), b.staged_writes(RID):
        b.upsert(RID, [_unit(RID, 1, "beta")])
        b.close()
    assert RID not in b.resource_ids()


def test_a_new_resource_staged_over_several_writes_is_whole_at_the_commit(
    tmp_path: Path,
) -> None:
    # Its shard has no commit until the end: every write must reach the one writer.
    b = TantivyTextBackend(tmp_path / "t")
    with b.staged_writes(RID):
        for n in range(5):
            b.upsert(RID, [_unit(RID, n, f"needle number{n}")])
        assert RID not in b.resource_ids()
        assert _other_writer_blocked(tmp_path / "t", RID)
    assert b.unit_uris(RID) == {unit_uri(RID, f"f{n}.py", "L1-L5") for n in range(5)}
    assert len(b.search("needle", scope=frozenset({RID}), max_results=10)) == 5
    b.close()


def test_a_staged_delete_of_every_unit_removes_the_shard_at_the_commit(tmp_path: Path) -> None:
    b = TantivyTextBackend(tmp_path / "t")
    b.upsert(RID, [_unit(RID, 1, "beta")])
    with b.staged_writes(RID):
        b.delete(RID, [unit_uri(RID, "f1.py", "L1-L5")])
        assert RID in b.resource_ids()
        b.commit_staged(RID)
        assert RID not in b.resource_ids()
        b.upsert(RID, [_unit(RID, 2, "gamma")])  # written again in the same block
    assert b.unit_uris(RID) == {unit_uri(RID, "f2.py", "L1-L5")}
    b.close()


def test_staged_writes_dropped_by_a_failed_write_or_close_fail_the_commit(
    tmp_path: Path,
) -> None:
    b = TantivyTextBackend(tmp_path / "t")
    b.upsert(RID, [_unit(RID, 0, "alpha")])
    with pytest.raises(IndexUnavailableError, match="dropped"), b.staged_writes(RID):
        b.upsert(RID, [_unit(RID, 1, "beta")])
        with pytest.raises(IndexUnavailableError):
            b._upsert(RID, [_unit(RID, 2, "gamma")], [("x", 1)], ())  # type: ignore[list-item]
        b.commit_staged(RID)
    assert b.unit_uris(RID) == {unit_uri(RID, "f0.py", "L1-L5")}
    # The block's own end reports it too, and close() inside a block is a loss.
    with pytest.raises(IndexUnavailableError, match="dropped"), b.staged_writes(RID):
        b.upsert(RID, [_unit(RID, 3, "delta")])
        b.close()
    assert not _other_writer_blocked(tmp_path / "t", RID)


class _LogsWrites:
    """Logs text writes and commits, in order, with the catalog's puts."""

    log: list[str]

    def upsert(self, *args: Any, **kwargs: Any) -> None:
        self.log.append("upsert")
        super().upsert(*args, **kwargs)  # type: ignore[misc]

    def commit_staged(self, resource_id: str) -> None:
        self.log.append("commit")
        super().commit_staged(resource_id)  # type: ignore[misc]


class _Counting(_LogsWrites, TantivyTextBackend):
    pass


class _CountingMemory(_LogsWrites, MemoryTextIndex):
    pass


class _LoggedCatalog(MemoryCatalog):
    log: list[str]

    def put(self, *args: Any, **kwargs: Any) -> None:
        self.log.append("put")
        super().put(*args, **kwargs)


@pytest.mark.parametrize("engine", ["tantivy", "memory"])
def test_a_store_session_commits_text_once_per_several_batches_and_before_the_rows(
    tmp_path: Path, engine: str
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    for n in range(40):
        (repo / f"m{n}.py").write_text(f"def function_{n}():\n    return {n}  # needle\n")
    log: list[str] = []
    text: _Counting | _CountingMemory
    text = _Counting(tmp_path / "g") if engine == "tantivy" else _CountingMemory()
    catalog = _LoggedCatalog()
    text.log = catalog.log = log
    store = ManagedIndexStore.over(
        text, MemoryVectorIndex(8), MemoryGraphIndex(), catalog, batch_units=1, batch_triples=1
    )
    Indexer(store, HashingEmbedder(8)).index_resource(RID, repo, "directory")
    upserts, commits = log.count("upsert"), log.count("commit")
    assert upserts >= 40
    assert _COMMIT_BATCHES > 1
    # One per _COMMIT_BATCHES text batches, one for the rest, and the last one.
    assert 1 <= commits <= -(-upserts // _COMMIT_BATCHES) + 1
    # No catalog row names a file whose text is not committed yet.
    for i, call in enumerate(log):
        if call == "put":
            last_commit = max(j for j in range(i) if log[j] == "commit")
            assert "upsert" not in log[last_commit:i]
    assert store.verify([RID]) == []
    assert len(text.search("needle", scope=frozenset({RID}), max_results=100)) == 40
    text.close()


def test_a_resource_with_few_triples_still_commits_once_per_few_text_batches(
    tmp_path: Path,
) -> None:
    # Its graph batch (15k triples by default) would fill only at the end:
    # the text commit may not wait for it (a crash would redo everything).
    repo = tmp_path / "repo"
    repo.mkdir()
    for n in range(40):
        (repo / f"notes{n}.txt").write_text(f"needle note {n}\n")
    log: list[str] = []
    text, catalog = _Counting(tmp_path / "g"), _LoggedCatalog()
    text.log = catalog.log = log
    store = ManagedIndexStore.over(
        text, MemoryVectorIndex(8), MemoryGraphIndex(), catalog, batch_units=1
    )
    Indexer(store, HashingEmbedder(8)).index_resource(RID, repo, "directory")
    upserts, commits = log.count("upsert"), log.count("commit")
    assert upserts >= 40
    assert upserts // _COMMIT_BATCHES <= commits <= -(-upserts // _COMMIT_BATCHES) + 1
    # The rows come with the commits, not at the end.
    assert log.count("put") >= upserts // _COMMIT_BATCHES
    assert store.verify([RID]) == []
    text.close()
