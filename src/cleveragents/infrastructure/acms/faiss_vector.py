"""FAISS adapter for :class:`~cleveragents.domain.models.acms.backends.VectorIndex`.

Storage: a SQLite database (``<index_path>/vectors.sqlite3``, WAL,
``synchronous=FULL``) is the source of truth.  Table ``units`` holds one row
per unit: an ``INTEGER PRIMARY KEY AUTOINCREMENT`` id (AUTOINCREMENT: an id is
never handed out twice, not even after the highest row is deleted), its URI,
resource, content, JSON metadata and its L2-normalised float32 embedding.
Table ``meta`` holds the dimension and a ``generation`` counter that every
write bumps in its own transaction.

In memory: ``IndexIDMap2(IndexFlatIP(d))`` keyed by the SQLite ids, plus one
sorted ``int64`` id array per resource.  The whole table is loaded at open.
A write commits to SQLite first, then applies the same change to the FAISS
index.  Each search reads the generation inside its read transaction; when
another process (or another instance) has written since, the index is
reloaded in full before searching.  Full reload is O(rows); fine for the
sizes this project targets, and the place to optimise if it is not.

Scope is applied inside the engine before ranking: an ``IDSelectorBatch`` of
the in-scope ids restricts the exact (flat) search, so ``top_k`` is always
filled with in-scope units when enough exist.  Everything runs under one
``RLock``: FAISS forbids a search concurrent with add/remove, and the SQLite
connection is shared.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

import faiss
import numpy as np
import numpy.typing as npt

from cleveragents.domain.models.acms.backends import (
    IndexUnit,
    VectorResult,
    validate_embedding,
    validate_positive_int,
)
from cleveragents.domain.models.acms.errors import IndexUnavailableError
from cleveragents.domain.models.acms.uko import resource_id_of
from cleveragents.domain.models.acms.ulids import canonical_ulid, validate_scope

__all__ = ["FaissVectorBackend"]

DB_FILENAME = "vectors.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS units (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    uri         TEXT NOT NULL UNIQUE,
    resource_id TEXT NOT NULL,
    content     TEXT NOT NULL,
    metadata    TEXT NOT NULL,
    embedding   BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS units_resource_id ON units (resource_id);
"""

_IdArray = npt.NDArray[np.int64]
_Matrix = npt.NDArray[np.float32]


def _normalise_rows(rows: npt.NDArray[np.float64]) -> _Matrix:
    """L2-normalise each row (float64 math, float32 result).

    Rows are first scaled by their largest magnitude so neither tiny nor huge
    finite values underflow or overflow while the norm is computed; that is
    why this is not ``faiss.normalize_L2`` (float32, in place), which leaves a
    row whose squared norm underflows unnormalised.
    """
    peak = np.max(np.abs(rows), axis=1, keepdims=True)
    if rows.shape[0] and not np.all(peak > 0.0):
        raise ValueError("embeddings must not contain all-zero rows")
    scaled = rows / peak
    norms = np.linalg.norm(scaled, axis=1, keepdims=True)
    return np.ascontiguousarray(scaled / norms, dtype=np.float32)


def _check_matrix(embeddings: object, rows: int, dimension: int) -> _Matrix:
    """Validate an upsert matrix and return it normalised (a fresh copy)."""
    array = np.asarray(embeddings)
    if array.dtype.kind not in "fiu":
        raise TypeError(f"embeddings must hold real numbers, not dtype {array.dtype}")
    if array.shape != (rows, dimension):
        raise ValueError(
            f"embeddings must have shape ({rows}, {dimension}), got {tuple(array.shape)}"
        )
    with np.errstate(over="ignore", invalid="ignore"):
        wide = array.astype(np.float64)  # a copy; long doubles may overflow to inf
    if not np.all(np.isfinite(wide)):
        raise ValueError("embeddings must not contain NaN or infinity")
    return _normalise_rows(wide)


