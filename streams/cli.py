"""The `dream` command: Faust's own CLI (`dream worker`, `dream send`, ...) plus Dream's commands.

Every read command needs a user; every command that touches the store takes `--store DIR` for the
embedded store (or uses QDRANT_URL when set).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
import orjson
from faust.cli import AppCommand, argument, option

from dreamstream.streams import reads
from dreamstream.streams.app import app, settings
from dreamstream.streams.judges import pattern_writer_from_settings

store_option = option("--store", "store_dir", default=None, help="Embedded store folder (default: $DREAM_STORE).")
mode_options = (
    option("--user", "user", required=True, help="The user whose memories to read (required)."),
    option("--latest-only", is_flag=True, default=False, help="Active memories only."),
    option("--include-merged", is_flag=True, default=False, help="Everything, merged and expired too."),
    option("--json", "as_json", is_flag=True, default=False, help="One JSON object per line."),
)


def open_configured_store(store_dir: str | None) -> Any:
    from dreamstream.streams.store import open_store

    return open_store(store_dir or settings.store_dir, settings.qdrant_url, settings.qdrant_api_key)


def print_rows(rows: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        for r in rows:
            sys.stdout.write(orjson.dumps(r).decode() + "\n")
        return
    if not rows:
        click.echo("(no memories)")
    for r in rows:
        link = ""
        if r.get("superseded_by"):
            link = f"  -> superseded by {r['superseded_by']}"
        elif r.get("merged_into"):
            link = f"  -> merged into {r['merged_into']}"
        elif r.get("sources"):
            link = f"  <- from {len(r['sources'])} memories"
        score = f" {r['score']:.3f}" if "score" in r else ""
        click.echo(f"[{r['label']:<8}]{score} {r['memory_id']}  {r['created_at'][:10]}  {r['text']}{link}")


@app.command(
    argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path)),
    store_option,
    option("--dead-letters", "dead_path", default=None, type=click.Path(path_type=Path),
           help="Where bad lines go (default: FILE.deadletter.jsonl)."),
    option("--batch-size", default=256, show_default=True, help="Events per batch."),
    option("--synthesis", is_flag=True, default=False,
           help="Synthesis on from the file's first event, run on its schedule in event time and once at the end."),
)
async def replay(self: AppCommand, file: Path, store_dir: str | None, dead_path: Path | None,
                 batch_size: int, synthesis: bool) -> None:
    """Push a JSONL file of events through the agents in process, no broker, into the store."""
    from dreamstream.streams.replay import ReplaySummary, replay_file

    store = open_configured_store(store_dir)
    summary: ReplaySummary
    try:
        if synthesis:
            from dreamstream.streams import cli_synthesis

            state = cli_synthesis.state_for(store_dir)
            summary = cli_synthesis.replay_with_synthesis(file, store, state, batch_size=batch_size,
                                                          dead_path=dead_path,
                                                          write_text=pattern_writer_from_settings(settings))
        else:
            summary = replay_file(file, store, dead_path=dead_path, batch_size=batch_size)
    finally:
        store.close()
    click.echo(summary.describe())


@app.command(store_option, option("--out", "out", default=None, type=click.Path(path_type=Path),
                                  help="Output file (default: stdout)."),
             option("--user", "user", default=None, help="Only this user's memories."))
async def export(self: AppCommand, store_dir: str | None, out: Path | None, user: str | None) -> None:
    """Every memory as JSON lines, in the final-state format of the benchmark (FORMAT.md)."""
    from dreamstream.streams.replay import export_rows

    store = open_configured_store(store_dir)
    rows = export_rows(store, user)
    data = b"".join(orjson.dumps(r) + b"\n" for r in rows)
    if out is None:
        sys.stdout.buffer.write(data)
    else:
        out.write_bytes(data)
        click.echo(f"exported {len(rows)} memories to {out}", err=True)
    store.close()


@app.command(store_option, *mode_options)
async def get(self: AppCommand, store_dir: str | None, user: str, latest_only: bool, include_merged: bool,
              as_json: bool) -> None:
    """A user's memories: active + history + patterns; --latest-only or --include-merged."""
    store = open_configured_store(store_dir)
    print_rows(reads.get(store, user, reads.mode_from_flags(latest_only, include_merged)), as_json)
    store.close()


@app.command(argument("text"), store_option, *mode_options,
             option("--limit", default=10, show_default=True, help="How many results."))
async def search(self: AppCommand, text: str, store_dir: str | None, user: str, latest_only: bool,
                 include_merged: bool, as_json: bool, limit: int) -> None:
    """Nearest memories of one user to TEXT, in the same read modes as `get`."""
    from dreamstream.streams.embedding import shared_embedder

    store = open_configured_store(store_dir)
    mode = reads.mode_from_flags(latest_only, include_merged)
    rows = reads.search(store, shared_embedder(), user, text, mode, limit)
    print_rows(rows, as_json)
    if rows:  # a search is a recall: it feeds decay and co-access (dream consolidate --light)
        from dreamstream.streams.consolidate_runner import record_access

        record_access(store, [r["memory_id"] for r in rows])
    store.close()


@app.command(argument("decision_id"), store_option)
async def undo(self: AppCommand, decision_id: str, store_dir: str | None) -> None:
    """Revert one decision: both memories get their earlier status and links back."""
    from dreamstream.streams.pipeline import Processor

    store = open_configured_store(store_dir)
    proc = Processor(store, embed=lambda texts: None, decide=lambda new, cands: [])  # type: ignore[arg-type,return-value]
    try:
        events = proc.undo(decision_id)
    except (KeyError, ValueError) as exc:
        store.close()
        raise click.ClickException(str(exc.args[0])) from exc
    for ev in events:
        click.echo(f"{ev['memory_id']}: {ev['from_status']} -> {ev['to_status']} (undo of {decision_id})")
    store.close()


SCOPED_COMMANDS = ("consolidate",)
"""Dream commands whose `--app A` names a memory scope, not Faust's global `--app` (the app module)."""


def _scope_app_flag(argv: list[str]) -> list[str]:
    """Faust scans the whole command line for `--app` and imports it as a module; spell ours
    --only-app (Faust matches any flag that starts with --app)."""
    if len(argv) < 2 or argv[1] not in SCOPED_COMMANDS:
        return argv
    return [("--only-app" if a == "--app" else "--only-app=" + a[6:] if a.startswith("--app=") else a) for a in argv]


def main() -> None:
    sys.argv[:] = _scope_app_flag(sys.argv)  # in place: faust bound the list object as a default
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        from dreamstream.streams.topics import ensure_topics_sync

        ensure_topics_sync(settings)
    app.main()
from dreamstream.streams import cli_consolidate as _cli_consolidate  # noqa: E402,F401
from dreamstream.streams import cli_control as _cli_control  # noqa: E402,F401
from dreamstream.streams import cli_synthesis as _cli_synthesis  # noqa: E402,F401
