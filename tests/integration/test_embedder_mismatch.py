"""A vector query with another embedder than the one that made the scope's
vectors, of the same dimension (``ACMS_EMBEDDER`` changed since the
reindex), compared vectors of two models: every score 0.000, exit 0 (a
reviewer's run).  Now it is an error naming both and the repair; text
search is unaffected (a hybrid search checks only when it embeds)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cleveragents.bootstrap import bootstrap
from cleveragents.domain.models.acms.errors import IndexUnavailableError


def test_vectors_of_another_embedder_are_an_error_not_zero_scores(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "core.py").write_text("def quokka_helper():\n    return 'quokka'\n")
    ops = bootstrap(tmp_path / "data", embedding_dimension=16)
    try:
        ops.add_project("local/e")
        rid = ops.add_resource(str(root), "local/e").resource_id
        ops.reindex()
        session = ops.agent_session(projects=["local/e"])
        assert session.search("a helper that returns a marsupial", mode="vector")["results"]
        catalog = ops._store().catalog
        key = f"identity:{rid}"
        recorded = catalog.get_meta(key)
        assert recorded is not None and recorded.startswith("hashing")
        # The index as another embedder of the same dimension made it.
        catalog.set_meta(key, "other-model:16|" + recorded.partition("|")[2])
        for mode in ("vector", "hybrid"):
            with pytest.raises(IndexUnavailableError) as refused:
                session.search("a helper that returns a marsupial", mode=mode)
            message = str(refused.value)
            assert rid in message and "other-model:16" in message and "acms reindex" in message
        with pytest.raises(IndexUnavailableError):
            session.context("find the marsupial helper")
        with pytest.raises(IndexUnavailableError, match="other-model:16"):
            ops.embed_query("a marsupial", frozenset({rid}))  # acms search vector
        assert ops.embed_query("a marsupial")  # no scope: nothing to compare
        assert session.search("quokka_helper", mode="text")["results"]
        catalog.set_meta(key, recorded)  # as a reindex that re-embeds leaves it
        assert session.search("a helper that returns a marsupial", mode="vector")["results"]
    finally:
        ops.close()
