"""`dream replay` and `dream export`: files in and out of the store without a broker."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from dreamstream.streams.pipeline import BatchResult, Incoming, Processor, replay_lines
from dreamstream.streams.store import MemoryStore


@dataclass
class ReplaySummary:
    lines: int = 0
    stored: int = 0
    dead: int = 0
    dead_path: Path | None = None
    seconds: float = 0.0
    outcomes: Counter[str] = field(default_factory=Counter)
    decisions: Counter[str] = field(default_factory=Counter)

    def describe(self) -> str:
        rate = self.lines / self.seconds if self.seconds else 0.0
        parts = [f"replayed {self.lines} events in {self.seconds:.1f}s ({rate:.0f}/s): stored {self.stored}"]
        if self.decisions:
            parts.append("decisions: " + ", ".join(f"{k}={v}" for k, v in sorted(self.decisions.items())))
        other = {k: v for k, v in self.outcomes.items() if k not in ("stored",) and not k.startswith("dead")}
        if other:
            parts.append("other: " + ", ".join(f"{k}={v}" for k, v in sorted(other.items())))
        if self.dead:
            where = f" written to {self.dead_path}" if self.dead_path else ""
            parts.append(f"{self.dead} bad lines{where}")
        return "\n".join(parts)


def replay_file(
    path: Path,
    store: MemoryStore,
    dead_path: Path | None = None,
    batch_size: int = 256,
    processor: Processor | None = None,
    after_batch: Callable[[list[Incoming]], BatchResult | None] | None = None,
    at_end: Callable[[], BatchResult | None] | None = None,
    summary: ReplaySummary | None = None,
) -> ReplaySummary:
    """Replays a JSONL file through the same Processor the stream uses.

    `after_batch` (given each batch once processed) and `at_end` let a caller act on the way, in event
    time — replay with synthesis runs the schedule there; what they return counts in the summary.
    """
    if processor is None:
        from dreamstream.streams.embedding import shared_embedder

        processor = Processor(store, shared_embedder())
    dead_path = dead_path or path.with_name(path.name + ".deadletter.jsonl")
    summary = summary or ReplaySummary()
    summary.dead_path = dead_path
    start = time.perf_counter()
    total = BatchResult()
    batch: list[Incoming] = []

    def run() -> None:
        total.extend(processor.process(batch))
        extra = after_batch(batch) if after_batch else None
        if extra is not None:
            total.extend(extra)
        batch.clear()

    with path.open("rb") as f:
        for item in replay_lines(f, source=str(path)):
            batch.append(item)
            summary.lines += 1
            if len(batch) >= batch_size:
                run()
    if batch:
        run()
    extra = at_end() if at_end else None
    if extra is not None:
        total.extend(extra)
    store.flush()
    summary.seconds = time.perf_counter() - start
    summary.stored = total.outcomes["stored"] + total.outcomes["pattern_stored"]
    summary.outcomes = total.outcomes
    summary.decisions = total.decisions
    summary.dead = len(total.dead_letters)
    if total.dead_letters:
        dead_path.write_bytes(b"".join(orjson.dumps(dl) + b"\n" for dl in total.dead_letters))
    return summary


def export_rows(store: MemoryStore, user_id: str | None = None) -> list[dict[str, Any]]:
    where = {"user_id": user_id} if user_id else None
    rows = [m.export_row() for m in store.scroll(where)]
    rows.sort(key=lambda r: (r["created_at"], r["memory_id"]))
    return rows
