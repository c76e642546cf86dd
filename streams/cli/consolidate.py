"""`dream consolidate`, `dream schedule`, `dream stats` and `dream provenance`.

    dream consolidate --user U [--app A] [--auto | --dry-run] [--yes] [--hard-delete]
    dream consolidate --user U [--app A] --schedule weekly|daily|biweekly|"<cron>"
    dream consolidate --light | --full [--user U] [--dry-run]
    dream schedule list | remove SCHEDULE_ID
    dream stats
    dream provenance MEMORY_ID

The pass works on the store directly (embedded folder or QDRANT_URL); schedules live in the worker
and are registered over the control topic, so those commands need a running worker. Command bodies
import the services they use (see cli/main.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import threading
from typing import Any

import click
import orjson

from dreamstream.streams.cli.common import (
    api_client,
    api_errors,
    one_line,
    open_configured_store,
    print_table,
    progress_bar,
    quiet_kafka,
    run_async,
    settings,
    store_option,
    url_option,
    worker_url,
)
from dreamstream.streams.cli.control import request

_INTERRUPTED: list[bool] = []
"""Set by a Ctrl-C at a prompt: every later prompt answers as at the end of input (nothing applied)."""


def _ask(prompt: str) -> str | None:
    """One answer from stdin (a terminal or a pipe); None at end of input, and after a Ctrl-C. asyncio.run's
    own SIGINT handler only cancelled the command's task, which took effect after the blocking read: the ^C
    was ignored and the next Enter applied the pass. Here a Ctrl-C ends the read at once."""
    if _INTERRUPTED:
        return None
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if main else None
    if main:  # before the prompt shows: a Ctrl-C right after it went to asyncio's handler (a CI run under load)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        click.echo(prompt + " ", nl=False)
        line = sys.stdin.readline()
    except KeyboardInterrupt:
        _INTERRUPTED.append(True)
        line = ""
    finally:
        if main:
            signal.signal(signal.SIGINT, previous)
    if not line:
        click.echo()
        return None
    return line.rstrip("\n")


def _fetch_progress(store: Any, user: str, app_id: str | None) -> Any:
    """A progress bar on stderr when it is a terminal (stdout keeps the exact report)."""
    from dreamstream.streams.core import consolidation as runner

    if not sys.stderr.isatty():
        return None
    total = store.count(runner.scope_where(user, app_id))
    return click.progressbar(length=total, label="Fetching memories", file=sys.stderr)


def note_stage(line: str) -> None:
    """What long work is doing now, on stderr at a terminal only (stdout keeps the exact report)."""
    if sys.stderr.isatty():
        click.echo(line, err=True)


def interactive(report: str, items: dict[str, list[str]], each: bool) -> tuple[dict[str, str], bool]:
    """Prints the report (`render_report`'s text), asking at each conflict (and with `each`, at each
    merge and prune) and at the end; returns the answers by item id (`answer_plan`) and the go-ahead.
    `items` lists the plan's item ids per kind, in the report's order."""
    from dreamstream.agents import consolidation as cons

    answers: dict[str, str] = {}
    seen = {"merge": 0, "conflict": 0, "prune": 0}
    go = False
    held = False  # the merge being shown needs a person: asked, Enter leaves it (the final yes never merges it)

    def take(kind: str, answer: str) -> None:
        """The answer for the item of `kind` shown last (every item shown is counted, asked or not)."""
        answers[items[kind][seen[kind] - 1]] = answer

    for line in report.split("\n"):
        if line.strip() == "Which is current? [A/B/skip]":
            seen["conflict"] += 1
            answer = _ask(line)
            while answer is not None and answer.strip().lower() not in ("a", "b", "", "s", "skip"):
                answer = _ask("Please answer A, B or skip (Enter skips). Which is current? [A/B/skip]")
            take("conflict", cons.parse_choice(answer or "") or "skip")
        elif line == cons.APPLY_PROMPT:
            go = _confirm(line)
        else:
            click.echo(line)
            held = held or line.startswith("  Held:")
            kind = "merge" if line.startswith("  - Merged:") else "prune" if line.startswith("PRUNE [") else None
            if kind:
                seen[kind] += 1
            if kind == "merge" and held:
                take(kind, "apply" if _confirm("  Merge these? [y/N]", default=False) else "skip")
                held = False
            elif each and kind:
                take(kind, "apply" if _confirm(f"  {'Merge these' if kind == 'merge' else 'Prune it'}? [Y/n]")
                     else "skip")
    return answers, go


def _confirm(prompt: str, default: bool = True) -> bool:
    """A y/n answer, asked again until it is one (Enter is `default`); the end of input is not a yes."""
    from dreamstream.agents import consolidation as cons

    answer = _ask(prompt)
    while answer is not None and cons.parse_confirm(answer) is None:
        answer = _ask(f"Please answer y or n (Enter is {'yes' if default else 'no'}). {prompt.strip()}")
    if answer is None:
        return False
    return bool(cons.parse_confirm(answer)) if answer.strip() else default


def plan_items(plan: Any) -> dict[str, list[str]]:
    """Item ids per kind, in the report's order, from a Plan or its dict."""
    if isinstance(plan, dict):
        return {kind: [x["item"] for x in plan[f"{kind}s"]] for kind in ("merge", "conflict", "prune")}
    return {"merge": [m.item for m in plan.merges], "conflict": [c.item for c in plan.conflicts],
            "prune": [p.item for p in plan.prunes]}


