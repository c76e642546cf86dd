"""The ingest agent: memory.added and pattern events, a batch at a time, stored before committed.

Each record is checked against a ledger of offsets (worker/offsets.py) so that it is stored once, in
order, and nothing undelivered is passed over; a batch that fails to store is read again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import faust
import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition

from dreamstream.schemas.errors import StoreError
from dreamstream.schemas.events import USER_ERASE, erase_signature, now_iso
from dreamstream.streams import faults
from dreamstream.streams.core import changes
from dreamstream.streams.core import consolidation as runner
from dreamstream.streams.core.ingest import (
    ERASED,
    BatchResult,
    Incoming,
    Processor,
    erase_sent,
    erased_before,
    forget_reprocess,
)
from dreamstream.streams.worker import health, metrics
from dreamstream.streams.worker.app import (
    _runtime,
    app,
    deliver,
    ingest_channel,
    memory_added_topic,
    on_store_thread,
    processor,
    publish,
    settings,
)
from dreamstream.streams.worker.consolidation import forget_schedules
from dreamstream.streams.worker.offsets import InputOffsets, Verdict
from dreamstream.streams.worker.tables import settings_table

log = logging.getLogger("dreamstream.ingest")


def _consuming() -> bool:
    """A started consumer group member (not an agent test context, where records carry no offsets to keep)."""
    consumer = getattr(app, "_consumer", None)
    return consumer is not None and consumer._started.is_set()


async def _first_record_at(tp: Any, offset: int) -> int | None:
    """The offset of the first record at or after `offset`, read from the log by a group-less consumer."""
    part = TopicPartition(tp.topic, tp.partition)
    try:
        if "probe" not in _runtime:
            # "earliest": asked for an offset retention has deleted, it answers the log's first record (the
            # default, "latest", answered nothing, and ingest kept seeking back to records that are gone).
            started = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap_servers, group_id=None,
                                       enable_auto_commit=False, auto_offset_reset="earliest",
                                       **settings.kafka.aiokafka_kwargs())
            await started.start()
            _runtime["probe"] = started
        probe = _runtime["probe"]
        probe.assign([part])
        probe.seek(part, offset)
        got = await probe.getmany(part, timeout_ms=5000, max_records=1)
    except Exception:
        log.exception("could not read %s-%d at %d", tp.topic, tp.partition, offset)
        return None
    records = got.get(part) or []
    return int(records[0].offset) if records else None


async def committed_on_broker(tp: Any) -> int | None:
    """The group's committed offset as the broker has it (None: nothing committed, or no answer).

    Asked of the broker by a consumer of the same group that never joins it: right after an assignment
    Faust's own copy may not be set yet, and a ledger started from the log start instead seeked back
    over records Faust would not fetch again (4 of about 44 restarts stalled so)."""
    part = TopicPartition(tp.topic, tp.partition)
    try:
        offset = await asyncio.wait_for((await _probe()).committed(part), timeout=10)
    except Exception as exc:
        log.warning("could not ask the broker for the committed offset of %s-%d: %s", tp.topic, tp.partition, exc)
        return None
    return None if offset is None else int(offset)


async def _probe() -> AIOKafkaConsumer:
    """A consumer of the worker's group that never joins it: asks the broker for offsets."""
    if "committed_probe" not in _runtime:
        probe = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap_servers, group_id=app.conf.id,
                                 enable_auto_commit=False, **settings.kafka.aiokafka_kwargs())
        try:  # the watchdog asks every few seconds: a broker that is down must not hold its timer
            await asyncio.wait_for(probe.start(), timeout=10)
        except BaseException:
            with contextlib.suppress(Exception):
                await probe.stop()
            raise
        _runtime["committed_probe"] = probe
    probe_: AIOKafkaConsumer = _runtime["committed_probe"]
    return probe_


