"""Scale-out: two `dream worker`s in one consumer group share a 4-partition topic against one Qdrant
server; one is stopped mid-stream, the other takes its partitions over, and the export equals that of a
single worker given the same events. Runs only where QDRANT_URL points at a Qdrant server (the embedded
store is one process's folder, so it cannot be shared)."""

from __future__ import annotations

import asyncio
import os
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from dreamstream.streams.dev.localrun import WorkerProcess, produce
from dreamstream.streams.store import ServerStore
from tests.helpers import comparable
from tests.integration.test_kafka import sample_events

QDRANT_URL = os.environ.get("QDRANT_URL", "")
pytestmark = [
    pytest.mark.kafka,
    pytest.mark.skipif(not QDRANT_URL.startswith(("http://", "https://")),
                       reason="needs a Qdrant server: set QDRANT_URL=http://host:6333"),
]


def events(unique: str) -> list[bytes]:
    """The events of 24 users of the held-out case, under ids of this run only (the server's collection
    is shared)."""
    out = []
    for raw in sample_events(n_users=24):
        e = orjson.loads(raw)
        for key in ("user_id", "memory_id", "event_id"):
            e[key] = f"{e[key]}-{unique}"
        out.append(orjson.dumps(e))
    return out


@pytest.fixture
def server() -> Iterator[ServerStore]:
    store = ServerStore(url=QDRANT_URL, api_key=os.environ.get("QDRANT_API_KEY") or None)
    yield store
    store.close()


def stored(store: ServerStore, users: list[str]) -> int:
    return store.count({"user_id": users})


def export(store: ServerStore, users: list[str]) -> list[dict[str, Any]]:
    return [m.export_row() for m in store.scroll({"user_id": users})]


def erase(store: ServerStore, users: list[str]) -> None:
    store.delete([m.memory_id for m in store.scroll({"user_id": users})])


def stored_by(worker: WorkerProcess) -> float:
    """Events this worker stored, from its own /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{worker.port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(s.value for fam in text_string_to_metric_families(text) if fam.name == "dreamstream_events"
               for s in fam.samples if s.name == "dreamstream_events_total" and s.labels.get("outcome") == "stored")


def wait(pred: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached in {timeout}s")
        time.sleep(0.5)


def test_two_workers_share_partitions_and_one_stopping_changes_nothing(
    kafka: str, unique: str, tmp_path: Path, server: ServerStore
) -> None:
    records = events(unique)
    users = sorted({orjson.loads(r)["user_id"] for r in records})
    env = {"QDRANT_URL": QDRANT_URL, "DREAM_PARTITIONS": "4"}
    try:
        # The reference: one worker, all four partitions.
        single = WorkerProcess(kafka, f"single-{unique}", tmp_path / "single", extra_env=env)
        single.start()
        try:
            asyncio.run(produce(kafka, single.topics["added"], records))
            wait(lambda: stored(server, users) >= len(records), 240, "single worker stored everything")
        finally:
            single.stop()
        reference = export(server, users)
        assert len(reference) == len(records)
        erase(server, users)
        assert stored(server, users) == 0

        # Two workers of one group (same name: same topics and app id), each with its own port and data dir.
        a = WorkerProcess(kafka, f"pair-{unique}", tmp_path / "a", extra_env=env)
        b = WorkerProcess(kafka, f"pair-{unique}", tmp_path / "b", extra_env=env)
        a.start()  # first, so the collection exists before the second opens it
        b.start()
        try:
            half = len(records) // 2
            asyncio.run(produce(kafka, a.topics["added"], records[:half]))
            wait(lambda: stored_by(a) > 0 and stored_by(b) > 0, 180, "both workers got partitions and stored")
            b.stop()  # mid-stream: its partitions move to `a`, which resumes from b's last commit
            asyncio.run(produce(kafka, a.topics["added"], records[half:]))
            wait(lambda: stored(server, users) >= len(records), 240, "the remaining worker stored everything")
            time.sleep(3)  # anything redelivered after the rebalance is applied (as a no-op) by now
        finally:
            a.stop()
            b.stop()
        got = export(server, users)
        assert len(got) == len({r["memory_id"] for r in got}) == len(records)
        assert comparable(got) == comparable(reference)
    finally:
        erase(server, users)
