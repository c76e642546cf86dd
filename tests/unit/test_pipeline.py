"""The ingest pipeline on a real store and the real model: decisions applied, reads, replay, undo."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from dreamstream.streams.core import changes, memories, reads
from dreamstream.streams.core.ingest import Incoming, Processor
from dreamstream.streams.core.replay import export_rows, replay_file
from tests.helpers import comparable, event, line


@pytest.fixture
def proc(edge_store, embedder) -> Processor:
    return Processor(edge_store, embedder)


def feed(proc: Processor, *events: dict) -> object:
    return proc.process([Incoming(line(e)) for e in events])


def statuses(proc: Processor) -> dict[str, str]:
    return {m.memory_id: m.status for m in proc.store.scroll()}


def test_move_supersedes_and_both_stay_readable(proc: Processor) -> None:
    result = feed(proc, event(1, "u1", "User lives in Lisbon.", day=1), event(2, "u1", "I moved to Berlin.", day=5))
    old, new = proc.store.retrieve(["m-u1-1", "m-u1-2"]).values()
    assert old.status == "superseded" and old.superseded_by == new.memory_id
    assert new.supersedes == [old.memory_id]
    assert [r["label"] for r in reads.get(proc.store, "u1")] == ["current", "history"]  # current facts first
    assert [r["memory_id"] for r in reads.get(proc.store, "u1", "latest_only")] == ["m-u1-2"]
    (status,) = result.status_events
    assert status["from_status"] == "active" and status["to_status"] == "superseded"
    assert status["evidence"]["judge"] and status["evidence"]["rule"]


def test_an_old_fact_arriving_late_is_history_not_current_beside_its_replacement(proc: Processor) -> None:
    """An audit: a backfilled "Dan lives in Lisbon." dated January, sent after "moved to Madrid" (March)
    superseded the first, was stored as a second current fact: reads and a search at limit 1 answered Lisbon.
    It is now merged into the replaced fact, as an in-order arrival would have been; the same words dated
    after Madrid are a move back, judged as usual."""
    feed(proc, event(1, "dan", "Dan lives in Lisbon.", day=1),
         event(2, "dan", "Dan moved to Madrid last month.", day=20))
    late = feed(proc, event(3, "dan", "Dan lives in Lisbon.", day=2))
    assert statuses(proc) == {"m-dan-1": "superseded", "m-dan-2": "active", "m-dan-3": "merged"}
    merged = proc.store.retrieve(["m-dan-3"])["m-dan-3"]
    assert merged.merged_into == "m-dan-1" and "m-dan-3" in proc.store.retrieve(["m-dan-1"])["m-dan-1"].merged_from
    (status,) = late.status_events
    assert status["evidence"]["rule"] == "restates_replaced" and status["evidence"]["replaced_by"] == "m-dan-2"
    assert [r["memory_id"] for r in reads.get(proc.store, "dan", "latest_only")] == ["m-dan-2"]
    feed(proc, event(4, "dan", "Dan lives in Lisbon.", day=28))  # said after Madrid: current again
    assert statuses(proc)["m-dan-4"] == "active"
    assert "m-dan-4" in [r["memory_id"] for r in reads.get(proc.store, "dan", "latest_only")]


def test_the_same_restatement_backfilled_in_one_batch_is_history_too(proc: Processor) -> None:
    """An audit: the rule above saw only replaced facts stored by an earlier batch; a backfill sent in one go
    (Lisbon, Madrid, then the late Lisbon, one batch) left the late Lisbon current beside Madrid."""
    feed(proc, event(1, "eve", "Eve lives in Lisbon.", day=1),
         event(2, "eve", "Eve moved to Madrid last month.", day=20), event(3, "eve", "Eve lives in Lisbon.", day=2))
    assert statuses(proc) == {"m-eve-1": "superseded", "m-eve-2": "active", "m-eve-3": "merged"}
    assert [r["memory_id"] for r in reads.get(proc.store, "eve", "latest_only")] == ["m-eve-2"]


CHAIN = [("Dana lives in Lisbon.", 1), ("Dana moved to Porto last month.", 12), ("Dana moved to Madrid.", 27)]


@pytest.mark.parametrize("order", ["012", "021", "102", "120", "201", "210"])
@pytest.mark.parametrize("one_batch", [True, False])
def test_what_is_current_does_not_depend_on_arrival_order(edge_store, embedder, order: str,  # type: ignore[no-untyped-def]
                                                          one_batch: bool) -> None:
    """An audit: an older fact that arrived after its replacement was judged as if it were the newer one and
    stayed current ("lives in Lisbon" beside "moved to Porto"); the six arrival orders of a chain of three
    places left five different current sets. Now the later-said fact replaces it on arrival (`supersede_new`),
    as it would have had the two come in time."""
    proc = Processor(edge_store, embedder)
    events = [event(int(i), "dana", CHAIN[int(i)][0], day=CHAIN[int(i)][1]) for i in order]
    if one_batch:
        feed(proc, *events)
    else:
        for e in events:
            feed(proc, e)
    assert [r["text"] for r in reads.get(proc.store, "dana", "latest_only")] == ["Dana moved to Madrid."]
    assert {r["label"] for r in reads.get(proc.store, "dana")} == {"current", "history"}  # nothing lost


def test_a_late_older_fact_superseded_on_arrival_can_be_undone(proc: Processor) -> None:
    feed(proc, event(2, "fay", "Fay moved to Porto last month.", day=25))
    late = feed(proc, event(1, "fay", "Fay lives in Lisbon.", day=1))
    (status,) = late.status_events
    assert (status["memory_id"], status["action"], status["to_status"], status["linked_memory_id"]) == \
        ("m-fay-1", "supersede_new", "superseded", "m-fay-2")
    old, new = proc.store.retrieve(["m-fay-1", "m-fay-2"]).values()
    assert old.superseded_by == "m-fay-2" and new.supersedes == ["m-fay-1"]
    proc.undo(status["decision_id"], user="fay")
    old, new = proc.store.retrieve(["m-fay-1", "m-fay-2"]).values()
    assert (old.status, old.superseded_by, new.supersedes) == ("active", None, [])


def test_a_memory_dated_ahead_of_the_clock_is_a_dead_letter(proc: Processor) -> None:
    """An audit: "Kim lives in Lisbon." dated five years ahead was stored, stayed the newest of Kim's facts, and
    the real move a month ago became only a review item. A producer's clock skew (under a day) is taken."""
    from datetime import UTC, datetime, timedelta

    def at(delta: timedelta) -> str:
        return (datetime.now(UTC) + delta).strftime("%Y-%m-%dT%H:%M:%SZ")

    far = feed(proc, event(1, "kim", "Kim lives in Lisbon.", created_at=at(timedelta(days=2))))
    assert [(d["reason"], "in the future" in d["error"]) for d in far.dead_letters] == [("bad_field", True)]
    near = feed(proc, event(2, "kim", "Kim lives in Porto.", created_at=at(timedelta(hours=3))))
    assert near.outcomes["stored"] == 1 and not near.dead_letters


