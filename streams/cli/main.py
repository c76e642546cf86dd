"""The `dream` command: dreamstream's offline commands, and `dream worker` for the stream processor.

A plain click group: nothing here builds the Faust app, and each command body imports the services it
uses, so `dream --help` loads none of them and starts fast. Every read command needs a user; every
command that touches the store takes `--store DIR` for the embedded store (or uses QDRANT_URL when set).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import click
import orjson

from dreamstream.schemas.errors import DreamError
from dreamstream.streams.cli.common import (
    STORE_MARKER,
    api_client,
    api_errors,
    mode_options,
    open_configured_store,
    print_rows,
    progress_bar,
    run_async,
    settings,
    store_option,
    url_option,
    worker_url,
)
from dreamstream.streams.cli.consolidate import consolidate, provenance, schedule, stats
from dreamstream.streams.cli.control import control
from dreamstream.streams.cli.mcp import mcp
from dreamstream.streams.cli.synthesis import state_for, synthesis, synthesize


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(version("dreamstream"), prog_name="dreamstream")
@click.option("--debug", is_flag=True, default=False, help="Show the full traceback of an unexpected error.")
def dream(debug: bool) -> None:
    """dreamstream: keeps every user's long-term AI memory coherent (merge, supersede, synthesize)."""


def main() -> None:
    """The `dream` entry point: errors as one line (a traceback only with --debug), a closed pipe
    (`| head`) quietly."""
    try:
        code = dream.main(prog_name="dream", standalone_mode=False)
        sys.exit(code if isinstance(code, int) and not isinstance(code, bool) else 0)  # --help, --version, ctx.exit
    except click.UsageError as exc:  # click's own form is three lines (usage, hint, error): one, with the hint
        where = exc.ctx.command_path if exc.ctx is not None else "dream"
        click.echo(f"Error: {' '.join(exc.format_message().split())} (see `{where} -h`)", err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        click.echo(f"Error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(1)
    except DreamError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(1)
    except Exception as exc:
        if "--debug" in sys.argv[1:]:
            raise
        click.echo(f"Error: {type(exc).__name__}: {exc} (run `dream --debug ...` for the traceback)", err=True)
        sys.exit(1)
    except BrokenPipeError:
        # Python's documented way out: point stdout at devnull so the interpreter's final flush is silent.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)


@dream.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def worker(args: tuple[str, ...]) -> None:
    """Run the stream processor (Faust's worker; its options pass through, e.g. `-l info`)."""
    from dreamstream.streams.worker.main import run  # the Faust app is built only for this command

    run(list(args))


@dream.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@store_option
@click.option("--dead-letters", "dead_path", default=None, type=click.Path(path_type=Path),
           help="Where bad lines go (default: FILE.deadletter.jsonl).")
@click.option("--batch-size", default=256, show_default=True, type=click.IntRange(1, 10_000), help="Events per batch.")
@click.option("--synthesis", is_flag=True, default=False,
           help="Synthesis on from the file's first event, run on its schedule in event time and once at the end.")
def replay(file: Path, store_dir: str | None, dead_path: Path | None,
                 batch_size: int, synthesis: bool) -> None:
    """Push a JSONL file of events through the agents in process, no broker, into the store."""
    from dreamstream.streams.cli.consolidate import finish_interrupted
    from dreamstream.streams.core.ingest import tune_gc
    from dreamstream.streams.core.judges import pattern_writer_from_settings, theme_reader_from_settings
    from dreamstream.streams.core.replay import ReplaySummary, replay_file, replay_with_synthesis, writable_dead_letters

    tune_gc()
    writable_dead_letters(file, dead_path)  # before the store is made or anything stored
    lines = sum(1 for line in file.open("rb") if line.strip())
    if not lines:
        raise click.ClickException(f"{file} has no lines: nothing to replay (no store made)")
    folder = Path(store_dir or settings.store_dir)
    made = not settings.qdrant_url and not (folder / STORE_MARKER).exists()
    existed = folder.is_dir()  # an empty folder given for it stays, emptied again
    store = open_configured_store(store_dir, create=True)
    summary: ReplaySummary | None = None
    try:
        asyncio.run(finish_interrupted(store, store_dir))  # a pass or undo a crash left half-applied first
        with progress_bar(lines, "Replaying events") as bar:
            if synthesis:
                summary = replay_with_synthesis(file, store, state_for(store_dir), batch_size=batch_size,
                                                dead_path=dead_path, progress=bar.update,
                                                write_text=pattern_writer_from_settings(settings),
                                                read_themes=theme_reader_from_settings(settings))
            else:
                summary = replay_file(file, store, dead_path=dead_path, batch_size=batch_size, progress=bar.update)
    finally:
        try:
            empty = made and store.count() == 0
        except Exception:  # the store failed: leave what is there, the error says why
            empty = False
        store.close()
        if empty and (summary is None or summary.lines == summary.dead):  # failed: leave no empty store behind
            for entry in folder.iterdir() if existed else [folder]:
                if entry.is_dir():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
    assert summary is not None  # the try above returned one, or raised
    click.echo(summary.describe())
    if summary.lines and summary.dead == summary.lines:
        raise click.ClickException(f"none of the {summary.lines} lines of {file} is a memory event (all are in "
                                   f"{summary.dead_path}): dream replay reads JSON lines of events (README, Events)")


@dream.command()
@store_option
def compact(store_dir: str | None) -> None:
    """Rewrite an embedded store without what was deleted: the engine keeps a deleted memory's words in its
    files until then (an erase and a --hard-delete pass do this themselves; a single hard delete does not)."""
    from dreamstream.streams.core import changes

    store = open_configured_store(store_dir)
    try:
        if settings.qdrant_url:
            raise click.ClickException("a Qdrant server compacts on its own (its optimizer); nothing to do here")
        before = store.count()
        if not changes.compact(store):
            raise click.ClickException("not enough free disk for the store's copy: free some space and run it again")
        click.echo(f"compacted {store_dir or settings.store_dir}: {before} memories kept, deleted ones' words gone")
    finally:
        store.close()


@dream.command()
@store_option
@click.option("--out", "out", default=None, type=click.Path(path_type=Path),
                                  help="Output file (default: stdout).")
@click.option("--user", "user", default=None, help="Only this user's memories.")
def export(store_dir: str | None, out: Path | None, user: str | None) -> None:
    """Every memory as JSON lines, in the final-state format of the benchmark (FORMAT.md)."""
    from dreamstream.streams.core.replay import export_rows

    if user is not None and not user.strip():
        raise click.UsageError("--user is empty (an unset variable?): name a user, or leave --user out for all")
    if out is not None and not out.parent.is_dir():
        raise click.UsageError(f"--out {out}: no folder {out.parent}")
    if out is not None and out.is_dir():
        raise click.UsageError(f"--out {out} is a folder: name the file to write")
    store = open_configured_store(store_dir)
    rows = export_rows(store, user)
    data = b"".join(orjson.dumps(r) + b"\n" for r in rows)
    if out is None:
        sys.stdout.buffer.write(data)
    else:
        out.write_bytes(data)
        click.echo(f"exported {len(rows)} memories to {out}", err=True)
    store.close()


@dream.command()
@store_option
@url_option
@mode_options
def get(store_dir: str | None, api_url: str | None, user: str, latest_only: bool, include_merged: bool,
        as_json: bool) -> None:
    """A user's memories: active + history + patterns; --latest-only or --include-merged. Beside a
    running worker it reads through the worker's API."""
    from dreamstream.streams.core import reads

    url = worker_url(store_dir, api_url)
    if url is not None:
        rows: list[dict[str, Any]] = []
        with api_errors(), api_client(url) as api:
            cursor = None
            while True:
                page = api.list(user, latest_only=latest_only, include_merged=include_merged, cursor=cursor)
                rows += [m.raw for m in page.memories]
                if not (cursor := page.next_cursor):
                    break
        print_rows(rows, as_json)
        return
    store = open_configured_store(store_dir)
    print_rows(reads.get(store, user, reads.mode_from_flags(latest_only, include_merged)), as_json)
    store.close()


@dream.command()
@click.argument("text")
@store_option
@url_option
@mode_options
@click.option("--limit", default=10, show_default=True, type=click.IntRange(1, 1000), help="How many results.")
def search(text: str, store_dir: str | None, api_url: str | None, user: str, latest_only: bool,
           include_merged: bool, as_json: bool, limit: int) -> None:
    """Nearest memories of one user to TEXT, in the same read modes as `get` (through a running
    worker's API when one holds the store)."""
    from dreamstream.streams.core import reads
    from dreamstream.streams.core.consolidation import record_access
    from dreamstream.streams.core.embedding import shared_embedder

    if not text.strip():
        raise click.UsageError("TEXT is empty: search for something, or list with `dream get`")
    url = worker_url(store_dir, api_url)
    if url is not None:
        with api_errors(), api_client(url) as api:  # the worker records the access itself
            page = api.search(user, text, latest_only=latest_only, include_merged=include_merged, limit=limit)
        print_rows([m.raw for m in page.memories], as_json)
        return
    store = open_configured_store(store_dir)
    mode = reads.mode_from_flags(latest_only, include_merged)
    rows = reads.search(store, shared_embedder(), user, text, mode, limit)
    print_rows(rows, as_json)
    if rows:  # a search is a recall: it feeds decay and co-access (dream consolidate --light)
        record_access(store, [r["memory_id"] for r in rows])
    store.close()


@dream.command()
@click.argument("decision_id")
@store_option
@url_option
@click.option("--user", "user", default=None,
              help="The decision's user (needed through a worker's API; on a store, checked when given).")
@run_async
async def undo(decision_id: str, store_dir: str | None, api_url: str | None, user: str | None) -> None:
    """Revert one decision: both memories get their earlier status and links back (crash-safe; its
    status events go to Kafka, or to the outbox file beside the store when no broker answers).
    Beside a running worker it goes through the worker's API, which takes one user's decisions only."""
    from dreamstream.streams.cli.consolidate import finish_interrupted, publish_events
    from dreamstream.streams.core import changes
    from dreamstream.streams.core.undo import undo_decision

    url = worker_url(store_dir, api_url)
    if url is not None:
        if not user:
            raise click.UsageError("a worker holds the store and its API undoes one user's decisions: add --user USER")
        with api_errors(), api_client(url) as api:
            print_undone(decision_id, api.undo(decision_id, user))
        return
    store = open_configured_store(store_dir)
    try:
        await finish_interrupted(store, store_dir)
        try:
            events = undo_decision(store, decision_id, user=user).events
        except (KeyError, ValueError) as exc:
            raise click.ClickException(str(exc.args[0])) from exc
        print_undone(decision_id, events)
        note = await publish_events(events, store_dir)
        if note:
            click.echo(note, err=True)
        changes.sent(store, events)
    finally:
        store.close()


def print_undone(decision_id: str, events: list[dict[str, Any]]) -> None:
    """One line per memory the undo changed; a decision that changed no status (a review item, an
    update a user made) still says what became of it."""
    for ev in events:
        click.echo(f"{ev['memory_id']}: {ev['from_status']} -> {ev['to_status']} (undo of {decision_id})")
    if not events:
        click.echo(f"{decision_id}: undone (no status changed: a review item dismissed, or its memories changed since)")


for command in (consolidate, schedule, stats, provenance, control, synthesis, synthesize, mcp):
    dream.add_command(command)
