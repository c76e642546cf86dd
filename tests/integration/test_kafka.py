"""End to end through the project's real Kafka broker: a `dream worker` process, events produced
with kcat and with aiokafka, dead letters on their topic, a SIGKILL mid-stream, and the same
export as `dream replay` of the same events."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from dreamstream.streams.core.replay import export_rows, replay_file
from dreamstream.streams.dev.localrun import WorkerProcess, consume_all, produce
from dreamstream.streams.store import EdgeStore
from tests.conftest import ROOT
from tests.helpers import comparable

pytestmark = pytest.mark.kafka
CASE = ROOT / "bench" / "cases" / "heldout" / "events.jsonl"
"""The project's own labelled case: the tests need nothing from outside the checkout."""


def sample_events(n_users: int = 12) -> list[bytes]:
    """All events of a few users of the held-out case, in file order: supersede chains, merges and
    hard negatives (12 users: about 250 events)."""
    lines = CASE.read_bytes().splitlines()
    users: list[str] = []
    for raw in lines:
        uid = orjson.loads(raw)["user_id"]
        if uid not in users:
            users.append(uid)
        if len(users) == n_users:
            break
    return [raw for raw in lines if orjson.loads(raw)["user_id"] in users]


@pytest.fixture
def worker(kafka: str, unique: str, tmp_path: Path) -> Iterator[WorkerProcess]:
    w = WorkerProcess(kafka, f"test-{unique}", tmp_path)
    yield w
    w.stop()


def replay_export(records: list[bytes], tmp: Path, embedder) -> list[dict]:
    from dreamstream.streams.core.ingest import Processor

    path = tmp / "replay.jsonl"
    path.write_bytes(b"\n".join(records) + b"\n")
    store = EdgeStore(tmp / "replay-store")
    replay_file(path, store, processor=Processor(store, embedder))
    rows = export_rows(store)
    store.close()
    return rows


def stream_export(worker: WorkerProcess) -> list[dict]:
    worker.stop()
    store = EdgeStore(worker.store_dir)
    rows = export_rows(store)
    store.close()
    return rows


def test_stream_equals_replay_with_kcat_and_aiokafka(kafka, worker, tmp_path, embedder) -> None:
    records = sample_events()
    bad = [b"{not json", orjson.dumps({"type": "memory.added", "event_id": "x1", "memory_id": "x1",
                                       "user_id": "u-bad", "created_at": "2026-01-01T00:00:00Z"})]
    worker.start()
    half = len(records) // 2
    if shutil.which("kcat"):
        # kcat: an independent client; key and value split on a tab.
        payload = b"".join(orjson.loads(r)["user_id"].encode() + b"\t" + r + b"\n" for r in records[:half])
        subprocess.run(["kcat", "-P", "-b", kafka, "-t", worker.topics["added"], "-K", "\t"],
                       input=payload, check=True, timeout=60)
        rest = records[half:]
    else:
        rest = records
    asyncio.run(produce(kafka, worker.topics["added"], rest + bad))
    worker.wait_for(lambda s: s["memories"] >= len(records))
    dead = asyncio.run(consume_all(kafka, worker.topics["dead"], expect=2))
    assert sorted(d["reason"] for d in dead) == ["invalid_json", "missing_field"]
    assert all(d["topic"] == worker.topics["added"] and d["offset"] is not None for d in dead)
    statuses = asyncio.run(consume_all(kafka, worker.topics["status"], expect=1))
    assert statuses and {"decision_id", "memory_id", "from_status", "to_status", "evidence"} <= set(statuses[0])
    got = stream_export(worker)
    assert len(got) == len(records)
    assert comparable(got) == comparable(replay_export(records, tmp_path, embedder))


def test_sigkill_mid_stream_loses_and_doubles_nothing(kafka, worker, tmp_path, embedder) -> None:
    records = sample_events()
    worker.start()
    asyncio.run(produce(kafka, worker.topics["added"], records))
    worker.wait_for(lambda s: s["memories"] >= 20)
    worker.kill()
    worker.start()
    worker.wait_for(lambda s: s["memories"] >= len(records))
    got = stream_export(worker)
    assert len(got) == len({r["memory_id"] for r in got}) == len(records)
    assert comparable(got) == comparable(replay_export(records, tmp_path, embedder))


