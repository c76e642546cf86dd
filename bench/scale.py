"""Flat cost as the store grows (issue 16): per-add cost, read latency, memory and disk at 1k .. 1M memories.

For each size a fresh embedded store (EdgeStore, the worker's default) is filled in bulk with synthetic
memories: precomputed vectors (seeded numpy, unit float32, each user's memories clustered around the
user and a topic word), realistic payloads (short texts, metadata, ~6 word features of ~0.5 KB each in
the judge's int8/base64 form, some superseded and merged facts with their links) and users with a
lognormal skew (median ~30 memories, a few with thousands). Fresh per size, not one store grown, so
that the optimize() of one size does not shape the next; the fill goes through `EdgeStore.upsert` in
chunks of 2,000 (the real write path: payload building, text keys and point conversion included).

Then, on that store:

- per-add cost: the real `Processor.process` for one `memory.added` event at a time (users drawn in
  proportion to their activity, so heavy users weigh in; ~10% repeat a stored text), with the offline
  judge (`agents.merge_supersede.decide`) and a stand-in embedder that hands back precomputed vectors
  and word features, so no model runs. `add_ms_*` is the whole event (validation, screening, candidates,
  judging, writes); `add_store_ms_*` only the time inside store calls; `judge_ms_mean` the judge.
  The `*_cold` keys repeat it with the judge's text memos cleared before each add (`judge_memos`):
  the adds read as many candidates at 1k as at 100k (19.4) at about the same cosines, but at 1k every
  stored text fits the memos, so without this the judge looks up to 2x cheaper at 1k for the same work.
- reads: `reads.get` (a user's listing, default mode) and `reads.search` (limit 10) as the API and the
  CLI run them, plus the bare filtered nearest query (user + status filter, limit 10), in process.
- memory: process RSS (anonymous and file-backed) after the fill and the peak; disk: du of the store
  folder after a flush; both per stored memory.
- optimize(): what full consolidation's `rebuild_indexes` runs, timed, then adds and reads measured
  again (`*_opt` keys). The store never indexes its vectors (`edge.INDEXING_THRESHOLD_KB`), so this checks
  that optimising leaves adds as they were; skipped above `--optimize-limit`.

Run (from the repository root):

    .venv/bin/python bench/scale.py [--sizes 1000,10000,100000,1000000] [--json OUT]
    .venv/bin/python bench/scale.py --server URL --sizes 100000   # the fill and adds through a Qdrant server

`run(sizes)` returns one dict per size (for bench/throughput.py); stores live under var/scale/ (git
ignores var/) and are removed after each size.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from dreamstream.agents import merge_supersede
from dreamstream.agents.alignment import TokenFeatures
from dreamstream.agents.decisions import Decision
from dreamstream.schemas.memory import EMBEDDING_DIM, Memory
from dreamstream.streams.core import reads
from dreamstream.streams.core.ingest import Incoming, Processor
from dreamstream.streams.store import EdgeStore, open_store

ROOT = Path(__file__).resolve().parents[1]
STORE_ROOT = ROOT / "var" / "scale"
DEFAULT_SIZES = (1_000, 10_000, 100_000, 1_000_000)
CHUNK = 2_000
SEED = 16

# -- synthetic memories --------------------------------------------------------------------------

VERBS = ("likes", "prefers", "is learning", "works on", "visited", "owns", "plans to try", "stopped using",
         "recommends", "dislikes", "collects", "is reading about", "cooks", "practises", "booked",
         "teaches", "volunteers at", "switched to", "is saving for", "writes about")
NOUNS = (
    "hiking", "climbing", "sailing", "chess", "violin", "piano", "guitar", "pottery", "gardening", "baking",
    "sourdough", "espresso", "ramen", "sushi", "curry", "tacos", "photography", "astronomy", "birdwatching",
    "running", "cycling", "swimming", "yoga", "karate", "fencing", "kayaking", "skiing", "surfing", "knitting",
    "woodworking", "robotics", "python", "rust", "kotlin", "databases", "compilers", "poetry", "novels",
    "podcasts", "documentaries", "jazz", "opera", "techno", "vinyl", "museums", "castles", "lighthouses",
    "volcanoes", "deserts", "orchids", "cacti", "bonsai", "beekeeping", "chickens", "terriers", "parrots",
    "aquariums", "cats", "horses", "marathons", "triathlons", "camping", "glamping", "hostels", "trains",
    "ferries", "scooters", "motorbikes", "sedans", "bicycles", "drones", "telescopes", "watches", "fountain-pens",
    "notebooks", "spreadsheets", "budgeting", "investing", "crypto", "mortgages", "pensions", "taxes", "spanish",
    "japanese", "german", "latin", "calligraphy", "origami", "painting", "sketching", "sculpture", "ceramics",
    "dance", "salsa", "tango", "theatre", "improv", "stand-up", "cinema", "anime", "comics", "boardgames",
    "crosswords", "sudoku", "puzzles"
)
PLACES = ("in Lisbon", "in Berlin", "in Kyoto", "near the office", "at home", "on weekends", "every morning",
          "with her sister", "with his team", "since 2019", "since last spring", "in the evenings",
          "at the community centre", "online", "twice a week", "during holidays", "in Oslo", "in Austin",
          "with friends", "for work")
STATUS_P = {"active": 0.85, "superseded": 0.10, "merged": 0.05}
TYPES = ("preference", "fact", "plan", "skill", "relationship")
APPS = ("app-chat", "app-notes", "app-voice")
EPOCH = datetime(2024, 1, 1, tzinfo=UTC)


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float32)
    return x / np.linalg.norm(x, axis=-1, keepdims=True).clip(1e-12)


class Vocabulary:
    """Fixed unit vectors per word (the word features) and per noun (the topic a memory is about)."""

    def __init__(self, seed: int = SEED) -> None:
        rng = np.random.default_rng([seed, 0])
        words = sorted({w for phrase in (*VERBS, *NOUNS, *PLACES) for w in phrase.lower().split()} | {"user"})
        self.index = {w: i for i, w in enumerate(words)}
        self.word_vecs = _unit(rng.standard_normal((len(words), EMBEDDING_DIM)))
        self.noun_vecs = _unit(rng.standard_normal((len(NOUNS), EMBEDDING_DIM)))

    def features(self, text: str) -> TokenFeatures:
        words = [w for w in text.lower().split() if w in self.index and w not in ("the", "a", "at", "in", "on")]
        return TokenFeatures(words=tuple(words), names=tuple(w[:1].isdigit() for w in words),
                             vecs=self.word_vecs[[self.index[w] for w in words]])


@dataclass
class User:
    uid: str
    index: int
    count: int  # memories stored at the fill
    added: int = 0  # memories added since by the per-add measurement


@dataclass
class Drawn:
    """One user's memories as arrays: texts, vectors, statuses and times (deterministic per user)."""

    texts: list[str]
    vectors: np.ndarray
    statuses: list[str]
    minutes: np.ndarray


