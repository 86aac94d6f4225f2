"""A model-free, lexical embedder: hashed identifier features, no semantics.

:class:`HashingEmbedder` needs no model files and gives the same vectors in
every process and on every machine.  It captures *lexical* overlap of code
identifiers only: ``parseJsonV2`` lands near ``parse_json`` because they
share the parts ``parse`` and ``json`` and most character 3-grams, but
``fetch`` is no nearer to ``download`` than to ``banana``.  Use it as the
offline default or in tests; a neural embedder is a drop-in replacement
behind the :class:`~cleveragents.domain.models.acms.embedding.Embedder` port.
"""

from __future__ import annotations

import re
import zlib
from array import array
from collections import Counter
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["HashingEmbedder"]

_TOKEN = re.compile(r"\w+")
# The same tokens on ASCII text (``\w`` is ``[A-Za-z0-9_]`` there), ~35%
# faster: the engine tests no Unicode categories.
_ASCII_TOKEN = re.compile(r"\w+", re.ASCII)
# camelCase, PascalCase, ACRONYMWord, digits, and runs of non-ASCII letters.
_PART = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+|[^\W\d_A-Za-z]+")

_WHOLE, _PART_KIND, _GRAM, _EMPTY = 0, 1, 2, 3
# A feature key: a CRC-32 and the kind's two bits.
_KEY_BITS = 34
# Parts carry the meaning of an identifier; 3-grams only smooth spelling
# variants, and there are many of them per identifier.
_KIND_WEIGHTS = np.array([1.0, 1.0, 0.35, 1.0])
_MAX_GRAMS = 32
# Tokens whose features are kept (cleared when full).  The stdlib's .py files
# hold ~125k distinct tokens: a 200k cache held them all (33 MB per planning
# process); 50k held 8-10 MB and embedded them 4% slower; 20k holds ~4 MB and
# embeds 3-6% slower than 50k (best of 3; ~0.1 s of the stdlib's ~20 s of
# indexing CPU), where the memory counts three times at two jobs.
_CACHE_LIMIT = 20_000


# CRC-32 with a different start value per kind: deterministic everywhere and
# several times cheaper than a cryptographic hash; collisions among 32-bit
# values are irrelevant next to the dimension-sized buckets they land in.
_KIND_SEEDS = (0x5A17E, 0x9A27, 0x3E3E3, 0xE3A7)


_crc32 = zlib.crc32


def _feature(kind: int, value: str) -> int:
    return (zlib.crc32(value.encode("utf-8", "surrogatepass"), _KIND_SEEDS[kind]) << 2) | kind


def _token_features(token: str) -> bytes:
    """The token's features as native ``uint64`` bytes (a cache entry a
    quarter the size of a tuple of ints, appended to the keys in C)."""
    parts = [p.lower() for p in _PART.findall(token)]
    if not parts:
        return b""
    features = [_feature(_PART_KIND, p) for p in parts]
    joined = "".join(parts)
    if len(parts) > 1:
        features.append(_feature(_WHOLE, joined))
    padded = f"^{joined}$"
    grams = min(len(padded) - 2, _MAX_GRAMS)
    if padded.isascii():
        # The 3-grams cut from the encoded bytes (one byte per character
        # here) and _feature inlined: the same keys, ~15% faster over the
        # standard library's 218k distinct tokens (a planning worker meets
        # most of them).
        raw, seed = padded.encode(), _KIND_SEEDS[_GRAM]
        features += [(_crc32(raw[i : i + 3], seed) << 2) | _GRAM for i in range(grams)]
    else:
        features += [_feature(_GRAM, padded[i : i + 3]) for i in range(grams)]
    return array("Q", features).tobytes()


class _FeatureCache(dict[str, bytes]):
    """Token -> its features; a miss computes them, and keeps them while the
    cache holds fewer than :data:`_CACHE_LIMIT` tokens (``embed`` clears it
    once full)."""

    def __missing__(self, token: str) -> bytes:
        features = _token_features(token)
        if len(self) < _CACHE_LIMIT:
            self[token] = features
        return features


