"""Input that must never reach the store: a null record (a tombstone) and patterns from outside."""

from __future__ import annotations

import base64

import orjson
import pytest

from dreamstream.schemas.events import InvalidEvent, decode, parse_memory_event
from dreamstream.streams.core import memories, reads
from dreamstream.streams.core.ingest import Incoming, Processor


def test_a_null_record_is_bad_input_not_a_store_fault() -> None:
    with pytest.raises(InvalidEvent) as err:
        decode(None)
    assert err.value.reason == "null_value"


def test_http_cannot_add_a_pattern() -> None:
    with pytest.raises(InvalidEvent) as err:
        memories.new_event({"type": "pattern.added", "user_id": "u-1", "text": "x", "sources": ["m-1"]})
    assert err.value.reason == "unknown_type"


def _event(**over: object) -> bytes:
    base = {"type": "memory.added", "event_id": "e-1", "memory_id": "m-1", "user_id": "u-1",
            "text": "Ana lives in Lisbon.", "created_at": "2026-01-01T09:00:00Z"}
    return orjson.dumps({**base, **over})


def _pattern(**over: object) -> bytes:
    base = {"type": "pattern.added", "event_id": "e-p", "memory_id": "p-1", "user_id": "u-1",
            "text": "Ana often travels.", "created_at": "2026-01-02T09:00:00Z", "sources": ["m-1"],
            "metadata": {"type": "pattern"}}
    return orjson.dumps({**base, **over})


def _process(proc: Processor, *raws: bytes | None) -> list[str]:
    result = proc.process([Incoming(raw=r, topic="t", partition=0, offset=i) for i, r in enumerate(raws)])
    return [d["reason"] for d in result.dead_letters]


def test_forged_patterns_never_overwrite_or_point_elsewhere(edge_store, embedder) -> None:
    proc = Processor(edge_store, embedder)
    assert _process(proc, _event(), None) == ["null_value"]
    assert _process(proc, _event(event_id="e-2", memory_id="m-2", user_id="u-2", text="Bo likes tea.")) == []
    reasons = _process(
        proc,
        _pattern(event_id="e-p1", memory_id="m-2"),  # another user's memory id
        _pattern(event_id="e-p2", memory_id="m-1"),  # a fact's id, same user
        _pattern(event_id="e-p3", sources=["m-2"]),  # another user's evidence
        _pattern(event_id="e-p4", sources=["m-404"]),  # evidence that is not there
    )
    assert reasons == ["memory_id_conflict", "memory_id_conflict", "bad_field", "bad_field"]
    stored = edge_store.retrieve(["m-1", "m-2", "p-1"])
    assert stored["m-2"].user_id == "u-2" and stored["m-2"].text == "Bo likes tea."
    assert stored["m-1"].kind == "fact" and "p-1" not in stored
    # another user's memory id, even with the very same text, is refused (never a "redelivery")
    assert _process(proc, _event(event_id="e-9", memory_id="m-2", text="Bo likes tea.")) == ["memory_id_conflict"]
    assert _process(proc, _pattern(event_id="e-p5")) == []  # the worker's own kind of pattern is stored
    assert edge_store.retrieve(["p-1"])["p-1"].kind == "pattern"


def test_a_pattern_sent_on_memory_added_is_refused_where_the_worker_reads_patterns_elsewhere(edge_store,
                                                                                              embedder) -> None:
    """An audit: a producer's pattern.added on memory.added, naming the user's real memory ids, was stored as an
    active pattern of the user, past the topics' ACLs (producers write memory.added only) and a synthesis switch
    that was off. The worker reads patterns from its own topic only; a file replay (no Kafka) still takes them."""
    proc = Processor(edge_store, embedder, patterns_topic="t.patterns")
    assert _process(proc, _event()) == []

    def read(raw: bytes, topic: str, offset: int) -> Incoming:
        return Incoming(raw=raw, topic=topic, partition=0, offset=offset, key=b"u-1")

    result = proc.process([read(_pattern(), "t.added", 1)])
    assert [d["reason"] for d in result.dead_letters] == ["unknown_type"]
    assert "t.patterns" in result.dead_letters[0]["error"] and "p-1" not in edge_store.retrieve(["p-1"])
    assert not proc.process([read(_pattern(), "t.patterns", 2)]).dead_letters
    assert edge_store.retrieve(["p-1"])["p-1"].kind == "pattern"


