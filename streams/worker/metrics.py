"""Prometheus metrics of the worker, served at GET /metrics on its web server.

Why here and not in the pipeline: `Processor` is shared by `dream replay`, the tests and the worker,
and only the worker is scraped, so the figures are taken from what the pipeline already reports
(`BatchResult`), from a timing wrapper around the store, and from the hooks the synthesis, control
and consolidation code call. Everything goes to prometheus-client's default registry, which also
carries the process_* and python_* collectors.

Labelled series whose label values are known up front are created at zero, so dashboards and
alerts see a 0 rather than no series at all (the Prometheus convention for labelled metrics).
"""

from __future__ import annotations

import logging
import time
from collections import Counter as Tally
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import numpy as np
from prometheus_client import Counter, Gauge, Histogram

from dreamstream.schemas.control import COMMANDS
from dreamstream.schemas.events import MEMORY_ADDED, PATTERN_ADDED, REASONS
from dreamstream.schemas.memory import Memory
from dreamstream.streams.core.ingest import BatchResult
from dreamstream.streams.settings import load
from dreamstream.streams.store import MemoryStore, Where

log = logging.getLogger("dreamstream.metrics")
PATTERNS_TOPIC = load().topics.patterns

FAST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
SLOW_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
LAG_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 21600.0, 86400.0)

EVENTS = Counter("dreamstream_events_total", "Ingested events by event type and outcome.", ["type", "outcome"])
DECISIONS = Counter("dreamstream_decisions_total", "Decisions applied, by action and the judge that made them.",
                    ["action", "judge"])
DEAD_LETTERS = Counter("dreamstream_dead_letters_total", "Ingest records sent to the dead-letter topic, by reason.",
                       ["reason"])
BATCH_SECONDS = Histogram("dreamstream_ingest_batch_duration_seconds", "Time to process one ingest batch.",
                          buckets=SLOW_BUCKETS)
EMBED_BATCH = Histogram("dreamstream_embedding_batch_size", "Texts embedded per model call on the ingest path.",
                        buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512))
EMBED_SECONDS = Histogram("dreamstream_embedding_duration_seconds", "Time of one embedding model call.",
                          buckets=FAST_BUCKETS)
E2E_LAG = Histogram("dreamstream_end_to_end_lag_seconds",
                    "From an event's created_at to its decision applied in the store.", buckets=LAG_BUCKETS)
STORE_SECONDS = Histogram("dreamstream_store_operation_duration_seconds", "Store calls by operation and backend.",
                          ["operation", "backend"], buckets=FAST_BUCKETS)
SYNTH_RUNS = Counter("dreamstream_synthesis_runs_total", "Synthesis checks: `ran` or the reason it was skipped.",
                     ["result"])
SYNTH_PATTERNS = Counter("dreamstream_synthesis_patterns_total", "Patterns by what a synthesis run did to them.",
                         ["change"])
SYNTH_SECONDS = Histogram("dreamstream_synthesis_run_duration_seconds", "Duration of synthesis runs that ran.",
                          buckets=SLOW_BUCKETS)
CONSOLIDATION_RUNS = Counter("dreamstream_consolidation_runs_total", "Consolidation passes by kind and status.",
                             ["kind", "status"])
CONSOLIDATION_SECONDS = Histogram("dreamstream_consolidation_run_duration_seconds",
                                  "Duration of consolidation passes.", ["kind"], buckets=SLOW_BUCKETS)
INPUT_NOT_TAKEN = Counter(
    "dreamstream_input_records_not_taken_total",
    "Input records ingest did not store on arrival: `skip` (already stored), `seek` and `drop` (past records "
    "never delivered: read again), `revoked` (fetched before a rebalance), `store_failed` (batch read again).",
    ["reason"])
STORE_FAULT = Gauge("dreamstream_store_fault",
                    "1 while ingest is paused on a store fault (disk full, unwritable, unreachable), else 0.")
CONSUMER_LAG = Gauge("dreamstream_consumer_lag",
                     "Records of an input partition this worker holds that its group has not committed, from the "
                     "broker's end and committed offsets: also while nothing is delivered (paused, stalled).",
                     ["topic", "partition"])
