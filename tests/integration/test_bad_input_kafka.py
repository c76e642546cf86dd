"""The bad-input corpus through Kafka into a real worker: each bad record dead-lettered exactly once
with its reason (records keyed by another user too), every valid one stored, the worker never stops."""

from __future__ import annotations

import asyncio
import base64
import hashlib
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
    def named(raw: bytes) -> bytes | str:
        """A record as its dead letter names it: whole, or (over 64 KiB) by its sha256."""
        return raw if len(raw) <= 64 * 1024 else hashlib.sha256(raw).hexdigest()

    expected = Counter((named(raw), reason) for _, reason, raw in bad) + Counter(
        (raw, "key_mismatch") for raw in mis_keyed)
    total = sum(expected.values())
    assert total >= 1000
    letters = asyncio.run(consume_all(kafka, worker.topics["dead"], total, timeout=90))
    stats = worker.wait_for(lambda s: s["memories"] >= len(valid), timeout=60)
    assert stats["memories"] == len(valid)
    letters = asyncio.run(consume_all(kafka, worker.topics["dead"], total + 1, timeout=5))  # nothing twice
    got = Counter((d.get("original_sha256") or base64.b64decode(d["original_b64"]), d["reason"]) for d in letters)
    assert got == expected
    assert worker.proc is not None and worker.proc.poll() is None


def test_a_record_too_big_for_its_own_dead_letter_does_not_stop_the_partition(kafka: str,
                                                                                worker: WorkerProcess) -> None:
    """An 800 KB record is oversize; its dead letter keeps 64 KiB of it, with its size and sha256, so the
    dead letter itself fits what the broker takes, and the records after it are stored and committed."""
    huge = line({**event(1, "big", "x"), "text": "y" * 800_000})
    after = [line(event(n, "big", f"Fact number {n}.")) for n in range(2, 12)]
    worker.start()
    asyncio.run(produce(kafka, worker.topics["added"], [huge, *after]))
    [letter] = asyncio.run(consume_all(kafka, worker.topics["dead"], 1, timeout=60))
    assert letter["reason"] == "oversize" and letter["original_size"] == len(huge)
    assert letter["original_sha256"] == hashlib.sha256(huge).hexdigest()
    assert base64.b64decode(letter["original_b64"]) == huge[:64 * 1024]
    assert worker.wait_for(lambda s: s["memories"] >= len(after), timeout=60)["memories"] == len(after)