def test_restatement_is_merged_and_hidden_by_default(proc: Processor) -> None:
    feed(proc, event(1, "u1", "Use PostgreSQL for auth.", day=1), event(2, "u1", "Auth DB is PostgreSQL.", day=2))
    assert sorted(statuses(proc).values()) == ["active", "merged"]
    assert len(reads.get(proc.store, "u1")) == 1
    assert len(reads.get(proc.store, "u1", "include_merged")) == 2


def test_exact_repeat_adds_no_second_active_copy(proc: Processor) -> None:
    feed(proc, event(1, "u1", "Prefers dark mode in every editor."),
         event(2, "u1", "prefers dark mode in every editor"))
    assert statuses(proc) == {"m-u1-1": "active", "m-u1-2": "merged"}


def test_same_text_of_two_users_never_links(proc: Processor) -> None:
    feed(proc, event(1, "u1", "Has a cat called Miso."), event(1, "u2", "Has a cat called Miso."))
    assert set(statuses(proc).values()) == {"active"}


def test_events_of_one_user_in_one_batch_are_applied_in_order(proc: Processor) -> None:
    feed(proc, event(1, "u1", "User lives in Lisbon.", day=1), event(2, "u1", "I moved to Berlin.", day=2),
         event(3, "u1", "Moved again, now living in Madrid.", day=3))
    got = statuses(proc)
    assert got["m-u1-3"] == "active" and got["m-u1-1"] == "superseded"


def test_redelivery_changes_nothing_and_reused_event_id_is_dead_lettered(proc: Processor) -> None:
    e = event(1, "u1", "User lives in Lisbon.")
    feed(proc, e)
    before = export_rows(proc.store)
    again = feed(proc, e)
    assert again.outcomes["redelivered"] == 1 and not again.dead_letters
    clash = feed(proc, {**e, "memory_id": "other", "text": "Something else"})
    assert [d["reason"] for d in clash.dead_letters] == ["duplicate_event_id"]
    conflict = feed(proc, {**e, "event_id": "e-new", "text": "Different text"})
    assert [d["reason"] for d in conflict.dead_letters] == ["memory_id_conflict"]
    assert comparable(export_rows(proc.store)) == comparable(before)


def test_a_memory_id_reused_for_other_text_within_one_batch_is_dead_lettered(proc: Processor) -> None:
    """Not taken as a redelivery: the second text would otherwise be lost without a word."""
    first = event(1, "u1", "User lives in Lisbon.")
    result = proc.process([Incoming(line(first)),
                           Incoming(line({**first, "event_id": "e-other", "text": "User lives in Porto."})),
                           Incoming(line(first))])
    assert [d["reason"] for d in result.dead_letters] == ["memory_id_conflict"]
    assert result.outcomes["stored"] == 1 and result.outcomes["redelivered"] == 1


def test_bad_records_do_not_stop_the_batch(proc: Processor) -> None:
    result = proc.process([
        Incoming(b"\xff\xff", "memory.added", 0, 1),
        Incoming(line(event(1, "u1", "Plays the cello.")), "memory.added", 0, 2),
        Incoming(b"{", "memory.added", 0, 3),
        Incoming(line(event(2, "u1", "")), "memory.added", 0, 4),
    ])
    assert [d["reason"] for d in result.dead_letters] == ["undecodable", "invalid_json", "empty_text"]
    assert [d["offset"] for d in result.dead_letters] == [1, 3, 4]
    assert list(statuses(proc)) == ["m-u1-1"]


def test_pinned_memory_is_not_superseded(proc: Processor) -> None:
    feed(proc, event(1, "u1", "User lives in Lisbon.", day=1, pinned=True), event(2, "u1", "I moved to Berlin.", day=5))
    assert set(statuses(proc).values()) == {"active"}
    new = proc.store.retrieve(["m-u1-2"])["m-u1-2"]
    assert new.conflicts and new.conflicts[0]["with"] == ["m-u1-1"]


