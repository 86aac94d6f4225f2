"""One catalog shared by threads (``acms serve``: request threads and the watcher).

The catalog has one SQLite connection.  Its transactions are explicit
(``BEGIN IMMEDIATE`` ... ``COMMIT``), so two threads must not interleave
statements on it: a second ``BEGIN`` inside the first fails, a read lands in
another thread's open transaction, and a thread that follows a rebuild's
swap must not close the connection under another thread's statement.

Oracle: each thread's own sequence of calls, replayed on a fresh catalog
after the run, and the absence of any error during it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from cleveragents.domain.models.acms.indexing import FileRecord
from cleveragents.infrastructure.acms.index_layout import install, live_index_path
from cleveragents.infrastructure.acms.sqlite_catalog import SqliteCatalog

RIDS = ("01HZZZZZZZZZZZZZZZZZZZZZZA", "01HZZZZZZZZZZZZZZZZZZZZZZB")
ROUNDS = 300


def _rec(path: str, size: int) -> FileRecord:
    return FileRecord(path, size, 1, "0" * 64, (f"urn:{path}",), (f"file:{path}",))


def _run_threads(bodies: list[Callable[[], None]]) -> list[BaseException]:
    errors: list[BaseException] = []
    start = threading.Barrier(len(bodies))

    def run(body: Callable[[], None]) -> None:
        start.wait()
        try:
            body()
        except BaseException as exc:  # reported to the test below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(b,)) for b in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
        assert not t.is_alive(), "a catalog call hung"
    return errors


def test_threads_writing_and_reading_one_catalog(tmp_path: Path) -> None:
    cat = SqliteCatalog(tmp_path / "c.db")

    def writer(rid: str) -> Callable[[], None]:
        def body() -> None:
            for i in range(ROUNDS):
                cat.put(rid, [_rec(f"f{i % 7}.py", i)])
                if i % 3 == 0:
                    cat.remove(rid, [f"f{(i + 1) % 7}.py"])

        return body

    def meta() -> None:
        for i in range(ROUNDS):
            cat.set_meta(f"dirty:{RIDS[i % 2]}", "marked")
            cat.delete_meta(f"dirty:{RIDS[i % 2]}")

    def reader() -> None:
        for _ in range(ROUNDS):
            for rid in RIDS:
                cat.get(rid, ["f1.py", "f2.py"])
                cat.records(rid)
                cat.file_stats(rid)
            cat.resource_ids()
            cat.get_meta("embedder")

    errors = _run_threads([writer(RIDS[0]), writer(RIDS[1]), meta, reader, reader])
    assert errors == []

    # Each resource's rows are what its writer's calls leave, in order.
    oracle = SqliteCatalog(":memory:")
    for rid in RIDS:
        for i in range(ROUNDS):
            oracle.put(rid, [_rec(f"f{i % 7}.py", i)])
            if i % 3 == 0:
                oracle.remove(rid, [f"f{(i + 1) % 7}.py"])
        assert cat.records(rid) == oracle.records(rid)
    assert cat.get_meta(f"dirty:{RIDS[0]}") is None
    cat.close()
    oracle.close()


def test_threads_reading_across_a_rebuild_swap(tmp_path: Path) -> None:
    """Each generation holds one record naming it; a reader sees a whole
    generation (never a mix, never an error) while another thread's read
    follows each swap and reopens the connection they share."""
    live = live_index_path(tmp_path, "catalog")
    cat = SqliteCatalog(live / "catalog.sqlite3")
    cat.put(RIDS[0], [_rec("g0.py", 0)])
    generations = 40
    stop = threading.Event()
    seen: set[str] = set()

    def swapper() -> None:
        try:
            for g in range(1, generations + 1):
                fresh = tmp_path / "staging" / f"s{g}"
                built = SqliteCatalog(fresh / "catalog.sqlite3")
                built.put(RIDS[0], [_rec(f"g{g}.py", g)])
                built.close()
                install(tmp_path, "catalog", fresh, f"G{g}")
                cat.get_meta("embedder")  # follows the swap now
        finally:
            stop.set()

    def reader() -> None:
        while not stop.is_set():
            paths = set(cat.records(RIDS[0]))
            assert len(paths) == 1, paths
            seen.update(paths)
            cat.file_stats(RIDS[0])

    errors = _run_threads([swapper, reader, reader])
    assert errors == []
    assert set(cat.records(RIDS[0])) == {f"g{generations}.py"}
    assert len(seen) > 1  # the readers did run across swaps
    cat.close()
