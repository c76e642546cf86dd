"""`make bench`: how close the pipeline runs to the model's pace, how fast the model is, how the store
scales and how long a decision takes under load. One run on this machine; a table, a JSON result and a
PNG plot (var/bench/result.json, var/bench/throughput.png).

1. CLI start-up: `dream --help` and `dream get` in a fresh process.
2. End to end: a real `dream worker`, the dev case's events produced to Kafka, timed from the first send
   until the store holds them all, after one batch of other users' events has gone through (the group's
   join and first fetch are reported apart, as the warm-up); the worker's own model time (its /metrics)
   against that wall time, and the same texts through the model alone (the ceiling).
3. The model's runtimes: torch (sentence-transformers, when installed), ONNX fp32 and ONNX int8, texts/s
   on the same texts, at the worker's batch size and at the pipeline's model chunk (EMBED_CHUNK), and the
   cosine of each to torch's vectors. The end-to-end ratio is taken against the faster of the two.
4. Latency under load: after the same warm-up, events produced at a fixed rate (half the measured
   end-to-end rate) for BENCH_LOAD_SECONDS (120), p50/p95/p99 from each event's send to its decision's
   status event.
5. Store size: bench/scale.py at BENCH_SCALE_SIZES (1k to 1M memories): per-add cost and read latency.

Environment: BENCH_EVENTS (2000), DREAM_BATCH_SIZE and DREAM_BATCH_WITHIN (the worker's), BENCH_LOAD_SECONDS,
BENCH_SCALE_SIZES ("1000,10000,100000,1000000"; "" skips), KAFKA_BOOTSTRAP. With QDRANT_URL set
(`make qdrant-start`), a sixth part: end to end on that server with 1, 2 and 3 workers.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scale  # noqa: E402  (bench/scale.py)

from dreamstream.streams import settings as settings_mod  # noqa: E402
from dreamstream.streams.core.embedding import Embedder  # noqa: E402
from dreamstream.streams.core.ingest import EMBED_CHUNK  # noqa: E402
from dreamstream.streams.dev.localrun import NAMES, ROOT, WorkerProcess, delete_topics_named, produce, user_key  # noqa: E402

CASE = ROOT.parent / "shared" / "bench" / "dev" / "events.jsonl"
OUT = ROOT / "var" / "bench"


def startup_seconds(*args: str, runs: int = 5) -> float:
    """Median wall time of `dream ARGS` in a fresh process (imports included)."""
    dream = str(Path(sys.executable).with_name("dream"))
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([dream, *args], capture_output=True, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def metric(port: int, name: str) -> float:
    """One unlabelled sample from the worker's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    m = re.search(rf"^{re.escape(name)} ([0-9.e+-]+)$", text, re.MULTILINE)
    return float(m.group(1)) if m else 0.0


def end_to_end(kafka: str, records: list[bytes], batch: int) -> dict[str, Any]:
    """Events/s through Kafka into the store, and the share of that time the worker spent in the model.

    Steady state: a batch of other events goes through first (`warm_up`), so that the group's join and
    the first fetch are not counted as throughput; that warm-up is reported apart."""
    workdir = OUT / "e2e"
    shutil.rmtree(workdir, ignore_errors=True)
    worker = WorkerProcess(kafka, f"bench-{int(time.time())}", workdir, _worker_env(batch))
    worker.start()
    try:
        warm, warm_s = warm_up(kafka, worker, batch)
        before = {name: metric(worker.port, name) for name in _E2E_METRICS}
        start = time.perf_counter()
        asyncio.run(produce(kafka, worker.topics["added"], records))
        worker.wait_for(lambda s: s["memories"] >= len(warm) + len(records), timeout=900)
        wall = time.perf_counter() - start
        model, batches, processing = (metric(worker.port, name) - before[name] for name in _E2E_METRICS)
    finally:
        worker.stop()
    return {"events": len(records), "seconds": wall, "events_per_s": len(records) / wall, "model_seconds": model,
            "model_share": model / wall, "batches": batches, "processing_seconds": processing,
            "warm_up_events": len(warm), "warm_up_seconds": warm_s, "worker_restarts": worker.restarts,
            "store_dir": str(worker.store_dir)}


def _worker_env(batch: int) -> dict[str, str]:
    """The worker as shipped: its batch size and wait (the test harness shortens neither otherwise)."""
    return {"DREAM_BATCH_SIZE": str(batch), "DREAM_BATCH_WITHIN": str(settings_mod.load().batch_within)}


WARM_CASE = ROOT / "bench" / "cases" / "heldout" / "events.jsonl"


