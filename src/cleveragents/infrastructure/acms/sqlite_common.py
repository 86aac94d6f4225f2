"""How the SQLite stores (the catalog, the vector store) open their files.

One definition of the connection both use: autocommit (each store begins
its own transactions), a 30 s wait for another process's lock, usable from
any thread (each store serialises its calls under its own lock), WAL with
``synchronous=FULL`` (a commit that returned survives a power cut), and a
small page cache (:data:`SQLITE_CACHE_KIB`).  And the identity of a file,
by which a store notices that ``reindex --rebuild`` swapped another one in.
"""

from __future__ import annotations

import os
import sqlite3

__all__ = ["SQLITE_CACHE_KIB", "configure", "connect", "file_identity"]

#: ``PRAGMA cache_size`` of the catalog's and the vector store's connections
#: (negative: KiB).  SQLite's default is 2 MB per connection; their reads are
#: scans of a resource's rows or lookups by key (the OS caches the file) and
#: their writes go to the WAL: at 512 KiB indexing the standard library took
#: the same time with ~5 MB less at its memory peak.
SQLITE_CACHE_KIB = -512


def connect(target: str) -> sqlite3.Connection:
    """A connection to ``target`` (a path or ``":memory:"``) as the stores
    use it; :func:`configure` it next."""
    return sqlite3.connect(target, timeout=30.0, isolation_level=None, check_same_thread=False)


def configure(conn: sqlite3.Connection) -> None:
    """WAL (an in-memory database stays ``memory``), ``synchronous=FULL``
    and the page cache size.  Outside any transaction."""
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute(f"PRAGMA cache_size={SQLITE_CACHE_KIB}")


def file_identity(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    """(device, inode) of the file now at ``path``; None if there is none.

    Raises:
        OSError: the path cannot be examined (other than missing).
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino)
