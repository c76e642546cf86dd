"""The Faust app: topics, the ingest agent and the read endpoints of the worker.

Run it with `dream worker`. The heavy objects (model, store) are built once per worker, lazily,
and every store or model call runs on one worker thread so the event loop never blocks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import faust
import orjson
from aiohttp import web as aioweb

from dreamstream.schemas.records import DeadLetter, MemoryStatus
from dreamstream.streams import codecs as _codecs  # noqa: F401  (registers "orjson")
from dreamstream.streams import judges
from dreamstream.streams import settings as settings_mod
from dreamstream.streams.offsets import InputOffsets, Verdict
from dreamstream.streams.pipeline import BatchResult, Incoming, Processor

log = logging.getLogger("dreamstream.app")
settings = settings_mod.load()
judges.check_settings(settings)  # a misconfigured judge or writer stops `dream` at start, with the reason

app = faust.App(
    settings.app_id,
    broker=settings.broker_url,
    broker_credentials=settings.kafka.faust_credentials(),  # SASL / TLS from DREAM_KAFKA_* (see settings)
    store="memory://",
    datadir=settings.data_dir,
    key_serializer="raw",
    value_serializer="raw",
    topic_partitions=settings.topics.partitions,
    topic_replication_factor=1,
    web_host=settings.http_host,
    web_bind=settings.http_host,
    web_port=settings.http_port,
    web_in_thread=False,
    consumer_auto_offset_reset="earliest",
    broker_commit_every=200,
    broker_commit_interval=1.0,
    broker_session_timeout=settings.session_timeout,
    broker_heartbeat_interval=min(3.0, settings.session_timeout / 4),
    producer_acks=-1,
    stream_buffer_maxsize=4096,
    table_standby_replicas=0,  # a worker's timers act on the users its tables hold: active partitions only
)

t = settings.topics
memory_added_topic = app.topic(t.memory_added, partitions=t.partitions, key_type=bytes, value_type=bytes)
patterns_topic = app.topic(t.patterns, partitions=t.partitions, key_type=bytes, value_type=bytes)
status_topic = app.topic(t.memory_status, partitions=t.partitions, key_type=bytes, value_serializer="orjson")
dead_letter_topic = app.topic(t.dead_letters, partitions=t.partitions, key_type=bytes, value_serializer="orjson")
ingest_channel = app.topic(t.memory_added, t.patterns, key_type=bytes, value_type=bytes, acks=False)
"""Acks off: ingest commits these offsets itself, after the store write (streams/offsets.py says why)."""

_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dream-store")
_runtime: dict[str, Any] = {}


def _build_processor() -> Processor:
    from dreamstream.streams.embedding import shared_embedder
    from dreamstream.streams.store import open_store

    store = _metrics.TimedStore(open_store(settings.store_dir, settings.qdrant_url, settings.qdrant_api_key))
    _runtime["store"] = store
    return Processor(store, shared_embedder())


_build_lock: asyncio.Lock | None = None


async def processor() -> Processor:
    """The worker's one Processor, built on the store thread on first use.

    Several agents ask for it as the worker starts; the lock makes the first build the only one
    (a second embedded store on the same folder would fail on its lock)."""
    global _build_lock
    if "processor" not in _runtime:
        if _build_lock is None:
            _build_lock = asyncio.Lock()
        async with _build_lock:
            if "processor" not in _runtime:
                loop = asyncio.get_running_loop()
                _runtime["processor"] = await loop.run_in_executor(_executor, _build_processor)
    proc: Processor = _runtime["processor"]
    return proc


async def on_store_thread(fn: Any, *args: Any) -> Any:
    return await asyncio.get_running_loop().run_in_executor(_executor, fn, *args)


async def publish(result: BatchResult) -> None:
    """Status events and dead letters of one batch, keyed by user so they keep per-user order."""
    for ev in result.status_events:
        await status_topic.send(key=ev["user_id"].encode(), value=MemoryStatus(**ev))
    for dl in result.dead_letters:
        await dead_letter_topic.send(key=None, value=DeadLetter(**dl))


def _consuming() -> bool:
    """A started consumer group member (not an agent test context, where records carry no offsets to keep)."""
    consumer = getattr(app, "_consumer", None)
    return consumer is not None and consumer._started.is_set()


async def _first_record_at(tp: Any, offset: int) -> int | None:
    """The offset of the first record at or after `offset`, read from the log by a group-less consumer."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    part = TopicPartition(tp.topic, tp.partition)
    try:
        if "probe" not in _runtime:
            started = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap_servers, group_id=None,
                                       enable_auto_commit=False, **settings.kafka.aiokafka_kwargs())
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


