"""Decoding and validating incoming events, and building the outgoing ones.

Pure functions: the stream, `dream replay` and the tests share them. A bad event raises
`InvalidEvent` with a stable reason code; the caller turns it into a dead-letter record.
"""

from __future__ import annotations

import base64
import math
from datetime import UTC, datetime
from typing import Any

import orjson

from dreamstream.schemas.memory import MAX_TEXT_CHARS, MemoryAdded

MEMORY_ADDED = "memory.added"
PATTERN_ADDED = "pattern.added"
MEMORY_STATUS = "memory.status"
DEAD_LETTER = "dead_letter"
INGEST_TYPES = (MEMORY_ADDED, PATTERN_ADDED)
MAX_EVENT_BYTES = 64 * 1024
EMBEDDING_DIM = 384

REASONS = (
    "undecodable", "invalid_json", "not_an_object", "unknown_type", "missing_field", "bad_field",
    "empty_text", "oversize", "duplicate_event_id", "memory_id_conflict", "processing_error",
)


class InvalidEvent(ValueError):
    """An event that cannot be processed; `reason` is one of REASONS."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def normalise_time(value: Any, field: str) -> str:
    """ISO 8601 with a zone, returned in UTC as `...Z` so strings sort in time order."""
    if not isinstance(value, str) or not value:
        raise InvalidEvent("bad_field", f"{field} must be an ISO 8601 string")
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError as exc:
        raise InvalidEvent("bad_field", f"{field} is not ISO 8601: {value!r}") from exc
    if parsed.tzinfo is None:
        raise InvalidEvent("bad_field", f"{field} needs a time zone: {value!r}")
    parsed = parsed.astimezone(UTC)
    text = parsed.strftime("%Y-%m-%dT%H:%M:%S")
    if parsed.microsecond:
        text += f".{parsed.microsecond:06d}"
    return text + "Z"


def _string(obj: dict[str, Any], field: str, required: bool = True, limit: int = 256) -> str | None:
    value = obj.get(field)
    if value is None:
        if required:
            raise InvalidEvent("missing_field", f"{field} is required")
        return None
    if not isinstance(value, str):
        raise InvalidEvent("bad_field", f"{field} must be a string, got {type(value).__name__}")
    if required and not value.strip():
        raise InvalidEvent("bad_field", f"{field} must not be empty")
    if len(value) > limit:
        raise InvalidEvent("bad_field", f"{field} is longer than {limit} characters")
    return value


def decode(raw: bytes | str | dict[str, Any]) -> dict[str, Any]:
    """Bytes to a JSON object, or InvalidEvent."""
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogateescape")
    if len(raw) > MAX_EVENT_BYTES:
        raise InvalidEvent("oversize", f"event is {len(raw)} bytes; the limit is {MAX_EVENT_BYTES}")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidEvent("undecodable", f"not UTF-8 at byte {exc.start}") from exc
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidEvent("invalid_json", str(exc)) from exc
    if not isinstance(obj, dict):
        raise InvalidEvent("not_an_object", f"expected a JSON object, got {type(obj).__name__}")
    return obj


MAX_METADATA_DEPTH = 16
"""Deepest nesting of metadata accepted: the store must read back every payload it takes (a payload
nested ~200 levels deep was stored, then no read of that user's memories could decode it)."""


def _depth(value: Any, limit: int = MAX_METADATA_DEPTH + 1) -> int:
    """Nesting depth of a JSON value, counted no further than `limit` (no recursion blow-up)."""
    depth, level = 0, [value]
    while level and depth < limit:
        nxt: list[Any] = []
        for v in level:
            if isinstance(v, dict):
                nxt.extend(v.values())
            elif isinstance(v, list):
                nxt.extend(v)
        if not nxt:
            break
        depth += 1
        level = nxt
    return depth


def parse_memory_event(raw: bytes | str | dict[str, Any]) -> MemoryAdded:
    """Validate a `memory.added` (or synthesis `pattern.added`) event into a MemoryAdded."""
    obj = decode(raw)
    kind_of_event = obj.get("type")
    if kind_of_event not in INGEST_TYPES:
        raise InvalidEvent("unknown_type", f"type {kind_of_event!r} is not one of {', '.join(INGEST_TYPES)}")
    event_id = _string(obj, "event_id")
    memory_id = _string(obj, "memory_id")
    user_id = _string(obj, "user_id")
    text = obj.get("text")
    if text is None:
        raise InvalidEvent("missing_field", "text is required")
    if not isinstance(text, str):
        raise InvalidEvent("bad_field", f"text must be a string, got {type(text).__name__}")
    if not text.strip() or not any(ch.isprintable() and not ch.isspace() for ch in text):
        raise InvalidEvent("empty_text", "text is empty (or only whitespace and control characters)")
    if len(text) > MAX_TEXT_CHARS:
        raise InvalidEvent("oversize", f"text has {len(text)} characters; the limit is {MAX_TEXT_CHARS}")
    if "created_at" not in obj or obj["created_at"] is None:
        raise InvalidEvent("missing_field", "created_at is required")
    created_at = normalise_time(obj["created_at"], "created_at")
    metadata = obj.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise InvalidEvent("bad_field", "metadata must be an object")
    if _depth(metadata) > MAX_METADATA_DEPTH:
        raise InvalidEvent("bad_field", f"metadata is nested deeper than {MAX_METADATA_DEPTH} levels")
    if "type" in metadata and metadata["type"] is not None and not isinstance(metadata["type"], str):
        raise InvalidEvent("bad_field", "metadata.type must be a string")
    confidence = metadata.get("confidence")
    if confidence is not None and (
        isinstance(confidence, bool) or not isinstance(confidence, int | float)
        or not math.isfinite(confidence) or not 0.0 <= confidence <= 1.0
    ):
        raise InvalidEvent("bad_field", "metadata.confidence must be a number in [0, 1]")
    if "pinned" in metadata and metadata["pinned"] is not None and not isinstance(metadata["pinned"], bool):
        raise InvalidEvent("bad_field", "metadata.pinned must be a boolean")
    embedding = obj.get("embedding")
    vector: tuple[float, ...] | None = None
    if embedding is not None:
        if (not isinstance(embedding, list) or len(embedding) != EMBEDDING_DIM
                or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in embedding)):
            raise InvalidEvent("bad_field", f"embedding must be a list of {EMBEDDING_DIM} numbers")
        norm = math.sqrt(sum(float(x) * float(x) for x in embedding))
        if not math.isfinite(norm) or norm == 0.0:
            raise InvalidEvent("bad_field", "embedding must be finite and non-zero")
        vector = tuple(float(x) / norm for x in embedding)
    sources: tuple[str, ...] = ()
    if kind_of_event == PATTERN_ADDED:
        raw_sources = obj.get("sources")
        if not isinstance(raw_sources, list) or not all(isinstance(s, str) for s in raw_sources):
            raise InvalidEvent("bad_field", "a pattern needs sources: a list of memory ids")
        sources = tuple(raw_sources)
    assert event_id is not None and memory_id is not None and user_id is not None
    return MemoryAdded(
        event_id=event_id,
        memory_id=memory_id,
        user_id=user_id,
        text=text.strip(),
        created_at=created_at,
        app_id=_string(obj, "app_id", required=False),
        agent_id=_string(obj, "agent_id", required=False),
        run_id=_string(obj, "run_id", required=False),
        project_id=_string(obj, "project_id", required=False),
        metadata={
            "type": metadata.get("type"),
            "confidence": confidence,
            "pinned": bool(metadata.get("pinned") or False),
            **{k: v for k, v in metadata.items() if k not in ("type", "confidence", "pinned")},
        },
        embedding=vector,
        kind="pattern" if kind_of_event == PATTERN_ADDED else "fact",
        sources=sources,
    )


