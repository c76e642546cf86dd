"""Scale-out on a real Qdrant server: several `dream worker`s in one consumer group, with failover, and
the server itself failing mid-stream. The server is QDRANT_URL when set, else the build in
../shared/bin started for the session (tests/conftest.py); skipped only where neither exists."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka.partitioner import DefaultPartitioner
from prometheus_client.parser import text_string_to_metric_families

from dreamstream.streams.core.embedding import shared_embedder
from dreamstream.streams.core.ingest import Incoming, Processor
from dreamstream.streams.dev.localrun import WorkerProcess, consume_all, produce
from dreamstream.streams.store import EdgeStore, ServerStore
from tests.conftest import SHARED_BIN
from tests.helpers import comparable
from tests.integration.test_kafka import sample_events

pytestmark = [pytest.mark.kafka]


def events(unique: str, n_users: int = 24) -> list[bytes]:
    """The events of some users of the held-out case, under ids of this run only."""
    out = []
    for raw in sample_events(n_users=n_users):
        e = orjson.loads(raw)
        for key in ("user_id", "memory_id", "event_id"):
            e[key] = f"{e[key]}-{unique}"
        out.append(orjson.dumps(e))
    return out


@pytest.fixture
def server(qdrant_url: str | None, unique: str) -> Iterator[ServerStore]:
    """A collection of this test's own on the real server."""
    if qdrant_url is None:
        pytest.skip(f"no Qdrant server: {SHARED_BIN}/qdrant-server is missing and QDRANT_URL is unset")
    store = ServerStore(url=qdrant_url, api_key=os.environ.get("QDRANT_API_KEY") or None,
                        collection=f"scale_{unique}")
    yield store
    store.drop()
    store.close()


def worker_env(store: ServerStore, partitions: int) -> dict[str, str]:
    return {"QDRANT_URL": str(store.url), "DREAM_QDRANT_COLLECTION": store.collection,
            "DREAM_PARTITIONS": str(partitions)}


def reference(records: list[bytes], tmp_path: Path) -> list[tuple[Any, ...]]:
    """The same events replayed in process into an embedded store: what every run must end in."""
    store = EdgeStore(tmp_path / "reference")
    try:
        proc = Processor(store, shared_embedder())
        for i in range(0, len(records), 64):
            proc.process([Incoming(raw=r) for r in records[i:i + 64]])
        return comparable([m.export_row() for m in store.scroll()])
    finally:
        store.close()


