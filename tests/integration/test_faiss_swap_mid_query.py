"""A vector query that meets a database swap (``reindex --rebuild``) while it
refreshes starts over on the new file: no error from the closed connection,
and no in-scope resource silently missing.  Real FAISS and SQLite."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from cleveragents.domain.models.acms.backends import IndexUnit
from cleveragents.infrastructure.acms.faiss_vector import DB_FILENAME, FaissVectorBackend
from cleveragents.testing.backend_contracts import new_ulid

DIM = 8


def _units(rid: str, tag: str, n: int = 3) -> tuple[list[IndexUnit], np.ndarray]:
    units = [IndexUnit(f"uko://{rid}/{tag}{i}.py#L1-L2", f"{tag} {i}", {}) for i in range(n)]
    rng = np.random.default_rng(len(tag))
    return units, rng.random((n, DIM), dtype=np.float32) + 0.1


def test_a_swap_while_refreshing_restarts_the_query(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    r1, r2 = new_ulid(), new_ulid()
    live = tmp_path / "live"
    backend = FaissVectorBackend(live, dimension=DIM)
    for rid, tag in ((r1, "a"), (r2, "b")):
        backend.upsert(rid, *_units(rid, tag))
    scope = frozenset({r1, r2})
    query = [1.0] * DIM
    assert len(backend.similarity_search(query, scope=scope, top_k=50)) == 6  # loads both
    # The rebuilt file: same rows, another inode.
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    shutil.copy(live / DB_FILENAME, fresh / DB_FILENAME)
    # Another writer commits to r1, so the next search refreshes r1 in a
    # transaction; the swap lands between the refresh's first look and it.
    other = FaissVectorBackend(live, dimension=DIM)
    other.upsert(r1, *_units(r1, "a"))
    other.close()
    swapped = []
    real = FaissVectorBackend._generations

    def swap_then_read(conn, rids):  # type: ignore[no-untyped-def]
        if not swapped:
            swapped.append(True)
            os.replace(fresh / DB_FILENAME, live / DB_FILENAME)
        return real(conn, rids)

    monkeypatch.setattr(FaissVectorBackend, "_generations", staticmethod(swap_then_read))
    hits = backend.similarity_search(query, scope=scope, top_k=50)
    assert swapped
    assert {h.uko_uri for h in hits} == {
        f"uko://{rid}/{tag}{i}.py#L1-L2" for rid, tag in ((r1, "a"), (r2, "b")) for i in range(3)
    }
    backend.close()