async def publish_events(events: list[dict[str, Any]], store_dir: str | None) -> str:
    """The pass's `memory.status` events to Kafka, after any an earlier command kept; when no broker answers,
    kept in the store's outbox file (never dropped), sent first by the next command or worker that reaches one."""
    from aiokafka import AIOKafkaProducer

    from dreamstream.streams.core import changes

    outbox = changes.outbox_path(store_dir or settings.store_dir, server=bool(settings.qdrant_url))
    kept = await asyncio.to_thread(changes.kept_events, outbox)
    if not events and not kept:
        return ""
    quiet_kafka()
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap_servers, acks="all", request_timeout_ms=5000,
                                **settings.kafka.aiokafka_kwargs())
    try:
        await asyncio.wait_for(producer.start(), timeout=10)
        for ev in [*kept, *events]:
            await producer.send_and_wait(settings.topics.memory_status, orjson.dumps(ev), key=ev["user_id"].encode())
    except Exception:  # no broker: keep them
        if events:
            await asyncio.to_thread(changes.keep_events, outbox, events)
        return f"no broker reachable: {len(kept) + len(events)} status events kept in {outbox}"
    finally:
        with contextlib.suppress(Exception):  # it may never have started
            await producer.stop()
    if kept:
        await asyncio.to_thread(changes.drop_kept, outbox)
    earlier = f" ({len(kept)} kept from before)" if kept else ""
    return f"{len(kept) + len(events)} status events sent to {settings.topics.memory_status}{earlier}"


async def finish_interrupted(store: Any, store_dir: str | None) -> None:
    """Before a command writes: a pass or undo a crash left half-applied is finished (core/changes.py),
    and its status events sent, with those an earlier command was killed before sending."""
    from dreamstream.streams.core import changes

    events = changes.recover(store, grace_seconds=120.0 if settings.qdrant_url else 0.0)  # workers mid-write
    if events:
        # Named, with its undo: the id printed by the killed command was all that named it (a re-run printed its
        # own pass's id, one that may change nothing, and `dream undo` of it found no decision).
        finished = sorted({str(ev["decision_id"]) for ev in events})
        undo = f" (undo it with: dream undo {finished[0]})" if len(finished) == 1 else ""
        click.echo(f"finished an interrupted change ({len(events)} status events) of {', '.join(finished)}{undo}",
                   err=True)
    events += changes.unsent_of_writers(store)
    events = list({changes.event_key(ev): ev for ev in events}.values())
    if events:
        note = await publish_events(events, store_dir)
        click.echo(note, err=True)
        changes.sent(store, events)