def draw(vocab: Vocabulary, user: User, count: int, salt: int = 0, seed: int = SEED) -> Drawn:
    """`count` memories of `user`: text from templates, vector = user centre + topic + noise."""
    rng = np.random.default_rng([seed, 1, user.index, salt])
    centre = _unit(np.random.default_rng([seed, 2, user.index]).standard_normal(EMBEDDING_DIM))
    verbs = rng.integers(0, len(VERBS), count)
    nouns = rng.integers(0, len(NOUNS), count)
    places = rng.integers(0, len(PLACES), count)
    texts = [f"User {VERBS[v]} {NOUNS[n]} {PLACES[p]}" for v, p, n in zip(verbs, places, nouns, strict=True)]
    noise = _unit(rng.standard_normal((count, EMBEDDING_DIM)))
    vectors = _unit(0.5 * centre + 0.7 * vocab.noun_vecs[nouns] + 0.5 * noise)
    statuses = list(rng.choice(list(STATUS_P), size=count, p=list(STATUS_P.values())))
    minutes = np.sort(rng.integers(0, 2 * 365 * 24 * 60, count))
    return Drawn(texts, vectors, statuses, minutes)


def iso(minutes: int) -> str:
    return (EPOCH + timedelta(minutes=int(minutes))).strftime("%Y-%m-%dT%H:%M:%SZ")


