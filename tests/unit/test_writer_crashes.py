"""Every writer outside ingest is crash-safe: a consolidation pass, an undo (of a pass and of one
decision) and a reprocess, killed after any one of their store writes, end (after `changes.recover`,
or the redelivered command) exactly as a clean run, with every status event present once.

The kill is raised in process right after the n-th store write returns, for every n the clean run
makes; the worker-level SIGKILL campaign is `make fault-test`."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dreamstream.agents import consolidation as cons
from dreamstream.streams.core import changes
from dreamstream.streams.core import consolidation as runner
from dreamstream.streams.core.ingest import Incoming, Processor
from dreamstream.streams.core.undo import AlreadyUndone, undo_decision
from dreamstream.streams.store import EdgeStore
from tests.unit.test_consolidation import NOW, memories

WRITES = ("upsert", "update", "update_many", "delete")
LINKS = ("status", "superseded_by", "supersedes", "merged_into", "merged_from", "decision_ids")
PASS_ID = "cons-crashtest00000001"


class Crash(BaseException):
    """Stands in for SIGKILL: not an Exception, so nothing on the write path can swallow it."""


class CrashAfter:
    """The store, dying right after its n-th write (0: never); counts the writes it saw."""

    def __init__(self, store: Any, n: int) -> None:
        self._store, self._n, self.writes = store, n, 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if name not in WRITES:
            return attr

        def write(*args: Any, **kwargs: Any) -> Any:
            out = attr(*args, **kwargs)
            self.writes += 1
            if self.writes == self._n:
                raise Crash
            return out
        return write


def state(store: Any) -> dict[str, tuple[Any, ...]]:
    """Statuses, links, open intents and unsent events: what must equal a clean run's."""
    return {m.memory_id: (*(tuple(v) if isinstance(v := getattr(m, k), list) else v for k in LINKS),
                          bool(m.pending), len(m.outbox)) for m in store.scroll()}