def schedule_line(entry: dict[str, Any]) -> str:
    """One schedule for `dream schedule list`: its last run's line, or its message when the run had nothing to
    do ("No memories found": a mistyped user looked like a schedule not yet due, "never ran")."""
    run = entry.get("last_run") or {}
    firings = int(entry.get("firings") or 0)
    last = run.get("line") or run.get("message") or (f"not run yet ({firings} firings)" if firings else "never ran")
    return (f"{entry['schedule_id']}  user={entry['user']}  app={entry.get('app') or '-'}  {entry['schedule']}"
            f"  ({entry['cron']})  last: {last}")


@click.command()
@click.option("--user", "user", default=None, help="Whose memories (required for a pass).")
@click.option("--app", "app_id", default=None, help="Only this app's (project's) memories.")
@click.option("--auto", is_flag=True, default=False, help="Apply merges and prunes, skip conflicts, no prompts.")
@click.option("--dry-run", is_flag=True, default=False, help="Print the report (or the JSON summary); change nothing.")
@click.option("--yes", is_flag=True, default=False, help="Apply without the final Apply? prompt.")
@click.option("--hard-delete", is_flag=True, default=False,
           help="Delete pruned memories for good (privacy requests) instead of expiring them.")
@click.option("--light", is_flag=True, default=False, help="Light consolidation: stability, co-access links.")
@click.option("--full", is_flag=True, default=False, help="Full: light + clusters + in-cluster merges + index rebuild.")
@click.option("--schedule", "schedule", default=None,
           help='Register a recurring --auto run in the worker: weekly, daily, biweekly or "<cron>".')
@click.option("--retention", "retention_file", default=None,
           help="JSON {type: days|null} over the defaults (default: $DREAM_RETENTION_FILE).")
@click.option("--each", is_flag=True, default=False, help="Ask at each merge and prune too, not only at conflicts.")
@click.option("--json", "as_json", is_flag=True, default=False,
              help="One JSON object for machines (with --dry-run, --auto, --light or --full).")
