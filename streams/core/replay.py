"""`dream replay` (with or without synthesis) and `dream export`: files in and out of the store without a broker."""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson

from dreamstream.agents import llm_judge
from dreamstream.schemas.errors import InvalidInput
from dreamstream.schemas.events import InvalidEvent, normalise_time
from dreamstream.schemas.memory import parse_time
from dreamstream.streams.core import synthesis
from dreamstream.streams.core.embedding import shared_embedder
from dreamstream.streams.core.ingest import BatchResult, Incoming, Processor, replay_lines
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


def writable_dead_letters(path: Path, dead_path: Path | None = None) -> Path:
    """Where a replay of `path` writes its bad lines, checked before the first event is stored (the bad lines
    must have somewhere to go): InvalidInput when the folder is missing or not writable."""
    dead_path = dead_path or path.with_name(path.name + ".deadletter.jsonl")
    if dead_path.resolve() == path.resolve():  # the bad lines would replace the file being read
        raise InvalidInput("bad_path", f"--dead-letters {dead_path} is the file being replayed: give another file")
    folder = dead_path.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK) or (dead_path.exists() and not os.access(dead_path,
                                                                                                   os.W_OK)):
        raise InvalidInput("bad_path", f"cannot write dead letters to {dead_path} (no such folder, or not "
                                       "writable): give --dead-letters FILE in a writable folder")
    return dead_path


def replay_file(
    path: Path,
    store: MemoryStore,
    dead_path: Path | None = None,
    batch_size: int = 256,
    processor: Processor | None = None,
    after_batch: Callable[[list[Incoming]], BatchResult | None] | None = None,
    at_end: Callable[[], BatchResult | None] | None = None,
    summary: ReplaySummary | None = None,
    progress: Callable[[int], None] | None = None,
) -> ReplaySummary:
    """Replays a JSONL file through the same Processor the stream uses; `progress(n)` hears of each
    batch of n lines done (the CLI's progress bar).

    `after_batch` (given each batch once processed) and `at_end` let a caller act on the way, in event
    time — replay with synthesis runs the schedule there; what they return counts in the summary.
    """
    if processor is None:
        processor = Processor(store, shared_embedder())
    fallbacks_before = sum(llm_judge.FALLBACKS.values())
    dead_path = writable_dead_letters(path, dead_path)
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
        if progress is not None:
            progress(len(batch))
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
    if fell_back := sum(llm_judge.FALLBACKS.values()) - fallbacks_before:  # the LLM judge failed: say it
        summary.outcomes["llm_judge_fell_back_to_offline"] = fell_back
    summary.decisions = total.decisions
    summary.dead = len(total.dead_letters)
    if total.dead_letters:
        dead_path.write_bytes(b"".join(orjson.dumps(dl) + b"\n" for dl in total.dead_letters))
    else:  # the file says what this run refused: an earlier run's bad lines would read as this one's
        dead_path.unlink(missing_ok=True)
    return summary


def export_rows(store: MemoryStore, user_id: str | None = None) -> list[dict[str, Any]]:
    where = {"user_id": user_id} if user_id is not None else None  # "" is no user, not every user
    rows = [m.export_row() for m in store.scroll(where)]
    rows.sort(key=lambda r: (r["created_at"], r["memory_id"]))
    return rows


def feed(processor: Processor, records: list[synthesis.RunRecord], source: str = "synthesis") -> BatchResult:
    """Retired patterns expired; the runs' pattern events through the same ingest path as every other event."""
    synthesis.apply(processor.store, records)
    items = [Incoming(raw=ev, topic=source) for r in records for ev in r.events]
    return processor.process(items) if items else BatchResult()


# --- replay with synthesis ------------------------------------------------------------------------


