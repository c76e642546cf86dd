"""The bad-input corpus through Kafka into a real worker: each bad record dead-lettered exactly once
with its reason (records keyed by another user too), every valid one stored, the worker never stops."""

from __future__ import annotations

import asyncio
import base64
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from dreamstream.streams.dev.corpus import bad_corpus
from dreamstream.streams.dev.localrun import WorkerProcess, consume_all, produce, user_key
from tests.helpers import event, line

pytestmark = pytest.mark.kafka


@pytest.fixture
def worker(kafka: str, unique: str, tmp_path: Path) -> Iterator[WorkerProcess]:
    w = WorkerProcess(kafka, f"bad-{unique}", tmp_path)
    yield w
    w.stop()


def test_the_bad_input_corpus_through_kafka(kafka: str, worker: WorkerProcess) -> None:
    records, bad, valid = bad_corpus()
    mis_keyed = [line(event(30_000 + n, f"keyed-{n % 3}", f"Keyed elsewhere {n}.")) for n in range(35)]
    keys: list[bytes | None] = [user_key(r) for r in records]
    keys += [b"someone-else"] * 20 + [b""] * 5 + [b"\xff\xfe"] * 5 + [None] * 5
    worker.start()
    asyncio.run(produce(kafka, worker.topics["added"], records + mis_keyed, keys=keys))
    expected = Counter((raw, reason) for _, reason, raw in bad) + Counter((raw, "key_mismatch") for raw in mis_keyed)
    total = sum(expected.values())
    assert total >= 1000
    letters = asyncio.run(consume_all(kafka, worker.topics["dead"], total, timeout=90))
    stats = worker.wait_for(lambda s: s["memories"] >= len(valid), timeout=60)
    assert stats["memories"] == len(valid)
    letters = asyncio.run(consume_all(kafka, worker.topics["dead"], total + 1, timeout=5))  # nothing twice
    got = Counter((base64.b64decode(d["original_b64"]), d["reason"]) for d in letters)
    assert got == expected
    assert worker.proc is not None and worker.proc.poll() is None