def dead_letter(
    raw: bytes | str | dict[str, Any] | None,
    reason: str,
    error: str,
    topic: str | None = None,
    partition: int | None = None,
    offset: int | None = None,
) -> dict[str, Any]:
    """The dead-letter record: the original bytes (base64) and where they came from."""
    if isinstance(raw, dict):
        raw = orjson.dumps(raw)
    elif isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogateescape")
    original = raw or b""
    try:
        preview: str | None = original[:512].decode("utf-8")
    except UnicodeDecodeError:
        preview = None
    return {
        "type": DEAD_LETTER,
        "reason": reason,
        "error": error,
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "original_b64": base64.b64encode(original).decode("ascii"),
        "original_preview": preview,
        "at": now_iso(),
    }


def status_event(
    decision_id: str,
    memory_id: str,
    user_id: str,
    from_status: str | None,
    to_status: str,
    linked_memory_id: str | None,
    action: str,
    evidence: dict[str, Any],
    undo: bool = False,
) -> dict[str, Any]:
    """A `memory.status` event: one status change of one memory and why."""
    return {
        "type": MEMORY_STATUS,
        "decision_id": decision_id,
        "memory_id": memory_id,
        "user_id": user_id,
        "from_status": from_status,
        "to_status": to_status,
        "linked_memory_id": linked_memory_id,
        "action": action,
        "undo": undo,
        "evidence": evidence,
        "at": now_iso(),
    }
