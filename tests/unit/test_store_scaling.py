"""What one add costs the store does not grow with the store: the same calls, and no more memories read,
with 20 or 2,000 memories of other users stored (the timing is `make bench`'s, bench/scale.py)."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from dreamstream.schemas.memory import EMBEDDING_DIM, Memory
from dreamstream.streams.core.ingest import PREFETCH_SLACK, Incoming, Processor
from dreamstream.streams.store import EdgeStore

K = 8


def vector(text: str) -> np.ndarray:
    rng = np.random.default_rng(int.from_bytes(hashlib.sha1(text.encode()).digest()[:8], "little"))
    v = rng.standard_normal(EMBEDDING_DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def embed(texts: Sequence[str]) -> np.ndarray:
    return np.stack([vector(t) for t in texts]) if texts else np.zeros((0, EMBEDDING_DIM), np.float32)


class Counting:
    """The real store, counting calls and the memories each hands back."""

    def __init__(self, inner: EdgeStore) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()
        self.read = 0

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self.inner, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            out = fn(*args, **kwargs)
            if name == "scroll":
                out = list(out)
                self.read += len(out)
            elif name == "retrieve":
                self.read += len(out)
            elif name == "nearest_many":
                self.read += sum(len(hits) for hits in out)
            return out

        return call


def fill(store: EdgeStore, others: int) -> None:
    memories = [Memory(memory_id=f"o-{i}", user_id=f"other-{i % 50}", text=f"note {i} about thing {i % 7}",
                       created_at="2025-01-01T00:00:00Z", updated_at="2025-01-01T00:00:00Z",
                       vector=vector(f"o-{i}")) for i in range(others)]
    memories += [Memory(memory_id=f"u-{i}", user_id="heavy", text=f"heavy note {i}", created_at="2025-01-01T00:00:00Z",
                        updated_at="2025-01-01T00:00:00Z", vector=vector(f"u-{i}")) for i in range(60)]
    for i in range(0, len(memories), 500):
        store.upsert(memories[i:i + 500])


def add_cost(tmp: Path, others: int) -> tuple[Counter[str], int]:
    store = EdgeStore(tmp / f"store-{others}")
    fill(store, others)
    counting = Counting(store)
    proc = Processor(counting, embed, decide=lambda new, candidates: [], candidate_k=K)  # type: ignore[arg-type]
    events = [{"type": "memory.added", "event_id": f"e-{n}", "memory_id": f"n-{n}", "user_id": "heavy",
               "text": f"a new heavy note {n}", "created_at": "2025-02-01T00:00:00Z"} for n in range(4)]
    proc.process([Incoming(raw=orjson.dumps(e)) for e in events])
    store.close()
    return counting.calls, counting.read


def test_an_add_costs_the_same_store_calls_and_reads_whatever_the_store_holds(tmp_path: Path) -> None:
    small_calls, small_read = add_cost(tmp_path, 20)
    large_calls, large_read = add_cost(tmp_path, 2_000)
    assert small_calls == large_calls
    assert small_read == large_read
    # A batch of four adds: three reads to screen it (stored ids, event ids, what was removed for good), one claim
    # of the new ids (nothing on an embedded store), two to prefetch candidates, one upsert.
    assert small_calls == Counter({"retrieve": 1, "buried": 1, "claim": 1, "scroll": 2, "nearest_many": 1,
                                   "upsert": 1})
    assert large_read <= 4 * (K + PREFETCH_SLACK)  # the user's nearest, never the store's size


def test_a_producers_embedding_is_used_and_the_model_runs_only_when_the_judge_compares_words(
        tmp_path: Path, embedder: Any) -> None:
    store = EdgeStore(tmp_path / "store")
    proc = Processor(store, embedder)
    first = "Keeps a sourdough starter named Bubbles."
    second = "Keeps a sourdough starter called Bubbles in the fridge."
    given = [float(x) * 3 for x in embedder.encode([first])[0]]  # not unit length: the schema normalises it

    def event(n: int, text: str) -> bytes:
        vec = given if n == 1 else [float(x) for x in embedder.encode([text])[0]]
        return orjson.dumps({"type": "memory.added", "event_id": f"p-{n}", "memory_id": f"p-{n}", "user_id": "baker",
                             "text": text, "created_at": f"2025-03-0{n}T10:00:00Z", "embedding": vec})

    alone = proc.process([Incoming(raw=event(1, first))])
    assert alone.embedded == 0  # no candidates: nothing for the model to do
    stored = store.retrieve(["p-1"], with_vectors=True)["p-1"]
    assert np.allclose(stored.vector, np.asarray(given) / np.linalg.norm(given), atol=1e-6)
    assert stored.features is None
    compared = proc.process([Incoming(raw=event(2, second))])
    assert compared.embedded == 1  # the new memory's words, for the judge
    assert store.retrieve(["p-2"])["p-2"].features is not None
    store.close()


def test_optimising_the_store_never_builds_a_vector_index_and_undoes_an_older_versions(tmp_path: Path) -> None:
    """An indexed (HNSW) segment made every add slower and no user-scoped read faster (bench/scale.py),
    so `rebuild_indexes` (full consolidation) leaves a store's segments plain, and turns the indexed
    segment of a store an older version made and optimised (the engine's default config) plain again."""
    import qdrant_edge as qe

    from dreamstream.streams.store.base import VECTOR_SIZE

    old = tmp_path / "old"
    shard = qe.EdgeShard.create(str(old), qe.EdgeConfig(
        vectors=qe.EdgeVectorParams(size=VECTOR_SIZE, distance=qe.Distance.Cosine)))
    points = [qe.Point(i + 1, vector(f"p-{i}").tolist(), {"user_id": f"u{i % 50}"}) for i in range(8_000)]
    shard.update(qe.UpdateOperation.upsert_points(points))
    shard.optimize()
    assert shard.info().indexed_vectors_count == 8_000  # what the engine's default does: the test guards that
    shard.close()
    del shard
    for path in (old, tmp_path / "new"):
        store = EdgeStore(path)
        if path.name == "new":
            fill(store, 8_000)
        before = store.count()
        store.rebuild_indexes()
        info = store.shard.info()
        assert info.indexed_vectors_count == 0 and info.points_count == before >= 8_000
        store.close()
    reopened = EdgeStore(old)
    assert reopened.count() == 8_000 and reopened.count({"user_id": "u7"}) == 160  # every point, still found
    reopened.close()
