"""The worker's side of consolidation: scheduled passes and the `memory.accessed` stream.

Schedules live in a GlobalTable (kept in Kafka, so they survive restarts and every worker sees
them); a once-a-minute crontab timer runs each due schedule on the worker that owns the user's
memory.added partition, so a pass never races that user's ingest on another worker. Access events
(emitted by the worker's search endpoint, accepted from producers) update the memories' access
state, which ranking decays by and light consolidation folds into stability and co-access links.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import faust
import orjson
from aiokafka.partitioner import murmur2
from faust.exceptions import ConsumerNotStarted

from dreamstream.agents import consolidation as cons
from dreamstream.schemas.events import InvalidEvent, check_not_ahead, decode, normalise_time, now_iso
from dreamstream.schemas.memory import parse_time
from dreamstream.streams.core import changes
from dreamstream.streams.core import consolidation as runner
from dreamstream.streams.core.ingest import BatchResult
from dreamstream.streams.worker import health, metrics
from dreamstream.streams.worker.app import app, on_store_thread, processor, publish, send_dead_letter, settings
from dreamstream.streams.worker.synthesis import owned_partitions
from dreamstream.streams.worker.tables import settings_table

log = logging.getLogger("dreamstream.consolidate")

accessed_topic = app.topic(settings.topics.memory_accessed, partitions=settings.topics.partitions,
                           key_type=bytes, value_type=bytes)

schedules_table = app.GlobalTable("dream-schedules", default=None, partitions=1)
"""schedule id -> {"user", "app", "schedule", "registered_at", "last_fired", "firings", "last_run"}."""

schedule_updates_topic = app.topic(f"{settings.app_id}-schedule-updates", partitions=1, key_type=bytes,
                                   value_type=bytes, internal=True)
"""What the crontab timer learnt (a firing, a run): Faust tables change only inside a stream event."""

ACCESSED = "memory.accessed"
MAX_ACCESS_IDS = 100


# --- schedules ------------------------------------------------------------------------------------


def schedule_command(command: str, args: dict[str, Any]) -> dict[str, Any]:
    """consolidate.schedule / schedule.list / schedule.remove (called by the control agent)."""
    if command == "consolidate.schedule":
        sid = cons.schedule_id(args["user"], args.get("app"))
        cron, every = cons.parse_schedule(args["schedule"])
        entry = {"schedule_id": sid, "user": args["user"], "app": args.get("app"), "schedule": args["schedule"],
                 "cron": cron, "every": every, "registered_at": now_iso(), "last_fired": None, "firings": 0,
                 "last_run": None}
        schedules_table[sid] = entry
        return entry
    if command == "schedule.list":
        return {"schedules": sorted((dict(v) for v in schedules_table.values() if v),
                                    key=lambda e: (e["user"], e.get("app") or ""))}
    sid = args["schedule_id"]
    if not schedules_table.get(sid):
        raise KeyError(f"no schedule {sid}")
    schedules_table[sid] = None  # a tombstone: GlobalTable deletes do not always reach every reader
    return {"schedule_id": sid, "removed": True}


def user_partition(user: str) -> int:
    """The memory.added partition of a user's events (Kafka's default partitioner on the key)."""
    return (murmur2(user.encode()) & 0x7FFFFFFF) % settings.topics.partitions


def _owned() -> set[int] | None:
    """This worker's memory.added partitions; none while its consumer is not running yet."""
    try:
        return owned_partitions()
    except ConsumerNotStarted:
        return set()


@app.crontab("* * * * *")
async def schedule_tick() -> None:
    try:
        await run_due(datetime.now(UTC))
    except Exception:  # a timer that raises crashes the worker
        log.exception("consolidation schedule tick failed")


_unfireable: set[str] = set()
"""Schedules this worker has said once it cannot fire (the timer asks every minute)."""


async def run_due(now: datetime) -> list[dict[str, Any]]:
    """Runs `--auto` for every due schedule of this worker's users; returns what each run did."""
    owned = _owned()
    done = []
    local_now = now.astimezone()  # schedules are in the worker's local time (weekly = Sunday 03:00)
    for sid, entry in list(schedules_table.items()):
        if not entry:
            continue
        if owned is not None and user_partition(entry["user"]) not in owned:
            continue
        fired = max(filter(None, (entry.get("last_fired"), _fired.get(sid))), default=None)
        last = parse_time(fired).astimezone() if fired else None
        registered = parse_time(entry["registered_at"]).astimezone()
        try:
            if not cons.schedule_fired(entry["schedule"], last, registered, local_now):
                continue
        except ValueError as exc:  # one that can never fire (registered before it was refused) stops no other
            if sid not in _unfireable:
                _unfireable.add(sid)
                log.error("consolidation schedule %s cannot fire, skipped (remove it): %s", sid, exc)
            continue
        firing = int(entry.get("firings") or 0)
        entry = {**entry, "last_fired": now_iso(), "firings": firing + 1}
        if cons.runs_on_firing(entry["schedule"], firing):
            proc = await processor()
            details, events = await on_store_thread(
                runner.control, proc, "consolidate.run", {"user": entry["user"], "app": entry.get("app"),
                                                          "mode": "auto"}, retention(), settings.data_dir,
                metrics.consolidation_run)
            if events:
                await publish(BatchResult(status_events=events))
                await on_store_thread(changes.sent, proc.store, events)
            entry["last_run"] = {k: details.get(k) for k in ("line", "merged_pairs", "pruned", "skipped", "message")
                                 if k in details}
            log.info("scheduled consolidation %s: %s", sid, details.get("line") or details.get("message"))
            done.append(details)
        # Only what this firing changed, for the registration it fired: a schedule changed, or removed and
        # added again, while the pass ran keeps its new settings (the update is not a copy of the old entry).
        fired_fields = {k: entry[k] for k in ("schedule_id", "registered_at", "last_fired", "firings", "last_run")
                        if k in entry}
        await schedule_updates_topic.send(key=sid.encode(), value=orjson.dumps(fired_fields))
        _fired[sid] = entry["last_fired"]
    return done


