"""Synthesis in the worker: a windowed per-user count of new eligible memories, durable per-user state,
and a timer that decides who is due.

Faust closes windows on wall-clock time and can drop those that close during a rebalance, so nothing
here waits for `on_window_close`. Instead:

- `synthesis_bookkeeping` reads `memory.added` (co-partitioned by user_id) and counts, per user, every
  fact (for the 20-memory gate) and every eligible one (user-scoped, after the project's boundary) in a
  changelogged table, plus a daily tumbling windowed table of eligible memories;
- `synthesis_tick` (a timer) picks the users of this worker's partitions who have new evidence and
  whose cadence has elapsed, runs the pure synthesis step on the store thread, sends the pattern
  events to `memory.patterns` (ingest stores them like any event) and a run record to
  `dream.synthesis.runs`;
- `synthesis_runs_applied` applies each run record back to the per-user table, so every table write
  happens in stream iteration of a co-partitioned topic, and the state survives restarts and
  rebalances in the table's changelog.

Which projects have synthesis on is a global table written by the ops control agent (`control.py`).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from datetime import timedelta
from typing import Any

import faust
import orjson

from dreamstream.agents import synthesis as syn
from dreamstream.schemas.events import USER_ERASE, InvalidEvent, now_iso, parse_memory_event, signed_by
from dreamstream.streams.core import synthesis as runner
from dreamstream.streams.core.judges import pattern_writer_from_settings, theme_reader_from_settings
from dreamstream.streams.worker import health, metrics
from dreamstream.streams.worker.app import _runtime, app, on_store_thread, patterns_topic, processor, settings
from dreamstream.streams.worker.tables import projects_table

log = logging.getLogger("dreamstream.synthesis")

runs_topic = app.topic(settings.topics.synthesis_runs, partitions=settings.topics.partitions,
                       key_type=bytes, value_type=bytes)
bookkeeping_channel = app.topic(settings.topics.memory_added, key_type=bytes, value_type=bytes, acks=False)
"""Acks off, like ingest's: `memory.added` offsets are committed by ingest alone, after the store write."""

users_table = app.Table("synthesis-users", default=None, partitions=settings.topics.partitions)
"""user_id -> {"facts", "eligible", "checked", "last_run", "evidence_used", "project_ids"}."""

eligible_window = app.Table(
    "synthesis-eligible-daily", default=int, partitions=settings.topics.partitions,
).tumbling(timedelta(days=1), expires=timedelta(days=settings.synthesis_cadence_days + 2)).relative_to_now()
"""Eligible memories per user per (wall-clock) day: how much new evidence arrived since a run."""

_inflight: dict[str, float] = {}
"""Users whose run record was sent but not yet applied to the table (no second run meanwhile)."""


def project_settings() -> dict[str, dict[str, Any]]:
    return {str(k): dict(v) for k, v in projects_table.items() if v}


def counts_as_eligible(event: dict[str, Any], projects: dict[str, dict[str, Any]]) -> bool:
    """The same scope rule as `agents.synthesis.eligible`, on a raw event: user-scoped, enabled, after the boundary."""
    if event.get("kind", "fact") != "fact" or any(event.get(k) for k in ("app_id", "agent_id", "run_id")):
        return False
    project = projects.get(event.get("project_id") or runner.DEFAULT_PROJECT)
    if not project or not project.get("enabled"):
        return False
    return str(event.get("created_at", "")) > str(project.get("boundary") or "")


def settings_digest(projects: dict[str, dict[str, Any]]) -> str:
    """What the synthesis settings are now (projects on, their boundaries), for `due`."""
    on = sorted((k, str(v.get("boundary"))) for k, v in projects.items() if v.get("enabled"))
    return hashlib.sha256(orjson.dumps(on)).hexdigest()[:16]


def due(state: dict[str, Any], now: str, cadence_days: float, settings_now: str | None = None) -> bool:
    """Enough facts for the gate, the cadence elapsed, and something new since the last check: eligible facts,
    or the settings (`settings_digest`): memories stored before a project was enabled with a past boundary
    count as evidence, and their user must not wait for a next memory that may never come."""
    if state.get("facts", 0) < syn.MIN_MEMORIES:
        return False
    changed = settings_now is not None and state.get("settings_seen") != settings_now
    if state.get("eligible", 0) <= state.get("checked", 0) and not changed:
        return False
    return syn.is_due(True, syn.MIN_MEMORIES, state.get("last_run"), now, cadence_days)


def _user_record(raw: bytes | None) -> dict[str, Any] | None:
    """A JSON object with a string user_id, else None (what either agent skips)."""
    try:
        body = orjson.loads(raw) if raw is not None else None
    except (orjson.JSONDecodeError, TypeError):
        return None  # ingest dead-letters it, with the reason
    return body if isinstance(body, dict) and isinstance(body.get("user_id"), str) else None


