"""Which parts of the worker are failing, for /healthz and the metrics: an agent that crashes (Faust
restarts it and would otherwise only log) or one that skips every record on the same error.

A part is failing from its first error until it next gets a record through; `/healthz` names it with
the error in one line. Faust-free, so that the agents, the web pages and the tests share it.
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import Counter, Gauge

from dreamstream.schemas.events import now_iso

AGENT_PARTS = {"ingest": "ingest", "control": "control", "synthesis_bookkeeping": "synthesis.bookkeeping",
               "synthesis_runs_applied": "synthesis.runs", "synthesis_tick": "synthesis.timer",
               "schedule_updates": "consolidation.schedules", "accessed": "consolidation.access"}
"""Agent (or timer) function name -> the part /healthz and the metrics name it by."""
PARTS = tuple(AGENT_PARTS.values())

CRASHES = Counter("dreamstream_agent_errors_total",
                  "Errors that crashed an agent or made it skip a record, by part (ingest, control, ...).",
                  ["part"])
FAILING = Gauge("dreamstream_agent_failing", "1 while a part's last record failed, else 0.", ["part"])
for _part in PARTS:
    CRASHES.labels(_part)
    FAILING.labels(_part).set(0)

_failing: dict[str, dict[str, Any]] = {}


def one_line(exc: BaseException) -> str:
    """`Type: message` on one line (Faust's own errors span several)."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def part_of(agent_name: str) -> str:
    """The part an agent (Faust names it by module and function) belongs to."""
    short = agent_name.rsplit(".", 1)[-1]
    return AGENT_PARTS.get(short, short)


def failed(part: str, exc: BaseException) -> None:
    entry = _failing.setdefault(part, {"errors": 0, "since": now_iso(), "since_monotonic": time.monotonic()})
    entry.update(error=one_line(exc), last=now_iso(), errors=entry["errors"] + 1)
    CRASHES.labels(part).inc()
    FAILING.labels(part).set(1)


def recovered(part: str) -> None:
    """A record got through: the part works again."""
    if _failing.pop(part, None) is not None:
        FAILING.labels(part).set(0)


def failing_for(part: str) -> float:
    """Seconds the part has been failing (0 when it is not)."""
    entry = _failing.get(part)
    return time.monotonic() - float(entry["since_monotonic"]) if entry else 0.0


def failing() -> dict[str, dict[str, Any]]:
    """Part -> {error, errors, since, last} for every part failing now."""
    return {p: {k: v for k, v in e.items() if k != "since_monotonic"} for p, e in sorted(_failing.items())}


_rebalancing_since: float | None = time.monotonic()
"""When the worker's group membership last went without an assignment (its start, or a revocation):
a join that never completes leaves a worker that looks up and reads nothing."""


def rebalance_started() -> None:
    global _rebalancing_since
    if _rebalancing_since is None:
        _rebalancing_since = time.monotonic()


def rebalance_done() -> None:
    global _rebalancing_since
    _rebalancing_since = None


def rebalancing_for() -> float:
    """Seconds since the worker last held an assignment from its group (0 while it holds one, even an
    empty one: more workers than partitions is a settled group, not a stuck join)."""
    return time.monotonic() - _rebalancing_since if _rebalancing_since is not None else 0.0
