"""The worker's operational pages: health, counts, the consumer's state and Prometheus metrics (the
memory API is worker/api.py)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from aiohttp import web as aioweb
from faust.sensors.prometheus import setup_prometheus_sensors

from dreamstream.streams.core import consolidation as runner
from dreamstream.streams.worker import health, metrics
from dreamstream.streams.worker.api import refused
from dreamstream.streams.worker.app import _runtime, app, on_store_thread, settings
from dreamstream.streams.worker.watchdog import stalled_partitions

log = logging.getLogger("dreamstream.web")


def store_fault() -> tuple[str, float] | None:
    """The store fault holding ingest back (a write or a flush that fails), and since when."""
    for key in ("store_fault", "flush_fault"):
        if _runtime.get(key):
            return str(_runtime[key]), float(_runtime.get(f"{key}_since") or time.monotonic())
    return None


def held_inputs() -> list[str]:
    consumer = getattr(app, "_consumer", None)
    if consumer is None:
        return []
    inputs = {settings.topics.memory_added, settings.topics.patterns}
    return sorted(f"{tp.topic}-{tp.partition}" for tp in consumer.assignment() if tp.topic in inputs)


@app.page("/healthz")
async def healthz(web: Any, request: Any) -> Any:
    """Liveness: 503 when the partition watchdog found input it cannot get delivered (worker/watchdog.py),
    and when a store fault has held this worker's input partitions for longer than DREAM_STALL_SECONDS:
    nobody else can process them while it holds them. Before that a store fault is alive, not ready.

    A worker whose group join has not completed (no assignment since it started or since its partitions
    were revoked) for longer than `join_limit()` answers 503 `not_joined`: it would read nothing until a
    restart (seen once in CI: ready, no partitions, for minutes).

    A part that keeps failing (an agent that crashes, or skips every record on the same error: worker/
    health.py) makes it `degraded`, with each part's error in one line: 503 when it is ingest, failing
    for longer than DREAM_STALL_SECONDS (a restart may cure it, and the input waits meanwhile), else 200,
    as a restart would not help and ingest goes on (alert on `dreamstream_agent_failing`)."""
    stalled = stalled_partitions()
    if stalled:
        return aioweb.json_response({"status": "stalled", "partitions": stalled}, status=503)
    joining = health.rebalancing_for()
    if joining > join_limit():
        return aioweb.json_response({"status": "not_joined", "ready": False, "for_seconds": round(joining)}, status=503)
    fault = store_fault()
    if fault:
        cause, since = fault
        held = held_inputs()
        body = {"status": "store_fault", "ready": False, "cause": cause, "for_seconds": round(time.monotonic() - since),
                "holding": held, **({"failing": health.failing()} if health.failing() else {})}
        return aioweb.json_response(body, status=503 if held and time.monotonic() - since > settings.stall_seconds
                                    else 200)
    failing = health.failing()
    if failing:
        return aioweb.json_response({"status": "degraded", "ready": "processor" in _runtime, "failing": failing},
                                    status=503 if health.failing_for("ingest") > settings.stall_seconds else 200)
    return aioweb.json_response({"status": "ok", "ready": "processor" in _runtime})


@app.page("/v1/stats")
async def stats_view(web: Any, request: Any) -> Any:
    """How many memories the store holds, by status: for readiness checks (503 until the store is open
    and while ingest is paused on a store fault) and quick looks. `?detail=1` (an API call: token or
    loopback) adds users, kinds, types and the last consolidation runs, as `dream stats` shows them."""
    if "processor" not in _runtime:
        return aioweb.json_response({"ready": False}, status=503)
    fault = store_fault()
    if fault:
        return aioweb.json_response({"ready": False, "store_fault": fault[0]}, status=503)
    if request.query.get("detail"):
        denied = refused(request)
        if denied is not None:
            return denied
        detail = await on_store_thread(runner.stats, _runtime["processor"].store, settings.store_dir)
        return aioweb.json_response({"ready": True, **detail})
    store = _runtime["processor"].store

    def counts() -> dict[str, int]:
        by_status = {s: store.count({"status": s}) for s in ("active", "superseded", "merged", "expired")}
        return {"memories": sum(by_status.values()), **by_status}

    return aioweb.json_response({"ready": True, **(await on_store_thread(counts))})


@app.page("/v1/consumer")
async def consumer_view(web: Any, request: Any) -> Any:
    """Per assigned partition: highwater, committed and last read offsets, flow control; to tell a
    stalled worker from an idle one."""
    consumer = getattr(app, "_consumer", None)
    if consumer is None:
        return aioweb.json_response({"assigned": []})
    committed: Mapping[Any, int | None] = getattr(consumer, "_committed_offset", {})
    # Faust's own flow-control sets: a partition missing from `active` is not fetched.
    active = set(getattr(consumer, "_active_partitions", None) or ())
    paused = set(getattr(consumer, "_paused_partitions", None) or ())
    buffered = set(getattr(consumer, "_buffered_partitions", None) or ())
    read: Mapping[Any, int | None] = getattr(consumer, "_read_offset", {})
    rows = [{"topic": tp.topic, "partition": tp.partition, "highwater": consumer.highwater(tp),
             "committed": committed.get(tp), "read": read.get(tp), "fetching": tp in active, "paused": tp in paused,
             "buffer_full": tp in buffered}
            for tp in sorted(consumer.assignment())]
    return aioweb.json_response({"flow_active": bool(getattr(consumer, "flow_active", True)), "assigned": rows})


# GET /metrics: Faust's own sensor (messages, commits, rebalances, send latency, per-partition end and
# committed offsets, whose difference is the consumer lag) on the default registry, which also holds
# the domain counters of worker/metrics.py. The prefix is fixed so dashboards need no app id.
setup_prometheus_sensors(app, pattern="/metrics", name_prefix=metrics.FAUST_PREFIX)


def join_limit() -> float:
    """How long a join may take before /healthz asks for a restart: two session timeouts (the broker
    waits that long for every member) plus four stall periods of slack for a slow or large group."""
    return 2 * settings.session_timeout + 4 * settings.stall_seconds


@app.on_partitions_assigned.connect
async def joined(sender: Any, /, *args: Any, **kwargs: Any) -> None:
    health.rebalance_done()


@app.on_partitions_revoked.connect
async def forget_revoked(sender: Any, /, *args: Any, **kwargs: Any) -> None:
    """Partitions this worker gave away (Faust sends them as the first argument) lose their offset
    series: another worker reports them now. A rebalance has begun: /healthz times the join from here."""
    health.rebalance_started()
    metrics.forget_partitions(app.monitor, args[0] if args else ())