def user_memories(vocab: Vocabulary, user: User) -> Iterator[Memory]:
    """A user's stored memories; superseded and merged ones link to a later memory of the same user."""
    d = draw(vocab, user, user.count)
    for k, (text, status) in enumerate(zip(d.texts, d.statuses, strict=True)):
        later = min(k + 1, user.count - 1)
        link = f"{user.uid}-m{later}" if later != k else None
        if link is None:
            status = "active"
        at = iso(d.minutes[k])
        yield Memory(
            memory_id=f"{user.uid}-m{k}", user_id=user.uid, text=text, created_at=at, updated_at=at,
            kind="fact", status=status,  # type: ignore[arg-type]
            app_id=APPS[k % len(APPS)], agent_id="agent-1",
            superseded_by=link if status == "superseded" else None,
            merged_into=link if status == "merged" else None,
            sources=[f"evt-{user.uid}-{k}"], event_id=f"evt-{user.uid}-{k}",
            decision_ids=[f"dec-{user.uid}-{k}"] if status != "active" else [],
            metadata={"type": TYPES[k % len(TYPES)], "confidence": 0.9, "pinned": False},
            features=vocab.features(text).to_payload(), vector=d.vectors[k],
        )


def population(size: int, seed: int = SEED) -> list[User]:
    """Users whose counts sum to `size`: lognormal, median ~30 (most have tens), a long tail to thousands."""
    rng = np.random.default_rng([seed, 3])
    users: list[User] = []
    total = 0
    while total < size:
        n = int(min(max(1, round(rng.lognormal(np.log(30), 1.2))), 20_000, size - total))
        users.append(User(uid=f"u{len(users):06d}", index=len(users), count=n))
        total += n
    return users


# -- timing ----------------------------------------------------------------------------------------


class TimedStore:
    """The real store, adding up the seconds spent in its calls (any call: a new store method is timed
    without a change here). A scroll is drained inside the timing, as the pipeline drains it."""

    def __init__(self, store: Any) -> None:
        self.inner = store
        self.seconds = 0.0

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self.inner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                out = fn(*args, **kwargs)
                return iter(list(out)) if name == "scroll" else out
            finally:
                self.seconds += time.perf_counter() - start

        return timed


class Precomputed:
    """A stand-in embedder: the vectors and word features of texts registered beforehand (no model)."""

    def __init__(self, vocab: Vocabulary) -> None:
        self.vocab = vocab
        self.vectors: dict[str, np.ndarray] = {}

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.vectors[t] for t in texts]).astype(np.float32)

    def encode_with_features(self, texts: Sequence[str]) -> tuple[np.ndarray, list[TokenFeatures]]:
        return self(texts), [self.vocab.features(t) for t in texts]

    def features(self, texts: Sequence[str]) -> list[TokenFeatures]:
        """Word features for an event that came with its embedding (the judge aligns words with them)."""
        return [self.vocab.features(t) for t in texts]


def pct(values: Sequence[float], q: float) -> float:
    return round(float(np.percentile(np.asarray(values) * 1000.0, q)), 3) if values else float("nan")


def mean_ms(values: Sequence[float]) -> float:
    return round(float(np.mean(values)) * 1000.0, 3) if values else float("nan")


def proc_status() -> dict[str, float]:
    """VmRSS, RssAnon, RssFile and VmHWM of this process in MiB (psutil is not a dependency)."""
    out: dict[str, float] = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
                out[key] = round(int(rest.split()[0]) / 1024, 1)
    return out


