"""Through the real broker and a real `dream worker`: ops commands on `dream.control` with their
replies, settings that survive a restart, and synthesis run by the worker's timer with pattern
events on `memory.patterns` and run records on `dream.synthesis.runs`."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest

from dreamstream.schemas.control import command
from dreamstream.schemas.events import status_event
from dreamstream.streams.core import changes
from dreamstream.streams.dev.localrun import WorkerProcess, consume_all, produce
from tests.helpers import chat_server
from tests.unit.test_synthesis_runner import events as synth_events
from tests.unit.test_theme_reader import TEXTS, THREAD, ThemeChat

pytestmark = pytest.mark.kafka


@pytest.fixture
def worker(kafka: str, unique: str, tmp_path: Path) -> Iterator[WorkerProcess]:
    w = WorkerProcess(kafka, f"ops-{unique}", tmp_path, extra_env={"DREAM_SYNTHESIS_CHECK_SECONDS": "1",
                                                                   "DREAM_ERASE_WAIT_SECONDS": "5"})
    yield w
    w.stop()


def dream_control(w: WorkerProcess, *args: str) -> tuple[int, dict[str, Any]]:
    """`dream control ...` as a person at a shell would run it, against the worker's topics."""
    dream = str(Path(sys.executable).with_name("dream"))
    out = subprocess.run([dream, "control", *args, "--timeout", "60"], env=w.env, capture_output=True, timeout=120)
    assert out.stdout, out.stderr.decode()[-2000:]
    return out.returncode, orjson.loads(out.stdout)


def replies(w: WorkerProcess, command_id: str, expect: int = 1, timeout: float = 10) -> list[dict[str, Any]]:
    return asyncio.run(consume_all(w.kafka, w.topics["replies"], expect, timeout,
                                   keep=lambda r: r.key == command_id.encode()))


def send_raw(w: WorkerProcess, records: list[bytes]) -> None:
    asyncio.run(produce(w.kafka, w.topics["control"], records))


