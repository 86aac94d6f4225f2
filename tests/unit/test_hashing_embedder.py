"""The hashing embedder and the Embedder port."""

from __future__ import annotations

import math
import re
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cleveragents.domain.models.acms.embedding import Embedder
from cleveragents.infrastructure.acms.hashing_embedder import HashingEmbedder


def cosine(embedder: HashingEmbedder, a: str, b: str) -> float:
    va, vb = embedder.embed([a, b])
    return float(va @ vb)


def test_conforms_to_the_port() -> None:
    embedder = HashingEmbedder()
    assert isinstance(embedder, Embedder)
    assert embedder.dimension == 384
    assert embedder.name == "hashing-v2"


def test_shape_dtype_and_unit_norm() -> None:
    embedder = HashingEmbedder(dimension=64)
    out = embedder.embed(["def parse_json(text): ...", "class HttpClient:", "x"])
    assert out.shape == (3, 64)
    assert out.dtype == np.float32
    assert out.flags.c_contiguous
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)


def test_empty_input_gives_an_empty_matrix() -> None:
    out = HashingEmbedder(dimension=8).embed([])
    assert out.shape == (0, 8)
    assert out.dtype == np.float32


def test_texts_without_tokens_share_one_fixed_unit_vector() -> None:
    embedder = HashingEmbedder()
    out = embedder.embed(["", "   \n\t", "(){}[];+-*/", "?!"])
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-6)
    for row in out[1:]:
        np.testing.assert_array_equal(row, out[0])
    assert np.count_nonzero(out[0]) == 1


def test_similar_identifiers_are_closer_than_unrelated_ones() -> None:
    embedder = HashingEmbedder()
    close = cosine(embedder, "parseJsonV2", "parse_json")
    assert close > 0.4
    assert close > cosine(embedder, "parseJsonV2", "renderWidgetTree")
    assert close > cosine(embedder, "parse_json", "http_client_timeout")
    assert cosine(embedder, "HTTPServer", "http_server") > cosine(embedder, "HTTPServer", "banana")


def test_code_about_the_same_thing_is_closer() -> None:
    embedder = HashingEmbedder()
    query = "parse json config file"
    hit = "def load_config(path):\n    with open(path) as f:\n        return json.load(f)"
    miss = "class WidgetRenderer:\n    def draw(self, canvas):\n        canvas.fill(self.color)"
    assert cosine(embedder, query, hit) > cosine(embedder, query, miss)


def test_deterministic_across_instances_and_batches() -> None:
    texts = ["alpha_beta", "GammaDelta", "", "x = y + z"]
    a = HashingEmbedder().embed(texts)
    b = HashingEmbedder().embed(list(reversed(texts)))[::-1]
    np.testing.assert_array_equal(a, b)
    one_by_one = np.vstack([HashingEmbedder().embed([t]) for t in texts])
    np.testing.assert_array_equal(a, one_by_one)


def test_deterministic_across_processes() -> None:
    # Python's hash() is salted per process; the embedder must not depend on it.
    code = (
        "from cleveragents.infrastructure.acms.hashing_embedder import HashingEmbedder;"
        "print(HashingEmbedder(32).embed(['parseJsonV2 config']).tobytes().hex())"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            check=True,
            capture_output=True,
            text=True,
            env={"PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2")
    }
    assert len(outs) == 1
    here = HashingEmbedder(32).embed(["parseJsonV2 config"]).tobytes().hex()
    assert outs == {here + "\n"}


def test_rejects_bad_arguments() -> None:
    with pytest.raises(TypeError):
        HashingEmbedder().embed("a string is not a batch")
    with pytest.raises(TypeError):
        HashingEmbedder().embed(["ok", 3])  # type: ignore[list-item]
    with pytest.raises(ValueError):
        HashingEmbedder(dimension=0)
    with pytest.raises(TypeError):
        HashingEmbedder(dimension=True)


@settings(max_examples=200, deadline=None)
@given(texts=st.lists(st.text(), max_size=8), dimension=st.integers(1, 64))
def test_rows_are_finite_unit_vectors(texts: list[str], dimension: int) -> None:
    out = HashingEmbedder(dimension=dimension).embed(texts)
    assert out.shape == (len(texts), dimension)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)