@dataclass
class SynthReplaySummary(ReplaySummary):
    """A replay's summary plus what synthesis did along the way."""

    runs: int = 0
    patterns_written: int = 0
    patterns_updated: int = 0
    patterns_retired: int = 0
    patterns_final: int = 0
    synth_seconds: float = 0.0
    grouped_offline: int = 0
    """Runs a configured theme reader gave no usable answer for (DREAM_SYNTHESIS_THEMES=llm)."""

    def describe(self) -> str:
        return super().describe() + (
            f"\nsynthesis: {self.runs} runs in {self.synth_seconds:.1f}s, "
            f"{self.patterns_written} patterns written, {self.patterns_updated} updated, "
            f"{self.patterns_retired} retired, {self.patterns_final} patterns in the store"
            + (f" ({self.grouped_offline} runs grouped offline: the reader failed)" if self.grouped_offline else ""))


def _scan(path: Path) -> tuple[str | None, set[str | None]]:
    """The file's earliest created_at and the projects it names."""
    first: str | None = None
    projects: set[str | None] = set()
    with path.open("rb") as f:
        for line in f:
            try:
                obj = orjson.loads(line)
                stamp = normalise_time(obj.get("created_at"), "created_at")
            except (orjson.JSONDecodeError, InvalidEvent, AttributeError):
                continue
            projects.add(obj.get("project_id") if isinstance(obj.get("project_id"), str) else None)
            first = stamp if first is None or stamp < first else first
    return first, projects


def _event_time(item: Incoming) -> str | None:
    try:
        if item.raw is None:
            return None
        obj = orjson.loads(item.raw) if not isinstance(item.raw, dict) else item.raw
        return normalise_time(obj.get("created_at"), "created_at")
    except (orjson.JSONDecodeError, InvalidEvent, AttributeError, TypeError):
        return None


def replay_with_synthesis(
    path: Path,
    store: MemoryStore,
    state: synthesis.SynthesisState,
    embed: Any = None,
    processor: Processor | None = None,
    batch_size: int = 256,
    cadence_days: float = synthesis.CADENCE_DAYS,
    dead_path: Path | None = None,
    write_text: synthesis.WriteText | None = None,
    read_themes: synthesis.ReadThemes | None = None,
    progress: Callable[[int], None] | None = None,
) -> SynthReplaySummary:
    """Replays a file with synthesis on from its first event, on the weekly schedule in event time.

    After each batch every user whose cadence elapsed (relative to the latest created_at seen) is
    synthesised; once more, for everyone, at the end. Patterns go through `Processor.process`.
    """
    if embed is None:
        embed = shared_embedder()
    processor = processor or Processor(store, embed)
    summary = SynthReplaySummary()
    first, projects = _scan(path)
    if first is not None:
        boundary = synthesis._ts_str(parse_time(first) - timedelta(seconds=1))
        for project in projects or {None}:
            settings_ = state.project(project)
            if settings_ is None or str(settings_.get("boundary", "")) > boundary:
                synthesis.enable(state, project, boundary)
    latest: str | None = None

    def synth(now: str, force: bool) -> BatchResult:
        t0 = time.perf_counter()
        records = synthesis.run_due(store, embed, now, state, force=force, cadence_days=cadence_days,
                                 write_text=write_text, read_themes=read_themes, save=False)
        ran = [r for r in records if r.ran]
        summary.runs += len(ran)
        summary.patterns_written += sum(r.patterns_written for r in ran)
        summary.patterns_updated += sum(r.patterns_updated for r in ran)
        summary.patterns_retired += sum(r.patterns_retired for r in ran)
        summary.grouped_offline += sum(r.theme_fallback for r in ran)
        result = feed(processor, ran, source=f"{path}#synthesis")
        if ran:
            state.save()  # only once the patterns are stored (synthesis.run_due)
        summary.synth_seconds += time.perf_counter() - t0
        return result

    def after_batch(batch: list[Incoming]) -> BatchResult | None:
        nonlocal latest
        for item in batch:
            stamp = _event_time(item)
            if stamp is not None and (latest is None or stamp > latest):
                latest = stamp
        return synth(latest, force=False) if latest is not None else None

    def at_end() -> BatchResult | None:
        return synth(latest, force=True) if latest is not None else None

    replay_file(path, store, dead_path=dead_path, batch_size=batch_size, processor=processor,
                after_batch=after_batch, at_end=at_end, summary=summary, progress=progress)
    summary.stored = summary.outcomes["stored"]
    summary.patterns_final = store.count({"kind": "pattern", "status": "active"})
    return summary
