"""The embedder port: text in, L2-normalised float32 vectors out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["Embedder"]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors for the vector index.

    Every row an embedder returns is finite and has unit L2 norm, so cosine
    similarity is an inner product.  A text with nothing to embed (empty,
    only whitespace or punctuation) gets one fixed, deterministic unit
    vector of that embedder, never a zero or NaN row: vector indexes reject
    zero rows.
    """

    @property
    def name(self) -> str:
        """Stable identifier of the model and its version, e.g. ``"hashing-v2"``.

        Stored with an index so that vectors from another model are detected
        and the index rebuilt rather than mixed.
        """
        ...

    @property
    def dimension(self) -> int:
        """Length of every vector :meth:`embed` returns (positive)."""
        ...

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed ``texts``.

        Args:
            texts: the texts, in order; may be empty.  A bare ``str`` is not
                a sequence of texts here.

        Returns:
            A C-contiguous ``float32`` array of shape ``(len(texts), dimension)``
            whose rows are finite and L2-normalised; row ``i`` embeds ``texts[i]``.

        Raises:
            TypeError: ``texts`` is a ``str`` or holds a non-``str``.
        """
        ...
