"""Faust records of the outgoing events, serialized with the orjson codec.

Consumers in other languages use the JSON Schemas in schemas/json/; these records are the
Python side of the same contracts.
"""

from __future__ import annotations

from typing import Any

import faust

from dreamstream.streams.worker import codecs as _codecs  # noqa: F401  (registers "orjson")


class MemoryStatus(faust.Record, serializer="orjson", include_metadata=False):
    type: str
    decision_id: str
    memory_id: str
    user_id: str
    to_status: str
    action: str
    at: str
    from_status: str | None = None
    linked_memory_id: str | None = None
    undo: bool = False
    evidence: dict[str, Any] | None = None


class DeadLetter(faust.Record, serializer="orjson", include_metadata=False):
    type: str
    reason: str
    error: str
    original_b64: str
    at: str
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    original_preview: str | None = None
    original_size: int | None = None
    original_sha256: str | None = None
