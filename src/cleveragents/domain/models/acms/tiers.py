"""Context tiers and the fragments stored in them.

``TieredFragment.metadata`` is ``dict[str, str]`` and rejects any other value
type: numeric metadata once broke context assembly with a validation error
(bug #1028), so the model refuses it at the door instead.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, StrictStr

__all__ = ["ContextTier", "TieredFragment"]


class ContextTier(StrEnum):
    """How close to the model a fragment is kept."""

    HOT = "hot"
    WARM = "warm"
    COLD = "cold"


class TieredFragment(BaseModel):
    """A piece of context (usually a whole file) held in one tier."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    content: StrictStr
    tier: ContextTier
    metadata: dict[StrictStr, StrictStr] = Field(default_factory=dict)
