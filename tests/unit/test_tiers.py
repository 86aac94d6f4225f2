"""Tiers, fragments and the tier service."""

from __future__ import annotations

import pydantic
import pytest

from cleveragents.application.services.context_tier_service import ContextTierService
from cleveragents.domain.models.acms.tiers import ContextTier, TieredFragment


def test_tiers() -> None:
    assert {t.name for t in ContextTier} >= {"HOT", "WARM", "COLD"}


@pytest.mark.parametrize("metadata", [{"detail_depth": 1}, {"relevance_score": 0.5}, {1: "x"}])
def test_metadata_rejects_non_strings(metadata: dict[object, object]) -> None:
    with pytest.raises(pydantic.ValidationError):
        TieredFragment(content="x", tier=ContextTier.HOT, metadata=metadata)  # type: ignore[arg-type]


def test_fragment_is_frozen_and_accepts_tier_values() -> None:
    f = TieredFragment(content="x", tier="hot", metadata={"path": "a.py"})  # type: ignore[arg-type]
    assert f.tier is ContextTier.HOT
    with pytest.raises(pydantic.ValidationError):
        f.content = "y"  # type: ignore[misc]


def test_service_stores_by_tier() -> None:
    svc = ContextTierService()
    hot = TieredFragment(content="a", tier=ContextTier.HOT)
    cold = TieredFragment(content="b", tier=ContextTier.COLD)
    svc.store(hot)
    svc.store(cold)
    assert svc.fragments() == [hot, cold]
    assert svc.fragments(ContextTier.HOT) == [hot]
    assert svc.fragments(ContextTier.WARM) == []
    with pytest.raises(TypeError):
        svc.store("a")  # type: ignore[arg-type]
    svc.clear()
    assert svc.fragments() == []
