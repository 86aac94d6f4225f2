"""Live indexes are links into generations; a rebuild relinks them atomically,
and a reader that follows the swap never harms the new index."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from cleveragents.domain.models.acms.backends import IndexUnit
from cleveragents.domain.models.acms.indexing import FileRecord
from cleveragents.domain.models.acms.uko import unit_uri
from cleveragents.infrastructure.acms.faiss_vector import FaissVectorBackend
from cleveragents.infrastructure.acms.index_layout import (
    GENERATIONS,
    collect_garbage,
    install,
    live_index_path,
)
from cleveragents.infrastructure.acms.sqlite_catalog import SqliteCatalog
from cleveragents.testing.backend_contracts import new_ulid

DIM = 4


def unit(rid: str, name: str) -> IndexUnit:
    return IndexUnit(unit_uri(rid, name, "L1-L1"), name)


def test_first_use_creates_a_link_into_a_generation(tmp_path: Path) -> None:
    live = live_index_path(tmp_path, "vectors")
    assert live.is_symlink() and live.is_dir()
    assert Path(os.readlink(live)).parts[0] == GENERATIONS
    assert live_index_path(tmp_path, "vectors") == live  # idempotent


def test_reader_following_a_rebuild_keeps_the_new_wal(tmp_path: Path) -> None:
    """A reader with the old index open follows the swap on its next query;
    closing its old connection leaves the new index and its WAL intact, so a
    write committed after the swap (still in the WAL) is seen by everyone."""
    rid = new_ulid()
    live = live_index_path(tmp_path, "vectors")
    reader = FaissVectorBackend(live, dimension=DIM)
    writer = FaissVectorBackend(live, dimension=DIM)
    writer.upsert(rid, [unit(rid, "old.py")], np.ones((1, DIM), dtype=np.float32))
    writer.close()

    fresh = tmp_path / "staging" / "vectors"
    built = FaissVectorBackend(fresh, dimension=DIM)
    built.upsert(rid, [unit(rid, "new.py")], np.ones((1, DIM), dtype=np.float32))
    built.close()
    assert install(tmp_path, "vectors", fresh, "G2") is None

    late_writer = FaissVectorBackend(live, dimension=DIM)  # keeps its WAL open
    late_writer.upsert(rid, [unit(rid, "late.py")], np.ones((1, DIM), dtype=np.float32))
    # The reader notices the swap, reopens, and closes its old connection.
    seen = {r.content for r in reader.similarity_search([1.0] * DIM, scope=frozenset({rid}))}
    assert seen == {"new.py", "late.py"}
    reader.close()
    fresh_reader = FaissVectorBackend(live, dimension=DIM)
    found = fresh_reader.similarity_search([1.0] * DIM, scope=frozenset({rid}))
    assert {r.content for r in found} == {"new.py", "late.py"}
    fresh_reader.close()
    late_writer.close()


def test_catalog_follows_a_rebuild(tmp_path: Path) -> None:
    rid = new_ulid()
    live = live_index_path(tmp_path, "catalog")
    catalog = SqliteCatalog(live / "catalog.sqlite3")
    catalog.put(rid, [FileRecord("old.py", 1, 1, "a")])
    fresh = tmp_path / "staging" / "catalog"
    built = SqliteCatalog(fresh / "catalog.sqlite3")
    built.put(rid, [FileRecord("new.py", 1, 1, "b")])
    built.close()
    install(tmp_path, "catalog", fresh, "G2")
    assert set(catalog.records(rid)) == {"new.py"}
    catalog.close()


def test_garbage_is_every_generation_no_link_points_into(tmp_path: Path) -> None:
    live_index_path(tmp_path, "text")
    fresh = tmp_path / "staging" / "text"
    fresh.mkdir(parents=True)
    (fresh / "marker").write_text("new")
    install(tmp_path, "text", fresh, "G2")
    (tmp_path / GENERATIONS / "ORPHAN").mkdir()
    collect_garbage(tmp_path, ("text",))
    assert sorted(p.name for p in (tmp_path / GENERATIONS).iterdir()) == ["G2"]
    assert (tmp_path / "text" / "marker").read_text() == "new"


def test_a_real_directory_of_the_older_layout_is_converted(tmp_path: Path) -> None:
    (tmp_path / "graph").mkdir()
    (tmp_path / "graph" / "old").write_text("old")
    fresh = tmp_path / "staging" / "graph"
    fresh.mkdir(parents=True)
    displaced = install(tmp_path, "graph", fresh, "G1")
    assert (tmp_path / "graph").is_symlink()
    assert displaced is not None and (displaced / "old").read_text() == "old"