async def lag_on_broker(tps: Sequence[Any]) -> dict[Any, int]:
    """Per partition, the records after the group's committed offset (from the log start where nothing is
    committed), as the broker has them; {} when it does not answer. Faust's own offset gauges move only when a
    record is delivered, so they showed no lag while records waited on a paused or stalled partition."""
    parts = [TopicPartition(tp.topic, tp.partition) for tp in tps]
    if not parts:
        return {}
    try:
        probe = await _probe()
        ends = await asyncio.wait_for(probe.end_offsets(parts), timeout=10)
        out = {}
        for tp, part in zip(tps, parts, strict=True):
            done = await committed_on_broker(tp)
            if done is None:
                done = (await asyncio.wait_for(probe.beginning_offsets([part]), timeout=10))[part]
            out[tp] = max(int(ends[part]) - int(done), 0)
    except Exception as exc:
        log.warning("could not ask the broker for the input partitions' offsets: %s", exc)
        return {}
    return out


async def _start_offset(tp: Any) -> int:
    """Where reading resumes: the committed offset (the broker's, else Faust's copy), else the log start."""
    committed = await committed_on_broker(tp)
    if committed is not None:
        return committed
    consumer: Any = app.consumer  # Faust's own bookkeeping, not in its ConsumerT interface
    known = consumer._committed_offset.get(tp)
    if known is not None:
        return int(known)
    try:
        earliest = await consumer.earliest_offsets(tp)
        return int(earliest.get(tp) or 0)
    except Exception:
        log.exception("no earliest offset for %s-%d: assuming 0", tp.topic, tp.partition)
        return 0


@dataclass
class Admitted:
    """What of a batch ingest stores now; per partition its first offset (to read again if the store
    fails) and the offset to commit once it is stored."""

    items: list[Incoming] = field(default_factory=list)
    first: dict[Any, int] = field(default_factory=dict)
    upto: dict[Any, int] = field(default_factory=dict)


async def admit(ledger: InputOffsets[Any], events: list[Any]) -> Admitted:
    """Checks each record against the ledger: in order, once, nothing undelivered passed over.

    Outside a running consumer (agent test contexts) there are no offsets to keep: all is taken."""
    consuming = _consuming()
    assigned = set(app.consumer.assignment()) if consuming else set()
    out = Admitted()
    for e in events:
        m = e.message
        tp = m.tp
        if consuming:
            generation = app.consumer_generation_id
            if tp not in assigned or getattr(m, "generation_id", generation) != generation:
                metrics.input_record("revoked")  # fetched before a rebalance: read again after it
                continue
            if not ledger.known(tp, generation):
                ledger.start(tp, await _start_offset(tp), generation)
            verdict = ledger.admit(tp, m.offset, time.monotonic())
            if verdict is Verdict.PROBE:
                ledger.floor_is(tp, await _first_record_at(tp, ledger.next_offset(tp)))
                verdict = ledger.admit(tp, m.offset, time.monotonic())
            if verdict is Verdict.SEEK:
                back = ledger.next_offset(tp)
                log.warning("%s-%d: offset %d arrived but %d never did: seeking back to it",
                            tp.topic, tp.partition, m.offset, back)
                await app.consumer.seek(tp, back)
            if verdict is not Verdict.TAKE:
                metrics.input_record(verdict.value)
                continue
            out.first.setdefault(tp, m.offset)
            out.upto[tp] = ledger.next_offset(tp)
        # A keyless record is checked like a mis-keyed one: its partition says nothing of its user.
        key = m.key if m.key is not None else b""
        out.items.append(Incoming(raw=e.value, topic=m.topic, partition=m.partition, offset=m.offset, key=key))
    return out


async def commit(upto: dict[Any, int]) -> None:
    """Commits what the batch stored; Faust's commit path flushes the producer first, so the batch's
    status events and dead letters are out before its offsets."""
    if upto:
        consumer: Any = app.consumer  # the commit path of Faust's own acks, minus the gap filling
        await consumer._commit_offsets(upto)