def stored_by(worker: WorkerProcess) -> float:
    """Events this worker stored, from its own /metrics (0 while it is not up)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{worker.port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return 0.0
    return sum(s.value for fam in text_string_to_metric_families(text) if fam.name == "dreamstream_events"
               for s in fam.samples if s.name == "dreamstream_events_total" and s.labels.get("outcome") == "stored")


def inputs_held(worker: WorkerProcess) -> set[int]:
    """The memory.added partitions this worker holds now."""
    state = worker.consumer_state()
    return {p["partition"] for p in state.get("assigned", []) if p["topic"] == worker.topics["added"]}


def wait(pred: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached in {timeout}s")
        time.sleep(0.5)


def group_settled(workers: list[WorkerProcess], partitions: int) -> bool:
    """Every worker holds input partitions, and together all of them, once each (the rebalance is done)."""
    held = [inputs_held(w) for w in workers]
    return all(held) and sorted(p for h in held for p in h) == list(range(partitions))


def check_run(store: ServerStore, records: list[bytes], want: list[tuple[Any, ...]], status_topic: str,
              kafka: str) -> None:
    """The export equals the reference; no decision applied twice; every decision on the status topic."""
    rows = [m for m in store.scroll()]
    assert len(rows) == len({m.memory_id for m in rows}) == len(records)
    assert comparable([m.export_row() for m in rows]) == want
    for m in rows:
        assert len(m.decision_ids) == len(set(m.decision_ids)), f"{m.memory_id}: a decision applied twice"
    decided = {d["decision_id"] for m in rows for d in m.decisions}
    status = asyncio.run(consume_all(kafka, status_topic, 10**9, timeout=10))
    assert decided <= {e["decision_id"] for e in status}


def test_three_workers_on_six_partitions_one_killed_one_added(
    kafka: str, unique: str, tmp_path: Path, server: ServerStore
) -> None:
    """Three workers share six partitions; one is SIGKILLed mid-stream and a fourth joins: the export
    equals a single replay, every decision has its status event, and every worker's API reads every user."""
    records = events(unique)
    users = sorted({orjson.loads(r)["user_id"] for r in records})
    want = reference(records, tmp_path)
    env = worker_env(server, 6)
    group = f"trio-{unique}"
    workers = [WorkerProcess(kafka, group, tmp_path / name, extra_env=env) for name in ("a", "b", "c", "d")]
    a, b, c, d = workers
    try:
        for w in (a, b, c):
            w.start()
        wait(lambda: group_settled([a, b, c], 6), 120, "three workers hold all six partitions")
        third = len(records) // 3
        asyncio.run(produce(kafka, a.topics["added"], records[:third]))
        wait(lambda: server.count() >= third // 2, 180, "a first part stored")
        b.kill()  # mid-stream, no shutdown: its partitions come back to the group after the session timeout
        d.start()
        asyncio.run(produce(kafka, a.topics["added"], records[third:]))
        wait(lambda: server.count() >= len(records), 300, "the workers stored everything")
        wait(lambda: group_settled([a, c, d], 6), 120, "the three live workers hold all six partitions")
        time.sleep(3)  # anything redelivered after the rebalances is applied (as a no-op) by now
        for w in (a, c, d):
            for user in users:
                rows = w.read(f"user={user}&include_merged=1")["memories"]
                assert len(rows) == server.count({"user_id": user}), f"worker on {w.port} reads {user} short"
        check_run(server, records, want, a.topics["status"], kafka)
    finally:
        for w in workers:
            w.stop()


def commands_answered(worker: WorkerProcess, command: str) -> float:
    """Replies this worker sent for `command` (ok or error), from its /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{worker.port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples
               if s.name == "dreamstream_control_commands_total" and s.labels.get("command") == command)


def test_a_users_control_commands_and_api_writes_run_on_the_worker_that_holds_the_users_partition(
    kafka: str, unique: str, tmp_path: Path, server: ServerStore
) -> None:
    """Two workers on a shared store: undo and erase of a user whose memory.added partition the other worker
    holds are run (and answered) by that worker, never beside its ingest by the one reading dream.control."""
    records = events(unique, n_users=12)
    env = worker_env(server, 4)
    group = f"route-{unique}"
    a, b = (WorkerProcess(kafka, group, tmp_path / name, extra_env=env) for name in ("a", "b"))
    try:
        a.start()
        b.start()
        wait(lambda: group_settled([a, b], 4), 120, "two workers hold all four partitions")
        asyncio.run(produce(kafka, a.topics["added"], records))
        wait(lambda: server.count() >= len(records), 300, "the workers stored everything")
        control = [p for p in a.consumer_state().get("assigned", []) if p["topic"] == a.topics["control"]]
        holder, owner = (a, b) if control else (b, a)
        mine = inputs_held(owner)
        decided = [m for m in server.scroll() if m.decisions and
                   DefaultPartitioner()(m.user_id.encode(), [0, 1, 2, 3], [0, 1, 2, 3]) in mine]
        assert decided, "no decision of a user the other worker holds"
        user, decision = decided[0].user_id, decided[0].decisions[0]["decision_id"]
        rc, undone = dream_control(holder, "undo", f"decision_id={decision}")
        assert rc == 0 and undone["outcome"] == "ok", undone
        rc, erased = dream_control(holder, "erase", f"user={user}", "--yes")
        assert rc == 0 and erased["details"]["deleted"] >= 1 and server.count({"user_id": user}) == 0
        assert [commands_answered(owner, c) for c in ("undo", "erase")] == [1, 1]
        assert [commands_answered(holder, c) for c in ("undo", "erase")] == [0, 0]

        # The HTTP API's writes likewise: sent to the other worker, run by the owner and answered through it.
        other = next((m for m in decided if m.user_id != user), None)
        assert other is not None, "a second user the other worker holds"
        answer = http(holder, "POST", f"/v1/decisions/{other.decisions[0]['decision_id']}/undo?user={other.user_id}")
        assert answer.status == 200 and answer.headers.get("X-Dream-Served-By") == f"http://127.0.0.1:{owner.port}"
        assert orjson.loads(answer.read())["decision_id"] == other.decisions[0]["decision_id"]
        answer = http(holder, "DELETE", f"/v1/memories/{other.memory_id}?user={other.user_id}")
        assert answer.status == 200 and answer.headers.get("X-Dream-Served-By") == f"http://127.0.0.1:{owner.port}"
        assert server.retrieve([other.memory_id])[other.memory_id].status == "deleted"
        # An id's %2F is passed on as sent: it names no other route there ("../consolidations/plan-..." is an id).
        answer = http(holder, "DELETE", f"/v1/memories/..%2Fconsolidations%2Fplan-{'0' * 16}?user={other.user_id}")
        assert answer.status == 404 and answer.headers.get("X-Dream-Served-By")
        assert orjson.loads(answer.read())["error"] == "no memory ../consolidations/plan-" + "0" * 16
        answer = http(owner, "DELETE", f"/v1/users/{other.user_id}?confirm={other.user_id}")  # the owner: run there
        assert answer.status == 200 and "X-Dream-Served-By" not in answer.headers
        assert server.count({"user_id": other.user_id}) == 0
    finally:
        a.stop()
        b.stop()


def http(w: WorkerProcess, method: str, path: str) -> Any:
    """One API call; the response (its status, headers and body), an error status included."""
    try:
        return urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{w.port}{path}", method=method,
                                                             data=b"" if method == "POST" else None), timeout=150)
    except urllib.error.HTTPError as exc:
        return exc


def dream_control(w: WorkerProcess, *args: str) -> tuple[int, dict[str, Any]]:
    """`dream control ...` against the workers' topics, its reply parsed."""
    dream = str(Path(sys.executable).with_name("dream"))
    out = subprocess.run([dream, "control", *args, "--timeout", "60"], env=w.env, capture_output=True, timeout=120)
    assert out.stdout, out.stderr.decode()[-2000:]
    return out.returncode, orjson.loads(out.stdout)


class QdrantServer:
    """A Qdrant server of the test's own (it is killed and restarted), from ../shared/bin."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        self.script = str(SHARED_BIN / "qdrant-server")

    def start(self) -> str:
        out = subprocess.run([self.script, "start", str(self.folder), str(self.port)], capture_output=True,
                             text=True, check=True)
        return out.stdout.strip().splitlines()[-1]

    def kill(self) -> None:
        os.kill(int((self.folder / "qdrant.pid").read_text()), signal.SIGKILL)
        (self.folder / "qdrant.pid").unlink()

    def stop(self) -> None:
        subprocess.run([self.script, "stop", str(self.folder)], capture_output=True)


def metric(worker: WorkerProcess, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{worker.port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples if s.name == name)


@pytest.mark.skipif(not (SHARED_BIN / "qdrant-server").exists(), reason="needs ../shared/bin/qdrant-server")
def test_the_qdrant_server_killed_and_restarted_mid_stream(kafka: str, unique: str, tmp_path: Path) -> None:
    """The worker pauses with the reason on /healthz and the store-fault metric, retries with backoff,
    resumes when the server is back, and loses, doubles or dead-letters nothing valid."""
    qdrant = QdrantServer(tmp_path / "qdrant")
    url = qdrant.start()
    records = events(unique, n_users=12)
    want = reference(records, tmp_path)
    worker = WorkerProcess(kafka, f"qfault-{unique}", tmp_path / "w", extra_env={"QDRANT_URL": url})
    try:
        worker.start()
        half = len(records) // 2
        asyncio.run(produce(kafka, worker.topics["added"], records[:half]))
        worker.wait_for(lambda s: s.get("memories", 0) >= half, timeout=120)
        qdrant.kill()
        asyncio.run(produce(kafka, worker.topics["added"], records[half:]))
        deadline = time.monotonic() + 60
        while (health := worker.health())[1].get("status") != "store_fault":
            assert time.monotonic() < deadline, f"no store_fault on /healthz: {health}"
            time.sleep(0.5)
        assert metric(worker, "dreamstream_store_fault") == 1
        assert "cause" in health[1] and worker.proc is not None and worker.proc.poll() is None
        qdrant.start()  # the same storage: what was stored before is there
        worker.wait_for(lambda s: s.get("memories", 0) >= len(records), timeout=180)
        time.sleep(2)
        assert worker.health()[1].get("status") == "ok" and metric(worker, "dreamstream_store_fault") == 0
        worker.stop()
        store = ServerStore(url=url)
        try:
            check_run(store, records, want, worker.topics["status"], kafka)
        finally:
            store.close()
        letters = asyncio.run(consume_all(kafka, worker.topics["dead"], 10**9, timeout=5))
        assert letters == [], Counter(d["reason"] for d in letters)
    finally:
        worker.stop()
        qdrant.stop()


class FlakyProxy:
    """An HTTP proxy in front of the Qdrant server that passes, answers 503, or holds every request
    (`mode`): a server that errors or times out, as the worker sees it."""

    def __init__(self, upstream: str) -> None:
        import http.server
        import threading
        import urllib.parse

        self.mode = "pass"
        proxy = self
        target = urllib.parse.urlsplit(upstream)

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def forward(self) -> None:
                import http.client

                if proxy.mode == "error":
                    self.send_response(503)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                while proxy.mode == "hang":
                    time.sleep(0.2)
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                conn = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                conn.request(self.command, self.path, body=body or None, headers=headers)
                answer = conn.getresponse()
                data = answer.read()
                self.send_response(answer.status)
                for k, v in answer.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                conn.close()

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = forward

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.mode = "pass"
        self.server.shutdown()


def test_a_qdrant_server_answering_errors_then_timing_out(
    kafka: str, unique: str, tmp_path: Path, server: ServerStore
) -> None:
    """503s, then requests that hang past the client's timeout: the worker pauses with the reason,
    retries with backoff, resumes when the server answers again, and nothing valid is lost or doubled."""
    proxy = FlakyProxy(str(server.url))
    records = events(unique, n_users=12)
    want = reference(records, tmp_path)
    env = {**worker_env(server, 4), "QDRANT_URL": proxy.url}
    worker = WorkerProcess(kafka, f"qflaky-{unique}", tmp_path / "w", extra_env=env)
    try:
        worker.start()
        third = len(records) // 3
        asyncio.run(produce(kafka, worker.topics["added"], records[:third]))
        worker.wait_for(lambda s: s.get("memories", 0) >= third, timeout=120)
        for mode in ("error", "hang"):
            proxy.mode = mode
            part = records[third:2 * third] if mode == "error" else records[2 * third:]
            asyncio.run(produce(kafka, worker.topics["added"], part))
            deadline = time.monotonic() + 90
            while (health := worker.health())[1].get("status") != "store_fault":
                assert time.monotonic() < deadline, f"{mode}: no store_fault on /healthz: {health}"
                time.sleep(0.5)
            assert worker.proc is not None and worker.proc.poll() is None
            proxy.mode = "pass"
            deadline = time.monotonic() + 180
            while server.count() < (2 * third if mode == "error" else len(records)):
                assert time.monotonic() < deadline, f"{mode}: ingest did not resume ({server.count()} stored)"
                time.sleep(0.5)
        time.sleep(2)
        assert worker.health()[1].get("status") == "ok"
        worker.stop()
        check_run(server, records, want, worker.topics["status"], kafka)
        letters = asyncio.run(consume_all(kafka, worker.topics["dead"], 10**9, timeout=5))
        assert letters == [], Counter(d["reason"] for d in letters)
    finally:
        worker.stop()
        proxy.close()
