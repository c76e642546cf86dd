"""Unit tests of the Faust agents with `agent.test_context()`: events go straight into the agent's
channel (no consumer group, no worker process), while the store, the model and the topics the
agent writes to are real (an embedded store in tmp_path, the packaged model, the local broker)."""

from __future__ import annotations

import asyncio
import base64
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import pytest_asyncio

from dreamstream.schemas.memory import Memory
from dreamstream.streams.core.ingest import Incoming, Processor
from dreamstream.streams.dev.localrun import consume_all
from dreamstream.streams.store import EdgeStore
from dreamstream.streams.worker import app as appmod
from dreamstream.streams.worker import ingest as ingest_mod
from tests.helpers import event, line

# The Faust app and its producer belong to one event loop: every test here shares the module's.
pytestmark = [pytest.mark.kafka, pytest.mark.asyncio(loop_scope="module")]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def producer(kafka: str) -> AsyncIterator[None]:
    """The app's own producer, on the real broker, with the topics the agents write to."""
    await appmod.app.producer.start()
    for topic in (appmod.status_topic, appmod.dead_letter_topic, appmod.patterns_topic):
        await topic.maybe_declare()
    yield
    await appmod.app.producer.stop()


@pytest_asyncio.fixture(loop_scope="module")
async def proc(producer: None, tmp_path: Path, embedder: Any) -> AsyncIterator[Processor]:
    """The worker's processor swapped for one on a fresh store."""
    saved = dict(appmod._runtime)
    processor = Processor(EdgeStore(tmp_path / "store"), embedder)
    appmod._runtime["processor"] = processor
    try:
        yield processor
    finally:
        processor.store.close()
        appmod._runtime.clear()
        appmod._runtime.update(saved)


async def wait_until(pred: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.1)


def memory(proc: Processor, memory_id: str) -> Memory:
    found = proc.store.retrieve([memory_id])
    assert found, f"{memory_id} not stored"
    return found[memory_id]


async def test_ingest_agent_supersedes_in_event_order(kafka: str, proc: Processor) -> None:
    user = f"agent-{uuid.uuid4().hex[:8]}"
    async with ingest_mod.ingest.test_context() as agent:
        await agent.put(key=user.encode(), value=line(event(1, user, "User lives in Lisbon.")), wait=False)
        await agent.put(key=user.encode(), value=line(event(2, user, "I moved to Berlin last month.", day=2)),
                        wait=False)
        await wait_until(lambda: len(proc.store.retrieve([f"m-{user}-2"])) == 1)
    old, new = memory(proc, f"m-{user}-1"), memory(proc, f"m-{user}-2")
    assert (old.status, old.superseded_by) == ("superseded", new.memory_id)
    assert new.status == "active" and old.memory_id in new.supersedes
    status = await consume_all(kafka, appmod.status_topic.get_topic_name(), expect=1,
                               keep=lambda r: r.key == user.encode())
    assert [(s["memory_id"], s["from_status"], s["to_status"]) for s in status] == [
        (old.memory_id, "active", "superseded")
    ]
    assert status[0]["evidence"], "a status event carries the decision's evidence"


async def test_ingest_agent_dead_letters_bad_records_and_keeps_going(kafka: str, proc: Processor) -> None:
    user = f"agent-{uuid.uuid4().hex[:8]}"
    bad = [b"\xff\xfe " + user.encode(), b'{"type": "memory.added", "user_id": "' + user.encode() + b'"}']
    async with ingest_mod.ingest.test_context() as agent:
        for raw in bad:
            await agent.put(key=user.encode(), value=raw, wait=False)
        await agent.put(key=user.encode(), value=line(event(1, user, "Prefers tea over coffee.")), wait=False)
        await wait_until(lambda: len(proc.store.retrieve([f"m-{user}-1"])) == 1)
    assert proc.store.count({"user_id": user}) == 1
    # Dead letters are unkeyed: ours are the ones carrying our original bytes.
    ours = await consume_all(kafka, appmod.dead_letter_topic.get_topic_name(), expect=2,
                             keep=lambda r: base64.b64decode(orjson.loads(r.value)["original_b64"]) in bad)
    assert sorted(dl["reason"] for dl in ours) == ["missing_field", "undecodable"], ours
    assert all(dl["topic"] and dl["offset"] is not None for dl in ours)


