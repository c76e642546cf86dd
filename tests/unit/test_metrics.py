"""Metrics: the figures a batch yields (real store, real model), and the dashboard against a real
Prometheus (Debian's `prometheus`) scraping a real `dream worker` under load, so every panel's query
is checked against the metrics the worker actually exports."""

from __future__ import annotations

from pathlib import Path

import pytest

from dreamstream.streams.core.ingest import Incoming, Processor
from dreamstream.streams.store import EdgeStore
from tests.conftest import ROOT
from tests.helpers import event, line

DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "dreamstream.json"
SCRAPE_CONFIG = ROOT / "deploy" / "prometheus" / "prometheus.yml"


def sample(name: str, **labels: str) -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_batch_figures_count_outcomes_decisions_judges_and_store_calls(tmp_path: Path, embedder) -> None:
    from dreamstream.streams.worker import metrics

    inner = EdgeStore(tmp_path / "store")
    store = metrics.TimedStore(inner)
    proc = Processor(store, embedder)
    before = {
        "stored": sample("dreamstream_events_total", type="memory.added", outcome="stored"),
        "dead": sample("dreamstream_dead_letters_total", reason="invalid_json"),
        "upserts": sample("dreamstream_store_operation_duration_seconds_count", operation="upsert", backend="edge"),
        "embeds": sample("dreamstream_embedding_batch_size_sum"),
    }
    items = [Incoming(line(e)) for e in (event(1, "mu", "User lives in Lisbon.", day=1),
                                         event(2, "mu", "I moved to Berlin.", day=5))]
    result = proc.process([*items, Incoming(b"{not json")])
    metrics.observe_batch(result, 0.1)

    assert sample("dreamstream_events_total", type="memory.added", outcome="stored") - before["stored"] == 2
    assert sample("dreamstream_dead_letters_total", reason="invalid_json") - before["dead"] == 1
    assert sample("dreamstream_embedding_batch_size_sum") - before["embeds"] == 2
    # the batch's two memories go to the store in one upsert
    assert sample("dreamstream_store_operation_duration_seconds_count", operation="upsert", backend="edge") \
        - before["upserts"] == 1
    (judged,) = metrics.decisions_by_judge(result).items()
    judge = result.status_events[0]["evidence"]["judge"]
    assert judged == (("supersede", judge), 1) and judge != "unknown"
    # Redelivered: counted as such, no second decision.
    again = proc.process(items)
    assert again.outcomes["redelivered"] == 2 and not metrics.decisions_by_judge(again)
    assert store.count() == inner.count() == 2 and store.optimize is not None  # pass-through
    store.close()


def test_control_and_consolidation_hooks_keep_labels_bounded() -> None:
    from dreamstream.streams.worker import metrics

    b = sample("dreamstream_control_commands_total", command="invalid", outcome="rejected")
    metrics.control_command("rm -rf /", "rejected")
    assert sample("dreamstream_control_commands_total", command="invalid", outcome="rejected") == b + 1
    metrics.consolidation_run("auto", "ok", 0.5)
    assert sample("dreamstream_consolidation_run_duration_seconds_sum", kind="auto") >= 0.5


# -- a real Prometheus ------------------------------------------------------------------------------