def test_http_reads_follow_the_three_modes(kafka, worker) -> None:
    lisbon = {"type": "memory.added", "event_id": "h1", "memory_id": "h1", "user_id": "reader",
              "text": "User lives in Lisbon.", "created_at": "2026-01-01T09:00:00Z", "metadata": {}}
    berlin = {**lisbon, "event_id": "h2", "memory_id": "h2", "text": "I moved to Berlin.",
              "created_at": "2026-02-01T09:00:00Z"}
    worker.start()
    asyncio.run(produce(kafka, worker.topics["added"], [orjson.dumps(lisbon), orjson.dumps(berlin)]))
    worker.wait_for(lambda s: s["memories"] >= 2 and s["superseded"] >= 1)

    added = [r for r in worker.consumer_state()["assigned"] if r["topic"] == worker.topics["added"]]
    assert len(added) == 4 and all(r["fetching"] and not r["paused"] for r in added)
    assert sum(r["highwater"] or 0 for r in added) >= 2  # both events are on the worker's partitions

    read = worker.read
    assert [m["label"] for m in read("user=reader")["memories"]] == ["current", "history"]  # current first
    assert [m["memory_id"] for m in read("user=reader&latest_only=1")["memories"]] == ["h2"]
    assert [m["memory_id"] for m in read("user=reader&q=where%20does%20the%20user%20live")["memories"]] == ["h2", "h1"]
    with pytest.raises(urllib.error.HTTPError) as info:
        read("latest_only=1")
    assert info.value.code == 400


def test_transactional_producers_offset_gaps_are_passed_over_not_waited_on(kafka, worker) -> None:
    """Each transaction's commit marker takes an offset that holds no record: ingest asks the log,
    passes over it and stores every event, in order, without a seek loop or a stall."""
    from aiokafka import AIOKafkaProducer

    records = sample_events(n_users=2)

    async def produce_in_transactions() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=kafka, transactional_id=f"tx-{worker.topics['added']}")
        await producer.start()
        try:
            for raw in records:
                async with producer.transaction():
                    await producer.send(worker.topics["added"], raw, key=orjson.loads(raw)["user_id"].encode())
        finally:
            await producer.stop()

    worker.start()
    asyncio.run(produce_in_transactions())
    worker.wait_for(lambda s: s["memories"] >= len(records))
    added = [r for r in worker.consumer_state()["assigned"] if r["topic"] == worker.topics["added"]]
    loaded = [r for r in added if r["highwater"]]
    assert loaded
    # Committed up to the last record: only its trailing marker (no record to store) is left behind.
    deadline = time.monotonic() + 30
    while any((r["committed"] or 0) < r["highwater"] - 1 for r in loaded) and time.monotonic() < deadline:
        time.sleep(0.5)
        added = [r for r in worker.consumer_state()["assigned"] if r["topic"] == worker.topics["added"]]
        loaded = [r for r in added if r["highwater"]]
    assert all(r["committed"] == r["highwater"] - 1 for r in loaded), loaded
    assert sum(r["highwater"] for r in loaded) == 2 * len(records)  # a marker after every record
    got = stream_export(worker)
    assert len(got) == len(records)