async def test_control_agent_applies_once_and_bookkeeping_counts(kafka: str, proc: Processor) -> None:
    """The control agent turns synthesis on (a table write), answers once; bookkeeping then counts eligible facts."""
    from dreamstream.schemas.control import command
    from dreamstream.streams.worker import control as ctl
    from dreamstream.streams.worker import synthesis as sw

    await ctl.replies_topic.maybe_declare()
    user = f"agent-{uuid.uuid4().hex[:8]}"
    project = f"p-{user}"
    body = orjson.dumps(command("synthesis.enable", {"project": project, "boundary": "2026-01-01T00:00:00Z"}))
    async with ctl.control.test_context() as agent:
        await agent.put(key=b"c", value=body, wait=False)
        await agent.put(key=b"c", value=body, wait=False)  # redelivered: no second effect, no second reply
        await wait_until(lambda: sw.projects_table.get(project) is not None)
    assert sw.projects_table[project] == {"enabled": True, "boundary": "2026-01-01T00:00:00Z"}
    cid = orjson.loads(body)["id"]
    answers = await consume_all(kafka, ctl.replies_topic.get_topic_name(), expect=2, timeout=5,
                                keep=lambda r: r.key == cid.encode())
    assert [a["outcome"] for a in answers] == ["ok"]

    evs = [event(1, user, "Runs 40 km a week.", project_id=project),
           event(2, user, "Logs rides on Strava.", project_id=project, app_id="fitness-app"),  # app-scoped
           event(3, user, "Lifts weights on Mondays.", project_id=None),  # no project: synthesis off there
           {**event(4, user, "Swims on Fridays.", project_id=project), "created_at": "2025-12-01T09:00:00Z"}]
    async with sw.synthesis_bookkeeping.test_context() as agent:
        for e in evs:
            await agent.put(key=user.encode(), value=line(e), wait=False)
        await agent.put(key=user.encode(), value=b"{broken", wait=False)  # ingest dead-letters it; skipped here
        await wait_until(lambda: (sw.users_table.get(user) or {}).get("facts") == 4)
    state = sw.users_table[user]
    assert state["facts"] == 4 and state["eligible"] == 1  # only the user-scoped one after the boundary
    # Read again from the start after a crash (the offsets restart at 0 in a new context), then one new record:
    # the redelivered ones count once, the new one counts.
    later = event(5, user, "Rows on Saturdays.", project_id=project)
    async with sw.synthesis_bookkeeping.test_context() as agent:
        for value in [*(line(e) for e in evs), b"{broken", line(later)]:
            await agent.put(key=user.encode(), value=value, wait=False)
        await wait_until(lambda: (sw.users_table.get(user) or {}).get("offset") == len(evs) + 1)
    state = sw.users_table[user]
    assert state["facts"] == 5 and state["eligible"] == 2
    assert not sw.due(state, "2026-02-01T00:00:00Z", 7.0)  # under 20 memories
    assert sw.due({**state, "facts": 20}, "2026-02-01T00:00:00Z", 7.0)
    assert not sw.due({**state, "facts": 20, "checked": state["eligible"]}, "2026-02-01T00:00:00Z", 7.0)  # nothing new
    assert not sw.due({**state, "facts": 20, "last_run": "2026-01-30T00:00:00Z"}, "2026-02-01T00:00:00Z", 7.0)
    # An audit: enabling a project with a past boundary never ran for a user whose memories were all stored
    # already (nothing new was counted): a change of the settings since the user's last check is new too.
    checked = {**state, "facts": 20, "checked": state["eligible"], "settings_seen": "before"}
    assert sw.due(checked, "2026-02-01T00:00:00Z", 7.0, "after")
    assert not sw.due(checked, "2026-02-01T00:00:00Z", 7.0, "before")
    assert sw.settings_digest({"a": {"enabled": True, "boundary": "x"}}) != sw.settings_digest({})
    # ... and a resent event (counted, stored once) held the user 10 minutes: ingest's offset says it is done.
    sw._runtime["stored_upto"] = {7: 41}
    assert not sw.ingest_behind(user, {"partition": 7, "offset": 40, "facts": 10**6, "last_event_at": time.time()})
    assert sw.ingest_behind(user, {"partition": 7, "offset": 41, "facts": 0, "last_event_at": time.time()})
    sw._runtime.pop("stored_upto")


