"""`make fault-test`: the fault campaign an operator would run, on the project's own broker.

Scenarios, each ending in a check that the worker's store equals an in-process replay of the same
events and that the status topic holds every decision id the store records:
  kills      >= 2,000 events (the held-out case and the bad-input corpus mixed in), 10 random SIGKILLs
             while they stream in; every bad record dead-lettered once, no valid one lost
  steps      a SIGKILL at each step of applying a decision (DREAM_FAULT_AT, streams/faults.py)
  broker     two broker restarts mid-stream
  disk       a full disk (a small tmpfs filled up), then an unwritable store (EACCES): the worker pauses,
             stays up and not ready, and resumes when the fault clears (skipped where tmpfs cannot be
             mounted)
  lock       `dream get` beside the running worker reads through its API; `dream export` on its store is
             refused; the worker is unaffected
  writers    a consolidation pass and its undo (the CLI), SIGKILLed after each of their writes and run
             again: the store and the status events equal a clean run's
  reprocess  the control command killed after its delete, its re-add, a target, its last write: the
             redelivered command finishes the first run and replies once
  hostile    records that must not get in (null value or key, not JSON, forged patterns, foreign ids,
             bad ids and dates): one dead letter each, nothing stored or overwritten
  immutable  `chattr +i` on a running worker's store: no SIGBUS, /healthz says why, it resumes
  second     a second worker on the same embedded store is refused before it joins the group
Prints one line per scenario and exits 1 if any check failed (`bench/faults.py NAME ...` runs some).
"""

from __future__ import annotations

import asyncio
import base64
import os
import random
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from dreamstream.streams.core.embedding import shared_embedder
from dreamstream.streams.core.ingest import Incoming, Processor
from dreamstream.streams.core.replay import export_rows
from dreamstream.streams.dev.corpus import bad_corpus
from dreamstream.streams.dev.localrun import ROOT, WorkerProcess, consume_all, produce
from dreamstream.streams.faults import STEPS
from dreamstream.streams.store import EdgeStore

KAFKA = os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092")
WORK = ROOT / "var" / "faults"
HELDOUT = ROOT / "bench" / "cases" / "heldout" / "events.jsonl"
KAFKA_SH = ROOT / "deploy" / "kafka" / "kafka.sh"
DREAM = str(Path(sys.executable).with_name("dream"))


