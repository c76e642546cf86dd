"""Metrics: the figures a batch yields (real store, real model), and the dashboard against a real
Prometheus (Debian's `prometheus`) scraping a real `dream worker` under load, so every panel's query
is checked against the metrics the worker actually exports."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from dreamstream.schemas.control import command
from dreamstream.streams.localrun import WorkerProcess, free_port, produce
from dreamstream.streams.pipeline import Incoming, Processor
from dreamstream.streams.store import EdgeStore
from tests.conftest import ROOT
from tests.helpers import FILLER, event, line

DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "dreamstream.json"
SCRAPE_CONFIG = ROOT / "deploy" / "prometheus" / "prometheus.yml"


def sample(name: str, **labels: str) -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_batch_figures_count_outcomes_decisions_judges_and_store_calls(tmp_path: Path, embedder) -> None:
    from dreamstream.streams import metrics

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
    assert sample("dreamstream_store_operation_duration_seconds_count", operation="upsert", backend="edge") \
        - before["upserts"] >= 2
    (judged,) = metrics.decisions_by_judge(result).items()
    judge = result.status_events[0]["evidence"]["judge"]
    assert judged == (("supersede", judge), 1) and judge != "unknown"
    # Redelivered: counted as such, no second decision.
    again = proc.process(items)
    assert again.outcomes["redelivered"] == 2 and not metrics.decisions_by_judge(again)
    assert store.count() == inner.count() == 2 and store.optimize is not None  # pass-through
    store.close()


def test_control_and_consolidation_hooks_keep_labels_bounded() -> None:
    from dreamstream.streams import metrics

    b = sample("dreamstream_control_commands_total", command="invalid", outcome="rejected")
    metrics.control_command("rm -rf /", "rejected")
    assert sample("dreamstream_control_commands_total", command="invalid", outcome="rejected") == b + 1
    metrics.consolidation_run("auto", "ok", 0.5)
    assert sample("dreamstream_consolidation_run_duration_seconds_sum", kind="auto") >= 0.5


# -- a real Prometheus ------------------------------------------------------------------------------


def panel_queries() -> list[tuple[str, str]]:
    """(panel title, expr) of every target of every panel, Grafana's interval variable filled in."""
    dash = json.loads(DASHBOARD.read_text())
    out = []
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            out.append((panel["title"], target["expr"].replace("$__rate_interval", "1m")))
    return out


class Prometheus:
    """Debian's prometheus binary on the project's scrape config, pointed at one worker, 1s interval."""

    def __init__(self, workdir: Path, target: str) -> None:
        config = yaml.safe_load(SCRAPE_CONFIG.read_text())
        config["global"]["scrape_interval"] = "1s"
        config["global"]["evaluation_interval"] = "1s"
        (job,) = config["scrape_configs"]
        job.pop("dns_sd_configs", None)
        job["static_configs"] = [{"targets": [target]}]
        self.job = job["job_name"]
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.port = free_port()
        self.log = workdir / "prometheus.log"
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                ["prometheus", f"--config.file={workdir / 'prometheus.yml'}",
                 f"--storage.tsdb.path={workdir / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}"],
                stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not self._ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("prometheus did not start:\n" + self.log.read_text()[-2000:])
            time.sleep(0.2)

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=1) as r:
                return r.status == 200
        except OSError:
            return False

    def query(self, expr: str) -> list[dict[str, Any]]:
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def value(self, expr: str) -> float:
        result = self.query(expr)
        return float(result[0]["value"][1]) if result else 0.0

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def load(n_users: int = 30) -> list[bytes]:
    """A few hundred facts stamped just now (so the end-to-end lag is the worker's own), with moves
    that supersede and repeats that merge."""
    start = datetime.now(UTC) - timedelta(seconds=5)
    out = []
    for u in range(n_users):
        user = f"load-{u}"
        texts = [*FILLER[:8], "User lives in Lisbon.", "I moved to Berlin."]
        for n, text in enumerate(texts):
            stamp = (start + timedelta(milliseconds=n)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            out.append(line(event(n, user, text, created_at=stamp, run_id=f"chat-{u}-{n}")))  # one session each
    return out


@pytest.fixture
def worker(kafka: str, unique: str, tmp_path: Path) -> Iterator[WorkerProcess]:
    w = WorkerProcess(kafka, f"metrics-{unique}", tmp_path / "worker")
    yield w
    w.stop()


@pytest.mark.kafka
@pytest.mark.skipif(shutil.which("prometheus") is None,
                    reason="needs Debian's `prometheus` binary (make system-deps installs it)")
def test_every_dashboard_panel_returns_data_from_a_worker_under_load(worker: WorkerProcess, tmp_path: Path) -> None:
    queries = panel_queries()
    assert len(queries) >= 15
    prom = Prometheus(tmp_path / "prometheus", f"127.0.0.1:{worker.port}")
    try:
        worker.start()
        records = load()
        bad = [b"{not json", orjson.dumps({"type": "memory.added", "event_id": "x", "user_id": "u"})]
        asyncio.run(produce(worker.kafka, worker.topics["added"], records + bad))
        cmd = command("synthesis.enable", {"project": "demo"}, command_id="metrics-1")
        asyncio.run(produce(worker.kafka, worker.topics["control"], [orjson.dumps(cmd)]))
        worker.wait_for(lambda s: s.get("memories", 0) >= len(records), timeout=90)

        stored = 'sum(dreamstream_events_total{outcome="stored"})'
        deadline = time.monotonic() + 20
        while prom.value(stored) < len(records) or prom.value(
                'sum(dreamstream_control_commands_total{command="synthesis.enable"})') < 1:
            assert time.monotonic() < deadline, f"prometheus saw {prom.value(stored)} stored events"
            time.sleep(0.5)
        time.sleep(2)  # a few more scrapes, so every rate() window holds two samples after the load

        empty = [(title, expr) for title, expr in queries if not prom.query(expr)]
        assert not empty, f"dashboard panels without data: {empty}"

        # The load shows up as what it was, not just as series.
        assert prom.value(f'sum(up{{job="{prom.job}"}})') == 1
        assert prom.value(stored) == len(records)
        assert prom.value('sum(dreamstream_dead_letters_total{reason=~"invalid_json|missing_field"})') == 2
        assert prom.value('sum(dreamstream_decisions_total{action="supersede",judge!="unknown"})') >= 30
        assert prom.value("sum(dreamstream_embedding_batch_size_sum)") == len(records)
        assert prom.value('sum(dreamstream_store_operation_duration_seconds_count{operation="search"})') > 0
        assert prom.value('dreamstream_control_commands_total{command="synthesis.enable",outcome="ok"}') == 1
        lag_p95 = prom.value(queries_by_title(queries, "End-to-end lag")[1])
        assert 0 < lag_p95 < 300
        lag = f'dreamstream_consumer_lag_messages{{topic="{worker.topics["added"]}"}}'
        assert sorted(int(r["metric"]["partition"]) for r in prom.query(lag)) == [0, 1, 2, 3]
        # Whether a 1 s scrape catches a backlog depends on the machine's speed; that it drains does not.
        deadline = time.monotonic() + 20
        while prom.value(f"max({lag})") > 0:  # none once the load is processed and committed
            assert time.monotonic() < deadline, prom.query(lag)
            time.sleep(0.5)
    finally:
        prom.stop()


def queries_by_title(queries: list[tuple[str, str]], prefix: str) -> list[str]:
    return [expr for title, expr in queries if title.startswith(prefix)]


# -- Kafka security settings (here until a settings test module exists) ----------------------------


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
    from dreamstream.streams.watchdog import Progress

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
