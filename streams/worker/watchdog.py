"""Re-seeks an input partition that has records waiting but stopped delivering them.

Seen here after a worker restart following a SIGKILL (about one run in four of the crash test): a
partition is assigned, not paused, Faust counts it as fetching, its highwater is ahead, and yet no
record of it ever reaches the agents (the fetcher sits in `getmany`, no error is logged; upstream
reports of the same family: faust-streaming issue #175). The watchdog first seeks the partition
to where reading should continue (the driver then fetches it afresh: seen to heal it here); when
that brings nothing within another period, the driver is wedged, and `/healthz` turns unhealthy (503) so the
supervisor (the Kubernetes liveness probe, or the test harness) restarts the worker. Either way
redelivery is safe: ingest is idempotent on memory_id. A partition that ingest seeked back to records
it was never given (streams/worker/offsets.py) is treated the same when they have not come after two
periods. `GET /v1/consumer` shows the same state by hand; `dreamstream_partition_reseeks_total`
counts the seeks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import Counter

from dreamstream.streams.worker import metrics
from dreamstream.streams.worker.app import _runtime, app, settings
from dreamstream.streams.worker.ingest import committed_on_broker, lag_on_broker
from dreamstream.streams.worker.tables import settings_table

log = logging.getLogger("dreamstream.watchdog")

HEALED = Counter("dreamstream_partition_ledger_heals_total",
                 "Input partitions whose offset ledger resumed at the broker's commit after a stall.", ["topic"])
RESEEKS = Counter("dreamstream_partition_reseeks_total",
                  "Input partitions re-seeked after records waited without being delivered.", ["topic"])


@dataclass
class Progress:
    """Per partition: the last read offset seen and since when it has not moved while behind."""

    stall_seconds: float
    seen: dict[Any, tuple[int | None, float]] = field(default_factory=dict)
    highwaters: dict[Any, int] = field(default_factory=dict)
    wedged: dict[Any, set[int | None]] = field(default_factory=dict)
    """Partitions a re-seek did not heal, with the read offsets that mean nothing arrived since."""

    def stalled(self, tp: Any, highwater: int | None, read: int | None, committed: int | None,
                now: float) -> int | None:
        """The offset to seek `tp` to when it is stalled, else None.

        Behind: the highwater (next offset to be written) is past the next offset to read, which is
        read + 1, else the committed offset, else 0. Stalled: behind with the same read offset for
        `stall_seconds`."""
        if highwater is None:  # the driver forgets it on a seek until a fetch answers: keep the last one
            highwater = self.highwaters.get(tp)
        else:
            self.highwaters[tp] = highwater
        next_offset = read + 1 if read is not None else (committed or 0)
        if highwater is None or highwater <= next_offset:
            self.seen.pop(tp, None)
            return None
        last = self.seen.get(tp)
        if last is None or last[0] != read:
            self.seen[tp] = (read, now)
            return None
        if now - last[1] < self.stall_seconds:
            return None
        self.seen[tp] = (read, now)  # give the seek a full period before judging again
        return next_offset

    def hold(self, tp: Any) -> None:
        """Records wait by design (`ingest.pause`, a store fault): no stall, and its clock starts afresh after.
        A pause with records arriving read as a stall: /healthz failed, and the liveness probe restarted the
        worker again and again for as long as the pause held (an observability audit)."""
        self.seen.pop(tp, None)

    def wedge(self, tp: Any, still: set[int | None]) -> bool:
        """Marks `tp` as delivering nothing even after a re-seek (/healthz fails); `still`: its read offsets
        that mean nothing arrived (before a seek, and what the seek set). True when newly marked."""
        new = tp not in self.wedged
        self.wedged[tp] = self.wedged.get(tp, set()) | still
        return new

    def delivered(self, tp: Any, read: int | None) -> bool:
        """Clears the mark of a wedged partition that has delivered since (its read offset moved); True if it
        did. The verdict had no way back: a worker whose records flowed again still failed /healthz."""
        if tp in self.wedged and read not in self.wedged[tp]:
            del self.wedged[tp]
            return True
        return False


_progress = Progress(stall_seconds=settings.stall_seconds)
_reseeked: dict[Any, tuple[asyncio.Future[Any], set[int | None]]] = {}
"""Partition -> the seek and the read offsets that mean "nothing arrived since" (before the seek, and
what the seek sets). The seek runs as a task of its own, so a slow one never holds up the timer."""


def stalled_partitions() -> list[str]:
    """Partitions a re-seek did not heal: /healthz reports them and fails."""
    return sorted(f"{tp.topic}-{tp.partition}" for tp in _progress.wedged)


def _wedged(tp: Any, still: set[int | None], why: str) -> None:
    if _progress.wedge(tp, still):
        log.error("partition %s-%d still delivers nothing (%s): /healthz now fails so the worker is restarted",
                  tp.topic, tp.partition, why)


@app.timer(interval=max(1.0, settings.stall_seconds / 3))
async def partition_watchdog() -> None:
    consumer = getattr(app, "_consumer", None)
    if consumer is None or "processor" not in _runtime:
        return
    try:
        read = getattr(consumer, "_read_offset", {})
        assigned = consumer.assignment()
        for tp in list(_progress.wedged):
            if tp not in assigned:  # moved to another worker: its verdict goes with it
                _progress.wedged.pop(tp)
            elif _progress.delivered(tp, read.get(tp)):
                log.warning("partition %s-%d delivers again: /healthz no longer fails for it", tp.topic, tp.partition)
        # Waiting by design: ingest paused by command (its partitions paused) or on a store fault.
        held = bool(settings_table.get("paused")) or "store_fault" in _runtime
        paused = set(getattr(consumer, "_paused_partitions", None) or ())
        ledger = _runtime.get("ledger")
        if ledger is not None and not held:
            for tp in ledger.unanswered(time.monotonic(), after=2 * settings.stall_seconds):
                if ledger.heal(tp, await committed_on_broker(tp)):
                    log.warning("partition %s-%d: the records it waited for are committed already; resuming "
                                "at the committed offset %d", tp.topic, tp.partition, ledger.next_offset(tp))
                    HEALED.labels(tp.topic).inc()
                    await consumer.seek(tp, ledger.next_offset(tp))
                    continue
                _wedged(tp, {read.get(tp)}, "records were not delivered and seeking back to them brought nothing")
        inputs = {settings.topics.memory_added, settings.topics.patterns}
        committed = getattr(consumer, "_committed_offset", {})
        full = set(getattr(consumer, "_buffered_partitions", None) or ())  # paused by flow control: not stalled
        now = time.monotonic()
        for gone in set(_reseeked) - set(assigned):  # moved to another worker: a fresh start if it returns
            _reseeked.pop(gone)
        for tp in assigned:
            if tp.topic not in inputs or tp in full:
                continue
            if held or tp in paused:
                _progress.hold(tp)
                _reseeked.pop(tp, None)
                continue
            target = _progress.stalled(tp, consumer.highwater(tp), read.get(tp), committed.get(tp), now)
            if target is None:
                continue
            if tp in _reseeked and read.get(tp) in _reseeked[tp][1]:
                seek = _reseeked[tp][0]
                _wedged(tp, _reseeked[tp][1], "a re-seek did not help" if seek.done() else "the seek did not return")
                continue
            log.warning("partition %s-%d: records up to %s waiting, none delivered for %.0fs: seeking to %d",
                        tp.topic, tp.partition, consumer.highwater(tp), settings.stall_seconds, target)
            RESEEKS.labels(tp.topic).inc()
            _reseeked[tp] = (asyncio.ensure_future(consumer.seek(tp, target)), {read.get(tp), target or None})
        await _report_lag([tp for tp in assigned if tp.topic in inputs])
    except Exception:  # a timer that raises crashes the worker; the next tick looks again
        log.exception("partition watchdog failed")


_lagging: set[tuple[str, str]] = set()
"""The (topic, partition) label sets `dreamstream_consumer_lag` holds: a partition that moved away drops out."""


async def _report_lag(tps: list[Any]) -> None:
    lag = await lag_on_broker(tps)
    if tps and not lag:
        return  # no answer: the last figures stand
    held = set()
    for tp, records in lag.items():
        key = (tp.topic, str(tp.partition))
        metrics.CONSUMER_LAG.labels(*key).set(records)
        held.add(key)
    for key in _lagging - held:
        metrics.CONSUMER_LAG.remove(*key)
    _lagging.clear()
    _lagging.update(held)
