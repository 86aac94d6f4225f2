"""In-memory context tier service: the store the hydrator fills."""

from __future__ import annotations

import threading

from cleveragents.domain.models.acms.tiers import ContextTier, TieredFragment

__all__ = ["ContextTierService"]


class ContextTierService:
    """Holds :class:`TieredFragment` objects by tier, in insertion order.

    No deduplication happens here: the hydrator decides what to store.
    Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fragments: list[TieredFragment] = []

    def store(self, fragment: TieredFragment) -> None:
        """Keep ``fragment``.

        Raises:
            TypeError: ``fragment`` is not a :class:`TieredFragment`.
        """
        if not isinstance(fragment, TieredFragment):
            raise TypeError(f"expected a TieredFragment, not {type(fragment).__name__}")
        with self._lock:
            self._fragments.append(fragment)

    def fragments(self, tier: ContextTier | None = None) -> list[TieredFragment]:
        """The fragments of one tier, or of all tiers when ``tier`` is None."""
        with self._lock:
            if tier is None:
                return list(self._fragments)
            return [f for f in self._fragments if f.tier is tier]

    def clear(self) -> None:
        """Drop every fragment."""
        with self._lock:
            self._fragments.clear()
