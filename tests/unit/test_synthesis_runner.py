"""Synthesis against a real store (qdrant-edge) and the real model, through the ingest path: no mocks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from dreamstream.streams.core import reads
from dreamstream.streams.core import synthesis as runner
from dreamstream.streams.core.ingest import Incoming, Processor
from dreamstream.streams.store import EdgeStore
from tests.helpers import FILLER

FITNESS = [
    "Runs about 40 km every week.",
    "Lifts weights three times a week.",
    "Tracks every workout on a Garmin watch.",
    "Goal: a sub-4-hour marathon next spring.",
    "Does a long run every Sunday morning.",
    "Follows a twelve-week training plan for the half marathon.",
]
T0 = "2025-03-01T00:00:00Z"
NOW = "2025-04-01T00:00:00Z"


def events(user: str, day0: int = 2, texts: list[str] | None = None) -> list[dict[str, Any]]:
    """A user's memory.added events, one a day from March `day0`, theme interleaved with filler."""
    texts = texts or [t for pair in zip(FILLER, FITNESS + [""] * len(FILLER), strict=False) for t in pair if t]
    return [{
        "type": "memory.added", "event_id": f"e-{user}-{i}", "memory_id": f"m-{user}-{i:02d}", "user_id": user,
        "text": text, "created_at": f"2025-03-{day0 + i % 26:02d}T{i % 24:02d}:00:00Z",
        "metadata": {"type": "user_fact", "confidence": 0.9, "pinned": False},
    } for i, text in enumerate(texts)]


def ingest(proc: Processor, evs: list[dict[str, Any]]) -> None:
    result = proc.process([Incoming(raw=orjson.dumps(e)) for e in evs])
    assert not result.dead_letters, result.dead_letters


def run(store: Any, embedder: Any, state: runner.SynthesisState, user: str = "u1", now: str = NOW,
        force: bool = False, **options: Any) -> runner.RunRecord:
    """One run for `user`, its retirements applied and its patterns ingested; `options` go to `run_for_user`
    (a pattern writer, a theme reader)."""
    record = runner.run_for_user(store, embedder, user, now, state, force=force, **options)
    runner.apply(store, [record])
    ingest(Processor(store, embedder), record.events)
    return record


def patterns(store: Any, user: str = "u1") -> list[Any]:
    """The user's live patterns (retired ones are kept as `expired`)."""
    return sorted(store.scroll({"user_id": user, "kind": "pattern", "status": "active"}), key=lambda m: m.memory_id)


def test_off_by_default_then_enabled(edge_store: Any, embedder: Any, tmp_path: Path) -> None:
    ingest(Processor(edge_store, embedder), events("u1"))
    state = runner.SynthesisState.load(tmp_path / "state.json")
    off = run(edge_store, embedder, state)
    assert not off.ran and off.reason == "disabled" and not patterns(edge_store)

    runner.enable(state, None, T0)
    assert runner.SynthesisState.load(tmp_path / "state.json").projects["_default"]["enabled"]
    on = run(edge_store, embedder, state)
    assert on.ran and on.memories_considered == len(FILLER) + len(FITNESS)
    stored = patterns(edge_store)
    assert stored and on.patterns_written == len(stored) == len(on.events)
    fitness_ids = {f"m-u1-{i:02d}" for i, e in enumerate(events("u1")) if e["text"] in FITNESS}
    assert any(len(set(p.sources) & fitness_ids) >= 4 for p in stored), [(p.text, p.sources) for p in stored]
    for p in stored:  # every source is the user's own, active, stored fact
        sources = edge_store.retrieve(p.sources)
        assert set(sources) == set(p.sources)
        assert all(m.user_id == "u1" and m.kind == "fact" and m.status == "active" for m in sources.values())
        assert p.metadata["source"] == "dream-synthesis" and p.metadata["type"] == "pattern"
    rows = reads.get(edge_store, "u1")
    assert {r["memory_id"] for r in rows if r["label"] == "pattern"} == {p.memory_id for p in stored}

    runner.disable(state, None)
    assert run(edge_store, embedder, state, force=True).reason == "disabled"


def test_too_few_memories(edge_store: Any, embedder: Any) -> None:
    ingest(Processor(edge_store, embedder), events("u2", texts=FITNESS + FILLER[:10]))
    state = runner.SynthesisState()
    runner.enable(state, None, T0)
    record = run(edge_store, embedder, state, user="u2")
    assert not record.ran and record.reason == "too_few_memories" and not patterns(edge_store, "u2")