def keys(events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted((e["decision_id"], e["memory_id"], e["from_status"], e["to_status"], e["undo"]) for e in events)


def unsent_events(store: Any) -> list[dict[str, Any]]:
    return [ev for m in store.scroll({"outbox_state": "unsent"}) for ev in m.outbox]


def fresh(tmp_path: Path, name: str, embedder: Any) -> Any:
    store = EdgeStore(tmp_path / name)
    store.upsert(memories(embedder))
    return store


def run_pass(store: Any, embedder: Any) -> list[dict[str, Any]]:
    plan, _ = runner.make_plan(store, "u1", "proj", cons.DEFAULT_RETENTION, now=NOW)
    _, events = runner.apply_plan(store, embedder, plan, {0: "A"}, reminder=True, pass_id=PASS_ID)
    return events


def crash_every_write(tmp_path: Path, embedder: Any, prepare: Callable[[Any], None],
                      writer: Callable[[Any], list[dict[str, Any]]]) -> tuple[int, int]:
    """Runs `writer` clean, then killed after each of its writes; returns (writes, runs that crashed)."""
    clean = fresh(tmp_path, "clean", embedder)
    prepare(clean)
    counting = CrashAfter(clean, 0)
    clean_events = writer(counting)
    changes.sent(clean, clean_events)  # published by the caller
    expected = state(clean)
    clean.close()
    assert counting.writes >= 3 and clean_events
    crashed = 0
    for n in range(1, counting.writes + 1):
        store = fresh(tmp_path, f"crash-{n}", embedder)
        prepare(store)
        try:
            writer(CrashAfter(store, n))
        except Crash:
            crashed += 1
            changes.recover(store)
            # What the worker does at its start: every unsent event out. Nothing had been published,
            # so that is every event of the clean run, once.
            unsent = unsent_events(store)
            assert keys(unsent) == keys(clean_events), f"killed after write {n}"
            changes.sent(store, unsent)
        assert state(store) == expected, f"killed after write {n}"
        store.close()
    return counting.writes, crashed


def test_a_pass_killed_after_any_write_ends_as_a_clean_pass(tmp_path: Path, embedder: Any) -> None:
    writes, crashed = crash_every_write(tmp_path, embedder, lambda s: None, lambda s: run_pass(s, embedder))
    assert crashed == writes


def test_undo_of_a_pass_killed_after_any_write_ends_as_a_clean_undo(tmp_path: Path, embedder: Any) -> None:
    def prepare(store: Any) -> None:
        changes.sent(store, run_pass(store, embedder))

    writes, crashed = crash_every_write(tmp_path, embedder, prepare,
                                        lambda s: undo_decision(s, PASS_ID).events)
    assert crashed == writes


def test_a_pass_that_only_deletes_keeps_its_status_events_through_a_crash(tmp_path: Path, embedder: Any) -> None:
    """A --hard-delete pass of prunes only keeps no memory; its intent and events ride on a tombstone of
    the first deleted (no words left on it) until they are sent. Before, a crash after the delete lost them."""
    def prepare(store: Any) -> None:
        store.delete(["pg-1", "pg-2", "fri-1", "fri-2"])  # left: two prunes and what is kept anyway

    def prune_hard(store: Any) -> list[dict[str, Any]]:
        plan, _ = runner.make_plan(store, "u1", "proj", cons.DEFAULT_RETENTION, now=NOW)
        assert plan.prunes and not plan.merges and not plan.conflicts
        return runner.apply_plan(store, embedder, plan, {}, hard_delete=True, pass_id=PASS_ID)[1]

    writes, crashed = crash_every_write(tmp_path, embedder, prepare, prune_hard)
    assert crashed == writes
    store = fresh(tmp_path, "tombstone", embedder)  # killed right after the first write: the tombstone
    prepare(store)
    with contextlib.suppress(Crash):
        prune_hard(CrashAfter(store, 1))
    [held] = [m for m in store.scroll() if m.pending]
    assert held.status == "deleted" and held.text == "" and held.features is None and held.outbox
    store.close()


def test_undo_of_one_decision_killed_after_any_write(tmp_path: Path, embedder: Any) -> None:
    def prepare(store: Any) -> None:
        proc = Processor(store, embedder, keep_outbox=True)
        result = proc.process([Incoming(raw={
            "type": "memory.added", "event_id": "e-move", "memory_id": "move", "user_id": "u1",
            "text": "The team no longer deploys on Fridays; they deploy on Tuesdays now.",
            "created_at": "2026-04-01T10:00:00Z", "app_id": "proj"})])
        proc.mark_sent(result.outbox_owners)

    def decision(store: Any) -> str:
        [holder] = [m for m in store.scroll({"user_id": "u1"}) if m.memory_id == "move"]
        acted = [d for d in holder.decisions if d["action"] in ("supersede", "merge_old", "merge_new")]
        assert acted, holder.decisions
        return str(acted[0]["decision_id"])

    writes, crashed = crash_every_write(tmp_path, embedder, prepare,
                                        lambda s: undo_decision(s, decision(s)).events)
    assert crashed == writes


def test_a_redelivered_undo_command_is_answered_not_refused(tmp_path: Path, embedder: Any) -> None:
    store = fresh(tmp_path, "s", embedder)
    changes.sent(store, run_pass(store, embedder))
    first = undo_decision(store, PASS_ID, by="cmd-1")
    with pytest.raises(AlreadyUndone) as again:
        undo_decision(store, PASS_ID, by="cmd-1")
    assert again.value.mine and again.value.events == len(first.events)
    with pytest.raises(AlreadyUndone) as other:
        undo_decision(store, PASS_ID, by="cmd-2")
    assert not other.value.mine
    store.close()


def test_a_redelivered_consolidate_command_answers_from_the_applied_pass(tmp_path: Path, embedder: Any) -> None:
    store = fresh(tmp_path, "s", embedder)
    proc = Processor(store, embedder)
    args = {"user": "u1", "app": "proj", "mode": "auto"}
    first, events = runner.control(proc, "consolidate.run", args, None, str(tmp_path), command_id="c-1")
    assert first["merged_pairs"] == 1 and events
    again, more = runner.control(proc, "consolidate.run", args, None, str(tmp_path), command_id="c-1")
    assert more == [] and {k: again[k] for k in ("decision_id", "merged_pairs", "pruned")} == \
        {k: first[k] for k in ("decision_id", "merged_pairs", "pruned")}
    store.close()


def test_reprocess_killed_after_any_write_finishes_the_first_run(tmp_path: Path, embedder: Any) -> None:
    """The backup is the intent: a rerun finishes from it, never from the half-emptied user."""
    clean = fresh(tmp_path, "clean", embedder)
    counting = CrashAfter(clean, 0)
    Processor(counting, embedder, keep_outbox=True).reprocess_user("u1", str(tmp_path / "b-clean"), "cmd-r")
    expected = {k: v[:-2] for k, v in state(clean).items()}
    clean.close()
    assert counting.writes >= 3
    for n in range(1, counting.writes + 1):
        store = fresh(tmp_path, f"crash-{n}", embedder)
        backup = str(tmp_path / f"b-{n}")
        with contextlib.suppress(Crash):
            Processor(CrashAfter(store, n), embedder, keep_outbox=True).reprocess_user("u1", backup, "cmd-r")
        changes.recover(store)
        result = Processor(store, embedder, keep_outbox=True).reprocess_user("u1", backup, "cmd-r")
        assert result.outcomes["stored"] + result.outcomes["redelivered"] == len(expected) or n == counting.writes
        assert {k: v[:-2] for k, v in state(store).items()} == expected, f"killed after write {n}"
        assert sorted(p.name for p in Path(backup).iterdir() if not p.name.startswith("done-")) == []
        assert not list(store.scroll({"user_id": changes.backup_user("u1")}))  # its copies gone with the run
        store.close()


def test_reprocess_killed_on_one_worker_is_finished_by_the_one_taking_the_user_over(
        tmp_path: Path, embedder: Any) -> None:
    """On a shared store another worker gets the command again. The backup was on the first worker's disk:
    the second found none, read the emptied user and answered `ok, memories: 0`, every memory gone."""
    clean = fresh(tmp_path, "clean", embedder)
    counting = CrashAfter(clean, 0)
    Processor(counting, embedder, keep_outbox=True).reprocess_user("u1", str(tmp_path / "b-clean"), "cmd-r")
    expected = {k: v[:-2] for k, v in state(clean).items()}
    clean.close()
    for n in range(1, counting.writes + 1):
        store = fresh(tmp_path, f"crash-{n}", embedder)
        with contextlib.suppress(Crash):
            Processor(CrashAfter(store, n), embedder, keep_outbox=True).reprocess_user(
                "u1", str(tmp_path / f"worker-a-{n}"), "cmd-r")
        changes.recover(store)
        Processor(store, embedder, keep_outbox=True).reprocess_user("u1", str(tmp_path / f"worker-b-{n}"), "cmd-r")
        assert {k: v[:-2] for k, v in state(store).items()} == expected, f"killed after write {n}"
        store.close()


def test_an_erase_takes_an_interrupted_reprocess_copies_with_it(tmp_path: Path, embedder: Any) -> None:
    """The copies hold the user's texts: an erase on another worker left them to come back with a reprocess."""
    store = fresh(tmp_path, "s", embedder)
    with contextlib.suppress(Crash):  # killed right after its copies were written
        Processor(CrashAfter(store, 1), embedder).reprocess_user("u1", str(tmp_path / "a"), "cmd-r")
    assert list(store.scroll({"user_id": changes.backup_user("u1")}))
    changes.erase_user(store, "u1")
    again = Processor(store, embedder).reprocess_user("u1", str(tmp_path / "b"), "cmd-r2")
    assert again.outcomes["stored"] == 0 and store.count({"user_id": "u1"}) == 0
    store.close()


def test_a_redelivered_erase_deletes_the_rest_and_reports_the_first_count(tmp_path: Path, embedder: Any) -> None:
    import orjson

    def erase(request: str) -> Incoming:
        return Incoming(raw=orjson.dumps({"type": "user.erase", "event_id": f"erase-{request}", "user_id": "u1",
                                          "request": request}), topic="memory.added", partition=0, offset=1)

    store = fresh(tmp_path, "s", embedder)
    total = store.count({"user_id": "u1"})
    erase_dir = str(tmp_path / "erase")
    with pytest.raises(Crash):  # killed right after its delete, before the audit event is published
        Processor(CrashAfter(store, 1), embedder, erase_dir=erase_dir).process([erase("r1")])
    assert store.count({"user_id": "u1"}) == 0
    again = Processor(store, embedder, erase_dir=erase_dir).process([erase("r1")])
    assert again.erased == ["u1"]
    assert [e["evidence"]["deleted"] for e in again.status_events] == [total] and total > 0  # not the 0 left
    other = Processor(store, embedder, erase_dir=erase_dir).process([erase("r2")])
    assert [e["evidence"]["deleted"] for e in other.status_events] == [0]
    store.close()


def test_an_erase_after_the_users_decided_adds_in_one_batch_lets_the_batch_be_marked_sent(
        tmp_path: Path, embedder: Any) -> None:
    """The erase deletes memories whose status events the batch still holds: marking them sent used to fail
    on the missing points, so the batch was read again, stored the erased texts again and failed again."""
    import orjson

    from tests.unit.test_crash_consistency import GOOD

    store = EdgeStore(tmp_path / "s")
    proc = Processor(store, embedder, keep_outbox=True, erase_dir=str(tmp_path / "erase"))
    users = {orjson.loads(r)["user_id"] for r in GOOD[:12]}
    erases = [Incoming(raw=orjson.dumps({"type": "user.erase", "event_id": f"erase-{u}", "user_id": u,
                                         "request": u}), topic="memory.added", partition=0, offset=100 + n)
              for n, u in enumerate(sorted(users))]
    result = proc.process([Incoming(raw=r) for r in GOOD[:12]] + erases)
    assert result.outbox_owners and sum(result.decisions.values()) > 0  # decisions were made, then erased
    proc.mark_sent(result.outbox_owners)
    assert store.count({}) == 0 and proc.unsent().status_events == []
    store.close()


def test_an_intent_on_a_long_unchanged_holder_is_young_to_a_recovering_worker(tmp_path: Path, embedder: Any) -> None:
    """On a shared store, `recover` leaves intents younger than its grace period to their writer. It dated an
    intent by its holder's last change, so a full pass keeping a memory untouched for months had its
    intent finished by a starting worker while the pass was still writing it."""
    from dreamstream.schemas.events import status_event

    store = fresh(tmp_path, "s", embedder)
    kept, gone = sorted(store.scroll({"user_id": "u1"}), key=lambda m: m.memory_id)[:2]
    store.update(kept.memory_id, {"updated_at": "2025-01-01T00:00:00Z"})  # last changed long ago
    change = changes.Change(change_id="c-1", holder=kept.memory_id, events=[status_event(
        "c-1", gone.memory_id, "u1", "active", "merged", kept.memory_id, "consolidate_merge", {})])
    change.set(gone.memory_id, {"status": "merged", "merged_into": kept.memory_id})
    change.set(kept.memory_id, {"merged_from": [gone.memory_id]})
    with pytest.raises(Crash):  # the writer, right after writing its intent: still at work, not crashed
        changes.apply(CrashAfter(store, 1), change)
    assert changes.recover(store, grace_seconds=120) == []  # another worker starting now leaves it alone
    assert store.retrieve([gone.memory_id])[gone.memory_id].status == "active"
    assert [e["memory_id"] for e in changes.recover(store)] == [gone.memory_id]  # its own writer finishes it
    assert store.retrieve([gone.memory_id])[gone.memory_id].status == "merged"
    store.close()


def test_light_consolidation_killed_after_any_write_ends_as_a_clean_run(tmp_path: Path, embedder: Any) -> None:
    """Light wrote each memory's links and cleared its pending reads one memory at a time: a crash left links
    one way, and the rerun folded the reads still pending into weights already strengthened (0.51 -> 0.655)."""
    def reads(store: Any) -> None:
        for at in ("2026-11-01T00:00:00Z", "2026-11-10T00:00:00Z", "2026-11-20T00:00:00Z"):
            runner.record_access(store, ["pg-1", "pg-2", "fri-1"], at)
        runner.record_access(store, ["pg-1", "fri-2"], "2026-11-21T00:00:00Z")

    def links(store: Any) -> dict[str, Any]:
        return {m.memory_id: (m.links, m.access.get("stability"), m.access.get("pending"), bool(m.pending))
                for m in store.scroll()}

    clean = fresh(tmp_path, "clean", embedder)
    reads(clean)
    counting = CrashAfter(clean, 0)
    runner.light(counting, "u1")
    runner.light(clean, "u1")  # run twice, as the crashed ones are below (each run weakens unread links)
    expected = links(clean)
    clean.close()
    assert counting.writes >= 3 and expected["pg-1"][0]
    for n in range(1, counting.writes + 1):
        store = fresh(tmp_path, f"light-{n}", embedder)
        reads(store)
        with contextlib.suppress(Crash):
            runner.light(CrashAfter(store, n), "u1")
        changes.recover(store)  # what the worker and `dream consolidate` do first
        runner.light(store, "u1")  # and the run again
        assert links(store) == expected, f"killed after write {n}"
        store.close()


def _words_on_disk(folder: Path, word: bytes) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and word in p.read_bytes())


