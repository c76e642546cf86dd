"""Synthesis commands of `dream`: `synthesis enable|disable|status`, `synthesize`; replay with synthesis.

Registered on the Faust app by importing this module (streams/cli.py does, at its bottom).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import click
import orjson
from faust.cli import AppCommand, argument, option

from dreamstream.streams import synthesis_runner as runner
from dreamstream.streams.app import app, settings
from dreamstream.streams.judges import pattern_writer_from_settings
from dreamstream.streams.pipeline import BatchResult, Incoming, Processor
from dreamstream.streams.replay import ReplaySummary, replay_file
from dreamstream.streams.store import MemoryStore

_store_option = option("--store", "store_dir", default=None, help="Embedded store folder (default: $DREAM_STORE).")


def _open(store_dir: str | None) -> tuple[Any, runner.SynthesisState]:
    from dreamstream.streams.store import open_store

    store = open_store(store_dir or settings.store_dir, settings.qdrant_url, settings.qdrant_api_key)
    return store, state_for(store_dir)


def state_for(store_dir: str | None) -> runner.SynthesisState:
    """The offline synthesis state of a store (the worker keeps its own in Kafka tables)."""
    directory = store_dir or settings.store_dir
    return runner.SynthesisState.load(runner.state_path(directory, server=bool(settings.qdrant_url)))


def feed(processor: Processor, records: list[runner.RunRecord], source: str = "synthesis") -> BatchResult:
    """Retired patterns expired; the runs' pattern events through the same ingest path as every other event."""
    runner.apply(processor.store, records)
    items = [Incoming(raw=ev, topic=source) for r in records for ev in r.events]
    return processor.process(items) if items else BatchResult()


@app.command(
    argument("action", type=click.Choice(["enable", "disable", "status"])),
    option("--project", "project", default=None, help="Project id (default: memories without a project)."),
    option("--boundary", "boundary", default=None,
           help="ISO time; only memories created after it are evidence (default: now)."),
    _store_option,
)
async def synthesis(self: AppCommand, action: str, project: str | None, boundary: str | None,
                    store_dir: str | None) -> None:
    """Turn synthesis on or off for a project (off by default), or show the settings."""
    state = state_for(store_dir)
    key = project or runner.DEFAULT_PROJECT
    if action == "enable":
        s = runner.enable(state, project, boundary)
        click.echo(f"synthesis enabled for {key}: evidence after {s['boundary']}")
    elif action == "disable":
        runner.disable(state, project)
        click.echo(f"synthesis disabled for {key}")
    else:
        if not state.projects:
            click.echo("synthesis is off for every project")
        for name, s in sorted(state.projects.items()):
            click.echo(f"{name}: {'enabled' if s.get('enabled') else 'disabled'}, boundary {s.get('boundary')}")
        click.echo(f"{len(state.users)} users synthesised; state in {state.path}")


@app.command(
    _store_option,
    option("--user", "user", default=None, help="Only this user."),
    option("--all", "all_users", is_flag=True, default=False, help="Every user."),
    option("--now", "now", is_flag=True, default=False, help="Run at once, ignoring the weekly cadence."),
)
async def synthesize(self: AppCommand, store_dir: str | None, user: str | None, all_users: bool,
                     now: bool) -> None:
    """Synthesise patterns for one user or all users (gates: enabled project, 20+ memories, cadence)."""
    from dreamstream.streams.embedding import shared_embedder

    if bool(user) == all_users:
        raise click.UsageError("give exactly one of --user U or --all")
    store, state = _open(store_dir)
    embed = shared_embedder()
    try:
        records = runner.run_due(store, embed, runner._now(), state, force=now,
                                 users=[user] if user else None,
                                 write_text=pattern_writer_from_settings(settings))
        if user and not records:
            records = [runner.RunRecord(user_id=user, reason="no memories")]
        feed(Processor(store, embed), records)
        store.flush()
        for r in records:
            click.echo(r.describe())
    finally:
        store.close()


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

    def describe(self) -> str:
        return super().describe() + (
            f"\nsynthesis: {self.runs} runs in {self.synth_seconds:.1f}s, "
            f"{self.patterns_written} patterns written, {self.patterns_updated} updated, "
            f"{self.patterns_retired} retired, {self.patterns_final} patterns in the store")


def _scan(path: Path) -> tuple[str | None, set[str | None]]:
    """The file's earliest created_at and the projects it names."""
    from dreamstream.schemas.events import InvalidEvent, normalise_time

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
    from dreamstream.schemas.events import InvalidEvent, normalise_time

    try:
        obj = orjson.loads(item.raw) if not isinstance(item.raw, dict) else item.raw
        return normalise_time(obj.get("created_at"), "created_at")
    except (orjson.JSONDecodeError, InvalidEvent, AttributeError, TypeError):
        return None


def replay_with_synthesis(
    path: Path,
    store: MemoryStore,
    state: runner.SynthesisState,
    embed: Any = None,
    processor: Processor | None = None,
    batch_size: int = 256,
    cadence_days: float = runner.CADENCE_DAYS,
    dead_path: Path | None = None,
    write_text: runner.WriteText | None = None,
) -> SynthReplaySummary:
    """Replays a file with synthesis on from its first event, on the weekly schedule in event time.

    After each batch every user whose cadence elapsed (relative to the latest created_at seen) is
    synthesised; once more, for everyone, at the end. Patterns go through `Processor.process`.
    """
    if embed is None:
        from dreamstream.streams.embedding import shared_embedder

        embed = shared_embedder()
    processor = processor or Processor(store, embed)
    summary = SynthReplaySummary()
    first, projects = _scan(path)
    if first is not None:
        boundary = runner._ts_str(runner._parse(first) - timedelta(seconds=1))
        for project in projects or {None}:
            settings_ = state.project(project)
            if settings_ is None or str(settings_.get("boundary", "")) > boundary:
                runner.enable(state, project, boundary)
    latest: str | None = None

    def synth(now: str, force: bool) -> BatchResult:
        t0 = time.perf_counter()
        records = runner.run_due(store, embed, now, state, force=force, cadence_days=cadence_days,
                                 write_text=write_text)
        ran = [r for r in records if r.ran]
        summary.runs += len(ran)
        summary.patterns_written += sum(r.patterns_written for r in ran)
        summary.patterns_updated += sum(r.patterns_updated for r in ran)
        summary.patterns_retired += sum(r.patterns_retired for r in ran)
        result = feed(processor, ran, source=f"{path}#synthesis")
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
                after_batch=after_batch, at_end=at_end, summary=summary)
    summary.stored = summary.outcomes["stored"]
    summary.patterns_final = store.count({"kind": "pattern", "status": "active"})
    return summary
