"""Every connection of the SQLite stores keeps a small page cache
(``SQLITE_CACHE_KIB``, not SQLite's 2 MB default), including the one a vector
index opens again after ``reindex --rebuild`` swapped its file."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from cleveragents.domain.models.acms.backends import IndexUnit
from cleveragents.infrastructure.acms.faiss_vector import DB_FILENAME, FaissVectorBackend
from cleveragents.infrastructure.acms.sqlite_catalog import SqliteCatalog
from cleveragents.infrastructure.acms.sqlite_common import SQLITE_CACHE_KIB
from cleveragents.testing.backend_contracts import new_ulid

DEFAULT_KIB = -2000  # SQLite's own default


def test_the_stores_connections_keep_a_small_page_cache(tmp_path: Path) -> None:
    assert DEFAULT_KIB < SQLITE_CACHE_KIB < 0
    live = tmp_path / "live"
    vectors = FaissVectorBackend(live, dimension=2)
    rid = new_ulid()
    unit = IndexUnit(f"uko://{rid}/a.py#L1-L2", "a", {})
    vectors.upsert(rid, [unit], np.array([[1.0, 0.0]], dtype=np.float32))

    def cache_kib() -> int:
        return int(vectors._connection().execute("PRAGMA cache_size").fetchone()[0])

    assert cache_kib() == SQLITE_CACHE_KIB
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    shutil.copy(live / DB_FILENAME, fresh / DB_FILENAME)
    shutil.move(fresh / DB_FILENAME, live / DB_FILENAME)  # another inode
    first = vectors._conn
    assert cache_kib() == SQLITE_CACHE_KIB
    assert vectors._conn is not first  # it did open the new file
    vectors.close()

    catalog = SqliteCatalog(tmp_path / "catalog.sqlite3")
    assert catalog._conn.execute("PRAGMA cache_size").fetchone()[0] == SQLITE_CACHE_KIB