def wait(pred: Any, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("not reached in time")
        time.sleep(0.5)


def test_control_commands_replies_and_settings_survive_restart(worker: WorkerProcess) -> None:
    worker.start()
    rc, enabled = dream_control(worker, "synthesis.enable", "project=demo", "boundary=2025-01-01T00:00:00Z")
    assert rc == 0 and enabled["outcome"] == "ok" and enabled["details"]["boundary"] == "2025-01-01T00:00:00Z"
    rc, retention = dream_control(worker, "retention.set", 'policies={"session_state": 30, "scratch": null}')
    assert rc == 0 and retention["details"]["retention"] == {"session_state": 30, "scratch": None}

    # The same command id twice: applied once, answered once.
    body = command("synthesis.disable", {"project": "other"}, command_id="repeat-1")
    send_raw(worker, [orjson.dumps(body), orjson.dumps(body)])
    # Malformed and unknown commands: a rejected reply each and a dead letter, nothing changed.
    send_raw(worker, [b'{"type": "dream.control", "id": "bad-1", "command": "reboot"}',
                      b'{"type": "dream.control", "id": "bad-2", "command": "undo", "args": {}}',
                      orjson.dumps({**body, "args": {"project": "third"}})])  # id reused for other content
    assert len(replies(worker, "repeat-1", expect=3)) == 2  # the original's and the reuse's refusal
    (bad1,) = replies(worker, "bad-1")
    (bad2,) = replies(worker, "bad-2")
    assert (bad1["outcome"], bad1["details"]["reason"]) == ("rejected", "unknown_command")
    assert (bad2["outcome"], bad2["details"]["reason"]) == ("rejected", "missing_field")
    # A body that cannot name its id (cut short, or too big to read): the key does, so the sender gets its
    # reply (an audit: `dream control` with a 70 KB argument timed out and blamed the worker).
    asyncio.run(produce(worker.kafka, worker.topics["control"], [b'{"type": "dream.control", "id": "ba'],
                        keys=[b"bad-3"]))
    (bad3,) = replies(worker, "bad-3")
    assert (bad3["id"], bad3["outcome"], bad3["details"]["reason"]) == ("bad-3", "rejected", "invalid_json")
    dead = asyncio.run(consume_all(worker.kafka, worker.topics["dead"], 4, 20))
    assert sorted(d["reason"] for d in dead) == ["id_reused", "invalid_json", "missing_field", "unknown_command"]

    rc, failed = dream_control(worker, "undo", "decision_id=no-such-decision")
    assert rc == 1 and failed["outcome"] == "error" and "no-such-decision" in failed["details"]["error"]

    worker.stop()
    worker.start()
    rc, shown = dream_control(worker, "settings.show")
    assert rc == 0
    assert shown["details"]["synthesis"]["demo"] == {"enabled": True, "boundary": "2025-01-01T00:00:00Z"}
    assert shown["details"]["synthesis"]["other"]["enabled"] is False
    assert "third" not in shown["details"]["synthesis"]
    assert shown["details"]["retention"] == {"session_state": 30, "scratch": None}


def paused_with_a_record_waiting(w: WorkerProcess, user: str, seconds: float) -> None:
    """Starts `w`, stores one memory of `user`, pauses ingest and sends another, then waits `seconds`."""
    from tests.helpers import event, line

    w.start()
    asyncio.run(produce(w.kafka, w.topics["added"], [line(event(1, user, "Lives in Porto."))]))
    w.wait_for(lambda s: s.get("memories") == 1, timeout=60)
    assert dream_control(w, "ingest.pause")[1]["details"] == {"paused": True}
    time.sleep(3)  # the pause is enforced on the assigned partitions
    asyncio.run(produce(w.kafka, w.topics["added"], [line(event(2, user, "Has two sons."))]))
    time.sleep(seconds)


def test_pause_resume_erase(worker: WorkerProcess) -> None:
    from tests.helpers import event, line

    paused_with_a_record_waiting(worker, "px", 4)
    assert worker.stats()["memories"] == 1  # held back while paused ...
    # ... also by a worker that starts while the pause holds: it fetched before the control timer paused its
    # partitions, and stored what it fetched
    worker.stop()
    asyncio.run(produce(worker.kafka, worker.topics["added"], [line(event(5, "px", "Keeps bees."))]))
    worker.start()
    time.sleep(6)
    assert worker.stats()["memories"] == 1
    assert dream_control(worker, "ingest.resume")[1]["details"] == {"paused": False}
    worker.wait_for(lambda s: s.get("memories") == 3, timeout=60)  # ... and nothing lost
    dream = str(Path(sys.executable).with_name("dream"))
    unconfirmed = subprocess.run([dream, "control", "erase", "user=px"], env=worker.env, capture_output=True,
                                 text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert unconfirmed.returncode == 1 and "add --yes to confirm" in unconfirmed.stderr
    assert worker.stats()["memories"] == 3  # nothing sent
    # What else names px goes with the erasure (an audit found them all kept): a schedule, the status events
    # an offline command kept for a broker, a line of `dream stats`, the synthesis bookkeeping.
    for who in ("px", "py"):
        assert dream_control(worker, "consolidate.schedule", f"user={who}", "schedule=weekly")[0] == 0
    outbox = worker.store_dir / "status-outbox.jsonl"
    kept = [status_event(f"d-{who}", f"m-{who}", who, "active", "merged", None, "consolidate", {})
            for who in ("px", "py")]
    changes.keep_events(str(outbox), kept)
    older = worker.store_dir.parent / "status-outbox.jsonl"  # where an earlier version kept them
    earlier = [status_event(f"d-p-old-{who}", f"m-{who}", who, "active", "expired", None, "consolidate_prune", {})
               for who in ("px", "py")]
    older.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in earlier))
    legacy = worker.store_dir.parent / "store.consolidation-runs.json"  # where an earlier version kept it
    legacy.write_text(json.dumps({"pass": {"type": "pass", "user": "px"}, "light": {"type": "light", "user": "py"}}))
    runs = worker.store_dir / "consolidation-runs.json"
    rc, erased = dream_control(worker, "erase", "user=px", "--yes")
    assert rc == 0 and erased["details"]["deleted"] == 3 and erased["details"]["erased"] is True
    assert worker.read("user=px&include_merged=1")["memories"] == []
    assert [e["decision_id"] for e in changes.kept_events(str(outbox))] == ["d-p-old-py", "d-py"]
    assert not older.exists()
    assert list(json.loads(runs.read_text())) == ["light"] and not legacy.exists()
    deadline = time.monotonic() + 30
    while {e["user"] for e in dream_control(worker, "schedule.list")[1]["details"]["schedules"]} != {"py"}:
        assert time.monotonic() < deadline, "the erased user's schedule stayed"
        time.sleep(1)
    assert "synthesis state of an erased user dropped" in worker.log.read_text()
    # A restart sends what the offline command kept (py's), and forgets it.
    worker.stop()
    worker.start()
    sent = asyncio.run(consume_all(worker.kafka, worker.topics["status"], 2, 30,
                                   keep=lambda r: orjson.loads(r.value).get("decision_id", "").startswith("d-p")))
    assert [e["decision_id"] for e in sent] == ["d-p-old-py", "d-py"] and not outbox.exists()
    audit = asyncio.run(consume_all(worker.kafka, worker.topics["status"], 1, 20,
                                    keep=lambda r: orjson.loads(r.value).get("action") == "erase"))
    assert audit and audit[0]["evidence"]["deleted"] == 3 and "text" not in orjson.dumps(audit[0]).decode()

    # An erase behind an add still queued (ingest paused): before, the erase deleted what was stored and the
    # queued add was stored after it; now it waits its turn in the user's partition and takes the add too.
    asyncio.run(produce(worker.kafka, worker.topics["added"], [line(event(3, "px", "Lives in Lisbon."))]))
    worker.wait_for(lambda s: s.get("memories") == 1, timeout=60)
    assert dream_control(worker, "ingest.pause")[1]["details"] == {"paused": True}
    time.sleep(3)
    asyncio.run(produce(worker.kafka, worker.topics["added"], [line(event(4, "px", "Works as a nurse."))]))
    rc, queued = dream_control(worker, "erase", "user=px", "--yes")
    assert rc == 0 and queued["details"]["erased"] == "queued"
    assert dream_control(worker, "ingest.resume")[1]["details"] == {"paused": False}
    audits = asyncio.run(consume_all(worker.kafka, worker.topics["status"], 2, 60,
                                     keep=lambda r: orjson.loads(r.value).get("action") == "erase"))
    assert [a["evidence"]["deleted"] for a in audits] == [3, 2]
    assert audits[1]["evidence"]["request"] == queued["details"]["request"]
    time.sleep(2)
    assert worker.read("user=px&include_merged=1")["memories"] == []