@store_option
@url_option
@run_async
async def consolidate(user: str | None, app_id: str | None, auto: bool, dry_run: bool,
                      yes: bool, hard_delete: bool, light: bool, full: bool, schedule: str | None,
                      retention_file: str | None, each: bool, as_json: bool, store_dir: str | None,
                      api_url: str | None) -> None:
    """The consolidation pass over one user's (or one app's) memories, with a report to approve item by
    item (through a running worker's API when one holds the store)."""
    from dreamstream.agents import consolidation as cons
    from dreamstream.streams.core import changes
    from dreamstream.streams.core import consolidation as runner
    from dreamstream.streams.core.embedding import shared_embedder

    if light and full:
        raise click.UsageError("--light and --full exclude each other")
    if auto and dry_run:
        raise click.UsageError("--auto and --dry-run exclude each other")
    if (auto or dry_run or yes) and each:
        raise click.UsageError("--each asks at each item: not with --auto, --dry-run or --yes")
    if schedule and (auto or dry_run or yes or each or light or full or hard_delete or retention_file):
        raise click.UsageError("--schedule registers a recurring --auto pass on the worker: it takes --user and "
                               "--app only")
    if app_id is not None and not app_id.strip():  # an unset variable: it ran over every app
        raise click.UsageError("--app is empty: name an app, or leave --app out")
    if (light or full) and (hard_delete or retention_file or each or auto or yes or app_id):
        # --app was accepted and ignored: a --full meant for one app merged the user's others too
        raise click.UsageError("--light and --full take --user and --dry-run only (they run over all of a user's apps)")
    if as_json and not (dry_run or auto or light or full):
        raise click.UsageError("--json is for a run that asks nothing: --dry-run, --auto, --light or --full")
    if as_json and schedule:
        raise click.UsageError("--schedule registers a recurring --auto pass on the worker: it takes --user and "
                               "--app only")
    url = None if schedule else worker_url(store_dir, api_url)
    if url is not None:
        through_worker(url, user, app_id, auto=auto, dry_run=dry_run, yes=yes, each=each, light=light, full=full,
                       refused="--hard-delete" if hard_delete else "--retention" if retention_file else None,
                       as_json=as_json)
        return
    if light or full:
        store = open_configured_store(store_dir)
        try:
            if not dry_run:  # a pass or undo a crash left half-applied is finished before anything is decided
                await finish_interrupted(store, store_dir)
            where: dict[str, Any] = {"status": "active", "kind": "fact", **({"user_id": user} if user else {})}
            kind = "Full consolidation" if full else "Light consolidation"
            events: list[dict[str, Any]] = []
            with progress_bar(store.count(where), kind) as bar:
                if full:
                    summary = runner.full(store, user, dry_run, progress=bar.update, events_out=events)
                else:
                    summary = runner.light(store, user, dry_run, progress=bar.update)
            if events:  # the merges' status events out, then off the store's outbox
                click.echo(await publish_events(events, store_dir), err=True)
                changes.sent(store, events)
        finally:
            store.close()
        if not dry_run:
            runner.note_run(store_dir or settings.store_dir, summary)
        echo_summary(summary, as_json)
        return
    if not user:
        raise click.UsageError("a consolidation pass needs --user")
    if schedule:
        try:
            cons.parse_schedule(schedule)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--schedule") from exc
        entry = await request("consolidate.schedule", {"user": user, "app": app_id, "schedule": schedule})
        click.echo(f"scheduled {entry['schedule_id']}: dream consolidate --user {user}"
                   f"{' --app ' + app_id if app_id else ''} --auto, {schedule} ({entry['cron']}, worker local time)")
        return
    policies, warning = runner.load_retention(retention_file or settings.retention_file)
    if warning and (retention_file or hard_delete):
        # The defaults in place of a file the user named (a typo) pruned what that file kept, and with
        # --hard-delete for good: only a configured file of a soft, undoable pass falls back.
        raise click.ClickException(f"{warning.split(';')[0]}: nothing done")
    if warning:
        click.echo(f"warning: {warning}", err=True)
    store = open_configured_store(store_dir)
    try:
        if not dry_run:
            await finish_interrupted(store, store_dir)
        bar = _fetch_progress(store, user, app_id)
        if bar is not None:
            with bar:
                plan, found = runner.make_plan(store, user, app_id, policies, progress=bar.update)
        else:
            plan, found = runner.make_plan(store, user, app_id, policies)
        # An empty auto pass still runs when a reminder says conflicts wait: none do now, so it goes.
        if not found or (plan.empty and not (auto and not dry_run and runner.current_reminders(store, plan))):
            message = cons.no_memories(plan.project) if not found else cons.NOTHING
            click.echo(json.dumps({"project": plan.project, "found": found, "message": message}) if as_json
                       else message)
            return
        if dry_run:
            if as_json:
                click.echo(json.dumps({"mode": "dry_run", **plan.to_dict()}, indent=2, sort_keys=True))
                return
            click.echo(cons.report_without_prompt(plan))
            click.echo("(dry run: no changes made)")
            return
        def applying(chosen: Any) -> str:  # what will be applied, not what was proposed (--each declines some)
            return f"Applying: {len(chosen.merges)} merges, {len(chosen.prunes)} prunes (embedding merged texts)…"

        pass_id = runner.new_pass_id(plan)
        # A hard-deleting pass may keep no record (deletions only): its undo line comes at the end, if any.
        started = f"pass {pass_id}" + ("" if hard_delete else f" (undo it with: dream undo {pass_id})")
        if auto:
            sure, held = cons.unattended(plan)  # nobody answers: a merge that needs a person waits
            note_stage(applying(sure))
            click.echo(started, err=True)
            outcome, events = runner.apply_plan(store, shared_embedder(), sure, hard_delete=hard_delete,
                                                reminder=True, pass_id=pass_id, held=held)
            click.echo(json.dumps({"mode": "auto", "line": cons.auto_line(plan.project, outcome),
                                   **outcome.to_dict()}, indent=2, sort_keys=True) if as_json
                       else cons.auto_line(plan.project, outcome))
            if outcome.reminder_id:
                click.echo(f"stored a reminder ({outcome.reminder_id}): {outcome.skipped} conflicts and "
                           f"{outcome.held} merges need review", err=as_json)
        else:
            if yes:
                click.echo(cons.report_without_prompt(plan))
                # nobody chose: conflicts, and merges that need a person, wait
                answers = {c.item: "skip" for c in plan.conflicts} | {m.item: "skip" for m in plan.merges if m.held}
                go = True
            else:
                if hard_delete and plan.prunes:
                    click.echo(f"Note: --hard-delete deletes the {len(plan.prunes)} pruned memories for good.")
                answers, go = interactive(cons.render_report(plan), plan_items(plan), each)
            if not go:
                click.echo(cons.CANCELLED)
                return
            chosen, choices = cons.answer_plan(plan, answers)
            note_stage(applying(chosen))
            click.echo(started, err=True)
            # reminder: the scope's reminder says how many conflicts still wait (none answered by hand: it goes)
            outcome, events = runner.apply_plan(store, shared_embedder(), chosen, choices, hard_delete=hard_delete,
                                                reminder=True, pass_id=pass_id,
                                                held=sum(m.held for m in plan.merges) if yes else 0)
            click.echo(cons.render_summary(outcome))
        notes = []
        if hard_delete and outcome.deleted:
            notes.append(f"{outcome.deleted} memories were deleted permanently (--hard-delete); they cannot be "
                         "restored.")
        if hard_delete and outcome.kept_linked:
            notes.append(f"{outcome.kept_linked} pruned memories were expired, not deleted: other memories link "
                         "to them (their text is kept; `kept: linked` in their status events).")
        if outcome.decision_id and (outcome.merged_pairs or outcome.pruned or outcome.resolved or outcome.reminder_id):
            notes.append(f"Undo this pass: dream undo {outcome.decision_id}")
        elif not hard_delete and not events:  # the id printed at its start names no decision: say so
            notes.append(f"pass {pass_id} changed nothing: there is nothing to undo")
        for line in notes:
            click.echo(line, err=as_json)  # with --json stdout is the one JSON object
        note = await publish_events(events, store_dir)
        if note:
            click.echo(note, err=True)
        changes.sent(store, events)
        runner.note_run(store_dir or settings.store_dir, {"type": "pass", "user": user, "app": app_id,
                                                            **outcome.to_dict()})
    finally:
        store.close()


