"""The ops control agent: commands from `dream.control`, exactly one reply each on `dream.control.replies`.

Commands are applied in the order sent (the topic has one partition). Each command id is remembered
in a changelogged table with its reply, so a redelivered command changes nothing and is not answered
twice; a reused id with other content is rejected. Settings the commands change (synthesis toggles,
retention policies, the ingest pause) live in global tables, so they are kept in Kafka and survive
restarts. Malformed or unauthorised commands get a `rejected` reply and a dead-letter record.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
from typing import Any

import faust
import orjson

from dreamstream.schemas.control import Command, InvalidCommand, parse_command, reply
from dreamstream.schemas.events import dead_letter, now_iso, status_event
from dreamstream.schemas.records import DeadLetter
from dreamstream.streams import synthesis_runner as runner
from dreamstream.streams.app import app, dead_letter_topic, on_store_thread, processor, publish, settings, status_topic
from dreamstream.streams.synthesis_worker import projects_table

log = logging.getLogger("dreamstream.control")

control_topic = app.topic(settings.topics.control, partitions=1, key_type=bytes, value_type=bytes)
replies_topic = app.topic(settings.topics.control_replies, partitions=1, key_type=bytes, value_type=bytes)

seen_table = app.Table("control-seen", default=None, partitions=1)
"""command id -> {"fingerprint", "reply"}: idempotence on the id."""

settings_table = app.GlobalTable("dream-settings", default=None, partitions=1)
""""retention" -> {type: days | None}; "paused" -> bool."""


class CommandFailed(Exception):
    """A valid command that could not be carried out (unknown decision, unknown plan, ...)."""


def _project_key(args: dict[str, Any]) -> str:
    return str(args.get("project") or runner.DEFAULT_PROJECT)


def current_settings() -> dict[str, Any]:
    return {
        "synthesis": {str(k): v for k, v in projects_table.items() if v},
        "retention": settings_table.get("retention") or {},
        "paused": bool(settings_table.get("paused")),
    }


async def handle(cmd: Command) -> dict[str, Any]:
    """Carries out one command; returns the reply's details (raises CommandFailed for an `error` reply)."""
    args = cmd.args
    if cmd.command in ("synthesis.enable", "synthesis.disable"):
        state = runner.SynthesisState(projects={k: dict(v) for k, v in projects_table.items() if v})
        if cmd.command == "synthesis.enable":
            try:
                entry = runner.enable(state, args.get("project"), args.get("boundary"))
            except ValueError as exc:
                raise CommandFailed(str(exc)) from exc
        else:
            entry = runner.disable(state, args.get("project"))
        projects_table[_project_key(args)] = entry
        return {"project": _project_key(args), **entry}
    if cmd.command == "retention.set":
        merged = {**(settings_table.get("retention") or {}), **args["policies"]}
        settings_table["retention"] = merged
        return {"retention": merged}
    if cmd.command in ("ingest.pause", "ingest.resume"):
        settings_table["paused"] = cmd.command == "ingest.pause"
        enforce_pause()
        return {"paused": settings_table.get("paused")}
    if cmd.command == "settings.show":
        return current_settings()
    if cmd.command in ("consolidate.schedule", "schedule.list", "schedule.remove"):
        from dreamstream.streams.consolidate_worker import schedule_command

        try:
            return schedule_command(cmd.command, args)
        except (KeyError, ValueError) as exc:
            raise CommandFailed(str(exc).strip("'\"")) from exc
    proc = await processor()
    if cmd.command == "undo":
        try:
            events = await on_store_thread(proc.undo, args["decision_id"])
        except (KeyError, ValueError) as exc:
            raise CommandFailed(str(exc).strip("'\"")) from exc
        for ev in events:
            await status_topic.send(key=ev["user_id"].encode(), value=ev)
        return {"decision_id": args["decision_id"], "status_events": len(events)}
    if cmd.command == "erase":
        details = await on_store_thread(erase_user, proc, args["user"], cmd)
        audit = status_event(f"erase-{cmd.id}", f"user:{args['user']}", args["user"], None, "erased", None,
                             "erase", {"command_id": cmd.id, "issued_by": cmd.issued_by, **details})
        await status_topic.send(key=args["user"].encode(), value=audit)
        return details
    if cmd.command == "reprocess":
        backup = os.path.join(settings.data_dir, "reprocess")
        result = await on_store_thread(proc.reprocess_user, args["user"], backup)
        await publish(result)
        return {"user": args["user"], "memories": result.outcomes["stored"], "decisions": dict(result.decisions)}
    if cmd.command.startswith("consolidate."):
        return await consolidate(cmd, proc)
    raise CommandFailed(f"no handler for {cmd.command}")  # pragma: no cover  (COMMANDS and handle agree)


