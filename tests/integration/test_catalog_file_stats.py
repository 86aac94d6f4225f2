"""The catalog's ``file_stats`` answer is kept while the database is unchanged.

Oracle: a second, fresh connection to the same file (no cache) reading the
same rows.  Every way the rows can change must be seen: a write through the
same catalog, a commit by another connection (another process's reindex),
and a rolled-back transaction.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cleveragents.domain.models.acms.indexing import FileRecord
from cleveragents.infrastructure.acms.sqlite_catalog import SqliteCatalog

RID = "01HZZZZZZZZZZZZZZZZZZZZZZA"
OTHER = "01HZZZZZZZZZZZZZZZZZZZZZZB"


def _rec(path: str, size: int, mtime: int = 1) -> FileRecord:
    return FileRecord(path, size, mtime, "0" * 64)


def _fresh(path: Path, rid: str) -> dict[str, tuple[int, int]]:
    other = SqliteCatalog(path)
    try:
        return dict(other.file_stats(rid))
    finally:
        other.close()


def test_own_writes_are_seen(tmp_path: Path) -> None:
    cat = SqliteCatalog(tmp_path / "c.db")
    cat.put(RID, [_rec("a.py", 1), _rec("b.py", 2)])
    assert dict(cat.file_stats(RID)) == {"a.py": (1, 1), "b.py": (2, 1)}
    cat.put(RID, [_rec("a.py", 5, 7)])
    assert dict(cat.file_stats(RID)) == {"a.py": (5, 7), "b.py": (2, 1)}
    cat.remove(RID, ["b.py"])
    assert dict(cat.file_stats(RID)) == {"a.py": (5, 7)}
    cat.remove(RID)
    assert dict(cat.file_stats(RID)) == {}


def test_another_connections_commit_is_seen(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    cat = SqliteCatalog(path)
    cat.put(RID, [_rec("a.py", 1)])
    assert dict(cat.file_stats(RID)) == {"a.py": (1, 1)}
    writer = SqliteCatalog(path)
    writer.put(RID, [_rec("a.py", 9, 9), _rec("c.py", 3)])
    writer.close()
    assert dict(cat.file_stats(RID)) == {"a.py": (9, 9), "c.py": (3, 1)}


def test_a_rolled_back_change_is_not_kept(tmp_path: Path) -> None:
    cat = SqliteCatalog(tmp_path / "c.db")
    cat.put(RID, [_rec("a.py", 1)])
    conn = cat._conn
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("UPDATE files SET size = 99 WHERE resource_id = ?", (RID,))
    assert dict(cat.file_stats(RID)) == {"a.py": (99, 1)}  # read inside the transaction
    conn.execute("ROLLBACK")
    assert dict(cat.file_stats(RID)) == {"a.py": (1, 1)}


def test_the_answer_is_read_only(tmp_path: Path) -> None:
    cat = SqliteCatalog(tmp_path / "c.db")
    cat.put(RID, [_rec("a.py", 1)])
    stats = cat.file_stats(RID)
    with pytest.raises(TypeError):
        stats["x"] = (0, 0)  # type: ignore[index]


def test_an_unchanged_database_is_not_read_again(tmp_path: Path) -> None:
    """The positive control of the cache: the second answer is the same object."""
    cat = SqliteCatalog(tmp_path / "c.db")
    cat.put(RID, [_rec("a.py", 1)])
    first = cat.file_stats(RID)
    assert cat.file_stats(RID) is first
    cat.put(OTHER, [_rec("z.py", 1)])  # any change to the database drops it
    assert cat.file_stats(RID) is not first


_OPS = st.lists(
    st.tuples(
        st.sampled_from(["put", "remove", "other_put", "other_remove", "read"]),
        st.sampled_from([RID, OTHER]),
        st.sampled_from(["a.py", "b.py", "c/d.py"]),
        st.integers(0, 3),
    ),
    max_size=25,
)


@settings(max_examples=40, deadline=None)
@given(ops=_OPS)
def test_matches_a_fresh_connection_after_any_writes(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, str, str, int]]
) -> None:
    path = tmp_path_factory.mktemp("cat") / "c.db"
    cat = SqliteCatalog(path)
    other = sqlite3.connect(path, isolation_level=None)
    try:
        for op, rid, file, size in ops:
            if op == "put":
                cat.put(rid, [_rec(file, size)])
            elif op == "remove":
                cat.remove(rid, [file])
            elif op == "other_put":
                other.execute(
                    "INSERT OR REPLACE INTO files (resource_id, path, size, mtime_ns, sha256, "
                    "unit_uris, graph_subjects) VALUES (?, ?, ?, 5, ?, '[]', '[]')",
                    (rid, file.encode(), size, "0" * 64),
                )
            elif op == "other_remove":
                other.execute(
                    "DELETE FROM files WHERE resource_id = ? AND path = ?", (rid, file.encode())
                )
            for r in (RID, OTHER):
                assert dict(cat.file_stats(r)) == _fresh(path, r)
    finally:
        other.close()
        cat.close()


def test_a_row_that_does_not_decode_is_an_error_naming_the_repair_not_the_row(
    tmp_path: Path,
) -> None:
    """Bytes of a row damaged in place: SQLite's error quoted the row's text
    (the file's units and subjects, cut mid-string) and named no repair."""
    from cleveragents.domain.models.acms.errors import IndexUnavailableError

    db = tmp_path / "c.db"
    cat = SqliteCatalog(db)
    cat.put(RID, [_rec("a.py", 1)])
    raw = sqlite3.connect(db)
    raw.execute("UPDATE files SET graph_subjects = CAST(X'5B22FFFE225D' AS TEXT)")
    raw.commit()
    raw.close()
    with pytest.raises(IndexUnavailableError) as failed:
        cat.records(RID)
    message = str(failed.value)
    assert "with text" not in message and "\\xff" not in message
    assert "--rebuild" in message and str(db) in message
    cat.close()