def read_again(state: dict[str, Any], partition: int, offset: int) -> bool:
    """Whether this record of the user was counted already: a user's records all travel in one partition, in
    order, and the table keeps the offset it last counted (restored from its changelog after a crash), so a
    record at or before it is one read again (ingest alone commits `memory.added` offsets)."""
    return state.get("partition") == partition and offset <= state.get("offset", -1)


def forget_user(erase: dict[str, Any]) -> None:
    """An erased user's synthesis state goes with them (their id, the ids of their evidence), read at the same
    place in their partition as ingest reads the erasure; an unsigned one ingest refuses changes nothing."""
    if settings.erase_key is not None and not signed_by(settings.erase_key, erase):
        return
    user = erase["user_id"]
    _inflight.pop(user, None)
    if users_table.get(user) is not None:
        del users_table[user]
        log.info("synthesis state of an erased user dropped")


@app.agent(bookkeeping_channel, concurrency=1)
async def synthesis_bookkeeping(stream: faust.StreamT) -> None:
    """Counts, per user, the facts and the eligible memories that `memory.added` brings."""
    async for event in stream.events():
        try:
            body = _user_record(event.value)
            if body is not None and body.get("type") == USER_ERASE:
                forget_user(body)
                continue
            if body is None or body.get("type") != "memory.added":
                continue  # the ingest agent dead-letters what is malformed
            try:
                parse_memory_event(event.value)
            except InvalidEvent:
                continue  # dead-lettered by ingest: never stored, so never counted
            user = body["user_id"]
            state = dict(users_table.get(user) or {})
            if read_again(state, event.message.partition, event.message.offset):
                continue  # counted before a crash or a rebalance: a redelivered record counts once
            state["last_event_at"] = time.time()
            state["partition"] = event.message.partition
            state["offset"] = event.message.offset
            if body.get("kind", "fact") == "fact":
                state["facts"] = state.get("facts", 0) + 1
            if counts_as_eligible(body, project_settings()):
                state["eligible"] = state.get("eligible", 0) + 1
                eligible_window[user] += 1
            users_table[user] = state  # reassign: only a set reaches the changelog
            health.recovered("synthesis.bookkeeping")
        except Exception as exc:  # a bad record must not stop the partition; one line, no traceback
            health.failed("synthesis.bookkeeping", exc)
            log.warning("synthesis bookkeeping skipped one record: %s: %s", type(exc).__name__, exc)


@app.agent(runs_topic, concurrency=1)
async def synthesis_runs_applied(stream: faust.StreamT) -> None:
    """Applies each run record (dream.synthesis.runs, co-partitioned by user_id) to the user's state."""
    async for event in stream.events():
        try:
            body = _user_record(event.value)
            if body is None:
                continue
            user = body["user_id"]
            _inflight.pop(user, None)
            state = dict(users_table.get(user) or {})
            state["checked"] = body.get("eligible_seen", state.get("checked", 0))
            state["settings_seen"] = body.get("settings_seen", state.get("settings_seen"))
            if body.get("ran"):
                state["last_run"] = body["now"]
                state["evidence_used"] = body.get("evidence_used", [])
                state["read_digest"] = body.get("read_digest")
                state["read_patterns"] = body.get("pattern_ids", []) if body.get("read_digest") else []
            users_table[user] = state
            health.recovered("synthesis.runs")
        except Exception as exc:
            health.failed("synthesis.runs", exc)
            log.exception("could not apply a synthesis run record")


def recent_eligible(user: str, days: int) -> int:
    """Eligible memories of the last `days` daily windows (those not yet expired)."""
    # WindowWrapper.delta() wants a current event (it raises in a timer); read the windows by their ranges.
    table = eligible_window.table
    window = table.window
    assert window is not None  # the table is built windowed (tumbling, daily)
    now = time.time()
    ranges = {r for back in range(max(1, days)) for r in window.ranges(now - back * 86400)}
    return sum(int(table[(user, r)]) for r in ranges)


SETTLE_SECONDS = 600.0
"""How long to wait for ingest to store what bookkeeping counted before running anyway (redeliveries
are counted twice but stored once, so the counts may never meet exactly)."""


def ingest_behind(user: str, state: dict[str, Any]) -> bool:
    """Both agents read memory.added at their own pace: run only on what ingest has stored. Where ingest has
    stored a batch of the user's partition since this worker started, its offset says so exactly (a resent
    event or a hard delete made the counts differ for good, and held the user for SETTLE_SECONDS); before
    that, the counts, for at most SETTLE_SECONDS."""
    done = _runtime.get("stored_upto", {}).get(state.get("partition"))
    if done is not None and state.get("offset") is not None:
        return int(done) <= int(state["offset"])  # the next offset ingest reads: all before it is stored
    if time.time() - float(state.get("last_event_at", 0.0)) > SETTLE_SECONDS:
        return False
    stored = int(app_processor().store.count({"user_id": user, "kind": "fact"}))
    return stored < int(state.get("facts", 0))


