"""The shared VectorIndex contract, run against real FAISS indexes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cleveragents.infrastructure.acms.faiss_vector import FaissVectorBackend
from cleveragents.testing.backend_contracts import DIMENSION, VectorIndexContract


class TestFaissOnDiskContract(VectorIndexContract):
    @pytest.fixture
    def backend(self, tmp_path: Path) -> Iterator[FaissVectorBackend]:
        b = FaissVectorBackend(tmp_path / "vectors", dimension=DIMENSION)
        yield b
        b.close()


class TestFaissInRamContract(VectorIndexContract):
    @pytest.fixture
    def backend(self) -> Iterator[FaissVectorBackend]:
        b = FaissVectorBackend(dimension=DIMENSION)
        yield b
        b.close()
