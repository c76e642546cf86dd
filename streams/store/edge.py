"""The embedded backend: Qdrant's engine in process (qdrant-edge-py), a shard in a local folder.

With a keyword index on user_id it serves thousands of filtered nearest-neighbour queries a second.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from dreamstream.schemas.memory import Memory
from dreamstream.streams.store.base import (
    INDEXED_FIELDS,
    VECTOR_SIZE,
    Where,
    conditions,
    point_id,
    stored_payload,
    to_memory,
)


class EdgeStore:
    """The embedded backend: a qdrant-edge shard in a local folder."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        import qdrant_edge as qe

        self._qe = qe
        self.path = os.fspath(path)
        config = qe.EdgeConfig(
            vectors=qe.EdgeVectorParams(size=VECTOR_SIZE, distance=qe.Distance.Cosine),
            max_search_threads=2,
        )
        os.makedirs(self.path, exist_ok=True)
        fresh = not any(name != ".lock" for name in os.listdir(self.path))
        self.shard = qe.EdgeShard.create(self.path, config) if fresh else qe.EdgeShard.load(self.path)
        if fresh:
            for name in INDEXED_FIELDS:
                self.shard.update(qe.UpdateOperation.create_field_index(name, qe.PayloadSchemaType.Keyword))

    def _filter(self, where: Where | None) -> Any:
        qe = self._qe
        if not where:
            return None
        return qe.Filter(must=[
            qe.FieldCondition(key=key, match=qe.MatchAny(any=value) if any_of else qe.MatchValue(value))
            for key, value, any_of in conditions(where)])

    def upsert(self, memories: Sequence[Memory]) -> None:
        if not memories:
            return
        qe = self._qe
        points = []
        for memory in memories:
            if memory.vector is None:
                raise ValueError(f"memory {memory.memory_id} has no vector")
            vector = np.asarray(memory.vector, dtype=np.float32).tolist()
            points.append(qe.Point(point_id(memory.memory_id), vector, stored_payload(memory)))
        self.shard.update(qe.UpdateOperation.upsert_points(points))

    def update(self, memory_id: str, fields: Mapping[str, Any]) -> None:
        self.shard.update(self._qe.UpdateOperation.set_payload([point_id(memory_id)], dict(fields)))

    def retrieve(self, memory_ids: Sequence[str], with_vectors: bool = False) -> dict[str, Memory]:
        if not memory_ids:
            return {}
        records = self.shard.retrieve([point_id(m) for m in memory_ids], True, with_vectors)
        found = (to_memory(r.payload, r.vector if with_vectors else None) for r in records)
        return {m.memory_id: m for m in found}

    def nearest(
        self, vector: np.ndarray, where: Where, limit: int, with_vectors: bool = False
    ) -> list[tuple[Memory, float]]:
        qe = self._qe
        request = qe.QueryRequest(
            limit=limit,
            query=qe.Query.Nearest(np.asarray(vector, dtype=np.float32).tolist()),
            filter=self._filter(where),
            with_payload=True,
            with_vector=with_vectors,
        )
        hits = self.shard.query(request)
        return [(to_memory(h.payload, h.vector if with_vectors else None), float(h.score)) for h in hits]

    def scroll(self, where: Where | None = None, with_vectors: bool = False) -> Iterator[Memory]:
        qe = self._qe
        offset = None
        while True:
            request = qe.ScrollRequest(
                offset=offset, limit=512, filter=self._filter(where),
                with_payload=True, with_vector=with_vectors,
            )
            records, offset = self.shard.scroll(request)
            for r in records:
                yield to_memory(r.payload, r.vector if with_vectors else None)
            if offset is None:
                return

    def count(self, where: Where | None = None) -> int:
        return int(self.shard.count(self._qe.CountRequest(exact=True, filter=self._filter(where))))

    def delete(self, memory_ids: Sequence[str]) -> None:
        if memory_ids:
            self.shard.update(self._qe.UpdateOperation.delete_points([point_id(m) for m in memory_ids]))

    def flush(self) -> None:
        self.shard.flush()

    def optimize(self) -> None:
        """Builds the HNSW index (edge builds it only on request) and compacts segments."""
        self.shard.optimize()

    def rebuild_indexes(self) -> None:
        """Drops and recreates the payload indexes, then optimises (full consolidation's last step)."""
        qe = self._qe
        for name in INDEXED_FIELDS:
            self.shard.update(qe.UpdateOperation.delete_field_index(name))
            self.shard.update(qe.UpdateOperation.create_field_index(name, qe.PayloadSchemaType.Keyword))
        self.shard.optimize()

    def close(self) -> None:
        self.shard.flush()
        self.shard.close()