def warm_up(kafka: str, worker: WorkerProcess, n: int) -> tuple[list[bytes], float]:
    """`n` events of another case (other texts, users renamed) through the worker, until stored: the
    group has joined and fetched, and the text caches hold nothing of the measured events. Returns the
    events and the seconds from the first send."""
    warm = []
    for raw in [r for r in WARM_CASE.read_bytes().splitlines() if r.strip()][:n]:
        event = orjson.loads(raw)
        for key in ("event_id", "memory_id", "user_id"):
            event[key] = f"warm-{event[key]}"
        warm.append(orjson.dumps(event))
    start = time.perf_counter()
    asyncio.run(produce(kafka, worker.topics["added"], warm))
    worker.wait_for(lambda s: s["memories"] >= len(warm), timeout=900)
    return warm, time.perf_counter() - start


_E2E_METRICS = ("dreamstream_embedding_duration_seconds_sum", "dreamstream_ingest_batch_duration_seconds_count",
                "dreamstream_ingest_batch_duration_seconds_sum")


def metric_total(port: int, name: str) -> float:
    """Every sample of one metric family's `name` summed over its labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(float(m.group(1)) for m in re.finditer(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.e+-]+)$", text,
                                                      re.MULTILINE))


def server_scaling(kafka: str, records: list[bytes], batch: int, url: str) -> list[dict[str, Any]]:
    """End to end on a Qdrant server with 1, 2 and 3 workers in one group (a fresh collection each):
    events/s and store round trips per event. On 2 cores the workers share the same CPUs, so this
    measures the overhead of scaling out, not its gain."""
    from dreamstream.streams.store import ServerStore

    out = []
    for k in (1, 2, 3):
        stamp = int(time.time())
        env = {"QDRANT_URL": url, "DREAM_QDRANT_COLLECTION": f"bench_{k}_{stamp}", **_worker_env(batch)}
        workers = [WorkerProcess(kafka, f"bench-srv{k}-{stamp}", OUT / "server" / f"{k}-{i}", env) for i in range(k)]
        store = ServerStore(url=url, collection=env["DREAM_QDRANT_COLLECTION"])
        try:
            for w in workers:
                w.start()
            deadline = time.monotonic() + 120
            while any(not w.consumer_state().get("assigned") for w in workers) and time.monotonic() < deadline:
                time.sleep(0.5)
            time.sleep(3)  # the group's last rebalance settles
            start = time.perf_counter()
            asyncio.run(produce(kafka, workers[0].topics["added"], records))
            while store.count() < len(records):
                if time.perf_counter() - start > 900:
                    raise RuntimeError(f"{k} workers: only {store.count()} of {len(records)} stored in 900 s")
                time.sleep(0.2)
            wall = time.perf_counter() - start
            calls = sum(metric_total(w.port, "dreamstream_store_operation_duration_seconds_count") for w in workers)
        finally:
            for w in workers:
                w.stop()
            store.drop()
            store.close()
        out.append({"workers": k, "events": len(records), "seconds": wall, "events_per_s": len(records) / wall,
                    "store_calls_per_event": calls / len(records)})
    return out


def model_rates(texts: list[str], batch: int) -> dict[str, dict[str, Any]]:
    """texts/s of each runtime on the same texts and batch size, and its cosine to torch's vectors."""
    out: dict[str, dict[str, Any]] = {}
    reference: np.ndarray | None = None
    for backend in ("torch", "onnx", "onnx-int8"):
        try:
            embedder = Embedder(batch_size=batch, backend=backend)
        except Exception as exc:  # torch is an extra
            print(f"  {backend}: skipped ({exc})", file=sys.stderr)
            continue
        embedder.encode_uncached(texts[:batch])  # warm-up
        start = time.perf_counter()
        vectors = np.concatenate([embedder.encode_uncached(texts[i:i + batch]) for i in range(0, len(texts), batch)])
        rate = len(texts) / (time.perf_counter() - start)
        if backend == "torch":
            reference = vectors
        row: dict[str, Any] = {"texts_per_s": rate}
        if reference is not None:
            cos = (vectors * reference).sum(axis=1)
            row |= {"cosine_mean": float(cos.mean()), "cosine_min": float(cos.min())}
        if "torch" in out:
            row["x_torch"] = rate / out["torch"]["texts_per_s"]
        if backend != "torch":
            from dreamstream.streams.core import onnx_model
            from dreamstream.streams.core.embedding import model_path

            row["fused_ops"] = onnx_model.fused_ops(onnx_model.graph_path(model_path(), backend == "onnx-int8"))
        out[backend] = row
        del embedder
    return out


