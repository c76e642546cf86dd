"""The consolidation pass (report, answers, apply, undo, --auto, retention) and light/full consolidation.

The report's text is asserted whole: people and scripts read it. The pass runs on the real model and
the embedded store; the interactive answers go through a real pseudo-terminal.
"""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dreamstream.agents import consolidation as cons
from dreamstream.schemas import contracts
from dreamstream.schemas.memory import Memory
from dreamstream.streams.core import consolidation as runner
from dreamstream.streams.core import reads
from dreamstream.streams.core.ingest import Incoming, Processor

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
DREAM = str(Path(sys.executable).with_name("dream"))

# id, text, created_at, metadata
SCOPE = [
    ("pg-1", "Use PostgreSQL for auth.", "2026-01-05T10:00:00Z", {"type": "project_decision", "confidence": 0.8}),
    ("pg-2", "Auth DB is PostgreSQL 15 on port 5432.", "2026-02-05T10:00:00Z",
     {"type": "project_decision", "confidence": 0.9}),
    ("fri-1", "The team deploys on Fridays.", "2026-01-10T10:00:00Z", {"type": "workflow", "confidence": 0.6}),
    ("fri-2", "The team no longer deploys on Fridays.", "2026-03-10T10:00:00Z",
     {"type": "workflow", "confidence": 0.9}),
    ("sess-1", "Was halfway through the login refactor.", "2026-01-01T10:00:00Z", {"type": "session_state"}),
    ("vague-1", "User likes things tidy.", "2026-11-01T10:00:00Z", {"type": "preference", "confidence": 0.2}),
    ("path-1", "Maybe look at src/auth/tokens.py later.", "2026-11-01T10:00:00Z",
     {"type": "preference", "confidence": 0.2}),
    ("pin-1", "Never touch the billing table.", "2025-01-01T10:00:00Z", {"type": "session_state", "pinned": True}),
]
EXPECTED_REPORT = """## Dream — Memory Consolidation Report

### Merge proposals (1 pairs)
MERGE [mem:pg-1] + [mem:pg-2] → NEW
  - Original 1: "Use PostgreSQL for auth."
  - Original 2: "Auth DB is PostgreSQL 15 on port 5432."
  - Merged:     "Auth DB is PostgreSQL 15 on port 5432. Use PostgreSQL for auth."

### Contradictions (1 pairs)
CONFLICT [mem:fri-2] vs [mem:fri-1]
  - A: "The team no longer deploys on Fridays." (2026-03-10, confidence: 0.9)
  - B: "The team deploys on Fridays." (2026-01-10, confidence: 0.6)
  Why: the judge reads A as replacing B (explicit_end:no longer; similarity 0.84)
  Which is current? [A/B/skip]

### Prune candidates (2 memories)
PRUNE [mem:sess-1] — session_state, 334d old (policy: 90d)
PRUNE [mem:vague-1] — preference, 30d old (policy: confidence 0.2 < 0.3)

---
Proposed: 1 merges, 2 prunes, 1 conflicts
Apply? [Y/n]"""


def memories(embedder: Any, rows: list[tuple[str, str, str, dict[str, Any]]] = SCOPE, user: str = "u1",
             app: str | None = "proj") -> list[Memory]:
    vectors, feats = embedder.encode_with_features([r[1] for r in rows])  # as ingest stores them
    return [Memory(memory_id=i, user_id=user, text=t, created_at=c, updated_at=c, app_id=app, metadata=dict(md),
                   vector=v, features=f.to_payload())
            for (i, t, c, md), v, f in zip(rows, vectors, feats, strict=True)]


def plan_of(ms: list[Memory], retention: dict[str, int | None] | None = None) -> cons.Plan:
    return cons.analyse(ms, project="proj", user_id="u1", app_id="proj", now=NOW,
                        retention=cons.DEFAULT_RETENTION if retention is None else retention)


@pytest.fixture
def proc(edge_store: Any, embedder: Any) -> Processor:
    edge_store.upsert(memories(embedder))
    return Processor(edge_store, embedder)


# --- the report -----------------------------------------------------------------------------------


def test_report_with_all_three_sections(embedder: Any) -> None:
    assert cons.render_report(plan_of(memories(embedder))) == EXPECTED_REPORT


def test_report_with_only_merges_and_when_empty(embedder: Any) -> None:
    only_merge = [r for r in SCOPE if r[0].startswith("pg-")]
    report = cons.render_report(plan_of(memories(embedder, only_merge)))
    head, _, _ = EXPECTED_REPORT.partition("### Contradictions")
    assert report == head + "---\nProposed: 1 merges, 0 prunes, 0 conflicts\nApply? [Y/n]"
    assert "### Prune" not in report
    assert cons.render_report(plan_of(memories(embedder, [SCOPE[0]]))) == cons.NOTHING
    assert cons.NOTHING == "Dream complete. No duplicate, contradictory, or stale memories found."
    assert cons.no_memories("proj") == "No memories found for project proj. Nothing to consolidate."


def test_pinned_memories_are_never_proposed(embedder: Any) -> None:
    plan = plan_of(memories(embedder), retention={"session_state": 0})
    touched = {m.a.memory_id for m in plan.merges} | {m.b.memory_id for m in plan.merges}
    touched |= {c.a.memory_id for c in plan.conflicts} | {c.b.memory_id for c in plan.conflicts}
    touched |= {p.memory.memory_id for p in plan.prunes}
    assert "pin-1" not in touched and "sess-1" in touched


def test_a_fact_said_again_recently_is_not_pruned_as_old(edge_store: Any, embedder: Any) -> None:
    """An audit: "Fay's dog is called Rex." said in January and again in November (merged into the January
    one) was pruned as 334 days old, and the November saying stayed hidden behind the expired canonical: a
    month-old fact gone from every read. A fact is as old as its last saying."""
    rows = [("dog-1", "Fay's dog is called Rex.", "2026-01-05T10:00:00Z", {"type": "session_state"}),
            ("dog-2", "Fay's dog is called Rex.", "2026-11-05T10:00:00Z", {"type": "session_state"}),
            ("old-1", "Was halfway through the login refactor.", "2026-01-01T10:00:00Z", {"type": "session_state"})]
    canonical, said_again, old = memories(embedder, rows)
    canonical.merged_from = ["dog-2"]
    said_again.status, said_again.merged_into = "merged", "dog-1"
    edge_store.upsert([canonical, said_again, old])
    plan, _ = runner.make_plan(edge_store, "u1", "proj", cons.DEFAULT_RETENTION, now=NOW)
    assert [(p.memory.memory_id, p.age_days) for p in plan.prunes] == [("old-1", 334)]
    later = datetime(2027, 3, 1, tzinfo=UTC)  # past retention from its last saying too: pruned, at that age
    plan, _ = runner.make_plan(edge_store, "u1", "proj", cons.DEFAULT_RETENTION, now=later)
    assert sorted((p.memory.memory_id, p.age_days) for p in plan.prunes) == [("dog-1", 115), ("old-1", 423)]


def test_project_specific_low_confidence_memory_is_kept(embedder: Any) -> None:
    pruned = {p.memory.memory_id for p in plan_of(memories(embedder)).prunes}
    assert "vague-1" in pruned and "path-1" not in pruned
    assert cons.is_specific("Run make bench before tagging v2.3") and not cons.is_specific("Likes tea.")


def test_retention_file_missing_broken_or_valid(tmp_path: Path) -> None:
    missing, warning = runner.load_retention(tmp_path / "nope.json")
    assert missing == cons.DEFAULT_RETENTION and warning and "not found" in warning
    broken = tmp_path / "broken.json"
    broken.write_text("{session_state: 30")
    policies, warning = runner.load_retention(broken)
    assert policies == {"session_state": 90, "compact_summary": 90} and warning and "defaults" in warning
    bad_value = tmp_path / "bad.json"
    bad_value.write_text('{"session_state": "soon"}')
    assert runner.load_retention(bad_value)[0] == cons.DEFAULT_RETENTION
    good = tmp_path / "good.json"
    good.write_text('{"session_state": 7, "compact_summary": null, "scratch": 1}')
    assert runner.load_retention(good) == ({"session_state": 7, "compact_summary": None, "scratch": 1}, None)


# --- applying, undo, --auto -----------------------------------------------------------------------


