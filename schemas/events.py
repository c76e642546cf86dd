"""Decoding and validating incoming events, and building the outgoing ones.

Pure functions: the stream, `dream replay` and the tests share them. A bad event raises
`InvalidEvent` with a stable reason code; the caller turns it into a dead-letter record.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
import unicodedata
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from dreamstream.schemas import contracts
from dreamstream.schemas.errors import InvalidInput
from dreamstream.schemas.memory import MAX_TEXT_CHARS, MemoryAdded, parse_time

MEMORY_ADDED = "memory.added"
PATTERN_ADDED = "pattern.added"
MEMORY_STATUS = "memory.status"
DEAD_LETTER = "dead_letter"
INGEST_TYPES = (MEMORY_ADDED, PATTERN_ADDED)
USER_ERASE = "user.erase"
"""An erasure on `memory.added`, behind the user's earlier adds in their partition (`erase_of`)."""
MAX_EVENT_BYTES = 64 * 1024

REASONS = (
    "undecodable", "invalid_json", "not_an_object", "unknown_type", "missing_field", "bad_field",
    "empty_text", "oversize", "duplicate_event_id", "memory_id_conflict", "key_mismatch", "processing_error",
    "null_value", "unauthorised", "replayed",
)


class InvalidEvent(InvalidInput):
    """An event that cannot be processed; `reason` is one of REASONS."""


CLOCK_SKEW = timedelta(days=1)
"""How far ahead of the reading clock an event may be dated: a producer's clock skew, not an event from the future.
A memory dated years ahead stayed the newest of its user's facts: every real update of it became a review item,
and it stayed current (an audit of event time); a read so dated stopped the memory from ever decaying."""


def check_not_ahead(at: str, field: str) -> None:
    """Refuses a normalised time more than `CLOCK_SKEW` ahead of now (a `bad_field` dead letter)."""
    if parse_time(at) > datetime.now(UTC) + CLOCK_SKEW:
        raise InvalidEvent("bad_field", f"{field} {at} is in the future (more than a day ahead of this clock)")


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


MIN_YEAR, MAX_YEAR = 1900, 2999
"""Dates outside these are typing errors or probes; inside them the string order is the time order."""


def normalise_time(value: Any, field: str) -> str:
    """ISO 8601 with a zone, returned in UTC as `...Z` so strings sort in time order."""
    if not isinstance(value, str) or not value:
        raise InvalidEvent("bad_field", f"{field} must be an ISO 8601 string")
    try:
        parsed = parse_time(value)
    except (ValueError, OverflowError) as exc:
        raise InvalidEvent("bad_field", f"{field} is not ISO 8601: {value!r}") from exc
    if parsed.tzinfo is None:
        raise InvalidEvent("bad_field", f"{field} needs a time zone: {value!r}")
    try:
        parsed = parsed.astimezone(UTC)
    except OverflowError as exc:  # 9999-12-31T23:59-01:00 is past the calendar's end in UTC
        raise InvalidEvent("bad_field", f"{field} is outside {MIN_YEAR}-{MAX_YEAR}: {value!r}") from exc
    if not MIN_YEAR <= parsed.year <= MAX_YEAR:
        raise InvalidEvent("bad_field", f"{field} is outside {MIN_YEAR}-{MAX_YEAR}: {value!r}")
    text = f"{parsed.year:04d}" + parsed.strftime("-%m-%dT%H:%M:%S")
    if parsed.microsecond:
        text += f".{parsed.microsecond:06d}"
    return text + "Z"


ID_FIELDS = ("event_id", "memory_id", "user_id", "app_id", "agent_id", "run_id", "project_id")


def check_id(value: Any, name: str) -> None:
    """An id is refused, never repaired: printable, no surrounding whitespace, no path. A stripped
    "u-7 " read as "u-7" would hand one user's memories to another; "../x" names a file, not a user."""
    if value is None:
        return
    if not isinstance(value, str) or not value or value != value.strip() or not value.isprintable() \
            or "/" in value or "\\" in value or value in (".", ".."):
        raise InvalidEvent("bad_field", f"{name} must be printable, without surrounding spaces or a path: {value!r}")


