"""FAISS adapter for :class:`~cleveragents.domain.models.acms.backends.VectorIndex`.

Storage: a SQLite database (``<index_path>/vectors.sqlite3``, WAL,
``synchronous=FULL``) is the source of truth.  Table ``units`` holds one row
per unit: an ``INTEGER PRIMARY KEY AUTOINCREMENT`` id (AUTOINCREMENT: an id is
never handed out twice, not even after the highest row is deleted), its URI,
resource, content, JSON metadata and its L2-normalised float32 embedding.
Table ``resources`` holds one row per resource that has units: its
*generation*, the value of the global write counter (``meta.generation``)
at the last write to that resource.  A counter that only grows makes a
generation name one state of one resource, even across its deletion.
Table ``removed`` logs the ids each write removed, per resource, from
generation ``resources.log_from`` on; it is emptied (and ``log_from``
moved) once it holds more than ``LOG_LIMIT`` ids of one resource.

In memory: one ``IndexFlatIP`` per *loaded* resource holding that resource's
rows in id order, next to a sorted ``int64`` array of their SQLite ids.
Loading follows the scope: opening reads no vectors, a search loads (once,
then keeps) only the in-scope resources it has not loaded yet, and a write
touches the memory of its own resource only if that resource is loaded.
Loaded resources are kept up to ``cache_bytes`` (least recently searched
dropped first, never one the current search needs).  A
scoped search scans exactly the in-scope rows, one flat scan per in-scope
resource, and merges the per-resource top-k exactly.  Content and metadata
stay in SQLite and are read by primary key for the hits only.

Change detection is per resource and cheap.  ``PRAGMA data_version`` (no
transaction) changes only when another connection commits; each loaded
resource remembers the version at which it was last known current, so a
search whose in-scope resources are all current costs one pragma.  Otherwise
it reads the generations of the in-scope resources only (one indexed query,
outside any transaction: when another resource moved, that is all it costs)
and brings each one that moved up to date, in a read transaction, from the
ids alone: ids are never
reused and a unit's row never changes under its id, so the rows to drop are
the ids removed since (from the log; a reader older than the log scans the
resource's ids instead), and the rows to add are those above the highest
loaded id (only their blobs are read).  A commit to resource A thus never
reloads B, here or in another process, and costs A's change (plus FAISS's
compaction of A's flat index when rows are removed).  A hit whose row has
vanished (a concurrent delete) is the only possible disagreement: the
search then looks again.

Results are exact: equal to brute force over the in-scope rows, ties by URI
(also at the ``top_k`` boundary).  Everything runs under one ``RLock``: FAISS
forbids a search concurrent with add/remove, and the SQLite connection is
shared.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sqlite3
import threading
import types
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import numpy.typing as npt

from cleveragents._logging import get_logger
from cleveragents.domain.models.acms.backends import (
    IndexUnit,
    VectorResult,
    validate_embedding,
    validate_positive_int,
)
from cleveragents.domain.models.acms.errors import REBUILD_HINT, IndexUnavailableError
from cleveragents.domain.models.acms.uko import resource_id_of
from cleveragents.domain.models.acms.ulids import canonical_ulid, validate_scope
from cleveragents.infrastructure.acms.sqlite_common import configure, connect, file_identity
from cleveragents.infrastructure.acms.sqlite_distinct import distinct_sql

__all__ = ["DimensionMismatchError", "FaissVectorBackend"]

DB_FILENAME = "vectors.sqlite3"


class DimensionMismatchError(ValueError):
    """The index at the path holds vectors of another dimension."""


# The default budget of loaded vectors: a long-lived host serving many
# projects keeps this much, not every resource it ever searched.
DEFAULT_CACHE_BYTES = 512 * 1024 * 1024

# Resources looked up and found empty are remembered (so a scope naming them
# costs no query) up to this many; past it the memory of them is dropped.
_ABSENT_LIMIT = 4096

_log = get_logger("cleveragents.acms.faiss_vector")

_RESOURCE_IDS = distinct_sql("units", "resource_id")  # through units_resource_id

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
CREATE TABLE IF NOT EXISTS resources (
    resource_id TEXT PRIMARY KEY,
    generation  INTEGER NOT NULL,
    log_from    INTEGER NOT NULL,
    logged      INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS removed (
    resource_id TEXT NOT NULL,
    generation  INTEGER NOT NULL,
    id          INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS removed_resource ON removed (resource_id, generation);
"""

