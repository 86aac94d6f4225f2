"""Worker processes embed with the embedder the index records, also when a
host overrides the container's embedder (the documented way to plug one in).

Before the fix, workers built the *configured* embedder (``hashing``) from
their spec while the parent recorded the override's identity: the index held
vectors of one model under the name of another.  Real engines on tmp_path.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
from dependency_injector import providers

from cleveragents.application.container import build_container
from cleveragents.application.services.indexer import WORKER_BATCH_BYTES
from cleveragents.application.services.operations import AcmsOperations
from cleveragents.infrastructure.acms.hashing_embedder import HashingEmbedder
from cleveragents.infrastructure.acms.tantivy_text import TantivyTextBackend

DIM = 64


class ReversedHashing:
    """Another embedder of the same dimension: hashing of the reversed text."""

    def __init__(self, dimension: int = DIM) -> None:
        self._inner = HashingEmbedder(dimension)

    @property
    def name(self) -> str:
        return "reversed-hashing-test"

    @property
    def dimension(self) -> int:
        return self._inner.dimension

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return self._inner.embed([t[::-1] for t in texts])


def _tree(root: Path) -> None:
    # More than one worker batch of changed bytes, so the pool starts.
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu"
    n = 2 * WORKER_BATCH_BYTES // (32 * 1024) + 2
    for i in range(n):
        lines = [f"{words} file{i} line{j} w{(i * 7919 + j) % 1000}" for j in range(400)]
        (root / f"notes{i:03}.txt").write_text("\n".join(lines) + "\n")


def test_an_overridden_embedder_embeds_every_unit_with_two_jobs(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _tree(repo)
    container = build_container(
        "local", tmp_path / "data", embedder="hashing", embedding_dimension=DIM
    )
    override = ReversedHashing()
    container.embedder.override(providers.Object(override))
    ops = AcmsOperations.from_container(container)
    ops.add_project("t/p")
    rid = ops.add_resource(str(repo), "t/p", "directory").resource_id
    report = ops.reindex(jobs=2)
    assert report.total.units_written > 0

    store = container.index_store()
    text = store.text
    assert isinstance(text, TantivyTextBackend)
    units = list(text.units(rid))
    assert len(units) == report.total.units_written
    configured = HashingEmbedder(DIM)
    for unit in units[:: max(1, len(units) // 25)]:
        mine = override.embed([unit.content])[0]
        other = configured.embed([unit.content])[0]
        assert float(mine @ other) < 0.99  # the two embedders disagree on this unit
        hits = store.vector.similarity_search(
            mine.tolist(), scope=frozenset({rid}), top_k=len(units)
        )
        own = [h.score for h in hits if h.uko_uri == unit.uko_uri]
        assert own and own[0] > 0.999, f"{unit.uko_uri}: stored vector is not the override's"


def test_the_configured_embedders_keep_their_workers(tmp_path: Path) -> None:
    """The spec's declared identity is what its factory builds, so a container
    that is not overridden still plans in worker processes."""
    for kind in ("hashing", "minilm"):
        container = build_container("local", tmp_path / kind, embedder=kind)
        indexer = container.indexer()
        assert indexer.spec is not None, kind
        assert indexer.spec.embedder_identity == indexer.embedder_identity, kind
        built = indexer.spec.embedder()
        assert f"{built.name}:{built.dimension}" == indexer.embedder_identity, kind
