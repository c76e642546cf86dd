"""A Qdrant server through qdrant-client: the path to several workers (and, with
`location=":memory:"`, the stand-in for the server API in tests).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from dreamstream.schemas.memory import Memory
from dreamstream.streams.store.base import (
    COLLECTION,
    INDEXED_FIELDS,
    UNSHOWN,
    VECTOR_SIZE,
    Where,
    conditions,
    guarded,
    point_id,
    scored,
    stored_payload,
    to_memory,
)

NO_USER = "\x00"
"""A user id no memory can have (ids are printable): the claims' insert-only filter matches nothing."""


@guarded
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
        self.url = url
        # The client's version check is off on purpose: qdrant-client 1.20 talks to the 1.18 server line
        # the project documents and tests against (the congruence suite runs on that server).
        self.client = QdrantClient(location=location) if location else \
            QdrantClient(url=url, api_key=api_key, check_compatibility=False)
        self.local = bool(location)
        self._made: set[str] = set()
        if not self.client.collection_exists(collection):
            try:
                self.client.create_collection(
                    collection, vectors_config=models.VectorParams(size=VECTOR_SIZE, distance=models.Distance.COSINE)
                )
            except Exception:  # another worker created it first (a 409): fine if it is there now
                if not self.client.collection_exists(collection):
                    raise
        if not location:  # local mode ignores payload indexes and warns about them
            # On every open, not only on creation: a worker killed between the two would leave the collection
            # without them for good, and every filtered read would scan.
            have = set((self.client.get_collection(collection).payload_schema or {}).keys())
            for name in INDEXED_FIELDS:
                if name not in have:
                    self.client.create_payload_index(collection, name, models.PayloadSchemaType.KEYWORD)

    def _filter(self, where: Where | None) -> Any:
        m = self._m
        if not where:
            return None
        return m.Filter(must=[
            m.FieldCondition(key=key, match=m.MatchAny(any=value) if any_of else m.MatchValue(value=value))
            for key, value, any_of in conditions(where)])

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
                payload=stored_payload(memory),
            ))
        self.client.upsert(self.collection, points=points, wait=True)

    def update(self, memory_id: str, fields: Mapping[str, Any]) -> None:
        self.update_many([memory_id], fields)

    def update_many(self, memory_ids: Sequence[str], fields: Mapping[str, Any]) -> None:
        if memory_ids:
            self.client.set_payload(self.collection, payload=dict(fields), points=[point_id(m) for m in memory_ids],
                                    wait=True)

    def retrieve(self, memory_ids: Sequence[str], with_vectors: bool = False) -> dict[str, Memory]:
        if not memory_ids:
            return {}
        records = self.client.retrieve(
            self.collection, ids=[point_id(m) for m in memory_ids], with_payload=True, with_vectors=with_vectors
        )
        found = (to_memory(r.payload, r.vector if with_vectors else None) for r in records)
        return {m.memory_id: m for m in found}

    def _payload(self, with_features: bool) -> Any:
        return True if with_features else self._m.PayloadSelectorExclude(exclude=UNSHOWN)

    def nearest(
        self, vector: np.ndarray, where: Where, limit: int, with_vectors: bool = False, with_features: bool = True
    ) -> list[tuple[Memory, float]]:
        response = self.client.query_points(
            self.collection, query=np.asarray(vector, dtype=np.float32).tolist(),
            query_filter=self._filter(where), limit=limit, with_payload=self._payload(with_features),
            with_vectors=with_vectors,
        )
        return scored(response.points, with_vectors)

    def nearest_many(
        self, vectors: Sequence[np.ndarray], wheres: Sequence[Where], limit: int, with_vectors: bool = False
    ) -> list[list[tuple[Memory, float]]]:
        """One round trip for a batch's candidate queries (`query_batch_points`)."""
        if not vectors:
            return []
        requests = [self._m.QueryRequest(query=np.asarray(v, dtype=np.float32).tolist(), filter=self._filter(w),
                                         limit=limit, with_payload=True, with_vector=with_vectors)
                    for v, w in zip(vectors, wheres, strict=True)]
        responses = self.client.query_batch_points(self.collection, requests=requests)
        return [scored(r.points, with_vectors) for r in responses]

    def scroll(self, where: Where | None = None, with_vectors: bool = False,
               with_features: bool = True) -> Iterator[Memory]:
        offset = None
        while True:
            records, offset = self.client.scroll(
                self.collection, scroll_filter=self._filter(where), limit=512, offset=offset,
                with_payload=self._payload(with_features), with_vectors=with_vectors,
            )
            for r in records:
                yield to_memory(r.payload, r.vector if with_vectors else None)
            if offset is None:
                return

    def count(self, where: Where | None = None) -> int:
        return int(self.client.count(self.collection, count_filter=self._filter(where), exact=True).count)

    def delete(self, memory_ids: Sequence[str]) -> None:
        if memory_ids:
            self.client.delete(self.collection, points_selector=[point_id(m) for m in memory_ids], wait=True)
            if self._has(self._claims):  # a hard delete or an erase frees the id
                self.client.delete(self._claims, points_selector=[point_id(m) for m in memory_ids], wait=True)

    @property
    def _claims(self) -> str:
        """`claim`'s collection: memory id -> the user who first stored it (no text)."""
        return f"{self.collection}-ids"

    def _has(self, name: str) -> bool:
        """Whether a side collection (tombstones, claims) is there: asked until it is (it never goes, and another
        worker may make it)."""
        if name not in self._made:
            if not self.client.collection_exists(name):
                return False
            self._made.add(name)
        return True

    def _make(self, name: str, index: str | None = None) -> None:
        """A side collection of one-number points, made unless it is there (another worker may make it first)."""
        if self._has(name):
            return
        m = self._m
        try:
            self.client.create_collection(name, vectors_config=m.VectorParams(size=1, distance=m.Distance.DOT))
            if index and not self.local:  # local mode ignores payload indexes
                self.client.create_payload_index(name, index, m.PayloadSchemaType.KEYWORD)
        except Exception:  # another worker made it first
            if not self.client.collection_exists(name):
                raise
        self._made.add(name)

    def claim(self, owners: Mapping[str, str]) -> dict[str, str]:
        """Claims new memory ids (memory id -> user) before anything of them is written; returns those another
        user holds (memory id -> that user). Ingest checks what is stored first, but two workers storing one id
        for two users at once both found it free, and the second write replaced the first user's memory (a
        point's id comes from the memory id alone). A claim is inserted only where none is (the server applies
        writes in order), so of two at once one wins and the other reads the winner back. The same user's
        claim again (a redelivery, a retry after a crash) is its own."""
        if not owners:
            return {}
        m = self._m
        self._make(self._claims, index="user_id")
        # Insert only: the filter matches no stored claim, so an existing one is never updated.
        never = m.Filter(must=[m.FieldCondition(key="user_id", match=m.MatchValue(value=NO_USER))])
        self.client.upsert(self._claims, wait=True, update_filter=never, points=[
            m.PointStruct(id=point_id(mid), vector=[1.0], payload={"memory_id": mid, "user_id": user})
            for mid, user in owners.items()])
        held = self.client.retrieve(self._claims, ids=[point_id(mid) for mid in owners], with_payload=True)
        return {str(r.payload["memory_id"]): str(r.payload["user_id"]) for r in held
                if r.payload and owners.get(str(r.payload["memory_id"])) not in (None, r.payload["user_id"])}

    def release_claims(self, user_id: str) -> None:
        """An erased user's claims go with them (their ids free again, their user id gone from the server)."""
        if self._has(self._claims):
            m = self._m
            self.client.delete(self._claims, wait=True, points_selector=m.FilterSelector(filter=m.Filter(must=[
                m.FieldCondition(key="user_id", match=m.MatchValue(value=user_id))])))

    @property
    def _graveyard(self) -> str:
        """`bury`'s collection: beside the memories, so no read, count or scan of them ever meets it."""
        return f"{self.collection}-tombstones"

    def bury(self, keys: Sequence[str], at: str) -> None:
        """Remembers what was removed for good (`changes.bury_deleted`, `erase_user`): digests and times, no text."""
        if not keys:
            return
        m = self._m
        self._make(self._graveyard)
        self.client.upsert(self._graveyard, wait=True, points=[
            m.PointStruct(id=point_id(k), vector=[1.0], payload={"key": k, "at": at}) for k in keys])

    def buried(self, keys: Sequence[str]) -> dict[str, str]:
        """Key -> when, for the keys `bury` was given."""
        if not keys:
            return {}
        if not self._has(self._graveyard):
            return {}
        records = self.client.retrieve(self._graveyard, ids=[point_id(k) for k in keys], with_payload=True)
        return {str(r.payload["key"]): str(r.payload["at"]) for r in records if r.payload}

    def drop(self) -> None:
        """Deletes the collection, its tombstones and claims (tests, benchmarks): what a fresh start needs."""
        for name in (self.collection, self._graveyard, self._claims):
            if self.client.collection_exists(name):
                self.client.delete_collection(name)
        self._made.clear()

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