def test_a_pause_with_records_waiting_is_no_stall(kafka: str, unique: str, tmp_path: Path) -> None:
    """`ingest.pause` while records arrive: /healthz turned 503 `stalled` after a few stall periods (a liveness
    probe restarts the worker, again and again while the pause holds) and stayed so after the resume."""
    w = WorkerProcess(kafka, f"pause-{unique}", tmp_path, extra_env={"DREAM_STALL_SECONDS": "2"})
    try:
        paused_with_a_record_waiting(w, "pz", 10)  # five stall periods with a record waiting
        assert w.health()[0] == 200, w.health()
        assert w.stats()["memories"] == 1
        assert dream_control(w, "ingest.resume")[1]["details"] == {"paused": False}
        wait(lambda: w.stats().get("memories") == 2, timeout=60)  # not w.wait_for: it restarts a stalled worker
        assert w.health()[0] == 200 and "seeking to" not in w.log.read_text()
    finally:
        w.stop()


def test_a_command_the_store_refuses_waits_for_it_and_loses_nothing(kafka: str, unique: str, tmp_path: Path) -> None:
    """A reprocess (and an erase) while the disk refuses writes: before, the reprocess deleted the user's
    memories, failed to write them back and answered `error` for good; the erase deleted anyway. Now the
    delete is refused like every write, and the command waits for the store, as ingest does."""
    from tests.helpers import event, line

    flag = tmp_path / "disk-full"
    w = WorkerProcess(kafka, f"full-{unique}", tmp_path, extra_env={"DREAM_FAULT_UNWRITABLE": str(flag)})
    try:
        w.start()
        texts = ["Lives in Porto.", "Has two sons.", "Plays the cello.", "Reads crime novels."]
        asyncio.run(produce(w.kafka, w.topics["added"], [line(event(i, "rx", t)) for i, t in enumerate(texts)]))
        w.wait_for(lambda s: s.get("memories") == len(texts), timeout=60)
        flag.touch()
        body = command("reprocess", {"user": "rx"}, command_id=f"rp-{unique}")
        send_raw(w, [orjson.dumps(body)])
        time.sleep(4)
        assert not replies(w, body["id"], expect=1, timeout=2)  # no final `error`: it waits
        assert len(w.read("user=rx&include_merged=1")["memories"]) == len(texts)  # nothing deleted meanwhile
        flag.unlink()
        (done,) = replies(w, body["id"], timeout=90)
        assert done["outcome"] == "ok" and done["details"]["memories"] == len(texts)
        assert sorted(m["text"] for m in w.read("user=rx")["memories"]) == sorted(texts)
        assert not list((Path(w.env["DREAM_DATA_DIR"]) / "reprocess").glob("reprocess-*"))  # no backup left
    finally:
        w.stop()