def stream() -> tuple[list[bytes], int]:
    """The held-out case with the bad-input corpus spread through it, and how many records are bad."""
    events = [r for r in HELDOUT.read_bytes().splitlines() if r.strip()]
    records, bad, _ = bad_corpus()
    mixed: list[bytes] = []
    step = max(1, len(events) // len(records) + 1)
    it = iter(records)
    for n, raw in enumerate(events):
        mixed.append(raw)
        if n % step == 0:
            mixed.extend(r for _, r in zip(range(2), it, strict=False))
    mixed.extend(it)
    return mixed, len(bad)


def links(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What must match between two runs: ids, statuses and links both ways (not wall-clock stamps)."""
    return sorted((r["memory_id"], r["user_id"], r["kind"], r["status"], r.get("superseded_by"),
                   tuple(sorted(r.get("supersedes") or ())), r.get("merged_into"),
                   tuple(sorted(r.get("merged_from") or ())), tuple(r.get("sources") or ())) for r in rows)


def reference(records: list[bytes], name: str) -> list[tuple[Any, ...]]:
    """The same events replayed in process into a fresh store: what every faulty run must end in."""
    path = WORK / name / "replay-store"
    shutil.rmtree(path, ignore_errors=True)
    store = EdgeStore(path)
    try:
        proc = Processor(store, shared_embedder())
        for i in range(0, len(records), 64):
            proc.process([Incoming(raw=r, topic="replay") for r in records[i:i + 64]])
        return links(export_rows(store))
    finally:
        store.close()


def finished(worker: WorkerProcess, expected: int, timeout: float = 600) -> None:
    worker.wait_for(lambda s: s.get("memories", 0) >= expected, timeout=timeout)
    time.sleep(3)  # the last batch's events published and its offsets committed


def check(worker: WorkerProcess, ref: list[tuple[Any, ...]]) -> list[str]:
    """The store against the replay, and every stored decision id on the status topic."""
    worker.stop()
    store = EdgeStore(worker.store_dir)
    try:
        rows = export_rows(store)
        decided = {d["decision_id"] for m in store.scroll() for d in m.decisions if not d.get("undone")}
    finally:
        store.close()
    problems = []
    got = links(rows)
    if got != ref:
        diff = len(set(got) ^ set(ref))
        problems.append(f"export differs from the replay in {diff} rows")
    status = asyncio.run(consume_all(KAFKA, worker.topics["status"], 10**9, timeout=15))
    missing = decided - {e["decision_id"] for e in status}
    if missing:
        problems.append(f"{len(missing)} of {len(decided)} decision ids never reached the status topic")
    return problems


def scenario(name: str, fn: Callable[[], list[str]], results: list[tuple[str, list[str], float]]) -> None:
    start = time.monotonic()
    try:
        problems = fn()
    except Exception as exc:  # a scenario that cannot finish is a failure, with its reason
        problems = [f"{type(exc).__name__}: {exc}"]
    seconds = time.monotonic() - start
    results.append((name, problems, seconds))
    print(f"{name:<7} {'ok' if not problems else 'FAILED':<7} {seconds:6.0f} s  " + ("; ".join(problems) or ""),
          flush=True)


def kills() -> list[str]:
    records, n_bad = stream()
    ref = reference(records, "kills")
    expected = len(ref)
    worker = WorkerProcess(KAFKA, f"faults-kills-{int(time.time())}", WORK / "kills")
    worker.start()
    rng = random.Random(7)
    chunks = [records[i:i + 150] for i in range(0, len(records), 150)]
    killed = 0
    for n, chunk in enumerate(chunks):
        asyncio.run(produce(KAFKA, worker.topics["added"], chunk))
        if killed < 10 and n % max(1, len(chunks) // 10) == 0 and n:
            time.sleep(rng.uniform(0.5, 4.0))  # somewhere inside a batch, a publish or a commit
            worker.kill()
            killed += 1
            worker.start()
    while killed < 10:
        time.sleep(rng.uniform(0.5, 3.0))
        worker.kill()
        killed += 1
        worker.start()
    finished(worker, expected)
    problems = check(worker, ref)
    letters = asyncio.run(consume_all(KAFKA, worker.topics["dead"], 10**9, timeout=15))
    per_record = Counter(base64.b64decode(d["original_b64"]) for d in letters)
    _, bad, _ = bad_corpus()
    want = Counter(raw for _, _, raw in bad)
    if per_record != want:
        problems.append(f"dead letters: {sum(per_record.values())} for {n_bad} bad records "
                        f"({sum((per_record - want).values())} extra, {sum((want - per_record).values())} missing)")
    print(f"        {len(records)} records ({n_bad} bad), {killed} SIGKILLs, {worker.restarts} watchdog restarts")
    return problems


def steps() -> list[str]:
    records = [r for r in HELDOUT.read_bytes().splitlines() if r.strip()][:300]
    ref = reference(records, "steps")
    problems = []
    for step in STEPS:
        worker = WorkerProcess(KAFKA, f"faults-{step}-{int(time.time())}", WORK / f"step-{step}",
                               {"DREAM_FAULT_AT": f"{step}:2"})  # 300 records: two batches at least
        worker.start()
        asyncio.run(produce(KAFKA, worker.topics["added"], records))
        deadline = time.monotonic() + 120
        while worker.proc is not None and worker.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        if worker.proc is None or worker.proc.poll() is None:
            problems.append(f"{step}: the fault point never fired")
            worker.stop()
            continue
        worker.env.pop("DREAM_FAULT_AT")
        worker.start()
        finished(worker, len(ref))
        problems += [f"{step}: {p}" for p in check(worker, ref)]
    return problems


def broker() -> list[str]:
    records = [r for r in HELDOUT.read_bytes().splitlines() if r.strip()]
    ref = reference(records, "broker")
    worker = WorkerProcess(KAFKA, f"faults-broker-{int(time.time())}", WORK / "broker")
    worker.start()
    asyncio.run(produce(KAFKA, worker.topics["added"], records))
    for _ in range(2):
        time.sleep(4)
        subprocess.run([str(KAFKA_SH), "stop"], check=True, capture_output=True)
        time.sleep(3)
        subprocess.run([str(KAFKA_SH), "start"], check=True, capture_output=True)
    finished(worker, len(ref))
    return check(worker, ref)


def mount_tmpfs(path: Path, size_mb: int) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)],
                          capture_output=True).returncode == 0


def disk() -> list[str]:
    records = [r for r in HELDOUT.read_bytes().splitlines() if r.strip()][:400]
    ref = reference(records, "disk")
    mount = WORK / "disk" / "tmpfs"
    subprocess.run(["umount", str(mount)], capture_output=True)
    if not mount_tmpfs(mount, 256):
        print("        skipped: tmpfs cannot be mounted here")
        return []
    problems: list[str] = []
    flag = WORK / "disk" / "unwritable"
    worker = WorkerProcess(KAFKA, f"faults-disk-{int(time.time())}", WORK / "disk",
                           {"DREAM_STORE": str(mount / "store"), "DREAM_FAULT_UNWRITABLE": str(flag)})
    worker.store_dir = mount / "store"
    try:
        worker.start()
        asyncio.run(produce(KAFKA, worker.topics["added"], records[:100]))
        finished(worker, 100)
        filler = mount / "filler"
        free = shutil.disk_usage(mount).free
        with filler.open("wb") as f:  # leave 16 MiB: under the 64 MiB writes need
            f.truncate(0)
            f.write(b"\0" * max(0, free - 16 * 2**20))
        asyncio.run(produce(KAFKA, worker.topics["added"], records[100:250]))
        time.sleep(8)
        health = worker._get("/healthz")
        if health.get("status") != "store_fault":
            problems.append(f"disk full: /healthz says {health}, not store_fault")
        if worker.proc is None or worker.proc.poll() is not None:
            problems.append("disk full: the worker died")
        filler.unlink()
        finished(worker, 250, timeout=180)
        flag.touch()  # the store turns unwritable (EACCES on every write)
        asyncio.run(produce(KAFKA, worker.topics["added"], records[250:]))
        time.sleep(8)
        if worker._get("/healthz").get("status") != "store_fault":
            problems.append("unwritable store: no store_fault on /healthz")
        flag.unlink()
        finished(worker, len(ref), timeout=180)
        problems += check(worker, ref)
        letters = asyncio.run(consume_all(KAFKA, worker.topics["dead"], 10**9, timeout=5))
        if letters:
            problems.append(f"{len(letters)} valid events dead-lettered during the faults")
    finally:
        worker.stop()
        subprocess.run(["umount", str(mount)], capture_output=True)
    return problems


def lock() -> list[str]:
    records = [r for r in HELDOUT.read_bytes().splitlines() if r.strip()][:50]
    worker = WorkerProcess(KAFKA, f"faults-lock-{int(time.time())}", WORK / "lock")
    worker.start()
    try:
        asyncio.run(produce(KAFKA, worker.topics["added"], records))
        finished(worker, 50)
        user = str(orjson.loads(records[0])["user_id"])
        out = subprocess.run([DREAM, "get", "--user", user, "--store", str(worker.store_dir)],
                             capture_output=True, text=True, env=worker.env, timeout=120)
        problems = []
        if out.returncode != 0 or not out.stdout.strip():  # a read goes through the worker's API
            problems.append(f"`dream get` beside the worker failed: rc {out.returncode}, {out.stderr.strip()[:200]}")
        out = subprocess.run([DREAM, "export", "--store", str(worker.store_dir)],
                             capture_output=True, text=True, env=worker.env, timeout=120)
        if out.returncode != 1 or "in use by worker pid" not in out.stderr:
            problems.append(f"the CLI was not refused: rc {out.returncode}, {out.stderr.strip()[:200]}")
        extra = {**orjson.loads(records[0]), "event_id": "lock-e-1", "memory_id": "lock-m-1"}
        asyncio.run(produce(KAFKA, worker.topics["added"], [orjson.dumps(extra)]))
        worker.wait_for(lambda s: s.get("memories", 0) >= 51, timeout=60)
        return problems
    finally:
        worker.stop()


# --- writers outside ingest, hostile input, store and group faults ---------------------------------

SCOPE_USER = "u-faults"
SCOPE = [  # duplicates to merge and stale session notes to prune; no conflicts (a reminder's id is random)
    ("Deploys go through the staging cluster first.", "Deploys go through the staging cluster first, then prod.",
     "workflow"),
    ("The API gateway is Envoy.", "The API gateway is Envoy 1.29 behind the load balancer.", "project_decision"),
    ("Tests run with pytest.", "Tests run with pytest and xdist on CI.", "workflow"),
]


def scope_store(folder: Path) -> None:
    """The scope stored as it stands (not through ingest, whose judge would merge the pairs first)."""
    from dreamstream.schemas.memory import Memory

    rows = []
    for n, (short, full, kind) in enumerate(SCOPE):
        for k, text in enumerate((short, full)):
            rows.append((f"f-{n}{k}", text, f"2026-0{1 + k}-0{1 + n}T10:00:00Z", {"type": kind, "confidence": 0.8}))
    for n in range(3):
        rows.append((f"s-{n}", f"Was halfway through refactor step {n} of the parser.", f"2025-06-0{1 + n}T10:00:00Z",
                     {"type": "session_state"}))
    vectors = shared_embedder()([text for _, text, _, _ in rows])
    store = EdgeStore(folder)
    try:
        store.upsert([Memory(memory_id=mid, user_id=SCOPE_USER, text=text, created_at=at, updated_at=at,
                             metadata=meta, vector=vec)
                      for (mid, text, at, meta), vec in zip(rows, vectors, strict=True)])
    finally:
        store.close()


def cli(args: list[str], env: dict[str, str], fault: str | None = None) -> subprocess.CompletedProcess[str]:
    run_env = {**env, **({"DREAM_FAULT_AT": fault} if fault else {})}
    return subprocess.run([DREAM, *args], capture_output=True, text=True, env=run_env, timeout=300)


def export_of(store_dir: Path) -> list[tuple[Any, ...]]:
    store = EdgeStore(store_dir)
    try:
        return links(export_rows(store))
    finally:
        store.close()


def status_keys(topic: str) -> Counter[tuple[Any, ...]]:
    """Each status event by what it says (not by its decision id, which a clean and a killed pass differ in)."""
    events = asyncio.run(consume_all(KAFKA, topic, 10**9, timeout=6))
    return Counter((e["memory_id"], e["from_status"], e["to_status"], e["undo"]) for e in events)


def killed_at_every_point(name: str, base: Path, command: list[str], rerun: list[str],
                          counts: Counter[str]) -> list[str]:
    """`command` on a copy of `base`, clean; then SIGKILLed at each of its fault points (streams/faults.py),
    each followed by `rerun` as an operator would: the store and the status events must equal the clean run."""
    problems: list[str] = []

    def env_for(tag: str) -> dict[str, str]:
        return {**os.environ, "HF_HUB_OFFLINE": "1", "KAFKA_BOOTSTRAP": KAFKA,
                "DREAM_TOPIC_MEMORY_STATUS": f"status-{name}-{tag}-{int(time.time())}"}

    def copy(tag: str) -> Path:
        target = WORK / "writers" / f"{name}-{tag}"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(base, target)
        return target

    clean = copy("clean")
    env = env_for("clean")
    out = cli([*command, "--store", str(clean)], env)
    if out.returncode != 0:
        return [f"{name}: the clean run failed: {out.stderr.strip()[-300:]}"]
    want, want_events = export_of(clean), status_keys(env["DREAM_TOPIC_MEMORY_STATUS"])
    points = [("stored", 1)] + [("target", k) for k in range(1, 200)]
    for step, n in points:
        tag = f"{step}{n}"
        store = copy(tag)
        env = env_for(tag)
        out = cli([*command, "--store", str(store)], env, f"{step}:{n}")
        if out.returncode == 0:  # no such point in the run: every target was passed
            shutil.rmtree(store, ignore_errors=True)
            break
        counts["kills"] += 1
        if out.returncode != -9:
            problems.append(f"{name} {tag}: ended {out.returncode}, not killed: {out.stderr.strip()[-200:]}")
            continue
        cli([*rerun, "--store", str(store)], env)
        if export_of(store) != want:
            problems.append(f"{name}: killed at {tag}, the store differs from the clean run after the rerun")
        got_events = status_keys(env["DREAM_TOPIC_MEMORY_STATUS"])
        if got_events != want_events:
            extra, missing = got_events - want_events, want_events - got_events
            problems.append(f"{name}: killed at {tag}: {sum(missing.values())} status events missing, "
                            f"{sum(extra.values())} extra")
        shutil.rmtree(store, ignore_errors=True)
    for tag in ("applied1",):  # after the last write: only the publishing is left
        store = copy(tag)
        env = env_for(tag)
        out = cli([*command, "--store", str(store)], env, "applied:1")
        counts["kills"] += 1
        cli([*rerun, "--store", str(store)], env)
        if export_of(store) != want or status_keys(env["DREAM_TOPIC_MEMORY_STATUS"]) != want_events:
            problems.append(f"{name}: killed after its last write, the rerun did not end as the clean run")
    return problems


def writers() -> list[str]:
    """A consolidation pass and its undo, each killed after every write (the CLI, on an embedded store)."""
    folder = WORK / "writers"
    folder.mkdir(parents=True, exist_ok=True)
    base = folder / "base"
    scope_store(base)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "KAFKA_BOOTSTRAP": KAFKA}
    counts: Counter[str] = Counter()
    auto = ["consolidate", "--user", SCOPE_USER, "--auto"]
    problems = killed_at_every_point("pass", base, auto, auto, counts)
    # the undo of a pass: a base where the pass was applied
    passed = folder / "passed"
    shutil.copytree(base, passed)
    out = cli([*auto, "--store", str(passed)], env)
    pass_id = next((line.split()[-1] for line in out.stdout.splitlines() if line.startswith("Undo this pass")), None)
    if pass_id is None:
        return [*problems, f"the pass printed no undo line: {out.stdout.strip()[-300:]}"]
    problems += killed_at_every_point("undo", passed, ["undo", pass_id], ["undo", pass_id], counts)
    print(f"        {counts['kills']} kills of a pass and an undo, each after one write; "
          f"{len(problems)} runs differ from a clean one")
    return problems


def control(worker: WorkerProcess, name: str, *pairs: str, command_id: str, timeout: float = 20) -> None:
    """`dream control ...` sent as an operator would, without waiting for the worker to live through it."""
    subprocess.Popen([DREAM, "control", name, *pairs, "--id", command_id, "--timeout", str(timeout), "--yes"],
                     env=worker.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def replies_to(worker: WorkerProcess, command_id: str, timeout: float = 60) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    got: list[dict[str, Any]] = []
    while time.monotonic() < deadline and not got:
        got = asyncio.run(consume_all(KAFKA, worker.topics["replies"], 10**9, timeout=3,
                                      keep=lambda r: r.key == command_id.encode()))
    time.sleep(2)  # a second reply, if one were sent, would be here by now
    return asyncio.run(consume_all(KAFKA, worker.topics["replies"], 10**9, timeout=3,
                                   keep=lambda r: r.key == command_id.encode()))


def died(worker: WorkerProcess, timeout: float = 120) -> bool:
    deadline = time.monotonic() + timeout
    while worker.proc is not None and worker.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    return worker.proc is not None and worker.proc.poll() is not None


def reprocess() -> list[str]:
    """`reprocess` killed after its delete, after the re-add and after a target write: the redelivered
    command finishes the first run (never on the emptied user), replies once, and the user is whole."""
    records = [r for r in HELDOUT.read_bytes().splitlines() if r.strip()][:400]
    users = Counter(orjson.loads(r)["user_id"] for r in records)
    user = users.most_common(1)[0][0]
    problems: list[str] = []
    for k, point in enumerate(("stored:1", "stored:2", "target:1", "applied:1")):
        worker = WorkerProcess(KAFKA, f"faults-reprocess-{k}-{int(time.time())}", WORK / f"reprocess-{k}")
        worker.start()
        asyncio.run(produce(KAFKA, worker.topics["added"], records))
        finished(worker, len(set(records)))
        worker.stop()
        clean_dir = WORK / f"reprocess-{k}" / "clean"
        shutil.copytree(worker.store_dir, clean_dir)
        store = EdgeStore(clean_dir)
        try:
            Processor(store, shared_embedder()).reprocess_user(user, str(WORK / f"reprocess-{k}" / "backup"))
            want = links(export_rows(store, user))
        finally:
            store.close()
        worker.env["DREAM_FAULT_AT"] = point
        worker.start()
        control(worker, "reprocess", f"user={user}", command_id=f"rp-{k}")
        if not died(worker):
            problems.append(f"{point}: the fault point never fired")
            worker.stop()
            continue
        worker.env.pop("DREAM_FAULT_AT")
        worker.start()
        answers = replies_to(worker, f"rp-{k}")
        worker.stop()
        if len(answers) != 1 or answers[0].get("outcome") != "ok":
            problems.append(f"{point}: {len(answers)} replies ({[a.get('outcome') for a in answers]})")
        elif answers[0]["details"]["memories"] != users[user]:
            problems.append(f"{point}: the reply says {answers[0]['details']['memories']} memories, not {users[user]}")
        got = export_of_user(worker.store_dir, user)
        if got != want:
            problems.append(f"{point}: the user's memories differ from a clean reprocess ({len(got)} vs {len(want)})")
    print(f"        4 kills inside a reprocess of {users[user]} memories; {len(problems)} problems")
    return problems


def export_of_user(store_dir: Path, user: str) -> list[tuple[Any, ...]]:
    store = EdgeStore(store_dir)
    try:
        return links(export_rows(store, user))
    finally:
        store.close()


def hostile_records(victim: dict[str, Any]) -> list[tuple[bytes | None, bytes | None, str]]:
    """(key, value, what) of records that must be dead-lettered, never stored, never overwrite."""
    def ev(**fields: Any) -> bytes:
        base = {"type": "memory.added", "event_id": f"h-{time.time_ns()}", "memory_id": f"hm-{time.time_ns()}",
                "user_id": "u-hostile", "text": "A hostile record.", "created_at": "2026-03-01T10:00:00Z"}
        return orjson.dumps({**base, **fields})

    def keyed(raw: bytes) -> bytes:
        return str(orjson.loads(raw)["user_id"]).encode()

    out: list[tuple[bytes | None, bytes | None, str]] = [
        (b"u-hostile", None, "null value"),
        (None, ev(), "null key"),
        (b"u-hostile", b"\x00\xff not json", "bytes that are not JSON"),
    ]
    for what, raw in [
        ("a pattern over another user's memory", ev(type="pattern.added", memory_id=victim["memory_id"],
                                                    sources=[victim["memory_id"]], text="Forged.")),
        ("a pattern with made-up sources", ev(type="pattern.added", sources=["no-such-1", "no-such-2"])),
        ("another user's memory id", ev(memory_id=victim["memory_id"], text="Overwritten.")),
        ("a user id with a trailing space", ev(user_id=victim["user_id"] + " ")),
        ("a user id with NUL", ev(user_id="u-\x00x")),
        ("a path as user id", ev(user_id="../../etc/passwd")),
        ("a memory id with a newline", ev(memory_id="hm-\nx")),
        ("year 1", ev(created_at="0001-01-01T00:00:00Z")),
        ("year 9999", ev(created_at="9999-01-01T00:00:00Z")),
        ("text with NUL", ev(text="A\x00B")),
    ]:
        out.append((keyed(raw), raw, what))
    return out


def hostile() -> list[str]:
    """Records that must not get in: dead-lettered once each, nothing stored or overwritten, nothing held."""
    records = [r for r in HELDOUT.read_bytes().splitlines() if r.strip()][:200]
    worker = WorkerProcess(KAFKA, f"faults-hostile-{int(time.time())}", WORK / "hostile")
    worker.start()
    problems: list[str] = []
    try:
        asyncio.run(produce(KAFKA, worker.topics["added"], records[:100]))
        finished(worker, 100)
        victim = orjson.loads(records[0])
        bad = hostile_records(victim)
        asyncio.run(produce_raw(worker.topics["added"], [(k, v) for k, v, _ in bad]))
        asyncio.run(produce(KAFKA, worker.topics["added"], records[100:]))
        finished(worker, len(records))
        letters = asyncio.run(consume_all(KAFKA, worker.topics["dead"], len(bad), timeout=30))
        health = worker._get("/healthz")
    finally:
        worker.stop()
    store = EdgeStore(worker.store_dir)
    try:
        stored = store.count()
        users = {m.user_id for m in store.scroll()}
        kept = store.retrieve([victim["memory_id"]]).get(victim["memory_id"])
    finally:
        store.close()
    if stored != len(records):
        problems.append(f"{stored} memories stored for {len(records)} valid records")
    if users & {"u-hostile", victim["user_id"] + " ", "u-\x00x", "../../etc/passwd"} or any(
            not u.isprintable() for u in users):
        problems.append("a hostile user id was stored")
    if kept is None or kept.text != victim["text"] or kept.user_id != victim["user_id"] or kept.kind != "fact":
        problems.append("another user's memory was overwritten")
    if len(letters) != len(bad):
        problems.append(f"{len(letters)} dead letters for {len(bad)} hostile records")
    if health.get("status") != "ok":
        problems.append(f"/healthz after the hostile records: {health}")
    print(f"        {len(bad)} hostile records: {len(letters)} dead-lettered ("
          f"{', '.join(sorted(Counter(d['reason'] for d in letters)))}), "
          f"{stored - len(records)} stored; {len(records)} valid, all stored")
    return problems


async def produce_raw(topic: str, records: list[tuple[bytes | None, bytes | None]]) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=KAFKA, acks="all")
    await producer.start()
    try:
        for key, value in records:
            await producer.send(topic, value, key=key, partition=0 if key is None else None)
        await producer.flush()
    finally:
        await producer.stop()


def immutable() -> list[str]:
    """`chattr +i` on a running worker's store (a SIGBUS before): it pauses, says why, resumes."""
    records = [r for r in HELDOUT.read_bytes().splitlines() if r.strip()][:300]
    ref = reference(records, "immutable")
    if subprocess.run(["chattr", "+i", str(WORK)], capture_output=True).returncode != 0:
        print("        skipped: no chattr +i here (needs root and a filesystem with the flag)")
        return []
    subprocess.run(["chattr", "-i", str(WORK)], check=True)
    worker = WorkerProcess(KAFKA, f"faults-immutable-{int(time.time())}", WORK / "immutable")
    problems: list[str] = []
    try:
        worker.start()
        asyncio.run(produce(KAFKA, worker.topics["added"], records[:100]))
        finished(worker, 100)
        subprocess.run(["chattr", "-R", "+i", str(worker.store_dir)], check=True)
        asyncio.run(produce(KAFKA, worker.topics["added"], records[100:]))
        time.sleep(6)
        early = worker.health()
        time.sleep(int(worker.env["DREAM_STALL_SECONDS"]) + 2)
        late = worker.health()
        alive = worker.proc is not None and worker.proc.poll() is None
        subprocess.run(["chattr", "-R", "-i", str(worker.store_dir)], check=True)
        if not alive:
            problems.append(f"the worker died (exit {worker.proc.poll() if worker.proc else None})")
            worker.start()
        if early[1].get("status") != "store_fault":
            problems.append(f"/healthz while the store is immutable: {early}")
        if late[0] != 503:
            problems.append(f"/healthz after {worker.env['DREAM_STALL_SECONDS']} s holding partitions: {late[0]}")
        finished(worker, len(ref), timeout=180)
        problems += check(worker, ref)
        print(f"        immutable store: worker {'alive' if alive else 'DIED'}, /healthz {early[0]} then {late[0]} "
              f"({late[1].get('status')}), resumed: {not problems}")
    finally:
        subprocess.run(["chattr", "-R", "-i", str(worker.store_dir)], capture_output=True)
        worker.stop()
    return problems


def second() -> list[str]:
    """A second worker in the same group on the same embedded store: refused before it joins, in one line;
    the first one keeps every partition and stores everything."""
    records = [r for r in HELDOUT.read_bytes().splitlines() if r.strip()][:200]
    first = WorkerProcess(KAFKA, f"faults-second-{int(time.time())}", WORK / "second")
    problems: list[str] = []
    try:
        first.start()
        asyncio.run(produce(KAFKA, first.topics["added"], records[:100]))
        other = subprocess.run([DREAM, "worker"], env={**first.env, "DREAM_HTTP_PORT": str(first.port + 1)},
                               capture_output=True, text=True, timeout=120)
        asyncio.run(produce(KAFKA, first.topics["added"], records[100:]))
        finished(first, len(records))
        lines = other.stderr.strip().splitlines()
        if other.returncode == 0 or len(lines) != 1 or "in use by worker pid" not in lines[0]:
            problems.append(f"the second worker was not refused in one line: rc {other.returncode}, {lines[-3:]}")
        print(f"        second worker: exit {other.returncode}: {lines[-1][:140] if lines else ''}")
    finally:
        first.stop()
    return problems


def main() -> int:
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    wanted = sys.argv[1:] or ["kills", "steps", "broker", "disk", "lock", "writers", "reprocess", "hostile",
                              "immutable", "second"]
    results: list[tuple[str, list[str], float]] = []
    for name in wanted:
        scenario(name, globals()[name], results)
    failed = [name for name, problems, _ in results if problems]
    summary = f"{len(results) - len(failed)} of {len(results)} scenarios passed"
    print(summary + (f"; failed: {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