def du_bytes(path: Path) -> int:
    return int(subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True,
                              check=True).stdout.split()[0])


def progress(msg: str) -> None:
    print(f"[scale {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- the benchmark ---------------------------------------------------------------------------------


@dataclass
class Sampler:
    users: list[User]
    rng: np.random.Generator
    weights: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        counts = np.array([u.count for u in self.users], dtype=np.float64)
        self.weights = counts / counts.sum()

    def by_activity(self, n: int) -> list[User]:
        """`n` users drawn in proportion to their memory count (the busiest always among them)."""
        picks = [self.users[i] for i in self.rng.choice(len(self.users), size=n, p=self.weights)]
        heaviest = max(self.users, key=lambda u: u.count)
        return [heaviest, *picks[1:]]


def fill(store: Any, vocab: Vocabulary, users: Sequence[User], size: int) -> float:
    """Writes every user's memories in chunks of CHUNK; returns the seconds taken."""
    try:
        from tqdm import tqdm
        bar: Any = tqdm(total=size, unit="mem", file=sys.stderr, mininterval=2.0, desc=f"fill {size:,}")
    except ImportError:  # pragma: no cover
        bar = None
    start = time.perf_counter()
    buf: list[Memory] = []
    done = 0
    for user in users:
        for memory in user_memories(vocab, user):
            buf.append(memory)
            if len(buf) >= CHUNK:
                store.upsert(buf)
                done += len(buf)
                if bar is not None:
                    bar.update(len(buf))
                elif done % 50_000 < CHUNK:
                    progress(f"filled {done:,}/{size:,}")
                buf = []
    store.upsert(buf)
    if bar is not None:
        bar.update(len(buf))
        bar.close()
    store.flush()
    return time.perf_counter() - start


JUDGE = os.environ.get("BENCH_SCALE_JUDGE", "offline")
"""The judge the per-add cost runs (`--judge`): the rule judge, this series' own since it began, or
`learned`, the product's default (its floor and cross-encoder on the synthetic texts)."""


def judge_memos() -> list[Any]:
    """The judge's text-analysis memos (functools caches of the loaded `dreamstream.agents` modules).

    They are keyed by text, so a small store's whole vocabulary of texts fits them and its adds read
    candidates already parsed, while a large store's do not: clearing them before each add holds the
    judge's work equal across sizes and leaves the store's own growth."""
    memos: list[Any] = []
    for name, module in list(sys.modules.items()):
        if name.startswith("dreamstream.agents.") and module is not None:
            memos += [obj for obj in vars(module).values()
                      if callable(getattr(obj, "cache_clear", None)) and getattr(obj, "__module__", None) == name]
    return memos


def measure_adds(store: Any, vocab: Vocabulary, sampler: Sampler, n: int, tag: str,
                 cold: bool = False) -> dict[str, Any]:
    """Per-event cost of the real Processor against this store (stand-in model, `JUDGE`); `cold` clears
    the judge's text memos before each add (outside the timing)."""
    timed = TimedStore(store)
    embed = Precomputed(vocab)
    judge_seconds = [0.0]
    decisions: Counter[str] = Counter()
    if JUDGE == "learned":
        from dreamstream.streams.core import judge_model

        learned = judge_model.learned_judge()

        def judged(new: Memory, candidates: Sequence[Memory]) -> list[Decision]:
            return merge_supersede.decide_with(learned, new, candidates)
    else:
        judged = merge_supersede.decide

    def decide(new: Memory, candidates: Sequence[Memory]) -> list[Decision]:
        start = time.perf_counter()
        out = judged(new, candidates)
        judge_seconds[0] += time.perf_counter() - start
        decisions.update(d.action for d in out)
        return out

    processor = Processor(timed, embed, decide=decide, candidate_k=merge_supersede.CANDIDATE_K)
    rng = np.random.default_rng([SEED, 4, len(tag)])
    totals: list[float] = []
    store_side: list[float] = []
    judge: list[float] = []
    now = datetime.now(UTC)
    for i, user in enumerate(sampler.by_activity(n)):
        fresh = draw(vocab, user, 1, salt=1_000_000 + user.added + 1000 * len(tag))
        text, vector = fresh.texts[0], fresh.vectors[0]
        if rng.random() < 0.10:  # a restatement: the exact-text lookup finds it
            k = int(rng.integers(0, user.count))
            text = draw(vocab, user, user.count).texts[k]
        mid = f"{user.uid}-{tag}-{user.added}"
        user.added += 1
        embed.vectors[text] = vector
        event = {"type": "memory.added", "event_id": f"evt-{mid}", "memory_id": mid, "user_id": user.uid,
                 "text": text, "created_at": (now + timedelta(seconds=i)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                 "app_id": APPS[i % len(APPS)], "metadata": {"type": "preference", "confidence": 0.9},
                 "embedding": [float(x) for x in vector]}
        raw = orjson.dumps(event)
        if cold:
            for memo in judge_memos():
                memo.cache_clear()
        before_store, before_judge = timed.seconds, judge_seconds[0]
        start = time.perf_counter()
        result = processor.process([Incoming(raw=raw, topic="scale")])
        totals.append(time.perf_counter() - start)
        store_side.append(timed.seconds - before_store)
        judge.append(judge_seconds[0] - before_judge)
        if result.dead_letters:
            raise RuntimeError(f"event dead-lettered: {result.dead_letters[0]}")
    store.flush()
    return {f"add_ms_p50{tag}": pct(totals, 50), f"add_ms_mean{tag}": mean_ms(totals),
            f"add_ms_p95{tag}": pct(totals, 95), f"add_store_ms_p50{tag}": pct(store_side, 50),
            f"add_store_ms_mean{tag}": mean_ms(store_side), f"add_store_ms_p95{tag}": pct(store_side, 95),
            f"judge_ms_mean{tag}": mean_ms(judge), f"decisions{tag}": dict(decisions)}


def measure_reads(store: EdgeStore, vocab: Vocabulary, sampler: Sampler, n: int, tag: str) -> dict[str, Any]:
    """A user's listing, a search and the bare filtered nearest query, each `n` times."""
    embed = Precomputed(vocab)
    lists: list[float] = []
    searches: list[float] = []
    nearest: list[float] = []
    rows = 0
    for user in sampler.by_activity(n):
        q = draw(vocab, user, 1, salt=2_000_000 + len(tag))
        embed.vectors[q.texts[0]] = q.vectors[0]
        start = time.perf_counter()
        rows += len(reads.get(store, user.uid, "default"))
        lists.append(time.perf_counter() - start)
        start = time.perf_counter()
        reads.search(store, embed, user.uid, q.texts[0], "default", limit=10)
        searches.append(time.perf_counter() - start)
        start = time.perf_counter()
        store.nearest(q.vectors[0], {"user_id": user.uid, "status": ["active", "superseded"]}, 10)
        nearest.append(time.perf_counter() - start)
    heaviest = max(sampler.users, key=lambda u: u.count)
    heavy: list[float] = []
    for _ in range(3):
        start = time.perf_counter()
        reads.get(store, heaviest.uid, "default")
        heavy.append(time.perf_counter() - start)
    return {f"read_ms_p50{tag}": pct(lists, 50), f"read_ms_p95{tag}": pct(lists, 95),
            f"read_rows_mean{tag}": round(rows / max(1, n), 1),
            f"search_ms_p50{tag}": pct(searches, 50), f"search_ms_p95{tag}": pct(searches, 95),
            f"nearest_ms_p50{tag}": pct(nearest, 50), f"nearest_ms_p95{tag}": pct(nearest, 95),
            f"read_heaviest_ms{tag}": pct(heavy, 50)}


def run_size(size: int, vocab: Vocabulary, adds: int = 300, n_reads: int = 300,
             optimize_limit: int = 100_000, keep: bool = False) -> dict[str, Any]:
    """One fresh store of `size` memories, measured before and (up to `optimize_limit`) after optimize()."""
    path = STORE_ROOT / f"n{size}"
    shutil.rmtree(path, ignore_errors=True)
    users = population(size)
    counts = np.array([u.count for u in users])
    out: dict[str, Any] = {
        "size": size, "users": len(users), "user_median": int(np.median(counts)),
        "user_p99": int(np.percentile(counts, 99)), "user_max": int(counts.max()),
        "users_over_1000": int((counts > 1000).sum()),
    }
    before = proc_status()
    store = open_store(str(path), owner="bench/scale.py")
    try:
        out["fill_seconds"] = round(fill(store, vocab, users, size), 2)
        out["fill_per_s"] = round(size / out["fill_seconds"], 1)
        after = proc_status()
        out["rss_mb"] = after["VmRSS"]
        out["rss_anon_mb"] = after["RssAnon"]
        out["rss_file_mb"] = after["RssFile"]
        out["bytes_per_memory_rss"] = round((after["VmRSS"] - before["VmRSS"]) * 2**20 / size)
        out["bytes_per_memory_anon"] = round((after["RssAnon"] - before["RssAnon"]) * 2**20 / size)
        disk = du_bytes(path)
        out["disk_mb"] = round(disk / 2**20, 1)
        out["bytes_per_memory_disk"] = round(disk / size)
        out["disk_wal_mb"] = round(du_bytes(path / "wal") / 2**20, 1) if (path / "wal").exists() else None
        out["disk_segments_mb"] = round(du_bytes(path / "segments") / 2**20, 1)
        out["segments"] = int(store.shard.info().segments_count)
        progress(f"{size:,}: filled in {out['fill_seconds']} s, rss {after['VmRSS']} MiB, "
                 f"disk {out['disk_mb']} MiB; measuring")
        sampler = Sampler(users, np.random.default_rng([SEED, 5]))
        measure_reads(store, vocab, Sampler(users, np.random.default_rng([SEED, 9])), 20, "")  # warm-up
        out.update(measure_adds(store, vocab, sampler, adds, ""))
        out.update(measure_reads(store, vocab, sampler, n_reads, ""))
        out["optimize_seconds"] = None
        if size <= optimize_limit:
            progress(f"{size:,}: optimize()")
            start = time.perf_counter()
            store.optimize()
            out["optimize_seconds"] = round(time.perf_counter() - start, 2)
            out["segments_opt"] = int(store.shard.info().segments_count)
            store.flush()
            out["disk_mb_opt"] = round(du_bytes(path) / 2**20, 1)
            measure_reads(store, vocab, Sampler(users, np.random.default_rng([SEED, 9])), 20, "_opt")  # warm-up
            out.update(measure_adds(store, vocab, sampler, adds, "_opt"))
            out.update(measure_reads(store, vocab, sampler, n_reads, "_opt"))
        # Last, so that the before/after optimize() figures are taken on the same store (the cold pass adds
        # `adds` memories of its own); the same users as the first pass, drawn again in the same order.
        out.update(measure_adds(store, vocab, Sampler(users, np.random.default_rng([SEED, 5])), adds, "_cold",
                                cold=True))
        out["rss_peak_mb"] = proc_status()["VmHWM"]
    finally:
        store.close()
        if not keep:
            shutil.rmtree(path, ignore_errors=True)
    progress(f"{size:,}: done: add p50 {out['add_ms_p50']} ms, read p95 {out['read_ms_p95']} ms, "
             f"search p95 {out['search_ms_p95']} ms")
    return out


def run_server(url: str, size: int, vocab: Vocabulary, adds: int = 300, wait_s: float = 600.0) -> dict[str, Any]:
    """The same fill and adds against a Qdrant server (`--server URL`), in a fresh collection that is
    dropped afterwards: adds right after the fill, while the server indexes in the background, and
    again once it has finished (`*_indexed`), by the collection's default config as `ServerStore`
    makes it."""
    from qdrant_client import models

    from dreamstream.streams.store.server import ServerStore

    collection = f"dream_scale_{size}"
    probe = ServerStore(url=url, collection=collection)
    probe.client.delete_collection(collection)
    store = ServerStore(url=url, collection=collection)
    try:
        users = population(size)
        out: dict[str, Any] = {"size": size, "users": len(users), "server": url}
        out["fill_seconds"] = round(fill(store, vocab, users, size), 2)
        sampler = Sampler(users, np.random.default_rng([SEED, 5]))
        out.update(measure_adds(store, vocab, sampler, adds, ""))
        start = time.perf_counter()
        while (store.client.get_collection(collection).status != models.CollectionStatus.GREEN
               and time.perf_counter() - start < wait_s):
            time.sleep(2.0)
        info = store.client.get_collection(collection)
        out["index_wait_seconds"] = round(time.perf_counter() - start, 1)
        out["indexed_vectors"] = info.indexed_vectors_count
        out.update(measure_adds(store, vocab, sampler, adds, "_indexed"))
    finally:
        store.client.delete_collection(collection)
    progress(f"{size:,} on {url}: adds {out['add_ms_mean']} ms mean while indexing, {out['add_ms_mean_indexed']} "
             f"after ({out['indexed_vectors']} vectors indexed in {out['index_wait_seconds']} s)")
    return out


SERVER_COLUMNS = (
    ("size", "size"), ("fill_seconds", "fill_s"), ("add_ms_mean", "addavg"), ("add_ms_p95", "add95"),
    ("add_store_ms_mean", "st_avg"), ("index_wait_seconds", "index_s"), ("indexed_vectors", "indexed"),
    ("add_ms_mean_indexed", "addavg_idx"), ("add_ms_p95_indexed", "add95_idx"),
    ("add_store_ms_mean_indexed", "st_avg_idx"),
)


def run(sizes: Sequence[int] = DEFAULT_SIZES, adds: int = 300, n_reads: int = 300,
        optimize_limit: int = 100_000, keep: bool = False) -> list[dict[str, Any]]:
    """One result dict per size (see the module docstring for the keys' meaning)."""
    vocab = Vocabulary()
    STORE_ROOT.mkdir(parents=True, exist_ok=True)
    results = []
    for size in sizes:
        results.append(run_size(size, vocab, adds, n_reads, optimize_limit, keep))
    if not keep and STORE_ROOT.exists() and not any(STORE_ROOT.iterdir()):
        STORE_ROOT.rmdir()
    return results


COLUMNS = (
    ("size", "size"), ("users", "users"), ("user_max", "umax"), ("fill_seconds", "fill_s"),
    ("add_ms_p50", "add50"), ("add_ms_mean", "addavg"), ("add_ms_p95", "add95"),
    ("add_store_ms_mean", "st_avg"), ("add_store_ms_p95", "st95"), ("judge_ms_mean", "judge"),
    ("add_ms_mean_cold", "addavg_cold"), ("add_ms_p95_cold", "add95_cold"), ("judge_ms_mean_cold", "judge_cold"),
    ("read_ms_p50", "list50"), ("read_ms_p95", "list95"), ("search_ms_p50", "srch50"),
    ("search_ms_p95", "srch95"), ("nearest_ms_p95", "near95"), ("read_heaviest_ms", "listmax"),
    ("rss_mb", "rss_MiB"), ("rss_peak_mb", "peak_MiB"), ("bytes_per_memory_rss", "B/mem_rss"),
    ("disk_mb", "disk_MiB"), ("bytes_per_memory_disk", "B/mem_disk"), ("optimize_seconds", "opt_s"),
)
OPT_COLUMNS = (
    ("size", "size"), ("optimize_seconds", "opt_s"), ("segments_opt", "segs"), ("add_ms_p50_opt", "add50"),
    ("add_ms_mean_opt", "addavg"), ("add_ms_p95_opt", "add95"), ("add_store_ms_mean_opt", "st_avg"),
    ("add_store_ms_p95_opt", "st95"), ("read_ms_p50_opt", "list50"), ("read_ms_p95_opt", "list95"),
    ("search_ms_p50_opt", "srch50"), ("search_ms_p95_opt", "srch95"), ("nearest_ms_p95_opt", "near95"),
    ("disk_mb_opt", "disk_MiB"),
)


def table(results: Sequence[Mapping[str, Any]], columns: Sequence[tuple[str, str]]) -> str:
    def cell(v: Any) -> str:
        if v is None:
            return "-"
        return f"{v:,}" if isinstance(v, int) else f"{v:.2f}" if isinstance(v, float) else str(v)

    rows = [[h for _, h in columns]] + [[cell(r.get(k)) for k, _ in columns] for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sizes", default=",".join(str(s) for s in DEFAULT_SIZES),
                        help="comma-separated store sizes (memories)")
    parser.add_argument("--adds", type=int, default=300, help="new events timed per size")
    parser.add_argument("--reads", type=int, default=300, help="reads timed per size")
    parser.add_argument("--optimize-limit", type=int, default=100_000,
                        help="largest size at which optimize() is run and measured (0: never)")
    parser.add_argument("--keep", action="store_true", help="keep the stores under var/scale/")
    parser.add_argument("--json", metavar="OUT", help="write the results as JSON here")
    parser.add_argument("--judge", choices=("offline", "learned"), default=None,
                        help="the judge of the per-add cost (default: $BENCH_SCALE_JUDGE or offline)")
    parser.add_argument("--server", metavar="URL",
                        help="fill and add through this Qdrant server instead (adds while it indexes, then after)")
    args = parser.parse_args(argv)
    global JUDGE
    JUDGE = args.judge or JUDGE
    sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()]
    if args.server:
        vocab = Vocabulary()
        served = [run_server(args.server, size, vocab, args.adds) for size in sizes]
        if args.json:
            Path(args.json).write_text(orjson.dumps(served, option=orjson.OPT_INDENT_2).decode() + "\n")
        print(f"cores {os.cpu_count()}; times in ms per event; store: Qdrant server {args.server}")
        print(table(served, SERVER_COLUMNS))
        return 0
    results = run(sizes, args.adds, args.reads, args.optimize_limit, args.keep)
    print(f"cores {os.cpu_count()}; times in ms per event or read; store: embedded (qdrant-edge)")
    print(table(results, COLUMNS))
    if any(r.get("optimize_seconds") is not None for r in results):
        print("\nafter optimize() (full consolidation's last step):")
        print(table([r for r in results if r.get("optimize_seconds") is not None], OPT_COLUMNS))
    if args.json:  # first: a long run's figures are kept whatever the summary below makes of them
        Path(args.json).write_text(orjson.dumps(results, option=orjson.OPT_INDENT_2).decode() + "\n")
    base, top = results[0], results[-1]
    if len(results) > 1 and all(base.get(k) for k in ("add_ms_mean", "judge_ms_mean", "add_ms_mean_cold",
                                                        "judge_ms_mean_cold", "add_store_ms_mean")):
        print(f"\nper-add mean {top['size']:,} vs {base['size']:,}: {top['add_ms_mean'] / base['add_ms_mean']:.2f}x "
              f"(store side {top['add_store_ms_mean'] / base['add_store_ms_mean']:.2f}x, judge "
              f"{top['judge_ms_mean'] / base['judge_ms_mean']:.2f}x; with the judge's text memos cleared before "
              f"each add {top['add_ms_mean_cold'] / base['add_ms_mean_cold']:.2f}x, judge "
              f"{top['judge_ms_mean_cold'] / base['judge_ms_mean_cold']:.2f}x); "
              f"worst read p95 {max(r['search_ms_p95'] for r in results):.1f} ms (search), "
              f"{max(r['read_ms_p95'] for r in results):.1f} ms (listing)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
