"""Validation of incoming events: every kind of bad input has its own reason."""

from __future__ import annotations

import pytest

from dreamstream.schemas.events import MAX_EVENT_BYTES, InvalidEvent, dead_letter, parse_memory_event
from dreamstream.schemas.memory import MAX_TEXT_CHARS
from tests.helpers import event, line


def reason_of(raw: bytes | str) -> str:
    with pytest.raises(InvalidEvent) as info:
        parse_memory_event(raw)
    return info.value.reason


def test_valid_event_is_normalised() -> None:
    e = event(1, "u1", "  User lives in Lisbon.  ", created_at="2026-01-03T10:15:00+01:00")
    parsed = parse_memory_event(line(e))
    assert parsed.text == "User lives in Lisbon."
    assert parsed.created_at == "2026-01-03T09:15:00Z"
    assert parsed.memory_type == "user_fact" and parsed.pinned is False


def nested(depth: int) -> object:
    value: object = "leaf"
    for _ in range(depth):
        value = {"k": value}
    return value


def test_metadata_nested_up_to_the_limit_is_kept() -> None:
    from dreamstream.schemas.events import MAX_METADATA_DEPTH

    parsed = parse_memory_event(line({**event(1, "u1", "x"), "metadata": {"a": nested(MAX_METADATA_DEPTH - 1)}}))
    assert parsed.metadata["a"]["k"]


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"\xff\xfe\x00garbage", "undecodable"),
        (b"{not json", "invalid_json"),
        (b"[1, 2]", "not_an_object"),
        (line({**event(1, "u1", "x"), "type": "memory.deleted"}), "unknown_type"),
        (line({k: v for k, v in event(1, "u1", "x").items() if k != "user_id"}), "missing_field"),
        (line({**event(1, "u1", "x"), "user_id": 42}), "bad_field"),
        (line({**event(1, "u1", "x"), "created_at": "yesterday"}), "bad_field"),
        (line({**event(1, "u1", "x"), "created_at": "2026-01-03T09:15:00"}), "bad_field"),
        (line({**event(1, "u1", "x"), "metadata": {"confidence": 7}}), "bad_field"),
        (line({**event(1, "u1", "x"), "metadata": {"pinned": "yes"}}), "bad_field"),
        (line({**event(1, "u1", "x"), "embedding": [0.1, 0.2]}), "bad_field"),
        (line(event(1, "u1", "   ")), "empty_text"),
        (line(event(1, "u1", "\x00" * 20)), "empty_text"),
        (line(event(1, "u1", "\x00\x07 \x1b")), "empty_text"),
        (line(event(1, "u1", "Lives in Porto.\x00")), "bad_field"),
        (line({**event(1, "u1", "x"), "created_at": "9999-12-31T23:59:59-00:01"}), "bad_field"),
        (line({**event(1, "u1", "x"), "created_at": "0001-01-01T00:00:00+00:01"}), "bad_field"),
        (line({**event(1, "u1", "x"), "metadata": {"a": nested(40)}}), "bad_field"),
        (line(event(1, "u1", "x" * (MAX_TEXT_CHARS + 1))), "oversize"),
        (b" " * (MAX_EVENT_BYTES + 1), "oversize"),
    ],
)
def test_bad_input_has_a_reason(raw: bytes, reason: str) -> None:
    assert reason_of(raw) == reason


@pytest.mark.parametrize("text", ["Works as a developer 👩\u200d💻.", "می\u200cخواهم فارسی یاد بگیرم",
                                  "Her name is \u200fمريم\u200f.", "Says co\u00adoperation.",
                                  "Lives at 5\u00a0Rua Augusta."])
def test_the_invisible_characters_of_ordinary_text_are_text(text: str) -> None:
    """Joiners, right-to-left marks, soft hyphens and no-break spaces are not control characters."""
    assert parse_memory_event(line(event(1, "u1", text))).text == text


def test_dead_letter_keeps_the_original_bytes() -> None:
    import base64

    record = dead_letter(b"\xff{", "undecodable", "not UTF-8", "memory.added", 2, 17)
    assert base64.b64decode(record["original_b64"]) == b"\xff{"
    assert (record["topic"], record["partition"], record["offset"]) == ("memory.added", 2, 17)
    assert record["original_preview"] is None


def test_precomputed_embedding_is_normalised() -> None:
    parsed = parse_memory_event(line({**event(1, "u1", "x"), "embedding": [3.0] + [0.0] * 383}))
    assert parsed.embedding is not None and parsed.embedding[0] == pytest.approx(1.0)
