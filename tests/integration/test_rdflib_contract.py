"""The graph backend contract, run against rdflib on disk and in memory."""

from __future__ import annotations

import pytest

from cleveragents.infrastructure.acms.rdflib_graph import RdflibGraphBackend
from cleveragents.testing.backend_contracts import GraphIndexContract


class TestRdflibGraphOnDiskContract(GraphIndexContract):
    @pytest.fixture
    def backend(self, tmp_path):
        b = RdflibGraphBackend(tmp_path / "graph")
        yield b
        b.close()


class TestRdflibGraphInMemoryContract(GraphIndexContract):
    @pytest.fixture
    def backend(self):
        b = RdflibGraphBackend()
        yield b
        b.close()
