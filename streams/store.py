"""The memory collection: one schema, two backends behind one interface.

`EdgeStore` runs Qdrant's engine in process (qdrant-edge-py) and is the embedded default: with a
keyword index on user_id it serves thousands of filtered nearest-neighbour queries a second.
`ServerStore` talks to a Qdrant server through qdrant-client; it is the path to several workers
(and, with `location=":memory:"`, the stand-in for the server API in tests).
"""

from __future__ import annotations

import hashlib
import os
import re
import unicodedata
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from dreamstream.schemas.memory import Memory

VECTOR_SIZE = 384
COLLECTION = "dream_memories"
NAMESPACE = uuid.UUID("5b0f3c62-7d7e-4f0e-9a55-0d1f6a1e9c11")
INDEXED_FIELDS = (
    "memory_id", "user_id", "status", "kind", "text_key", "event_id",
    "decision_ids", "project_id", "app_id", "agent_id", "run_id",
)

Where = Mapping[str, Any]
"""A conjunction of field conditions: a value matches exactly, a list or tuple matches any of it."""


def point_id(memory_id: str) -> str:
    """Qdrant ids must be integers or UUIDs; memory ids are free strings, so map them stably."""
    return str(uuid.uuid5(NAMESPACE, memory_id))


_PUNCT = re.compile(r"[^\w\s]")
_SPACE = re.compile(r"\s+")


def normalise_text(text: str) -> str:
    """Case, accents, punctuation and spacing removed: the key for exact-duplicate lookups."""
    text = unicodedata.normalize("NFKD", text)
    text = "".join(ch for ch in text if not unicodedata.combining(ch)).casefold()
    return _SPACE.sub(" ", _PUNCT.sub(" ", text)).strip()


def text_key(user_id: str, text: str) -> str:
    return hashlib.sha1(f"{user_id}\x00{normalise_text(text)}".encode()).hexdigest()


def _stored_payload(memory: Memory) -> dict[str, Any]:
    payload = memory.payload()
    payload["text_key"] = text_key(memory.user_id, memory.text)
    return payload


def _to_memory(payload: Mapping[str, Any] | None, vector: Any) -> Memory:
    if isinstance(vector, dict):  # named vectors: we use the default one
        vector = vector.get("") or next(iter(vector.values()), None)
    return Memory.from_payload(dict(payload or {}), vector)


class MemoryStore(Protocol):
    """What the pipeline, the reads and the CLI need from a backend."""

    def upsert(self, memories: Sequence[Memory]) -> None: ...
    def update(self, memory_id: str, fields: Mapping[str, Any]) -> None: ...
    def retrieve(self, memory_ids: Sequence[str], with_vectors: bool = False) -> dict[str, Memory]: ...
    def nearest(
        self, vector: np.ndarray, where: Where, limit: int, with_vectors: bool = False
    ) -> list[tuple[Memory, float]]: ...
    def scroll(self, where: Where | None = None, with_vectors: bool = False) -> Iterator[Memory]: ...
    def count(self, where: Where | None = None) -> int: ...
    def delete(self, memory_ids: Sequence[str]) -> None: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...


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
        must = []
        for key, value in where.items():
            if isinstance(value, list | tuple | set | frozenset):
                match = qe.MatchAny(any=list(value))
            else:
                match = qe.MatchValue(value)
            must.append(qe.FieldCondition(key=key, match=match))
        return qe.Filter(must=must)

    def upsert(self, memories: Sequence[Memory]) -> None:
        if not memories:
            return
        qe = self._qe
        points = []
        for memory in memories:
            if memory.vector is None:
                raise ValueError(f"memory {memory.memory_id} has no vector")
            vector = np.asarray(memory.vector, dtype=np.float32).tolist()
            points.append(qe.Point(point_id(memory.memory_id), vector, _stored_payload(memory)))
        self.shard.update(qe.UpdateOperation.upsert_points(points))

    def update(self, memory_id: str, fields: Mapping[str, Any]) -> None:
        self.shard.update(self._qe.UpdateOperation.set_payload([point_id(memory_id)], dict(fields)))

    def retrieve(self, memory_ids: Sequence[str], with_vectors: bool = False) -> dict[str, Memory]:
        if not memory_ids:
            return {}
        records = self.shard.retrieve([point_id(m) for m in memory_ids], True, with_vectors)
        found = (_to_memory(r.payload, r.vector if with_vectors else None) for r in records)
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
        return [(_to_memory(h.payload, h.vector if with_vectors else None), float(h.score)) for h in hits]

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
                yield _to_memory(r.payload, r.vector if with_vectors else None)
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