def test_a_pattern_the_person_deleted_is_not_brought_back_by_its_record_read_again(edge_store, embedder) -> None:
    """An audit: the same pattern.added record read again (a redelivery, an offset reset) after the person
    deleted the pattern stored it active again, with no status event saying so."""
    from dreamstream.streams.core import memories

    proc = Processor(edge_store, embedder)
    assert _process(proc, _event()) == [] and _process(proc, _pattern()) == []
    assert memories.delete_memory(edge_store, "p-1", "u-1")
    again = proc.process([Incoming(raw=_pattern(), topic="t", partition=0, offset=9)])
    assert again.outcomes["pattern_declined"] == 1 and not again.status_events
    assert edge_store.retrieve(["p-1"])["p-1"].status == "deleted"
    assert _process(proc, _pattern(event_id="e-p2", text="Ana travels a lot.")) == []  # a late run's rewrite too
    assert edge_store.retrieve(["p-1"])["p-1"].status == "deleted"


def test_within_one_batch_another_users_id_is_refused_not_taken_for_a_redelivery(edge_store, embedder) -> None:
    """The same checks hold between the events of one batch (nothing of it is stored yet) and for a reused
    event_id: another user's memory id is a conflict, and a pattern cannot replace a fact sent just before."""
    proc = Processor(edge_store, embedder)
    bob = {"event_id": "e-b", "user_id": "u-2"}
    assert _process(proc, _event(), _event(**bob)) == ["memory_id_conflict"]  # same id and text, other user
    assert _process(proc, _event(**bob)) == ["memory_id_conflict"]
    assert _process(proc, _event(user_id="u-2")) == ["duplicate_event_id"]  # a reused event_id, other user
    fact = _event(event_id="e-7", memory_id="m-7", text="Ana's flight lands at 9pm.")
    forged = _pattern(event_id="e-p7", memory_id="m-7", user_id="u-2", sources=["m-2"])
    assert _process(proc, _event(event_id="e-2", memory_id="m-2", user_id="u-2", text="Bo likes tea.")) == []
    assert _process(proc, fact, forged) == ["memory_id_conflict"]
    stored = edge_store.retrieve(["m-1", "m-7"])
    assert (stored["m-1"].user_id, stored["m-7"].user_id, stored["m-7"].kind) == ("u-1", "u-1", "fact")
    assert edge_store.count({"user_id": "u-2"}) == 1


@pytest.mark.parametrize(("field", "value"), [
    ("user_id", "u-7 "), ("user_id", "u\x007"), ("user_id", "../../etc/passwd"), ("memory_id", "m\n1"),
    ("text", "a\x00b"), ("created_at", "0001-01-01T00:00:00Z"), ("created_at", "9999-12-31T00:00:00Z"),
])
def test_hostile_fields_are_refused_not_repaired(field: str, value: str) -> None:
    with pytest.raises(InvalidEvent) as err:
        parse_memory_event(_event(**{field: value}))
    assert err.value.reason == "bad_field"


def test_dates_keep_four_digit_years_so_strings_sort_in_time() -> None:
    assert parse_memory_event(_event(created_at="1950-03-01T10:00:00+01:00")).created_at == "1950-03-01T09:00:00Z"


def test_reads_never_strip_a_user_and_bound_the_cursor() -> None:
    with pytest.raises(ValueError, match="surrounding spaces"):
        reads.read_query({"user": "u-0007 "})
    cursor = base64.urlsafe_b64encode(orjson.dumps({"o": 2**63, "r": "t"})).decode()
    with pytest.raises(ValueError, match="cursor is not one this API gave out"):
        memories._offset(cursor, "t")


def test_a_pattern_of_an_erased_user_is_dead_lettered_without_its_text(edge_store, embedder) -> None:
    """A pattern written before its user's erasure and read after it (memory.patterns has no order with
    memory.added): its dead letter must not bring the erased words back."""
    proc = Processor(edge_store, embedder)
    assert _process(proc, _event()) == []
    erase = orjson.dumps({"type": "user.erase", "event_id": "erase-r", "user_id": "u-1", "request": "r"})
    result = proc.process([Incoming(raw=erase, topic="t", partition=0, offset=1),
                           Incoming(raw=_pattern(text="Ana keeps flying to Lisbon."), topic="p", partition=0,
                                    offset=2)])
    (dead,) = result.dead_letters
    kept = base64.b64decode(dead["original_b64"]).decode() + (dead["original_preview"] or "")
    assert dead["reason"] == "bad_field" and "Lisbon" not in kept and "withheld" in kept
    assert orjson.loads(base64.b64decode(dead["original_b64"]))["sources"] == ["m-1"]