def test_kafka_security_settings_reach_aiokafka(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """What the worker hands faust is what aiokafka gets (faust's own translation), per protocol."""
    from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

    from dreamstream.streams.settings import KafkaSecurity

    assert KafkaSecurity().faust_credentials() is None and KafkaSecurity().aiokafka_kwargs() == {}
    monkeypatch.setenv("DREAM_KAFKA_SECURITY_PROTOCOL", "sasl_ssl")
    monkeypatch.setenv("DREAM_KAFKA_SASL_MECHANISM", "SCRAM-SHA-512")
    monkeypatch.setenv("DREAM_KAFKA_SASL_USERNAME", "dream")
    monkeypatch.setenv("DREAM_KAFKA_SASL_PASSWORD", "s3cret")
    sec = KafkaSecurity()
    auth = credentials_to_aiokafka_auth(sec.faust_credentials())
    assert (auth["security_protocol"], auth["sasl_mechanism"]) == ("SASL_SSL", "SCRAM-SHA-512")
    assert (auth["sasl_plain_username"], auth["sasl_plain_password"]) == ("dream", "s3cret")
    assert auth["ssl_context"].verify_mode.name == "CERT_REQUIRED"
    assert {k: v for k, v in sec.aiokafka_kwargs().items() if k != "ssl_context"} == {
        k: v for k, v in auth.items() if k != "ssl_context"}

    monkeypatch.setenv("DREAM_KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    assert credentials_to_aiokafka_auth(KafkaSecurity().faust_credentials())["ssl_context"] is None
    monkeypatch.setenv("DREAM_KAFKA_SECURITY_PROTOCOL", "SSL")
    monkeypatch.setenv("DREAM_KAFKA_SSL_CAFILE", str(tmp_path / "missing-ca.pem"))
    with pytest.raises(FileNotFoundError):  # a wrong CA path fails at start, not at the first fetch
        KafkaSecurity().faust_credentials()
    monkeypatch.setenv("DREAM_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.delenv("DREAM_KAFKA_SASL_PASSWORD")
    with pytest.raises(ValueError, match="PASSWORD"):
        KafkaSecurity()
    monkeypatch.setenv("DREAM_KAFKA_SECURITY_PROTOCOL", "TLS")
    with pytest.raises(ValueError, match="SECURITY_PROTOCOL"):
        KafkaSecurity()


def test_the_watchdog_calls_a_partition_stalled_only_when_behind_and_still() -> None:
    from dreamstream.streams.worker.watchdog import Progress

    p = Progress(stall_seconds=10)
    assert p.stalled("tp", highwater=29, read=None, committed=None, now=0) is None  # first look
    assert p.stalled("tp", highwater=29, read=None, committed=None, now=5) is None  # not long enough
    assert p.stalled("tp", highwater=29, read=None, committed=None, now=11) == 0    # nothing ever read
    assert p.stalled("tp", highwater=29, read=None, committed=None, now=15) is None  # the seek gets a period
    assert p.stalled("tp", highwater=260, read=54, committed=40, now=0) is None
    assert p.stalled("tp", highwater=260, read=60, committed=40, now=20) is None    # moving: not stalled
    assert p.stalled("tp", highwater=260, read=60, committed=40, now=31) == 61      # continue after the last read
    assert p.stalled("done", highwater=30, read=29, committed=30, now=0) is None     # caught up
    assert p.stalled("done", highwater=30, read=29, committed=30, now=99) is None
    # After a seek the driver reports no highwater until a fetch answers: the last one still counts.
    assert p.stalled("seeked", highwater=29, read=None, committed=None, now=0) is None
    assert p.stalled("seeked", highwater=None, read=None, committed=None, now=11) == 0


def test_a_held_partition_is_no_stall_and_a_wedged_one_heals_when_it_delivers() -> None:
    """An observability audit: `ingest.pause` with records arriving turned /healthz 503 `stalled` (a liveness
    probe restarts the worker, again and again while the pause holds), and the verdict never cleared."""
    from dreamstream.streams.worker.watchdog import Progress

    p = Progress(stall_seconds=10)
    for now in (0, 11, 22, 33):  # paused: the watchdog holds it each look, never a stall
        p.hold("tp")
        assert p.stalled("tp", highwater=9, read=4, committed=5, now=now + 0.5) is None
    assert p.stalled("tp", highwater=9, read=4, committed=5, now=40) is None  # resumed: its clock starts afresh
    assert p.stalled("tp", highwater=9, read=4, committed=5, now=51) == 5
    assert p.wedge("tp", {4, 5}) and not p.wedge("tp", {4})  # marked once
    assert not p.delivered("tp", 5) and "tp" in p.wedged     # the seek's own offset: nothing arrived
    assert p.delivered("tp", 7) and "tp" not in p.wedged     # records flow again: healthy
