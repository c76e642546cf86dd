"""`make demo`: the main job on embedded defaults, end to end, and what it did.

Starts a `dream worker` (local Kafka, embedded Qdrant edge store, packaged model), produces the
sample memory events that ship with the project to `memory.added`, waits until they are applied,
then prints the decisions, the dead letters and each user's memories in the three read modes.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import time
from collections import Counter
from importlib import resources
from pathlib import Path

from dreamstream.schemas.events import InvalidEvent, parse_memory_event
from dreamstream.streams.dev.localrun import ROOT, WorkerProcess, consume_all, delete_topics_named, produce


def main() -> int:
    kafka = os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    sample = resources.files("dreamstream.streams.dev").joinpath("sample/memories.jsonl").read_bytes()
    records = [r for r in sample.splitlines() if r.strip()]
    valid, users = 0, []
    for raw in records:
        try:
            uid = parse_memory_event(raw).user_id
            valid += 1
            if uid not in users:
                users.append(uid)
        except InvalidEvent:
            pass
    workdir = Path(os.environ.get("DREAM_DEMO_DIR") or ROOT / "var" / "demo")
    shutil.rmtree(workdir, ignore_errors=True)
    name = f"demo-{int(time.time())}"
    worker = WorkerProcess(kafka, name, workdir)
    print(f"dreamstream demo: starting a worker (Kafka {kafka}, embedded store {worker.store_dir})")
    worker.start()
    try:
        started = time.perf_counter()
        asyncio.run(produce(kafka, worker.topics["added"], records))
        print(f"produced {len(records)} events ({valid} valid) to topic {worker.topics['added']}, keyed by user_id")
        stats = worker.wait_for(lambda s: s["memories"] >= valid, timeout=180)
        print(f"applied in {time.perf_counter() - started:.1f}s: {stats}")
        statuses = asyncio.run(consume_all(kafka, worker.topics["status"], expect=10**9, timeout=5))
        dead = asyncio.run(consume_all(kafka, worker.topics["dead"], expect=len(records) - valid, timeout=10))
        print(f"\n{len(statuses)} memory.status events on {worker.topics['status']}:")
        for ev in statuses:
            ev_rule = ev["evidence"].get("rule")
            print(f"  {ev['memory_id']}: {ev['from_status']} -> {ev['to_status']} "
                  f"(linked {ev['linked_memory_id']}; {ev['action']}, rule {ev_rule}; decision {ev['decision_id']})")
        print(f"\n{len(dead)} dead letters on {worker.topics['dead']}: "
              + ", ".join(f"{k}={v}" for k, v in Counter(d["reason"] for d in dead).items()))
        for user in users:
            for mode, query in (("default", ""), ("latest_only", "&latest_only=1"),
                                ("include_merged", "&include_merged=1")):
                rows = worker.read(f"user={user}{query}")["memories"]
                print(f"\n{user} — {mode} ({len(rows)}):")
                for r in rows:
                    link = r.get("superseded_by") or r.get("merged_into") or ""
                    print(f"  [{r['label']:<8}] {r['memory_id']:<10} {r['text']}" + (f"  -> {link}" if link else ""))
                if mode != "default" and user != users[0]:
                    break
    finally:
        worker.stop()
        # Its topics go with it: each run names its own, and a broker that keeps them all starts slower and slower.
        gone = asyncio.run(delete_topics_named(kafka, [name]))
        print(f"\nremoved the demo's {gone} Kafka topics")
    store = os.path.relpath(worker.store_dir, Path.cwd())
    print(f"\nThe store stays in {store}. Read it back with:\n"
          f"  .venv/bin/dream get --store {store} --user {users[0]}\n"
          f"  .venv/bin/dream get --store {store} --user {users[0]} --latest-only\n"
          f"  .venv/bin/dream search --store {store} --user {users[0]} 'where does the user live'\n"
          f"  .venv/bin/dream export --store {store}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
