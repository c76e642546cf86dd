"""What both store backends share: the Protocol, the payload layout, ids, keys and filters."""

from __future__ import annotations

import functools
import hashlib
import re
import unicodedata
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol, TypeVar

import numpy as np

from dreamstream.schemas.errors import DreamError, StoreError
from dreamstream.schemas.memory import EMBEDDING_DIM, Memory

T = TypeVar("T")

VECTOR_SIZE = EMBEDDING_DIM
COLLECTION = "dream_memories"
NAMESPACE = uuid.UUID("5b0f3c62-7d7e-4f0e-9a55-0d1f6a1e9c11")
INDEXED_FIELDS = (
    "user_id", "status", "kind", "text_key", "event_id",
    "decision_ids", "project_id", "app_id", "agent_id", "run_id", "outbox_state",
)
"""Keyword indexes, each for a filter the code runs: scope (user, status, kind, app, agent, run,
project), exact duplicates (`text_key`), redelivery (`event_id`, once per batch), undo and passes
(`decision_ids`), unsent events (`outbox_state`). `memory_id` has none: a memory is read by its point
id, never filtered by it, and an index as unique as the ids cost every add for nothing."""

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


def stored_payload(memory: Memory) -> dict[str, Any]:
    payload = memory.payload()
    payload["text_key"] = text_key(memory.user_id, memory.text)
    return payload


def to_memory(payload: Mapping[str, Any] | None, vector: Any) -> Memory:
    if isinstance(vector, dict):  # named vectors: we use the default one
        vector = vector.get("") or next(iter(vector.values()), None)
    return Memory.from_payload(dict(payload or {}), vector)


def scored(points: Iterable[Any], with_vectors: bool) -> list[tuple[Memory, float]]:
    """Search hits (either backend's scored points) as (memory, score)."""
    return [(to_memory(p.payload, p.vector if with_vectors else None), float(p.score)) for p in points]


class MemoryStore(Protocol):
    """What the pipeline, the reads and the CLI need from a backend."""

    def upsert(self, memories: Sequence[Memory]) -> None: ...
    def update(self, memory_id: str, fields: Mapping[str, Any]) -> None: ...
    def retrieve(self, memory_ids: Sequence[str], with_vectors: bool = False) -> dict[str, Memory]: ...
    def nearest(
        self, vector: np.ndarray, where: Where, limit: int, with_vectors: bool = False, with_features: bool = True
    ) -> list[tuple[Memory, float]]: ...
    def nearest_many(
        self, vectors: Sequence[np.ndarray], wheres: Sequence[Where], limit: int, with_vectors: bool = False
    ) -> list[list[tuple[Memory, float]]]: ...
    def update_many(self, memory_ids: Sequence[str], fields: Mapping[str, Any]) -> None: ...
    def scroll(self, where: Where | None = None, with_vectors: bool = False,
               with_features: bool = True) -> Iterator[Memory]: ...
    def count(self, where: Where | None = None) -> int: ...
    def delete(self, memory_ids: Sequence[str]) -> None: ...
    def bury(self, keys: Sequence[str], at: str) -> None: ...
    def buried(self, keys: Sequence[str]) -> dict[str, str]: ...
    def claim(self, owners: Mapping[str, str]) -> dict[str, str]: ...
    def release_claims(self, user_id: str) -> None: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...




UNSHOWN = ["features"]
"""Payload no read shows: the judge's word features (about 6 KB a memory). A read that only shows rows
asks for the rest (`with_features=False`); a Memory read that way must never be written back."""


def conditions(where: Where | None) -> list[tuple[str, Any, bool]]:
    """`where` as (field, value, any_of) triples: a list, tuple or set value matches any of its items."""
    out = []
    for key, value in (where or {}).items():
        if isinstance(value, list | tuple | set | frozenset):
            out.append((key, list(value), True))
        else:
            out.append((key, value, False))
    return out


def sorted_by_time(memories: Iterable[Memory]) -> list[Memory]:
    return sorted(memories, key=lambda m: (m.created_at, m.memory_id))


MIN_FREE_BYTES = 64 * 2**20
"""Writes to an embedded store stop (a StoreError, so ingest pauses and retries) below this much free
disk by default (DREAM_MIN_FREE_MB): a full disk inside the engine's mapped files ends in SIGBUS."""

GUARDED = ("upsert", "update", "update_many", "retrieve", "nearest", "nearest_many", "scroll", "count", "delete",
           "bury", "buried", "claim", "release_claims", "compact", "flush", "optimize", "rebuild_indexes")


def guarded(cls: type[T]) -> type[T]:
    """Every store call's failure surfaces as StoreError naming the call, so ingest can tell a store
    fault (retry the batch later) from a bad event (dead-letter it). Our own DreamErrors pass as they are."""
    for name in GUARDED:
        fn = getattr(cls, name, None)
        if fn is not None:
            setattr(cls, name, _scroll_guard(fn) if name == "scroll" else _guard(name, fn))
    return cls


def _guard(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except DreamError:
            raise
        except Exception as exc:
            raise StoreError(f"store {name} failed: {type(exc).__name__}: {exc}") from exc
    return call


def _scroll_guard(fn: Callable[..., Iterator[Memory]]) -> Callable[..., Iterator[Memory]]:
    @functools.wraps(fn)
    def scroll(*args: Any, **kwargs: Any) -> Iterator[Memory]:
        try:
            yield from fn(*args, **kwargs)
        except DreamError:
            raise
        except Exception as exc:
            raise StoreError(f"store scroll failed: {type(exc).__name__}: {exc}") from exc
    return scroll
