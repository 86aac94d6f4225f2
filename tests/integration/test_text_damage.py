"""A text shard whose segment bytes were damaged in place (a disk, a bad
copy) is an unavailable index naming the repair, never "invalid query":
that is the caller's mistake (exit 2, HTTP 400) and led no one to
``--rebuild``.  A reviewer's run zeroed 4 KB of a ``.pos`` file; a phrase
over the damaged postings failed "invalid query: An IO error occurred:
'Reach end of buffer while reading VInt'", or panicked inside the engine.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from cleveragents.domain.models.acms.backends import IndexUnit
from cleveragents.domain.models.acms.errors import IndexUnavailableError, QueryError
from cleveragents.infrastructure.acms.tantivy_text import TantivyTextBackend

RID = "01JD5TD11B0000000000000000"
WORDS = [f"w{n}" for n in range(300)]


def test_damaged_postings_are_an_unavailable_index_not_a_bad_query(tmp_path: Path) -> None:
    rng = random.Random(7)
    units = [
        IndexUnit(
            f"uko://{RID}/f{i}.txt",
            " ".join(rng.choice(WORDS) for _ in range(400)),
            {"path": f"f{i}.txt"},
        )
        for i in range(60)
    ]
    root = tmp_path / "text"
    backend = TantivyTextBackend(root)
    backend.upsert(RID, units)
    backend.close()
    postings = max(root.glob("**/*.pos"), key=lambda p: p.stat().st_size)
    size = postings.stat().st_size
    with postings.open("r+b") as fh:  # the middle half zeroed, the footer kept
        fh.seek(size // 4)
        fh.write(b"\0" * (size // 2))
    backend = TantivyTextBackend(root)
    unavailable = []
    try:
        for i in range(0, 200, 2):
            query = f'"{WORDS[i]} {WORDS[i + 1]}"~2'
            try:
                backend.search(query, scope=frozenset({RID}), syntax="tantivy")
            except QueryError as exc:
                pytest.fail(f"{query}: damage reported as a bad query: {exc}")
            except IndexUnavailableError as exc:
                assert RID in str(exc) and "--rebuild" in str(exc)
                unavailable.append(query)
    finally:
        backend.close()
    assert unavailable  # the damage was read