def test_forward_boundary_excludes_earlier(edge_store: Any, embedder: Any) -> None:
    proc = Processor(edge_store, embedder)
    evs = events("u1")
    ingest(proc, evs)
    state = runner.SynthesisState()
    runner.enable(state, None, "2025-03-20T00:00:00Z")  # after most of the fitness evidence
    record = run(edge_store, embedder, state)
    later = {e["memory_id"] for e in evs if e["created_at"] > "2025-03-20T00:00:00Z"}
    assert record.ran and record.memories_considered == len(later)
    for p in patterns(edge_store):
        assert set(p.sources) <= later
    runner.enable(state, None, "2025-04-01T00:00:00Z")  # nothing after: no evidence, no patterns
    empty = run(edge_store, embedder, state, force=True)
    assert empty.themes == 0 and empty.patterns_retired == len(empty.retired)
    assert not patterns(edge_store)  # patterns the evidence no longer supports are retired ...
    kept = edge_store.scroll({"user_id": "u1", "kind": "pattern"})
    assert kept and all(p.status == "expired" for p in kept)  # ... and kept, hidden from default reads


def test_cadence_and_idempotence(tmp_path: Path, embedder: Any) -> None:
    store = EdgeStore(tmp_path / "store")
    ingest(Processor(store, embedder), events("u1"))
    state = runner.SynthesisState.load(runner.state_path(tmp_path / "store"))
    runner.enable(state, None, T0)
    first = run(store, embedder, state)
    ids = [p.memory_id for p in patterns(store)]
    assert first.ran and ids and sorted(first.pattern_ids) == ids

    soon = run(store, embedder, state, now="2025-04-03T00:00:00Z")
    assert not soon.ran and soon.reason == "not_due" and not soon.events

    again = run(store, embedder, state, now="2025-04-03T00:00:00Z", force=True)
    assert again.ran and sorted(again.pattern_ids) == ids
    assert again.patterns_written == 0 and again.patterns_updated == 0 and not again.events
    assert [p.memory_id for p in patterns(store)] == ids
    store.close()

    reopened = EdgeStore(tmp_path / "store")
    state2 = runner.SynthesisState.load(runner.state_path(tmp_path / "store"))
    assert state2.users["u1"]["last_run"] == "2025-04-03T00:00:00Z"
    assert state2.users["u1"]["evidence_used"]
    assert not run(reopened, embedder, state2, now="2025-04-05T00:00:00Z").ran  # cadence survives a restart
    week = run(reopened, embedder, state2, now="2025-04-10T00:00:00Z")
    assert week.ran and sorted(week.pattern_ids) == ids and not week.events
    # Replaying the same pattern events through the ingest path changes nothing either.
    ingest(Processor(reopened, embedder), first.events)
    assert [p.memory_id for p in patterns(reopened)] == ids
    reopened.close()


def test_run_due_all_users(edge_store: Any, embedder: Any) -> None:
    ingest(Processor(edge_store, embedder), events("u1") + events("u3", texts=FILLER[:5]))
    state = runner.SynthesisState()
    runner.enable(state, None, T0)
    records = {r.user_id: r for r in runner.run_due(edge_store, embedder, NOW, state)}
    assert records["u1"].ran and records["u1"].events
    assert records["u3"].reason == "too_few_memories"
    assert all(e["user_id"] == "u1" for e in records["u1"].events)


def test_replay_with_synthesis(tmp_path: Path, embedder: Any) -> None:
    from dreamstream.streams.core.replay import replay_with_synthesis

    path = tmp_path / "events.jsonl"
    path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events("u1") + events("u2", texts=FILLER[:8])))
    store = EdgeStore(tmp_path / "store")
    state = runner.SynthesisState.load(runner.state_path(tmp_path / "store"))
    summary = replay_with_synthesis(path, store, state, embed=embedder, batch_size=8)
    assert summary.lines == len(FILLER) + len(FITNESS) + 8 and summary.dead == 0
    assert summary.runs >= 1 and summary.patterns_written >= 1
    assert summary.patterns_final == len(patterns(store)) >= 1 and not patterns(store, "u2")
    assert "patterns written" in summary.describe()
    store.close()