def test_worker_synthesises_on_its_timer_once_per_evidence(worker: WorkerProcess) -> None:
    worker.start()
    rc, _ = dream_control(worker, "synthesis.enable", "boundary=2025-01-01T00:00:00Z")
    assert rc == 0
    evs = synth_events("syn-u") + synth_events("other-u", texts=["Has a cat.", "Likes tea.", "Runs daily."])
    evs.append({**synth_events("scoped-u")[0], "app_id": "chat"})
    asyncio.run(produce(worker.kafka, worker.topics["added"], [orjson.dumps(e) for e in evs]))
    mine = {e["memory_id"] for e in evs if e["user_id"] == "syn-u"}
    pats = asyncio.run(consume_all(worker.kafka, worker.topics["patterns"], 1, 120))
    assert pats, "no pattern event on memory.patterns"
    assert {p["user_id"] for p in pats} == {"syn-u"}  # under 20 memories: no pattern for other-u
    assert all(set(p["sources"]) <= mine and len(p["sources"]) >= 3 for p in pats)
    wait(lambda: any(m["kind"] == "pattern" for m in worker.read("user=syn-u")["memories"]))
    runs = asyncio.run(consume_all(worker.kafka, worker.topics["runs"], 1, 30))
    ran = [r for r in runs if r["ran"]]
    assert ran and ran[0]["user_id"] == "syn-u" and ran[0]["memories_considered"] == len(mine)
    assert ran[0]["themes"] >= 1 and ran[0]["patterns_written"] == len(pats)

    # A restart replays the tables' changelogs: the user is not due again, no second pattern.
    worker.stop()
    worker.start()
    time.sleep(6)
    again = asyncio.run(consume_all(worker.kafka, worker.topics["patterns"], len(pats) + 1, 5))
    assert len(again) == len(pats)
    stored = [m for m in worker.read("user=syn-u&include_merged=1")["memories"] if m["kind"] == "pattern"]
    assert len(stored) == len(pats)


class SlowThemeChat(ThemeChat):
    """The reader's endpoint, holding its answer until the test lets it go (a model taking its time)."""

    release = threading.Event()
    asked = threading.Event()

    def do_POST(self) -> None:  # noqa: N802 - http.server API
        SlowThemeChat.asked.set()
        SlowThemeChat.release.wait(90)
        super().do_POST()


@contextmanager
def reading(kafka: str, name: str, tmp_path: Path, user: str) -> Iterator[WorkerProcess]:
    """A worker with DREAM_SYNTHESIS_THEMES=llm and synthesis on, `user`'s memories sent, its reader asked and
    holding its answer until `SlowThemeChat.release` is set (set on the way out in any case)."""
    SlowThemeChat.release.clear()
    SlowThemeChat.asked.clear()
    ThemeChat.prompts, ThemeChat.systems, ThemeChat.mode, ThemeChat.wording = [], [], "fitness", THREAD
    with chat_server(SlowThemeChat) as url:
        env = {"DREAM_SYNTHESIS_CHECK_SECONDS": "1", "DREAM_SYNTHESIS_THEMES": "llm", "DREAM_LLM_MODEL": "test-model",
               "DREAM_LLM_URL": url, "DREAM_SYNTHESIS_CADENCE": "0"}
        w = WorkerProcess(kafka, name, tmp_path, extra_env=env)
        try:
            w.start()
            assert dream_control(w, "synthesis.enable", "boundary=2025-01-01T00:00:00Z")[0] == 0
            evs = synth_events(user, texts=TEXTS)
            asyncio.run(produce(w.kafka, w.topics["added"], [orjson.dumps(e) for e in evs]))
            assert SlowThemeChat.asked.wait(120), "the reader was never asked"
            yield w
        finally:
            SlowThemeChat.release.set()
            w.stop()