def test_apply_merges_resolves_prunes_and_undo_reverts_the_pass(proc: Processor) -> None:
    store = proc.store
    plan, found = runner.make_plan(store, "u1", "proj", cons.DEFAULT_RETENTION, now=NOW)
    assert found == len(SCOPE) and plan.plan_id == runner.make_plan(store, "u1", "proj", cons.DEFAULT_RETENTION,
                                                                    now=NOW)[0].plan_id
    outcome, events = runner.apply_plan(store, proc.embed, plan, {0: "A"})
    assert (outcome.merged_pairs, outcome.new_memories, outcome.resolved, outcome.skipped, outcome.pruned) == \
        (1, 1, 1, 0, 2)
    got = store.retrieve([r[0] for r in SCOPE])
    [new_id] = {got["pg-1"].merged_into, got["pg-2"].merged_into}
    canonical = store.retrieve([new_id])[new_id]
    assert canonical.status == "active" and sorted(canonical.merged_from) == ["pg-1", "pg-2"]
    assert canonical.metadata == {"type": "project_decision", "confidence": 0.9, "source": "dream-consolidate"}
    assert got["fri-1"].status == "superseded" and got["fri-1"].superseded_by == "fri-2"
    assert got["fri-1"].text == "The team deploys on Fridays."  # the loser's text is kept
    assert got["sess-1"].status == "expired" and got["vague-1"].status == "expired"
    assert got["pin-1"].status == "active" and got["pin-1"].decision_ids == []
    default_ids = {r["memory_id"] for r in reads.get(store, "u1")}
    assert {"pg-1", "sess-1"}.isdisjoint(default_ids) and {new_id, "fri-1"} <= default_ids
    assert {"pg-1", "sess-1"} <= {r["memory_id"] for r in reads.get(store, "u1", "include_merged")}
    assert len(events) == 6 and {e["decision_id"] for e in events} == {outcome.decision_id}
    for e in events:
        contracts.validate("memory.status", e)
    # The pass is one decision: undo brings every memory back and retires what it wrote.
    assert outcome.decision_id is not None
    undone = proc.undo(outcome.decision_id)
    back = store.retrieve(["pg-1", "pg-2", "fri-1", "sess-1", "vague-1", new_id])
    assert all(back[m].status == "active" for m in ("pg-1", "pg-2", "fri-1", "sess-1", "vague-1"))
    assert back["pg-1"].merged_into is None and back["fri-1"].superseded_by is None
    assert back[new_id].status == "expired" and len(undone) == 6
    assert sorted(back[new_id].merged_from) == ["pg-1", "pg-2"]  # expired, it keeps what it was made of
    for e in undone:
        contracts.validate("memory.status", e)
    with pytest.raises(ValueError):
        proc.undo(outcome.decision_id)


def test_hard_delete_really_deletes_the_pruned(proc: Processor) -> None:
    plan, _ = runner.make_plan(proc.store, "u1", "proj", cons.DEFAULT_RETENTION, now=NOW)
    outcome, events = runner.apply_plan(proc.store, proc.embed, plan, hard_delete=True)
    assert outcome.pruned == 2 and "deleted" in cons.render_summary(outcome)
    assert proc.store.retrieve(["sess-1", "vague-1"]) == {}
    assert sorted(e["memory_id"] for e in events if e["to_status"] == "deleted") == ["sess-1", "vague-1"]


def test_summary_and_auto_line_texts() -> None:
    o = cons.Outcome(merged_pairs=2, new_memories=2, pruned=3, resolved=1, skipped=4)
    assert cons.render_summary(o) == (
        "Dream complete.\n  Merged:  2 pairs → 2 new memories\n  Pruned:  3 memories expired\n"
        "  Flagged: 1 contradictions resolved, 4 skipped")
    assert cons.auto_line("proj", o) == ("[dream --auto] project=proj  merged=2  pruned=3  conflicts_skipped=4  "
                                         "merges_held=0")
    assert [cons.parse_choice(a) for a in ("a", "B", "", "skip", "x")] == ["A", "B", None, None, None]
    assert [cons.parse_confirm(a) for a in ("", "y", "Y", "n", "No")] == [True, True, True, False, False]
    # "skip", "cancel", "nope" were read as yes, and applied the pass: now asked again
    assert [cons.parse_confirm(a) for a in ("skip", "cancel", "nope")] == [None, None, None]


def _dream(*args: str, store: Path, timeout: float = 180, **env_extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "DREAM_RETENTION_FILE": "", **env_extra}
    return subprocess.run([DREAM, *args, "--store", str(store)], env=env, capture_output=True, text=True,
                          timeout=timeout)


def _filled_store(tmp_path: Path, embedder: Any) -> Path:
    from dreamstream.streams.store import EdgeStore

    path = tmp_path / "store"
    s = EdgeStore(path)
    s.upsert(memories(embedder))
    s.close()
    return path