def echo_summary(summary: dict[str, Any], as_json: bool) -> None:
    """A light or full run's summary: its counts as lines for people, or the JSON object."""
    if as_json:
        click.echo(json.dumps(summary, indent=2, sort_keys=True))
        return
    kind = "Light" if summary.get("type") == "light" else "Full"
    click.echo(f"{kind} consolidation{' (dry run: no changes made)' if summary.get('dry_run') else ''}: "
               f"{summary.get('processed', 0)} memories in {summary.get('duration_seconds', 0)}s")
    rows = [(k, v) for k, v in sorted(summary.items())
            if k not in ("status", "type", "dry_run", "processed", "duration_seconds", "changed")]
    rows = [(f"changed {k}", v) for k, v in sorted((summary.get("changed") or {}).items())] + rows
    width = max((len(k) for k, _ in rows), default=0)
    for k, v in rows:
        if isinstance(v, dict):  # the light run a full one starts with: its counts
            v = ", ".join(f"{a}={b}" for a, b in sorted(v.items()) if a not in ("status", "type", "dry_run"))
        click.echo(f"  {k.ljust(width)}  {v}")


def through_worker(url: str, user: str | None, app_id: str | None, *, auto: bool, dry_run: bool, yes: bool,
                   each: bool, light: bool, full: bool, refused: str | None, as_json: bool = False) -> None:
    """`dream consolidate` beside the worker that holds the store: the same report and answers, run by
    the worker (POST /v1/consolidations, then approve item by item); it publishes the status events."""
    from dreamstream.agents import consolidation as cons

    if refused:
        raise click.UsageError(f"{refused} works on the store itself, which the worker at {url} holds: stop it "
                               "first (the worker applies its own retention: dream control retention.set)")
    with api_errors(), api_client(url) as api:
        if light or full:
            echo_summary(api.consolidate(user, mode="full" if full else "light", dry_run=dry_run), as_json)
            return
        if not user:
            raise click.UsageError("a consolidation pass needs --user")
        if auto:
            done = api.consolidate(user, mode="auto", app_id=app_id)
            click.echo(json.dumps(done, indent=2, sort_keys=True) if as_json
                       else done.get("line") or done.get("message"))
            if done.get("status_events"):
                click.echo(f"Undo this pass: dream undo {done['decision_id']} --user {user}", err=as_json)
            return
        plan = api.consolidate(user, app_id=app_id)
        if "plan_id" not in plan:
            click.echo(json.dumps(plan) if as_json
                       else plan.get("message") or cons.no_memories(str(plan.get("project"))))
            return
        if not (plan["merges"] or plan["conflicts"] or plan["prunes"]):
            api.reject(plan["plan_id"])
            click.echo(json.dumps({"project": plan.get("project"), "message": cons.NOTHING}) if as_json
                       else cons.NOTHING)
            return
        if dry_run:  # changes nothing, and leaves the plan pending: its id is its content's, maybe another's plan
            if as_json:
                click.echo(json.dumps({k: v for k, v in plan.items() if k != "report"}, indent=2, sort_keys=True))
                return
            click.echo(plan["report"])
            click.echo("(dry run: no changes made)")
            return
        if yes:  # nobody chose: conflicts, and merges that need a person, wait (as without a worker)
            click.echo(plan["report"])
            answers = {x["item"]: "skip" for x in plan["conflicts"]}
            answers |= {x["item"]: "skip" for x in plan["merges"] if x.get("held", True)}
            go = True
        else:
            answers, go = interactive(plan["report"] + "\n" + cons.APPLY_PROMPT, plan_items(plan), each)
        if not go:
            api.reject(plan["plan_id"])
            click.echo(cons.CANCELLED)
            return
        done = api.approve(plan["plan_id"], answers)
        click.echo(done["summary"])
        if done.get("status_events"):
            click.echo(f"Undo this pass: dream undo {done['decision_id']} --user {user}")


