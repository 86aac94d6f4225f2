"""The hashing embedder and the Embedder port."""

from __future__ import annotations

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