def test_undo_restores_both_sides(proc: Processor) -> None:
    result = feed(proc, event(1, "u1", "User lives in Lisbon.", day=1), event(2, "u1", "I moved to Berlin.", day=5))
    decision_id = result.status_events[0]["decision_id"]
    with pytest.raises(KeyError, match=f"no decision {decision_id} for user u2"):  # asked in another user's name
        proc.undo(decision_id, user="u2")
    assert proc.store.retrieve(["m-u1-1"])["m-u1-1"].status == "superseded"
    events = proc.undo(decision_id, user="u1")
    assert [(e["memory_id"], e["to_status"], e["undo"]) for e in events] == [("m-u1-1", "active", True)]
    old, new = proc.store.retrieve(["m-u1-1", "m-u1-2"]).values()
    assert old.status == "active" and old.superseded_by is None and new.supersedes == []
    with pytest.raises(ValueError):
        proc.undo(decision_id)
    with pytest.raises(KeyError):
        proc.undo("d-unknown")


def test_replay_file_reports_bad_lines_and_is_idempotent(tmp_path: Path, proc: Processor) -> None:
    path = tmp_path / "events.jsonl"
    rows = [event(1, "u1", "User has a dog named Rex.", day=1),
            event(2, "u1", "My dog Rex is a 3-year-old golden retriever.", day=3)]
    path.write_bytes(b"\n".join(line(r) for r in rows) + b"\nnot json\n")
    first = replay_file(path, proc.store, processor=proc)
    assert (first.lines, first.stored, first.dead) == (3, 2, 1)
    dead = [orjson.loads(x) for x in (tmp_path / "events.jsonl.deadletter.jsonl").read_bytes().splitlines()]
    assert dead[0]["reason"] == "invalid_json" and dead[0]["offset"] == 3
    state = comparable(export_rows(proc.store))
    second = replay_file(path, proc.store, processor=proc)
    assert second.stored == 0 and second.outcomes["redelivered"] == 2
    assert comparable(export_rows(proc.store)) == state
    rex = {r["memory_id"]: r for r in export_rows(proc.store)}
    assert rex["m-u1-1"]["status"] == "merged" and rex["m-u1-1"]["merged_into"] == "m-u1-2"


def test_read_without_user_is_refused(proc: Processor) -> None:
    with pytest.raises(ValueError):
        reads.get(proc.store, "")
    with pytest.raises(ValueError):
        reads.mode_from_flags(True, True)


def test_reprocess_rederives_decisions_and_keeps_every_memory(edge_store, embedder, tmp_path) -> None:
    """Ingested with a judge that decides nothing, reprocessed with the default one: the move supersedes."""
    blind = Processor(edge_store, embedder, decide=lambda new, cands: [])
    evs = [event(1, "rp", "User lives in Lisbon."), event(2, "rp", "I moved to Berlin last month.", day=2),
           event(3, "rp", "Has a cat called Miso.", day=3)]
    blind.process([Incoming(raw=line(e)) for e in evs])
    assert {m.status for m in edge_store.scroll({"user_id": "rp"})} == {"active"}
    result = Processor(edge_store, embedder).reprocess_user("rp", str(tmp_path / "backup"))
    after = {m.memory_id: m for m in edge_store.scroll({"user_id": "rp"})}
    assert set(after) == {e["memory_id"] for e in evs}  # nothing lost
    assert after["m-rp-1"].status == "superseded" and after["m-rp-1"].superseded_by == "m-rp-2"
    assert after["m-rp-3"].status == "active"
    assert [(s["memory_id"], s["to_status"]) for s in result.status_events] == [("m-rp-1", "superseded")]
    assert not list((tmp_path / "backup").iterdir())  # the safety copy is gone once done


def test_reprocess_keeps_a_persons_own_update(edge_store, embedder, tmp_path) -> None:
    """A user's update (PATCH: `replaces`) is what they said: reprocessing re-judges the rest, not that."""
    proc = Processor(edge_store, embedder, decide=lambda new, cands: [])  # the judge would link nothing
    proc.process([Incoming(raw=line(_raw("m-1", "ana", "Ana's dentist is Dr. Silva.", 1)))])
    proc.process([Incoming(raw=line(memories.update_event(edge_store, "m-1", "ana",
                                                          {"text": "Ana's dentist is Dr. Costa."})))])
    proc.reprocess_user("ana", str(tmp_path / "backup"))
    assert [r["text"] for r in reads.get(edge_store, "ana", "latest_only")] == ["Ana's dentist is Dr. Costa."]
    assert edge_store.retrieve(["m-1"])["m-1"].status == "superseded"


