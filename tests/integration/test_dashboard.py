"""The Grafana dashboard against a real worker under load, scraped by a real Prometheus."""

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
from dreamstream.streams.dev.localrun import WorkerProcess, free_port, produce
from tests.conftest import ROOT
from tests.helpers import FILLER, event, line

DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "dreamstream.json"
SCRAPE_CONFIG = ROOT / "deploy" / "prometheus" / "prometheus.yml"


def panel_queries(job: str = "dreamstream-worker") -> list[tuple[str, str]]:
    """(panel title, expr) of every target of every panel, Grafana's variables filled in as a
    person would pick them (the job, all instances)."""
    dash = json.loads(DASHBOARD.read_text())
    out = []
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"].replace("$__rate_interval", "1m").replace("$job", job).replace("$instance", ".*")
            out.append((panel["title"], expr))
    return out


def test_the_dashboard_imports_anywhere_and_scopes_every_query() -> None:
    dash = json.loads(DASHBOARD.read_text())
    assert [i["name"] for i in dash["__inputs"]] == ["DS_PROMETHEUS"]
    assert {v["name"] for v in dash["templating"]["list"]} == {"datasource", "job", "instance"}
    for panel in dash["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}"
        for target in panel["targets"]:
            assert 'job="$job"' in target["expr"] and 'instance=~"$instance"' in target["expr"], panel["title"]
    exported = {"dreamstream_events_total", "dreamstream_decisions_total", "dreamstream_dead_letters_total",
                "dreamstream_input_records_not_taken_total", "dreamstream_partition_reseeks_total",
                "dreamstream_synthesis_runs_total", "dreamstream_synthesis_patterns_total",
                "dreamstream_consolidation_runs_total", "dreamstream_control_commands_total",
                "dreamstream_store_fault", "dreamstream_synthesis_run_duration_seconds",
                "dreamstream_consolidation_run_duration_seconds", "dreamstream_consumer_lag"}
    text = DASHBOARD.read_text()
    assert all(name in text for name in exported)
    for panel in dash["panels"]:  # a duration is plotted in seconds, and nothing else beside it (an audit)
        exprs = [t["expr"] for t in panel["targets"]]
        if any("_seconds_bucket" in e for e in exprs):
            assert panel["fieldConfig"]["defaults"]["unit"] == "s", panel["title"]
            assert all(e.startswith("histogram_quantile(") for e in exprs), panel["title"]
            assert all("__name__" not in t.get("legendFormat", "") for t in panel["targets"]), panel["title"]


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
        deadline = time.monotonic() + 20  # rate() needs a sample from before the load: one batch may take it all
        while prom.value(f'sum(up{{job="{prom.job}"}})') != 1:
            assert time.monotonic() < deadline, "prometheus never scraped the worker"
            time.sleep(0.5)
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
        added = f'topic="{worker.topics["added"]}"'
        lag = f"dreamstream_consumer_lag{{{added}}}"  # from the broker: Faust's gauges move only on delivery
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