@app.agent(ingest_channel, concurrency=1)
async def ingest(stream: faust.StreamT) -> None:
    """memory.added and synthesised pattern events, in per-partition order, a batch at a time.

    Each agent start keeps its own ledger of stored offsets: a restarted agent resumes from what is
    committed. A batch that fails to store (a store fault: disk full, unwritable, unreachable) is read
    again after a pause, never dead-lettered, and the worker reports itself not ready meanwhile.
    Per batch: store (each decision with its status events, core/ingest.py), publish, flush, mark the
    events sent, commit: a crash anywhere repeats at most the publishing, deduplicable by decision id."""
    proc = await open_processor()
    await send_unsent(proc)
    ledger: InputOffsets[Any] = InputOffsets(reseek_after=max(2.0, settings.stall_seconds / 3))
    _runtime["ledger"] = ledger  # the watchdog reads it
    failures = 0
    refused = 0  # batches in a row whose events the broker refused: their own backoff, reset by a commit
    # take_events (not take) keeps each message's topic, partition and offset for dead letters.
    async for events in stream.take_events(settings.batch_size, within=settings.batch_within):  # type: ignore[attr-defined]
        batch = await admit(ledger, events)
        items = batch.items
        if not items:
            continue
        while settings_table.get("paused"):
            # `ingest.pause` holds: a worker that has just started (or been given partitions) fetched this batch
            # before the control timer paused them. Held, not stored, not committed, until `ingest.resume`.
            await asyncio.sleep(0.5)
        started = time.perf_counter()
        try:
            result = await on_store_thread(proc.process, items)
            if result.erased:
                await on_store_thread(forget_files, result.erased)
                await forget_schedules(result.erased)
        except Exception as exc:
            failures += 1
            await read_again(exc, failures, batch, ledger)
            continue
        if failures:
            store_recovered(failures)
        failures = 0
        metrics.observe_batch(result, time.perf_counter() - started)
        try:
            await publish(result)  # delivered, or it raises
        except Exception as exc:  # stored, not published: read again, the redelivery sends the events again
            refused += 1
            await read_again(exc, refused, batch, ledger, fault="broker")
            continue
        faults.point("published")
        if result.outbox_owners:
            try:
                await on_store_thread(proc.mark_sent, result.outbox_owners)
            except Exception as exc:  # published, not marked: read again, the redelivery sends them again
                failures += 1
                await read_again(exc, failures, batch, ledger)
                continue
        faults.point("marked")
        await commit(batch.upto)
        stored = _runtime.setdefault("stored_upto", {})  # synthesis waits for ingest by it (worker/synthesis.py)
        stored.update({tp.partition: n for tp, n in batch.upto.items() if tp.topic == settings.topics.memory_added})
        if refused:
            store_recovered(refused, "broker")
        refused = 0
        health.recovered("ingest")
        if result.dead_letters:
            log.warning("batch of %d: %d dead letters", len(items), len(result.dead_letters))


def forget_files(users: list[str]) -> None:
    """What else holds an erased user's texts or ids on this worker: pending consolidation plans, an unfinished
    reprocess's backup file from an earlier version (its copies in the store go with the erase itself), and
    the status events an offline command kept for a broker."""
    outbox = changes.outbox_path(settings.store_dir, server=bool(settings.qdrant_url))
    for user in users:
        runner.forget_plans(settings.data_dir, user)
        forget_reprocess(os.path.join(settings.data_dir, "reprocess"), user)
        changes.drop_kept(outbox, user)  # a CLI's events no broker took: the user's ids go with the user
        runner.forget_runs(settings.store_dir, user)


class EraseNotSent(Exception):
    """The broker has not taken a `user.erase` record within DREAM_ERASE_WAIT_SECONDS: nothing is erased yet
    (the API's 503). Its delivery goes on; asked again meanwhile, the same request is waited on, not sent twice."""


SENDING: dict[str, tuple[str, asyncio.Future[None]]] = {}
"""user -> (request, delivery) for an erase record the broker has not taken yet."""


async def _send_erase(record: dict[str, Any], sent: str) -> None:
    await deliver([(memory_added_topic, str(record["user_id"]).encode(), orjson.dumps(record))])
    await on_store_thread(changes.write_durably, sent, b"")