def test_only_an_erase_the_worker_signed_erases_where_a_token_is_set(edge_store, embedder) -> None:
    """Anyone allowed to add memories could erase any user with a raw `user.erase` record, past both tokens,
    and name the API as its issuer in the audit event."""
    from dreamstream.schemas.events import erase_signature

    key = b"k" * 32
    proc = Processor(edge_store, embedder, erase_key=key)
    assert _process(proc, _event()) == []
    erase = {"type": "user.erase", "event_id": "erase-r", "user_id": "u-1", "request": "r", "issued_by": "api"}
    for forged in (erase, {**erase, "signature": erase_signature(b"x" * 32, erase)},
                   {**erase, "issued_by": "control", "signature": erase_signature(key, erase)}):
        result = proc.process([Incoming(raw=orjson.dumps(forged), key=b"u-1", topic="t", partition=0, offset=1)])
        assert [d["reason"] for d in result.dead_letters] == ["unauthorised"] and not result.erased
        assert edge_store.retrieve(["m-1"])["m-1"].status == "active"
    signed = {**erase, "signature": erase_signature(key, erase)}
    result = proc.process([Incoming(raw=orjson.dumps(signed), key=b"u-1", topic="t", partition=0, offset=2)])
    assert not result.dead_letters and result.erased == ["u-1"] and edge_store.retrieve(["m-1"]) == {}


def test_a_set_erase_secret_keeps_the_key_when_a_token_changes() -> None:
    """Keyed from the tokens alone, a rotated API token dead-lettered every erase still queued."""
    from dreamstream.streams.settings import Settings

    assert Settings(api_token="a").erase_key != Settings(api_token="b").erase_key
    assert Settings(erase_secret="s", api_token="a").erase_key == Settings(erase_secret="s", api_token="b").erase_key
    assert Settings().erase_key is None


def test_a_signed_erase_sent_again_later_in_the_log_does_not_erase_what_came_after(
        edge_store, embedder, tmp_path) -> None:
    """A signed `user.erase` is a bearer token: sent again (captured from the log or a dead letter), it erased
    every memory the user added since. A copy read at another place is a dead letter; the same record read
    again after a crash still runs (it finishes an interrupted delete)."""
    from dreamstream.schemas.events import erase_signature

    key = b"k" * 32
    proc = Processor(edge_store, embedder, erase_key=key, erase_dir=str(tmp_path / "erase"))
    erase = {"type": "user.erase", "event_id": "erase-r", "user_id": "u-1", "request": "r", "issued_by": "api"}
    signed = orjson.dumps({**erase, "signature": erase_signature(key, erase)})

    def at(raw: bytes, offset: int) -> Incoming:
        return Incoming(raw=raw, key=b"u-1", topic="memory.added", partition=0, offset=offset)

    assert not proc.process([at(_event(), 1)]).dead_letters
    assert proc.process([at(signed, 2)]).erased == ["u-1"]
    later = _event(event_id="e-2", memory_id="m-2", text="Later fact.", created_at="2026-01-02T09:00:00Z")
    assert proc.process([at(later, 3)]).outcomes["stored"] == 1  # dated after what was erased: the user's again
    replayed = proc.process([at(signed, 9)])
    assert [d["reason"] for d in replayed.dead_letters] == ["replayed"] and not replayed.erased
    assert edge_store.retrieve(["m-2"])["m-2"].status == "active"
    again = proc.process([at(signed, 2)])  # the same record, read again after a crash
    # It finishes what it found the first time, never what the user added after it (an audit: a crash before
    # the commit made the re-run delete the user's new memory, and then refuse it for good).
    assert again.erased == ["u-1"] and not again.dead_letters and edge_store.retrieve(["m-2"])["m-2"].status == "active"
    assert proc.process([at(_event(), 1)]).outcomes["removed_for_good"] == 1  # the erased one stays erased


def test_a_pattern_read_after_its_source_was_replaced_is_not_stored_as_current(edge_store, embedder) -> None:
    """A synthesis run read Lisbon, the user's update replaced it before the pattern was ingested (the two
    topics have no order): the pattern would state Lisbon as current. Dead-lettered (the next run writes the
    theme again); its text is not withheld, since the replaced memory is still shown as history."""
    proc = Processor(edge_store, embedder)
    assert _process(proc, _event()) == []
    update = _event(event_id="e-2", memory_id="m-2", text="Ana moved to Porto.", replaces="m-1",
                    created_at="2026-01-03T09:00:00Z")
    assert _process(proc, update) == []
    result = proc.process([Incoming(raw=_pattern(), topic="p", partition=0, offset=3)])
    (dead,) = result.dead_letters
    assert dead["reason"] == "bad_field" and "no longer current: m-1" in dead["error"]
    assert edge_store.retrieve(["p-1"]) == {}
