"""The shared TextIndex contract, run against real Tantivy indexes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cleveragents.infrastructure.acms.tantivy_text import TantivyTextBackend
from cleveragents.testing.backend_contracts import TextIndexContract


class TestTantivyOnDiskContract(TextIndexContract):
    @pytest.fixture
    def backend(self, tmp_path: Path) -> Iterator[TantivyTextBackend]:
        b = TantivyTextBackend(tmp_path / "text")
        yield b
        b.close()


class TestTantivyInRamContract(TextIndexContract):
    @pytest.fixture
    def backend(self) -> Iterator[TantivyTextBackend]:
        b = TantivyTextBackend()
        yield b
        b.close()