async def test_a_users_command_is_forwarded_to_its_partition_and_run_there_once(
        kafka: str, proc: Processor, monkeypatch: pytest.MonkeyPatch) -> None:
    """erase is not run where dream.control is read: it goes, keyed by the user, to dream.control.users, whose
    agent (on the owner of the user's partition) runs it once however often it arrives, and answers once; a
    record keyed by another user is refused there and changes nothing. Run, it puts one `user.erase` record in
    the user's partition of memory.added (ingest, not running here, erases there: the answer says queued)."""
    from dreamstream.schemas.control import command
    from dreamstream.streams.worker import control as ctl

    monkeypatch.setattr(ingest_mod, "settings", ingest_mod.settings.model_copy(update={"erase_wait_seconds": 0.5}))
    await appmod.memory_added_topic.maybe_declare()
    await ctl.replies_topic.maybe_declare()
    await ctl.user_commands_topic.maybe_declare()
    user, other = f"fw-{uuid.uuid4().hex[:8]}", f"fw-{uuid.uuid4().hex[:8]}"
    proc.process([Incoming(line(event(1, user, "Lives in Porto."))), Incoming(line(event(1, other, "Lives in Faro.")))])
    body = orjson.dumps(command("erase", {"user": user}))
    cid = orjson.loads(body)["id"]
    async with ctl.control.test_context() as agent:
        await agent.put(key=cid.encode(), value=body, wait=True)
        # put(wait=True) returns when the event enters a sink-less agent's stream, not when it is handled
        await wait_until(lambda: ctl.seen_table.get(cid) is not None)
    assert memory(proc, f"m-{user}-1").user_id == user  # not run where the control topic is read
    forwarded = await consume_all(kafka, ctl.user_commands_topic.get_topic_name(), expect=10**6, timeout=5,
                                  keep=lambda r: r.key == user.encode())
    assert [r["id"] for r in forwarded] == [cid]

    wrong = orjson.dumps(command("erase", {"user": other}))
    async with ctl.user_commands.test_context() as agent:
        await agent.put(key=user.encode(), value=body, wait=True)
        await agent.put(key=user.encode(), value=body, wait=True)  # forwarded twice: run and answered once
        await agent.put(key=user.encode(), value=wrong, wait=True)  # under another user's key
        await wait_until(lambda: ctl.owner_seen_table.get(orjson.loads(wrong)["id"]) is not None)
    erases = await consume_all(kafka, appmod.memory_added_topic.get_topic_name(), expect=10**6, timeout=5,
                               keep=lambda r: r.key in (user.encode(), other.encode()))
    assert [(e["type"], e["user_id"], e["request"]) for e in erases] == [("user.erase", user, cid)]
    proc.process([Incoming(orjson.dumps(e), key=user.encode()) for e in erases])  # what ingest does with it
    assert not proc.store.retrieve([f"m-{user}-1"]) and proc.store.retrieve([f"m-{other}-1"])
    answers = await consume_all(kafka, ctl.replies_topic.get_topic_name(), expect=10**6, timeout=5,
                                keep=lambda r: r.key in (cid.encode(), orjson.loads(wrong)["id"].encode()))
    assert [(a["id"], a["outcome"]) for a in answers] == [(cid, "ok"), (orjson.loads(wrong)["id"], "error")]
    assert answers[0]["details"]["erased"] == "queued" and "another user's key" in answers[1]["details"]["error"]


async def test_an_approval_applied_before_a_crash_is_answered_ok_when_read_again(kafka: str, proc: Processor) -> None:
    """A worker applied an approval (its plan file gone) and died before replying: the command read again (by
    the control agent and by the owner) finds its user from the pass it applied, and is answered ok from it."""
    from dreamstream.schemas.control import command
    from dreamstream.streams.core import consolidation as cr
    from dreamstream.streams.worker import control as ctl

    await ctl.replies_topic.maybe_declare()
    await ctl.user_commands_topic.maybe_declare()
    user = f"ap-{uuid.uuid4().hex[:8]}"
    data_dir = appmod.settings.data_dir
    proc.process([Incoming(line(event(1, user, "Was halfway through the login refactor.", mtype="session_state")))])
    plan_id = cr.control(proc, "consolidate.run", {"user": user}, None, data_dir)[0]["plan_id"]
    body = orjson.dumps(command("consolidate.approve", {"plan_id": plan_id}))
    cid = orjson.loads(body)["id"]
    cr.control(proc, "consolidate.approve", {"plan_id": plan_id}, None, data_dir, None, cid)  # then the crash
    assert cr.plan_user(data_dir, plan_id) is None
    async with ctl.control.test_context() as agent:
        await agent.put(key=cid.encode(), value=body, wait=True)
        await wait_until(lambda: ctl.seen_table.get(cid) is not None)  # the agent reads the store on its thread
    async with ctl.user_commands.test_context() as agent:
        await agent.put(key=user.encode(), value=body, wait=True)
        await wait_until(lambda: ctl.owner_seen_table.get(cid) is not None)
    forwarded = await consume_all(kafka, ctl.user_commands_topic.get_topic_name(), expect=10**6, timeout=5,
                                  keep=lambda r: r.key == user.encode())
    answers = await consume_all(kafka, ctl.replies_topic.get_topic_name(), expect=10**6, timeout=5,
                                keep=lambda r: r.key == cid.encode())
    assert [r["id"] for r in forwarded] == [cid], answers
    assert [(a["outcome"], a["details"].get("approved"), a["details"].get("pruned")) for a in answers] == [
        ("ok", True, 1)]


