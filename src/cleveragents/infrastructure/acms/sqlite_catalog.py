"""The index catalog: what was indexed for each file, in SQLite.

One row per (resource, path): the size, mtime and content hash last seen,
and the unit URIs and graph subjects written for it, so a re-run can skip
unchanged files and delete exactly what a changed or vanished file left
behind.  Rows are written only after the indexes committed the change, so a
crash leaves the catalog pointing at the previous state, which the next run
repairs (the index writes are idempotent).

Table ``meta`` holds catalog-wide settings (``embedder``) and the indexer's
per-resource ``dirty:<ULID>`` markers (see the indexer's crash-safety notes).
Every write is one transaction (WAL, ``synchronous=FULL``): a SIGKILL leaves
each row and marker as of the last commit.

Threads (``acms serve``: request threads and the watcher) share one catalog
and its one connection, so every call holds the catalog's lock: a thread's
transaction never takes in another thread's statements (a second ``BEGIN``
would fail, a read would see uncommitted rows), and following a rebuild's
swap never closes the connection under another thread's statement (which
crashed the interpreter).  Calls are short (one statement or one write
batch); waiting for one costs a reader less than a connection per thread
would cost to open and keep.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import MappingProxyType

from cleveragents.domain.models.acms.errors import REBUILD_HINT, IndexUnavailableError
from cleveragents.domain.models.acms.indexing import FileRecord
from cleveragents.infrastructure.acms.sqlite_common import configure, connect, file_identity
from cleveragents.infrastructure.acms.sqlite_distinct import distinct_sql

__all__ = ["SqliteCatalog"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    resource_id TEXT NOT NULL,
    path BLOB NOT NULL,  -- os.fsencode(path): non-UTF-8 names stay exact
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    unit_uris TEXT NOT NULL,
    graph_subjects TEXT NOT NULL,
    indexed_at TEXT NOT NULL DEFAULT (datetime('now')),
    PRIMARY KEY (resource_id, path)
) WITHOUT ROWID;
-- What a re-run reads: (size, mtime) per path, without the wide JSON columns.
CREATE INDEX IF NOT EXISTS files_stat ON files (resource_id, path, size, mtime_ns);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

_FS_ENCODING = sys.getfilesystemencoding()


def _fsdecode(raw: bytes) -> str:
    """``os.fsdecode`` of a stored path, without its type dispatch."""
    return raw.decode(_FS_ENCODING, "surrogateescape")


_RESOURCE_IDS = distinct_sql("files", "resource_id")  # through the primary key

# Resources whose file_stats answer is kept (past it, the answers are dropped).
_STATS_CACHE_RESOURCES = 8

# Paths per ``get`` query: under SQLite's default host-parameter limit.
_GET_BATCH = 500


def _record(row: tuple[bytes, int, int, str, str, str]) -> FileRecord:
    return FileRecord(
        path=os.fsdecode(row[0]),
        size=row[1],
        mtime_ns=row[2],
        sha256=row[3],
        unit_uris=tuple(json.loads(row[4])),
        graph_subjects=tuple(json.loads(row[5])),
    )


class SqliteCatalog:
    """File records per resource, persisted at ``path`` (``:memory:`` allowed)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = str(path)
        self._identity: tuple[int, int] | None = None
        # file_stats answers, per resource, with the database state they read.
        self._stats_cache: dict[
            str, tuple[tuple[sqlite3.Connection, int, int], Mapping[str, tuple[int, int]]]
        ] = {}
        self._lock = threading.RLock()  # see the module docstring
        self._db = self._open()

    def _open(self) -> sqlite3.Connection:
        try:
            if self._path != ":memory:":
                Path(self._path).parent.mkdir(parents=True, exist_ok=True)
                # Before connecting: a swap in between makes the identity
                # older than the file opened, so the next call reopens once
                # more rather than keeping the old file for good.
                before = self._stat()
            conn = connect(self._path)
            configure(conn)
            if self._path != ":memory:":
                self._identity = self._stat() if before is None else before
            conn.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise IndexUnavailableError(
                f"cannot open the catalog {self._path}: {exc}" + REBUILD_HINT
            ) from exc
        return conn

    def _stat(self) -> tuple[int, int] | None:
        return file_identity(self._path)

    @property
    def _conn(self) -> sqlite3.Connection:
        """The connection, reopened if a rebuild swapped in another catalog.

        The live catalog is reached through a link into a generation
        directory (see ``index_layout``); SQLite resolved that link when it
        opened, so the old connection only ever touches the old files.
        Callers hold the lock.
        """
        if self._path != ":memory:":
            identity = self._stat()
            if identity is None:
                raise IndexUnavailableError(f"the catalog {self._path} has disappeared")
            if identity != self._identity:
                old, self._db = self._db, self._open()
                old.close()
        return self._db

    @contextmanager
    def _locked(self) -> Iterator[sqlite3.Connection]:
        """The connection, with the lock held; SQLite errors translated."""
        with self._lock:
            try:
                yield self._conn
            except sqlite3.Error as exc:
                raise IndexUnavailableError(_catalog_error(self._path, exc)) from exc

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._locked() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def records(self, resource_id: str) -> dict[str, FileRecord]:
        """Every file record of a resource, by path."""
        with self._locked() as conn:
            rows = conn.execute(
                "SELECT path, size, mtime_ns, sha256, unit_uris, graph_subjects "
                "FROM files WHERE resource_id = ?",
                (resource_id,),
            ).fetchall()
        records = (_record(r) for r in rows)
        return {rec.path: rec for rec in records}

    def file_stats(self, resource_id: str) -> Mapping[str, tuple[int, int]]:
        """``(size, mtime_ns)`` of every file of a resource, by path (read-only).

        What a re-run compares the listing with: it reads neither the unit
        URIs nor the subjects (see :meth:`get` for the few files that changed).

        The last answer per resource is kept and given again while the
        database is unchanged: no row changed through this connection
        (``total_changes``) and no other connection committed (``PRAGMA
        data_version``), outside any open transaction.  A long-lived host
        that re-runs often (``acms watch``) then reads nothing on a re-run
        where nothing changed.
        """
        with self._locked() as conn:
            version = (
                None
                if conn.in_transaction
                else (conn, conn.total_changes, conn.execute("PRAGMA data_version").fetchone()[0])
            )
            cached = self._stats_cache.get(resource_id)
            if version is not None and cached is not None and cached[0] == version:
                return cached[1]
            rows = conn.execute(
                "SELECT path, size, mtime_ns FROM files WHERE resource_id = ?", (resource_id,)
            ).fetchall()
        stats = MappingProxyType({_fsdecode(path): (size, mtime) for path, size, mtime in rows})
        if version is not None:
            if len(self._stats_cache) >= _STATS_CACHE_RESOURCES:
                self._stats_cache.clear()  # a re-run of many resources: start over
            self._stats_cache[resource_id] = (version, stats)
        return stats

    def get(self, resource_id: str, paths: Iterable[str]) -> dict[str, FileRecord]:
        """The records of some files of a resource (paths with no record are left out)."""
        keys = [os.fsencode(p) for p in paths]
        out: dict[str, FileRecord] = {}
        with self._locked() as conn:
            for i in range(0, len(keys), _GET_BATCH):
                part = keys[i : i + _GET_BATCH]
                rows = conn.execute(
                    "SELECT path, size, mtime_ns, sha256, unit_uris, graph_subjects FROM files "
                    f"WHERE resource_id = ? AND path IN ({','.join('?' * len(part))})",
                    (resource_id, *part),
                ).fetchall()
                for row in rows:
                    rec = _record(row)
                    out[rec.path] = rec
        return out

    def put(self, resource_id: str, records: Iterable[FileRecord]) -> None:
        """Insert or replace records of one resource, in one transaction."""
        rows = [
            (
                resource_id,
                os.fsencode(rec.path),
                rec.size,
                rec.mtime_ns,
                rec.sha256,
                json.dumps(list(rec.unit_uris)),
                json.dumps(list(rec.graph_subjects)),
            )
            for rec in records
        ]
        with self._tx() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO files "
                "(resource_id, path, size, mtime_ns, sha256, unit_uris, graph_subjects) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                rows,
            )

    def remove(self, resource_id: str, paths: Iterable[str] | None = None) -> None:
        """Forget some files of a resource, or all of them when ``paths`` is None."""
        with self._tx() as conn:
            if paths is None:
                conn.execute("DELETE FROM files WHERE resource_id = ?", (resource_id,))
            else:
                conn.executemany(
                    "DELETE FROM files WHERE resource_id = ? AND path = ?",
                    [(resource_id, os.fsencode(p)) for p in paths],
                )

    def names_any(self, resource_id: str, column: str) -> bool:
        """Whether a record of the resource names any unit (``column``
        ``unit_uris``) or graph subject (``graph_subjects``): one indexed
        scan of its rows, none decoded (a query asks this of each in-scope
        resource without a shard, e.g. one of thousands of binary files)."""
        if column not in ("unit_uris", "graph_subjects"):
            raise ValueError(f"no such column: {column!r}")
        with self._locked() as conn:
            row = conn.execute(
                f"SELECT EXISTS (SELECT 1 FROM files WHERE resource_id = ? AND {column} != '[]')",
                (resource_id,),
            ).fetchone()
        return bool(row[0])

    def resource_ids(self) -> set[str]:
        """Resources with at least one record."""
        with self._locked() as conn:
            rows = conn.execute(_RESOURCE_IDS).fetchall()
        return {r[0] for r in rows}

    def version(self) -> tuple[int, int, int] | None:
        """A token that changes whenever the database may have: a write through
        this connection (``total_changes``), another connection's commit
        (``PRAGMA data_version``) or another database swapped in (the
        connection); ``None`` inside a transaction."""
        with self._locked() as conn:
            if conn.in_transaction:
                return None
            changed = conn.execute("PRAGMA data_version").fetchone()[0]
            return id(conn), conn.total_changes, int(changed)

    def get_meta(self, key: str) -> str | None:
        """A catalog-wide setting (e.g. the embedder that filled the vector index)."""
        with self._locked() as conn:
            row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        """Record a catalog-wide setting."""
        with self._tx() as conn:
            conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def delete_meta(self, key: str) -> None:
        """Forget a catalog-wide setting (no error when it is not set)."""
        with self._tx() as conn:
            conn.execute("DELETE FROM meta WHERE key = ?", (key,))

    def close(self) -> None:
        """Close the database connection."""
        with self._lock:
            self._db.close()


# SQLite's words for bytes of the database that are not what it wrote.
_DAMAGED = ("decode", "malformed", "not a database", "disk image")


def _catalog_error(path: object, exc: sqlite3.Error) -> str:
    """One line for a failed catalog operation: SQLite's reason without the
    row text it may quote ("Could not decode to UTF-8 column 'graph_subjects'
    with text '[...'"), and the repair when the database is damaged."""
    reason = str(exc).split(" with text ", 1)[0][:200]
    damaged = any(word in reason.lower() for word in _DAMAGED)
    return f"catalog {path}: {reason}" + (REBUILD_HINT if damaged else "")