def erase_user(proc: Any, user: str, cmd: Command) -> dict[str, Any]:
    """Hard delete of everything of one user (privacy requests); the audit keeps counts, never texts."""
    ids = [m.memory_id for m in proc.store.scroll({"user_id": user})]
    proc.store.delete(ids)
    proc.store.flush()
    return {"user": user, "deleted": len(ids), "at": now_iso()}


async def consolidate(cmd: Command, proc: Any) -> dict[str, Any]:
    """Consolidation now (dry-run: a plan to approve by id; auto: applied), approve and reject."""
    try:
        cr = importlib.import_module("dreamstream.streams.consolidate_runner")
    except ImportError as exc:  # pragma: no cover
        raise CommandFailed("consolidation is not available in this build") from exc
    handler = getattr(cr, "control", None)
    if handler is None:  # pragma: no cover
        raise CommandFailed("consolidation is not available in this build")
    try:
        details, events = await on_store_thread(handler, proc, cmd.command, cmd.args,
                                                settings_table.get("retention") or None)
    except (KeyError, ValueError) as exc:
        raise CommandFailed(str(exc).strip("'\"")) from exc
    for ev in events:
        await status_topic.send(key=ev["user_id"].encode(), value=ev)
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
    _observe(body["command"] or "invalid", body["outcome"])


@app.agent(control_topic, concurrency=1)
async def control(stream: faust.StreamT) -> None:
    """One reply per command id; bad commands rejected with a dead letter; nothing applied twice."""
    async for event in stream.events():
        try:
            cmd = parse_command(event.value, settings.control_token)
        except InvalidCommand as exc:
            await send_reply(exc.command_id, reply(exc.command_id, None, "rejected",
                                                   {"reason": exc.reason, "error": exc.message}))
            dl = dead_letter(event.value, exc.reason, exc.message, event.message.topic, event.message.partition,
                             event.message.offset)
            await dead_letter_topic.send(key=None, value=DeadLetter(**dl))
            continue
        earlier = seen_table.get(cmd.id)
        if earlier is not None:
            if earlier["fingerprint"] != cmd.fingerprint().decode():
                # The id belongs to another command: that one keeps its reply; this one is refused.
                message = f"id {cmd.id} was already used for another command"
                await send_reply(cmd.id, reply(cmd.id, cmd.command, "rejected", {"reason": "id_reused",
                                                                                 "error": message}))
                dl = dead_letter(event.value, "id_reused", message, event.message.topic, event.message.partition,
                                 event.message.offset)
                await dead_letter_topic.send(key=None, value=DeadLetter(**dl))
            continue  # a redelivery: applied and answered already
        try:
            body = reply(cmd.id, cmd.command, "ok", await handle(cmd))
        except CommandFailed as exc:
            body = reply(cmd.id, cmd.command, "error", {"error": str(exc)})
        except Exception as exc:  # a failing command must not stop the control stream
            log.exception("control command %s failed", cmd.id)
            body = reply(cmd.id, cmd.command, "error", {"error": f"{type(exc).__name__}: {exc}"})
        seen_table[cmd.id] = {"fingerprint": cmd.fingerprint().decode(), "reply": body}
        await send_reply(cmd.id, body)
        log.info("control %s %s -> %s", cmd.id, cmd.command, body["outcome"])


def _observe(command: str, outcome: str) -> None:
    try:
        metrics = importlib.import_module("dreamstream.streams.metrics")
    except ImportError:
        return
    hook = getattr(metrics, "control_command", None)
    if hook is not None:
        hook(command, outcome)


async def wait_reply(kafka: str, command_id: str, timeout: float = 60.0) -> dict[str, Any] | None:
    """The reply to one command, read from the start of the replies topic (used by `dream control`)."""
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(settings.topics.control_replies, bootstrap_servers=kafka,
                                auto_offset_reset="earliest", enable_auto_commit=False, group_id=None,
                                **settings.kafka.aiokafka_kwargs())
    await consumer.start()
    try:
        deadline = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < deadline:
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                for r in batch:
                    if r.key == command_id.encode():
                        found: dict[str, Any] = orjson.loads(r.value)
                        return found
    finally:
        await consumer.stop()
    return None
