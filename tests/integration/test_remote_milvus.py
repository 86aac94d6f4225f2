"""The text and vector contracts, oracles and scope checks against a real
Milvus server (``milvus-lite server`` on 127.0.0.1, started by the tests)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cleveragents.infrastructure.acms.milvus_text import MilvusTextBackend
from cleveragents.infrastructure.acms.milvus_vector import MilvusVectorBackend
from cleveragents.testing.backend_contracts import (
    DIMENSION,
    TextIndexContract,
    VectorIndexContract,
)
from remote_servers import ServerProcess, milvus_server

__all__ = ["milvus_server"]  # the fixture, re-exported so pytest finds it


def emptied(backend: MilvusTextBackend | MilvusVectorBackend) -> None:
    """Delete every row and close: creating a collection costs ~0.5 s on Milvus
    Lite, so each test class reuses one, emptied after every test."""
    try:
        backend._coll.delete_where('id != ""')
    finally:
        backend.close()


class TestMilvusTextContract(TextIndexContract):
    @pytest.fixture
    def backend(self, milvus_server: ServerProcess) -> Iterator[MilvusTextBackend]:
        b = MilvusTextBackend(milvus_server.uri, collection="contract_text", timeout=20)
        yield b
        emptied(b)


class TestMilvusVectorContract(VectorIndexContract):
    @pytest.fixture
    def backend(self, milvus_server: ServerProcess) -> Iterator[MilvusVectorBackend]:
        b = MilvusVectorBackend(
            milvus_server.uri, dimension=DIMENSION, collection="contract_vectors", timeout=20
        )
        yield b
        emptied(b)