def decode(raw: bytes | str | dict[str, Any] | None) -> dict[str, Any]:
    """Bytes to a JSON object, or InvalidEvent (a null record value, a tombstone, included: it is bad
    input to dead-letter, never a store fault to retry)."""
    if isinstance(raw, dict):
        return raw
    if raw is None:
        raise InvalidEvent("null_value", "the record has no value (null)")
    if not isinstance(raw, bytes | str):
        raise InvalidEvent("not_an_object", f"expected bytes, got {type(raw).__name__}")
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


FIELD_ORDER = ("event_id", "memory_id", "user_id", "text", "created_at", "app_id", "agent_id", "run_id", "project_id",
               "metadata", "embedding", "sources")
"""The order fields are checked in: the first problem found is the one a dead letter names."""


def check_against_schema(schema: str, obj: dict[str, Any]) -> None:
    """The event's shape, checked against its JSON Schema (schemas/json/): the first problem, in
    FIELD_ORDER, as InvalidEvent with the reason its dead letter carries."""
    found = contracts.problems(schema, obj)
    if not found:
        return

    def rank(problem: tuple[str, str, str]) -> tuple[int, str]:
        head = problem[0].split(".")[0]
        return (FIELD_ORDER.index(head) if head in FIELD_ORDER else len(FIELD_ORDER), problem[0])

    path, keyword, message = min(found, key=rank)
    required = contracts.load_schema(schema)["required"]
    if keyword == "required" or (keyword == "type" and path in required and obj.get(path) is None):
        raise InvalidEvent("missing_field", f"{path} is required")
    if path == "text" and keyword == "maxLength":
        raise InvalidEvent("oversize", f"text has {len(obj['text'])} characters; the limit is {MAX_TEXT_CHARS}")
    if path == "text" and keyword in ("minLength", "pattern"):
        raise InvalidEvent("empty_text", "text is empty (or only whitespace and control characters)")
    raise InvalidEvent("bad_field", message)


def erase_of(raw: bytes | str | dict[str, Any] | None) -> dict[str, Any] | None:
    """The `user.erase` record this is, checked (InvalidEvent for a malformed one); None for any other record.
    It travels on `memory.added`, keyed by the user, so ingest reads it after every add of that user that
    was produced before it."""
    if (isinstance(raw, bytes) and USER_ERASE.encode() not in raw) or (isinstance(raw, str) and USER_ERASE not in raw):
        return None  # most records: no second parse (an escaped type is refused by parse_memory_event)
    try:
        obj = decode(raw)
    except InvalidEvent:
        return None  # parse_memory_event names what is wrong with it
    if obj.get("type") != USER_ERASE:
        return None
    check_against_schema(USER_ERASE, obj)
    check_id(obj["user_id"], "user_id")
    return obj


def erase_signature(key: bytes, erase: dict[str, Any]) -> str:
    """The worker's signature on a `user.erase` record (HMAC-SHA256 over user, request and issuer): a
    producer that may add memories cannot erase a user, nor say who asked, without the worker's key."""
    message = "\0".join(str(erase.get(k) or "") for k in ("user_id", "request", "issued_by")).encode()
    return hmac.new(key, b"user.erase\0" + message, hashlib.sha256).hexdigest()


def signed_by(key: bytes, erase: dict[str, Any]) -> bool:
    return hmac.compare_digest(str(erase.get("signature") or ""), erase_signature(key, erase))