@pytest.mark.parametrize(("params", "error"), [
    ({}, "name a user"),
    ({"user": "  "}, "name a user"),
    ({"user": "a/b"}, "without surrounding spaces or a path"),  # no stored user id can look like this
    ({"user": "a\\b"}, "without surrounding spaces or a path"),
    ({"user": ".."}, "without surrounding spaces or a path"),
    ({"user": "u", "limit": "99999999999999999999", "q": "x"}, "limit must be a whole number from 1 to 1000"),
    ({"user": "u", "limit": "0"}, "limit must be"),
    ({"user": "u", "limit": "-3"}, "limit must be"),
    ({"user": "u", "limit": "ten"}, "limit must be"),
    ({"user": "u", "latest_only": "1", "include_merged": "1"}, "exclude each other"),
    ({"user": "u", "latest_only": "maybe"}, "latest_only must be 1/true or 0/false"),
])
def test_http_read_parameters_are_checked(params: dict[str, str], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        reads.read_query(params)


def test_http_read_parameters_default_and_limit_every_read() -> None:
    assert reads.read_query({"user": "u"}) == reads.ReadQuery(user="u", mode="default", limit=reads.MAX_LIMIT,
                                                              text=None)
    assert reads.read_query({"user": "u", "q": "cats", "latest_only": "true"}).limit == 50
    assert reads.read_query({"user": "u", "limit": "3", "include_merged": "1"}) == reads.ReadQuery(
        user="u", mode="include_merged", limit=3, text=None)


def test_an_update_supersedes_what_it_replaces_without_the_judge(edge_store, embedder) -> None:  # type: ignore[no-untyped-def]
    """`replaces` (PATCH /v1/memories/{id}): the new version supersedes the old one, kept as history and
    undoable; an update of another user's memory, or of nothing, is a dead letter."""
    from dreamstream.streams.core import memories

    proc = Processor(edge_store, embedder)
    first = {"type": "memory.added", "event_id": "e-h1", "memory_id": "h1", "user_id": "hal",
             "text": "Hal works at Acme.", "created_at": "2026-01-04T10:00:00Z"}
    proc.process([Incoming(raw=first)])
    update = memories.update_event(edge_store, "h1", "hal", {"text": "Hal works at Globex.",
                                                              "metadata": {"source": "settings page"}})
    assert update is not None and update["replaces"] == "h1"
    assert memories.update_event(edge_store, "h1", "gus", {"text": "x"}) is None  # not gus's memory
    foreign = {**first, "event_id": "e-g1", "memory_id": "g1", "user_id": "gus", "text": "Gus works at Initech.",
               "replaces": "h1"}
    result = proc.process([Incoming(raw=update), Incoming(raw=foreign)])
    assert result.decisions == {"supersede": 1} and result.outcomes["dead_letter:bad_field"] == 1
    got = edge_store.retrieve(["h1", update["memory_id"]])
    assert got["h1"].status == "superseded" and got["h1"].superseded_by == update["memory_id"]
    assert got[update["memory_id"]].metadata["source"] == "settings page"
    [record] = got[update["memory_id"]].decisions
    assert record["evidence"]["rule"] == "update" and record["evidence"]["judge"] == "user"
    proc.undo(record["decision_id"])
    assert edge_store.retrieve(["h1"])["h1"].status == "active"


def _raw(mid: str, user: str, text: str, day: int, **extra: object) -> dict:
    return {"type": "memory.added", "event_id": f"e-{mid}-{user}", "memory_id": mid, "user_id": user,
            "text": text, "created_at": f"2026-01-{day:02d}T00:00:00Z", **extra}


def test_an_id_freed_by_a_hard_delete_never_reaches_another_users_memory(proc: Processor) -> None:
    """A hard delete frees an id that a decision record or a review item of the user still names; once
    another user's memory takes that id, undoing the decision or reading the review must not touch it."""
    feed(proc, _raw("m-1", "alice", "Alice lives in Lisbon.", 1))
    decision = feed(proc, _raw("m-2", "alice", "Alice lives in Porto.", 2, replaces="m-1")).status_events[0]
    memories.hard_delete_memory(proc.store, "m-1", "alice")
    feed(proc, _raw("m-1", "bob", "Bob's PIN hint: his dog's name.", 3))
    feed(proc, _raw("m-9", "bob", "Bob's PIN hint: his cat's name.", 4, replaces="m-1"))
    assert proc.undo(decision["decision_id"]) == []
    assert [r["text"] for r in reads.get(proc.store, "bob", "latest_only")] == ["Bob's PIN hint: his cat's name."]
    assert proc.store.retrieve(["m-1"])["m-1"].superseded_by == "m-9"

    feed(proc, _raw("o-1", "alice", "Ana's favourite colour is blue.", 5))
    review = feed(proc, _raw("n-1", "alice", "Ana's favourite colour is green.", 6))
    assert dict(review.decisions) == {"review": 1}  # the judge leaves this pair to a person
    memories.hard_delete_memory(proc.store, "o-1", "alice")
    feed(proc, _raw("o-1", "bob", "Bob's bank password is hunter2.", 7))
    shown = orjson.dumps(reads.get(proc.store, "alice", "include_merged")).decode()
    one = orjson.dumps(memories.get_memory(proc.store, "n-1", "alice")).decode()
    assert "hunter2" not in shown and "hunter2" not in one


def test_undo_leaves_a_memory_the_user_deleted_since(proc: Processor) -> None:
    """A person's delete after a decision outranks undoing that decision: the deleted memory stays deleted
    (its link to the decision's memory goes), and its own delete can still be undone."""
    feed(proc, _raw("m-1", "ana", "Ana's dentist is Dr. Silva.", 1))
    decision = feed(proc, _raw("m-2", "ana", "Ana's dentist is Dr. Costa.", 2, replaces="m-1")).status_events[0]
    deleted = memories.delete_memory(proc.store, "m-1", "ana")
    assert deleted
    assert proc.undo(decision["decision_id"]) == []
    assert [r["text"] for r in reads.get(proc.store, "ana", "latest_only")] == ["Ana's dentist is Dr. Costa."]
    old = proc.store.retrieve(["m-1"])["m-1"]
    assert old.status == "deleted" and old.superseded_by is None
    # Undone, the replacement no longer hides it: its delete's undo brings it back current (it restored
    # "superseded by m-2", which no longer names it: hidden for good).
    assert [e["to_status"] for e in proc.undo(deleted[0]["decision_id"])] == ["active"]
    assert proc.store.retrieve(["m-1"])["m-1"].superseded_by is None


@pytest.mark.parametrize("deleted", ["new", "old"])
def test_undoing_a_delete_restores_no_link_to_an_id_another_user_took_since(proc: Processor, deleted: str) -> None:
    """A soft delete keeps the memory's links; the memory it linked to is hard-deleted and its freed id taken
    by another user. Undoing the delete brings back no link to that memory, so no history shows its text,
    and a memory whose replacement is gone is current again."""
    feed(proc, _raw("m-1", "ana", "Ana lives in Lisbon.", 1))
    feed(proc, _raw("m-2", "ana", "Ana moved to Porto.", 2, replaces="m-1"))
    soft, hard = ("m-2", "m-1") if deleted == "new" else ("m-1", "m-2")
    did = memories.delete_memory(proc.store, soft, "ana")[0]["decision_id"]
    memories.hard_delete_memory(proc.store, hard, "ana")
    assert not feed(proc, _raw(hard, "bob", "Bob's bank PIN is 4921.", 3)).dead_letters  # type: ignore[attr-defined]
    events = proc.undo(did)
    back = proc.store.retrieve([soft])[soft]
    assert back.status == "active" and back.supersedes == [] and back.superseded_by is None
    assert [e["to_status"] for e in events] == ["active"]
    assert "4921" not in orjson.dumps(memories.history(proc.store, soft, "ana")).decode()


@pytest.mark.parametrize("one_batch", [False, True])
def test_two_quick_edits_of_one_memory_both_land(proc: Processor, one_batch: bool) -> None:
    """Two PATCHes of a memory before ingest applied the first (each checked against the store alone): the
    second updates the version the first wrote, so the user's last word is current and nothing is lost."""
    feed(proc, _raw("m-1", "ana", "Ana lives in Lisbon.", 1))
    first = memories.update_event(proc.store, "m-1", "ana", {"text": "Ana lives in Porto."})
    second = memories.update_event(proc.store, "m-1", "ana", {"text": "Ana lives in Braga."})
    results = [feed(proc, first, second)] if one_batch else [feed(proc, first), feed(proc, second)]
    assert not any(r.dead_letters for r in results)  # type: ignore[attr-defined]
    assert [r["text"] for r in reads.get(proc.store, "ana", "latest_only")] == ["Ana lives in Braga."]
    got = proc.store.retrieve(["m-1", first["memory_id"]])
    assert got["m-1"].superseded_by == first["memory_id"] and got[first["memory_id"]].superseded_by == \
        second["memory_id"]


def test_reprocess_keeps_an_update_whose_original_the_new_order_merged_away(edge_store, embedder,
                                                                            tmp_path) -> None:
    """Reprocessed in created_at order, a memory written between the original and its update merges the
    original away; the update then has no current version to replace, and the judge decides it instead of
    its text being lost with the old store."""
    blind = Processor(edge_store, embedder, decide=lambda new, cands: [])
    blind.process([Incoming(raw=line(event(1, "u", "User has a dog named Rex.", day=1)))])
    update = memories.update_event(edge_store, "m-u-1", "u", {"text": "User has a dog named Rex and a cat named Tom."})
    blind.process([Incoming(raw=line(update))])
    blind.process([Incoming(raw=line(event(2, "u", "My dog Rex is a 3-year-old golden retriever.", day=3)))])
    result = Processor(edge_store, embedder).reprocess_user("u", str(tmp_path / "backup"))
    assert not result.dead_letters
    texts = {m.text: m.status for m in edge_store.scroll({"user_id": "u"})}
    assert texts["User has a dog named Rex and a cat named Tom."] == "active"


def test_a_record_that_fails_in_a_way_no_check_foresaw_is_a_dead_letter_not_a_stuck_batch(
        proc: Processor, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ingest reads a batch again only for a store fault: a record whose reading raises anything else (a bug, an
    input no check foresaw) is dead-lettered as processing_error, and the records beside it are stored."""
    from dreamstream.streams.core import ingest

    real = ingest.parse_memory_event

    def parse(raw: object) -> object:
        if b"Unforeseen" in raw:  # type: ignore[operator]
            raise OverflowError("date value out of range")
        return real(raw)  # type: ignore[arg-type]

    monkeypatch.setattr(ingest, "parse_memory_event", parse)
    result = feed(proc, _raw("m-1", "ana", "Ana lives in Lisbon.", 1), _raw("m-2", "ana", "Unforeseen.", 2),
                  _raw("m-3", "ana", "Ana plays the cello.", 3))
    assert [d["reason"] for d in result.dead_letters] == ["processing_error"]  # type: ignore[attr-defined]
    assert sorted(statuses(proc)) == ["m-1", "m-3"]


def test_a_text_repeated_on_many_days_is_judged_against_its_newest_copies_only(edge_store, embedder) -> None:
    """Each day's "went for a run" stays active (another occasion); the next one is judged against at most
    candidate_k of them, the newest, so a repeated text costs the same on day 40 as on day 2."""
    from dreamstream.streams.core.ingest import default_decide

    judge, _ = default_decide()
    seen: list[list[str]] = []

    def decide(new, candidates):  # type: ignore[no-untyped-def]
        seen.append([c.memory_id for c in candidates])
        return judge(new, candidates)

    proc = Processor(edge_store, embedder, decide=decide, candidate_k=4)
    for day in range(1, 13):
        feed(proc, _raw(f"m-{day}", "ana", "Went for a run this morning.", day))
    assert statuses(proc) == {f"m-{day}": "active" for day in range(1, 13)}
    assert max(len(c) for c in seen) == 4
    assert seen[-1] == ["m-11", "m-10", "m-9", "m-8"]


@pytest.mark.parametrize(("old", "new"), [
    ("The thermostat is set to -5 degrees.", "The thermostat is set to 5 degrees."),
    ("Mood today: 😀", "Mood today: 😢"),
    ("Живёт в Москве.", "Живёт в Париже."),
    ("住在东京。", "喜欢猫。"),
])
def test_texts_that_differ_only_where_no_feature_reads_are_never_merged(proc: Processor, old: str, new: str) -> None:
    """A sign, an emoji or a script the word features do not read: such a pair is not an exact duplicate, and
    what the scores make of it goes to review at most; the same text again is still a duplicate."""
    feed(proc, _raw("m-1", "ana", old, 1))
    result = feed(proc, _raw("m-2", "ana", new, 2))
    assert statuses(proc) == {"m-1": "active", "m-2": "active"}
    assert all(e["to_status"] != "merged" for e in result.status_events)  # type: ignore[attr-defined]
    feed(proc, _raw("m-3", "ana", new, 2))  # the same day: "today" twice is one occasion
    assert proc.store.retrieve(["m-3"])["m-3"].status == "merged"


@pytest.mark.parametrize(("old", "new"), [
    ("Ben is not allergic to peanuts.", "Ben is allergic to peanuts."),
    ("Lucía es alérgica a las nueces.", "Lucía no es alérgica a las nueces."),
    ("Raj loves chai.", "Raj hates chai."),
    ("Leo is vegan.", "Leo used to be vegan."),
    ("Grace's blood type is A+.", "Grace's blood type is A-."),
    ("Yuki likes ramen 🍜 but not sushi 🍣.", "Yuki: 🚬"),
    ("Klaus hat Diabetes.", "Klaus hat keinen Diabetes."),
    ("Sam runs 5 km every morning.", "Sam runs 5 miles every morning."),
    ("Tom's dosage is 10 mg of lisinopril.", "Tom's dosage is 10 g of lisinopril."),  # a one-letter unit
    ("Call mom at 5pm.", "Call dad at 5pm."),
    ("Run tests with `pytest -x tests/unit`.", "Run tests with `pytest -x tests/`."),
    ("Atlas staging URL is https://staging.atlas.example.com.", "Atlas production URL is https://atlas.example.com."),
])
def test_statements_that_cannot_be_one_fact_are_never_merged(proc: Processor, old: str, new: str) -> None:
    """Pairs a blind audit found merged at 0.99 "the same": a negation (in English or German), an antonym, a past
    state, a sign, an emoji, another unit, another person, another command or URL. None is hidden; each goes to
    review at most."""
    feed(proc, _raw("m-1", "ana", old, 1))
    result = feed(proc, _raw("m-2", "ana", new, 20))
    assert statuses(proc) == {"m-1": "active", "m-2": "active"}
    assert all(e["to_status"] == "active" for e in result.status_events)  # type: ignore[attr-defined]


def test_a_fuller_restatement_is_still_merged(proc: Processor) -> None:
    feed(proc, _raw("m-1", "ana", "Amy is married.", 1))
    feed(proc, _raw("m-2", "ana", "Amy is married to Jon.", 20))
    assert statuses(proc) == {"m-1": "merged", "m-2": "active"}


def test_a_merge_never_hides_the_memory_that_says_more() -> None:
    """Whatever a judge scores, the kept memory of a merge is not the one that says less."""
    from dreamstream.agents.merge_supersede import Verdict, gate
    from dreamstream.schemas.memory import Memory

    def mem(mid: str, text: str, day: int) -> Memory:
        return Memory(memory_id=mid, user_id="mia", text=text, created_at=f"2026-01-0{day}T00:00:00Z", updated_at="")

    short = mem("m-1", "Mia's shopping list: milk, eggs, bread, butter.", 1)
    full = mem("m-2", "Mia's shopping list: milk, eggs, bread, butter, cheese.", 2)
    hides_full = gate(Verdict("m-1", "same", 0.99, "learned:same", {}, new_fuller=False), full, short)
    assert (hides_full.relation, hides_full.rule) == ("review_same", "gate_fuller:learned:same")
    keeps_full = gate(Verdict("m-1", "same", 0.99, "learned:same", {}, new_fuller=True), full, short)
    assert keeps_full.relation == "same"


def test_an_edit_of_a_fact_merged_since_it_was_asked_is_kept_and_judged(proc: Processor) -> None:
    """PATCH checks the store when asked; a merge queued before it hid the memory, and ingest dead-lettered the
    edit (202 to the client, the correction gone)."""
    feed(proc, _raw("m-1", "ana", "Ana has a dog named Rex.", 1))
    edit = memories.update_event(proc.store, "m-1", "ana", {"text": "Ana has a dog named Rex, adopted in 2024."})
    blind = Processor(proc.store, proc.embed, decide=lambda new, cands: [])
    feed(blind, _raw("m-2", "ana", "Ana's dog Rex is a 3-year-old golden retriever.", 2))
    proc.store.update("m-1", {"status": "merged", "merged_into": "m-2"})  # as the judge's merge leaves it
    proc.store.update("m-2", {"merged_from": ["m-1"]})
    result = feed(proc, edit)
    assert not result.dead_letters  # type: ignore[attr-defined]
    got = proc.store.retrieve([edit["memory_id"]])[edit["memory_id"]]
    assert got.text == "Ana has a dog named Rex, adopted in 2024." and got.metadata["edit_of"] == "m-1"
    assert not any((r.get("evidence") or {}).get("rule") == "update" for r in got.decisions)


def test_an_edit_of_a_fact_the_judge_replaced_since_never_overwrites_the_newer_fact(proc: Processor) -> None:
    """The edit followed any `superseded_by`: an edit of "lives in Lisbon" asked before "moved to Berlin" was
    judged an update then superseded Berlin by force, the old city current again."""
    feed(proc, _raw("m-1", "ana", "Ana lives in Lisbon.", 1))
    edit = memories.update_event(proc.store, "m-1", "ana", {"text": "Ana lives in Lisbon, in Alfama."})
    feed(proc, _raw("m-2", "ana", "Ana moved to Berlin last month.", 2))
    assert proc.store.retrieve(["m-1"])["m-1"].superseded_by == "m-2"  # the judge's supersede
    assert not feed(proc, edit).dead_letters  # type: ignore[attr-defined]
    got = proc.store.retrieve([edit["memory_id"], "m-2"])
    assert got[edit["memory_id"]].metadata["edit_of"] == "m-1"
    forced = [r for r in got[edit["memory_id"]].decisions if (r.get("evidence") or {}).get("rule") == "update"]
    assert not forced


def test_an_edit_whose_old_version_was_deleted_meanwhile_is_kept(proc: Processor) -> None:
    """An agent updated a fact and at once deleted the old version: both calls answered 202/deleted, then ingest
    dead-lettered the edit ("no current memory") and the user had no fact left."""
    feed(proc, _raw("m-1", "ana", "Ana works at Acme.", 1))
    edit = memories.update_event(proc.store, "m-1", "ana", {"text": "Ana works at Globex."})
    assert memories.delete_memory(proc.store, "m-1", "ana")
    assert not feed(proc, edit).dead_letters  # type: ignore[attr-defined]
    got = proc.store.retrieve([edit["memory_id"]])[edit["memory_id"]]
    assert (got.status, got.text, got.metadata["edit_of"]) == ("active", "Ana works at Globex.", "m-1")


def test_undoing_a_persons_edit_reverts_it_and_undoing_the_judges_supersede_keeps_both(proc: Processor) -> None:
    """After the undo of an update both "works at Acme" and "works at Globex" were current, contradicting each
    other. The edit's version is withdrawn (deleted: hidden, kept); the judge's supersede, undone, leaves two
    facts the person stated."""
    feed(proc, _raw("m-1", "ana", "Ana works at Acme.", 1))
    edit = memories.update_event(proc.store, "m-1", "ana", {"text": "Ana works at Globex."})
    [moved] = [e for e in feed(proc, edit).status_events if e["memory_id"] == "m-1"]  # type: ignore[attr-defined]
    events = proc.undo(moved["decision_id"])
    assert {(e["memory_id"], e["to_status"]) for e in events} == {("m-1", "active"), (edit["memory_id"], "deleted")}
    assert statuses(proc) == {"m-1": "active", edit["memory_id"]: "deleted"}
    feed(proc, _raw("m-3", "ana", "Ana lives in Lisbon.", 3))
    feed(proc, _raw("m-4", "ana", "Ana moved to Berlin last month.", 4))
    assert proc.store.retrieve(["m-3"])["m-3"].superseded_by == "m-4"  # the judge's
    [judged] = [d for d in proc.store.retrieve(["m-4"])["m-4"].decision_ids]
    proc.undo(judged)
    got = proc.store.retrieve(["m-3", "m-4"])
    assert (got["m-3"].status, got["m-4"].status) == ("active", "active")


def test_an_erase_record_erases_every_earlier_add_of_the_user_and_keeps_later_ones(proc: Processor) -> None:
    """DELETE /v1/users/U erased only what was stored when it ran: adds of U accepted before it and not yet
    ingested were stored after it. The erasure now travels on memory.added behind them."""
    erase = {"type": "user.erase", "event_id": "erase-r1", "user_id": "ana", "request": "r1", "issued_by": "api"}
    feed(proc, _raw("m-1", "ana", "Ana lives in Lisbon.", 1))
    result = proc.process([Incoming(raw=orjson.dumps(r), key=r["user_id"].encode()) for r in (
        _raw("m-2", "ana", "Ana has a secret diagnosis.", 2), _raw("b-1", "bob", "Bob keeps bees.", 2), erase,
        _raw("m-3", "ana", "Ana signed up again.", 3))])
    assert set(statuses(proc)) == {"m-3", "b-1"}  # the erased ones are gone, later and other users' stay
    [audit] = [e for e in result.status_events if e["to_status"] == "erased"]
    assert audit["evidence"] == {"request": "r1", "issued_by": "api", "user": "ana", "deleted": 2}
    assert "Lisbon" not in orjson.dumps(result.status_events).decode()
    from dreamstream.streams.core.ingest import ERASED

    assert ERASED["r1"] == 2
    wrong_key = proc.process([Incoming(raw=orjson.dumps({**erase, "request": "r2"}), key=b"bob")])
    assert [d["reason"] for d in wrong_key.dead_letters] == ["key_mismatch"] and "m-3" in statuses(proc)
    bad = proc.process([Incoming(raw=orjson.dumps({**erase, "user_id": " ana"}), key=None)])
    assert [d["reason"] for d in bad.dead_letters] == ["bad_field"] and "m-3" in statuses(proc)


def test_what_was_removed_for_good_is_not_stored_again_when_its_events_come_again(proc: Processor) -> None:
    """An audit: replaying the same backfill (or a producer's resend) after an erase or a hard delete stored
    the removed memories again, current as before. Now a digest of what went is kept (`Store.bury`)."""
    events = [_raw("m-1", "ana", "Ana has a secret diagnosis.", 1), _raw("m-2", "ana", "Ana lives in Lisbon.", 2),
              _raw("k-1", "kai", "Kai keeps bees.", 1), _raw("k-2", "kai", "Kai sails on Sundays.", 2)]
    feed(proc, *events)
    erase = {"type": "user.erase", "event_id": "erase-r9", "user_id": "ana", "request": "r9", "issued_by": "api"}
    proc.process([Incoming(raw=orjson.dumps(erase), key=b"ana")])
    deleted = memories.hard_delete_memory(proc.store, "k-1", "kai")
    assert deleted is not None
    again = feed(proc, *events)  # before the delete's events are out: its holder, a tombstone, is still there
    assert again.outcomes["removed_for_good"] == 3 and statuses(proc) == {"k-1": "deleted", "k-2": "active"}
    changes.sent(proc.store, deleted)
    assert feed(proc, *events).outcomes["removed_for_good"] == 3 and statuses(proc) == {"k-2": "active"}
    # The API says so at once (a 409), instead of a 202 and a wait for a memory that never comes.
    for e in (events[0], events[2]):
        assert (memories.taken(proc.store, [e]) or "").startswith("removed_for_good: ")
    assert memories.taken(proc.store, [events[3]]) is None
    later = feed(proc, _raw("m-3", "ana", "Ana signed up again.", 3),  # after the erasure: hers
                 _raw("k-1", "kai", "Kai keeps two hives now.", 3, event_id="e-k-1b"))  # the freed id, new words
    assert later.outcomes["stored"] == 2 and set(statuses(proc)) == {"m-3", "k-1", "k-2"}
    assert "secret" not in orjson.dumps(again.dead_letters).decode()


def test_the_store_remembers_what_was_buried(store: Any) -> None:
    assert store.buried(["a", "b"]) == {}
    store.bury(["a", "c"], "2026-01-01T00:00:00Z")
    store.bury(["c"], "2026-02-01T00:00:00Z")
    assert store.buried(["a", "b", "c"]) == {"a": "2026-01-01T00:00:00Z", "c": "2026-02-01T00:00:00Z"}
    assert store.count() == 0 and list(store.scroll()) == []  # never among the memories


def test_after_an_erasure_the_users_new_memories_are_theirs_whatever_their_date(proc: Processor) -> None:
    """The log's order says what an erasure covers: an add after it is the user's, even dated before it (an
    audit: a time line let one memory dated ahead swallow every add up to its date). Only the erased memories
    themselves, sent again, are passed over."""
    ahead = _raw("n-1", "ned", "Ned's trip is booked for June.", 1, created_at="2026-06-01T00:00:00Z")
    feed(proc, ahead, _raw("n-2", "ned", "Ned lives in Leeds.", 2))
    erase = {"type": "user.erase", "event_id": "erase-n", "user_id": "ned", "request": "n",
             "created_at": "2026-02-01T00:00:00Z"}
    proc.process([Incoming(raw=orjson.dumps(erase), key=b"ned")])
    after = feed(proc, _raw("n-3", "ned", "Ned signed up again.", 1), _raw("n-4", "ned", "Ned has a cat.", 9))
    assert after.outcomes["stored"] == 2 and set(statuses(proc)) == {"n-3", "n-4"}
    assert feed(proc, ahead).outcomes["removed_for_good"] == 1 and set(statuses(proc)) == {"n-3", "n-4"}


def test_a_hard_delete_whose_events_a_restart_sends_frees_its_id(proc: Processor) -> None:
    """An audit: a worker killed after a hard delete sent the delete's events at its next start but only cleared
    them, so the deleted memory's holder stayed for good: shown by id as deleted, counted, and its id refused
    to its user's new words and to everyone else."""
    feed(proc, _raw("g-1", "gus", "Gus keeps a diary.", 1))
    assert memories.hard_delete_memory(proc.store, "g-1", "gus")  # killed before publishing: events kept unsent
    unsent = proc.unsent()
    assert unsent.status_events and "g-1" in unsent.outbox_owners
    proc.mark_sent(unsent.outbox_owners)  # what the worker does at its start once they are published
    assert proc.store.retrieve(["g-1"]) == {}
    assert feed(proc, _raw("g-1", "hal", "Hal rides a bike.", 2, event_id="e-g-1-hal")).outcomes["stored"] == 1