class HashingEmbedder:
    """Lexical feature hashing of code identifiers into ``dimension`` buckets.

    Features per identifier (a ``\\w+`` run): its lower-cased parts (split at
    ``snake_case`` underscores, ``camelCase`` humps and digit runs), the whole
    identifier (parts joined, when it has more than one), and the character
    3-grams of the joined parts with ``^``/``$`` boundary marks (at most 32).
    Each feature is hashed with CRC-32 (not Python's salted ``hash``) into
    a bucket and a sign; its weight is ``1 + log(count)`` (3-grams scaled by
    0.35); rows are L2-normalised.  A text without identifiers embeds as
    one fixed unit vector.

    Not semantic: see the module docstring.
    """

    def __init__(self, dimension: int = 384) -> None:
        if isinstance(dimension, bool) or not isinstance(dimension, int):
            raise TypeError(f"dimension must be an int, not {type(dimension).__name__}")
        if dimension < 1:
            raise ValueError(f"dimension must be positive, got {dimension}")
        self._dimension = dimension
        self._cache = _FeatureCache()
        self._empty = _feature(_EMPTY, "<empty>")

    @property
    def name(self) -> str:
        """``"hashing-v2"``: bump the version whenever the features change."""
        return "hashing-v2"

    @property
    def dimension(self) -> int:
        """Length of every vector."""
        return self._dimension

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed ``texts`` as rows of a ``(len(texts), dimension)`` float32 array.

        Raises:
            TypeError: ``texts`` is a ``str`` or holds a non-``str``.
            ValueError: 2**30 texts or more in one call.
        """
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of str, not a str")
        n, dim = len(texts), self._dimension
        if n >= 1 << (64 - _KEY_BITS):
            raise ValueError(f"at most {1 << (64 - _KEY_BITS)} texts per call")
        cache = self._cache
        if len(cache) >= _CACHE_LIMIT:
            cache.clear()
        # Per text, each distinct token's features (bytes from the cache, a
        # C-level lookup) and its count; numpy then takes them all at once.
        blobs: list[bytes] = []
        token_counts: list[int] = []
        per_text: list[int] = []  # distinct tokens per text
        for text in texts:
            if not isinstance(text, str):
                raise TypeError(f"texts must hold str, not {type(text).__name__}")
            counted = Counter((_ASCII_TOKEN if text.isascii() else _TOKEN).findall(text))
            per_text.append(len(counted))
            blobs.extend(map(cache.__getitem__, counted))
            token_counts.extend(counted.values())
        if n == 0:
            return np.zeros((0, dim), dtype=np.float32)
        raw_keys = np.frombuffer(b"".join(blobs), dtype=np.uint64)
        pair_sizes = np.fromiter(map(len, blobs), dtype=np.int64, count=len(blobs)) >> 3
        row_arr = np.repeat(np.repeat(np.arange(n, dtype=np.uint64), per_text), pair_sizes)
        count_arr = np.repeat(np.array(token_counts, dtype=np.float64), pair_sizes)
        # Sum the counts of equal (row, feature) pairs: one sort of both as a
        # single uint64 (a feature key has _KEY_BITS bits), not a lexsort.
        combined = (row_arr << np.uint64(_KEY_BITS)) | raw_keys
        order = np.argsort(combined)
        combined, count_arr = combined[order], count_arr[order]
        start = np.ones(len(combined), dtype=bool)
        start[1:] = combined[1:] != combined[:-1]
        firsts = np.flatnonzero(start)
        counts_arr = np.add.reduceat(count_arr, firsts)
        key_arr = combined[firsts] & np.uint64((1 << _KEY_BITS) - 1)
        rows_arr = (combined[firsts] >> np.uint64(_KEY_BITS)).astype(np.intp)
        weights = (1.0 + np.log(counts_arr)) * _KIND_WEIGHTS[
            (key_arr & np.uint64(3)).astype(np.intp)
        ]
        signs = ((key_arr >> np.uint64(2)) & np.uint64(1)).astype(np.float64) * 2.0 - 1.0
        buckets = ((key_arr >> np.uint64(8)) % np.uint64(dim)).astype(np.intp)
        flat = rows_arr * dim + buckets
        matrix = (
            np.bincount(flat, weights=weights * signs, minlength=n * dim)
            .astype(np.float64, copy=False)
            .reshape(n, dim)
        )
        norms = np.linalg.norm(matrix, axis=1)
        # A text without identifiers, or whose features cancel out in their
        # buckets, gets the empty-text vector (its one feature, normalised).
        dead = norms < 1e-12
        if dead.any():
            matrix[dead] = self._empty_row()
            norms[dead] = 1.0
        matrix /= norms[:, None]
        return np.ascontiguousarray(matrix, dtype=np.float32)

    def _empty_row(self) -> npt.NDArray[np.float64]:
        row = np.zeros(self._dimension, dtype=np.float64)
        row[(self._empty >> 8) % self._dimension] = ((self._empty >> 2) & 1) * 2.0 - 1.0
        return row