def test_the_worker_groups_with_an_llm_reader_without_holding_up_ingest(kafka: str, unique: str,
                                                                        tmp_path: Path) -> None:
    """DREAM_SYNTHESIS_THEMES=llm in a real worker: while the reader takes its time, events are still stored;
    then its theme becomes the pattern, worded by it, and the run record says who grouped."""
    with reading(kafka, f"reader-{unique}", tmp_path, "rd-u") as w:
        late = {**synth_events("late-u")[0], "text": "Keeps bees on the allotment."}
        asyncio.run(produce(w.kafka, w.topics["added"], [orjson.dumps(late)]))
        wait(lambda: len(w.read("user=late-u")["memories"]) == 1, timeout=60)  # stored while the reader reads
        assert not ThemeChat.prompts  # the reader has not answered yet
        SlowThemeChat.release.set()
        [pat] = asyncio.run(consume_all(w.kafka, w.topics["patterns"], 1, 120))
        assert pat["text"] == THREAD and pat["metadata"]["text_by"] == "llm" and len(pat["sources"]) >= 3
        runs = asyncio.run(consume_all(w.kafka, w.topics["runs"], 1, 30))
        assert [r["themes_by"] for r in runs if r["ran"]] == ["llm"]
        assert all(r["read_digest"] for r in runs if r["ran"])  # what a restarted worker needs not to ask again
        # A memory said again word for word is merged away: the user is due (a new memory arrived), but the
        # evidence is what the reader read, as the worker's table now knows from the run record: not asked.
        first = synth_events("rd-u", texts=TEXTS)[2]
        again = {**first, "event_id": "e-again", "memory_id": "rd-again", "created_at": "2025-06-01T00:00:00Z"}
        asyncio.run(produce(w.kafka, w.topics["added"], [orjson.dumps(again)]))
        runs = asyncio.run(consume_all(w.kafka, w.topics["runs"], 2, 60))
        assert [r["reason"] for r in runs][-1:] == ["unchanged"] and len(ThemeChat.prompts) == 1


def test_a_user_erased_while_the_reader_reads_gets_no_pattern(kafka: str, unique: str, tmp_path: Path) -> None:
    """Erasure during a slow reading: the run's pattern, drawn from erased memories, is dropped before it is
    sent; nothing reaches memory.patterns or the dead letters, and the user stays erased."""
    with reading(kafka, f"erase-{unique}", tmp_path, "er-u") as w:
        req = urllib.request.Request(f"http://127.0.0.1:{w.port}/v1/users/er-u?confirm=er-u", method="DELETE")
        with urllib.request.urlopen(req, timeout=30) as r:
            assert json.loads(r.read())["erased"] is True
        SlowThemeChat.release.set()
        runs = asyncio.run(consume_all(w.kafka, w.topics["runs"], 1, 60))
        assert [r["themes_by"] for r in runs if r["ran"]] == ["llm"]  # the run finished
        assert [r["pattern_ids"] for r in runs if r["ran"]] == [[]]  # and names no pattern it did not send
        assert ThemeChat.prompts  # the reader did answer
        assert not asyncio.run(consume_all(w.kafka, w.topics["patterns"], 1, 5))
        assert not asyncio.run(consume_all(w.kafka, w.topics["dead"], 1, 3))
        assert w.read("user=er-u&include_merged=1")["memories"] == []