async def test_scheduled_pass_runs_when_due_and_once_per_firing(proc: Processor,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The crontab timer's step: a due schedule runs `--auto` for its scope and records the run."""
    from datetime import UTC, datetime, timedelta

    from dreamstream.streams.core.ingest import Incoming
    from dreamstream.streams.worker import consolidation as cw

    monkeypatch.setattr(cw, "_owned", lambda: None)  # no consumer here: this process stands for the owner
    table: dict[str, Any] = {}  # the GlobalTable's contents; outside a stream event Faust refuses writes
    monkeypatch.setattr(cw, "schedules_table", table)

    await cw.schedule_updates_topic.maybe_declare()
    user = f"sx-{uuid.uuid4().hex[:6]}"
    proc.process([Incoming(line(event(1, user, "Was halfway through the login refactor.", mtype="session_state")))])
    entry = cw.schedule_command("consolidate.schedule", {"user": user, "schedule": "daily"})
    sid = entry["schedule_id"]
    assert await cw.run_due(datetime.now(UTC)) == []  # registered just now: not due until 03:00
    two_days_ago = (datetime.now(UTC) - timedelta(days=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    table[sid] = {**entry, "registered_at": two_days_ago}
    [done] = await cw.run_due(datetime.now(UTC))
    assert done["mode"] == "auto" and done["pruned"] == 1
    assert done["line"] == f"[dream --auto] project={user}  merged=0  pruned=1  conflicts_skipped=0  merges_held=0"
    assert await cw.run_due(datetime.now(UTC)) == []  # the same firing never runs twice
    # The timer's update goes to the table through its own topic (tables change inside stream events).
    updates = await consume_all(appmod.settings.bootstrap_servers, cw.schedule_updates_topic.get_topic_name(), 1,
                                20, keep=lambda r: r.key == sid.encode())
    assert updates[-1]["firings"] == 1 and updates[-1]["last_run"]["pruned"] == 1
    assert proc.store.retrieve([f"m-{user}-1"])[f"m-{user}-1"].status == "expired"
    assert cw.schedule_command("schedule.remove", {"schedule_id": sid})["removed"]
    assert sid not in [e["schedule_id"] for e in cw.schedule_command("schedule.list", {})["schedules"]]


async def test_an_erase_command_read_again_after_its_erase_ran_sends_nothing(
        kafka: str, producer: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker died after ingest erased the user but before the command was answered: the command read
    again sent a second `user.erase`, which would also take the adds the user made in between."""
    from dreamstream.streams.core import changes
    from dreamstream.streams.core.ingest import erase_intent

    monkeypatch.setattr(ingest_mod, "settings", ingest_mod.settings.model_copy(
        update={"data_dir": str(tmp_path), "erase_wait_seconds": 0.5}))
    await appmod.memory_added_topic.maybe_declare()
    user, request = f"er-{uuid.uuid4().hex[:8]}", f"c-{uuid.uuid4().hex[:8]}"
    changes.write_durably(erase_intent(str(tmp_path / "erase"), request), orjson.dumps({"user": user, "deleted": 3}))
    again = await ingest_mod.request_erase(user, request, "ops")
    assert again == {"user": user, "deleted": 3, "erased": True, "request": request}
    sent = await consume_all(kafka, appmod.memory_added_topic.get_topic_name(), expect=10**6, timeout=3,
                             keep=lambda r: r.key == user.encode())
    assert sent == []
    first = await ingest_mod.request_erase(user, None, "ops")  # a new request is sent as ever
    assert first["erased"] == "queued"
    # Read again while its record waits behind the user's adds (no ingest runs here): not sent twice.
    assert (await ingest_mod.request_erase(user, first["request"], "ops"))["erased"] == "queued"
    sent = await consume_all(kafka, appmod.memory_added_topic.get_topic_name(), expect=10**6, timeout=3,
                             keep=lambda r: r.key == user.encode())
    assert [e["request"] for e in sent] == [first["request"]]
