"""worker/health.py: a part is failing from its first error until a record gets through, named in one line."""

from __future__ import annotations

import asyncio

from prometheus_client import REGISTRY

from dreamstream.streams.worker import health


def gauge(part: str) -> float | None:
    return REGISTRY.get_sample_value("dreamstream_agent_failing", {"part": part})


def test_a_part_fails_until_a_record_gets_through() -> None:
    before = REGISTRY.get_sample_value("dreamstream_agent_errors_total", {"part": "synthesis.runs"}) or 0.0
    health.failed("synthesis.runs", ValueError("changelog\nhas 3 partitions"))
    health.failed("synthesis.runs", ValueError("changelog\nhas 3 partitions"))
    entry = health.failing()["synthesis.runs"]
    assert entry["error"] == "ValueError: changelog has 3 partitions" and entry["errors"] == 2
    assert gauge("synthesis.runs") == 1.0 and health.failing_for("synthesis.runs") >= 0.0
    assert REGISTRY.get_sample_value("dreamstream_agent_errors_total", {"part": "synthesis.runs"}) == before + 2
    health.recovered("synthesis.runs")
    assert "synthesis.runs" not in health.failing() and gauge("synthesis.runs") == 0.0
    assert health.failing_for("synthesis.runs") == 0.0


def test_faust_agent_crashes_are_recorded_under_their_part() -> None:
    """The app's agent-error hook (Faust calls it when an agent crashes, before restarting it)."""
    from dreamstream.streams.worker.app import app

    class Crashed:
        name = "dreamstream.streams.worker.control.control"

    asyncio.run(app._on_agent_error(Crashed(), RuntimeError("boom")))  # type: ignore[arg-type]
    assert health.failing()["control"]["error"] == "RuntimeError: boom"
    health.recovered("control")
    assert health.part_of("dreamstream.streams.worker.synthesis.synthesis_tick") == "synthesis.timer"