def test_dream_replay_synthesis_flag(tmp_path: Path) -> None:
    """`dream replay FILE --store DIR --synthesis` as a user runs it; a bad line is counted, not fatal."""
    import subprocess
    import sys

    path = tmp_path / "events.jsonl"
    path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events("u1")) + b"{not json\n")
    dream = str(Path(sys.executable).with_name("dream"))
    out = subprocess.run([dream, "replay", str(path), "--store", str(tmp_path / "store"), "--synthesis"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "1 bad lines" in out.stdout and "synthesis: " in out.stdout
    store = EdgeStore(tmp_path / "store")
    try:
        assert patterns(store) and all(set(p.sources) <= {e["memory_id"] for e in events("u1")}
                                       for p in patterns(store))
    finally:
        store.close()


def test_a_deleted_source_takes_its_words_out_of_patterns(edge_store: Any, embedder: Any, tmp_path: Path) -> None:
    """A hard delete removes the patterns drawn from the memory (their text may quote it); a pattern written
    while a source was being deleted is dropped before it is sent, and ingest refuses one that cites it."""
    from dreamstream.streams.core import memories

    ingest(Processor(edge_store, embedder), events("u1"))
    state = runner.SynthesisState.load(tmp_path / "state.json")
    runner.enable(state, None, T0)
    run(edge_store, embedder, state)
    [pattern] = patterns(edge_store)
    source = pattern.sources[0]
    said = edge_store.retrieve([source])[source].text
    deleted = memories.hard_delete_memory(edge_store, source, "u1") or []
    assert {e["memory_id"] for e in deleted} >= {source, pattern.memory_id}
    assert not edge_store.retrieve([pattern.memory_id])
    again = run(edge_store, embedder, state, now="2025-04-09T00:00:00Z", force=True)
    assert again.events and all(source not in p.sources and said not in p.text for p in patterns(edge_store))

    record = runner.run_for_user(edge_store, embedder, "u1", "2025-04-20T00:00:00Z", state, force=True)
    [rewritten] = patterns(edge_store)
    event = runner.pattern_event(runner.syn.Theme(  # the same evidence, a new wording: a new event
        user_id="u1", memory_ids=tuple(rewritten.sources), label="running", text="User keeps at it.",
        pattern_id=rewritten.memory_id), "2025-04-20T00:00:00Z")
    record.events = [event]
    memories.delete_memory(edge_store, rewritten.sources[0], "u1")  # a person's delete while it was decided
    assert runner.drop_unsourced(edge_store, record) == 1 and not record.events
    result = Processor(edge_store, embedder).process([Incoming(raw=orjson.dumps(event))])
    assert [d["reason"] for d in result.dead_letters] == ["bad_field"]
    assert edge_store.retrieve([rewritten.memory_id])[rewritten.memory_id].text == rewritten.text


def test_a_soft_deleted_source_retires_the_patterns_quoting_it_until_undone(
        edge_store: Any, embedder: Any, tmp_path: Path) -> None:
    """Soft delete hides a memory from every read: a pattern quoting it stayed in default reads, run after
    run, while enough of its other sources stood. Now it is retired with the delete and back with its undo."""
    from dreamstream.streams.core import memories
    from dreamstream.streams.core.undo import undo_decision

    ingest(Processor(edge_store, embedder), events("u1"))
    state = runner.SynthesisState.load(tmp_path / "state.json")
    runner.enable(state, None, T0)
    run(edge_store, embedder, state)
    [pattern] = patterns(edge_store)
    source = next(s for s in pattern.sources if edge_store.retrieve([s])[s].text.split()[0] in pattern.text)
    events_out = memories.delete_memory(edge_store, source, "u1") or []
    assert [(e["memory_id"], e["to_status"]) for e in events_out] == [(source, "deleted"),
                                                                      (pattern.memory_id, "expired")]
    assert not patterns(edge_store)
    assert pattern.memory_id not in {r["memory_id"] for r in reads.get(edge_store, "u1")}
    undo_decision(edge_store, events_out[0]["decision_id"])
    assert [p.memory_id for p in patterns(edge_store)] == [pattern.memory_id]
    assert edge_store.retrieve([source])[source].status == "active"


def test_a_run_retires_a_pattern_quoting_replaced_facts(edge_store: Any, embedder: Any, tmp_path: Path) -> None:
    """A pattern that a run does not reproduce stayed while a theme's worth of its sources stood, stating the
    replaced ones as current."""
    ingest(Processor(edge_store, embedder), events("u1"))
    state = runner.SynthesisState.load(tmp_path / "state.json")
    runner.enable(state, None, T0)
    run(edge_store, embedder, state)
    [pattern] = patterns(edge_store)
    replaced = pattern.sources[:3]
    edge_store.update_many(replaced, {"status": "superseded"})  # the user's updates replaced them
    again = run(edge_store, embedder, state, now="2025-04-10T00:00:00Z", force=True)
    assert pattern.memory_id in again.retired or pattern.memory_id in again.pattern_ids
    assert not any(set(replaced) & set(p.sources) for p in patterns(edge_store))


def test_a_pattern_the_user_deleted_never_comes_back(edge_store: Any, embedder: Any, tmp_path: Path) -> None:
    """It came back as `updated` on the next run (or under a new id, its evidence unchanged)."""
    from dreamstream.streams.core import memories

    ingest(Processor(edge_store, embedder), events("u1"))
    state = runner.SynthesisState.load(tmp_path / "state.json")
    runner.enable(state, None, T0)
    run(edge_store, embedder, state)
    [pattern] = patterns(edge_store)
    assert memories.delete_memory(edge_store, pattern.memory_id, "u1")
    later = run(edge_store, embedder, state, now="2025-04-20T00:00:00Z", force=True)
    assert later.ran and not later.events and not patterns(edge_store)
    assert edge_store.retrieve([pattern.memory_id])[pattern.memory_id].status == "deleted"


def test_disabling_one_project_leaves_its_patterns_and_a_pattern_carries_its_sources_project(
        edge_store: Any, embedder: Any, tmp_path: Path) -> None:
    fitness = [{**e, "project_id": "fitness" if e["text"] in FITNESS else "notes"} for e in events("u1")]
    notes = [{**e, "event_id": f"{e['event_id']}-n", "memory_id": f"{e['memory_id']}-n", "project_id": "notes",
              "created_at": e["created_at"].replace("2025-03", "2025-02")}
             for e in events("u1", texts=list(FILLER))]
    ingest(Processor(edge_store, embedder), fitness + notes)
    state = runner.SynthesisState.load(tmp_path / "state.json")
    runner.enable(state, "fitness", "2025-01-01T00:00:00Z")
    runner.enable(state, "notes", "2025-01-01T00:00:00Z")
    run(edge_store, embedder, state)
    mine = [p for p in patterns(edge_store) if set(p.sources) <= {e["memory_id"] for e in fitness
                                                                   if e["project_id"] == "fitness"}]
    assert mine and all(p.project_id == "fitness" for p in mine)  # not the user's biggest project
    runner.disable(state, "fitness")
    later = run(edge_store, embedder, state, now="2025-04-10T00:00:00Z", force=True)
    assert not set(later.retired) & {p.memory_id for p in mine}
    assert {p.memory_id for p in mine} <= {p.memory_id for p in patterns(edge_store)}


def test_a_pattern_never_mixes_two_enabled_projects(edge_store: Any, embedder: Any, tmp_path: Path) -> None:
    """An audit: with two projects enabled, one pattern quoted both projects' memories under one project's
    label (and enabling one project reworded the other's patterns). Each project's evidence is read on its own."""
    mixed = [{**e, "project_id": "p-b" if e["text"] in FITNESS[:2] else "p-a"} for e in events("u1")]
    ingest(Processor(edge_store, embedder), mixed)
    project = {e["memory_id"]: e["project_id"] for e in mixed}
    state = runner.SynthesisState.load(tmp_path / "state.json")
    runner.enable(state, "p-a", "2025-01-01T00:00:00Z")
    run(edge_store, embedder, state)
    alone = {p.memory_id: (p.text, sorted(p.sources)) for p in patterns(edge_store)}
    assert alone  # p-a's own fitness memories still make a theme
    runner.enable(state, "p-b", "2025-01-01T00:00:00Z")
    run(edge_store, embedder, state, now="2025-04-10T00:00:00Z", force=True)
    both = patterns(edge_store)
    assert both and all({project[s] for s in p.sources} == {p.project_id} for p in both)
    assert {p.memory_id: (p.text, sorted(p.sources)) for p in both if p.project_id == "p-a"} == alone


def test_a_pattern_comes_back_with_the_undo_of_its_last_deleted_source_not_before(
        edge_store: Any, embedder: Any, tmp_path: Path) -> None:
    """Two of a pattern's sources deleted one after the other. Undoing the first brought the pattern back
    quoting the second, still deleted memory's words; and the second delete did not list the pattern (the
    first had retired it already), so its undo never brought it back."""
    from dreamstream.streams.core import memories
    from dreamstream.streams.core.undo import undo_decision

    ingest(Processor(edge_store, embedder), events("u1"))
    state = runner.SynthesisState.load(tmp_path / "state.json")
    runner.enable(state, None, T0)
    run(edge_store, embedder, state)
    [pattern] = patterns(edge_store)
    first, second = pattern.sources[:2]
    one = memories.delete_memory(edge_store, first, "u1") or []
    two = memories.delete_memory(edge_store, second, "u1") or []
    undo_decision(edge_store, one[0]["decision_id"])
    assert edge_store.retrieve([first])[first].status == "active"
    assert edge_store.retrieve([pattern.memory_id])[pattern.memory_id].status == "expired"
    assert pattern.memory_id not in {r["memory_id"] for r in reads.get(edge_store, "u1")}
    undo_decision(edge_store, two[0]["decision_id"])
    assert edge_store.retrieve([pattern.memory_id])[pattern.memory_id].status == "active"


def _update(source: str, text: str, at: str = "2025-04-05T10:00:00Z") -> dict[str, Any]:
    """The user's own update of one memory (`replaces`): it supersedes it without the judge."""
    return {"type": "memory.added", "event_id": f"e-upd-{source}", "memory_id": f"upd-{source}", "user_id": "u1",
            "text": text, "created_at": at, "replaces": source,
            "metadata": {"type": "user_fact", "confidence": 0.9, "pinned": False}}


def _with_one_pattern(store: Any, embedder: Any, tmp_path: Path) -> tuple[Processor, Any]:
    """u1's events ingested and synthesised once: the processor and the one pattern it wrote."""
    proc = Processor(store, embedder)
    ingest(proc, events("u1"))
    state = runner.SynthesisState.load(tmp_path / "state.json")
    runner.enable(state, None, T0)
    run(store, embedder, state)
    [pattern] = patterns(store)
    return proc, pattern


def test_a_superseded_source_retires_the_patterns_quoting_it_until_undone(
        edge_store: Any, embedder: Any, tmp_path: Path) -> None:
    """An update of a pattern's source left the pattern active, stating the old value as current until the next
    synthesis run (weekly, or never with synthesis off). Now the supersede retires it and its undo brings it back."""
    from dreamstream.streams.core.undo import undo_decision

    proc, pattern = _with_one_pattern(edge_store, embedder, tmp_path)
    source = pattern.sources[0]
    result = proc.process([Incoming(raw=orjson.dumps(_update(source, "Stopped running: a knee injury.")))])
    moved = [(e["memory_id"], e["from_status"], e["to_status"]) for e in result.status_events]
    assert moved == [(source, "active", "superseded"), (pattern.memory_id, "active", "expired")]
    assert not patterns(edge_store)
    assert pattern.memory_id not in {r["memory_id"] for r in reads.get(edge_store, "u1")}
    undone = undo_decision(edge_store, result.status_events[0]["decision_id"])
    assert {(e["memory_id"], e["to_status"]) for e in undone.events} == {
        (source, "active"), (pattern.memory_id, "active"), (f"upd-{source}", "deleted")}  # the edit withdrawn
    assert [p.memory_id for p in patterns(edge_store)] == [pattern.memory_id]


def test_a_deleted_sources_undo_leaves_a_pattern_retired_when_another_source_was_replaced_since(
        edge_store: Any, embedder: Any, tmp_path: Path) -> None:
    """Delete one source (the pattern retires), update another, undo the delete: the pattern came back active
    quoting the replaced fact as current."""
    from dreamstream.streams.core import memories
    from dreamstream.streams.core.undo import undo_decision

    proc, pattern = _with_one_pattern(edge_store, embedder, tmp_path)
    first, second = pattern.sources[:2]
    deleted = memories.delete_memory(edge_store, first, "u1") or []
    ingest(proc, [_update(second, "Stopped running: a knee injury.")])
    assert edge_store.retrieve([second])[second].status == "superseded"
    undo_decision(edge_store, deleted[0]["decision_id"])
    assert edge_store.retrieve([first])[first].status == "active"
    assert edge_store.retrieve([pattern.memory_id])[pattern.memory_id].status == "expired"