async def request_erase(user: str, request: str | None, issued_by: str) -> dict[str, Any]:
    """Erases one user through their partition of memory.added (the API's DELETE and `dream control erase`):
    ingest reads the `user.erase` record behind every add of the user sent before it, so nothing accepted
    earlier is stored afterwards, and publishes the audit event. Waits up to DREAM_ERASE_WAIT_SECONDS on the worker
    holding the partition for the count; else says it is queued (the audit event names the request). A broker
    that does not take the record in that time is EraseNotSent (the API answered nothing for as long as the
    broker was down, and a caller's retry wrote a second record)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settings.erase_wait_seconds
    pending = SENDING.get(user)
    request = request or (pending[0] if pending is not None else uuid.uuid4().hex)
    erase_dir = os.path.join(settings.data_dir, "erase")
    done = ERASED.get(request)
    if done is None:  # a redelivered command whose erase ran already: sent again, it would erase later adds
        done = await on_store_thread(erased_before, erase_dir, request)
    if done is not None:
        return {"user": user, "deleted": done, "erased": True, "request": request}
    # Sent already, not yet applied (ingest paused or behind, and this command read again after a crash):
    # a second record would take the adds the user makes before ingest reaches the first.
    sent = erase_sent(erase_dir, request)
    if not await on_store_thread(os.path.exists, sent):
        if pending is None or pending[0] != request:
            record: dict[str, Any] = {"type": USER_ERASE, "event_id": f"erase-{request}", "user_id": user,
                                      "request": request, "issued_by": issued_by, "created_at": now_iso()}
            if settings.erase_key is not None:
                record["signature"] = erase_signature(settings.erase_key, record)
            delivery = asyncio.ensure_future(_send_erase(record, sent))
            SENDING[user] = (request, delivery)
            delivery.add_done_callback(lambda done: _sent(user, request, done))
            pending = SENDING[user]
        try:
            await asyncio.wait_for(asyncio.shield(pending[1]), max(0.0, deadline - loop.time()))
        except TimeoutError:
            raise EraseNotSent(f"the broker has not taken the erase of {user} in {settings.erase_wait_seconds:g} s "
                               f"(is Kafka up?): nothing is erased yet; request {request} is sent when it answers, "
                               "and asking again meanwhile waits on it (never a second record)") from None
    await on_store_thread(runner.forget_plans, settings.data_dir, user)  # plans hold the user's texts
    while request not in ERASED and loop.time() < deadline:
        await asyncio.sleep(0.1)
    if request in ERASED:
        return {"user": user, "deleted": ERASED[request], "erased": True, "request": request}
    return {"user": user, "erased": "queued", "request": request,
            "detail": "behind the user's accepted events in memory.added; the erase audit event on "
                      "memory.status names this request when it is done"}


def _sent(user: str, request: str, done: asyncio.Future[None]) -> None:
    """An erase record's delivery ended (taken, or failed: then a new request sends it again)."""
    if SENDING.get(user, ("",))[0] == request:
        SENDING.pop(user, None)
    if not done.cancelled() and done.exception() is not None:
        log.warning("the erase record of %s (request %s) was not delivered: %s", user, request, done.exception())


async def open_processor() -> Processor:
    """The worker's Processor; while the store cannot be opened (a full disk, another process holding
    the folder) the worker stays up, not ready, and tries again with backoff."""
    failures = 0
    while True:
        try:
            proc = await processor()
        except Exception as exc:
            failures += 1
            store_fault(exc, failures, 0)
            await asyncio.sleep(min(30.0, 0.5 * 2 ** min(failures, 6)))
            continue
        if failures:
            store_recovered(failures)
        return proc


