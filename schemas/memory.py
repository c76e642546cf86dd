"""The memory model shared by every agent, the store and the CLI.

Plain dataclasses so the decision logic can be exercised without Kafka or Qdrant.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import numpy as np

Kind = Literal["fact", "pattern"]
Status = Literal["active", "superseded", "merged", "expired", "deleted"]

MAX_TEXT_CHARS = 4000
"""Longest memory text accepted; longer ones are dead-lettered (memories are short statements)."""
EMBEDDING_DIM = 384
"""all-MiniLM-L6-v2's vector size: the store collection, the model and precomputed embeddings agree on it."""
LINK_FIELDS = ("status", "superseded_by", "supersedes", "merged_into", "merged_from")
"""A memory's status and links: what a decision changes and its undo restores."""


def parse_time(value: str) -> datetime:
    """A stored ISO 8601 timestamp (`...Z` or an offset) as an aware datetime; ValueError when it is not one."""
    return datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))


class MetadataView:
    """The metadata fields the decisions read, with their defaults; shared by events and stored memories."""

    metadata: dict[str, Any]

    @property
    def memory_type(self) -> str:
        return str(self.metadata.get("type") or "unknown")

    @property
    def confidence(self) -> float:
        value = self.metadata.get("confidence")
        return float(value) if isinstance(value, int | float) else 1.0

    @property
    def pinned(self) -> bool:
        return bool(self.metadata.get("pinned", False))


@dataclass(frozen=True)
class MemoryAdded(MetadataView):
    """A validated `memory.added` event (see schemas/json/memory.added.schema.json)."""

    event_id: str
    memory_id: str
    user_id: str
    text: str
    created_at: str  # ISO 8601, UTC, normalised to ...Z
    app_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    project_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    embedding: tuple[float, ...] | None = None
    kind: Kind = "fact"
    sources: tuple[str, ...] = ()
    replaces: str | None = None
    """An update (`PATCH /v1/memories/{id}`): the memory of the same user this one supersedes, as the
    user asked, without the judge."""


@dataclass
class Memory(MetadataView):
    """A stored memory: the Qdrant payload plus its vector (unit length, EMBEDDING_DIM dims)."""

    memory_id: str
    user_id: str
    text: str
    created_at: str
    updated_at: str
    kind: Kind = "fact"
    status: Status = "active"
    app_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    project_id: str | None = None
    superseded_by: str | None = None
    supersedes: list[str] = field(default_factory=list)
    merged_into: str | None = None
    merged_from: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    event_id: str | None = None
    decision_ids: list[str] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    access: dict[str, Any] = field(default_factory=dict)
    """Reads of it: last (ISO time), count, stability (days), pending (access times and co-read ids not
    yet folded in by light consolidation)."""
    links: dict[str, float] = field(default_factory=dict)
    """Co-access weights to other memories of the user (Hebbian; kept by light consolidation)."""
    cluster: int | None = None
    features: dict[str, Any] | None = None
    """The judge's word features (`agents.alignment.TokenFeatures.to_payload`), computed once at ingest."""
    pending: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Target memory id -> the fields its decisions still have to set there. Written with the memory in
    one store write and cleared once every target carries them: a crash in between is rolled forward
    when the event is delivered again (core/ingest.py)."""
    outbox: list[dict[str, Any]] = field(default_factory=list)
    """The memory.status events of its decisions not yet published; cleared once the worker sent them."""
    vector: np.ndarray | None = None

    def undone_decisions(self) -> set[str]:
        """Ids of this memory's decisions that were undone (a review item dismissed with `dream undo` among them)."""
        return {str(r.get("decision_id")) for r in self.decisions if r.get("undone")}

    def payload(self) -> dict[str, Any]:
        """The Qdrant payload: every field but the vector."""
        return {
            "memory_id": self.memory_id,
            "user_id": self.user_id,
            "app_id": self.app_id,
            "agent_id": self.agent_id,
            "run_id": self.run_id,
            "project_id": self.project_id,
            "text": self.text,
            "kind": self.kind,
            "status": self.status,
            "superseded_by": self.superseded_by,
            "supersedes": list(self.supersedes),
            "merged_into": self.merged_into,
            "merged_from": list(self.merged_from),
            "sources": list(self.sources),
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "metadata": dict(self.metadata),
            "event_id": self.event_id,
            "decision_ids": list(self.decision_ids),
            "decisions": list(self.decisions),
            "conflicts": list(self.conflicts),
            "access": dict(self.access),
            "links": dict(self.links),
            "cluster": self.cluster,
            "features": self.features,
            "pending": dict(self.pending),
            "outbox": list(self.outbox),
            "outbox_state": "unsent" if self.outbox else None,
        }

    @classmethod
    def from_payload(cls, payload: dict[str, Any], vector: Any = None) -> Memory:
        return cls(
            memory_id=payload["memory_id"],
            user_id=payload["user_id"],
            text=payload.get("text", ""),
            created_at=payload.get("created_at", ""),
            updated_at=payload.get("updated_at", payload.get("created_at", "")),
            kind=payload.get("kind", "fact"),
            status=payload.get("status", "active"),
            app_id=payload.get("app_id"),
            agent_id=payload.get("agent_id"),
            run_id=payload.get("run_id"),
            project_id=payload.get("project_id"),
            superseded_by=payload.get("superseded_by"),
            supersedes=list(payload.get("supersedes") or []),
            merged_into=payload.get("merged_into"),
            merged_from=list(payload.get("merged_from") or []),
            sources=list(payload.get("sources") or []),
            metadata=dict(payload.get("metadata") or {}),
            event_id=payload.get("event_id"),
            decision_ids=list(payload.get("decision_ids") or []),
            decisions=list(payload.get("decisions") or []),
            conflicts=list(payload.get("conflicts") or []),
            access=dict(payload.get("access") or {}),
            links={str(k): float(v) for k, v in (payload.get("links") or {}).items()},
            cluster=payload.get("cluster"),
            features=payload.get("features"),
            pending=dict(payload.get("pending") or {}),
            outbox=list(payload.get("outbox") or []),
            vector=None if vector is None else np.asarray(vector, dtype=np.float32),
        )

    def export_row(self) -> dict[str, Any]:
        """One line of `dream export` (the final-state format of shared/bench/FORMAT.md, plus context)."""
        return {
            "memory_id": self.memory_id,
            "user_id": self.user_id,
            "kind": self.kind,
            "status": self.status,
            "superseded_by": self.superseded_by,
            "supersedes": list(self.supersedes),
            "merged_into": self.merged_into,
            "merged_from": list(self.merged_from),
            "sources": list(self.sources),
            "text": self.text,
            "app_id": self.app_id,
            "agent_id": self.agent_id,
            "run_id": self.run_id,
            "project_id": self.project_id,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "metadata": dict(self.metadata),
        }
