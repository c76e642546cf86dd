"""Synthesis commands of `dream`: `synthesis enable|disable|status` and `synthesize` (offline, on a store).

Command bodies import the services they use (see cli/main.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import click

from dreamstream.streams.cli.common import open_configured_store, require_store, settings, store_option


def state_for(store_dir: str | None) -> Any:
    """The offline synthesis state of a store (the worker keeps its own in Kafka tables); the store must exist,
    so a mistyped --store is an error, not a new folder with settings no store will read."""
    from dreamstream.streams.core import synthesis as runner

    require_store(store_dir)
    directory = store_dir or settings.store_dir
    return runner.SynthesisState.load(runner.state_path(directory, server=bool(settings.qdrant_url)))


def grouping_line() -> str:
    """Who will group this store's patterns (as this shell is configured; a worker has its own environment),
    and what that is worth: measured, the offline grouping holds on text it was not tuned on about half the
    time (80 of 146 patterns, three corpus splits), a capable model's reading about nine times in ten."""
    from dreamstream.streams.core.judges import check_settings

    check_settings(settings)  # DREAM_SYNTHESIS_THEMES=llm without an endpoint is the one-line error a run gives
    if settings.synthesis_themes.strip().lower() == "llm":
        return f"grouping: the LLM theme reader ({settings.llm_model} at {settings.llm_url})"
    return ("grouping: offline (about half of its patterns held on text it was not tuned on; "
            "DREAM_SYNTHESIS_THEMES=llm lets a model group: 9 in 10 with a capable one)")


@click.command()
@click.argument("action", type=click.Choice(["enable", "disable", "status"]))
@click.option("--project", "project", default=None, help="Project id (default: memories without a project).")
@click.option("--boundary", "boundary", default=None,
           help="ISO time; only memories created after it are evidence (default: now).")
@store_option
@click.option("--json", "as_json", is_flag=True, default=False, help="One JSON object instead of lines.")
def synthesis(action: str, project: str | None, boundary: str | None,
                    store_dir: str | None, as_json: bool) -> None:
    """Turn synthesis on or off for a project (off by default), or show the settings."""
    from dreamstream.streams.core import synthesis as runner
    from dreamstream.streams.store.edge import lock_holder

    grouping = grouping_line()  # a misconfigured reader fails here, before anything is changed
    state = state_for(store_dir)
    holder = None if settings.qdrant_url else lock_holder(store_dir or settings.store_dir)
    if holder:  # its settings live in the worker's tables: this file would say "enabled" and change nothing
        raise click.ClickException(
            f"store {store_dir or settings.store_dir} is in use by {holder}: the worker keeps its own synthesis "
            "settings; use `dream control synthesis.enable [project=P]` (or synthesis.disable, settings.show)")
    key = project or runner.DEFAULT_PROJECT
    try:
        _settle(action, state, project, boundary, key, grouping, as_json)
    except OSError as exc:  # a read-only or full store: one line, as every other command says it
        raise click.ClickException(f"the store cannot write its synthesis settings ({state.path}): "
                                   f"{exc.strerror or exc}") from exc


def _settle(action: str, state: Any, project: str | None, boundary: str | None, key: str, grouping: str,
            as_json: bool) -> None:
    """`synthesis enable|disable|status` once the store is known to be this command's."""
    from dreamstream.streams.core import synthesis as runner

    if action == "enable":
        s = runner.enable(state, project, boundary)
        if as_json:
            click.echo(json.dumps({"project": key, **s, "grouping": grouping}, indent=2, sort_keys=True))
            return
        click.echo(f"synthesis enabled for {key}: evidence after {s['boundary']}")
        click.echo(grouping)
    elif action == "disable":
        s = runner.disable(state, project)
        if as_json:
            click.echo(json.dumps({"project": key, **s}, indent=2, sort_keys=True))
            return
        click.echo(f"synthesis disabled for {key}")
    elif as_json:
        click.echo(json.dumps({"projects": state.projects, "users_synthesised": len(state.users),
                               "state": str(state.path), "grouping": grouping}, indent=2, sort_keys=True))
    else:
        if not state.projects:
            click.echo("synthesis is off for every project")
        for name, s in sorted(state.projects.items()):
            click.echo(f"{name}: {'enabled' if s.get('enabled') else 'disabled'}, boundary {s.get('boundary')}")
        click.echo(f"{len(state.users)} users synthesised; state in {state.path}")
        click.echo(grouping)


@click.command()
@store_option
@click.option("--user", "user", default=None, help="Only this user.")
@click.option("--all", "all_users", is_flag=True, default=False, help="Every user.")
@click.option("--now", "now", is_flag=True, default=False, help="Run at once, ignoring the weekly cadence.")
@click.option("--json", "as_json", is_flag=True, default=False, help="One JSON object (its runs) instead of lines.")
def synthesize(store_dir: str | None, user: str | None, all_users: bool,
                     now: bool, as_json: bool) -> None:
    """Synthesise patterns for one user or all users (gates: enabled project, 20+ memories, cadence)."""
    if bool(user) == all_users:
        raise click.UsageError("give exactly one of --user U or --all")
    from dreamstream.streams.cli.consolidate import finish_interrupted
    from dreamstream.streams.core import synthesis as runner
    from dreamstream.streams.core.embedding import shared_embedder
    from dreamstream.streams.core.ingest import Processor
    from dreamstream.streams.core.judges import pattern_writer_from_settings, theme_reader_from_settings
    from dreamstream.streams.core.replay import feed

    store, state = open_configured_store(store_dir), state_for(store_dir)
    embed = shared_embedder()
    try:
        asyncio.run(finish_interrupted(store, store_dir))  # a pass or undo a crash left half-applied first
        records = runner.run_due(store, embed, runner._now(), state, force=now,
                                 users=[user] if user else None,
                                 write_text=pattern_writer_from_settings(settings),
                                 read_themes=theme_reader_from_settings(settings), save=False)
        if user and not records:
            records = [runner.RunRecord(user_id=user, reason="no memories")]
        feed(Processor(store, embed), records)
        store.flush()
        if any(r.ran for r in records):
            state.save()  # only once the patterns are stored: a failed run is run again, not skipped
        if as_json:
            click.echo(json.dumps({"runs": [dataclasses.asdict(r) for r in records]}, indent=2, sort_keys=True,
                                  default=str))
        for r in records if not as_json else []:
            click.echo(r.describe())
    finally:
        store.close()
