"""Offline synthesis benchmark: run agents/synthesis.py over a case and score the patterns.

    .venv/bin/python bench/synthesis_offline.py CASE_DIR [--gate all|eligible] [--keep-all] [--state OUT]

Embeds every event text once with the packaged all-MiniLM-L6-v2 (cached as .npy under
.cache/bench/, keyed by the texts), builds one `Memory` per event, simulates the merge/supersede
engine by dropping memories labelled superseded/merged (unless --keep-all), runs `synthesize` per
user, writes the final-state export (FORMAT.md) and prints shared/bench/score.py's figures.
`--gate eligible` applies MIN_MEMORIES to the user-scoped evidence instead of all the user's facts.
`--llm-answers DIR` groups with the LLM theme reader (`DREAM_SYNTHESIS_THEMES=llm`) through the real chat
client against `bench/llm_files.py`'s endpoint on DIR: a first run writes the prompts, a reader answers
them, a second run scores the answers (users left unanswered are grouped offline, and counted).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from dreamstream.agents import synthesis  # noqa: E402
from dreamstream.schemas.memory import (
    Memory,  # noqa: E402
    )

REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / ".cache" / "bench"
SCORE = Path("/work/shared/bench/score.py")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


class Model:
    """The packaged model on CPU at 2 threads (the machine is shared), with a text -> vector memo."""

    def __init__(self) -> None:
        from dreamstream.streams.core.embedding import Embedder

        self.model = Embedder(threads=2)
        self.calls = 0
        self.texts = 0

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        self.texts += len(texts)
        return self.model.encode_uncached(list(texts))


def cached_vectors(texts: list[str], model: Model) -> dict[str, np.ndarray]:
    """Vectors for the distinct texts, from .cache/bench/synthesis_<hash>.npy when present."""
    unique = sorted(set(texts))
    digest = hashlib.sha1("\n".join(unique).encode()).hexdigest()[:16]
    path = CACHE / f"synthesis_{digest}.npy"
    if path.exists():
        vecs = np.load(path)
    else:
        vecs = model(unique)
        CACHE.mkdir(parents=True, exist_ok=True)
        np.save(path, vecs)
    return dict(zip(unique, vecs, strict=True))


def build_memories(events: list[dict[str, Any]], labels: dict[str, dict[str, Any]],
                   vectors: dict[str, np.ndarray], keep_all: bool) -> dict[str, list[Memory]]:
    by_user: dict[str, list[Memory]] = defaultdict(list)
    for e in events:
        expect = labels.get(e["memory_id"], {}).get("expect", "active")
        status = "active" if keep_all or expect == "active" else expect
        by_user[e["user_id"]].append(Memory(
            memory_id=e["memory_id"], user_id=e["user_id"], text=e["text"],
            created_at=e["created_at"], updated_at=e["created_at"], status=status,
            app_id=e.get("app_id"), agent_id=e.get("agent_id"), run_id=e.get("run_id"),
            project_id=e.get("project_id"), metadata=dict(e.get("metadata") or {}),
            event_id=e.get("event_id"), vector=vectors[e["text"]],
        ))
    return by_user


def scheduled(mems: list[Memory], embed: Model, read_themes: Any = None,
              cadence_days: float | None = None) -> list[Memory]:
    """One user's patterns after weekly runs in event time (the runner's own `_run`), plus a final run.

    Statuses are the final ones throughout (labels or --statuses), so this isolates what running
    early, on part of the evidence, does to the patterns that stay."""
    from datetime import timedelta

    from dreamstream.streams.core import synthesis as runner

    ordered = sorted(mems, key=lambda m: (m.created_at, m.memory_id))
    state = runner.SynthesisState(path=None, projects={runner.DEFAULT_PROJECT: {"enabled": True, "boundary": None}},
                                  users={})
    patterns: dict[str, Memory] = {}

    def run(now: str, force: bool) -> None:
        seen = [m for m in ordered if m.created_at <= now]
        record = runner.run_memories(mems[0].user_id, seen + list(patterns.values()), embed, now, state, force,
                                     cadence_days or runner.CADENCE_DAYS, read_themes=read_themes)
        for ev in record.events:
            patterns[ev["memory_id"]] = Memory(
                memory_id=ev["memory_id"], user_id=ev["user_id"], text=ev["text"], created_at=now, updated_at=now,
                kind="pattern", sources=list(ev["sources"]), metadata=dict(ev["metadata"]))
        for pid in record.retired:
            patterns[pid] = replace(patterns[pid], status="expired")

    for m in ordered:
        run(m.created_at, False)
    if ordered:
        last = synthesis.parse_time(ordered[-1].created_at) + timedelta(seconds=1)
        run(last.isoformat().replace("+00:00", "Z"), True)
    return sorted(patterns.values(), key=lambda p: p.memory_id)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("case", type=Path)
    ap.add_argument("--gate", choices=("all", "eligible"), default="all")
    ap.add_argument("--keep-all", action="store_true", help="treat every memory as active")
    ap.add_argument("--statuses", type=Path, default=None,
                    help="take statuses from an export (e.g. make bench-quality's state) instead of the labels: "
                         "the merge/supersede engine's real output, mistakes included")
    ap.add_argument("--state", type=Path, default=None)
    ap.add_argument("--show", action="store_true", help="print each pattern")
    ap.add_argument("--llm-answers", type=Path, default=None,
                    help="group with the LLM theme reader, answered from this folder (bench/llm_files.py)")
    ap.add_argument("--cadence-days", type=float, default=None, help="with --schedule: days between runs (7)")
    ap.add_argument("--users", nargs="*", help="only these users")
    ap.add_argument("--schedule", action="store_true",
                    help="run as `dream replay --synthesis` does: weekly in event time over the memories created "
                         "so far, patterns kept or retired between runs, once more at the end")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    events = read_jsonl(args.case / "events.jsonl")
    labels_path = args.case / "labels.jsonl"
    labels = {r["memory_id"]: r for r in read_jsonl(labels_path)} if labels_path.exists() else {}
    if args.statuses is not None:
        labels = {r["memory_id"]: {"expect": r.get("status", "active")} for r in read_jsonl(args.statuses)
                  if r.get("kind", "fact") == "fact"}
    model = Model()
    t_load = time.perf_counter()
    vectors = cached_vectors([e["text"] for e in events], model)
    t_embed = time.perf_counter()
    by_user = build_memories(events, labels, vectors, args.keep_all)
    if args.users:
        by_user = {u: m for u, m in by_user.items() if u in set(args.users)}

    rows: list[dict[str, Any]] = []
    n_patterns = 0
    users_synth = 0
    reader = None
    fallbacks = 0
    if args.llm_answers is not None:
        import llm_files  # bench/llm_files.py

        from dreamstream.agents.theme_reader import LLMThemeReader
        from dreamstream.streams.core.llm_client import ChatEndpoint

        server = llm_files.serve(args.llm_answers)
        reader = LLMThemeReader(ChatEndpoint(f"http://127.0.0.1:{server.server_address[1]}/v1", "files").ask_json)
    if args.schedule:
        for user_id in sorted(by_user):
            rows.extend(m.export_row() for m in by_user[user_id])
            found = scheduled(by_user[user_id], model, reader, args.cadence_days)
            users_synth += bool(found)
            n_patterns += len(found)
            rows.extend(p.export_row() for p in found)
            if args.show:
                for p in found:
                    print(f"{user_id} {p.memory_id} [{len(p.sources)}] {p.status} {p.text}")
        by_user = {}
    for user_id in sorted(by_user):
        mems = by_user[user_id]
        rows.extend(m.export_row() for m in mems)
        evidence = synthesis.eligible(mems, None)
        count = len(evidence) if args.gate == "eligible" else synthesis.gate_count(mems)
        if count < synthesis.MIN_MEMORIES:
            continue
        users_synth += 1
        read = synthesis.read_themes(evidence, model, reader) if reader is not None else None
        fallbacks += reader is not None and read is None
        themes = synthesis.match_existing(read if read is not None else synthesis.find_themes(evidence, model), [])
        for th in themes:
            n_patterns += 1
            rows.append({"memory_id": th.pattern_id, "user_id": th.user_id, "kind": "pattern",
                         "status": "active", "superseded_by": None, "merged_into": None,
                         "sources": list(th.memory_ids), "text": th.text})
            if args.show:
                print(f"{user_id} {th.pattern_id} [{len(th.memory_ids)}] {th.text}")
    t_synth = time.perf_counter()

    state = args.state or CACHE / f"synthesis_state_{args.case.resolve().name}.jsonl"
    state.parent.mkdir(parents=True, exist_ok=True)
    with state.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    out = subprocess.run([sys.executable, str(SCORE), str(args.case), str(state)],
                         capture_output=True, text=True, check=True).stdout
    print(out, end="")
    print(f"users synthesized {users_synth}/{len(by_user)}  patterns {n_patterns}  gate {args.gate}"
          + (f"  grouped by the reader: {users_synth - fallbacks}, offline (no answer yet): {fallbacks}"
             if reader is not None else ""))
    print(f"time: model load {t_load - t0:.1f}s  embed {t_embed - t_load:.1f}s  "
          f"synthesis {t_synth - t_embed:.1f}s  total {time.perf_counter() - t0:.1f}s  "
          f"(extra embed calls {model.calls}, texts {model.texts})")
    print(f"state: {state}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