def _pty_run(args: list[str], answers: list[str], timeout: float = 180) -> str:
    """Runs the command on a pseudo-terminal, typing each answer when its prompt shows; returns the screen. An
    answer of "\x03" is a Ctrl-C (SIGINT to the command), followed by an Enter."""
    main, sub = pty.openpty()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "DREAM_RETENTION_FILE": ""}
    p = subprocess.Popen(args, stdin=sub, stdout=sub, stderr=sub, env=env, close_fds=True)
    os.close(sub)
    screen = b""
    prompts = [b"[A/B/skip]", b"Apply? [Y/n]"]
    pending = list(answers)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(main, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                screen += chunk
                while pending and screen.count(prompts[0]) + screen.count(prompts[1]) > len(answers) - len(pending):
                    answer = pending.pop(0)
                    if answer == "\x03":
                        p.send_signal(signal.SIGINT)
                        time.sleep(0.5)
                        answer = ""
                    os.write(main, answer.encode() + b"\n")
            elif p.poll() is not None:
                break
    finally:
        p.wait(timeout=30)
        os.close(main)
    return screen.decode(errors="replace").replace("\r\n", "\n")


def test_a_held_merge_is_asked_on_its_own_and_enter_leaves_it(tmp_path: Path) -> None:
    """An audit: Enter at the final "Apply? [Y/n]" merged the pairs the report marks Held ("prefers tea" and
    "prefers coffee") into one current memory saying both. A held merge is now asked on its own, Enter leaves
    it, and the final yes applies only what nobody had to decide."""
    rows = [("c-1", "Carla prefers tea.", "2026-01-03"), ("c-2", "Carla prefers coffee.", "2026-01-04"),
            ("c-3", "Carla eats meat.", "2026-01-06"), ("c-4", "Carla does not eat meat.", "2026-02-06")]
    events = tmp_path / "carla.jsonl"
    events.write_text("".join(json.dumps({"type": "memory.added", "event_id": f"e-{i}", "memory_id": i,
                                          "user_id": "carla", "text": t, "created_at": f"{d}T10:00:00Z"}) + "\n"
                              for i, t, d in rows))
    store = tmp_path / "store"
    assert _dream("replay", str(events), store=store).returncode == 0
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "DREAM_RETENTION_FILE": "", "KAFKA_BOOTSTRAP": "127.0.0.1:1"}

    def run(answers: str) -> str:
        done = subprocess.run([DREAM, "consolidate", "--user", "carla", "--store", str(store)], input=answers,
                              env=env, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stderr
        return done.stdout

    # An unattended pass with only held merges stores a reminder; run again it changes nothing, and says so
    # (it printed an undo line for a pass id that names no decision).
    for auto in range(2):
        done = subprocess.run([DREAM, "consolidate", "--user", "carla", "--auto", "--store", str(store)], env=env,
                              capture_output=True, text=True, timeout=180)
        assert done.returncode == 0 and ("changed nothing: there is nothing to undo" in done.stdout) == bool(auto)
    first = run("\n\n\n")  # Enter at each held merge, then at Apply
    assert first.count("Merge these? [y/N]") == 2
    texts = [r["text"] for r in map(json.loads, _dream("get", "--user", "carla", "--json", store=store)
                                    .stdout.splitlines())]
    assert sorted(texts) == sorted(t for _, t, _ in rows)  # nothing merged, nothing lost
    run("n\ny\n\n")  # a person who says yes to one gets that one merged: their call
    texts = [r["text"] for r in map(json.loads, _dream("get", "--user", "carla", "--json", "--latest-only",
                                                       store=store).stdout.splitlines())]
    assert len(texts) == 3 and sum("meat" in t for t in texts) == 1


def test_interactive_answers_through_a_terminal(tmp_path: Path, embedder: Any) -> None:
    from dreamstream.streams.store import EdgeStore

    store_dir = _filled_store(tmp_path, embedder)
    base = [DREAM, "consolidate", "--user", "u1", "--app", "proj", "--store", str(store_dir)]
    cancelled = _pty_run(base, ["maybe", "b", "n"])  # an answer that is none of A, B, skip is asked again
    assert "Which is current? [A/B/skip]" in cancelled and cancelled.rstrip().endswith("Cancelled. No changes made.")
    assert cancelled.count("Please answer A, B or skip") == 1
    s = EdgeStore(store_dir)
    assert all(m.status == "active" for m in s.scroll({"user_id": "u1"}))
    s.close()
    # An audit: a Ctrl-C at Apply was ignored (asyncio.run's handler waited for the read) and the next Enter
    # applied the pass before "Aborted." was printed. It cancels at once; the Enter after it applies nothing.
    interrupted = _pty_run(base, ["B", "\x03"])
    assert interrupted.rstrip().endswith("Cancelled. No changes made.") and "Dream complete" not in interrupted
    s = EdgeStore(store_dir)
    assert all(m.status == "active" for m in s.scroll({"user_id": "u1"}))
    s.close()
    screen = _pty_run(base, ["B", ""])  # B is current; empty = yes
    assert "Dream complete.\n  Merged:  1 pairs → 1 new memories\n  Pruned:  2 memories expired\n" \
           "  Flagged: 1 contradictions resolved, 0 skipped" in screen
    s = EdgeStore(store_dir)
    try:
        got = s.retrieve(["fri-1", "fri-2"])
        assert got["fri-2"].status == "superseded" and got["fri-2"].superseded_by == "fri-1"
    finally:
        s.close()


# --- control topic plans ---------------------------------------------------------------------------


def test_control_dry_run_plan_then_approve(proc: Processor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DREAM_DATA_DIR", str(tmp_path / "data"))
    details, events = runner.control(proc, "consolidate.run", {"user": "u1", "app": "proj"}, {"session_state": 90})
    assert details["mode"] == "dry_run" and not events and details["report"].startswith("## Dream")
    assert all(m.status == "active" for m in proc.store.scroll({"user_id": "u1"}))
    approved, events = runner.control(proc, "consolidate.approve", {"plan_id": details["plan_id"]}, None)
    assert approved["approved"] and approved["resolved"] == 1 and events  # the conflict at its likely winner
    assert proc.store.retrieve(["fri-1"])["fri-1"].superseded_by == "fri-2"
    with pytest.raises(KeyError):
        runner.control(proc, "consolidate.approve", {"plan_id": details["plan_id"]}, None)


def test_a_pass_retires_the_patterns_quoting_what_it_replaces_or_prunes_and_its_undo_brings_them_back(
        proc: Processor, embedder: Any) -> None:
    """A pass superseded "deploys on Fridays" and pruned a stale note, and the pattern quoting them stayed current,
    stating them; one quoting only merged facts still holds (the merged memory says them)."""
    store = proc.store
    [deploys, tidy] = memories(embedder, [
        ("pat-fri", "The team keeps a weekly release rhythm.", "2026-03-11T10:00:00Z", {"type": "pattern"}),
        ("pat-pg", "Auth runs on PostgreSQL.", "2026-03-11T10:00:00Z", {"type": "pattern"})])
    deploys.kind, deploys.sources = "pattern", ["fri-1", "sess-1", "pin-1"]
    tidy.kind, tidy.sources = "pattern", ["pg-1", "pg-2", "pin-1"]
    store.upsert([deploys, tidy])
    plan, _ = runner.make_plan(store, "u1", "proj", cons.DEFAULT_RETENTION, now=NOW)
    outcome, events = runner.apply_plan(store, proc.embed, plan, {0: "A"})
    retired = [e for e in events if e["memory_id"] == "pat-fri"]
    assert [(e["to_status"], e["evidence"]["source_retired"]) for e in retired] == [("expired", "fri-1")]
    got = store.retrieve(["pat-fri", "pat-pg"])
    assert (got["pat-fri"].status, got["pat-pg"].status) == ("expired", "active")
    assert outcome.decision_id is not None
    proc.undo(outcome.decision_id)
    assert store.retrieve(["pat-fri"])["pat-fri"].status == "active"


def test_approving_a_plan_whose_every_item_changed_since_is_an_error_not_approved(
        proc: Processor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reprocess (or another pass) between the dry run and the approval voided every item, and the approval
    answered ok, "approved", with nothing applied. Now it says so; a partly stale plan counts what it left."""
    monkeypatch.setenv("DREAM_DATA_DIR", str(tmp_path / "data"))
    details, _ = runner.control(proc, "consolidate.run", {"user": "u1", "app": "proj"}, {"session_state": 90})
    involved = [m.memory_id for m in proc.store.scroll({"user_id": "u1"}) if m.memory_id != "pin-1"]
    proc.store.update_many(involved, {"status": "expired"})  # as an undone pass or a reprocess leaves them
    with pytest.raises(ValueError, match="changed since it was made; nothing applied"):
        runner.control(proc, "consolidate.approve", {"plan_id": details["plan_id"]}, None)
    with pytest.raises(KeyError):  # it can never apply: gone
        runner.control(proc, "consolidate.approve", {"plan_id": details["plan_id"]}, None)
    proc.store.update_many(involved, {"status": "active"})
    again, _ = runner.control(proc, "consolidate.run", {"user": "u1", "app": "proj"}, {"session_state": 90})
    proc.store.update_many(["sess-1"], {"status": "expired"})
    done, _ = runner.control(proc, "consolidate.approve", {"plan_id": again["plan_id"]}, None)
    assert done["approved"] and done["stale"] == 1 and done["pruned"] == 1


def test_an_approval_naming_another_user_applies_nothing(proc: Processor, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """An operator's approval (or rejection) that names a user other than the plan's is refused and the plan
    kept: before, the plan's own pass was applied whatever user the command named."""
    monkeypatch.setenv("DREAM_DATA_DIR", str(tmp_path / "data"))
    details, _ = runner.control(proc, "consolidate.run", {"user": "u1", "app": "proj"}, {"session_state": 90})
    for command in ("consolidate.approve", "consolidate.reject"):
        with pytest.raises(KeyError, match="is u1's, not u2's"):
            runner.control(proc, command, {"plan_id": details["plan_id"], "user": "u2"}, None)
    assert all(m.status == "active" for m in proc.store.scroll({"user_id": "u1"}))
    approved, _ = runner.control(proc, "consolidate.approve", {"plan_id": details["plan_id"], "user": "u1"}, None)
    assert approved["approved"] and approved["resolved"] == 1


def test_a_scheduled_auto_pass_over_an_unchanged_store_changes_nothing(proc: Processor, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The first run merges, prunes and leaves one reminder of the skipped conflict; the runs after it
    (a schedule) find the same conflict and change nothing. Before, each added a reminder and later runs
    merged the copies: the store grew every week."""
    monkeypatch.setenv("DREAM_DATA_DIR", str(tmp_path / "data"))

    def run() -> list[dict[str, Any]]:
        return runner.control(proc, "consolidate.run", {"user": "u1", "app": "proj", "mode": "auto"}, None)[1]

    def rows() -> dict[str, tuple[str, int]]:
        return {m.memory_id: (m.status, len(m.decision_ids)) for m in proc.store.scroll({"user_id": "u1"})}

    def reminders() -> list[Any]:
        return [m for m in proc.store.scroll({"user_id": "u1", "status": "active"}) if m.metadata.get("reminder")]

    assert run()  # the first pass does something
    after_first = rows()
    [first] = reminders()
    for _ in range(3):
        assert run() == []
        assert rows() == after_first
    # A reminder that says another number (the conflicts changed since): replaced, not joined by a second.
    proc.store.update(first.memory_id, {"metadata": {**first.metadata, "conflicts": 2}})
    events = run()
    [now] = reminders()
    assert now.memory_id != first.memory_id and now.metadata["conflicts"] == 1
    assert proc.store.retrieve([first.memory_id])[first.memory_id].status == "expired"
    assert {(e["memory_id"], e["to_status"]) for e in events} == {(now.memory_id, "active"),
                                                                  (first.memory_id, "expired")}


def test_an_unattended_pass_leaves_the_pairs_ingest_held_for_a_person(proc: Processor, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """`--auto` (and a schedule) merged every merge proposal, the ones ingest had held for review among them:
    "Nia eats meat." and "Nia does not eat meat." became one current memory saying both. A pass nobody answers
    applies only merges the judge reads as one fact and ingest's gates let through; the rest wait, counted in the
    reminder, and a person still sees them."""
    from tests.helpers import line

    monkeypatch.setenv("DREAM_DATA_DIR", str(tmp_path / "data"))
    texts = ["Nia's favourite colour is blue.", "Nia's favourite colour is green.", "Nia eats meat.",
             "Nia does not eat meat.", "Nia has two kids.", "Nia has three kids."]
    raws = [line({"type": "memory.added", "event_id": f"e-n{i}", "memory_id": f"n-{i}", "user_id": "nia", "text": t,
                  "created_at": f"2026-0{1 + 2 * (i % 2)}-0{4 + i // 2}T10:00:00Z"}) for i, t in enumerate(texts)]
    assert not proc.process([Incoming(raw=r) for r in raws]).dead_letters
    plan, _ = runner.make_plan(proc.store, "nia", None, cons.DEFAULT_RETENTION)
    reply, _ = runner.control(proc, "consolidate.run", {"user": "nia", "mode": "auto"}, None)
    current = [m for m in proc.store.scroll({"user_id": "nia", "status": "active"})]
    assert {m.memory_id for m in current if not m.metadata.get("reminder")} == {f"n-{i}" for i in range(6)}
    assert plan.merges and all(m.held for m in plan.merges)  # a person still sees them
    assert reply["merged_pairs"] == 0 and reply["held"] == len(plan.merges)
    [reminder] = [m for m in current if m.metadata.get("reminder")]
    assert f"{len(plan.merges)} possible merge" in reminder.text


def test_an_approval_merges_a_held_pair_only_when_it_is_answered_apply(proc: Processor, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """An audit: `POST .../approve {}` (the client's default, rest=apply) merged the pairs the plan marked held
    ("Dee drives a blue car." and "... a green car." became one current memory saying both) and answered
    held 0. `rest` never merges a held pair: only an answer "apply" to its item does."""
    from tests.helpers import line

    monkeypatch.setenv("DREAM_DATA_DIR", str(tmp_path / "data"))
    texts = ["Nia's favourite colour is blue.", "Nia's favourite colour is green.", "Nia eats meat.",
             "Nia does not eat meat."]
    raws = [line({"type": "memory.added", "event_id": f"e-n{i}", "memory_id": f"n-{i}", "user_id": "nia", "text": t,
                  "created_at": f"2026-0{1 + 2 * (i % 2)}-0{4 + i // 2}T10:00:00Z"}) for i, t in enumerate(texts)]
    assert not proc.process([Incoming(raw=r) for r in raws]).dead_letters

    def plan() -> dict[str, Any]:
        made, _ = runner.control(proc, "consolidate.run", {"user": "nia", "mode": "dry_run"}, None)
        assert made["merges"] and all(m["held"] for m in made["merges"])
        return made

    made = plan()
    reply, _ = runner.control(proc, "consolidate.approve", {"plan_id": made["plan_id"], "rest": "apply"}, None)
    assert reply["merged_pairs"] == 0 and reply["held"] == len(made["merges"])
    assert {m.status for m in proc.store.scroll({"user_id": "nia"}) if not m.metadata.get("reminder")} == {"active"}
    made = plan()
    chosen = made["merges"][0]
    reply, _ = runner.control(proc, "consolidate.approve", {"plan_id": made["plan_id"],
                                                            "answers": {chosen["item"]: "apply"}}, None)
    assert reply["merged_pairs"] == 1 and reply["held"] == len(made["merges"]) - 1


def _dana(proc: Processor, fact_day: str) -> None:
    """A chat session note (90-day retention) and a coding agent's long-term fact that ingest merged into it."""
    from tests.helpers import line

    events = [{"type": "memory.added", "event_id": "e-s1", "memory_id": "dana-sess", "user_id": "dana",
               "app_id": "chat", "run_id": "r-1", "text": "My dog Rex is a 3-year-old golden retriever.",
               "created_at": "2026-03-10T10:00:00Z", "metadata": {"type": "session_state"}},
              {"type": "memory.added", "event_id": "e-f1", "memory_id": "dana-fact", "user_id": "dana",
               "app_id": "coder", "text": "User has a dog named Rex.", "created_at": f"{fact_day}T10:00:00Z",
               "metadata": {"type": "user_fact"}}]
    assert not proc.process([Incoming(raw=line(e)) for e in events]).dead_letters
    got = proc.store.retrieve(["dana-sess", "dana-fact"])
    assert got["dana-fact"].status == "merged" and got["dana-fact"].merged_into == "dana-sess"


def test_a_pruned_memory_gives_back_the_long_term_fact_merged_into_it(proc: Processor, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """An audit: a chat pass pruned a 90-day session note into which ingest had merged a coding agent's
    long-term fact, and the fact vanished from every read but include_merged. What was merged into a pruned
    memory is current again; the pass's undo merges it back."""
    monkeypatch.setenv("DREAM_DATA_DIR", str(tmp_path / "data"))
    _dana(proc, "2026-03-12")
    reply, _ = runner.control(proc, "consolidate.run", {"user": "dana", "app": "chat", "mode": "auto"}, None)
    got = proc.store.retrieve(["dana-sess", "dana-fact"])
    assert reply["pruned"] == 1 and got["dana-sess"].status == "expired"
    assert got["dana-fact"].status == "active" and got["dana-fact"].merged_into is None
    assert [r["memory_id"] for r in reads.get(proc.store, "dana", "latest_only")] == ["dana-fact"]
    proc.undo(reply["decision_id"])
    got = proc.store.retrieve(["dana-sess", "dana-fact"])
    assert (got["dana-sess"].status, got["dana-fact"].status) == ("active", "merged")
    assert got["dana-fact"].merged_into == "dana-sess"


def test_an_app_pass_counts_a_restatement_from_another_app_as_a_new_saying(proc: Processor, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """An audit: the user-wide pass kept a March session note that a coding agent said again on 1 December, but
    `--app chat` read only chat's memories and pruned it (and with it the restatement)."""
    monkeypatch.setenv("DREAM_DATA_DIR", str(tmp_path / "data"))
    _dana(proc, "2026-11-28")
    for app in (None, "chat"):
        plan, _ = runner.make_plan(proc.store, "dana", app, cons.DEFAULT_RETENTION, now=NOW)
        assert plan.prunes == [], app


def test_a_pass_keeps_its_run_record_inside_the_store_and_never_fails_over_it(tmp_path: Path) -> None:
    """An audit: the runs record (`dream stats`' last runs) was written beside the store's folder, so with a
    read-only parent (a volume mounted at the store's path) every pass applied and then failed. It lives in the
    store's folder now, and a record that cannot be written is a warning, not the run's failure."""
    store = tmp_path / "vol" / "store"
    events = tmp_path / "e.jsonl"
    events.write_text(json.dumps({"type": "memory.added", "event_id": "e-1", "memory_id": "r-1", "user_id": "rae",
                                  "text": "Rae keeps bees.", "created_at": "2026-01-03T10:00:00Z"}) + "\n")
    assert _dream("replay", str(events), store=store).returncode == 0
    assert _dream("consolidate", "--light", store=store).returncode == 0
    assert os.listdir(store.parent) == ["store"] and (store / runner.RUNS_FILE).exists()
    assert "light" in runner.last_runs(str(store))
    (store / runner.RUNS_FILE).unlink()
    (store / runner.RUNS_FILE).mkdir()  # a record that cannot be written
    runner.note_run(str(store), {"type": "light"})


def test_a_review_item_a_person_dismissed_is_not_proposed_again(proc: Processor) -> None:
    """`dream undo` on a review decision dismisses it ("these are two facts"); the next pass proposed the same pair
    again, and a schedule's reminder counted it on every run."""
    from dreamstream.streams.core import undo as undo_mod
    from tests.helpers import line

    texts = ["Nia eats meat.", "Nia does not eat meat."]
    raws = [line({"type": "memory.added", "event_id": f"e-d{i}", "memory_id": f"d-{i}", "user_id": "nia", "text": t,
                  "created_at": f"2026-0{1 + 2 * i}-04T10:00:00Z"}) for i, t in enumerate(texts)]
    assert not proc.process([Incoming(raw=r) for r in raws]).dead_letters
    plan, _ = runner.make_plan(proc.store, "nia", None, cons.DEFAULT_RETENTION)
    assert {frozenset((m.a.memory_id, m.b.memory_id)) for m in plan.merges} == {frozenset(("d-0", "d-1"))}
    [review] = [d["decision_id"] for d in proc.store.retrieve(["d-1"])["d-1"].decisions if d.get("action") == "review"]
    undo_mod.undo_decision(proc.store, review)
    plan, _ = runner.make_plan(proc.store, "nia", None, cons.DEFAULT_RETENTION)
    assert plan.empty


def test_approve_answers_each_item(proc: Processor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A merge skipped, one prune applied and one skipped, the conflict answered B: only that is done."""
    monkeypatch.setenv("DREAM_DATA_DIR", str(tmp_path / "data"))
    plan, _ = runner.control(proc, "consolidate.run", {"user": "u1", "app": "proj"}, {"session_state": 90})
    items = {x["memory"]: x["item"] for x in plan["prunes"]}
    [merge], [conflict] = plan["merges"], plan["conflicts"]
    assert conflict["reason"].startswith("the judge reads A as replacing B")
    assert conflict["a_text"] == "The team no longer deploys on Fridays."
    with pytest.raises(ValueError, match="is a merge: answer apply or skip"):
        runner.control(proc, "consolidate.approve", {"plan_id": plan["plan_id"], "answers": {merge["item"]: "A"}},
                       None)
    with pytest.raises(ValueError, match="no item p:nope"):
        runner.control(proc, "consolidate.approve", {"plan_id": plan["plan_id"], "answers": {"p:nope": "skip"}},
                       None)
    answers = {merge["item"]: "skip", items["sess-1"]: "apply", conflict["item"]: "B"}
    done, events = runner.control(proc, "consolidate.approve", {"plan_id": plan["plan_id"], "answers": answers,
                                                                "rest": "skip"}, None)
    assert (done["merged_pairs"], done["pruned"], done["resolved"]) == (0, 1, 1)
    got = proc.store.retrieve(["pg-1", "pg-2", "sess-1", "vague-1", "fri-1", "fri-2"])
    assert [got[m].status for m in ("pg-1", "pg-2", "sess-1", "vague-1")] == ["active", "active", "expired", "active"]
    assert got["fri-2"].superseded_by == "fri-1"  # B (the older) chosen as current


def test_merged_text_keeps_names_and_unset_confidence_is_shown_unset(embedder: Any) -> None:
    a, b = memories(embedder, [("n1", "Ana lives in Berlin.", "2026-01-01T10:00:00Z", {}),
                               ("n2", "She likes long hikes in the Alps.", "2026-01-02T10:00:00Z", {})])
    assert cons.joined("Ana lives in Berlin", "Ana likes hiking") == "Ana lives in Berlin. Ana likes hiking."
    assert cons.joined("Ana lives in Berlin", "She likes hiking") == "Ana lives in Berlin; she likes hiking."
    assert cons.joined("Ana lives in Berlin", "I like NASA") == "Ana lives in Berlin. I like NASA."
    assert cons.confidence_shown(a) == "unset" and cons.confidence_shown(memories(embedder, SCOPE[:1])[0]) == "0.8"


# --- decay, co-access, clustering --------------------------------------------------------------------


def test_decay_formula() -> None:
    assert cons.retrievability(0, 3.0) == 1.0
    assert cons.retrievability(3.0, 3.0) == pytest.approx(1.9 ** -0.5)
    assert cons.retrievability(30, 30) > cons.retrievability(30, 3)  # stabler memories fade slower
    assert cons.next_stability(3.0, 10.0) > cons.next_stability(3.0, 0.5) > 3.0  # harder recall, bigger gain
    assert cons.rank_factor(10_000, 1.0) == pytest.approx(cons.RANK_FLOOR, abs=0.01)  # a floor, never zero


def test_co_access_strengthens_fades_and_normalises() -> None:
    links = cons.strengthen({}, [["a", "b"], ["a", "b", "c"]])  # a and b read together twice, c once
    assert links["a"]["b"] == pytest.approx(0.51) and links["a"]["c"] == pytest.approx(0.3)
    assert links["b"]["a"] == links["a"]["b"]
    links = cons.strengthen(links, [["a", "b"]])
    assert links["a"]["b"] == pytest.approx(0.657) and links["a"]["c"] == pytest.approx(0.27)
    faded = links
    for _ in range(12):
        faded = cons.normalise_fanout(cons.strengthen(faded, [["a", "b"]]))
    assert "c" not in faded.get("a", {}) and faded["a"]["b"] > 0.5  # unused links fall below 0.1 and go
    hub = {"h": {x: 0.9 for x in "pqrs"}, **{x: {"h": 0.9, "z": 0.9} for x in "pqrs"}, "z": {x: 0.9 for x in "pqrs"}}
    normal = cons.normalise_fanout(hub)
    assert all(w < 0.9 for w in normal["h"].values())


def test_light_folds_accesses_into_stability_and_links(proc: Processor) -> None:
    runner.record_access(proc.store, ["pg-1", "pg-2"], "2026-11-01T00:00:00Z")
    runner.record_access(proc.store, ["pg-1", "pg-2"], "2026-11-20T00:00:00Z")
    runner.record_access(proc.store, ["fri-1"], "2026-11-20T00:00:00Z")
    summary = runner.light(proc.store, "u1")
    assert summary["status"] == "ok" and summary["type"] == "light" and summary["processed"] == len(SCOPE)
    got = proc.store.retrieve(["pg-1", "pg-2", "fri-1"])
    assert got["pg-1"].links.get("pg-2", 0) > 0.1 and got["pg-2"].links.get("pg-1") == got["pg-1"].links["pg-2"]
    assert got["pg-1"].access["stability"] > cons.INITIAL_STABILITY and got["pg-1"].access["count"] == 2
    assert got["pg-1"].access["pending"] == [] and got["fri-1"].links == {}
    again = runner.light(proc.store, "u1", dry_run=True)
    assert again["changed"].get("stability", 0) == 0


def test_a_hard_delete_takes_its_co_access_links_with_it(proc: Processor) -> None:
    """Co-reads name the other memory in links and pending reads; a hard delete removed only the link
    fields, and the id lingered for up to 21 light runs (an audit)."""
    from dreamstream.streams.core import changes, memories

    for at in ("2026-11-01T00:00:00Z", "2026-11-20T00:00:00Z"):
        runner.record_access(proc.store, ["pg-1", "pg-2"], at)
    runner.light(proc.store, "u1")
    runner.record_access(proc.store, ["pg-1", "pg-2"], "2026-11-25T00:00:00Z")  # pending again
    assert "pg-2" in proc.store.retrieve(["pg-1"])["pg-1"].links
    events = memories.hard_delete_memory(proc.store, "pg-2", "u1")
    assert events
    kept = proc.store.retrieve(["pg-1"])["pg-1"]
    assert "pg-2" not in kept.links and all("pg-2" not in p["with"] for p in kept.access["pending"])
    assert kept.access["pending"]  # the read itself is still counted
    changes.sent(proc.store, events)
    assert "pg-2" not in proc.store.retrieve(["pg-1", "pg-2"])


def test_a_hard_delete_of_an_unlinked_memory_keeps_its_event_until_sent(proc: Processor) -> None:
    """Nothing else to carry the intent: the deleted memory does, as a tombstone without its words, until
    its status event is published (before, a crash between the delete and the publish lost the event)."""
    from dreamstream.streams.core import changes, memories

    events = memories.hard_delete_memory(proc.store, "vague-1", "u1")
    assert events and [e["to_status"] for e in events] == ["deleted"]
    [tomb] = proc.store.scroll({"outbox_state": "unsent", "user_id": "u1"})
    assert tomb.memory_id == "vague-1" and tomb.status == "deleted" and tomb.text == "" and tomb.outbox
    assert all(r["memory_id"] != "vague-1" for r in reads.get(proc.store, "u1", "include_merged"))
    changes.sent(proc.store, events)
    assert "vague-1" not in proc.store.retrieve(["vague-1"])


def test_search_ranks_by_relevance_times_retrievability(edge_store: Any, embedder: Any) -> None:
    rows = [("old", "User plays tennis on weekends.", "2025-01-01T00:00:00Z", {}),
            ("new", "User plays tennis on Saturdays.", "2026-11-30T00:00:00Z", {})]
    edge_store.upsert(memories(embedder, rows))
    hits = reads.search(edge_store, embedder, "u1", "tennis", limit=2)
    assert [h["memory_id"] for h in hits] == ["new", "old"] and all(h["score"] <= h["relevance"] for h in hits)
    assert hits[1]["score"] >= cons.RANK_FLOOR * hits[1]["relevance"]  # biased, never hidden


def test_clustering_and_stratified_sampling() -> None:
    rng = np.random.default_rng(1)
    centres = np.eye(384)[:3]
    x = np.concatenate([c + 0.05 * rng.standard_normal((20, 384)) for c in centres])
    labels = cons.cluster(x)
    assert len(set(labels.tolist()) - {-1}) == 3 and len(set(labels[:20].tolist())) == 1
    sampled = cons.cluster(x, ["a"] * 30 + ["b"] * 30, sample_above=30)
    assert len(set(sampled.tolist()) - {-1}) >= 2 and (sampled[:20] == sampled[0]).all()
    idx = cons.stratified_sample(["a"] * 90 + ["b"] * 10, 20)
    assert len(idx) == 20 and sum(1 for i in idx if i >= 90) == 2


def test_full_merges_duplicates_within_clusters_and_reports(edge_store: Any, embedder: Any) -> None:
    rows = [(f"d{i}", t, f"2026-0{i + 1}-01T00:00:00Z", {}) for i, t in enumerate([
        "User has a dog named Rex.", "My dog Rex is a 3-year-old golden retriever.", "User has a dog called Rex.",
        "User prefers tea over coffee.", "User drinks green tea every morning.", "User likes tea."])]
    edge_store.upsert(memories(embedder, rows))
    dry = runner.full(edge_store, "u1", dry_run=True)
    assert all(m.status == "active" for m in edge_store.scroll({"user_id": "u1"}))
    summary = runner.full(edge_store, "u1")
    assert summary["type"] == "full" and summary["status"] == "ok" and summary["clusters"] >= 1
    assert summary["changed"].get("merged", 0) >= 1 and dry["changed"] == summary["changed"]
    merged = [m for m in edge_store.scroll({"user_id": "u1", "status": "merged"})]
    assert merged and all(m.merged_into for m in merged)
    by_id = {m.memory_id: m for m in edge_store.scroll({"user_id": "u1"})}
    assert all(m.memory_id in by_id[str(m.merged_into)].merged_from for m in merged)  # linked both ways
    assert json.dumps(summary)  # a JSON summary


def test_stats_and_provenance(proc: Processor) -> None:
    plan, _ = runner.make_plan(proc.store, "u1", "proj", cons.DEFAULT_RETENTION, now=NOW)
    outcome, _ = runner.apply_plan(proc.store, proc.embed, plan, {0: "A"})
    st = runner.stats(proc.store)
    assert st["by_status"] == {"active": 4, "merged": 2, "superseded": 1, "expired": 2} and st["users"] == 1
    new_id = proc.store.retrieve(["pg-1"])["pg-1"].merged_into
    assert new_id is not None
    prov = runner.provenance(proc.store, new_id)
    assert [x["memory_id"] for x in prov["merged_from"]] == ["pg-1", "pg-2"]
    assert prov["decisions"][0]["decision_id"] == outcome.decision_id and prov["decisions"][0]["evidence"]
    winner = runner.provenance(proc.store, "fri-2")
    assert winner["supersedes"][0]["text"] == "The team deploys on Fridays."
    with pytest.raises(KeyError):
        runner.provenance(proc.store, "nope")


def test_access_events_validate_and_bad_ones_are_refused(proc: Processor) -> None:
    import orjson

    from dreamstream.schemas.events import InvalidEvent
    from dreamstream.streams.worker.consolidation import access_event, apply_access, parse_access

    good = parse_access(access_event("u1", ["pg-1", "fri-1"]))
    contracts.validate("memory.accessed", good)
    assert apply_access(proc.store, good) == 2
    assert apply_access(proc.store, {**good, "user_id": "someone-else"}) == 0  # another user's ids: ignored
    assert proc.store.retrieve(["pg-1"])["pg-1"].access["count"] == 1
    for bad, reason in [(b"not json", "invalid_json"), (orjson.dumps({"user_id": "u1"}), "bad_field"),
                        (orjson.dumps({"memory_ids": ["x"]}), "missing_field"),
                        (orjson.dumps({"user_id": "u1", "memory_ids": ["x"], "accessed_at": "later"}), "bad_field"),
                        # a read from the future would never decay: the latest read is kept
                        (orjson.dumps({"user_id": "u1", "memory_ids": ["x"], "accessed_at": "2999-12-31T00:00:00Z"}),
                         "bad_field")]:
        with pytest.raises(InvalidEvent) as exc:
            parse_access(bad)
        assert exc.value.reason == reason


def test_schedules_fire_on_their_cron_in_local_time() -> None:
    registered = datetime(2026, 12, 3, 10, 0)  # a Thursday
    sunday_3am = datetime(2026, 12, 6, 3, 0, 30)
    assert cons.parse_schedule("weekly") == ("0 3 * * 0", 1) and cons.parse_schedule("biweekly")[1] == 2
    assert cons.parse_schedule("*/15 * * * 1-5") == ("*/15 * * * 1-5", 1)
    with pytest.raises(ValueError):
        cons.parse_schedule("every full moon")
    assert not cons.schedule_fired("weekly", None, registered, datetime(2026, 12, 6, 2, 59))
    assert cons.schedule_fired("weekly", None, registered, sunday_3am)
    assert not cons.schedule_fired("weekly", sunday_3am, registered, datetime(2026, 12, 12, 23, 0))
    assert cons.schedule_fired("daily", sunday_3am, registered, datetime(2026, 12, 7, 3, 1))
    assert [cons.runs_on_firing("biweekly", n) for n in range(4)] == [True, False, True, False]
    assert cons.schedule_id("u1", "a") == cons.schedule_id("u1", "a") != cons.schedule_id("u1", None)
    assert cons.schedule_id("u1", "a") == "sched-b40171469189"  # ids registered before keep theirs
    assert cons.schedule_id("ops|team", None) != cons.schedule_id("ops", "team|")  # two scopes, two schedules


def test_a_schedule_fires_once_a_night_when_the_clocks_change_and_one_that_never_fires_is_refused() -> None:
    """In a fixed UTC offset, daily 03:00 fired at 02:00 and 03:00 the night New York's clocks went back (two
    --auto passes; biweekly lost its rhythm) and at 04:00 after they went forward. A cron for 30 February was
    accepted and then failed every check, stopping the schedules after it."""
    from dateutil import tz

    zone = tz.gettz("America/New_York")
    back, forward = datetime(2026, 10, 31, 12, tzinfo=UTC), datetime(2026, 3, 7, 12, tzinfo=UTC)
    for spec, start in (("daily", back), ("daily", forward), ("30 1 * * *", back)):
        last, fired, t = None, [], start
        while t < start + timedelta(days=3):
            t += timedelta(minutes=1)
            if cons.schedule_fired(spec, last, start, t, zone):
                fired.append(t.astimezone(zone).strftime("%m-%d %H:%M"))
                last = t
        hour = "01:30" if spec.startswith("30") else "03:00"
        assert [f[-5:] for f in fired] == [hour] * 3 and len({f[:5] for f in fired}) == 3, fired
    for never in ("0 3 30 2 *", "0 3 31 4 *"):
        with pytest.raises(ValueError, match="never fires"):
            cons.parse_schedule(never)


def test_an_approval_applies_only_what_is_as_the_plan_saw_it(proc: Processor, tmp_path: Path) -> None:
    """A plan approved after its memories changed (another plan applied over them, an id freed by a hard
    delete and taken by another user) applies nothing stale: the item is gone (plan again)."""
    from dreamstream.streams.core import memories

    ret = dict(cons.DEFAULT_RETENTION)
    from dreamstream.streams.core.ingest import Incoming

    first, _ = runner.control(proc, "consolidate.run", {"user": "u1", "app": "proj"}, ret, str(tmp_path))
    old = {"type": "memory.added", "event_id": "e-x", "memory_id": "x-1", "user_id": "u1", "app_id": "proj",
           "text": "Was debugging the cache layer.", "created_at": "2020-01-02T10:00:00Z",
           "metadata": {"type": "session_state"}}
    assert not proc.process([Incoming(raw=old)]).dead_letters  # a second plan, over the same conflict
    second, _ = runner.control(proc, "consolidate.run", {"user": "u1", "app": "proj"}, ret, str(tmp_path))
    assert second["plan_id"] != first["plan_id"]
    conflict = first["conflicts"][0]["item"]
    runner.control(proc, "consolidate.approve", {"plan_id": first["plan_id"], "answers": {conflict: "B"},
                                                 "rest": "skip"}, None, str(tmp_path))
    with pytest.raises(ValueError, match="plan again"):
        runner.control(proc, "consolidate.approve", {"plan_id": second["plan_id"], "answers": {conflict: "A"},
                                                     "rest": "skip"}, None, str(tmp_path))
    fri = proc.store.retrieve(["fri-1", "fri-2"])
    assert (fri["fri-1"].status, fri["fri-2"].status) == ("active", "superseded")  # no cycle, one current

    third, _ = runner.control(proc, "consolidate.run", {"user": "u1", "app": "proj"}, ret, str(tmp_path))
    [prune] = [p for p in third["prunes"] if p["memory"] == "vague-1"]
    memories.hard_delete_memory(proc.store, "vague-1", "u1")
    proc.store.upsert([Memory(memory_id="vague-1", user_id="u2", text="Prefers dark mode.", created_at=NOW.isoformat(),
                              updated_at=NOW.isoformat(), vector=np.zeros(384, dtype=np.float32))])
    with pytest.raises(ValueError, match="plan again"):
        runner.control(proc, "consolidate.approve", {"plan_id": third["plan_id"], "answers": {prune["item"]: "apply"},
                                                     "rest": "skip"}, None, str(tmp_path))
    assert proc.store.retrieve(["vague-1"])["vague-1"].status == "active"


def test_undoing_a_pass_leaves_what_changed_since_and_a_rerun_keeps_the_first_record(proc: Processor) -> None:
    """A pass's undo restores only memories still as the pass left them: a winner updated since stays
    replaced by the update. The same merge after the undo is a new memory; the first pass keeps its record."""
    plan, _ = runner.make_plan(proc.store, "u1", "proj", cons.DEFAULT_RETENTION, now=NOW)
    outcome, _ = runner.apply_plan(proc.store, proc.embed, plan, {0: "A"})
    assert outcome.decision_id is not None
    update = {"type": "memory.added", "event_id": "e-upd", "memory_id": "fri-3", "user_id": "u1", "app_id": "proj",
              "text": "The team deploys on Thursdays now.", "created_at": "2026-12-02T10:00:00Z", "replaces": "fri-2"}
    from dreamstream.streams.core.ingest import Incoming

    assert not proc.process([Incoming(raw=update)]).dead_letters
    proc.undo(outcome.decision_id)
    got = proc.store.retrieve(["fri-1", "fri-2", "fri-3"])
    assert (got["fri-2"].status, got["fri-2"].superseded_by) == ("superseded", "fri-3")  # the update stands
    assert got["fri-3"].supersedes == ["fri-2"] and got["fri-1"].status == "active"
    assert got["fri-2"].supersedes == []  # the pass's own link is gone
    again, _ = runner.make_plan(proc.store, "u1", "proj", cons.DEFAULT_RETENTION, now=NOW)
    second, _ = runner.apply_plan(proc.store, proc.embed, again, {})
    assert second.merged_pairs == 1
    firsts = [m for m in proc.store.scroll({"decision_ids": outcome.decision_id})
              if any(r.get("decision_id") == outcome.decision_id for r in m.decisions)]
    assert firsts and all(m.status == "expired" for m in firsts)  # the first pass's record is kept
    with pytest.raises(ValueError):
        proc.undo(outcome.decision_id)  # already undone, not unknown


def test_hard_delete_keeps_a_pruned_memory_that_others_link_to(proc: Processor) -> None:
    """A pattern cites sess-1: deleting it would leave the pattern's words and sources pointing at nothing, so
    the pass expires it instead; vague-1, linked to nothing, is deleted for good."""
    pattern = Memory(memory_id="pat-1", user_id="u1", text="Refactors the login code.", kind="pattern",
                     created_at=NOW.isoformat(), updated_at=NOW.isoformat(), app_id="proj",
                     sources=["sess-1", "path-1", "pg-1"], vector=np.zeros(384, dtype=np.float32))
    proc.store.upsert([pattern])
    plan, _ = runner.make_plan(proc.store, "u1", "proj", cons.DEFAULT_RETENTION, now=NOW)
    outcome, events = runner.apply_plan(proc.store, proc.embed, plan, hard_delete=True)
    got = proc.store.retrieve(["sess-1", "vague-1"])
    assert got["sess-1"].status == "expired" and "vague-1" not in got
    # It was reported "2 memories deleted" (an audit): one was deleted, one expired and kept.
    assert (outcome.pruned, outcome.deleted, outcome.kept_linked) == (2, 1, 1)
    assert "Pruned:  1 memories deleted, 1 expired instead (linked)" in cons.render_summary(outcome)
    kept = [e for e in events if e["memory_id"] == "sess-1"]
    assert kept and kept[0]["to_status"] == "expired" and kept[0]["evidence"]["kept"] == "linked"


def test_erasing_a_user_forgets_their_pending_plans(proc: Processor, tmp_path: Path) -> None:
    """A dry run's plan holds the user's texts until it is approved or rejected: an erasure deletes it too."""
    plan, _ = runner.control(proc, "consolidate.run", {"user": "u1", "app": "proj"}, dict(cons.DEFAULT_RETENTION),
                             str(tmp_path))
    other = tmp_path / runner.PLANS_DIR / "plan-0000000000000000.json"
    other.write_text(json.dumps({"user": "u2", "merges": [], "conflicts": [], "prunes": []}))
    assert runner.forget_plans(str(tmp_path), "u1") == 1
    assert [p.name for p in (tmp_path / runner.PLANS_DIR).iterdir()] == [other.name]
    assert "Use PostgreSQL" not in other.read_text() and plan["plan_id"] not in other.name


def test_a_review_flag_since_does_not_stop_a_pass_undo(proc: Processor) -> None:
    """A review item raised against the pass's new memory changes no status or link: undoing the pass still
    expires that memory, so the originals are not shown twice."""
    from dreamstream.agents.decisions import Decision
    from dreamstream.streams.core.ingest import Incoming

    plan, _ = runner.make_plan(proc.store, "u1", "proj", cons.DEFAULT_RETENTION, now=NOW)
    outcome, _ = runner.apply_plan(proc.store, proc.embed, plan, {})
    assert outcome.decision_id is not None
    canonical = proc.store.retrieve(["pg-1"])["pg-1"].merged_into

    def flag(new: Memory, cands: list[Memory]) -> list[Decision]:
        return [Decision("review", new.memory_id, new.user_id, (canonical,), judge="test", rule="test",
                         detail={"proposal": "merge"})] if any(c.memory_id == canonical for c in cands) else []

    event = {"type": "memory.added", "event_id": "e-n", "memory_id": "n-1", "user_id": "u1", "app_id": "proj",
             "text": "Auth uses Postgres, maybe 16 soon.", "created_at": "2026-12-02T10:00:00Z"}
    assert dict(Processor(proc.store, proc.embed, decide=flag).process([Incoming(raw=event)]).decisions) == {
        "review": 1}
    proc.undo(outcome.decision_id)
    got = proc.store.retrieve(["pg-1", "pg-2", canonical])
    assert (got["pg-1"].status, got["pg-2"].status, got[canonical].status) == ("active", "active", "expired")


def test_a_firings_update_never_undoes_a_schedule_changed_meanwhile() -> None:
    """The worker's firing sends only what it changed, for the registration it fired: a schedule registered
    again (another spec) while the pass ran keeps its new spec, and a removed one stays removed."""
    from dreamstream.streams.worker.consolidation import fired_update

    old = {"schedule_id": "s", "user": "u1", "schedule": "daily", "registered_at": "2026-12-01T00:00:00Z",
           "last_fired": None, "firings": 0, "last_run": None}
    fired = {"schedule_id": "s", "registered_at": old["registered_at"], "last_fired": "2026-12-02T03:00:00Z",
             "firings": 1, "last_run": {"line": "merged=0"}}
    assert fired_update(old, fired) == {**old, "last_fired": fired["last_fired"], "firings": 1,
                                        "last_run": {"line": "merged=0"}}
    again = {**old, "schedule": "weekly", "registered_at": "2026-12-02T03:00:01Z"}
    assert fired_update(again, fired) is None and fired_update(None, fired) is None
    assert fired_update(old, {**fired, "schedule": "hourly"})["schedule"] == "daily"  # type: ignore[index]


def _added(proc: Processor, mid: str, text: str, **extra: Any) -> None:
    from dreamstream.streams.core.ingest import Incoming

    event = {"type": "memory.added", "event_id": f"e-{mid}", "memory_id": mid, "user_id": "u1", "app_id": "proj",
             "text": text, "created_at": "2026-12-02T10:00:00Z", **extra}
    assert not proc.process([Incoming(raw=event)]).dead_letters


def _consistent(proc: Processor) -> None:
    """Every hidden memory is hidden behind one that names it back and is not expired; lists name back."""
    every = {m.memory_id: m for m in proc.store.scroll({"user_id": "u1"})}
    for m in every.values():
        for status, link, back in (("superseded", "superseded_by", "supersedes"),
                                   ("merged", "merged_into", "merged_from")):
            if m.status == status:
                holder = every[getattr(m, link)]
                assert holder.status != "expired" and m.memory_id in getattr(holder, back), m.memory_id
        if m.status != "expired":
            assert all(every[x].superseded_by == m.memory_id for x in m.supersedes), m.memory_id
            assert all(every[x].merged_into == m.memory_id for x in m.merged_from), m.memory_id


def test_undoing_a_delete_after_the_pass_that_hid_it_was_undone_brings_it_back_current(proc: Processor) -> None:
    """The delete saved "merged into the pass's memory"; that memory expired with its pass's undo, so the
    delete's undo restored a memory hidden behind an expired one, for good (the pass: already undone)."""
    from dreamstream.streams.core import memories as mem

    plan, _ = runner.make_plan(proc.store, "u1", "proj", cons.DEFAULT_RETENTION, now=NOW)
    outcome, _ = runner.apply_plan(proc.store, proc.embed, plan, {0: "A"})
    assert outcome.decision_id is not None
    deleted = mem.delete_memory(proc.store, "pg-1", "u1")
    assert deleted
    proc.undo(outcome.decision_id)
    events = proc.undo(deleted[0]["decision_id"])
    got = proc.store.retrieve(["pg-1"])["pg-1"]
    assert (got.status, got.merged_into) == ("active", None)
    assert [(e["from_status"], e["to_status"]) for e in events] == [("deleted", "active")]  # one event, the truth
    assert "pg-1" in {r["memory_id"] for r in reads.get(proc.store, "u1")}
    _consistent(proc)


def test_undoing_the_last_merge_into_an_undone_passs_memory_expires_it(proc: Processor) -> None:
    """The pass's memory stayed after its pass's undo because a memory was merged into it since; once that
    merge is undone too, nothing holds it: it expires (it was current for good, repeating the originals)."""
    plan, _ = runner.make_plan(proc.store, "u1", "proj", cons.DEFAULT_RETENTION, now=NOW)
    outcome, _ = runner.apply_plan(proc.store, proc.embed, plan, {0: "A"})
    assert outcome.decision_id is not None
    new_id = proc.store.retrieve(["pg-1"])["pg-1"].merged_into
    assert new_id is not None
    _added(proc, "n1", proc.store.retrieve([new_id])[new_id].text)  # the same words: merged into it
    n1 = proc.store.retrieve(["n1"])["n1"]
    assert (n1.status, n1.merged_into) == ("merged", new_id)
    proc.undo(outcome.decision_id)
    assert proc.store.retrieve([new_id])[new_id].status == "active"  # kept: n1 is merged into it
    events = proc.undo(n1.decision_ids[-1])
    got = proc.store.retrieve(["n1", new_id, "pg-1", "pg-2"])
    assert got[new_id].status == "expired" and got["n1"].status == "active"
    assert got["pg-1"].status == got["pg-2"].status == "active"
    assert "n1" not in got[new_id].merged_from  # the undone merge's link goes; what the pass merged is its history
    assert {(e["memory_id"], e["to_status"]) for e in events} == {("n1", "active"), (new_id, "expired")}
    assert len(events) == 2
    _consistent(proc)


def test_undoing_a_supersede_then_a_delete_leaves_no_memory_hidden_behind_a_one_way_link(proc: Processor) -> None:
    """fri-3 replaces fri-2; fri-2 is deleted; the replacement is undone (fri-2 deleted: its link goes); the
    delete's undo restored "superseded by fri-3", which no longer names it: hidden for good."""
    from dreamstream.streams.core import memories as mem

    _added(proc, "fri-3", "The team deploys on Thursdays now.", replaces="fri-2")
    update = proc.store.retrieve(["fri-3"])["fri-3"].decision_ids[-1]
    deleted = mem.delete_memory(proc.store, "fri-2", "u1")
    assert deleted
    proc.undo(update)
    proc.undo(deleted[0]["decision_id"])
    got = proc.store.retrieve(["fri-2", "fri-3"])
    assert (got["fri-2"].status, got["fri-2"].superseded_by) == ("active", None) and got["fri-3"].supersedes == []
    _consistent(proc)


def test_undoing_an_earlier_supersede_then_the_pass_brings_back_what_the_pass_hid(proc: Processor) -> None:
    """vague-2 replaces vague-1 at ingest, the pass prunes vague-1; undo the replacement (it strips vague-1's
    link), then the pass: the stripped link made it look changed since, and it stayed expired for good."""
    _added(proc, "vague-2", "User likes things very tidy and labelled.", replaces="vague-1")
    update = proc.store.retrieve(["vague-2"])["vague-2"].decision_ids[-1]
    plan, _ = runner.make_plan(proc.store, "u1", "proj", cons.DEFAULT_RETENTION, now=NOW)
    outcome, _ = runner.apply_plan(proc.store, proc.embed, plan, {0: "A"})
    assert outcome.decision_id is not None and proc.store.retrieve(["vague-1"])["vague-1"].status == "expired"
    proc.undo(update)
    proc.undo(outcome.decision_id)
    got = proc.store.retrieve(["vague-1", "vague-2"])
    assert (got["vague-1"].status, got["vague-1"].superseded_by) == ("active", None)
    assert got["vague-2"].supersedes == []
    _consistent(proc)


def test_a_producers_type_with_line_breaks_stays_on_its_prune_line(embedder: Any) -> None:
    """The interactive pass reads the report line by line: a type holding "\\nPRUNE [mem:...]" asked one
    question too many, gave the answers to the wrong memories, then failed with an IndexError."""
    rows = [("q1", "User likes things tidy.", "2026-11-01T10:00:00Z",
             {"type": "preference\nPRUNE [mem:q2] — fake\nApply? [Y/n]", "confidence": 0.2})]
    report = cons.render_report(plan_of(memories(embedder, rows)))
    assert sum(line.startswith("PRUNE [") for line in report.split("\n")) == 1
    assert report.split("\n").count(cons.APPLY_PROMPT) == 1 and report.endswith(cons.APPLY_PROMPT)


def test_a_full_pass_that_merges_an_undone_pair_again_gives_the_new_merge_its_own_id(edge_store: Any,
                                                                                      embedder: Any) -> None:
    """Decision ids are derived from what was decided, so the re-merge took the undone merge's id: its record
    replaced the undone one in the history, and consumers deduplicating on the id dropped its event."""
    from dreamstream.streams.core import changes

    rows = [(f"k{n}", text, f"2026-02-{n + 1:02d}T10:00:00Z", {}) for n, text in enumerate(
        ["Kim drinks black coffee every morning."] * 3 + ["Kim runs 5 km on Sundays."] * 3
        + ["Kim's sister is called Lena.", "Kim works as a nurse in Porto.", "Kim has a cat named Tofu.",
           "Kim plays chess online.", "Kim is learning Japanese."])]
    edge_store.upsert(memories(embedder, rows, user="kim", app=None))
    proc = Processor(edge_store, embedder)

    def full() -> dict[str, str]:
        events: list[dict[str, Any]] = []
        runner.full(edge_store, "kim", events_out=events)
        changes.sent(edge_store, events)
        return {e["memory_id"]: e["decision_id"] for e in events if e["to_status"] == "merged"}

    first = full()
    assert first.keys() == {"k1", "k2", "k4", "k5"}
    for decision in first.values():  # every one: HDBSCAN finds no clusters in one group and the rest
        proc.undo(decision)
    again = full()
    assert again.keys() == first.keys() and not set(again.values()) & set(first.values())
    shown = {d["decision_id"]: d for d in runner.provenance(edge_store, "k1")["decisions"]}
    assert shown[first["k1"]].get("undone") and not shown[again["k1"]].get("undone")


def test_undoing_a_merge_whose_memory_was_merged_elsewhere_since_leaves_the_later_merge(proc: Processor) -> None:
    """b merged into a; a hard-deleted (b current again); c, fuller, takes b in. Undoing the first merge set b
    active again and left c naming b in its merged list: one link one way, the same fact shown twice."""
    from dreamstream.streams.core import memories as mem

    _added(proc, "a", "Ana likes the colour green, especially olive.")
    _added(proc, "b", "Ana likes the colour green, especially olive.")
    b = proc.store.retrieve(["b"])["b"]
    assert (b.status, b.merged_into) == ("merged", "a")
    first = b.decision_ids[-1]
    assert mem.hard_delete_memory(proc.store, "a", "u1")
    _added(proc, "c", "Ana likes the colour green, especially olive and sage, for her kitchen walls.")
    later = proc.store.retrieve(["b"])["b"]
    assert (later.status, later.merged_into) == ("merged", "c")
    proc.undo(first)
    got = proc.store.retrieve(["b", "c"])
    assert got["b"].status == "merged" and got["b"].merged_into == "c" and "b" in got["c"].merged_from
    _consistent(proc)


def test_a_pass_memory_merged_on_then_both_undone_does_not_come_back(proc: Processor) -> None:
    """The pass merged pg-1 and pg-2 into its memory, ingest then merged that into a fuller one; undoing the
    pass and then the later merge set the pass's memory current again beside pg-1 and pg-2 (the pass's undo
    had emptied its merged list, which was how the second undo knew to expire it)."""
    plan, _ = runner.make_plan(proc.store, "u1", "proj", cons.DEFAULT_RETENTION, now=NOW)
    outcome, _ = runner.apply_plan(proc.store, proc.embed, plan, {0: "A"})
    assert outcome.decision_id is not None
    new_id = proc.store.retrieve(["pg-1"])["pg-1"].merged_into
    assert new_id is not None
    text = proc.store.retrieve([new_id])[new_id].text
    _added(proc, "fuller", text + " It is backed up nightly to the second region.")
    assert proc.store.retrieve([new_id])[new_id].merged_into == "fuller"
    proc.undo(outcome.decision_id)
    proc.undo(proc.store.retrieve(["fuller"])["fuller"].decision_ids[-1])
    got = proc.store.retrieve([new_id, "pg-1", "pg-2"])
    assert got[new_id].status == "expired"
    assert got["pg-1"].status == got["pg-2"].status == "active"
    _consistent(proc)


def test_a_hard_delete_of_the_memory_holding_a_passs_record_keeps_the_pass_undoable(proc: Processor) -> None:
    """The pass's record lives on the memory it created; deleting that memory for good took the record with
    it, so what the pass superseded and pruned could never be brought back."""
    from dreamstream.streams.core import memories as mem

    plan, _ = runner.make_plan(proc.store, "u1", "proj", cons.DEFAULT_RETENTION, now=NOW)
    outcome, _ = runner.apply_plan(proc.store, proc.embed, plan, {0: "A"})
    assert outcome.decision_id is not None and outcome.pruned and outcome.resolved
    new_id = proc.store.retrieve(["pg-1"])["pg-1"].merged_into
    assert new_id is not None
    hidden = {m.memory_id: m.status for m in proc.store.scroll({"user_id": "u1"})
              if m.status in ("expired", "superseded") and m.memory_id != new_id}
    assert hidden
    assert mem.hard_delete_memory(proc.store, new_id, "u1")
    proc.undo(outcome.decision_id)
    got = proc.store.retrieve(sorted(hidden))
    assert {mid: m.status for mid, m in got.items()} == dict.fromkeys(hidden, "active")
    record = consolidation_record(proc, outcome.decision_id)
    assert new_id in record["deleted"] and record["undone"]
    _consistent(proc)


def consolidation_record(proc: Processor, decision_id: str) -> dict[str, Any]:
    for holder in proc.store.scroll({"decision_ids": decision_id}):
        for rec in holder.decisions:
            if rec.get("decision_id") == decision_id:
                return rec
    raise KeyError(decision_id)


def test_a_passs_memory_can_be_hard_deleted_after_what_it_merged(proc: Processor) -> None:
    """Moving the pass's record to a memory it touched made that memory the change's only update while the
    deleted one stayed its holder: "its holder cannot be deleted", and the memory's text stayed stored."""
    from dreamstream.streams.core import memories as mem

    plan, _ = runner.make_plan(proc.store, "u1", "proj", cons.DEFAULT_RETENTION, now=NOW)
    outcome, _ = runner.apply_plan(proc.store, proc.embed, plan, {0: "A"})
    new_id = proc.store.retrieve(["pg-1"])["pg-1"].merged_into
    assert outcome.decision_id is not None and new_id is not None
    for mid in ("pg-1", "pg-2", new_id):
        assert mem.hard_delete_memory(proc.store, mid, "u1")
    assert proc.store.retrieve(["pg-1", "pg-2", new_id]) == {}
    proc.undo(outcome.decision_id)  # the rest of the pass (its resolve and prunes) still comes back
    assert consolidation_record(proc, outcome.decision_id)["undone"]
    _consistent(proc)


def test_an_access_event_read_again_is_counted_once_per_memory(proc: Processor) -> None:
    """memory.accessed offsets are committed about every second: after a crash the same events were counted
    again (461 reads for 400 events), and a crash inside one event counted some of its memories twice."""
    assert runner.record_access(proc.store, ["pg-1", "pg-2"], "2026-11-01T00:00:00Z", (3, 10)) == 2
    assert runner.record_access(proc.store, ["pg-1", "pg-2"], "2026-11-01T00:00:00Z", (3, 10)) == 0  # read again
    proc.store.update("pg-2", {"access": {}})  # as if the crash came between its two memories' writes
    assert runner.record_access(proc.store, ["pg-1", "pg-2"], "2026-11-01T00:00:00Z", (3, 10)) == 1
    assert runner.record_access(proc.store, ["pg-1"], "2026-11-02T00:00:00Z", (3, 11)) == 1  # the next one counts
    got = proc.store.retrieve(["pg-1"])["pg-1"].access
    assert got["count"] == 2 and len(got["pending"]) == 2
    assert runner.record_access(proc.store, ["pg-1"], "2026-11-03T00:00:00Z") == 1  # no position (a CLI read)


def test_a_late_event_with_an_older_date_is_not_the_likely_winner(edge_store: Any, embedder: Any, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Events out of order (an audit): the April job arrived first, the January one after it. Ingest held the
    pair for review with the later arrival as A, and the plan named A, the January job, the likely winner, so
    an approval without answers made January current over April. Now ingest reads the pair the way round it
    was said and the January job is history on arrival (`supersede_new`): the pass has nothing to resolve.
    (A pair ingest leaves to a person names the later-said one the likely winner: test_precision.py.)"""
    monkeypatch.setenv("DREAM_DATA_DIR", str(tmp_path / "data"))
    rows = [{"type": "memory.added", "event_id": "e-o2", "memory_id": "om2", "user_id": "ola",
             "text": "Ola started a new job as a nurse at CUF Descobertas.", "created_at": "2026-04-01T10:00:00Z"},
            {"type": "memory.added", "event_id": "e-o1", "memory_id": "om1", "user_id": "ola",
             "text": "Ola works as a nurse at Santa Maria hospital.", "created_at": "2026-01-08T10:00:00Z"}]
    p = Processor(edge_store, embedder)
    for r in rows:
        p.process([Incoming(raw=json.dumps(r).encode())])
    got = edge_store.retrieve(["om1", "om2"])
    assert (got["om2"].status, got["om1"].status, got["om1"].superseded_by) == ("active", "superseded", "om2")
    details, _ = runner.control(p, "consolidate.run", {"user": "ola"}, None)
    assert details["conflicts"] == []
