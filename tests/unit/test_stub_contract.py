"""The seed's in-memory stubs run the read-side contract and return nothing."""

from __future__ import annotations

import pytest

from cleveragents.domain.models.acms.backends import GraphResult
from cleveragents.domain.models.acms.stubs import (
    InMemoryGraphBackend,
    InMemoryTextBackend,
    InMemoryVectorBackend,
)
from cleveragents.testing.backend_contracts import (
    DIMENSION,
    GraphBackendContract,
    TextBackendContract,
    VectorBackendContract,
    new_ulid,
)


class TestInMemoryTextBackend(TextBackendContract):
    @pytest.fixture
    def backend(self) -> InMemoryTextBackend:
        return InMemoryTextBackend()

    def test_valid_query_returns_empty_list(self, backend: InMemoryTextBackend) -> None:
        assert backend.search("needle", scope=frozenset({new_ulid()}), max_results=5) == []


class TestInMemoryVectorBackend(VectorBackendContract):
    @pytest.fixture
    def backend(self) -> InMemoryVectorBackend:
        return InMemoryVectorBackend(dimension=DIMENSION)

    def test_valid_query_returns_empty_list(self, backend: InMemoryVectorBackend) -> None:
        assert backend.similarity_search([0.1] * DIMENSION, scope=frozenset({new_ulid()})) == []

    def test_without_dimension_any_length_is_accepted(self) -> None:
        assert InMemoryVectorBackend().similarity_search([1.0], scope=frozenset()) == []

    @pytest.mark.parametrize("bad", [0, -1, True])
    def test_rejects_bad_dimension(self, bad: int) -> None:
        with pytest.raises((TypeError, ValueError)):
            InMemoryVectorBackend(dimension=bad)


class TestInMemoryGraphBackend(GraphBackendContract):
    @pytest.fixture
    def backend(self) -> InMemoryGraphBackend:
        return InMemoryGraphBackend()

    def test_valid_queries_return_empty_result(self, backend: InMemoryGraphBackend) -> None:
        scope = frozenset({new_ulid()})
        assert backend.sparql_query("ASK {}", scope=scope) == GraphResult()
        assert backend.get_triples("urn:x", scope=scope) == GraphResult()
        assert backend.traverse("urn:x", depth=3, scope=scope) == GraphResult()