CONTROL = Counter("dreamstream_control_commands_total", "Commands on the control topic by command and outcome.",
                  ["command", "outcome"])

EVENT_OUTCOMES = {"stored": (MEMORY_ADDED, "stored"), "pattern_stored": (PATTERN_ADDED, "stored"),
                  "redelivered": (MEMORY_ADDED, "redelivered"), "removed_for_good": (MEMORY_ADDED, "removed_for_good"),
                  "pattern_declined": (PATTERN_ADDED, "removed_for_good")}
SYNTH_RESULTS = ("ran", "disabled", "too_few_memories", "not_due", "unchanged")
PATTERN_CHANGES = ("written", "updated", "unchanged", "retired")
CONTROL_OUTCOMES = ("ok", "error", "rejected")
CONSOLIDATION_KINDS = ("dry_run", "auto", "approve")
CONSOLIDATION_STATUSES = ("ok", "error")
NOT_TAKEN_REASONS = ("skip", "seek", "drop", "revoked", "store_failed")


def _initialise() -> None:
    for etype in (MEMORY_ADDED, PATTERN_ADDED):
        for outcome in ("stored", "redelivered", "dead_letter", "removed_for_good"):
            EVENTS.labels(etype, outcome)
    for reason in REASONS:
        DEAD_LETTERS.labels(reason)
    for result in SYNTH_RESULTS:
        SYNTH_RUNS.labels(result)
    for change in PATTERN_CHANGES:
        SYNTH_PATTERNS.labels(change)
    for command in COMMANDS:
        for outcome in CONTROL_OUTCOMES:
            CONTROL.labels(command, outcome)
    CONTROL.labels("invalid", "rejected")
    for reason in NOT_TAKEN_REASONS:
        INPUT_NOT_TAKEN.labels(reason)
    for kind in CONSOLIDATION_KINDS:
        CONSOLIDATION_SECONDS.labels(kind)
        for status in CONSOLIDATION_STATUSES:
            CONSOLIDATION_RUNS.labels(kind, status)


_initialise()


# -- hooks ------------------------------------------------------------------------------------------


def observe_batch(result: BatchResult, seconds: float) -> None:
    """One ingest batch's figures, from what the pipeline reported."""
    BATCH_SECONDS.observe(seconds)
    for outcome, n in result.outcomes.items():
        if outcome in EVENT_OUTCOMES:
            EVENTS.labels(*EVENT_OUTCOMES[outcome]).inc(n)
    for dl in result.dead_letters:
        etype = PATTERN_ADDED if dl.get("topic") == PATTERNS_TOPIC else MEMORY_ADDED
        EVENTS.labels(etype, "dead_letter").inc()
        DEAD_LETTERS.labels(str(dl.get("reason") or "unknown")).inc()
    for (action, judge), n in decisions_by_judge(result).items():
        DECISIONS.labels(action, judge).inc(n)
    if result.embedded:
        EMBED_BATCH.observe(result.embedded)
        EMBED_SECONDS.observe(result.embed_seconds)
    for lag in result.lags:
        E2E_LAG.observe(max(0.0, lag))


def input_record(reason: str, n: int = 1) -> None:
    INPUT_NOT_TAKEN.labels(reason).inc(n)


def decisions_by_judge(result: BatchResult) -> Tally[tuple[str, str]]:
    """(action, judge) per decision: the judge is in the status events' evidence (one decision may
    change several memories, so count decision ids once); decisions without a status event keep
    their action with judge `unknown`."""
    seen: dict[str, tuple[str, str]] = {}
    for ev in result.status_events:
        if ev.get("undo") or ev.get("decision_id") in seen:
            continue
        judge = (ev.get("evidence") or {}).get("judge") or "unknown"
        seen[ev["decision_id"]] = (str(ev.get("action")), str(judge))
    out: Tally[tuple[str, str]] = Tally(seen.values())
    for action, n in result.decisions.items():
        known = sum(v for (a, _), v in out.items() if a == action)
        if n > known:
            out[(action, "unknown")] += n - known
    return out