def cross_encoder_rates(texts: list[str], pairs: int = 300) -> dict[str, Any]:
    """ms a pair of the learned judge's cross-encoder, one pair a run (the pipeline reads one event's
    few candidates at a time), on the int8 graph as quantized and on its unsigned (u8 x u8) copy, and
    which one this processor runs: the two agree where int8 products are exact (VNNI, ARM dot product)."""
    import onnxruntime as ort

    from dreamstream.streams.core import judge_model, onnx_model

    weights = judge_model.MODEL_DIR / judge_model.CROSS_FILE
    if not weights.exists():
        return {}
    used = judge_model.cross_graph(weights)
    native = used.with_name(used.name.removesuffix("-u8.onnx") + ".onnx") if used.name.endswith("-u8.onnx") else used
    unsigned = native.with_name(native.stem + "-u8.onnx")
    if not unsigned.exists():
        onnx_model.unsigned_int8(native, unsigned)
    coder = judge_model.CrossEncoder(weights, threads=1)
    chosen = [(texts[i], texts[i + 1]) for i in range(min(pairs, len(texts) - 1))]
    out: dict[str, Any] = {"used": "u8" if used == unsigned else "int8",
                           "int8_exact_here": onnx_model.int8_exact_here()}
    outputs = {}
    for name, graph in (("int8", native), ("u8", unsigned)):
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.log_severity_level = 3
        coder.session = ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
        coder(chosen[:2])  # warm-up
        start = time.perf_counter()
        outputs[name] = coder(chosen)  # one run per pair (judge_model.CrossEncoder)
        out[f"{name}_ms_per_pair"] = 1000 * (time.perf_counter() - start) / len(chosen)
    out["max_probability_gap"] = float(np.abs(outputs["int8"] - outputs["u8"]).max())
    return out


def cycled(records: list[bytes], n: int) -> list[bytes]:
    """`n` events from the case, repeated with fresh ids and users so that every copy is new."""
    out = []
    for i in range(n):
        event = orjson.loads(records[i % len(records)])
        suffix = f"-c{i // len(records)}"
        for key in ("event_id", "memory_id", "user_id"):
            event[key] = f"{event[key]}{suffix}"
        out.append(orjson.dumps(event))
    return out


async def _load(kafka: str, worker: WorkerProcess, records: list[bytes], rate: float) -> list[float]:
    """Sends at `rate` events/s; seconds from each event's send to its decision's first status event."""
    sent: dict[str, float] = {}
    seen: dict[str, float] = {}
    consumer = AIOKafkaConsumer(worker.topics["status"], bootstrap_servers=kafka, auto_offset_reset="latest",
                                enable_auto_commit=False, group_id=None)
    await consumer.start()
    await consumer.seek_to_end()
    producer = AIOKafkaProducer(bootstrap_servers=kafka, acks=1, linger_ms=0)
    await producer.start()
    done = asyncio.Event()

    async def listen() -> None:
        while not done.is_set():
            got = await consumer.getmany(timeout_ms=200)
            now = time.perf_counter()
            for batch in got.values():
                for r in batch:
                    ev = orjson.loads(r.value)
                    new_id = ev["memory_id"] if ev["action"] == "merge_new" else ev["linked_memory_id"]
                    seen.setdefault(ev["decision_id"], now)
                    seen.setdefault(f"new:{ev['decision_id']}", sent.get(new_id, -1.0))

    listener = asyncio.create_task(listen())
    start = time.perf_counter()
    try:
        for i, raw in enumerate(records):
            due = start + i / rate
            if (delay := due - time.perf_counter()) > 0:
                await asyncio.sleep(delay)
            sent[orjson.loads(raw)["memory_id"]] = time.perf_counter()
            await producer.send(worker.topics["added"], raw, key=user_key(raw))
        await producer.flush()
        await asyncio.sleep(10)  # the last batches' decisions
    finally:
        done.set()
        await listener
        await producer.stop()
        await consumer.stop()
    return [seen[d] - seen[f"new:{d}"] for d in seen if not d.startswith("new:") and seen[f"new:{d}"] > 0]


