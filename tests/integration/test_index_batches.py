"""The size of the store's write batches changes memory, never the index.

Tiny batches (a few units, a few KB, 40 triples: many text, vector and graph
writes, graph change records appended without loading the graph) and batches
larger than the tree (one write each) must store the same catalog rows, text
units and hits (with BM25 scores), vectors and graph triples; so must an
incremental run that changes and deletes files (graph records that drop
subjects) against a fresh index of the changed tree.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.integration.test_index_jobs import RID, assert_same_index, indexer_at, make_tree

from cleveragents.application.services.indexer import Indexer
from cleveragents.infrastructure.acms.index_store import ManagedIndexStore

TINY = {"batch_units": 3, "batch_bytes": 4096, "batch_triples": 40}
HUGE = {"batch_units": 10**6, "batch_bytes": 10**9, "batch_triples": 10**8}


def index(ix: Indexer, tree: Path) -> None:
    ix.index_resource(RID, tree, "directory")


def same(a: Indexer, b: Indexer, *, bm25: bool = True) -> None:
    contents_a = assert_same_index(a, b, bm25=bm25)
    assert len(contents_a["triples"]) > 100  # type: ignore[arg-type]


def close(*indexers: Indexer) -> None:
    for ix in indexers:
        assert isinstance(ix.store, ManagedIndexStore)
        ix.store.close()


def test_tiny_and_huge_batches_store_the_same_index(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "tree")
    tiny, huge = indexer_at(tmp_path / "tiny", **TINY), indexer_at(tmp_path / "huge", **HUGE)
    index(tiny, tree)
    index(huge, tree)
    try:
        same(tiny, huge)
        # Many graph writes really happened: the tiny store appended records.
        graph = next((tmp_path / "tiny").glob(".gen/*/graph/graphs/*.graph"))
        big = next((tmp_path / "huge").glob(".gen/*/graph/graphs/*.graph"))
        assert graph.stat().st_size > big.stat().st_size
    finally:
        close(tiny, huge)


def test_an_incremental_run_in_tiny_batches_equals_a_fresh_index(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "tree")
    ix = indexer_at(tmp_path / "inc", **TINY)
    index(ix, tree)
    # Change files (their subjects are dropped and re-added) and delete some.
    core = tree / "pkg" / "core.py"
    core.write_text(core.read_text() + "\n\ndef gamma():\n    return alpha()\n")
    (tree / "notes.md").unlink()
    shutil.rmtree(tree / "wsgiref")
    decoder = tree / "json" / "decoder.py"
    decoder.write_text(decoder.read_text().replace("def py_scanstring", "def py_scan_string"))
    index(ix, tree)
    fresh = indexer_at(tmp_path / "fresh", **HUGE)
    index(fresh, tree)
    try:
        # Tantivy counts deleted documents in BM25 until segments merge.
        same(ix, fresh, bm25=False)
    finally:
        close(ix, fresh)