def fired_update(current: dict[str, Any] | None, update: dict[str, Any]) -> dict[str, Any] | None:
    """The schedule entry after a firing's update, or None to leave the table as it is: a schedule removed
    meanwhile stays removed, one registered again meanwhile (another spec) keeps its new registration (the
    firing was the old one's), and only the firing's own fields change."""
    if not current or current.get("registered_at") != update.get("registered_at"):
        return None
    return {**current, **{k: v for k, v in update.items() if k in ("last_fired", "firings", "last_run")}}


_fired: dict[str, str] = {}
"""Firings this worker ran whose table update may not have been applied yet (never run one twice)."""


def erased_schedules(entries: dict[str, Any], user: str, at: str) -> list[str]:
    """The schedules an erasure of `user` at `at` ends: theirs, registered before it (one the user registers
    again afterwards is a new request, theirs to keep)."""
    return [sid for sid, e in entries.items() if e and e.get("user") == user and str(e.get("registered_at")) <= at]


async def forget_schedules(users: list[str]) -> None:
    """An erased user's schedules go with them (their id must not outlive them, nor a pass run for nobody):
    through the updates topic, as the table changes only inside a stream event."""
    for user in users:
        await schedule_updates_topic.send(key=user.encode(), value=orjson.dumps({"erased_user": user, "at": now_iso()}))


@app.agent(schedule_updates_topic, concurrency=1)
async def schedule_updates(stream: faust.StreamT) -> None:
    async for event in stream.events():
        try:
            update = orjson.loads(event.value)
            if "erased_user" in update:
                for sid in erased_schedules(dict(schedules_table.items()), update["erased_user"], update["at"]):
                    schedules_table[sid] = None  # a tombstone, as schedule.remove
                    log.info("schedule %s removed: its user was erased", sid)
                health.recovered("consolidation.schedules")
                continue
            after = fired_update(schedules_table.get(update["schedule_id"]), update)
            if after is not None:
                schedules_table[update["schedule_id"]] = after  # reassign: only a set reaches the changelog
            health.recovered("consolidation.schedules")
        except Exception as exc:  # a bad record must not stop the stream
            health.failed("consolidation.schedules", exc)
            log.exception("could not apply a schedule update")


def retention() -> dict[str, int | None] | None:
    value = settings_table.get("retention")
    return dict(value) if value else None


# --- access events --------------------------------------------------------------------------------


def parse_access(raw: bytes) -> dict[str, Any]:
    """A validated memory.accessed event; raises InvalidEvent (reason, message) for a dead letter."""
    obj = decode(raw)
    if obj.get("type", ACCESSED) != ACCESSED:
        raise InvalidEvent("unknown_type", f"type must be {ACCESSED!r}")
    user = obj.get("user_id")
    if not isinstance(user, str) or not user:
        raise InvalidEvent("missing_field", "user_id (a non-empty string) is required")
    ids = obj.get("memory_ids")
    if not isinstance(ids, list) or not ids or not all(isinstance(x, str) and x for x in ids):
        raise InvalidEvent("bad_field", "memory_ids must be a non-empty list of memory ids")
    if len(ids) > MAX_ACCESS_IDS:
        raise InvalidEvent("bad_field", f"memory_ids holds at most {MAX_ACCESS_IDS} ids")
    at = normalise_time(obj.get("accessed_at") or now_iso(), "accessed_at")
    check_not_ahead(at, "accessed_at")  # the latest read is kept: one far-future date stopped decay for good
    return {"type": ACCESSED, "user_id": user, "memory_ids": ids, "accessed_at": at}


def apply_access(store: Any, event: dict[str, Any], position: tuple[int, int] | None = None) -> int:
    """Only the user's own memories count: an id of another user's memory is ignored. `position`: the
    record's partition and offset, so that a record read again is not counted twice."""
    got = store.retrieve(event["memory_ids"])
    own = [mid for mid, m in got.items() if m.user_id == event["user_id"]]
    return runner.record_access(store, own, event["accessed_at"], position) if own else 0


def access_event(user: str, memory_ids: list[str]) -> bytes:
    return orjson.dumps({"type": ACCESSED, "user_id": user, "memory_ids": memory_ids, "accessed_at": now_iso()})


@app.agent(accessed_topic, concurrency=1)
async def accessed(stream: faust.StreamT) -> None:
    """memory.accessed in per-user order; a bad record becomes a dead letter, never an exception."""
    async for event in stream.events():
        try:
            access = parse_access(event.value)
        except InvalidEvent as exc:
            await send_dead_letter(event, exc.reason, exc.message)
            continue
        try:
            proc = await processor()
            message = event.message
            await on_store_thread(apply_access, proc.store, access, (message.partition, message.offset))
            health.recovered("consolidation.access")
        except Exception as exc:  # the stream goes on; the event is kept as a dead letter for a retry
            health.failed("consolidation.access", exc)
            log.exception("could not apply an access event")
            await send_dead_letter(event, "processing_error", "the store refused the access update")
