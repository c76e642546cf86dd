"""What the API refuses at once that ingest would dead-letter after a 202: a list holding one id twice with
other content, an id the store holds for other content, an event over ingest's size limit."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from dreamstream.schemas.events import MAX_EVENT_BYTES, InvalidEvent
from dreamstream.streams.core import memories
from dreamstream.streams.core.ingest import Incoming, Processor


def test_a_list_holding_one_id_twice_with_other_content_is_refused_naming_the_items() -> None:
    same_id = [{"user_id": "bo", "memory_id": "m-1", "text": "Bo likes tea."},
               {"user_id": "bo", "memory_id": "m-1", "text": "Bo hates coffee."}]
    with pytest.raises(InvalidEvent, match="item 1: memory_id m-1 is item 0's") as caught:
        memories.new_events(same_id)
    assert caught.value.reason == "memory_id_conflict"
    two_users = [{"user_id": "bo", "memory_id": "m-1", "text": "Bo likes tea."},
                 {"user_id": "al", "memory_id": "m-1", "text": "Bo likes tea."}]
    with pytest.raises(InvalidEvent, match="item 1"):
        memories.new_events(two_users)
    reused = [{"user_id": "bo", "event_id": "e-1", "text": "Bo likes tea."},
              {"user_id": "bo", "event_id": "e-1", "text": "Bo likes jazz."}]
    with pytest.raises(InvalidEvent, match="event_id e-1") as caught:
        memories.new_events(reused)
    assert caught.value.reason == "duplicate_event_id"
    resent = [{"user_id": "bo", "memory_id": "m-1", "event_id": "e-1", "text": "Bo likes tea."}] * 2
    assert len(memories.new_events(resent)) == 2  # the same memory twice is a resend, as ingest reads it


def test_an_event_over_ingests_limit_is_refused_when_asked() -> None:
    """The API validated a dict, never its size: 202, then an `oversize` dead letter (metadata, the type)."""
    for body in ({"user_id": "bo", "text": "Bo likes tea.", "metadata": {"note": "x" * MAX_EVENT_BYTES}},
                 {"user_id": "bo", "text": "Bo likes tea.", "metadata": {"type": "t" * 70_000}}):
        with pytest.raises(InvalidEvent, match="the limit is") as caught:
            memories.new_event(body)
        assert caught.value.reason == "oversize"


def test_the_store_check_reads_ids_as_ingest_does(edge_store: Any, embedder: Any) -> None:
    """A resend of a text with surrounding whitespace (stored stripped) was a 409; a reused event_id with other
    content passed, then was dead-lettered."""
    first = memories.new_event({"user_id": "bo", "memory_id": "m-1", "event_id": "e-1", "text": "Bo likes tea.\n"})
    Processor(edge_store, embedder).process([Incoming(raw=orjson.dumps(first))])
    assert memories.taken(edge_store, [first]) is None  # the same memory again
    other = memories.new_event({"user_id": "bo", "memory_id": "m-2", "event_id": "e-1", "text": "Bo likes jazz."})
    assert str(memories.taken(edge_store, [other])).startswith("duplicate_event_id")
    clash = memories.new_event({"user_id": "al", "memory_id": "m-1", "text": "Al likes tea."})
    assert str(memories.taken(edge_store, [clash])).startswith("memory_id_conflict")


def test_an_update_of_a_memory_the_user_lacks_is_refused_when_asked(edge_store: Any, embedder: Any) -> None:
    """`replaces` naming another user's memory (or none) was accepted with a 202, then dead-lettered by ingest:
    the caller's memory was never stored and a wait for it timed out."""
    bo = memories.new_event({"user_id": "bo", "memory_id": "m-1", "text": "Bo likes tea."})
    Processor(edge_store, embedder).process([Incoming(raw=orjson.dumps(bo))])
    for replaces in ("m-1", "m-404"):
        al = memories.new_event({"user_id": "al", "text": "Al likes coffee.", "replaces": replaces})
        assert str(memories.taken(edge_store, [al])).startswith(f"bad_field: replaces {replaces}")
    own = memories.new_event({"user_id": "bo", "text": "Bo likes coffee now.", "replaces": "m-1"})
    assert memories.taken(edge_store, [own]) is None
    first = memories.new_event({"user_id": "al", "memory_id": "m-a", "text": "Al likes tea."})
    then = memories.new_event({"user_id": "al", "text": "Al likes coffee now.", "replaces": "m-a"})
    assert memories.taken(edge_store, [first, then]) is None  # the one it replaces comes just before it