def _reference_embed(texts: list[str], dimension: int) -> np.ndarray:
    """hashing-v2 as its docstring states it, one text and one feature at a
    time: a feature's weight is ``1 + log(count)`` times its kind's weight,
    added with its sign into its bucket in the order of the feature keys."""
    from cleveragents.infrastructure.acms import hashing_embedder as module

    out = np.zeros((len(texts), dimension), dtype=np.float64)
    empty = module._feature(module._EMPTY, "<empty>")
    for row, text in enumerate(texts):
        counts: dict[int, int] = {}
        for token in re.findall(r"\w+", text):
            for key in np.frombuffer(module._token_features(token), dtype=np.uint64):
                counts[int(key)] = counts.get(int(key), 0) + 1
        if not counts:
            counts = {empty: 1}
        for key in sorted(counts):
            weight = (1.0 + math.log(counts[key])) * float(module._KIND_WEIGHTS[key & 3])
            sign = 1.0 if (key >> 2) & 1 else -1.0
            out[row, (key >> 8) % dimension] += weight * sign
        norm = float(np.linalg.norm(out[row]))
        if norm < 1e-12:
            out[row] = 0.0
            out[row, (empty >> 8) % dimension] = 1.0 if (empty >> 2) & 1 else -1.0
        else:
            out[row] /= norm
    return out.astype(np.float32)


_CODE_TEXT = st.lists(
    st.sampled_from(
        [
            "parse",
            "Json",
            "HTTPServer",
            "x2",
            "_",
            " ",
            "\n",
            "(",
            "é",
            "ü",
            "日本",
            "v2",
            "get_value",
            "AB",
            "a",
            "Z",
            "9",
            "parse_json",
            "\udcff",
        ]
    ),
    max_size=40,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(
    texts=st.lists(st.one_of(_CODE_TEXT, st.text(max_size=60)), max_size=12),
    dimension=st.integers(1, 48),
)
def test_vectors_are_the_reference_computation_bit_for_bit(
    texts: list[str], dimension: int
) -> None:
    # Vectors already stored under the name "hashing-v2" must keep matching
    # what this embedder computes for a query, to the last bit.
    embedder = HashingEmbedder(dimension=dimension)
    np.testing.assert_array_equal(embedder.embed(texts), _reference_embed(texts, dimension))
    # And again with the token cache warm (the second batch reads it).
    np.testing.assert_array_equal(embedder.embed(texts), _reference_embed(texts, dimension))


def _reference_features(token: str) -> list[int]:
    """A token's feature keys as the class docstring states them, each one
    through ``_feature`` (CRC-32 of its UTF-8, seeded by its kind)."""
    from cleveragents.infrastructure.acms import hashing_embedder as module

    parts = [p.lower() for p in module._PART.findall(token)]
    if not parts:
        return []
    keys = [module._feature(module._PART_KIND, p) for p in parts]
    joined = "".join(parts)
    if len(parts) > 1:
        keys.append(module._feature(module._WHOLE, joined))
    padded = f"^{joined}$"
    grams = [padded[i : i + 3] for i in range(len(padded) - 2)][: module._MAX_GRAMS]
    return keys + [module._feature(module._GRAM, g) for g in grams]


@settings(max_examples=500, deadline=None)
@given(
    token=st.one_of(_CODE_TEXT, st.text(max_size=80), st.from_regex(r"\w{30,60}", fullmatch=True))
)
def test_token_features_are_each_feature_computed_alone(token: str) -> None:
    # _token_features computes ASCII tokens' keys inline (the hot path of
    # every planning worker); they must be _feature's, in the same order.
    from cleveragents.infrastructure.acms import hashing_embedder as module

    got = np.frombuffer(module._token_features(token), dtype=np.uint64).tolist()
    assert got == _reference_features(token)


def test_the_token_cache_is_cleared_when_full(monkeypatch: pytest.MonkeyPatch) -> None:
    from cleveragents.infrastructure.acms import hashing_embedder as module

    monkeypatch.setattr(module, "_CACHE_LIMIT", 5)
    embedder = HashingEmbedder(dimension=16)
    texts = [" ".join(f"name{i}_{j}" for j in range(4)) for i in range(6)]
    for text in texts:
        embedder.embed([text])
        assert len(embedder._cache) <= 5
    np.testing.assert_array_equal(embedder.embed(texts), _reference_embed(texts, 16))