@click.command()
@click.argument("action", type=click.Choice(["list", "remove"]))
@click.argument("schedule_id", required=False)
@click.option("--json", "as_json", is_flag=True, default=False, help="list: one JSON object instead of lines.")
@run_async
async def schedule(action: str, schedule_id: str | None, as_json: bool) -> None:
    """The worker's scheduled consolidation runs: list them, or remove one by id."""
    if action == "list":
        details = await request("schedule.list", {})
        rows = details.get("schedules") or []
        if as_json:
            click.echo(json.dumps({"schedules": rows}, indent=2, sort_keys=True))
            return
        if not rows:
            click.echo("(no schedules)")
        for e in rows:
            click.echo(schedule_line(e))
        return
    if not schedule_id:
        raise click.UsageError("schedule remove needs a SCHEDULE_ID (see dream schedule list)")
    await request("schedule.remove", {"schedule_id": schedule_id})
    click.echo(f"removed {schedule_id}")


@click.command()
@store_option
@url_option
@click.option("--json", "as_json", is_flag=True, default=False, help="One JSON object instead of tables.")
def stats(store_dir: str | None, api_url: str | None, as_json: bool) -> None:
    """Counts by status, kind and type, and the last consolidation runs (through a running worker's API
    when one holds the store)."""
    from dreamstream.streams.core import consolidation as runner

    url = worker_url(store_dir, api_url)
    if url is not None:
        with api_errors(), api_client(url) as api:
            out = api.stats()
        out.pop("ready", None)
    else:
        store = open_configured_store(store_dir)
        try:
            out = runner.stats(store, store_dir or settings.store_dir)
        finally:
            store.close()
    if as_json:
        click.echo(json.dumps(out, indent=2, sort_keys=True))
        return
    click.echo(f"{out['memories']} memories of {out['users']} user{'' if out['users'] == 1 else 's'}")
    for title, key in (("status", "by_status"), ("kind", "by_kind"), ("type", "by_type")):
        click.echo("")
        print_table([title, "memories"], sorted(out[key].items(), key=lambda kv: (-kv[1], kv[0])))
    runs = out.get("last_runs") or {}
    if runs:
        click.echo("")
        print_table(["last run", "at", "status"],
                    [(kind, str(r.get("at", ""))[:19], r.get("status", "ok")) for kind, r in sorted(runs.items())])