# 2: tables ``resources`` and ``removed``.  A database of schema 1 gets one
# row per resource that has units, once, when first opened.
_SCHEMA_VERSION = 2

# A resource's removal log is emptied once it holds more ids than this (or
# than the resource has rows); readers loaded before that re-scan its ids.
LOG_LIMIT = 4096

_IdArray = npt.NDArray[np.int64]
_Matrix = npt.NDArray[np.float32]
_Mask = npt.NDArray[np.bool_]


def _ids_of(text: str | None) -> _IdArray:
    """Ids from SQLite's ``group_concat`` (one string: far fewer Python
    objects than one row per id)."""
    if not text:
        return np.empty(0, dtype=np.int64)
    return np.array(text.split(","), dtype=np.int64)


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


def _faiss() -> types.ModuleType:
    """The ``faiss`` module, imported when a resource is first loaded: a
    process that only writes or counts vectors (SQLite) never loads it
    (~0.2 s of a CLI start)."""
    import faiss

    return faiss


class _Resource:
    """One loaded resource: a flat index (row order = id order), the ids, the
    generation they reflect, and the ``data_version`` at which that
    generation was last known to be the stored one (None: check it)."""

    __slots__ = ("checked", "generation", "ids", "index")

    def __init__(self, dimension: int, generation: int, checked: int | None) -> None:
        self.index: Any = _faiss().IndexFlatIP(dimension)
        self.ids: _IdArray = np.empty(0, dtype=np.int64)
        self.generation = generation
        self.checked = checked


class _Stale(Exception):
    """A hit's row vanished from SQLite: another connection deleted it."""


