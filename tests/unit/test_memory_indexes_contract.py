"""The in-memory reference indexes run the same contract suite as the engines."""

from __future__ import annotations

import pytest

from cleveragents.infrastructure.acms.memory_indexes import (
    MemoryGraphIndex,
    MemoryTextIndex,
    MemoryVectorIndex,
    tokens,
)
from cleveragents.testing.backend_contracts import (
    DIMENSION,
    GraphIndexContract,
    TextIndexContract,
    VectorIndexContract,
    new_ulid,
)


class TestMemoryTextContract(TextIndexContract):
    @pytest.fixture
    def backend(self) -> MemoryTextIndex:
        return MemoryTextIndex()


class TestMemoryVectorContract(VectorIndexContract):
    @pytest.fixture
    def backend(self) -> MemoryVectorIndex:
        return MemoryVectorIndex(DIMENSION)


class TestMemoryGraphContract(GraphIndexContract):
    @pytest.fixture
    def backend(self) -> MemoryGraphIndex:
        return MemoryGraphIndex()


def test_identifier_parts_are_tokens() -> None:
    assert {"parsejsonv2", "parse", "json", "v", "2"} <= set(tokens("parseJsonV2"))


def test_text_scores_use_in_scope_statistics_only() -> None:
    """A resource full of the query term elsewhere does not change in-scope scores."""
    from cleveragents.domain.models.acms.backends import IndexUnit
    from cleveragents.domain.models.acms.uko import unit_uri

    a, loud = new_ulid(), new_ulid()
    alone, crowded = MemoryTextIndex(), MemoryTextIndex()
    units = [IndexUnit(unit_uri(a, f"f{i}.py", "L1-L2"), f"needle word{i}") for i in range(3)]
    alone.upsert(a, units)
    crowded.upsert(a, units)
    crowded.upsert(loud, [IndexUnit(unit_uri(loud, "x.py", "L1-L2"), "needle " * 50)])
    scope = frozenset({a})
    assert [(r.uko_uri, r.score) for r in alone.search("needle", scope=scope)] == [
        (r.uko_uri, r.score) for r in crowded.search("needle", scope=scope)
    ]
