"""The bad-input corpus: valid memory events with every kind of bad record mixed in, for the tests
(through `dream replay` and through Kafka) and the fault campaign (bench/faults.py)."""

from __future__ import annotations

from typing import Any

import orjson


def _event(n: int, user: str, text: str, day: int = 1) -> dict[str, Any]:
    return {"type": "memory.added", "event_id": f"e-{user}-{n}", "memory_id": f"m-{user}-{n}", "user_id": user,
            "app_id": None, "agent_id": None, "run_id": None, "text": text,
            "created_at": f"2026-01-{day:02d}T09:{n % 60:02d}:00Z",
            "metadata": {"type": "user_fact", "confidence": 0.9, "pinned": False}}


def _bad_kinds(i: int, user: str) -> list[tuple[str, str, bytes]]:
    """One record of each kind of bad input (kind, expected dead-letter reason, bytes); `i` keeps ids unique."""
    ok = _event(i, user, f"Note number {i} about the garden.")
    deep: Any = {}
    for _ in range(200):
        deep = {"x": deep}

    def without(name: str) -> bytes:
        return orjson.dumps({k: v for k, v in ok.items() if k != name})

    def changed(**fields: Any) -> bytes:
        return orjson.dumps({**ok, **fields})

    return [
        ("not_utf8", "undecodable", b'{"type": "memory.added", "text": "\xff\xfe"}'),
        ("broken_json", "invalid_json", b'{"type": "memory.added", "text": '),
        ("a_list", "not_an_object", b"[1, 2, 3]"),
        ("a_number", "not_an_object", b"42"),
        ("unknown_type", "unknown_type", changed(type="memory.deleted")),
        ("no_user", "missing_field", without("user_id")),
        ("no_text", "missing_field", without("text")),
        ("null_event_id", "missing_field", changed(event_id=None)),
        ("numeric_user", "bad_field", changed(user_id=7)),
        ("long_user", "bad_field", changed(user_id="u" * 300)),
        ("text_not_string", "bad_field", changed(text=["a", "list"])),
        ("time_not_iso", "bad_field", changed(created_at="yesterday")),
        ("time_without_zone", "bad_field", changed(created_at="2026-01-01T09:00:00")),
        ("time_past_the_calendar", "bad_field", changed(created_at="9999-12-31T23:59:59-00:01")),
        ("time_before_the_calendar", "bad_field", changed(created_at="0001-01-01T00:00:00+00:01")),
        ("blank_text", "empty_text", changed(text="   \n\t ")),
        ("nul_text", "empty_text", changed(text="\x00" * 12)),
        ("control_text", "empty_text", changed(text="\x01\x02\x1b\x7f")),
        ("long_text", "oversize", changed(text="word " * 900)),
        ("huge_event", "oversize", changed(metadata={"blob": "z" * 70_000})),
        ("metadata_list", "bad_field", changed(metadata=[1, 2])),
        ("deep_metadata", "bad_field", changed(metadata=deep)),
        ("confidence_over_one", "bad_field", changed(metadata={"confidence": 7})),
        ("pinned_not_bool", "bad_field", changed(metadata={"pinned": "yes"})),
        ("many_metadata_keys", "bad_field", changed(metadata={f"k{n}": n for n in range(100)})),
        ("long_metadata_key", "bad_field", changed(metadata={"k" * 200: 1})),
        ("short_embedding", "bad_field", changed(embedding=[0.1, 0.2, 0.3])),
        ("zero_embedding", "bad_field", changed(embedding=[0.0] * 384)),
    ]


Bad = tuple[str, str, bytes]
"""(kind, expected dead-letter reason, the record's bytes)."""


def bad_corpus(rounds: int = 45, user_prefix: str = "bad") -> tuple[list[bytes], list[Bad], list[bytes]]:
    """Valid events with bad ones mixed in: (all records in order, the bad ones, the valid ones).
    Every bad record gets exactly one dead letter; every valid one is stored. Besides the per-record
    kinds, each round reuses an event_id and a memory_id for other content."""
    records: list[bytes] = []
    expected: list[Bad] = []
    valid: list[bytes] = []
    for r in range(rounds):
        user = f"{user_prefix}-{r % 5}"
        good = _event(10_000 + r, user, f"Round {r}: the user keeps bees on the roof.", day=1 + r % 28)
        records.append(orjson.dumps(good))
        valid.append(orjson.dumps(good))
        reused_event = orjson.dumps({**good, "memory_id": f"{good['memory_id']}-other", "text": "Another text."})
        reused_memory = orjson.dumps({**good, "event_id": f"{good['event_id']}-other", "text": "A different text."})
        for bad in [*_bad_kinds(20_000 + r, user), ("event_id_reused", "duplicate_event_id", reused_event),
                    ("memory_id_reused", "memory_id_conflict", reused_memory)]:
            records.append(bad[2])
            expected.append(bad)
    return records, expected, valid