class FaissVectorBackend:
    """Exact cosine-similarity search over FAISS, persisted in SQLite.

    Args:
        index_path: directory holding ``vectors.sqlite3`` (created if missing),
            or None for an index that lives in memory only.
        dimension: embedding dimension; reopening an index with another
            dimension raises ``ValueError``.
        cache_bytes: how many bytes of loaded vectors (and their ids) to
            keep: past it, the least recently searched resources outside the
            current search's scope are dropped (a later search reloads them).
            A scope larger than this is still searched whole.

    Raises:
        TypeError / ValueError: invalid dimension or ``cache_bytes``, or a
            dimension mismatch.
        IndexUnavailableError: the directory or database cannot be opened.
    """

    def __init__(
        self,
        index_path: str | os.PathLike[str] | None = None,
        *,
        dimension: int,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        self._dimension = validate_positive_int(dimension, "dimension")
        self._cache_bytes = validate_positive_int(cache_bytes, "cache_bytes")
        self._lock = threading.RLock()
        # Loaded resources (each with rows), least recently searched first,
        # and the resources found without rows, with the ``data_version`` at
        # which they were found so.
        self._resources: OrderedDict[str, _Resource] = OrderedDict()
        self._absent: dict[str, int] = {}
        self._over_budget = False
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
            conn = connect(target)
        except (OSError, sqlite3.Error) as exc:
            raise IndexUnavailableError(
                f"cannot open vector index at {index_path}" + REBUILD_HINT
            ) from exc
        self._conn = conn
        try:
            if self._db_path is not None:
                conn.execute("SELECT 1")  # sqlite creates the file lazily
                self._db_identity = self._identity()
            self._init_db(conn)
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
            self._forget()
            if conn is not None:
                try:
                    conn.close()
                except sqlite3.Error as exc:
                    raise IndexUnavailableError(
                        f"cannot close the vector index {self._db_path}: {exc}"
                    ) from exc

    def loaded_resources(self) -> frozenset[str]:
        """ULIDs of the resources whose rows are held in memory.

        Opening loads none; a search loads its in-scope resources that have
        rows and keeps them; a write never loads a resource.
        """
        with self._lock:
            return frozenset(self._resources)

    def loaded_bytes(self) -> int:
        """Bytes of the loaded resources' vectors and ids (what ``cache_bytes`` bounds)."""
        with self._lock:
            return sum(self._bytes(res) for res in self._resources.values())

    def _bytes(self, res: _Resource) -> int:
        return int(res.ids.size) * (4 * self._dimension + 8)

    def _trim(self, keep: Iterable[str]) -> None:
        """Drop least recently searched resources outside ``keep`` while the
        loaded bytes exceed the budget."""
        held = sum(self._bytes(res) for res in self._resources.values())
        if held > self._cache_bytes:
            kept = set(keep)
            for rid in list(self._resources):
                if held <= self._cache_bytes:
                    break
                if rid not in kept:
                    held -= self._bytes(self._resources.pop(rid))
                    _log.debug("faiss_vector.evicted", resource_id=rid, loaded_bytes=held)
        self._over_budget = held > self._cache_bytes

    def _forget(self) -> None:
        self._resources = OrderedDict()
        self._absent = {}

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
            configure(conn)
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
                schema = cur.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
                if schema is None:
                    # Schema 1 (or a new database): every resource with units
                    # gets a generation row.  Reads the resource_id index once.
                    cur.execute(
                        "INSERT OR IGNORE INTO resources"
                        " (resource_id, generation, log_from, logged)"
                        " SELECT resource_id, g.value, g.value, 0"
                        " FROM units, (SELECT value FROM meta WHERE key = 'generation') AS g"
                        " GROUP BY resource_id"
                    )
                    cur.execute(
                        "INSERT INTO meta (key, value) VALUES ('schema', ?)", (_SCHEMA_VERSION,)
                    )
        except sqlite3.Error as exc:
            raise IndexUnavailableError(
                f"cannot initialise the vector index at {self._db_path}: {exc}" + REBUILD_HINT
            ) from exc
        stored = row[0]
        if stored != self._dimension:
            raise DimensionMismatchError(
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
            return file_identity(self._db_path)
        except OSError as exc:
            raise IndexUnavailableError(f"cannot stat {self._db_path}: {exc}") from exc

    def _reopen(self) -> None:
        """The database file was replaced (``reindex --rebuild`` swapped a new
        index in): drop the old connection and load the new file."""
        assert self._db_path is not None and self._conn is not None
        try:
            conn = connect(str(self._db_path))
        except sqlite3.Error as exc:
            raise IndexUnavailableError(f"cannot reopen {self._db_path}") from exc
        with contextlib.suppress(sqlite3.Error):
            self._conn.close()
        self._conn = conn
        self._db_identity = self._identity()
        self._forget()  # the new file's rows load on demand
        self._init_db(conn)

    # ------------------------------------------------------------ in-memory state

    def _refresh(self, wanted: frozenset[str]) -> tuple[sqlite3.Connection, list[_Resource]]:
        """Bring the in-scope resources up to date; return the connection and
        the loaded in-scope resources (those with rows).

        Only resources in ``wanted`` are looked at.  ``PRAGMA data_version``
        is read before the generations, so a commit in between only causes
        one more check on the next search.
        """
        conn = self._connection()
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        stale = [
            rid
            for rid in wanted
            if (
                self._resources[rid].checked != version
                if rid in self._resources
                else self._absent.get(rid) != version
            )
        ]
        if stale:
            # Most often another resource moved: one autocommit read of the
            # in-scope generations shows that nothing here did, and costs no
            # transaction.  Only resources that did move are synced, in a
            # read transaction that reads their generations again.
            moved = [
                rid
                for rid, stored in self._generations(conn, stale).items()
                if not self._confirm(rid, stored[0], version)
            ]
            if moved:
                with self._transaction() as cur:
                    stored = self._generations(cur, moved)
                    for rid in moved:
                        generation, log_from = stored[rid]
                        self._sync(cur, rid, generation, log_from, version)
                self._trim(wanted)
        if self._over_budget:  # a larger scope held more than the budget
            self._trim(wanted)
        present = []
        for rid in wanted:
            res = self._resources.get(rid)
            if res is not None:
                self._resources.move_to_end(rid)
                present.append(res)
        return conn, present

    @staticmethod
    def _generations(
        db: sqlite3.Connection | sqlite3.Cursor, rids: list[str]
    ) -> dict[str, tuple[int | None, int | None]]:
        """(generation, log_from) of each of ``rids``; (None, None): no rows."""
        if len(rids) == 1:  # the common scope: one indexed lookup, no JSON
            row = db.execute(
                "SELECT generation, log_from FROM resources WHERE resource_id = ?", rids
            ).fetchone()
            return {rids[0]: (None, None) if row is None else (row[0], row[1])}
        found = {
            row[0]: (row[1], row[2])
            for row in db.execute(
                "SELECT resource_id, generation, log_from FROM resources"
                " WHERE resource_id IN (SELECT value FROM json_each(?))",
                (json.dumps(rids),),
            )
        }
        return {rid: found.get(rid, (None, None)) for rid in rids}

    def _confirm(self, rid: str, generation: int | None, version: int) -> bool:
        """Mark ``rid`` current at ``version`` if its memory already matches
        the stored ``generation``; False if it must be synced."""
        res = self._resources.get(rid)
        if res is not None:
            if res.generation != generation:
                return False
            res.checked = version
            return True
        if generation is not None:
            return False
        if len(self._absent) >= _ABSENT_LIMIT:
            self._absent = {}
        self._absent[rid] = version
        return True

    def _sync(
        self,
        cur: sqlite3.Cursor,
        rid: str,
        generation: int | None,
        log_from: int | None,
        version: int,
    ) -> None:
        """Make ``rid``'s memory equal to its stored ``generation`` (None: no
        rows), reading from the caller's read transaction only what changed:
        the ids removed since (from the removal log, complete after
        generation ``log_from``; else from a scan of the resource's ids) and
        the rows added since (ids above the highest loaded one)."""
        res = self._resources.get(rid)
        if generation is None:
            self._resources.pop(rid, None)
            if len(self._absent) >= _ABSENT_LIMIT:
                self._absent = {}
            self._absent[rid] = version
            return
        self._absent.pop(rid, None)
        if res is not None and res.generation == generation:
            res.checked = version
            return
        # Leave nothing half-updated behind if this fails.
        self._resources.pop(rid, None)
        if res is None:
            res = _Resource(self._dimension, generation, version)
        removed, via = 0, "load"
        last = int(res.ids[-1]) if res.ids.size else 0
        if res.ids.size:
            gone, via = self._gone(cur, rid, res, log_from)
            removed = int(np.count_nonzero(gone))
            if removed == res.ids.size:
                res = _Resource(self._dimension, generation, version)
            elif removed:
                try:
                    # Rows are compacted in place, keeping their order.
                    res.index.remove_ids(_faiss().IDSelectorBatch(np.flatnonzero(gone)))
                except (RuntimeError, AssertionError) as exc:
                    raise IndexUnavailableError(
                        f"cannot update the FAISS index {self._db_path}: {exc}"
                    ) from exc
                res.ids = res.ids[~gone]
        ids: list[int] = []
        blobs: list[bytes] = []
        width = 4 * self._dimension
        cur.execute(
            "SELECT id, embedding FROM units WHERE resource_id = ? AND id > ? ORDER BY id",
            (rid, last),
        )
        while batch := cur.fetchmany(4096):
            for unit_id, blob in batch:
                if len(blob) != width:
                    raise IndexUnavailableError(
                        "the vector index holds an embedding of the wrong size"
                    )
                ids.append(unit_id)
                blobs.append(blob)
        if ids:
            vectors = np.frombuffer(b"".join(blobs), dtype=np.float32)
            if not np.isfinite(vectors).all():  # would make FAISS return label -1
                raise IndexUnavailableError("the vector index holds a non-finite embedding")
            self._add(res, np.array(ids, dtype=np.int64), vectors.reshape(len(ids), -1))
        res.generation, res.checked = generation, version
        if res.ids.size:
            self._resources[rid] = res
        else:  # a generation row without units: written behind this adapter
            self._absent[rid] = version
        _log.debug(
            "faiss_vector.loaded",
            resource_id=rid,
            added=len(ids),
            removed=removed,
            rows=int(res.ids.size),
            generation=generation,
            via=via,
        )

    @staticmethod
    def _gone(
        cur: sqlite3.Cursor, rid: str, res: _Resource, log_from: int | None
    ) -> tuple[_Mask, str]:
        """Which of ``res``'s loaded rows were removed since it was loaded,
        and how that was found (``"log"`` or ``"scan"``).

        The removal log answers in O(removed) when it covers every write
        after ``res.generation``.  Otherwise the resource's ids up to the
        highest loaded one are scanned: ids only grow, so those are the
        loaded ids still alive.
        """
        if log_from is not None and res.generation >= log_from:
            (text,) = cur.execute(
                "SELECT group_concat(id) FROM removed WHERE resource_id = ? AND generation > ?",
                (rid, res.generation),
            ).fetchone()
            return np.isin(res.ids, _ids_of(text)), "log"
        (text,) = cur.execute(
            "SELECT group_concat(id) FROM units WHERE resource_id = ? AND id <= ?",
            (rid, int(res.ids[-1])),
        ).fetchone()
        return ~np.isin(res.ids, _ids_of(text)), "scan"

    @staticmethod
    def _add(res: _Resource, ids: _IdArray, vectors: _Matrix) -> None:
        """Append rows; ``ids`` are above every loaded id (ids only grow)."""
        try:
            res.index.add(vectors)
        except (RuntimeError, AssertionError) as exc:
            raise IndexUnavailableError(f"cannot build the FAISS index: {exc}") from exc
        res.ids = np.concatenate([res.ids, ids])

    @staticmethod
    def _log(
        cur: sqlite3.Cursor,
        rid: str,
        state: tuple[int, int] | None,
        generation: int,
        removed: list[int],
    ) -> None:
        """Record a write of ``rid`` at ``generation``: its generation row and
        the ids it removed (the log readers refresh from)."""
        if state is None:  # no rows before this write: nothing removed, log starts now
            cur.execute(
                "INSERT INTO resources (resource_id, generation, log_from, logged)"
                " VALUES (?, ?, ?, 0)",
                (rid, generation, generation),
            )
            return
        logged = state[1] + len(removed)
        if logged > LOG_LIMIT:
            # Start the log afresh; readers loaded before this write re-scan.
            cur.execute("DELETE FROM removed WHERE resource_id = ?", (rid,))
            cur.execute(
                "UPDATE resources SET generation = ?, log_from = ?, logged = 0"
                " WHERE resource_id = ?",
                (generation, generation, rid),
            )
            return
        if removed:
            cur.execute(
                "INSERT INTO removed (resource_id, generation, id)"
                " SELECT ?, ?, value FROM json_each(?)",
                (rid, generation, json.dumps(removed)),
            )
        cur.execute(
            "UPDATE resources SET generation = ?, logged = ? WHERE resource_id = ?",
            (generation, logged, rid),
        )

    # ------------------------------------------------------------ read side

    def _query_vector(self, embedding: object) -> npt.NDArray[np.float64]:
        """The validated query as float64; a fast path for plain float input.

        Equivalent to ``validate_embedding`` (which reports every error): a
        list or tuple of exact ``float`` values, or a 1-D float32/float64
        array, of the right length and finite, is converted in bulk.
        """
        values: npt.NDArray[np.float64] | None = None
        if type(embedding) is list or type(embedding) is tuple:
            if set(map(type, embedding)) == {float}:
                values = np.array(embedding, dtype=np.float64)
        elif (
            isinstance(embedding, np.ndarray)
            and embedding.ndim == 1
            and embedding.dtype in (np.float32, np.float64)
        ):
            values = embedding.astype(np.float64)
        if values is None or values.shape[0] != self._dimension or not np.isfinite(values).all():
            values = np.array(validate_embedding(embedding, self._dimension), dtype=np.float64)
        return values

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
        values = self._query_vector(embedding)
        validate_positive_int(top_k, "top_k")
        wanted = validate_scope(scope)
        # As _normalise_rows, for one row: scale by the peak first.
        peak = float(np.max(np.abs(values)))
        if not peak > 0.0:
            raise ValueError("embedding must not be the zero vector")
        scaled = values / peak
        query = (scaled / math.sqrt(float(scaled @ scaled))).astype(np.float32).reshape(1, -1)
        if not wanted:
            return []
        present: list[_Resource] = []
        with self._lock:
            for _ in range(5):
                try:
                    conn, present = self._refresh(wanted)
                    if conn is not self._conn:
                        # The file was swapped (a rebuild) while refreshing:
                        # the old connection is closed and what was loaded
                        # from it forgotten.  Start over on the new file.
                        continue
                    hits = self._search(conn, query, present, top_k)
                    if not hits:
                        return []
                    rows = self._rows(conn, [unit_id for unit_id, _ in hits])
                except _Stale:
                    self._recheck(present)
                    continue
                except sqlite3.Error as exc:
                    if conn is not self._conn:
                        continue  # swapped under this pass, as above
                    raise IndexUnavailableError(
                        f"cannot read the vector index {self._db_path}: {exc}"
                    ) from exc
                if len(rows) == len(hits):
                    break
                # A hit was deleted by another connection since the check.
                self._recheck(present)
            else:
                raise IndexUnavailableError("the FAISS index and its database disagree")
        results: list[VectorResult] = []
        for unit_id, score in hits:
            row = rows[unit_id]
            # Most units carry no metadata: skip the JSON parser for them.
            metadata: dict[str, str] = {} if row[3] == "{}" else json.loads(row[3])
            metadata["resource_id"] = row[1]
            results.append(VectorResult(row[0], row[2], max(0.0, min(1.0, score)), metadata))
        results.sort(key=lambda r: (-r.score, r.uko_uri))
        return results

    @staticmethod
    def _rows(conn: sqlite3.Connection, ids: list[int]) -> dict[int, tuple[Any, ...]]:
        """id -> (uri, resource_id, content, metadata) of the rows that exist."""
        if len(ids) <= 256:
            sql = (
                "SELECT id, uri, resource_id, content, metadata FROM units WHERE id IN ("
                + ",".join("?" * len(ids))
                + ")"
            )
            found = conn.execute(sql, ids).fetchall()
        else:
            found = conn.execute(
                "SELECT id, uri, resource_id, content, metadata FROM units"
                " WHERE id IN (SELECT value FROM json_each(?))",
                (json.dumps(ids),),
            ).fetchall()
        return {row[0]: row[1:] for row in found}

    @staticmethod
    def _recheck(present: list[_Resource]) -> None:
        for res in present:
            res.checked = None

    def _search(
        self,
        conn: sqlite3.Connection,
        query: _Matrix,
        present: list[_Resource],
        top_k: int,
    ) -> list[tuple[int, float]]:
        """Exact search over the in-scope rows; (id, cosine) pairs, best first.

        One flat scan per in-scope resource (its own top k+1, exact), then a
        merge.  The extra row per resource shows whether a row left out ties
        with the k-th best: every row left out scores at most the (k+1)-th
        best of the merge.  On such a tie every row at or above that score is
        collected and the boundary is decided by URI, as the API promises.
        """
        if not present:
            return []
        k = min(top_k, sum(int(res.ids.size) for res in present))
        faiss = _faiss()
        qptr = faiss.swig_ptr(query)
        scores: list[_Matrix] = []
        labels: list[_IdArray] = []
        try:
            # One query is memory-bound: extra OpenMP threads only slow it down.
            faiss.omp_set_num_threads(1)
            for res in present:
                n = int(res.ids.size)
                k_r = min(k + 1, n)
                dist = np.empty(k_r, dtype=np.float32)
                pos = np.empty(k_r, dtype=np.int64)
                res.index.search_c(1, qptr, k_r, faiss.swig_ptr(dist), faiss.swig_ptr(pos), None)
                scores.append(dist)
                labels.append(res.ids[pos])
        except (RuntimeError, AssertionError, IndexError) as exc:
            raise IndexUnavailableError("FAISS search failed") from exc
        if len(present) == 1:  # FAISS returns one query's hits best first
            top_scores, top_ids = scores[0], labels[0]
            order = np.arange(top_scores.size)
        else:
            top_scores = np.concatenate(scores)
            top_ids = np.concatenate(labels)
            order = np.argsort(-top_scores, kind="stable")
        if k < top_scores.size and top_scores[order[k]] == top_scores[order[k - 1]]:
            return self._search_ties(conn, query, present, k, float(top_scores[order[k - 1]]))
        chosen = order[:k]
        return [
            (int(unit_id), float(score))
            for unit_id, score in zip(top_ids[chosen], top_scores[chosen], strict=True)
        ]

    def _search_ties(
        self,
        conn: sqlite3.Connection,
        query: _Matrix,
        present: list[_Resource],
        k: int,
        kth: float,
    ) -> list[tuple[int, float]]:
        """Rows tie with the k-th best across the boundary: rank every row
        scoring at least ``kth`` (less a rounding margin) by (-score, URI)."""
        radius = kth - 1e-6
        found: list[tuple[int, float]] = []
        try:
            for res in present:
                lims, dist, pos = res.index.range_search(query, radius)
                found += zip(res.ids[pos[lims[0] : lims[1]]].tolist(), dist.tolist(), strict=True)
        except (RuntimeError, AssertionError, IndexError) as exc:
            raise IndexUnavailableError("FAISS search failed") from exc
        uris = dict(
            conn.execute(
                "SELECT id, uri FROM units WHERE id IN (SELECT value FROM json_each(?))",
                (json.dumps([unit_id for unit_id, _ in found]),),
            ).fetchall()
        )
        if len(uris) != len(found):
            raise _Stale
        found.sort(key=lambda hit: (-hit[1], uris[hit[0]]))
        return found[:k]

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

    def unit_count(self, resource_id: str) -> int:
        """How many units a resource has (as committed in SQLite; no vector
        and no URI is read)."""
        rid = canonical_ulid(resource_id)
        count: int = self._query("SELECT COUNT(*) FROM units WHERE resource_id = ?", rid)[0][0]
        return count

    def resource_ids(self) -> set[str]:
        """ULIDs of the resources that have at least one unit."""
        return {row[0] for row in self._query(_RESOURCE_IDS)}

    def _query(self, sql: str, *args: object) -> list[Any]:
        with self._lock:
            try:
                return self._connection().execute(sql, args).fetchall()
            except sqlite3.Error as exc:
                raise IndexUnavailableError(
                    f"cannot read the vector index {self._db_path}: {exc}"
                ) from exc

    def _write(
        self,
        rid: str,
        removals: list[str] | None,
        units: list[IndexUnit],
        vectors: _Matrix,
    ) -> None:
        """Commit one change to SQLite, then mirror it in memory if ``rid`` is
        loaded (a write never loads a resource).

        ``removals`` None deletes every unit of ``rid``.  Every URI named
        belongs to ``rid`` (checked by the callers), so only ``rid`` changes.
        """
        replaced = [unit.uko_uri for unit in units]
        with self._lock:
            try:
                with self._transaction("BEGIN IMMEDIATE") as cur:
                    state = cur.execute(
                        "SELECT generation, logged FROM resources WHERE resource_id = ?", (rid,)
                    ).fetchone()
                    before = None if state is None else int(state[0])
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
                    (generation,) = cur.execute(
                        "UPDATE meta SET value = value + 1 WHERE key = 'generation' RETURNING value"
                    ).fetchone()
                    self._log(cur, rid, state, generation, [row[0] for row in removed])
                    if (
                        not added
                        and not cur.execute(
                            "SELECT 1 FROM units WHERE resource_id = ? LIMIT 1", (rid,)
                        ).fetchone()
                    ):
                        cur.execute("DELETE FROM resources WHERE resource_id = ?", (rid,))
                        cur.execute("DELETE FROM removed WHERE resource_id = ?", (rid,))
                        generation = None
            except sqlite3.Error as exc:
                raise IndexUnavailableError(
                    f"cannot write the vector index {self._db_path}: {exc}"
                ) from exc
            self._apply(
                rid,
                before,
                generation,
                np.array([row[0] for row in removed], dtype=np.int64),
                np.array(added, dtype=np.int64),
                vectors,
            )

    def _apply(
        self,
        rid: str,
        before: int | None,
        generation: int | None,
        removed: _IdArray,
        added: _IdArray,
        vectors: _Matrix,
    ) -> None:
        """Mirror a committed write of ``rid`` (from generation ``before`` to
        ``generation``) in memory, if ``rid`` is loaded at ``before``.

        Otherwise (someone else wrote ``rid`` since it was loaded, or it has
        no rows left) its memory is dropped; the next search that needs it
        reads it again.  SQLite is the truth, so a failure here only drops
        the memory too.
        """
        self._absent.pop(rid, None)
        res = self._resources.pop(rid, None)
        if res is None or generation is None or res.generation != before:
            return
        try:
            if removed.size:
                gone = np.isin(res.ids, removed)
                if gone.all():
                    res = _Resource(self._dimension, generation, res.checked)
                elif gone.any():
                    # Rows are compacted in place, keeping their order.
                    res.index.remove_ids(_faiss().IDSelectorBatch(np.flatnonzero(gone)))
                    res.ids = res.ids[~gone]
            if added.size:
                # AUTOINCREMENT ids only grow: appending keeps ``ids`` sorted.
                self._add(res, added, vectors)
        except (RuntimeError, AssertionError, IndexUnavailableError) as exc:
            _log.warning("faiss_vector.apply_failed", resource_id=rid, error=str(exc))
            return
        res.generation = generation
        self._resources[rid] = res
        self._trim({rid})
