"""Consolidation against a store: fetch a scope, apply a plan, light and full runs, stats, provenance.

The decisions come from dreamstream.agents.consolidation (pure); this module reads and writes the
store and produces the `memory.status` events of every change. The CLI (`dream consolidate`), the
control topic (`consolidate.*`) and the worker's schedules all call these functions.

Nothing is destroyed unless asked: merged originals become `merged`, a conflict's loser
`superseded`, a pruned memory `expired`; a pass is one decision (one id on every memory it touched,
its before-state recorded), so `dream undo` reverts it whole. Only `--hard-delete` deletes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from dreamstream.agents import consolidation as cons
from dreamstream.schemas.events import now_iso, status_event
from dreamstream.schemas.memory import EMBEDDING_DIM, LINK_FIELDS, Memory
from dreamstream.streams.core import changes
from dreamstream.streams.core.ingest import BatchResult, Processor, embed_with_features
from dreamstream.streams.core.judges import judge_from_settings
from dreamstream.streams.settings import load
from dreamstream.streams.store import MemoryStore

log = logging.getLogger("dreamstream.consolidation")

Embed = Callable[[Sequence[str]], np.ndarray]
Progress = Callable[[int], None]

PLANS_DIR = "consolidation-plans"


def load_retention(path: str | Path | None) -> tuple[cons.Retention, str | None]:
    """The policies of a JSON file laid over the defaults, and a warning when it could not be used.

    A missing or broken file must not stop a clean-up run: it falls back to the defaults, loudly.
    """
    if path is None:
        return dict(cons.DEFAULT_RETENTION), None
    p = Path(path)
    try:
        loaded = cons.parse_retention(json.loads(p.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return dict(cons.DEFAULT_RETENTION), f"retention file {p} not found; using the defaults"
    except (OSError, ValueError) as exc:  # JSONDecodeError is a ValueError
        return dict(cons.DEFAULT_RETENTION), f"retention file {p} is unusable ({exc}); using the defaults"
    return {**cons.DEFAULT_RETENTION, **loaded}, None


def project_of(user_id: str, app_id: str | None) -> str:
    """The name a report gives its scope: the app (a project's memories) or, without one, the user."""
    return app_id or user_id


def scope_where(user_id: str, app_id: str | None) -> dict[str, Any]:
    where: dict[str, Any] = {"user_id": user_id}
    if app_id:
        where["app_id"] = app_id
    return where


def fetch_scope(store: MemoryStore, user_id: str, app_id: str | None,
                progress: Progress | None = None) -> list[Memory]:
    """Every memory of the scope with its vector (the store pages the scroll; `progress` counts rows)."""
    out: list[Memory] = []
    for memory in store.scroll(scope_where(user_id, app_id), with_vectors=True):
        out.append(memory)
        if progress is not None:
            progress(1)
    return out


def make_plan(store: MemoryStore, user_id: str, app_id: str | None, retention: Mapping[str, int | None],
              now: datetime | None = None, progress: Progress | None = None) -> tuple[cons.Plan, int]:
    """The plan for one scope and how many memories the scope holds (0: nothing to consolidate)."""
    memories = fetch_scope(store, user_id, app_id, progress)
    live = [m for m in memories if m.status in ("active", "superseded")]
    # A restatement renews what it merged into whatever app said it: an app's pass read only its own, and
    # pruned a chat note that a coding agent had said again last week.
    merged = memories if app_id is None else list(store.scroll({"user_id": user_id, "status": "merged"},
                                                               with_features=False))
    plan = cons.analyse(live, project=project_of(user_id, app_id), user_id=user_id, app_id=app_id,
                        judge=cons.pairwise(judge_from_settings(load())),
                        now=now or cons.now_utc(), retention=retention, restated=cons.restated_at(merged))
    return plan, len(live)


# --- applying a plan ------------------------------------------------------------------------------


def _snapshot(m: Memory) -> dict[str, Any]:
    return {k: (list(v) if isinstance(v := getattr(m, k), list) else v) for k in LINK_FIELDS}


def new_pass_id(plan: cons.Plan, seed: str | None = None) -> str:
    """A pass's id, known before its first write (printed, so that `dream undo` has it even after a
    crash). With `seed` (a control command's id) it is the same on every delivery of that command."""
    basis = f"{plan.plan_id}|{now_iso()}" if seed is None else f"command|{seed}"
    return "cons-" + hashlib.sha256(basis.encode()).hexdigest()[:16]


def find_pass(store: MemoryStore, pass_id: str) -> dict[str, Any] | None:
    """The record of a pass already applied (a redelivered command), or None."""
    found = _pass_holder(store, pass_id)
    return None if found is None else found[0]


def _pass_holder(store: MemoryStore, pass_id: str) -> tuple[dict[str, Any], Memory] | None:
    for m in store.scroll({"decision_ids": pass_id}):
        for rec in m.decisions:
            if rec.get("decision_id") == pass_id and rec.get("action") == "consolidate":
                return rec, m
    return None


def apply_plan(
    store: MemoryStore,
    embed: Embed,
    plan: cons.Plan,
    choices: Mapping[int, str | None] | None = None,
    *,
    hard_delete: bool = False,
    reminder: bool = False,
    pass_id: str | None = None,
    held: int = 0,
) -> tuple[cons.Outcome, list[dict[str, Any]]]:
    """Merges, then resolved conflicts, then prunes, written as one crash-safe change
    (core/changes.py); returns what was done and its status events, which the caller publishes and
    then hands to `changes.sent` (the store keeps them as unsent until then).

    `choices` maps a conflict's index to "A", "B" or None (skip); a missing index skips. With
    `reminder`, skipped conflicts, and the `held` merges a pass nobody answered left out (`cons.unattended`),
    leave a task_learning memory saying how to review them.
    """
    outcome, change = prepare_pass(store, embed, plan, choices, hard_delete=hard_delete, reminder=reminder,
                                   pass_id=pass_id, held=held)
    if change.empty:
        return outcome, []
    if not change.holder:  # only hard deletes: the first deleted carries the intent, as a tombstone
        change.holder = change.deletes[0]
    changes.apply(store, change)
    store.flush()
    if outcome.deleted:  # deleted for good: out of the engine's files too
        changes.compact(store)
    return outcome, change.events


def prepare_pass(
    store: MemoryStore,
    embed: Embed,
    plan: cons.Plan,
    choices: Mapping[int, str | None] | None = None,
    *,
    hard_delete: bool = False,
    reminder: bool = False,
    pass_id: str | None = None,
    held: int = 0,
) -> tuple[cons.Outcome, changes.Change]:
    """Everything a pass will write, computed before the first write (see `apply_plan`)."""
    choices = choices or {}
    foreign = sorted({m.memory_id for m in plan.memories() if m.user_id != plan.user_id})
    if foreign:  # a plan is one user's: never let it write another's memory
        raise ValueError(f"plan {plan.plan_id} names memories of another user: {', '.join(foreign[:3])}")
    stamp = now_iso()
    did = pass_id or new_pass_id(plan)
    outcome = cons.Outcome(hard_delete=hard_delete, decision_id=did)
    evidence: dict[str, Any] = {"plan_id": plan.plan_id, "pass": did, "judge": "consolidate"}
    events: list[dict[str, Any]] = []
    touched: dict[str, Memory] = {}
    before: dict[str, dict[str, Any]] = {}
    created: list[Memory] = []

    def touch(m: Memory) -> Memory:
        if m.memory_id not in touched:
            before[m.memory_id] = _snapshot(m)
            touched[m.memory_id] = m
        return touched[m.memory_id]

    def event(m: Memory, from_status: str | None, to_status: str, linked: str | None, action: str,
              extra: dict[str, Any] | None = None) -> None:
        events.append(status_event(did, m.memory_id, m.user_id, from_status, to_status, linked, action,
                                   {**evidence, **(extra or {})}))

    new_texts = [p.merged_text for p in plan.merges]
    vectors, features = embed_with_features(embed, new_texts)
    for proposal, vector, feature in zip(plan.merges, vectors, features, strict=True):
        a, b = touch(proposal.a), touch(proposal.b)
        # Per pass: the same pair merged again after an undo is a new memory, and the first keeps its record.
        new_id = "cons-" + hashlib.sha256(f"{a.memory_id}+{b.memory_id}|{did}".encode()).hexdigest()[:16]
        canonical = Memory(
            memory_id=new_id, user_id=a.user_id, text=proposal.merged_text, created_at=stamp, updated_at=stamp,
            app_id=a.app_id if a.app_id == b.app_id else plan.app_id, agent_id=None, run_id=None,
            project_id=a.project_id if a.project_id == b.project_id else None,
            merged_from=[a.memory_id, b.memory_id],
            metadata={"type": a.memory_type, "confidence": max(a.confidence, b.confidence), "source": cons.SOURCE},
            vector=np.asarray(vector, dtype=np.float32), features=feature, decision_ids=[did],
        )
        created.append(canonical)
        for m in (a, b):
            event(m, m.status, "merged", new_id, "consolidate_merge", {"score": round(proposal.score, 4)})
            m.status, m.merged_into = "merged", new_id
        event(canonical, None, "active", None, "consolidate_new", {"merged_from": canonical.merged_from})
        outcome.merged_pairs += 1
        outcome.new_memories += 1
    for i, conflict in enumerate(plan.conflicts):
        choice = choices.get(i)
        if choice not in ("A", "B"):
            outcome.skipped += 1
            continue
        winner, loser = (conflict.a, conflict.b) if choice == "A" else (conflict.b, conflict.a)
        winner, loser = touch(winner), touch(loser)
        event(loser, loser.status, "superseded", winner.memory_id, "consolidate_resolve", {"chosen": choice})
        loser.status, loser.superseded_by = "superseded", winner.memory_id
        winner.supersedes = [*winner.supersedes, loser.memory_id]
        outcome.resolved += 1
    deleted: list[str] = []
    pointed_at = _pointed_at(store, plan.user_id) if hard_delete and plan.prunes else set()
    for prune in plan.prunes:
        m = touch(prune.memory)
        extra = {"policy": prune.policy, "age_days": prune.age_days}
        if hard_delete and (m.superseded_by or m.merged_into or m.supersedes or m.merged_from
                            or m.memory_id in pointed_at):
            extra["kept"] = "linked"  # deleting it would leave links (or a pattern's words) pointing at nothing
            outcome.kept_linked += 1
        if hard_delete and "kept" not in extra:
            event(m, m.status, "deleted", None, "consolidate_delete", extra)
            deleted.append(m.memory_id)
            outcome.deleted += 1
        else:
            event(m, m.status, "expired", None, "consolidate_prune", extra)
            m.status = "expired"
        outcome.pruned += 1
    # What was merged into a pruned memory is current again: a long-term fact that a session note absorbed was
    # hidden for good behind the note when the note expired for its age (hidden only behind one not expired).
    expired = {p.memory.memory_id for p in plan.prunes if touched[p.memory.memory_id].status == "expired"}
    absorbed = sorted({c for x in expired for c in touched[x].merged_from} - set(touched))
    for child in store.retrieve(absorbed).values():
        if child.status == "merged" and child.merged_into in expired and child.user_id == plan.user_id:
            c = touch(child)
            event(c, c.status, "active", None, "consolidate_prune", {"released_from": c.merged_into})
            c.status, c.merged_into = "active", None
    # A pattern quoting a fact this pass replaces or prunes would state it as current: retired with it (its undo
    # brings it back), as a supersede or a delete retires it.
    gone = {m.memory_id for m in touched.values() if m.status in ("superseded", "expired")}
    if gone:
        for pattern in changes.patterns_quoting(store, plan.user_id, sorted(gone)):
            if pattern.memory_id in touched:
                continue
            m = touch(pattern)
            source = next(x for x in m.sources if x in gone)
            event(m, m.status, "expired", source, "consolidate_prune", {"source_retired": source})
            m.status = "expired"
    outcome.held = held
    current = current_reminders(store, plan) if reminder else []
    if reminder and not any(m.metadata.get("conflicts") == outcome.skipped and m.metadata.get("merges", 0) == held
                            for m in current):
        # One current reminder per scope, saying how many conflicts (and held merges) wait now (none: the old go).
        if outcome.skipped or held:
            created.append(_reminder(store, embed, plan, outcome.skipped, stamp, did, held))
            outcome.reminder_id = created[-1].memory_id
            event(created[-1], None, "active", None, "consolidate_new", {"reminder": True})
        for old in current:
            m = touch(old)
            event(m, m.status, "expired", outcome.reminder_id, "consolidate_prune", {"reminder": True})
            m.status = "expired"
    holder = changes.holder_of(created, list(touched), deleted)
    change = changes.Change(change_id=did, holder=holder or "", creates=created, deletes=deleted, events=events)
    if holder is None:
        outcome.decision_id = None  # only deletions: no memory keeps a record, so there is nothing to undo
    if not events:
        return outcome, change
    record = {
        "decision_id": did, "action": "consolidate", "new_id": None, "at": stamp, "evidence": evidence,
        "targets": [mid for mid in touched if mid not in deleted], "created": [m.memory_id for m in created],
        "deleted": deleted, "before": {k: v for k, v in before.items() if k not in deleted},
        # What the pass left: its undo restores a memory only while it is still so (a later decision's state
        # stays); a review or conflict flag since changes no status or link, so it does not count.
        "after": {mid: _snapshot(m) for mid, m in [*touched.items(), *((c.memory_id, c) for c in created)]
                  if mid not in deleted},
        "outcome": outcome.to_dict(),
    }
    for m in created:
        if m.memory_id == holder:
            m.decisions = [*m.decisions, record]
    for mid, m in touched.items():
        if mid in deleted:
            continue
        fields: dict[str, Any] = {k: getattr(m, k) for k in LINK_FIELDS}
        fields["decision_ids"] = [*m.decision_ids, did]
        fields["updated_at"] = stamp
        if mid == holder:
            fields["decisions"] = [*m.decisions, record]
        change.set(mid, fields)
    return outcome, change


def _pointed_at(store: MemoryStore, user_id: str) -> set[str]:
    """Every id one of the user's memories links to (replaced, merged, a pattern's sources): one read of the
    user, not one per pruned memory."""
    out: set[str] = set()
    for m in store.scroll({"user_id": user_id}):
        out.update(x for x in (m.superseded_by, m.merged_into) if x)
        out.update(m.supersedes, m.merged_from, m.sources)
    return out


def current_reminders(store: MemoryStore, plan: cons.Plan) -> list[Memory]:
    """The scope's current reminders: a scheduled pass over an unchanged store must change nothing (it
    added one reminder a run, and later passes merged the copies)."""
    return [m for m in store.scroll({"user_id": plan.user_id, "status": "active"})
            if m.metadata.get("reminder") and m.app_id == plan.app_id]


def _reminder(store: MemoryStore, embed: Embed, plan: cons.Plan, skipped: int, stamp: str, did: str,
              held: int = 0) -> Memory:
    text = cons.reminder_text(skipped, plan.user_id, plan.app_id, held)
    mid = "dream-reminder-" + hashlib.sha256(f"{plan.user_id}|{plan.app_id}|{did}".encode()).hexdigest()[:12]
    return Memory(
        memory_id=mid, user_id=plan.user_id, text=text, created_at=stamp, updated_at=stamp, app_id=plan.app_id,
        metadata={"type": "task_learning", "confidence": 1.0, "source": cons.SOURCE, "reminder": True,
                  "conflicts": skipped, "merges": held},
        vector=np.asarray(embed([text])[0], dtype=np.float32), decision_ids=[did],
    )


# --- plans kept for approval (control topic) ------------------------------------------------------


def save_plan(data_dir: str, plan: cons.Plan) -> Path:
    folder = Path(data_dir) / PLANS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{plan.plan_id}.json"
    path.write_text(json.dumps(plan.to_dict(), ensure_ascii=False), encoding="utf-8")
    return path


def forget_plans(data_dir: str, user: str) -> int:
    """Deletes the pending plans of one user (an erasure: they hold the user's texts); returns how many."""
    folder = Path(data_dir) / PLANS_DIR
    gone = 0
    for path in sorted(folder.glob("plan-*.json")) if folder.is_dir() else []:
        try:
            owner = json.loads(path.read_text(encoding="utf-8")).get("user")
        except (OSError, ValueError):
            continue  # unreadable: not this user's to decide
        if owner == user:
            path.unlink(missing_ok=True)
            gone += 1
    return gone


def plan_user(data_dir: str, plan_id: str) -> str | None:
    """The user of a plan this worker keeps (None: no such plan here, or not a plan id)."""
    if not PLAN_ID.fullmatch(plan_id):
        return None
    try:
        user = json.loads((Path(data_dir) / PLANS_DIR / f"{plan_id}.json").read_text(encoding="utf-8")).get("user")
    except (OSError, ValueError, AttributeError):
        return None
    return user if isinstance(user, str) else None


def plan_from_dict(store: MemoryStore, data: Mapping[str, Any]) -> cons.Plan:
    """Rebuilds a saved plan from the store's current memories; an item with a memory changed since the plan
    saw it (another plan or an update applied, deleted, undone), or that is not the plan's user's (an id
    freed by a hard delete and taken by another user), is left out."""
    ids = [x["a"] for x in data["merges"]] + [x["b"] for x in data["merges"]]
    ids += [x["a"] for x in data["conflicts"]] + [x["b"] for x in data["conflicts"]]
    ids += [x["memory"] for x in data["prunes"]]
    got = store.retrieve(ids, with_vectors=True)
    seen: Mapping[str, str] | None = data.get("seen")  # plans saved before fingerprints: status only

    def live(*mids: str) -> bool:
        return all(mid in got and got[mid].status in ("active", "superseded") and got[mid].user_id == data["user"]
                   and (seen is None or seen.get(mid) == cons.fingerprint(got[mid])) for mid in mids)

    plan = cons.Plan(project=data["project"], user_id=data["user"], app_id=data.get("app"))
    plan.merges = [cons.MergeProposal(got[x["a"]], got[x["b"]], x["merged_text"], x["score"], x.get("held", True))
                   for x in data["merges"] if live(x["a"], x["b"])]
    plan.conflicts = [cons.Conflict(got[x["a"]], got[x["b"]], x["likely"], x["score"], x.get("reason", ""))
                      for x in data["conflicts"] if live(x["a"], x["b"])]
    plan.prunes = [cons.Prune(got[x["memory"]], x["age_days"], x["policy"])
                   for x in data["prunes"] if live(x["memory"])]
    return plan


PLAN_ID = re.compile(r"plan-[0-9a-f]{16}")


def control(proc: Any, command: str, args: Mapping[str, Any], retention: Mapping[str, int | None] | None,
            data_dir: str | None = None,
            observe: Callable[[str, str, float], None] | None = None,
            command_id: str | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The control topic's consolidate.run / approve / reject (runs on the worker's store thread).

    run with mode dry_run saves the plan and replies with it; approve applies it by id, each item as
    `answers` says (agents/consolidation.py `answer_plan`), the rest as proposed (conflicts at their
    likely winner) or, with `rest: skip`, not at all; mode auto applies merges and prunes at once, as
    `dream consolidate --auto`.
    `observe(kind, status, seconds)` is told how each run went (the worker's metrics). With
    `command_id` the pass id comes from it: a redelivered command whose pass was applied (and finished
    by `changes.recover` after a crash) is answered from the pass's record, not run again."""
    started = time.monotonic()
    kind = "approve" if command == "consolidate.approve" else str(args.get("mode", "dry_run"))
    try:
        out = _control(proc, command, args, retention, data_dir or load().data_dir, command_id)
    except Exception:
        if observe:
            observe(kind, "error", time.monotonic() - started)
        raise
    if observe and command != "consolidate.reject":
        observe(kind, "ok", time.monotonic() - started)
    return out


def command_pass_id(command_id: str) -> str:
    """The pass a control command applies: its id from the command's, so a redelivery finds it."""
    return "cons-" + hashlib.sha256(f"command|{command_id}".encode()).hexdigest()[:16]


def command_pass_user(store: MemoryStore, command_id: str) -> str | None:
    """The user of the pass a command applied already (None: it applied none)."""
    found = _pass_holder(store, command_pass_id(command_id))
    return None if found is None else found[1].user_id


def _repeated(store: MemoryStore, command: str, command_id: str | None) -> dict[str, Any] | None:
    if command_id is None or command == "consolidate.reject":
        return None
    pass_id = command_pass_id(command_id)
    record = find_pass(store, pass_id)
    return None if record is None else dict(record.get("outcome") or {"decision_id": pass_id})


def _control(proc: Any, command: str, args: Mapping[str, Any], retention: Mapping[str, int | None] | None,
             data_dir: str, command_id: str | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    policies = {**cons.DEFAULT_RETENTION, **(retention or {})}
    done = _repeated(proc.store, command, command_id)
    if done is not None:
        outcome = cons.Outcome(**done)
        if command == "consolidate.approve":
            (Path(data_dir) / PLANS_DIR / f"{args['plan_id']}.json").unlink(missing_ok=True)
            return {"plan_id": args["plan_id"], "approved": True, "summary": cons.render_summary(outcome),
                    **done}, []
        return {"mode": "auto", "line": cons.auto_line(project_of(str(args["user"]), args.get("app")), outcome),
                **done}, []
    if command == "consolidate.run":
        user, app = str(args["user"]), args.get("app")
        plan, found = make_plan(proc.store, user, app, policies)
        if not found:
            return {"project": plan.project, "found": 0, "message": cons.no_memories(plan.project)}, []
        if args.get("mode", "dry_run") == "auto":
            sure, held = cons.unattended(plan)
            outcome, events = apply_plan(proc.store, proc.embed, sure, reminder=True, held=held,
                                         pass_id=None if command_id is None else new_pass_id(plan, command_id))
            return {"mode": "auto", "line": cons.auto_line(plan.project, outcome), **outcome.to_dict()}, events
        save_plan(data_dir, plan)
        return {"mode": "dry_run", "report": cons.report_without_prompt(plan), **plan.to_dict()}, []
    if not PLAN_ID.fullmatch(str(args["plan_id"])):  # it names a file: never a path
        raise KeyError(f"no pending plan {str(args['plan_id'])[:40]}")
    path = Path(data_dir) / PLANS_DIR / f"{args['plan_id']}.json"
    if not path.exists():
        raise KeyError(f"no pending plan {args['plan_id']}")
    named = args.get("user")
    owner = plan_user(data_dir, str(args["plan_id"]))
    if named is not None and owner is not None and str(named) != owner:
        # An operator who names the wrong user must not apply (or drop) someone else's reviewed pass.
        raise KeyError(f"plan {args['plan_id']} is {owner}'s, not {named}'s: nothing was applied")
    if command == "consolidate.reject":
        path.unlink()
        return {"plan_id": args["plan_id"], "rejected": True}, []
    data = json.loads(path.read_text(encoding="utf-8"))
    rebuilt = plan_from_dict(proc.store, data)
    stale = sum(len(data[k]) for k in ("merges", "conflicts", "prunes")) \
        - len(rebuilt.merges) - len(rebuilt.conflicts) - len(rebuilt.prunes)
    if stale and not (rebuilt.merges or rebuilt.conflicts or rebuilt.prunes):
        # Every item changed since (a reprocess, another pass, an update): "approved" with nothing applied read
        # as done. The plan can never apply: it goes, and the answer says to plan again.
        path.unlink()
        raise ValueError(f"plan {args['plan_id']}: all {stale} items changed since it was made; nothing applied "
                         "(plan again)")
    plan, choices = cons.answer_plan(rebuilt, args.get("answers") or {}, args.get("rest") or "apply")
    held = sum(m.held for m in rebuilt.merges) - sum(m.held for m in plan.merges)  # left for a person
    outcome, events = apply_plan(proc.store, proc.embed, plan, choices, held=held,
                                 pass_id=None if command_id is None else new_pass_id(plan, command_id))
    path.unlink()
    return {"plan_id": args["plan_id"], "approved": True, "summary": cons.render_summary(outcome),
            "stale": stale, **outcome.to_dict()}, events


# --- access, light and full consolidation ---------------------------------------------------------


def record_access(store: MemoryStore, memory_ids: Sequence[str], at: str | None = None,
                  position: tuple[int, int] | None = None) -> int:
    """Notes one read of these memories (read together): last access and count now, the rest pending
    until light consolidation folds it into stability and co-access weights. `position` (the event's Kafka
    partition and offset) makes it once per memory: a memory keeps the last one it counted, and an event
    read again after a crash (offsets are committed about every second) passes over the memories it
    counted already. Returns how many memories it counted."""
    at = at or now_iso()
    got = store.retrieve(list(dict.fromkeys(memory_ids)))
    counted = 0
    for mid, m in got.items():
        done = m.access.get("position")
        if position is not None and isinstance(done, list) and len(done) == 2 and done[0] == position[0] \
                and int(done[1]) >= position[1]:
            continue  # counted when this event was first read
        counted += 1
        access = dict(m.access)
        if position is not None:
            access["position"] = list(position)
        others = [x for x in got if x != mid]
        access["count"] = int(access.get("count", 0)) + 1
        access["last"] = max(str(access.get("last") or ""), at)
        pending = list(access.get("pending") or [])
        pending.append({"at": at, "with": others})
        access["pending"] = pending[-500:]  # a bound, in case light consolidation never runs
        store.update(mid, {"access": access})
    return counted


def _summary(kind: str, started: float, processed: int, changed: Mapping[str, int], dry_run: bool,
             **extra: Any) -> dict[str, Any]:
    return {"status": "ok", "type": kind, "dry_run": dry_run, "duration_seconds": round(time.monotonic() - started, 3),
            "processed": processed, "changed": dict(changed), **extra}


def light(store: MemoryStore, user_id: str | None = None, dry_run: bool = False, *,
          progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Stability from the pending accesses, co-access strengthening, fan-out normalisation, weak links dropped."""
    started = time.monotonic()
    where = {"user_id": user_id} if user_id else None
    by_user: dict[str, list[Memory]] = {}
    for m in store.scroll(where):
        by_user.setdefault(m.user_id, []).append(m)
    changed: Counter[str] = Counter()
    processed = 0
    for memories in by_user.values():
        processed += len(memories)
        if progress is not None:
            progress(len(memories))
        groups: set[tuple[str, tuple[str, ...]]] = set()  # one read: its time and the memories read together
        old_links: cons.Links = {m.memory_id: dict(m.links) for m in memories if m.links}
        updates: dict[str, dict[str, Any]] = {}
        for m in memories:
            pending = m.access.get("pending") or []
            if not pending:
                continue
            stability = float(m.access.get("stability") or cons.INITIAL_STABILITY)
            times = [p["at"] for p in pending]
            stability, _ = cons.replay_accesses(stability, m.access.get("folded_last"), times)
            updates[m.memory_id] = {"access": {**m.access, "stability": round(stability, 4), "pending": [],
                                               "folded_last": max(times)}}
            changed["stability"] += 1
            for p in pending:
                groups.add((p["at"], tuple(sorted({m.memory_id, *p.get("with", [])}))))
        known = {m.memory_id for m in memories}
        new_links = cons.normalise_fanout(cons.strengthen(
            old_links, [[x for x in ids if x in known] for _at, ids in sorted(groups)]))
        for m in memories:
            before, after = old_links.get(m.memory_id, {}), new_links.get(m.memory_id, {})
            if before != after:
                changed["links_dropped"] += len(set(before) - set(after))
                changed["links_strengthened"] += sum(1 for k, w in after.items() if w > before.get(k, 0.0))
                updates.setdefault(m.memory_id, {})["links"] = after
        if not dry_run and updates:
            # One crash-safe change per user (an intent on one memory, rolled forward by `changes.recover`):
            # written memory by memory, a crash left links one way, and the rerun folded the reads still
            # pending a second time into weights the first run had already strengthened.
            holder = min(updates)
            changes.apply(store, changes.Change(change_id=f"light-{holder}", holder=holder, updates=updates))
            if not next(m for m in memories if m.memory_id == holder).outbox:
                store.update(holder, {"outbox_state": "sent"})  # an intent with no events: nothing to send
    if not dry_run:
        store.flush()
    return _summary("light", started, processed, changed, dry_run)


def full(store: MemoryStore, user_id: str | None = None, dry_run: bool = False, *,
         progress: Callable[[int], None] | None = None,
         sample_above: int = cons.SAMPLE_ABOVE, events_out: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Light, then HDBSCAN clusters per user, duplicates merged within a cluster by the decisions
    engine, and the payload indexes rebuilt. The merges' status events are appended to `events_out`
    (stored unsent until then): the caller publishes them, then `changes.sent`."""
    started = time.monotonic()
    light_summary = light(store, user_id, dry_run)
    where: dict[str, Any] = {"status": "active", "kind": "fact"}
    if user_id:
        where["user_id"] = user_id
    by_user: dict[str, list[Memory]] = {}
    for m in store.scroll(where, with_vectors=True):
        by_user.setdefault(m.user_id, []).append(m)
    changed: Counter[str] = Counter()
    events: list[dict[str, Any]] = []
    processed = 0
    clusters = 0
    applier = Processor(store, lambda texts: np.zeros((len(texts), EMBEDDING_DIM), dtype=np.float32))
    for memories in by_user.values():
        processed += len(memories)
        if progress is not None:
            progress(len(memories))
        memories = [m for m in memories if m.vector is not None]
        vectors = np.stack([np.asarray(m.vector) for m in memories]) if memories else np.zeros((0, EMBEDDING_DIM))
        labels = cons.cluster(vectors, [m.memory_type for m in memories], sample_above=sample_above)
        clusters += len(set(labels.tolist()) - {-1})
        for m, label in zip(memories, labels.tolist(), strict=True):
            value = None if label < 0 else int(label)
            if m.cluster != value:
                changed["cluster_assigned"] += 1
                if not dry_run:
                    store.update(m.memory_id, {"cluster": value})
        members: dict[int, list[Memory]] = {}
        for m, label in zip(memories, labels.tolist(), strict=True):
            if label >= 0 and not m.pinned:
                members.setdefault(int(label), []).append(m)
        for group in members.values():
            ordered = sorted(group, key=lambda m: (m.created_at, m.memory_id))
            live: dict[str, Memory] = {}
            for m in ordered:
                decisions = [d for d in applier.decide(m, list(live.values()))  # the configured judge
                             if d.action in ("merge_new", "merge_old")]
                if decisions and not dry_run:
                    result = BatchResult()
                    change = changes.Change(change_id=decisions[0].decision_id, holder=m.memory_id)
                    for d in decisions:
                        for tid, fields in applier.apply_decision(d, m, dict(live), result).items():
                            change.set(tid, fields)
                    change.set(m.memory_id, {k: getattr(m, k) for k in (*LINK_FIELDS, "decision_ids", "decisions")})
                    change.events = result.status_events
                    changes.apply(store, change)  # crash-safe; the events are sent as unsent ones
                    events += result.status_events
                    for d in decisions:
                        for t in d.targets if d.action == "merge_old" else ():
                            live.pop(t, None)
                changed["merged"] += len(decisions)
                if m.status == "active":
                    live[m.memory_id] = m
    if not dry_run:
        rebuild = getattr(store, "rebuild_indexes", None)
        if rebuild is not None:
            rebuild()
        store.flush()
    if events_out is not None:
        events_out.extend(events)
    return _summary("full", started, processed, changed, dry_run, clusters=clusters, light=light_summary,
                    status_events=len(events))


# --- stats and provenance -------------------------------------------------------------------------


def stats(store: MemoryStore, store_dir: str | None = None) -> dict[str, Any]:
    by_status: Counter[str] = Counter()
    by_kind: Counter[str] = Counter()
    by_type: Counter[str] = Counter()
    users: set[str] = set()
    for m in store.scroll():
        by_status[m.status] += 1
        by_kind[m.kind] += 1
        by_type[m.memory_type] += 1
        users.add(m.user_id)
    return {"memories": sum(by_status.values()), "users": len(users), "by_status": dict(by_status),
            "by_kind": dict(by_kind), "by_type": dict(by_type), "last_runs": last_runs(store_dir)}


RUNS_FILE = "consolidation-runs.json"


def runs_file(store_dir: str) -> Path:
    """Inside an embedded store's folder, as its status outbox (`changes.outbox_path`): it goes where the store
    goes, and a read-only parent folder (a volume mounted at the store's path) failed every pass after it had
    applied. A server store's is in DREAM_STATE_DIR."""
    return Path(changes.outbox_location(store_dir, bool(load().qdrant_url))).with_name(RUNS_FILE)


def _legacy_runs_file(store_dir: str) -> Path:
    """Where an earlier version kept it: beside the store's folder."""
    p = Path(store_dir)
    return p.parent / f"{p.name}.consolidation-runs.json"


def note_run(store_dir: str | None, summary: Mapping[str, Any]) -> None:
    """Keeps the last run of each type (light, full, pass) with the store for `dream stats`. Best effort: the run
    has applied already, so a record that cannot be written is a warning, never the run's failure."""
    if not store_dir:
        return
    path = runs_file(store_dir)
    runs = last_runs(store_dir)
    runs[str(summary.get("type", "pass"))] = {**summary, "at": now_iso()}
    try:
        os.makedirs(path.parent, exist_ok=True)
        _write_runs(store_dir, runs)
    except OSError as exc:
        log.warning("the run applied, but its record for dream stats could not be written (%s): %s", path, exc)


def _write_runs(store_dir: str, runs: Mapping[str, Any]) -> None:
    """The runs file written whole; an earlier version's file beside the store goes (it is read until then)."""
    runs_file(store_dir).write_text(json.dumps(runs, ensure_ascii=False, default=str), encoding="utf-8")
    _legacy_runs_file(store_dir).unlink(missing_ok=True)


def forget_runs(store_dir: str | None, user: str) -> bool:
    """Drops an erased user's last runs from `dream stats` (their id must not outlive them); True if any went."""
    runs = last_runs(store_dir)
    mine = [kind for kind, run in runs.items() if isinstance(run, dict) and run.get("user") == user]
    if not store_dir or not mine:
        return False
    _write_runs(store_dir, {kind: run for kind, run in runs.items() if kind not in mine})
    return True


def last_runs(store_dir: str | None) -> dict[str, Any]:
    if not store_dir:
        return {}
    path = runs_file(store_dir)
    try:
        loaded = json.loads((path if path.exists() else _legacy_runs_file(store_dir)).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def provenance(store: MemoryStore, memory_id: str) -> dict[str, Any]:
    """What a memory merged, superseded or was synthesized from, and every decision that touched it."""
    got = store.retrieve([memory_id])
    if memory_id not in got:
        raise KeyError(f"no memory {memory_id}")
    m = got[memory_id]
    linked_ids = [*m.merged_from, *m.supersedes, *m.sources]
    linked_ids += [x for x in (m.merged_into, m.superseded_by) if x]
    linked = store.retrieve(linked_ids)
    holders = list(store.scroll({"decision_ids": m.decision_ids})) if m.decision_ids else []
    decisions = {}
    for h in [m, *holders]:
        for rec in h.decisions:
            if rec.get("decision_id") in m.decision_ids:
                decisions[rec["decision_id"]] = {k: v for k, v in rec.items() if k != "before"}

    def brief(mid: str) -> dict[str, Any]:
        # An id freed by a hard delete may since name another user's memory: shown as gone, never its text;
        # a soft-deleted memory's words are shown in no read that links to it (reads.replaced_by).
        x = linked.get(mid)
        if x is None or x.user_id != m.user_id or x.status == "deleted":
            return {"memory_id": mid, "text": None, "status": "deleted"}
        return {"memory_id": mid, "text": x.text, "status": x.status}

    return {
        "memory": m.export_row(),
        "merged_from": [brief(x) for x in m.merged_from],
        "supersedes": [brief(x) for x in m.supersedes],
        "sources": [brief(x) for x in m.sources],
        "merged_into": brief(m.merged_into) if m.merged_into else None,
        "superseded_by": brief(m.superseded_by) if m.superseded_by else None,
        "conflicts": m.conflicts,
        "decisions": [decisions[d] for d in m.decision_ids if d in decisions],
    }