def test_an_erased_users_words_leave_the_stores_files(tmp_path: Path, embedder: Any) -> None:
    """An audit: after an erase (and an optimize) the user's texts were still in the engine's log and pages,
    so any copy of the store folder (a backup) carried them. The erase now rewrites the store."""
    import orjson

    store = EdgeStore(tmp_path / "store")
    proc = Processor(store, embedder)
    rows = [{"type": "memory.added", "event_id": f"e-{u}-{n}", "memory_id": f"{u}-{n}", "user_id": u,
             "text": f"{u.title()} note {n}: {word} is private.", "created_at": f"2026-01-0{n}T00:00:00Z"}
            for u, word in (("sao", "Sourdoughsecret"), ("bo", "Beekeeping")) for n in (1, 2, 3)]
    proc.process([Incoming(raw=orjson.dumps(r), key=r["user_id"].encode()) for r in rows])
    store.flush()
    assert _words_on_disk(tmp_path / "store", b"Sourdoughsecret")  # the engine's log and pages hold it
    erase = {"type": "user.erase", "event_id": "erase-x", "user_id": "sao", "request": "x"}
    proc.process([Incoming(raw=orjson.dumps(erase), key=b"sao")])
    assert _words_on_disk(tmp_path / "store", b"Sourdoughsecret") == []
    assert _words_on_disk(tmp_path / "store", b"Beekeeping") and store.count({"user_id": "bo"}) == 3
    store.close()
    again = EdgeStore(tmp_path / "store")
    assert again.count() == 3 and again.count({"user_id": "sao"}) == 0
    again.close()


def test_a_compaction_cut_short_is_finished_at_the_next_open(tmp_path: Path, embedder: Any,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The copy is swapped in one rename per engine entry: a crash between two (here a failing rename) is
    finished when the store opens again, never left half old, half new."""
    import os

    store = EdgeStore(tmp_path / "store")
    store.upsert(memories(embedder))
    gone = [m.memory_id for m in store.scroll()][:3]
    kept = store.count() - 3
    store.delete(gone)
    store.flush()
    real, calls = os.rename, []

    def rename(a: Any, b: Any) -> None:
        calls.append(a)
        if len(calls) == 2:
            raise OSError("disk went away")
        real(a, b)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(Exception, match="disk went away"):
        store.compact()  # the store reopened in its `finally`: the swap finished there
    assert store.count() == kept and store.retrieve(gone) == {}
    monkeypatch.setattr(os, "rename", real)
    store.close()
    reopened = EdgeStore(tmp_path / "store")
    assert reopened.count() == kept and not (tmp_path / "store" / ".compact").exists()
    reopened.close()
