"""``SELECT DISTINCT`` of an indexed column by jumping through its index.

SQLite answers ``SELECT DISTINCT resource_id FROM units`` by scanning the
whole index (every unit of every resource: ~1.5 ms for 22k units); this
recursive query asks the index for the next larger value instead, one
lookup per distinct value (~0.03 ms for one resource).  The column must
lead an index of the table and hold no NULL.

Also the page cache size of the SQLite stores (:data:`SQLITE_CACHE_KIB`).
"""

from __future__ import annotations

import re

__all__ = ["SQLITE_CACHE_KIB", "distinct_sql"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

#: ``PRAGMA cache_size`` of the catalog's and the vector store's connections
#: (negative: KiB).  SQLite's default is 2 MB per connection; their reads are
#: scans of a resource's rows or lookups by key (the OS caches the file) and
#: their writes go to the WAL: at 512 KiB indexing the standard library took
#: the same time with ~5 MB less at its memory peak.
SQLITE_CACHE_KIB = -512


def distinct_sql(table: str, column: str) -> str:
    """The query for the distinct values of ``table.column`` (one per row)."""
    if not (_NAME.fullmatch(table) and _NAME.fullmatch(column)):
        raise ValueError(f"not a plain SQL name: {table!r}.{column!r}")
    return (
        f"WITH RECURSIVE seen(v) AS ("
        f"SELECT (SELECT MIN({column}) FROM {table}) "
        f"UNION ALL SELECT (SELECT MIN({column}) FROM {table} WHERE {column} > seen.v) "
        f"FROM seen WHERE seen.v IS NOT NULL"
        f") SELECT v FROM seen WHERE v IS NOT NULL"
    )