def test_consolidation_over_the_control_topic_schedules_and_access(worker: WorkerProcess) -> None:
    """A dry-run plan and its approval, a schedule registered, listed and removed with the CLI, and a
    search through the worker recorded as an access (memory.accessed) of what it returned."""
    from tests.helpers import event, line

    worker.start()
    texts = ["Use PostgreSQL for auth.", "Auth DB is PostgreSQL 15 on port 5432.",
             "Was halfway through the login refactor."]
    evs = [event(i + 1, "cx", t, day=i + 1, mtype="session_state" if i == 2 else "project_decision")
           for i, t in enumerate(texts)]
    asyncio.run(produce(worker.kafka, worker.topics["added"], [line(e) for e in evs]))
    worker.wait_for(lambda s: s.get("memories") == 3, timeout=60)
    rc, plan = dream_control(worker, "consolidate.run", "user=cx", "mode=dry_run")
    assert rc == 0 and plan["details"]["mode"] == "dry_run", plan
    assert plan["details"]["report"].startswith("## Dream — Memory Consolidation Report")
    assert len(plan["details"]["prunes"]) == 1  # the year-old session_state memory (90-day policy)
    rc, approved = dream_control(worker, "consolidate.approve", f"plan_id={plan['details']['plan_id']}")
    assert rc == 0 and approved["details"]["pruned"] == 1
    rc, again = dream_control(worker, "consolidate.approve", f"plan_id={plan['details']['plan_id']}")
    assert rc == 1 and again["outcome"] == "error"  # a plan is applied once

    dream = str(Path(sys.executable).with_name("dream"))
    out = subprocess.run([dream, "consolidate", "--user", "cx", "--app", "proj", "--schedule", "weekly"],
                         env=worker.env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "scheduled sched-" in out.stdout, out.stderr[-2000:]
    sid = out.stdout.split()[1].rstrip(":")
    listed = subprocess.run([dream, "schedule", "list"], env=worker.env, capture_output=True, text=True, timeout=120)
    assert sid in listed.stdout and "weekly" in listed.stdout and "app=proj" in listed.stdout
    subprocess.run([dream, "schedule", "remove", sid], env=worker.env, check=True, capture_output=True, timeout=120)
    listed = subprocess.run([dream, "schedule", "list"], env=worker.env, capture_output=True, text=True, timeout=120)
    assert sid not in listed.stdout and "(no schedules)" in listed.stdout

    hits = worker.read("user=cx&q=which%20database%20for%20auth&limit=1")["memories"]
    assert len(hits) == 1
    assert len(worker.read("user=cx&include_merged=1&limit=2")["memories"]) == 2  # limit without q too
    for bad in ("user=cx&q=x&limit=99999999999999999999", "user=cx&limit=0", "user=%20"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            worker.read(bad)
        assert refused.value.code == 400 and json.loads(refused.value.read())["error"]
    wait(lambda: worker.read("user=cx&include_merged=1")["memories"] and any(
        r.get("access_count") == 1 and r["memory_id"] == hits[0]["memory_id"]
        for r in worker.read("user=cx&include_merged=1")["memories"]), timeout=60)


def test_a_failing_agent_shows_on_healthz_metrics_and_in_dream_control(kafka: str, unique: str,
                                                                       tmp_path: Path) -> None:
    """Leftover changelog topics of another partition count (a Faust table cannot write): the control
    agent refuses each command with the reason instead of crashing on it, the synthesis bookkeeping's
    failure is counted, /healthz says `degraded` with both errors, and a command that gets no reply says
    what the worker reports."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    name = f"sick-{unique}"

    async def leftovers() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(f"dream-{name}-control-seen-changelog", 3, 1),
                                       NewTopic(f"dream-{name}-synthesis-users-changelog", 1, 1)])
        finally:
            await admin.close()

    asyncio.run(leftovers())
    w = WorkerProcess(kafka, name, tmp_path)
    try:
        w.start()
        assert w.health() == (200, {"status": "ok", "ready": True})
        rc, refused = dream_control(w, "synthesis.enable", "project=demo")
        assert rc == 1 and refused["outcome"] == "error"
        assert refused["details"]["error"].startswith("not run: this worker cannot record commands (PartitionsMismatch")
        from tests.helpers import event, line

        asyncio.run(produce(w.kafka, w.topics["added"], [line(event(1, "sy", "Sy plays chess."))]))
        w.wait_for(lambda s: s.get("memories") == 1, timeout=60)  # ingest goes on
        wait(lambda: "synthesis.bookkeeping" in w.health()[1].get("failing", {}), timeout=30)
        status, body = w.health()
        assert status == 200 and body["status"] == "degraded" and set(body["failing"]) == {
            "control", "synthesis.bookkeeping"}
        assert "\n" not in body["failing"]["control"]["error"] and body["failing"]["control"]["errors"] == 1
        with urllib.request.urlopen(f"http://127.0.0.1:{w.port}/metrics", timeout=10) as r:
            scraped = r.read().decode()
        assert 'dreamstream_agent_failing{part="control"} 1.0' in scraped
        assert 'dreamstream_agent_errors_total{part="synthesis.bookkeeping"} 1.0' in scraped
        # A command nobody reads (another control topic): the CLI asks the worker holding the store.
        dream = str(Path(sys.executable).with_name("dream"))
        lost = subprocess.run([dream, "control", "settings.show", "--timeout", "3"], capture_output=True, text=True,
                              env={**w.env, "DREAM_TOPIC_CONTROL": f"nobody-{unique}"}, timeout=60)
        assert lost.returncode == 1 and len(lost.stderr.strip().splitlines()) == 1
        assert f"the worker at http://127.0.0.1:{w.port} reports control failing: PartitionsMismatch" in lost.stderr
    finally:
        w.stop()
