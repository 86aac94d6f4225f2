"""ACMS_PROFILE=local wires the real engines on disk under ACMS_DATA_DIR."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cleveragents.application.container import build_container
from cleveragents.domain.models.acms.backends import (
    GraphIndex,
    IndexUnit,
    Literal,
    TextIndex,
    VectorIndex,
)
from cleveragents.domain.models.acms.scope import ScopedView
from cleveragents.domain.models.acms.uko import UKO, file_uri, unit_uri
from cleveragents.testing.backend_contracts import new_ulid


def test_local_profile_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACMS_PROFILE", "local")
    monkeypatch.setenv("ACMS_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("ACMS_EMBEDDING_DIM", "4")
    c = build_container()
    text, vector, graph = c.text_backend(), c.vector_backend(), c.graph_backend()
    assert isinstance(text, TextIndex)
    assert isinstance(vector, VectorIndex)
    assert isinstance(graph, GraphIndex)
    assert vector.dimension == 4

    rid, other = new_ulid(), new_ulid()
    for r, word in ((rid, "mine"), (other, "theirs")):
        unit = IndexUnit(unit_uri(r, "a.py", "L1-L3"), f"shared {word}", {"path": "a.py"})
        text.upsert(r, [unit])
        vector.upsert(r, [unit], np.ones((1, 4), dtype=np.float32))
        graph.upsert(r, [(file_uri(r, "a.py"), UKO + "path", Literal("a.py"))])

    view = ScopedView(text, vector, graph, frozenset({rid}))
    assert [r.content for r in view.search("shared")] == ["shared mine"]
    assert [r.content for r in view.similarity_search([1.0, 1.0, 1.0, 1.0])] == ["shared mine"]
    rows = view.sparql_query("SELECT ?s ?p ?o WHERE { ?s ?p ?o }").triples
    assert rows == [(file_uri(rid, "a.py"), UKO + "path", "a.py")]
    for sub in ("text", "vectors", "graph"):
        assert (tmp_path / "data" / sub).is_dir()


def test_local_workers_prepare_the_text_the_tantivy_index_writes(tmp_path: Path) -> None:
    """The local profile's planning workers run the text index's preparer,
    so the one writer process does not analyse unit text itself."""
    from cleveragents.infrastructure.acms.text_analysis import prepare_content

    c = build_container("local", tmp_path / "data")
    spec = c.indexer().spec
    assert spec is not None and spec.text_preparer is prepare_content


@pytest.mark.parametrize("dimension", ["0", "-3", "32769", "99999999999"])
def test_an_embedding_dimension_out_of_range_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dimension: str
) -> None:
    """Found by a reviewer: 99999999999 was "internal error: MemoryError:
    Unable to allocate 745. GiB" at the first embedding, exit 1."""
    monkeypatch.setenv("ACMS_EMBEDDING_DIM", dimension)
    with pytest.raises(ValueError, match=rf"within 1\.\.32768, got {dimension} "):
        build_container("local", tmp_path / "data")


def test_the_largest_embedding_dimension_is_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACMS_EMBEDDING_DIM", "32768")
    assert build_container("local", tmp_path / "data").vector_backend().dimension == 32768