async def send_unsent(proc: Processor) -> None:
    """Status events a crash left unpublished (stored with their decisions), sent before anything new."""
    try:
        unsent = await on_store_thread(proc.unsent)
    except Exception as exc:  # the store is not readable yet: the first batch will say so
        log.warning("could not look for unsent status events: %s", exc)
        return
    if unsent.status_events:
        try:
            await publish(unsent)
        except Exception as exc:  # still unsent in the store: the next start, or their redelivery, sends them
            log.warning("could not send %d unsent status events: %s", len(unsent.status_events), exc)
            return
        await on_store_thread(proc.mark_sent, unsent.outbox_owners)
        log.info("sent %d status events a crash had left unpublished", len(unsent.status_events))
    outbox = changes.outbox_path(settings.store_dir, server=bool(settings.qdrant_url))
    kept = await on_store_thread(changes.kept_events, outbox)
    if kept:  # an offline command's, kept while no broker answered (cli/consolidate.py `publish_events`)
        try:
            await publish(BatchResult(status_events=kept))
        except Exception as exc:
            log.warning("could not send the %d status events kept in %s: %s", len(kept), outbox, exc)
            return
        await on_store_thread(changes.drop_kept, outbox)
        log.info("sent %d status events an offline command had kept in %s", len(kept), outbox)


async def read_again(exc: BaseException, failures: int, batch: Any, ledger: InputOffsets[Any],
                     fault: str = "store") -> None:
    """A batch the store failed (a write, or marking its events sent), or whose events the broker refused:
    nothing is committed past it;
    its partitions are sought back to it and read again after a backoff (a store fault, not a crash:
    stored memories are found again as redeliveries, unsent events sent again, deduplicable)."""
    store_fault(exc, failures, len(batch.items), fault)
    metrics.input_record("store_failed", len(batch.items))
    for tp, offset in batch.first.items():
        ledger.rewind(tp, offset, time.monotonic())
        await app.consumer.seek(tp, offset)
    await asyncio.sleep(min(30.0, 0.5 * 2 ** min(failures, 6)))


def store_fault(exc: BaseException, failures: int, items: int, fault: str = "store") -> None:
    """Logged once per fault with its cause (not once per retry); the worker turns not ready. `fault`: what
    failed, the store (a write) or the broker (it refused the batch's events)."""
    cause = f"{type(exc).__name__}: {exc}"
    if failures == 1:
        log.error("%s fault, pausing ingest and retrying with backoff (%d records held, nothing "
                  "committed past them): %s", fault, items, cause, exc_info=not isinstance(exc, StoreError))
    _runtime["store_fault"] = cause
    _runtime.setdefault("store_fault_since", time.monotonic())
    metrics.STORE_FAULT.set(1)


def store_recovered(failures: int, fault: str = "store") -> None:
    log.warning("%s fault cleared after %d retries: ingest resumed", fault, failures)
    _runtime.pop("store_fault", None)
    _runtime.pop("store_fault_since", None)
    metrics.STORE_FAULT.set(0 if "flush_fault" not in _runtime else 1)


@app.on_before_shutdown.connect
async def on_shutdown(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
    """Stops the gap probe's consumer and flushes the store (on its thread, after any write in flight)."""
    for name in ("probe", "committed_probe"):
        probe = _runtime.pop(name, None)
        if probe is not None:
            await probe.stop()
    if "processor" in _runtime:
        await on_store_thread(_runtime["processor"].store.flush)


@app.timer(interval=5.0)
async def flush_store() -> None:
    """Edge stores persist on flush; the WAL covers the time between. A failing flush is a store
    fault like any other: logged once, health degraded (worker/web.py), tried again on the next tick
    (a timer that raises stops the app)."""
    if "processor" not in _runtime:
        return
    try:
        await on_store_thread(_runtime["processor"].store.flush)
    except Exception as exc:
        if "flush_fault" not in _runtime:
            log.error("store flush failed (retrying every 5 s): %s", exc)
            _runtime["flush_fault_since"] = time.monotonic()
        _runtime["flush_fault"] = f"flush failed: {exc}"
        metrics.STORE_FAULT.set(1)
    else:
        if _runtime.pop("flush_fault", None):
            _runtime.pop("flush_fault_since", None)
            log.warning("store flush works again")
            metrics.STORE_FAULT.set(1 if "store_fault" in _runtime else 0)
