"""Running a real `dream worker` process on the local broker: shared by the demo, the benchmark
and the integration tests, so all three exercise the worker exactly as an operator starts it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


NAMES: list[str] = []
"""The name of every WorkerProcess made in this process: its topics (and faust's, under its app id) hold it,
so a test session can delete what it created (`delete_topics_named`)."""


async def delete_topics_named(kafka: str, names: list[str], fragments: list[str] | None = None) -> int:
    """Deletes a test session's own topics: its workers' (`names`) and any holding one of its random
    `fragments`, so that a developer's broker does not gather thousands of partitions (its start slows to
    minutes)."""
    from aiokafka.admin import AIOKafkaAdminClient

    fragments = fragments or []
    if not names and not fragments:
        return 0
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka, request_timeout_ms=30000)
    await admin.start()
    try:
        # exactly a worker's names ("added-NAME", faust's "dream-NAME-..."): "api-123" must not take "api-1234"'s
        doomed = sorted(t for t in await admin.list_topics()
                        if any(t.endswith(f"-{n}") or t.startswith(f"dream-{n}-") for n in names)
                        or any(f in t for f in fragments))
        for i in range(0, len(doomed), 100):
            await admin.delete_topics(doomed[i:i + 100], timeout_ms=30000)
        return len(doomed)
    finally:
        await admin.close()


class WorkerProcess:
    """A `dream worker` subprocess with its own topics, consumer group, store and HTTP port."""

    def __init__(self, kafka: str, name: str, workdir: Path, extra_env: dict[str, str] | None = None) -> None:
        NAMES.append(name)
        self.kafka = kafka
        self.port = free_port()
        self.topics = {k: f"{k}-{name}" for k in ("added", "status", "patterns", "dead", "runs", "control", "replies",
                                                     "accessed", "control_users")}
        workdir.mkdir(parents=True, exist_ok=True)
        self.store_dir = workdir / "store"
        self.env = {
            **os.environ,
            "KAFKA_BOOTSTRAP": kafka,
            "DREAM_APP_ID": f"dream-{name}",
            "DREAM_TOPIC_MEMORY_ADDED": self.topics["added"],
            "DREAM_TOPIC_MEMORY_STATUS": self.topics["status"],
            "DREAM_TOPIC_PATTERNS": self.topics["patterns"],
            "DREAM_TOPIC_DEAD_LETTERS": self.topics["dead"],
            "DREAM_TOPIC_SYNTHESIS_RUNS": self.topics["runs"],
            "DREAM_TOPIC_CONTROL": self.topics["control"],
            "DREAM_TOPIC_CONTROL_REPLIES": self.topics["replies"],
            "DREAM_TOPIC_MEMORY_ACCESSED": self.topics["accessed"],
            "DREAM_TOPIC_CONTROL_USERS": self.topics["control_users"],
            "DREAM_STORE": str(self.store_dir),
            "DREAM_DATA_DIR": str(workdir / "faust"),
            "DREAM_HTTP_PORT": str(self.port),
            "DREAM_BATCH_WITHIN": "0.3",
            "DREAM_SESSION_TIMEOUT": "10",  # a killed worker's partitions come back to its restart sooner
            "DREAM_STALL_SECONDS": "15",
            **(extra_env or {}),
        }
        self.log = workdir / "worker.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        """Restarts `wait_for` made as a supervisor would, on a failing /healthz (streams/worker/watchdog.py)."""

    def start(self, timeout: float = 120) -> None:
        dream = str(Path(sys.executable).with_name("dream"))
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen([dream, "worker", "-l", "info"], env=self.env, cwd=ROOT,
                                         stdout=log, stderr=subprocess.STDOUT)
        self.wait_for(lambda s: bool(s.get("ready")), timeout=timeout)

    def _get(self, path: str) -> dict[str, Any]:
        """GET one of the worker's JSON endpoints; {} while it is not up."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as r:
                out: dict[str, Any] = json.loads(r.read())
                return out
        except OSError:
            return {}

    def stats(self) -> dict[str, Any]:
        return self._get("/v1/stats")

    def health(self) -> tuple[int, dict[str, Any]]:
        """/healthz: its HTTP status and body ((0, {}) while the worker is not up)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=3) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")
        except OSError:
            return 0, {}

    def stalled(self) -> bool:
        """/healthz answers 503: the worker asks to be restarted."""
        return self.health()[0] == 503

    def consumer_state(self) -> dict[str, Any]:
        """The worker's /v1/consumer view (assignment, offsets, flow control), for failure messages."""
        return self._get("/v1/consumer")

    def read(self, query: str) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/v1/memories?{query}", timeout=10) as r:
            out: dict[str, Any] = json.loads(r.read())
            return out

    def wait_for(self, pred: Callable[[dict[str, Any]], bool], timeout: float = 120) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        checked = time.monotonic()
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError("worker exited; log tail:\n" + self.log.read_text(errors="replace")[-3000:])
            s = self.stats()
            if s and pred(s):
                return s
            if time.monotonic() - checked > 2:
                checked = time.monotonic()
                if self.stalled():  # what a liveness probe does: restart, then keep waiting
                    self.restarts += 1
                    self.stop()
                    self.start()
                    deadline = max(deadline, time.monotonic() + 60)
            time.sleep(0.3)
        raise TimeoutError(f"worker did not get there in {timeout}s ({self.restarts} restarts); last stats "
                           f"{self.stats()}; consumer {self.consumer_state()}; log tail:\n"
                           + self.log.read_text(errors="replace")[-4000:])

    def kill(self) -> None:
        """SIGKILL: no shutdown hooks, no final commit — the crash case."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def user_key(raw: bytes) -> bytes:
    """Events are keyed by user_id so one user's events share a partition (and their order)."""
    try:
        return str(orjson.loads(raw)["user_id"]).encode()
    except Exception:
        return b"undecodable"


async def produce(kafka: str, topic: str, records: list[bytes], keys: list[bytes | None] | None = None) -> None:
    """Records to a topic, keyed by their user_id (or by `keys`, one per record)."""
    producer = AIOKafkaProducer(bootstrap_servers=kafka, acks="all", linger_ms=5)
    await producer.start()
    try:
        for n, raw in enumerate(records):
            await producer.send(topic, raw, key=keys[n] if keys is not None else user_key(raw))
        await producer.flush()
    finally:
        await producer.stop()


async def consume_all(
    kafka: str, topic: str, expect: int, timeout: float = 30, keep: Callable[[Any], bool] | None = None
) -> list[dict[str, Any]]:
    """Reads a topic from the start until `expect` records (those `keep` accepts) arrived or time ran out."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=kafka, auto_offset_reset="earliest",
                                enable_auto_commit=False, group_id=None)
    await consumer.start()
    out: list[dict[str, Any]] = []
    try:
        deadline = time.monotonic() + timeout
        while len(out) < expect and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                out += [orjson.loads(r.value) for r in records if r.value is not None and (keep is None or keep(r))]
    finally:
        await consumer.stop()
    return out