class ServerStore:
    """A Qdrant server (or qdrant-client's local mode) through qdrant-client."""

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        collection: str = COLLECTION,
        location: str | None = None,
    ) -> None:
        from qdrant_client import QdrantClient, models

        self._m = models
        self.collection = collection
        self.client = QdrantClient(location=location) if location else QdrantClient(url=url, api_key=api_key)
        self.local = bool(location)
        if not self.client.collection_exists(collection):
            self.client.create_collection(
                collection, vectors_config=models.VectorParams(size=VECTOR_SIZE, distance=models.Distance.COSINE)
            )
            if not location:  # local mode ignores payload indexes and warns about them
                for name in INDEXED_FIELDS:
                    self.client.create_payload_index(collection, name, models.PayloadSchemaType.KEYWORD)

    def _filter(self, where: Where | None) -> Any:
        m = self._m
        if not where:
            return None
        must: list[Any] = []
        for key, value in where.items():
            if isinstance(value, list | tuple | set | frozenset):
                must.append(m.FieldCondition(key=key, match=m.MatchAny(any=list(value))))
            else:
                must.append(m.FieldCondition(key=key, match=m.MatchValue(value=value)))
        return m.Filter(must=must)

    def upsert(self, memories: Sequence[Memory]) -> None:
        if not memories:
            return
        points = []
        for memory in memories:
            if memory.vector is None:
                raise ValueError(f"memory {memory.memory_id} has no vector")
            points.append(self._m.PointStruct(
                id=point_id(memory.memory_id),
                vector=np.asarray(memory.vector, dtype=np.float32).tolist(),
                payload=_stored_payload(memory),
            ))
        self.client.upsert(self.collection, points=points, wait=True)

    def update(self, memory_id: str, fields: Mapping[str, Any]) -> None:
        self.client.set_payload(self.collection, payload=dict(fields), points=[point_id(memory_id)], wait=True)

    def retrieve(self, memory_ids: Sequence[str], with_vectors: bool = False) -> dict[str, Memory]:
        if not memory_ids:
            return {}
        records = self.client.retrieve(
            self.collection, ids=[point_id(m) for m in memory_ids], with_payload=True, with_vectors=with_vectors
        )
        found = (_to_memory(r.payload, r.vector if with_vectors else None) for r in records)
        return {m.memory_id: m for m in found}

    def nearest(
        self, vector: np.ndarray, where: Where, limit: int, with_vectors: bool = False
    ) -> list[tuple[Memory, float]]:
        response = self.client.query_points(
            self.collection, query=np.asarray(vector, dtype=np.float32).tolist(),
            query_filter=self._filter(where), limit=limit, with_payload=True, with_vectors=with_vectors,
        )
        return [
            (_to_memory(p.payload, p.vector if with_vectors else None), float(p.score)) for p in response.points
        ]

    def scroll(self, where: Where | None = None, with_vectors: bool = False) -> Iterator[Memory]:
        offset = None
        while True:
            records, offset = self.client.scroll(
                self.collection, scroll_filter=self._filter(where), limit=512, offset=offset,
                with_payload=True, with_vectors=with_vectors,
            )
            for r in records:
                yield _to_memory(r.payload, r.vector if with_vectors else None)
            if offset is None:
                return

    def count(self, where: Where | None = None) -> int:
        return int(self.client.count(self.collection, count_filter=self._filter(where), exact=True).count)

    def delete(self, memory_ids: Sequence[str]) -> None:
        if memory_ids:
            self.client.delete(self.collection, points_selector=[point_id(m) for m in memory_ids], wait=True)

    def flush(self) -> None:
        """The server persists on its own; nothing to do."""

    def optimize(self) -> None:
        """The server optimises in the background."""

    def rebuild_indexes(self) -> None:
        """Recreates the payload indexes (full consolidation); local mode keeps none."""
        if self.local:
            return
        m = self._m
        for name in INDEXED_FIELDS:
            self.client.delete_payload_index(self.collection, name, wait=True)
            self.client.create_payload_index(self.collection, name, m.PayloadSchemaType.KEYWORD, wait=True)

    def close(self) -> None:
        self.client.close()


def open_store(store_dir: str | None = None, qdrant_url: str | None = None, api_key: str | None = None) -> Any:
    """The configured backend: a Qdrant server when a URL is given, else the embedded shard."""
    if qdrant_url:
        if qdrant_url == ":memory:":
            return ServerStore(location=":memory:")
        return ServerStore(url=qdrant_url, api_key=api_key)
    if not store_dir:
        raise ValueError("no store: give --store DIR (embedded) or set QDRANT_URL")
    return EdgeStore(store_dir)


def sorted_by_time(memories: Iterable[Memory]) -> list[Memory]:
    return sorted(memories, key=lambda m: (m.created_at, m.memory_id))
