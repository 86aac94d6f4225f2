"""Hydrate a real source tree no one here wrote: the running interpreter's
standard library, then find known definitions through each backend."""

from __future__ import annotations

import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cleveragents.application.container import build_container
from cleveragents.application.services.context_tier_hydrator import hydrate_tiers_from_project
from cleveragents.domain.models.acms.indexing import IndexStats
from cleveragents.domain.models.acms.scope import ScopedView
from cleveragents.domain.models.acms.uko import UKO, file_uri, path_of

pytestmark = pytest.mark.slow

STDLIB = Path(sysconfig.get_paths()["stdlib"])
RID = "01JD5TD11B0000000000000000"


@pytest.fixture(scope="module")
def hydrated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, int, IndexStats]]:
    c = build_container("local", tmp_path_factory.mktemp("data"), embedding_dimension=128)
    n = hydrate_tiers_from_project(
        c.context_tier_service(), "local/stdlib", RID, str(STDLIB), "directory", indexer=c.indexer()
    )
    rerun = c.indexer().index_resource(RID, STDLIB, "directory")
    yield c, n, rerun
    c.text_backend().close()
    c.vector_backend().close()
    c.graph_backend().close()


@pytest.fixture(scope="module")
def view(hydrated: tuple[Any, int, IndexStats]) -> ScopedView:
    c = hydrated[0]
    return ScopedView(c.text_backend(), c.vector_backend(), c.graph_backend(), frozenset({RID}))


def test_fragments_fill_the_tier_budget(hydrated: tuple[Any, int, IndexStats]) -> None:
    c, n, _ = hydrated
    fragments = c.context_tier_service().fragments()
    assert len(fragments) == n > 100
    # The budget counts bytes read from disk (decoding may add replacement characters).
    sizes = [(STDLIB / f.metadata["path"]).stat().st_size for f in fragments]
    assert 9 * 1024 * 1024 < sum(sizes) <= 10 * 1024 * 1024
    assert max(sizes) <= 256 * 1024


def test_text_search_finds_ordered_dict(view: ScopedView) -> None:
    paths = {r.metadata["path"] for r in view.search("OrderedDict", max_results=50)}
    assert "collections/__init__.py" in paths


def test_traverse_reaches_imported_files(view: ScopedView) -> None:
    start = file_uri(RID, "collections/__init__.py")
    edges = view.traverse(start, depth=1).triples
    imported = {path_of(o) for s, p, o in edges if p == UKO + "imports"}
    assert {"heapq.py", "keyword.py", "operator.py", "reprlib.py"} <= imported
    deeper = view.traverse(start, depth=2).triples
    assert len(deeper) > len(edges)


def test_sparql_finds_the_class_definition(view: ScopedView) -> None:
    # The literal in the pattern, not a FILTER: rdflib joins patterns in order.
    query = (
        f'SELECT ?f ?kind ?n WHERE {{ ?s <{UKO}name> "OrderedDict" . ?s <{UKO}name> ?n . '
        f"?s <{UKO}kind> ?kind . ?f <{UKO}defines> ?s }}"
    )
    rows = view.sparql_query(query).triples
    assert (file_uri(RID, "collections/__init__.py"), "class", "OrderedDict") in rows


def test_vector_search_finds_a_chunk_by_its_own_text(
    hydrated: tuple[Any, int, IndexStats], view: ScopedView
) -> None:
    c = hydrated[0]
    hit = view.search("JSONDecodeError", max_results=1)[0]
    embedding = c.embedder().embed([hit.content])[0].tolist()
    top = view.similarity_search(embedding, top_k=3)
    assert top[0].uko_uri == hit.uko_uri
    assert top[0].score == pytest.approx(1.0, abs=1e-4)


def test_unchanged_rerun_reads_and_writes_nothing(hydrated: tuple[Any, int, IndexStats]) -> None:
    rerun = hydrated[2]
    assert rerun.files_seen > 1000
    assert (rerun.files_read, rerun.bytes_read, rerun.index_writes) == (0, 0, 0)
