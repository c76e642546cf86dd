"""What the `dream` commands share: settings, the store and read-mode options, row printing, async commands.

Nothing here builds the Faust app: offline commands start in a fraction of a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
import sys
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import click
import orjson

from dreamstream.streams import settings as settings_mod

settings = settings_mod.load()

store_option = click.option("--store", "store_dir", default=None, help="Embedded store folder (default: $DREAM_STORE).")
url_option = click.option("--url", "api_url", default=None,
                          help="Go through this worker's HTTP API (default: the worker holding the store, if any).")


def worker_url(store_dir: str | None, api_url: str | None) -> str | None:
    """The API a command goes through: --url, else the one the worker holding the embedded store names
    in its lock (so every read and undo works beside a running worker); None: open the store itself."""
    if api_url:
        return api_url.rstrip("/")
    if settings.qdrant_url:
        return None  # a server store is opened directly, beside any worker
    from dreamstream.streams.store.edge import lock_holder

    holder = lock_holder(store_dir or settings.store_dir) or ""
    found = re.search(r"read it over HTTP at (https?://[^/\s]+)", holder)
    return found.group(1).replace("://0.0.0.0:", "://127.0.0.1:") if found else None


def api_client(url: str) -> Any:
    """The memory API's client for a CLI command (its errors become one-line CLI errors)."""
    from dreamstream.client import Client

    return Client(url, settings.api_token)


@contextlib.contextmanager
def api_errors() -> Iterator[None]:
    """The client's errors as a ClickException (one line, exit 1)."""
    from dreamstream.client import DreamError

    try:
        yield
    except DreamError as exc:
        raise click.ClickException(str(exc)) from None


F = TypeVar("F", bound=Callable[..., Any])


def mode_options(fn: F) -> F:
    """--user and the three read modes, plus --json: the same on every read command."""
    inner = fn

    @functools.wraps(inner)
    def checked(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("latest_only") and kwargs.get("include_merged"):
            raise click.UsageError("--latest-only and --include-merged exclude each other")
        if not str(kwargs.get("user") or "").strip():
            raise click.UsageError("--user is empty (an unset variable?): name the user whose memories to read")
        from dreamstream.streams.core.reads import user_param

        try:  # the API's rule: a user no stored id can have is an error, not "(no memories)"
            user_param({"user": str(kwargs.get("user"))})
        except ValueError as exc:
            raise click.UsageError(f"--user: {exc}") from None
        return inner(*args, **kwargs)

    fn = checked  # type: ignore[assignment]
    for option in reversed((
        click.option("--user", "user", required=True, help="The user whose memories to read (required)."),
        click.option("--latest-only", is_flag=True, default=False, help="Active memories only."),
        click.option("--include-merged", is_flag=True, default=False, help="Everything, merged and expired too."),
        click.option("--json", "as_json", is_flag=True, default=False, help="One JSON object per line."),
    )):
        fn = option(fn)
    return fn


def run_async(fn: Callable[..., Coroutine[Any, Any, Any]]) -> Callable[..., Any]:
    """A click command body that awaits (Kafka clients): run to completion on a fresh event loop."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return asyncio.run(fn(*args, **kwargs))
    return wrapper


class _Quiet:
    """The progress bar's stand-in when stderr is not a terminal: scripts and logs stay clean."""

    def __enter__(self) -> _Quiet:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, n: int) -> None:
        return None


def progress_bar(length: int, label: str) -> Any:
    """A progress bar on stderr for long work, shown only at a terminal (stdout keeps the result)."""
    if not sys.stderr.isatty():
        return _Quiet()
    return click.progressbar(length=length, label=label, file=sys.stderr, show_pos=True, show_eta=True)


def open_configured_store(store_dir: str | None, create: bool = False) -> Any:
    """The store the options and settings name. Only a command that writes new memories (`replay`)
    may create an embedded store: anywhere else a mistyped --store is an error, not an empty store."""
    from dreamstream.streams.store import open_configured  # numpy and the store client: only when used

    if not create:
        require_store(store_dir)
    elif not settings.qdrant_url:
        folder = Path(store_dir or settings.store_dir)
        if folder.exists() and not (folder / STORE_MARKER).is_file() and (not folder.is_dir() or any(folder.iterdir())):
            # The engine's files would go in among what is there (or a file stands where the folder would).
            raise click.ClickException(f"{folder} is not a store (a file, or a folder of other things): give "
                                       "--store an existing store, an empty folder or a new path")
    return open_configured(settings, store_dir)


STORE_MARKER = "edge_config.json"
"""`streams.store.STORE_MARKER`, named here so that the CLI starts without importing the store client."""


def require_store(store_dir: str | None) -> None:
    """A one-line error unless the embedded store named is there (any other folder, even a full one, is not:
    opening it would write an engine into it). A server store (QDRANT_URL) is always there to ask."""
    folder = Path(store_dir or settings.store_dir)
    if not settings.qdrant_url and not (folder / STORE_MARKER).is_file():
        raise click.ClickException(f"no store at {folder} (give --store DIR of an existing store, set "
                                   "DREAM_STORE or QDRANT_URL, or fill one with `dream replay`)")


_BREAKS = re.compile(r"[\r\n\v\f\x85\u2028\u2029]+")


def one_line(text: str) -> str:
    """A text on one line (its breaks shown as ⏎): a memory's own line breaks must not print rows that look
    like the listing's own (a made-up `[current ]` row under someone's memory)."""
    return _BREAKS.sub(" ⏎ ", text.replace("\t", " "))


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
        replaced = r.get("replaced_by") or {}
        now, gone = replaced.get("memory_id"), replaced.get("status") == "deleted"
        if now and now not in (r.get("superseded_by"), r.get("merged_into")):
            link += f" (now {now}{', deleted' if gone else ''})"
        elif now and gone:
            link += " (deleted)"  # named, but shown in no read: say why it cannot be found
        elif r.get("sources"):
            link = f"  <- from {len(r['sources'])} memories"
        score = f" {r['score']:.3f}" if "score" in r else ""
        click.echo(f"[{r['label']:<8}]{score} {r['memory_id']}  {r['created_at'][:10]}  {one_line(r['text'])}{link}")
        if r.get("review"):
            from dreamstream.streams.core.reads import review_note

            click.echo(f"           ? {one_line(review_note(r['review']))}")


def print_table(header: list[str], rows: list[Any]) -> None:
    """Columns aligned for people (the --json of each command is for machines); long cells cut at 60."""
    cells = [[c if len(c) <= 60 else c[:59] + "…" for c in (one_line(str(x)) for x in row)] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(header)]
    click.echo("  ".join(h.upper().ljust(w) for h, w in zip(header, widths, strict=True)).rstrip())
    for r in cells:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def quiet_kafka() -> None:
    """The Kafka client's own log lines (a broker not there, a retry) stay out of a command's one-line answer."""
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