def owned_partitions() -> set[int] | None:
    """This worker's memory.added partitions (None outside a running worker, e.g. in unit tests)."""
    consumer = getattr(app, "_consumer", None)
    if consumer is None:
        return None
    return {tp.partition for tp in consumer.assignment() if tp.topic == settings.topics.memory_added}


def load_user(user: str) -> list[Any]:
    """One user's memories with their vectors (call on the store thread)."""
    return list(app_processor().store.scroll({"user_id": user}, with_vectors=True))


def settle(record: runner.RunRecord) -> None:
    """After deciding off the store thread, on it: retire what the run retired and drop the pattern events
    whose sources went meanwhile (an erased user's text must not reach the topics)."""
    store = app_processor().store
    runner.apply(store, [record])
    dropped = runner.drop_unsourced(store, record)
    if dropped:
        log.info("synthesis for %s: %d pattern(s) dropped, their sources were deleted meanwhile", record.user_id,
                 dropped)


def decide_user(user: str, memories: list[Any], state: dict[str, Any], now: str,
                projects: dict[str, dict[str, Any]]) -> tuple[runner.RunRecord, dict[str, Any]]:
    """The step for one user on memories already read: off the store thread, because a configured LLM reader or
    writer may take seconds and ingest must not wait for it. `projects`: read on the event loop, where the
    control agent writes that table."""
    sstate = runner.SynthesisState(projects=projects, users={user: dict(state)})
    record = runner.run_memories(user, memories, app_processor().embed, now, sstate, False,
                                 settings.synthesis_cadence_days,
                                 write_text=pattern_writer_from_settings(settings),
                                 read_themes=theme_reader_from_settings(settings))
    return record, sstate.users.get(user) or {}


def app_processor() -> Any:
    return _runtime["processor"]


@app.timer(interval=settings.synthesis_check_seconds)
async def synthesis_tick() -> None:
    """Who is due, among the users of this worker's partitions; their runs; the records."""
    try:
        await tick()
        health.recovered("synthesis.timer")
    except Exception as exc:  # a timer that raises crashes the worker: log, try again next tick
        health.failed("synthesis.timer", exc)
        log.exception("synthesis tick failed")


async def tick(now: str | None = None) -> list[runner.RunRecord]:
    """One pass of the timer (tests call it directly with an event-time `now`)."""
    if not project_settings():
        return []
    await processor()
    now = now or now_iso()
    cadence = settings.synthesis_cadence_days
    stale = time.monotonic() - 300
    for user, since in list(_inflight.items()):
        if since < stale:
            _inflight.pop(user, None)  # the record was lost (crash before send): look again
    records = []
    failed: Exception | None = None
    owned = owned_partitions()
    settings_now = settings_digest(project_settings())
    for user, state in list(users_table.items()):
        if not state or user in _inflight or not due(state, now, cadence, settings_now):
            continue
        if owned is not None and state.get("partition") not in owned:
            continue  # another worker holds this user's partition now
        if await on_store_thread(ingest_behind, user, state):
            continue  # the store has not caught up with what was counted: look again next tick
        started = time.perf_counter()
        try:
            memories = await on_store_thread(load_user, user)
            record, after = await asyncio.to_thread(decide_user, user, memories, state, now, project_settings())
            await on_store_thread(settle, record)
        except Exception as exc:  # one user's failure (a store fault, a bad memory) must not hold up the others
            log.exception("synthesis for %s failed; it is tried again at the next tick", user)
            failed = failed or exc
            continue
        for ev in record.events:
            await patterns_topic.send(key=user.encode(), value=orjson.dumps(ev))
        run = {
            "type": "synthesis.run", "user_id": user, "now": now, "ran": record.ran, "reason": record.reason,
            "memories_considered": record.memories_considered, "themes": record.themes,
            "patterns_written": record.patterns_written, "patterns_updated": record.patterns_updated,
            "patterns_unchanged": record.patterns_unchanged, "patterns_retired": record.patterns_retired,
            "themes_by": record.themes_by, "pattern_ids": record.pattern_ids,
            "evidence_used": after.get("evidence_used", []),
            "read_digest": record.read_digest,
            "eligible_seen": state.get("eligible", 0), "recent_eligible": recent_eligible(user, int(cadence)),
            "settings_seen": settings_now,
            "duration_seconds": round(time.perf_counter() - started, 4), "at": now_iso(),
        }
        _inflight[user] = time.monotonic()
        await runs_topic.send(key=user.encode(), value=orjson.dumps(run))
        metrics.synthesis_run(record)
        log.info("synthesis %s", record.describe())
        records.append(record)
    if failed is not None:
        raise failed  # after the others ran: the timer reports it on /healthz
    return records