def parse_memory_event(raw: bytes | str | dict[str, Any] | None) -> MemoryAdded:
    """Validate a `memory.added` (or synthesis `pattern.added`) event into a MemoryAdded.

    The shape is the JSON Schema's; what follows are the checks a schema cannot express."""
    obj = decode(raw)
    kind_of_event = obj.get("type")
    if kind_of_event not in INGEST_TYPES:
        raise InvalidEvent("unknown_type", f"type {kind_of_event!r} is not one of {', '.join(INGEST_TYPES)}")
    check_against_schema(str(kind_of_event), obj)
    text: str = obj["text"]
    if not any(ch.isprintable() and not ch.isspace() for ch in text):
        raise InvalidEvent("empty_text", "text is empty (or only whitespace and control characters)")
    # Control characters only (category Cc): the invisible format characters of ordinary text (the joiner in
    # an emoji sequence, Persian's non-joiner, right-to-left marks, soft hyphens) and no-break spaces are text.
    if any(unicodedata.category(ch) == "Cc" and ch not in "\n\t\r" for ch in text):
        raise InvalidEvent("bad_field", "text holds control characters (NUL and the like)")
    for name in ID_FIELDS:
        check_id(obj.get(name), name)
    for source in obj.get("sources") or ():
        check_id(source, "sources")
    replaces = obj.get("replaces")
    if replaces is not None:
        check_id(replaces, "replaces")
        if kind_of_event != MEMORY_ADDED or replaces == obj["memory_id"]:
            raise InvalidEvent("bad_field", "replaces names another memory of the same user (a fact update)")
    created_at = normalise_time(obj["created_at"], "created_at")
    check_not_ahead(created_at, "created_at")
    metadata = obj.get("metadata") or {}
    if _depth(metadata) > MAX_METADATA_DEPTH:
        raise InvalidEvent("bad_field", f"metadata is nested deeper than {MAX_METADATA_DEPTH} levels")
    confidence = metadata.get("confidence")
    if confidence is not None and not math.isfinite(confidence):
        raise InvalidEvent("bad_field", "metadata.confidence must be a number in [0, 1]")
    embedding = obj.get("embedding")
    vector: tuple[float, ...] | None = None
    if embedding is not None:
        norm = math.sqrt(sum(float(x) * float(x) for x in embedding))
        if not math.isfinite(norm) or norm == 0.0:
            raise InvalidEvent("bad_field", "embedding must be finite and non-zero")
        vector = tuple(float(x) / norm for x in embedding)
    return MemoryAdded(
        event_id=obj["event_id"],
        memory_id=obj["memory_id"],
        user_id=obj["user_id"],
        text=text.strip(),
        created_at=created_at,
        app_id=obj.get("app_id"),
        agent_id=obj.get("agent_id"),
        run_id=obj.get("run_id"),
        project_id=obj.get("project_id"),
        metadata={
            "type": metadata.get("type"),
            "confidence": confidence,
            "pinned": bool(metadata.get("pinned") or False),
            **{k: v for k, v in metadata.items() if k not in ("type", "confidence", "pinned")},
        },
        embedding=vector,
        kind="pattern" if kind_of_event == PATTERN_ADDED else "fact",
        sources=tuple(obj["sources"]) if kind_of_event == PATTERN_ADDED else (),
        replaces=replaces,
    )


def dead_letter(
    raw: bytes | str | dict[str, Any] | None,
    reason: str,
    error: str,
    topic: str | None = None,
    partition: int | None = None,
    offset: int | None = None,
) -> dict[str, Any]:
    """The dead-letter record: the original bytes (base64) and where they came from. At most MAX_EVENT_BYTES of
    the original are kept (with its size and sha256): an oversize record's dead letter must itself fit what
    the broker takes, or the partition would stop on it."""
    if isinstance(raw, dict):
        raw = orjson.dumps(raw)
    elif isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogateescape")
    original = raw or b""
    try:
        preview: str | None = original[:512].decode("utf-8")
    except UnicodeDecodeError:
        preview = None
    out = {
        "type": DEAD_LETTER,
        "reason": reason,
        "error": error,
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "original_b64": base64.b64encode(original[:MAX_EVENT_BYTES]).decode("ascii"),
        "original_preview": preview,
        "at": now_iso(),
    }
    if len(original) > MAX_EVENT_BYTES:
        out |= {"original_size": len(original), "original_sha256": hashlib.sha256(original).hexdigest()}
    return out


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