def synthesis_run(record: Any) -> None:
    """A `core.synthesis.RunRecord` from the worker's synthesis timer."""
    SYNTH_RUNS.labels("ran" if record.ran else (record.reason or "skipped")).inc()
    if record.ran:
        SYNTH_SECONDS.observe(float(record.duration_seconds))
    for change in PATTERN_CHANGES:
        n = int(getattr(record, f"patterns_{change}", 0) or 0)
        if n:
            SYNTH_PATTERNS.labels(change).inc(n)


def consolidation_run(kind: str, status: str, seconds: float) -> None:
    """One consolidation pass; `kind` is its mode (dry_run, auto, approve), `status` ok or error."""
    CONSOLIDATION_RUNS.labels(kind, status).inc()
    CONSOLIDATION_SECONDS.labels(kind).observe(seconds)


def control_command(command: str, outcome: str) -> None:
    """One reply on the control topic; unknown command names collapse to `invalid` (bounded labels)."""
    CONTROL.labels(command if command in COMMANDS else "invalid", outcome).inc()


# -- store timing -----------------------------------------------------------------------------------


class TimedStore:
    """A MemoryStore that times every call; anything else (optimize, shard, ...) passes through."""

    def __init__(self, inner: MemoryStore, backend: str | None = None) -> None:
        self.inner = inner
        self.backend = backend or type(inner).__name__.removesuffix("Store").lower()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @contextmanager
    def _timed(self, operation: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            STORE_SECONDS.labels(operation, self.backend).observe(time.perf_counter() - start)

    def upsert(self, memories: Sequence[Memory]) -> None:
        with self._timed("upsert"):
            self.inner.upsert(memories)

    def update(self, memory_id: str, fields: Mapping[str, Any]) -> None:
        with self._timed("set_payload"):
            self.inner.update(memory_id, fields)

    def update_many(self, memory_ids: Sequence[str], fields: Mapping[str, Any]) -> None:
        with self._timed("set_payload"):
            self.inner.update_many(memory_ids, fields)

    def nearest_many(
        self, vectors: Sequence[np.ndarray], wheres: Sequence[Where], limit: int, with_vectors: bool = False
    ) -> list[list[tuple[Memory, float]]]:
        with self._timed("search"):  # a batch of candidate searches, one call
            return self.inner.nearest_many(vectors, wheres, limit, with_vectors)

    def retrieve(self, memory_ids: Sequence[str], with_vectors: bool = False) -> dict[str, Memory]:
        with self._timed("retrieve"):
            return self.inner.retrieve(memory_ids, with_vectors)

    def nearest(
        self, vector: np.ndarray, where: Where, limit: int, with_vectors: bool = False, with_features: bool = True
    ) -> list[tuple[Memory, float]]:
        with self._timed("search"):
            return self.inner.nearest(vector, where, limit, with_vectors, with_features)

    def scroll(self, where: Where | None = None, with_vectors: bool = False,
               with_features: bool = True) -> Iterator[Memory]:
        """Timed until the iterator is exhausted (or dropped): the pages the caller pulled."""
        with self._timed("scroll"):
            yield from self.inner.scroll(where, with_vectors, with_features)

    def count(self, where: Where | None = None) -> int:
        with self._timed("count"):
            return self.inner.count(where)

    def delete(self, memory_ids: Sequence[str]) -> None:
        with self._timed("delete"):
            self.inner.delete(memory_ids)

    def flush(self) -> None:
        with self._timed("flush"):
            self.inner.flush()

    def close(self) -> None:
        self.inner.close()


# -- Faust's sensor ------------------------------------------------------------------------------------

FAUST_PREFIX = "dreamstream_faust"
"""Name prefix of Faust's own Prometheus metrics (faust.sensors.prometheus), e.g. the lag's two halves
dreamstream_faust_topic_partition_end_offset and dreamstream_faust_topic_partition_offset_commited."""


def forget_partitions(monitor: Any, partitions: Iterable[Any]) -> None:
    """Drops the per-partition offset series of partitions this worker no longer holds."""
    faust_metrics = getattr(monitor, "_metrics", None)
    if faust_metrics is None:
        return
    for tp in partitions:
        for gauge in (faust_metrics.topic_partition_end_offset, faust_metrics.topic_partition_offset_commited):
            with suppress(KeyError):
                gauge.remove(tp.topic, tp.partition)