def _check_uris(uris: Iterable[str], resource_id: str, name: str) -> list[str]:
    if isinstance(uris, str | bytes):
        raise TypeError(f"{name} must be an iterable of URIs, not a single string")
    out: list[str] = []
    for uri in uris:
        if not isinstance(uri, str):
            raise TypeError(f"{name} must hold str URIs, not {type(uri).__name__}")
        if resource_id_of(uri) != resource_id:
            raise ValueError(f"URI {uri[:80]!r} does not name resource {resource_id}")
        out.append(uri)
    return out


class FaissVectorBackend:
    """Exact cosine-similarity search over FAISS, persisted in SQLite.

    Args:
        index_path: directory holding ``vectors.sqlite3`` (created if missing),
            or None for an index that lives in memory only.
        dimension: embedding dimension; reopening an index with another
            dimension raises ``ValueError``.

    Raises:
        TypeError / ValueError: invalid dimension, or a dimension mismatch.
        IndexUnavailableError: the directory or database cannot be opened.
    """

    def __init__(self, index_path: str | os.PathLike[str] | None = None, *, dimension: int) -> None:
        self._dimension = validate_positive_int(dimension, "dimension")
        self._lock = threading.RLock()
        self._index: Any = None
        self._by_resource: dict[str, _IdArray] = {}
        # None = the in-memory index must be rebuilt before the next search.
        self._generation: int | None = None
        self._conn: sqlite3.Connection | None = None
        self._db_path: Path | None = None
        self._db_identity: tuple[int, int] | None = None
        try:
            if index_path is None:
                target = ":memory:"
            else:
                directory = Path(index_path)
                directory.mkdir(parents=True, exist_ok=True)
                target = str(directory / DB_FILENAME)
                self._db_path = directory / DB_FILENAME
            conn = sqlite3.connect(
                target, timeout=30.0, isolation_level=None, check_same_thread=False
            )
        except (OSError, sqlite3.Error) as exc:
            raise IndexUnavailableError(f"cannot open vector index at {index_path}") from exc
        self._conn = conn
        try:
            if self._db_path is not None:
                conn.execute("SELECT 1")  # sqlite creates the file lazily
                self._db_identity = self._identity()
            self._init_db(conn)
            with self._lock:
                self._reload()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------ lifecycle

    @property
    def dimension(self) -> int:
        """Embedding dimension of the index."""
        return self._dimension

    def close(self) -> None:
        """Close the database and drop the in-memory index; idempotent."""
        with self._lock:
            conn, self._conn = self._conn, None
            self._index = None
            self._by_resource = {}
            self._generation = None
            if conn is not None:
                try:
                    conn.close()
                except sqlite3.Error as exc:
                    raise IndexUnavailableError("cannot close the vector index") from exc

    def __enter__(self) -> FaissVectorBackend:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _init_db(self, conn: sqlite3.Connection) -> None:
        try:
            # A row (a 4*d byte embedding plus the chunk text) often exceeds
            # half a 4 KiB page, which then holds one row: half the file is
            # slack.  Only takes effect on a new database, before WAL.
            conn.execute("PRAGMA page_size=16384")
            conn.execute("PRAGMA journal_mode=WAL")  # ':memory:' stays 'memory'
            conn.execute("PRAGMA synchronous=FULL")
            with self._transaction("BEGIN IMMEDIATE") as cur:
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        cur.execute(statement)
                cur.execute(
                    "INSERT OR IGNORE INTO meta (key, value) VALUES ('dimension', ?)",
                    (self._dimension,),
                )
                cur.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('generation', 0)")
                row = cur.execute("SELECT value FROM meta WHERE key = 'dimension'").fetchone()
        except sqlite3.Error as exc:
            raise IndexUnavailableError("cannot initialise the vector index") from exc
        stored = row[0]
        if stored != self._dimension:
            raise ValueError(
                f"the index at this path has dimension {stored}, not {self._dimension}"
            )

    @contextmanager
    def _transaction(self, begin: str = "BEGIN") -> Iterator[sqlite3.Cursor]:
        """One SQLite transaction; commits on success, rolls back on any error."""
        conn = self._connection()
        cur = conn.cursor()
        try:
            cur.execute(begin)
            yield cur
            conn.commit()
        except BaseException:
            if conn.in_transaction:
                conn.rollback()
            raise
        finally:
            cur.close()

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise IndexUnavailableError("the vector index is closed")
        if self._db_path is not None:
            identity = self._identity()
            if identity is None:
                raise IndexUnavailableError(f"the vector index {self._db_path} has disappeared")
            if identity != self._db_identity:
                self._reopen()
        return self._conn

    def _identity(self) -> tuple[int, int] | None:
        """(device, inode) of the database file now at the index path."""
        assert self._db_path is not None
        try:
            st = os.stat(self._db_path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise IndexUnavailableError(f"cannot stat {self._db_path}: {exc}") from exc
        return (st.st_dev, st.st_ino)

    def _reopen(self) -> None:
        """The database file was replaced (``reindex --rebuild`` swapped a new
        index in): drop the old connection and load the new file."""
        assert self._db_path is not None and self._conn is not None
        try:
            conn = sqlite3.connect(
                self._db_path, timeout=30.0, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise IndexUnavailableError(f"cannot reopen {self._db_path}") from exc
        with contextlib.suppress(sqlite3.Error):
            self._conn.close()
        self._conn = conn
        self._db_identity = self._identity()
        self._init_db(conn)
        self._generation = None  # forces a reload from the new file

    # ------------------------------------------------------------ in-memory state

    def _reload(self) -> None:
        """Rebuild the FAISS index and the per-resource ids from SQLite."""
        try:
            with self._transaction() as cur:
                self._reload_in(cur)
        except sqlite3.Error as exc:
            raise IndexUnavailableError("cannot read the vector index") from exc

    def _reload_in(self, cur: sqlite3.Cursor) -> None:
        """Rebuild from the snapshot of the caller's read transaction."""
        generation = self._read_generation(cur)
        rows = cur.execute("SELECT id, resource_id, embedding FROM units ORDER BY id").fetchall()
        width = 4 * self._dimension
        if any(len(row[2]) != width for row in rows):
            raise IndexUnavailableError("the vector index holds an embedding of the wrong size")
        ids = np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))
        vectors = np.frombuffer(b"".join(row[2] for row in rows), dtype=np.float32)
        vectors = vectors.reshape(len(rows), self._dimension)
        grouped: dict[str, list[int]] = {}
        for row in rows:
            grouped.setdefault(row[1], []).append(row[0])
        self._generation = None
        try:
            index = faiss.IndexIDMap2(faiss.IndexFlatIP(self._dimension))
            if rows:
                index.add_with_ids(vectors, ids)
        except (RuntimeError, AssertionError) as exc:
            raise IndexUnavailableError("cannot build the FAISS index") from exc
        self._index = index
        self._by_resource = {rid: np.array(v, dtype=np.int64) for rid, v in grouped.items()}
        self._generation = generation

    @staticmethod
    def _read_generation(cur: sqlite3.Cursor) -> int:
        row = cur.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
        if row is None:
            raise IndexUnavailableError("the vector index has no generation counter")
        return int(row[0])

    # ------------------------------------------------------------ read side

    def similarity_search(
        self, embedding: list[float], *, scope: frozenset[str], top_k: int = 20
    ) -> list[VectorResult]:
        """Return the ``top_k`` in-scope units most similar to ``embedding``.

        Scores are cosine similarities clamped to 0..1; results come by
        descending score, ties by URI.

        Raises:
            TypeError: an argument has the wrong type.
            ValueError: empty, non-finite, zero or wrong-dimension embedding,
                non-positive ``top_k``, or a scope member that is not a ULID.
            IndexUnavailableError: the index cannot be read.
        """
        values = validate_embedding(embedding, self._dimension)
        validate_positive_int(top_k, "top_k")
        wanted = validate_scope(scope)
        query = np.asarray([values], dtype=np.float64)
        if not np.any(query):
            raise ValueError("embedding must not be the zero vector")
        query32 = _normalise_rows(query)
        if not wanted:
            return []
        with self._lock:
            try:
                with self._transaction() as cur:
                    if self._read_generation(cur) != self._generation:
                        # Another writer committed: rebuild from this snapshot.
                        self._reload_in(cur)
                    hits = self._search(query32, wanted, top_k)
                    if not hits:
                        return []
                    rows = cur.execute(
                        "SELECT id, uri, resource_id, content, metadata FROM units"
                        " WHERE id IN (SELECT value FROM json_each(?))",
                        (json.dumps([unit_id for unit_id, _ in hits]),),
                    ).fetchall()
            except sqlite3.Error as exc:
                raise IndexUnavailableError("cannot read the vector index") from exc
        by_id = {row[0]: row for row in rows}
        results: list[VectorResult] = []
        for unit_id, score in hits:
            row = by_id.get(unit_id)
            if row is None:
                raise IndexUnavailableError("the FAISS index and its database disagree")
            metadata: dict[str, str] = json.loads(row[4])
            metadata["resource_id"] = row[2]
            results.append(
                VectorResult(
                    uko_uri=row[1],
                    content=row[3],
                    score=max(0.0, min(1.0, score)),
                    metadata=metadata,
                )
            )
        results.sort(key=lambda r: (-r.score, r.uko_uri))
        return results

    def _search(
        self, query: _Matrix, wanted: frozenset[str], top_k: int
    ) -> list[tuple[int, float]]:
        """Exact search restricted to the in-scope ids; (id, cosine) pairs."""
        present = [rid for rid in wanted if rid in self._by_resource]
        if not present:
            return []
        params = None
        if len(present) == len(self._by_resource):
            candidates = int(self._index.ntotal)
        else:
            ids = np.concatenate([self._by_resource[rid] for rid in present])
            candidates = int(ids.size)
            params = faiss.SearchParameters()
            params.sel = faiss.IDSelectorBatch(ids)  # the wrapper keeps ids alive
        k = min(top_k, candidates)
        try:
            # One query is memory-bound: extra OpenMP threads only slow it down.
            faiss.omp_set_num_threads(1)
            scores, labels = self._index.search(query, k, params=params)
        except (RuntimeError, AssertionError) as exc:
            raise IndexUnavailableError("FAISS search failed") from exc
        # FAISS pads with id -1 / score -3.4e38 when fewer than k ids qualify.
        return [
            (int(label), float(score))
            for label, score in zip(labels[0], scores[0], strict=True)
            if label >= 0
        ]

    # ------------------------------------------------------------ write side

    def upsert(
        self,
        resource_id: str,
        units: Sequence[IndexUnit],
        embeddings: npt.NDArray[np.float32],
        *,
        delete_uris: Iterable[str] = (),
    ) -> None:
        """Atomically delete ``delete_uris`` and add or replace ``units``.

        ``embeddings`` has one row per unit, shape ``(len(units), dimension)``,
        of any real dtype; rows are L2-normalised here.  A unit whose URI is
        already indexed replaces it (under a new id); when a URI appears twice
        in ``units``, the last one wins.

        Raises:
            TypeError: a unit is not an ``IndexUnit`` or the embeddings are
                not real numbers.
            ValueError: wrong shape, non-finite or zero rows, an invalid ULID,
                or a unit or URI of another resource.
            IndexUnavailableError: the change could not be written.
        """
        rid = canonical_ulid(resource_id)
        if isinstance(units, str | bytes) or not isinstance(units, Sequence):
            raise TypeError("units must be a sequence of IndexUnit")
        for unit in units:
            if not isinstance(unit, IndexUnit):
                raise TypeError(f"units must hold IndexUnit, not {type(unit).__name__}")
            if unit.resource_id != rid:
                raise ValueError(f"unit {unit.uko_uri[:80]!r} does not belong to resource {rid}")
        removals = _check_uris(delete_uris, rid, "delete_uris")
        vectors = _check_matrix(embeddings, len(units), self._dimension)
        last = {unit.uko_uri: row for row, unit in enumerate(units)}
        keep = sorted(last.values())
        self._write(rid, removals, [units[row] for row in keep], vectors[keep])

    def delete(self, resource_id: str, uris: Iterable[str] | None = None) -> None:
        """Delete the given units of a resource, or all of them when ``uris`` is None.

        Raises:
            ValueError: an invalid ULID or a URI of another resource.
            IndexUnavailableError: the change could not be written.
        """
        rid = canonical_ulid(resource_id)
        removals = None if uris is None else _check_uris(uris, rid, "uris")
        self._write(rid, removals, [], np.empty((0, self._dimension), dtype=np.float32))

    def unit_uris(self, resource_id: str) -> set[str]:
        """URIs of the units indexed for a resource (as committed in SQLite)."""
        rid = canonical_ulid(resource_id)
        return {row[0] for row in self._query("SELECT uri FROM units WHERE resource_id = ?", rid)}

    def resource_ids(self) -> set[str]:
        """ULIDs of the resources that have at least one unit."""
        return {row[0] for row in self._query("SELECT DISTINCT resource_id FROM units")}

    def _query(self, sql: str, *args: object) -> list[Any]:
        with self._lock:
            try:
                return self._connection().execute(sql, args).fetchall()
            except sqlite3.Error as exc:
                raise IndexUnavailableError("cannot read the vector index") from exc

    def _write(
        self,
        rid: str,
        removals: list[str] | None,
        units: list[IndexUnit],
        vectors: _Matrix,
    ) -> None:
        """Commit one change to SQLite, then mirror it in the FAISS index.

        ``removals`` None deletes every unit of ``rid``.
        """
        replaced = [unit.uko_uri for unit in units]
        with self._lock:
            try:
                with self._transaction("BEGIN IMMEDIATE") as cur:
                    before = self._read_generation(cur)
                    if removals is None:
                        removed = cur.execute(
                            "DELETE FROM units WHERE resource_id = ? RETURNING id", (rid,)
                        ).fetchall()
                    else:
                        removed = []
                    removed += cur.execute(
                        "DELETE FROM units WHERE uri IN (SELECT value FROM json_each(?))"
                        " RETURNING id",
                        (json.dumps((removals or []) + replaced),),
                    ).fetchall()
                    added = [
                        cur.execute(
                            "INSERT INTO units (uri, resource_id, content, metadata, embedding)"
                            " VALUES (?, ?, ?, ?, ?) RETURNING id",
                            (
                                unit.uko_uri,
                                rid,
                                unit.content,
                                json.dumps(dict(unit.metadata), sort_keys=True),
                                vector.tobytes(),
                            ),
                        ).fetchone()[0]
                        for unit, vector in zip(units, vectors, strict=True)
                    ]
                    if not removed and not added:
                        return
                    cur.execute("UPDATE meta SET value = value + 1 WHERE key = 'generation'")
                    remaining = cur.execute(
                        "SELECT id FROM units WHERE resource_id = ? ORDER BY id", (rid,)
                    ).fetchall()
            except sqlite3.Error as exc:
                raise IndexUnavailableError("cannot write the vector index") from exc
            if before != self._generation:
                # Someone else wrote since we last looked: our mirror is stale.
                self._reload()
                return
            self._apply(
                rid,
                np.array([row[0] for row in removed], dtype=np.int64),
                np.array(added, dtype=np.int64),
                vectors,
                np.array([row[0] for row in remaining], dtype=np.int64),
                before + 1,
            )

    def _apply(
        self,
        rid: str,
        removed: _IdArray,
        added: _IdArray,
        vectors: _Matrix,
        remaining: _IdArray,
        generation: int,
    ) -> None:
        """Mirror a committed write in memory; on failure force a reload."""
        self._generation = None
        try:
            if removed.size:
                self._index.remove_ids(removed)
            if added.size:
                self._index.add_with_ids(vectors, added)
        except (RuntimeError, AssertionError) as exc:
            raise IndexUnavailableError("cannot update the FAISS index") from exc
        if remaining.size:
            self._by_resource[rid] = remaining
        else:
            self._by_resource.pop(rid, None)
        self._generation = generation
