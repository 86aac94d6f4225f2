"""The index-jumping DISTINCT query equals ``SELECT DISTINCT`` (the oracle)."""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cleveragents.infrastructure.acms.sqlite_distinct import distinct_sql


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.text(max_size=4), max_size=60), without_rowid=st.booleans())
def test_equals_select_distinct(values: list[str], without_rowid: bool) -> None:
    conn = sqlite3.connect(":memory:")
    if without_rowid:
        conn.execute(
            "CREATE TABLE t (rid TEXT NOT NULL, n INTEGER, PRIMARY KEY (rid, n)) WITHOUT ROWID"
        )
    else:
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, rid TEXT NOT NULL, n INTEGER)")
        conn.execute("CREATE INDEX t_rid ON t (rid)")
    conn.executemany("INSERT INTO t (rid, n) VALUES (?, ?)", [(v, i) for i, v in enumerate(values)])
    got = [row[0] for row in conn.execute(distinct_sql("t", "rid"))]
    want = sorted({row[0] for row in conn.execute("SELECT DISTINCT rid FROM t")})
    assert got == want  # each once, in index order


@pytest.mark.parametrize("name", ["t; DROP TABLE t", "", "1t", "a.b"])
def test_refuses_names_that_are_not_plain(name: str) -> None:
    with pytest.raises(ValueError, match="plain SQL name"):
        distinct_sql(name, "rid")
    with pytest.raises(ValueError, match="plain SQL name"):
        distinct_sql("t", name)
