"""`make bench`: end-to-end events/s through Kafka into the store, against the embed-only rate.

One run on this machine: a real `dream worker`, the dev case's events produced to Kafka, timed
from the first send until the store holds them all; then the same model and batch size embedding
the same texts alone. The ratio says how much of the ceiling the pipeline reaches. First, how long
the CLI takes to start (`dream --help`, and `dream get` on the store the run filled).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import orjson

from dreamstream.streams.core.embedding import Embedder
from dreamstream.streams.dev.localrun import ROOT, WorkerProcess, produce

CASE = ROOT.parent / "shared" / "bench" / "dev" / "events.jsonl"


def startup_seconds(*args: str, runs: int = 5) -> float:
    """Median wall time of `dream ARGS` in a fresh process (imports included)."""
    dream = str(Path(sys.executable).with_name("dream"))
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([dream, *args], capture_output=True, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    n = int(os.environ.get("BENCH_EVENTS", "2000"))
    batch = int(os.environ.get("DREAM_BATCH_SIZE", "64"))
    kafka = os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    records = [r for r in CASE.read_bytes().splitlines() if r.strip()][:n]
    texts = [orjson.loads(r)["text"] for r in records]
    workdir = ROOT / "var" / "bench"
    shutil.rmtree(workdir, ignore_errors=True)
    worker = WorkerProcess(kafka, f"bench-{int(time.time())}", workdir, {"DREAM_BATCH_SIZE": str(batch)})
    worker.start()
    try:
        start = time.perf_counter()
        asyncio.run(produce(kafka, worker.topics["added"], records))
        worker.wait_for(lambda s: s["memories"] >= len(records), timeout=900)
        e2e = len(records) / (time.perf_counter() - start)
    finally:
        worker.stop()
    embedder = Embedder(batch_size=batch)
    embedder.encode_uncached(texts[:batch])  # warm-up
    start = time.perf_counter()
    for i in range(0, len(texts), batch):
        embedder.encode_uncached(texts[i:i + batch])
    embed_only = len(texts) / (time.perf_counter() - start)
    help_s = startup_seconds("--help")
    get_s = startup_seconds("get", "--user", "u-001", "--store", str(worker.store_dir))
    print(f"CLI start, median of 5: dream --help {help_s:.2f} s, dream get {get_s:.2f} s")
    print(f"events: {len(records)} (dev case), batch size {batch}, cores {os.cpu_count()}")
    print(f"end to end through Kafka into the store: {e2e:8.1f} events/s")
    print(f"embed only, same model and batch size:   {embed_only:8.1f} texts/s")
    print(f"ratio end-to-end / embed-only:           {e2e / embed_only:8.2f}")
    Path(workdir / "result.txt").write_text(f"e2e={e2e:.1f} embed_only={embed_only:.1f}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
