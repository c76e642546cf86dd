"""A `dream` command after a crash or a full disk, as an operator meets it: every command that writes
finishes a change a killed command left half-applied before it decides anything, and a synthesis run
that could not store its patterns does not count as run.

The kill is the real one (`DREAM_FAULT_AT`: SIGKILL right after the named store write); the full disk
is `DREAM_FAULT_UNWRITABLE`. No broker is reachable (status events go to the store's outbox file)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from dreamstream.schemas.memory import Memory
from dreamstream.streams.core import changes
from dreamstream.streams.store import EdgeStore
from tests.unit.test_consolidation import memories
from tests.unit.test_synthesis_runner import events, patterns

DREAM = str(Path(sys.executable).with_name("dream"))
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "KAFKA_BOOTSTRAP": "127.0.0.1:1"}

NEAR_REPEATS = [  # two groups of restatements and three unrelated facts: full consolidation merges in each
    (f"r{i}", text, f"2026-01-0{i}T10:00:00Z", {"type": "user_fact", "confidence": 0.9}) for i, text in enumerate((
        "Noor lives in Leeds.", "Noor lives in Leeds, England.", "Noor lives in Leeds with her two dogs.",
        "Noor's home is in Leeds.", "Noor swims on Sundays.", "Noor swims every Sunday morning.",
        "Noor swims on Sundays at the lido.", "Noor's favourite fruit is mango.", "Noor works as a pharmacist.",
    ), start=1)]
NEAR_REPEATS.append(("r10", "Noor drives a blue Skoda.", "2026-01-10T10:00:00Z",
                     {"type": "user_fact", "confidence": 0.9}))


def dream(*args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DREAM, *args], capture_output=True, text=True, timeout=300, env={**ENV, **(env or {})},
                          input=stdin)


def seed(path: Path, rows: list[Memory]) -> str:
    store = EdgeStore(path)
    store.upsert(rows)
    store.flush()
    store.close()
    return str(path)


def links(path: str) -> dict[str, tuple[Any, ...]]:
    """Statuses, links (as lists: a source listed twice shows) and open intents."""
    store = EdgeStore(path)
    try:
        return {m.memory_id: (m.status, m.merged_into, list(m.merged_from), m.superseded_by, list(m.supersedes),
                              bool(m.pending)) for m in store.scroll()}
    finally:
        store.close()


def test_status_events_an_earlier_version_kept_beside_the_store_are_sent_first(tmp_path: Path, embedder: Any) -> None:
    """Earlier versions kept unsent status events in `status-outbox.jsonl` beside the store's folder, which
    nothing read after an upgrade (an upgrade audit: a pass's events were never sent, its undo's were)."""
    from dreamstream.schemas.events import status_event

    clean = seed(tmp_path / "store", memories(embedder, NEAR_REPEATS, user="noor", app=None))
    legacy = tmp_path / "status-outbox.jsonl"
    older = [status_event(f"d-old-{i}", f"m-old-{i}", "noor", "active", "expired", None, "consolidate_prune", {})
             for i in range(2)]
    legacy.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in older))
    ran = dream("consolidate", "--full", "--user", "noor", "--store", clean)
    assert ran.returncode == 0, ran.stderr
    kept = changes.kept_events(f"{clean}/status-outbox.jsonl")
    merged = sum(1 for v in links(clean).values() if v[0] == "merged")
    assert merged >= 2 and len(kept) == merged + 2
    assert [e["decision_id"] for e in kept[:2]] == ["d-old-0", "d-old-1"]  # the older ones first
    assert f"no broker reachable: {merged + 2} status events kept in {clean}/status-outbox.jsonl" in ran.stderr
    assert not legacy.exists()


def test_an_earlier_versions_outbox_beside_several_stores_is_left_for_the_right_one(tmp_path: Path) -> None:
    """A re-audit: the old file was taken in by whichever store beside it was opened first (a scratch store's
    `dream stats`), and then sent or erased only with that one. The file does not say whose events it holds."""
    import shutil

    from dreamstream.schemas.events import status_event

    for name in ("a", "scratch"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "edge_config.json").write_text("{}")
    legacy = tmp_path / "status-outbox.jsonl"
    legacy.write_bytes(orjson.dumps(status_event("d-1", "m-1", "ana", "active", "expired", None, "consolidate_prune",
                                                 {})) + b"\n")
    path = changes.outbox_path(str(tmp_path / "scratch"), server=False)
    assert legacy.exists() and not os.path.exists(path)  # two stores: left, with a warning
    shutil.rmtree(tmp_path / "scratch")
    path = changes.outbox_path(str(tmp_path / "a"), server=False)
    assert not legacy.exists() and [e["decision_id"] for e in changes.kept_events(path)] == ["d-1"]


def test_full_consolidation_killed_then_run_again_ends_as_one_clean_run(tmp_path: Path, embedder: Any) -> None:
    rows = memories(embedder, NEAR_REPEATS, user="noor", app=None)
    clean = seed(tmp_path / "clean", rows)
    ran = dream("consolidate", "--full", "--user", "noor", "--store", clean)
    assert ran.returncode == 0
    expected = links(clean)
    merged = sum(1 for v in expected.values() if v[0] == "merged")
    assert merged >= 2  # the scenario merges
    # Its merges' status events are published (here: no broker, so kept in the outbox file), not left unsent.
    assert f"no broker reachable: {merged} status events kept in {clean}/status-outbox.jsonl" in ran.stderr
    # Inside the store (an audit found them beside it: outside a backup, an erase and `compact`), for the worker
    # or the next command that reaches a broker to send first.
    assert len(changes.kept_events(f"{clean}/status-outbox.jsonl")) == merged
    assert "Unable connect" not in ran.stderr  # the Kafka client's own log line stays out of the answer
    opened = EdgeStore(clean)
    assert not list(opened.scroll({"outbox_state": "unsent"}))
    opened.close()

    store = seed(tmp_path / "killed", rows)
    killed = dream("consolidate", "--full", "--user", "noor", "--store", store, env={"DREAM_FAULT_AT": "stored:1"})
    assert killed.returncode == -9
    assert any(v[5] for v in links(store).values())  # the kill left an intent
    again = dream("consolidate", "--full", "--user", "noor", "--store", store)
    assert again.returncode == 0, again.stderr
    # Before the fix the rerun decided again over the half-applied merge: a source listed twice.
    assert links(store) == expected


def test_a_replay_finishes_a_killed_pass_before_it_ingests(tmp_path: Path, embedder: Any) -> None:
    store = seed(tmp_path / "store", memories(embedder))
    killed = dream("consolidate", "--user", "u1", "--app", "proj", "--store", store, stdin="a\ny\n",
                   env={"DREAM_FAULT_AT": "stored:1"})
    assert killed.returncode == -9
    assert any(v[5] for v in links(store).values())
    event = {"type": "memory.added", "event_id": "e-late", "memory_id": "late-1", "user_id": "u1", "app_id": "proj",
             "text": "Noor prefers tea to coffee.", "created_at": "2026-06-01T10:00:00Z",
             "metadata": {"type": "preference", "confidence": 0.9}}
    (tmp_path / "late.jsonl").write_bytes(orjson.dumps(event) + b"\n")
    out = dream("replay", str(tmp_path / "late.jsonl"), "--store", store)
    assert out.returncode == 0, out.stderr
    # The killed pass is named with its undo (the id printed by the killed command was all that named it).
    pass_id = re.search(r"pass (cons-[0-9a-f]+)", killed.stderr).group(1)  # type: ignore[union-attr]
    assert "finished an interrupted change (" in out.stderr and f"(undo it with: dream undo {pass_id})" in out.stderr
    after = links(store)
    assert not any(v[5] for v in after.values()) and after["late-1"][0] == "active"
    canonical = [k for k, v in after.items() if v[2]]
    assert canonical and all(after[s][1] == canonical[0] for s in after[canonical[0]][2])


def test_a_synthesis_run_that_could_not_store_its_patterns_is_run_again(tmp_path: Path) -> None:
    """Before the fix the failed run was saved as done: the scheduled run skipped the user for a week."""
    feed = tmp_path / "events.jsonl"
    feed.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events("u1")))
    store = str(tmp_path / "store")
    assert dream("replay", str(feed), "--store", store).returncode == 0
    assert dream("synthesis", "enable", "--boundary", "2025-01-01T00:00:00Z", "--store", store).returncode == 0
    flag = tmp_path / "disk-full"
    flag.touch()
    failed = dream("synthesize", "--all", "--now", "--store", store, env={"DREAM_FAULT_UNWRITABLE": str(flag)})
    assert failed.returncode == 1 and "Permission denied" in failed.stderr
    flag.unlink()
    scheduled = dream("synthesize", "--all", "--store", store)  # not forced: the cadence gate applies
    assert scheduled.returncode == 0, scheduled.stderr
    assert "not_due" not in scheduled.stdout
    opened = EdgeStore(store)
    try:
        assert patterns(opened)
    finally:
        opened.close()
