"""The Faust app: its topics, the worker's one Processor and the store thread.

Importing this module builds the app and nothing else; the agents, timers and pages that run on it
live in their own modules and register themselves when `worker.main` imports them. The heavy
objects (model, store) are built once per worker, lazily, and every store or model call runs on one
worker thread so the event loop never blocks.
"""

from __future__ import annotations

import asyncio
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import faust
from aiohttp import web

from dreamstream.schemas.events import dead_letter
from dreamstream.streams import settings as settings_mod
from dreamstream.streams.core import changes, judges
from dreamstream.streams.core.embedding import shared_embedder
from dreamstream.streams.core.ingest import BatchResult, Processor
from dreamstream.streams.store import open_configured
from dreamstream.streams.worker import health, metrics
from dreamstream.streams.worker.records import DeadLetter, MemoryStatus

log = logging.getLogger("dreamstream.app")
settings = settings_mod.load()
judges.check_settings(settings)  # a misconfigured judge or writer stops `dream worker` at start, with the reason

@web.middleware
async def json_errors(request: web.Request, handler: Any) -> web.StreamResponse:
    """aiohttp's own 404 and 405 (an unknown path, a method a page lacks) as the API's other errors are:
    JSON `{"error": ...}` with the same status (and `Allow`), not plain text."""
    try:
        response: web.StreamResponse = await handler(request)
        return response
    except web.HTTPException as exc:
        if exc.status < 400 or exc.content_type == "application/json":
            raise
        headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        return web.json_response({"error": f"{exc.reason.lower()}: {request.method} {request.path}"},
                                 status=exc.status, headers=headers)


class DreamApp(faust.App):
    async def _on_agent_error(self, agent: Any, exc: BaseException) -> None:
        """Faust's hook for an agent that crashed (its supervisor restarts it): counted and shown on
        /healthz (worker/health.py), where it would otherwise only be logged."""
        health.failed(health.part_of(agent.name), exc)
        await super()._on_agent_error(agent, exc)


app = DreamApp(
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
    canonical_url=settings.advertised_url or f"http://{settings.http_host}:{settings.http_port}",
    web_in_thread=False,
    consumer_auto_offset_reset="earliest",
    broker_commit_every=200,
    broker_commit_interval=1.0,
    broker_session_timeout=settings.session_timeout,
    broker_heartbeat_interval=min(3.0, settings.session_timeout / 4),
    producer_acks=-1,
    stream_buffer_maxsize=4096,
    table_standby_replicas=0,  # a worker's timers act on the users its tables hold: active partitions only
    web_application_options={"middlewares": [json_errors]},
)

t = settings.topics
memory_added_topic = app.topic(t.memory_added, partitions=t.partitions, key_type=bytes, value_type=bytes)
patterns_topic = app.topic(t.patterns, partitions=t.partitions, key_type=bytes, value_type=bytes)
status_topic = app.topic(t.memory_status, partitions=t.partitions, key_type=bytes, value_serializer="orjson")
dead_letter_topic = app.topic(t.dead_letters, partitions=t.partitions, key_type=bytes, value_serializer="orjson")
ingest_channel = app.topic(t.memory_added, t.patterns, key_type=bytes, value_type=bytes, acks=False)
"""Acks off: ingest commits these offsets itself, after the store write (worker/offsets.py says why)."""

RECOVER_GRACE_S = 120.0
"""How old an unfinished intent on a shared store must be before a starting worker finishes it."""
_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dream-store")
_runtime: dict[str, Any] = {}


def _build_processor() -> Processor:
    owner = (f"worker pid {os.getpid()}; read it over HTTP at "
             f"http://{settings.http_host}:{settings.http_port}/v1/memories?user=...")
    store = metrics.TimedStore(open_configured(settings, owner=owner))
    _runtime["store"] = store
    # A writer a crash interrupted: finished before anything reads. On a shared server store other workers
    # may be mid-write: their young intents are theirs (or their redelivery's) to finish.
    finished = changes.recover(store, grace_seconds=RECOVER_GRACE_S if settings.qdrant_url else 0.0)
    if finished:
        log.warning("finished changes a crash had left half-applied (%d status events to send)", len(finished))
    return Processor(store, shared_embedder(), keep_outbox=True, erase_dir=os.path.join(settings.data_dir, "erase"),
                     erase_key=settings.erase_key, patterns_topic=settings.topics.patterns)


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
    """Status events and dead letters of one batch, keyed by user so they keep per-user order, and delivered:
    the broker's answer to each is awaited, so a refused one raises here (the caller then commits nothing and
    marks nothing sent) instead of being a warning in the log while the input offset moves on."""
    await deliver([(status_topic, ev["user_id"].encode(), MemoryStatus(**ev)) for ev in result.status_events]
                  + [(dead_letter_topic, None, DeadLetter(**dl)) for dl in result.dead_letters])


async def deliver(records: list[tuple[Any, bytes | None, Any]]) -> None:
    """Sends (topic, key, value) records in order and awaits the broker's answer to each: a refused record
    raises, so nothing is marked sent nor acknowledged that the broker did not take."""
    sent = [await topic.send(key=key, value=value) for topic, key, value in records]
    if sent:
        await app.producer.flush()
        for delivery in sent:
            await delivery  # RecordMetadata, or the broker's error


async def send_dead_letter(event: Any, reason: str, message: str) -> None:
    """One bad input record of a Faust stream event to the dead-letter topic, with where it came from."""
    m = event.message
    dl = dead_letter(event.value, reason, message, m.topic, m.partition, m.offset)
    await dead_letter_topic.send(key=None, value=DeadLetter(**dl))
