"""The ops control agent: commands from `dream.control`, exactly one reply each on `dream.control.replies`.

Commands are applied in the order sent (the topic has one partition). Each command id is remembered
in a changelogged table with its reply, so a redelivered command changes nothing and is not answered
twice; a reused id with other content is rejected. Settings the commands change (synthesis toggles,
retention policies, the ingest pause) live in global tables, so they are kept in Kafka and survive
restarts. Malformed or unauthorised commands get a `rejected` reply and a dead-letter record.

A command that changes one user's memories (USER_SCOPED) is not run where `dream.control` is read: it is
forwarded, keyed by the user, to `dream.control.users`, which has memory.added's partition count, so the
worker that holds the user's memory.added partition (Faust assigns topics of one partition count together)
runs it on its store thread, between ingest's batches. On a shared store, run anywhere else, its
read-modify-write of links interleaved with that user's ingest and lost links.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

import faust
import orjson

from dreamstream.schemas.control import Command, InvalidCommand, parse_command, reply
from dreamstream.schemas.errors import CommandFailed, StoreError
from dreamstream.streams.core import changes, memories
from dreamstream.streams.core import consolidation as cr
from dreamstream.streams.core import synthesis as runner
from dreamstream.streams.core.ingest import BatchResult
from dreamstream.streams.core.undo import AlreadyUndone
from dreamstream.streams.worker import health, metrics
from dreamstream.streams.worker.app import (
    app,
    on_store_thread,
    processor,
    publish,
    send_dead_letter,
    settings,
)
from dreamstream.streams.worker.consolidation import schedule_command
from dreamstream.streams.worker.ingest import request_erase
from dreamstream.streams.worker.tables import projects_table, settings_table

log = logging.getLogger("dreamstream.control")

control_topic = app.topic(settings.topics.control, partitions=1, key_type=bytes, value_type=bytes)
replies_topic = app.topic(settings.topics.control_replies, partitions=1, key_type=bytes, value_type=bytes)

seen_table = app.Table("control-seen", default=None, partitions=1)
"""command id -> {"fingerprint", "reply"} (or "forwarded": the user, for USER_SCOPED): idempotence on the id."""

user_commands_topic = app.topic(settings.topics.control_users, partitions=settings.topics.partitions,
                                key_type=bytes, value_type=bytes)
owner_seen_table = app.Table("control-user-seen", default=None, partitions=settings.topics.partitions)
"""command id -> {"fingerprint", "reply"} on the worker that ran a forwarded command (its changelog partition is
the user's): a command forwarded twice (the control worker crashed before noting it) runs and answers once."""

USER_SCOPED = frozenset({"undo", "erase", "reprocess", "consolidate.run", "consolidate.approve", "consolidate.reject"})
"""Commands that read and write one user's memories: run by the owner of the user's partition."""



def _project_key(args: dict[str, Any]) -> str:
    return str(args.get("project") or runner.DEFAULT_PROJECT)


def current_settings() -> dict[str, Any]:
    return {
        "synthesis": {str(k): v for k, v in projects_table.items() if v},
        "retention": settings_table.get("retention") or {},
        "paused": bool(settings_table.get("paused")),
    }


Handler = Callable[[Command], Awaitable[dict[str, Any]]]
HANDLERS: dict[str, Handler] = {}
"""Command name -> its handler: one entry per name in schemas.control.COMMANDS (a test checks they agree)."""


def handles(*names: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for name in names:
            HANDLERS[name] = fn
        return fn
    return register


async def handle(cmd: Command) -> dict[str, Any]:
    """Carries out one command; returns the reply's details (raises CommandFailed for an `error` reply)."""
    handler = HANDLERS.get(cmd.command)
    if handler is None:  # pragma: no cover  (COMMANDS and HANDLERS agree)
        raise CommandFailed(f"no handler for {cmd.command}")
    try:
        return await handler(cmd)
    except (KeyError, ValueError) as exc:  # an unknown decision, plan or schedule; a bad boundary
        raise CommandFailed(str(exc).strip("'\"")) from exc


@handles("synthesis.enable", "synthesis.disable")
async def synthesis_toggle(cmd: Command) -> dict[str, Any]:
    args = cmd.args
    state = runner.SynthesisState(projects={k: dict(v) for k, v in projects_table.items() if v})
    if cmd.command == "synthesis.enable":
        entry = runner.enable(state, args.get("project"), args.get("boundary"))
    else:
        entry = runner.disable(state, args.get("project"))
    projects_table[_project_key(args)] = entry
    return {"project": _project_key(args), **entry}


@handles("retention.set")
async def retention_set(cmd: Command) -> dict[str, Any]:
    merged = {**(settings_table.get("retention") or {}), **cmd.args["policies"]}
    settings_table["retention"] = merged
    return {"retention": merged}


@handles("ingest.pause", "ingest.resume")
async def ingest_pause(cmd: Command) -> dict[str, Any]:
    settings_table["paused"] = cmd.command == "ingest.pause"
    enforce_pause()
    return {"paused": settings_table.get("paused")}


@handles("settings.show")
async def settings_show(cmd: Command) -> dict[str, Any]:
    return current_settings()


@handles("consolidate.schedule", "schedule.list", "schedule.remove")
async def schedules(cmd: Command) -> dict[str, Any]:
    return schedule_command(cmd.command, cmd.args)


@handles("undo")
async def undo(cmd: Command) -> dict[str, Any]:
    """Crash-safe (core/changes.py); a redelivered command whose undo was applied is answered, not refused."""
    proc = await processor()
    decision_id = cmd.args["decision_id"]
    try:
        events = await on_store_thread(proc.undo, decision_id, cmd.id)
    except AlreadyUndone as exc:
        if not exc.mine:
            raise
        return {"decision_id": decision_id, "status_events": exc.events}
    await send_status(proc, events)
    return {"decision_id": decision_id, "status_events": len(events)}


async def send_status(proc: Any, events: list[dict[str, Any]]) -> None:
    """A writer's status events out, delivered, then off its outbox (a crash or a refusal before that sends
    them at the next start)."""
    if not events:
        return
    await publish(BatchResult(status_events=events))
    await on_store_thread(changes.sent, proc.store, events)


@handles("erase")
async def erase(cmd: Command) -> dict[str, Any]:
    """Through the user's partition of memory.added, as the API's DELETE (worker/ingest.py `request_erase`):
    an erase run here, beside ingest, could be overtaken by the user's adds still queued there."""
    return await request_erase(cmd.args["user"], cmd.id, cmd.issued_by or "control")


@handles("reprocess")
async def reprocess(cmd: Command) -> dict[str, Any]:
    """Crash-safe (core/ingest.py `reprocess_user`): a redelivered command finishes the first run."""
    user = cmd.args["user"]
    backup = os.path.join(settings.data_dir, "reprocess")
    proc = await processor()
    result = await on_store_thread(proc.reprocess_user, user, backup, cmd.id)
    await publish(result)
    await app.producer.flush()
    await on_store_thread(proc.mark_sent, result.outbox_owners)
    return {"user": user, "memories": result.outcomes["stored"] + result.outcomes["redelivered"],
            "decisions": dict(result.decisions)}


@handles("consolidate.run", "consolidate.approve", "consolidate.reject")
async def consolidate(cmd: Command) -> dict[str, Any]:
    """Consolidation now (dry-run: a plan to approve by id; auto: applied), approve and reject."""
    proc = await processor()
    details, events = await on_store_thread(cr.control, proc, cmd.command, cmd.args,
                                            settings_table.get("retention") or None, settings.data_dir,
                                            metrics.consolidation_run, cmd.id)
    await send_status(proc, events)
    return dict(details)


def enforce_pause() -> None:
    """Pauses (or resumes) this worker's memory.added partitions to match the setting."""
    consumer = getattr(app, "_consumer", None)
    if consumer is None:
        return
    tps = [tp for tp in consumer.assignment() if tp.topic == settings.topics.memory_added]
    if not tps:
        return
    if settings_table.get("paused"):
        consumer.pause_partitions(tps)
    else:
        consumer.resume_partitions(tps)


@app.timer(interval=2.0)
async def keep_pause() -> None:
    """The pause outlives rebalances and restarts: re-applied to whatever partitions are assigned."""
    if settings_table.get("paused") is not None:
        try:
            enforce_pause()
        except Exception:  # a timer that raises crashes the worker
            log.exception("could not apply the ingest pause")


async def send_reply(command_id: str | None, body: dict[str, Any]) -> None:
    await replies_topic.send(key=(command_id or "").encode(), value=orjson.dumps(body))
    metrics.control_command(body["command"] or "invalid", body["outcome"])


STORE_RETRY_MAX_S = 30.0
"""The longest wait between tries of a command the store refused (a full or unwritable disk)."""


async def until_the_store_writes(cmd: Command) -> dict[str, Any]:
    """Runs a command, again and again with backoff while the store refuses writes, as ingest waits: a
    store fault is not the command's answer (an `error` reply would be final, and a reprocess refused
    half-way would leave its user's memories only in its backup). Every command finishes a first run
    that was cut short (crash-safe writers, ids from the command's id), so a retry is a redelivery."""
    failures = 0
    while True:
        try:
            details = await handle(cmd)
        except StoreError as exc:
            failures += 1
            if failures == 1:
                log.error("control %s: store fault, retrying with backoff: %s", cmd.id, health.one_line(exc))
            health.failed("control", exc)
            await asyncio.sleep(min(STORE_RETRY_MAX_S, 0.5 * 2 ** failures))
            continue
        return details


async def user_of(cmd: Command) -> str:
    """The user whose memories a USER_SCOPED command changes (CommandFailed: none can be found).

    A plan is found by its id where this worker keeps it, else by the `user` the command names (a plan is
    kept by the worker that made it, the owner of its user's partition)."""
    if cmd.command == "undo":
        user = await on_store_thread(memories.decision_user, (await processor()).store, cmd.args["decision_id"])
        if user is None:
            raise CommandFailed(f"no decision {cmd.args['decision_id']}")
        return str(user)
    if cmd.command in ("consolidate.approve", "consolidate.reject"):
        # The plan where this worker keeps it, the command's `user`, or, for an approval that was applied
        # (its plan gone) and is read again after a crash, the user of the pass it applied.
        user = cr.plan_user(settings.data_dir, str(cmd.args["plan_id"])) or cmd.args.get("user") \
            or await on_store_thread(cr.command_pass_user, (await processor()).store, cmd.id)
        if not isinstance(user, str) or not user:
            raise CommandFailed(f"no pending plan {str(cmd.args['plan_id'])[:40]} on this worker: name its user "
                                "(user=...), the one its dry run's reply gave")
        return user
    return str(cmd.args["user"])


def key_id(key: bytes | None) -> str | None:
    """A record key read as a command id (printable text of an id's length), else None."""
    try:
        text = key.decode() if key else ""
    except UnicodeDecodeError:
        return None
    return text if 0 < len(text) <= 200 and text.isprintable() else None


async def parsed(event: Any, users_only: bool = False) -> Command | None:
    """The event's command, checked (its token included); None for a bad one, answered `rejected` with a
    dead letter. `users_only`: a USER_SCOPED command only (what `dream.control.users` may carry)."""
    try:
        cmd = parse_command(event.value, settings.control_token)
        if users_only and cmd.command not in USER_SCOPED:
            raise InvalidCommand("bad_field", f"{cmd.command} is not a user's command", cmd.id)
    except InvalidCommand as exc:
        # A body too big or unreadable to name its id: the record's key does (`dream control` keys by id), so
        # the sender still gets its one reply instead of a timeout that blames the worker.
        cid = exc.command_id or key_id(event.key)
        await send_reply(cid, reply(cid, None, "rejected", {"reason": exc.reason, "error": exc.message}))
        await send_dead_letter(event, exc.reason, exc.message)
        return None
    return cmd


async def can_record(table: Any, cmd: Command) -> bool:
    """Whether `table` can remember `cmd` (within its stream event); if not, the command is answered `error`
    without being run: run, it could not be known as run, and a redelivery would run it again."""
    try:
        table.partition_for_key(cmd.id)
    except Exception as exc:
        health.failed("control", exc)
        log.error("control %s refused: this worker cannot record commands: %s", cmd.id, health.one_line(exc))
        await send_reply(cmd.id, reply(cmd.id, cmd.command, "error", {
            "error": f"not run: this worker cannot record commands ({health.one_line(exc)})"}))
        return False
    return True


def plan_kept_here(cmd: Command) -> bool:
    """An approval or rejection of a plan this worker keeps (made here before its user's partition moved):
    only this worker can apply it, so it runs here, as before routing."""
    return cmd.command in ("consolidate.approve", "consolidate.reject") and \
        cr.plan_user(settings.data_dir, str(cmd.args["plan_id"])) is not None


async def forward(event: Any, cmd: Command) -> dict[str, Any] | None:
    """Sends a USER_SCOPED command to its user's partition of `dream.control.users`, delivered before its
    offset is committed; the owner replies. Returns an `error` reply instead when it names no user."""
    try:
        user = await until_the_store_reads(cmd)
    except CommandFailed as exc:
        return reply(cmd.id, cmd.command, "error", {"error": str(exc)})
    delivery = await user_commands_topic.send(key=user.encode(), value=event.value)
    await app.producer.flush()
    await delivery
    seen_table[cmd.id] = {"fingerprint": cmd.fingerprint().decode(), "forwarded": user}
    log.info("control %s %s -> forwarded to the owner of user %s", cmd.id, cmd.command, user)
    return None


async def until_the_store_reads(cmd: Command) -> str:
    """`user_of`, again and again with backoff while the store cannot be read (as `until_the_store_writes`)."""
    failures = 0
    while True:
        try:
            return await user_of(cmd)
        except StoreError as exc:
            failures += 1
            health.failed("control", exc)
            await asyncio.sleep(min(STORE_RETRY_MAX_S, 0.5 * 2 ** failures))


@app.agent(user_commands_topic, concurrency=1)
async def user_commands(stream: faust.StreamT) -> None:
    """Runs the USER_SCOPED commands the control agent forwarded, on the owner of the user's partition: each
    once (by id), each answered on the replies topic. The record is the command as ops sent it, checked again
    here (its token included), and it must be keyed by the user it changes."""
    async for event in stream.events():
        cmd = await parsed(event, users_only=True)
        if cmd is None:
            continue
        earlier = owner_seen_table.get(cmd.id)
        if earlier is not None and earlier["fingerprint"] == cmd.fingerprint().decode():
            continue  # forwarded twice: run and answered once
        if not await can_record(owner_seen_table, cmd):  # partition counts that disagree, a table not ready
            continue
        try:
            user = await until_the_store_reads(cmd)
            if (event.key or b"") != user.encode():
                raise CommandFailed(f"forwarded under another user's key: {cmd.command} changes {user}'s memories")
            body = reply(cmd.id, cmd.command, "ok", await until_the_store_writes(cmd))
        except CommandFailed as exc:
            body = reply(cmd.id, cmd.command, "error", {"error": str(exc)})
        except Exception as exc:  # a failing command must not stop the stream
            log.exception("control command %s failed", cmd.id)
            body = reply(cmd.id, cmd.command, "error", {"error": f"{type(exc).__name__}: {exc}"})
        owner_seen_table[cmd.id] = {"fingerprint": cmd.fingerprint().decode(), "reply": body}
        await send_reply(cmd.id, body)
        health.recovered("control")
        log.info("control %s %s (user's partition %d) -> %s", cmd.id, cmd.command, event.message.partition,
                 body["outcome"])


@app.agent(control_topic, concurrency=1)
async def control(stream: faust.StreamT) -> None:
    """One reply per command id; bad commands rejected with a dead letter; nothing applied twice."""
    async for event in stream.events():
        cmd = await parsed(event)
        if cmd is None:
            continue
        earlier = seen_table.get(cmd.id)
        if earlier is not None:
            if earlier["fingerprint"] != cmd.fingerprint().decode():
                # The id belongs to another command: that one keeps its reply; this one is refused.
                message = f"id {cmd.id} was already used for another command"
                await send_reply(cmd.id, reply(cmd.id, cmd.command, "rejected", {"reason": "id_reused",
                                                                                 "error": message}))
                await send_dead_letter(event, "id_reused", message)
            continue  # a redelivery: applied and answered already
        if not await can_record(seen_table, cmd):  # the table that remembers commands must work before one runs
            continue
        try:
            if cmd.command in USER_SCOPED and not plan_kept_here(cmd):
                refused = await forward(event, cmd)
                if refused is None:
                    continue  # the owner of the user's partition runs it and replies
                body = refused
            else:
                body = reply(cmd.id, cmd.command, "ok", await until_the_store_writes(cmd))
        except CommandFailed as exc:
            body = reply(cmd.id, cmd.command, "error", {"error": str(exc)})
        except Exception as exc:  # a failing command must not stop the control stream
            log.exception("control command %s failed", cmd.id)
            body = reply(cmd.id, cmd.command, "error", {"error": f"{type(exc).__name__}: {exc}"})
        seen_table[cmd.id] = {"fingerprint": cmd.fingerprint().decode(), "reply": body}
        await send_reply(cmd.id, body)
        health.recovered("control")
        log.info("control %s %s -> %s", cmd.id, cmd.command, body["outcome"])