def latency_under_load(kafka: str, records: list[bytes], rate: float, seconds: float, batch: int) -> dict[str, Any]:
    workdir = OUT / "load"
    shutil.rmtree(workdir, ignore_errors=True)
    worker = WorkerProcess(kafka, f"load-{int(time.time())}", workdir, _worker_env(batch))
    worker.start()
    try:
        warm_up(kafka, worker, batch)  # the group's join is start-up, not latency under load
        lat = asyncio.run(_load(kafka, worker, cycled(records, int(rate * seconds)), rate))
    finally:
        worker.stop()
    ms = np.asarray(lat) * 1000
    return {"rate": rate, "seconds": seconds, "decisions": len(lat),
            **({f"p{q}_ms": float(np.percentile(ms, q)) for q in (50, 95, 99)} if len(lat) else {})}


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    names = ["end to end"] + [f"model: {k}" for k in result["models"]]
    rates = [result["e2e"]["events_per_s"]] + [v["texts_per_s"] for v in result["models"].values()]
    left.barh(names, rates, color=["#d62728"] + ["#1f77b4"] * len(result["models"]))
    left.set_xlabel("texts or events per second")
    left.set_title("Throughput by stage")
    left.invert_yaxis()
    rows = result.get("scale") or []
    if rows:
        sizes = [r["size"] for r in rows]
        right.plot(sizes, [r["add_ms_mean"] for r in rows], "o-", label="per-add (mean ms)")
        right.plot(sizes, [r["add_ms_p95"] for r in rows], "o--", label="per-add (p95 ms)")
        right.plot(sizes, [r["search_ms_p95"] for r in rows], "s-", label="search p95 ms")
        right.set_xscale("log")
        right.set_xlabel("memories in the store")
        right.set_ylabel("ms")
        right.set_title("Cost against store size")
        right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    n = int(os.environ.get("BENCH_EVENTS", "2000"))
    batch = settings_mod.load().batch_size
    kafka = os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    load_seconds = float(os.environ.get("BENCH_LOAD_SECONDS", "120"))
    sizes = [int(s) for s in os.environ.get("BENCH_SCALE_SIZES", "1000,10000,100000,1000000").split(",") if s]
    OUT.mkdir(parents=True, exist_ok=True)
    all_records = [r for r in CASE.read_bytes().splitlines() if r.strip()]
    records = all_records[:n]
    texts = [orjson.loads(r)["text"] for r in records]
    backend = settings_mod.load().embed_backend

    print("end to end through Kafka ...", file=sys.stderr)
    e2e = end_to_end(kafka, records, batch)
    help_s = startup_seconds("--help")
    get_s = startup_seconds("get", "--user", "u-0112", "--store", e2e.pop("store_dir"))
    print("model runtimes ...", file=sys.stderr)
    models = model_rates(texts, batch)
    chunked = model_rates(texts, EMBED_CHUNK) if batch != EMBED_CHUNK else models
    # The pipeline feeds the model chunks of EMBED_CHUNK texts; the ceiling is the faster of the two sizes.
    ceiling = max(models[backend]["texts_per_s"], chunked[backend]["texts_per_s"])
    print("the judge's cross-encoder ...", file=sys.stderr)
    cross = cross_encoder_rates(texts)
    print(f"latency at {e2e['events_per_s'] / 2:.0f} events/s for {load_seconds:.0f} s ...", file=sys.stderr)
    load = latency_under_load(kafka, all_records, e2e["events_per_s"] / 2, load_seconds, batch)
    load["batch_model_ms"] = 1000 * batch / ceiling
    print("store size ...", file=sys.stderr)
    scaled = scale.run(sizes) if sizes else []
    url = os.environ.get("QDRANT_URL", "")
    server = []
    if url.startswith(("http://", "https://")):
        print(f"end to end on the Qdrant server at {url}, 1 to 3 workers ...", file=sys.stderr)
        server = server_scaling(kafka, records, batch, url)

    result = {"cores": os.cpu_count(), "batch_size": batch, "backend": backend,
              "cli": {"help_s": help_s, "get_s": get_s}, "e2e": e2e, "models": models,
              "models_at_chunk": {"chunk": EMBED_CHUNK, "rates": chunked}, "ceiling_texts_per_s": ceiling,
              "cross_encoder": cross,
              "load": load, "scale": scaled, "server": server}
    (OUT / "result.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    plot(result, OUT / "throughput.png")

    print(f"\ncores {os.cpu_count()}, batch size {batch}, model runtime {backend}, {n} dev-case events")
    print(f"CLI start (median of 5): dream --help {help_s:.2f} s, dream get {get_s:.2f} s")
    print("\n| stage | rate | |\n| --- | ---: | --- |")
    print(f"| end to end, Kafka -> store | {e2e['events_per_s']:.1f} events/s | "
          f"{e2e['model_seconds']:.1f} s of {e2e['seconds']:.1f} s in the model: ratio {e2e['model_share']:.2f}; "
          f"after a warm-up of {e2e['warm_up_events']} events in {e2e['warm_up_seconds']:.1f} s (start, group join) |")
    print(f"| the model alone ({backend}, the faster of batch {batch} and chunk {EMBED_CHUNK}) | {ceiling:.1f} "
          f"texts/s | end to end / model alone: {e2e['events_per_s'] / ceiling:.2f} (target 0.85) |")
    targets = {"onnx": 1.5, "onnx-int8": 2.5}
    for size, rates in ((batch, models), (EMBED_CHUNK, chunked)) if chunked is not models else ((batch, models),):
        for name, row in rates.items():
            notes = [f"cosine to torch {row['cosine_mean']:.4f} (min {row['cosine_min']:.4f})"] \
                if "cosine_mean" in row else []
            if "x_torch" in row and name in targets:
                notes.append(f"{row['x_torch']:.2f}x torch (target {targets[name]}x)")
            print(f"| model: {name}, {size} texts a call | {row['texts_per_s']:.1f} texts/s | {'; '.join(notes)} |")
    fused = next((row["fused_ops"] for row in models.values() if row.get("fused_ops")), None)
    if fused:
        print("fused ops in the graph: " + ", ".join(f"{k} {v}" for k, v in fused.items()))
    if cross:
        print(f"the judge's cross-encoder, one pair a run on one thread: int8 {cross['int8_ms_per_pair']:.2f} ms "
              f"a pair, u8 x u8 {cross['u8_ms_per_pair']:.2f} ms; this processor runs {cross['used']} (int8 exact "
              f"here: {cross['int8_exact_here']}; largest probability gap {cross['max_probability_gap']:.3f})")
    if load.get("decisions"):
        print(f"\nlatency under load ({load['rate']:.0f} events/s for {load['seconds']:.0f} s, {load['decisions']} "
              f"decisions): p50 {load['p50_ms']:.0f} ms, p95 {load['p95_ms']:.0f} ms, p99 {load['p99_ms']:.0f} ms; "
              f"one batch's model time {load['batch_model_ms']:.0f} ms "
              f"(p95 = {load['p95_ms'] / load['batch_model_ms']:.1f}x)")
    if scaled:
        print("\n| memories | per-add mean / p95 ms | search p50 / p95 ms | listing p95 ms | disk B/memory | RSS MiB |")
        print("| ---: | ---: | ---: | ---: | ---: | ---: |")
        for r in scaled:
            print(f"| {r['size']:,} | {r['add_ms_mean']:.1f} / {r['add_ms_p95']:.1f} | {r['search_ms_p50']:.1f} / "
                  f"{r['search_ms_p95']:.1f} | {r['read_ms_p95']:.1f} | {r['bytes_per_memory_disk']:,.0f} | "
                  f"{r['rss_mb']:,.0f} |")
        first, last = scaled[0], scaled[-1]
        print(f"per-add mean {last['size']:,} vs {first['size']:,}: {last['add_ms_mean'] / first['add_ms_mean']:.2f}x "
              f"(target 1.5x), p95 {last['add_ms_p95'] / first['add_ms_p95']:.2f}x (target 2x)")
        if first.get("add_ms_mean_cold") and last.get("add_ms_mean_cold"):
            print(f"  of which the judge {last['judge_ms_mean'] / first['judge_ms_mean']:.2f}x: its text memos hold "
                  f"a small store's every text; cleared before each add (judge {first['judge_ms_mean_cold']:.1f} -> "
                  f"{last['judge_ms_mean_cold']:.1f} ms), per-add mean "
                  f"{last['add_ms_mean_cold'] / first['add_ms_mean_cold']:.2f}x, p95 "
                  f"{last['add_ms_p95_cold'] / first['add_ms_p95_cold']:.2f}x; store calls "
                  f"{last['add_store_ms_mean'] / first['add_store_ms_mean']:.2f}x")
    if server:
        print(f"\nend to end on a Qdrant server ({url}), {n} events; {os.cpu_count()} cores shared by every worker:"
              " this measures what scaling out costs, not what it gains")
        print("| workers | events/s | store calls per event |\n| ---: | ---: | ---: |")
        for row in server:
            print(f"| {row['workers']} | {row['events_per_s']:.1f} | {row['store_calls_per_event']:.2f} |")
    print(f"\nwritten: {OUT / 'result.json'}, {OUT / 'throughput.png'}")
    asyncio.run(delete_topics_named(kafka, NAMES))  # its workers' topics: a broker that keeps them slows to start
    return 0


if __name__ == "__main__":
    sys.exit(main())