@click.command()
@click.argument("memory_id")
@store_option
@url_option
@click.option("--user", "user", default=None, help="Its user (needed through a worker's API: reads are per user).")
@click.option("--json", "as_json", is_flag=True, default=False, help="The whole record as JSON.")
def provenance(memory_id: str, store_dir: str | None, api_url: str | None, user: str | None, as_json: bool) -> None:
    """What a memory merged, superseded or was synthesized from, with each decision's evidence (through
    a running worker's API when one holds the store)."""
    from dreamstream.streams.core import consolidation as runner

    url = worker_url(store_dir, api_url)
    if url is not None:
        if not user:
            raise click.UsageError("a worker holds the store and its API reads per user: add --user USER")
        with api_errors(), api_client(url) as api:
            out = api.history(memory_id, user)
    else:
        store = open_configured_store(store_dir)
        try:
            out = runner.provenance(store, memory_id)
        except KeyError as exc:
            raise click.ClickException(str(exc.args[0])) from exc
        finally:
            store.close()
        if user is not None and out["memory"]["user_id"] != user:  # as the API answers: another user's is unknown
            raise click.ClickException(f"no memory {memory_id}")
    if as_json:
        click.echo(json.dumps(out, indent=2, sort_keys=True, default=str))
        return
    m = out["memory"]
    click.echo(f"{m['memory_id']}  [{m['status']}]  {m['created_at'][:10]}  {one_line(m['text'])}")
    rows = []
    for relation in ("superseded_by", "merged_into"):
        if out[relation]:
            rows.append((relation.replace("_", " "), out[relation]["memory_id"], out[relation]["status"],
                         out[relation]["text"] or ""))
    for relation in ("supersedes", "merged_from", "sources"):
        rows += [(relation.replace("_", " "), x["memory_id"], x["status"], x["text"] or "") for x in out[relation]]
    if rows:
        click.echo("")
        print_table(["link", "memory", "status", "text"], rows)
    if out["decisions"]:
        click.echo("")
        print_table(["decision", "action", "rule", "at"],
                    [(d["decision_id"], d["action"] + (" (undone)" if d.get("undone") else ""),
                      str((d.get("evidence") or {}).get("rule", "")), str(d.get("at", ""))[:19])
                     for d in out["decisions"]])
        named = f" --user {user}" if user else ""
        click.echo(f"\nUndo one: dream undo DECISION_ID{named}   "
                   f"(evidence in full: dream provenance {memory_id}{named} --json)")