async def _start_offset(tp: Any) -> int:
    """Where reading resumes: the committed offset (set from the broker on assignment), else the log start."""
    consumer: Any = app.consumer  # Faust's own bookkeeping, not in its ConsumerT interface
    committed = consumer._committed_offset.get(tp)
    if committed is not None:
        return int(committed)
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
                _metrics.input_record("revoked")  # fetched before a rebalance: read again after it
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
                _metrics.input_record(verdict.value)
                continue
            out.first.setdefault(tp, m.offset)
            out.upto[tp] = ledger.next_offset(tp)
        out.items.append(Incoming(raw=e.value, topic=m.topic, partition=m.partition, offset=m.offset))
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
    committed. A batch that fails to store (a store outage) is read again, not skipped."""
    proc = await processor()
    ledger: InputOffsets[Any] = InputOffsets(reseek_after=max(2.0, settings.stall_seconds / 3))
    _runtime["ledger"] = ledger  # the watchdog reads it
    failures = 0
    # take_events (not take) keeps each message's topic, partition and offset for dead letters.
    async for events in stream.take_events(settings.batch_size, within=settings.batch_within):  # type: ignore[attr-defined]
        batch = await admit(ledger, events)
        items = batch.items
        if not items:
            continue
        started = time.perf_counter()
        try:
            result = await on_store_thread(proc.process, items)
        except Exception:
            failures += 1
            log.exception("batch of %d failed to store; reading it again (failure %d in a row)", len(items), failures)
            _metrics.input_record("store_failed", len(items))
            for tp, offset in batch.first.items():
                ledger.rewind(tp, offset, time.monotonic())
                await app.consumer.seek(tp, offset)
            await asyncio.sleep(min(30.0, 0.5 * 2 ** min(failures, 6)))
            continue
        failures = 0
        _metrics.observe_batch(result, time.perf_counter() - started)
        await publish(result)
        await commit(batch.upto)
        if result.dead_letters:
            log.warning("batch of %d: %d dead letters", len(items), len(result.dead_letters))


@app.on_before_shutdown.connect
async def on_shutdown(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
    """Stops the gap probe's consumer and flushes the store (on its thread, after any write in flight)."""
    probe = _runtime.pop("probe", None)
    if probe is not None:
        await probe.stop()
    if "processor" in _runtime:
        await on_store_thread(_runtime["processor"].store.flush)


@app.timer(interval=5.0)
async def flush_store() -> None:
    """Edge stores persist on flush; the WAL covers the time between."""
    if "processor" in _runtime:
        await on_store_thread(_runtime["processor"].store.flush)


@app.page("/healthz")
async def healthz(web: Any, request: Any) -> Any:
    """Liveness: 503 when the partition watchdog found input it cannot get delivered (streams/watchdog.py)."""
    from dreamstream.streams.watchdog import stalled_partitions

    stalled = stalled_partitions()
    if stalled:
        return aioweb.json_response({"status": "stalled", "partitions": stalled}, status=503)
    return aioweb.json_response({"status": "ok", "ready": "processor" in _runtime})


@app.page("/v1/stats")
async def stats_view(web: Any, request: Any) -> Any:
    """How many memories the store holds, by status: for readiness checks and quick looks."""
    if "processor" not in _runtime:
        return aioweb.json_response({"ready": False}, status=503)
    store = _runtime["processor"].store

    def counts() -> dict[str, int]:
        by_status = {s: store.count({"status": s}) for s in ("active", "superseded", "merged", "expired")}
        return {"memories": sum(by_status.values()), **by_status}

    return aioweb.json_response({"ready": True, **(await on_store_thread(counts))})


@app.page("/v1/memories")
async def memories_view(web: Any, request: Any) -> Any:
    """GET ?user=U[&q=TEXT][&latest_only=1|&include_merged=1][&limit=N]: the same reads as the CLI."""
    from dreamstream.streams import reads

    query = request.query
    user = query.get("user")
    if not user:
        return aioweb.json_response({"error": "a read must name a user (?user=...)"}, status=400)
    try:
        mode = reads.mode_from_flags(_flag(query.get("latest_only")), _flag(query.get("include_merged")))
        limit = int(query.get("limit", "50"))
    except ValueError as exc:
        return aioweb.json_response({"error": str(exc)}, status=400)
    proc = await processor()
    text = query.get("q")
    if text:
        rows = await on_store_thread(reads.search, proc.store, proc.embed, user, text, mode, limit)
        if rows:  # a search is a recall: it feeds decay and co-access (streams/consolidate_worker.py)
            from dreamstream.streams.consolidate_worker import access_event, accessed_topic

            await accessed_topic.send(key=user.encode(), value=access_event(user, [r["memory_id"] for r in rows]))
    else:
        rows = await on_store_thread(reads.get, proc.store, user, mode)
    return aioweb.Response(body=orjson.dumps({"user": user, "mode": mode, "memories": rows}),
                           content_type="application/json")


def _flag(value: str | None) -> bool:
    return value is not None and value.lower() in ("1", "true", "yes", "on", "")


# Agents and timers that build on the ingest path (imported last: they use the names above).
from dreamstream.streams import consolidate_worker as _consolidate_worker  # noqa: E402,F401
from dreamstream.streams import control as _control  # noqa: E402,F401
from dreamstream.streams import metrics as _metrics  # noqa: E402  (GET /metrics, the lag timer)
from dreamstream.streams import synthesis_worker as _synthesis_worker  # noqa: E402,F401
from dreamstream.streams import watchdog as _watchdog  # noqa: E402,F401