def test_records_retention_removed_while_the_worker_was_down_do_not_stall_it(kafka: str, unique: str,
                                                                             tmp_path: Path) -> None:
    """Down longer than the topic's retention: the group's commit is below the log's start when the worker
    comes back. It reads on from the first record still there (the deleted ones are gone for everyone),
    stores what is left and commits past it, instead of seeking back to records that no longer exist."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete

    def ev(n: int) -> bytes:
        return orjson.dumps({"type": "memory.added", "event_id": f"e-{n}", "memory_id": f"m-{n}", "user_id": "u-r",
                             "text": f"Fact {n}: visited city number {n} in spring.",
                             "created_at": f"2026-01-01T00:00:{n:02d}Z"})

    async def committed(group: str, topic: str) -> int | None:
        consumer = AIOKafkaConsumer(bootstrap_servers=kafka, group_id=group, enable_auto_commit=False)
        await consumer.start()
        try:
            return await consumer.committed(TopicPartition(topic, 0))
        finally:
            await consumer.stop()

    async def delete_before(topic: str, offset: int) -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka)
        await admin.start()
        try:
            await admin.delete_records({TopicPartition(topic, 0): RecordsToDelete(offset)})
        finally:
            await admin.close()

    name = f"ret-{unique}"
    worker = WorkerProcess(kafka, name, tmp_path, {"DREAM_PARTITIONS": "1"})
    topic, group = worker.topics["added"], f"dream-{name}"
    try:
        worker.start()
        asyncio.run(produce(kafka, topic, [ev(n) for n in range(10)]))
        worker.wait_for(lambda s: s["memories"] >= 10, timeout=60)
        deadline = time.monotonic() + 30
        while asyncio.run(committed(group, topic)) != 10 and time.monotonic() < deadline:
            time.sleep(0.5)
        worker.stop()
        asyncio.run(produce(kafka, topic, [ev(n) for n in range(10, 30)]))
        asyncio.run(delete_before(topic, 20))  # retention took 10..19 while the worker was down
        worker.start()
        assert worker.wait_for(lambda s: s["memories"] >= 20, timeout=90)["memories"] == 20
        deadline = time.monotonic() + 30
        while asyncio.run(committed(group, topic)) != 30 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert asyncio.run(committed(group, topic)) == 30 and worker.health()[0] == 200
    finally:
        worker.stop()


def test_a_sessions_clean_up_deletes_only_its_own_workers_topics(kafka: str, unique: str) -> None:
    """Matched as substrings, a session's worker "api-123" took the live topics of another session's
    "api-1234" on a shared broker."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    from dreamstream.streams.dev.localrun import delete_topics_named

    mine, theirs = f"cl{unique}", f"cl{unique}9"
    names = [f"added-{mine}", f"dream-{mine}-users-changelog", f"added-{theirs}", f"dream-{theirs}-users-changelog"]

    async def topics() -> set[str]:
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka)
        await admin.start()
        try:
            return {t for t in await admin.list_topics() if unique in t}
        finally:
            await admin.close()

    async def create() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(n, 1, 1) for n in names])
        finally:
            await admin.close()

    asyncio.run(create())
    assert asyncio.run(delete_topics_named(kafka, [mine])) == 2
    assert asyncio.run(topics()) == {f"added-{theirs}", f"dream-{theirs}-users-changelog"}


ROGUE = """
import asyncio, sys
from aiokafka import AIOKafkaConsumer
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

class SameName(RoundRobinPartitionAssignor):
    name = "faust"  # the worker's protocol: the broker lets it into the same group

async def main():
    c = AIOKafkaConsumer(sys.argv[3], bootstrap_servers=sys.argv[1], group_id=sys.argv[2],
                         partition_assignment_strategy=(SameName,), session_timeout_ms=30000,
                         max_poll_interval_ms=30000, heartbeat_interval_ms=1000)
    await c.start()
    while not c.assignment():
        await c.getmany(timeout_ms=500)
    print("joined", flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


def test_a_worker_whose_group_join_never_completes_fails_healthz(kafka: str, unique: str, tmp_path: Path) -> None:
    """Seen once in CI: a worker up and `ready` with no partitions for two minutes, while /healthz said 200,
    so nothing restarted it. Here a frozen member of its group (joined, then stopped, its session 30 s) holds
    the worker's join open: past the join limit /healthz answers 503 `not_joined`; once the broker drops the
    member the join completes and /healthz is 200 again."""
    import signal
    import sys

    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    worker = WorkerProcess(kafka, f"join-{unique}", tmp_path)

    async def make_topic() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(f"rogue-{unique}", 1, 1)])
        finally:
            await admin.close()

    asyncio.run(make_topic())
    rogue = subprocess.Popen([sys.executable, "-c", ROGUE, kafka, worker.env["DREAM_APP_ID"], f"rogue-{unique}"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert rogue.stdout is not None and rogue.stdout.readline().strip() == "joined"
        rogue.send_signal(signal.SIGSTOP)  # a member that never rejoins, but the broker waits for it
        # join limit 2*6 + 4*1 = 16 s (6 s is the broker's least session timeout)
        worker.env.update(DREAM_SESSION_TIMEOUT="6", DREAM_STALL_SECONDS="1")
        worker.start()
        assert worker.consumer_state()["assigned"] == []
        deadline = time.monotonic() + 90
        while (status := worker.health())[0] != 503 and time.monotonic() < deadline:
            time.sleep(1)
        assert status[0] == 503 and status[1]["status"] == "not_joined", status
        assert status[1]["for_seconds"] >= 16
        assert worker.consumer_state()["assigned"] == []  # still nothing: the 503 is what gets it restarted
        deadline = time.monotonic() + 60  # the broker drops the frozen member after its 30 s
        while (status := worker.health())[0] != 200 and time.monotonic() < deadline:
            time.sleep(1)
        assert status == (200, {"status": "ok", "ready": True}) and worker.consumer_state()["assigned"]
    finally:
        rogue.kill()
        rogue.wait()
        worker.stop()
