"""Undo: one decision, or a whole consolidation pass, reverted from the before-state its record keeps.

Apart from ingest and the consolidation runs so that both can offer undo without importing each other.
An undo is a `changes.Change`: computed whole, then written crash-safe (its intent and status events
with the first write, finished by `changes.recover` after a crash).
"""

from __future__ import annotations

from typing import Any

from dreamstream.schemas.events import now_iso, status_event
from dreamstream.schemas.memory import Memory
from dreamstream.streams.core import changes
from dreamstream.streams.store import MemoryStore


class AlreadyUndone(ValueError):
    """The decision was undone already; `mine` when by the same request (a redelivered command)."""

    def __init__(self, decision_id: str, mine: bool, events: int = 0) -> None:
        super().__init__(f"decision {decision_id} was already undone")
        self.mine = mine
        self.events = events


def plan_undo(store: MemoryStore, decision_id: str, by: str | None = None) -> changes.Change:
    """What reverting one decision writes: both sides get their earlier status and links back, and
    the record is marked undone (by `by`, a command id, so that a redelivered command is known).

    Raises KeyError when no memory holds the decision, AlreadyUndone when it was undone already.
    """
    holders = {m.memory_id: m for m in store.scroll({"decision_ids": decision_id})}
    record, owner = None, None
    for memory in holders.values():
        for rec in memory.decisions:
            if rec.get("decision_id") == decision_id:
                record, owner = rec, memory
    if record is None or owner is None:
        raise KeyError(f"no decision {decision_id}")
    if record.get("undone"):
        raise AlreadyUndone(decision_id, by is not None and record.get("undone_by") == by,
                            int(record.get("undo_events") or 0))
    stamp = now_iso()
    change = changes.Change(change_id=f"undo-{decision_id}", holder=owner.memory_id)
    evidence: dict[str, Any] = {"undo_of": decision_id, "original": record.get("evidence", {})}
    action, new_id = record["action"], record["new_id"]
    if action == "consolidate":  # a whole consolidation pass (streams/core/consolidation.py)
        _undo_pass(store, record, decision_id, change, stamp, owner.user_id)
    elif action == "delete":  # a soft delete (streams/core/memories.py): its before-state comes back
        for mid, fields in record.get("before", {}).items():
            m = store.retrieve([mid]).get(mid)
            if m is not None and m.status == "deleted" and m.user_id == owner.user_id:
                restored = own_links(store, fields, owner.user_id)
                change.events.append(status_event(decision_id, mid, m.user_id, "deleted", restored["status"], None,
                                                  "undo", evidence, undo=True))
                change.set(mid, {**restored, "updated_at": stamp})
    else:
        # Only the decision's own user's memories: an id freed by a hard delete may since name another user's.
        members = {k: m for k, m in store.retrieve([new_id, *record["targets"]]).items() if m.user_id == owner.user_id}
        new = members.get(new_id)
        if new is not None and action == "merge_new" and record["targets"]:
            canonical = members.get(record["targets"][0])
            before = record["before"][new_id]["status"]
            if new.status == "merged":  # still as the decision left it (a person's delete since outranks it)
                change.set(new_id, {"status": before, "merged_into": None, "updated_at": stamp})
                change.events.append(status_event(decision_id, new_id, new.user_id, "merged", before, None, "undo",
                                                  evidence, undo=True))
            if canonical is not None:
                change.set(canonical.memory_id, {
                    "merged_from": [x for x in canonical.merged_from if x != new_id], "updated_at": stamp})
        elif new is not None and action in ("merge_old", "supersede"):
            link = "merged_into" if action == "merge_old" else "superseded_by"
            back = "merged_from" if action == "merge_old" else "supersedes"
            left = "merged" if action == "merge_old" else "superseded"
            for tid in record["targets"]:
                t = members.get(tid)
                if t is None:
                    continue
                if t.status != left:
                    # Changed since (deleted by a person, replaced again): the link goes, the status stays.
                    change.set(tid, {link: None, "updated_at": stamp} if getattr(t, link) == new_id
                               else {"updated_at": stamp})
                    continue
                before = record["before"][tid]["status"]
                change.set(tid, {"status": before, link: None, "updated_at": stamp})
                change.events.append(status_event(decision_id, tid, t.user_id, t.status, before, None, "undo",
                                                  evidence, undo=True))
            change.set(new_id, {back: [x for x in getattr(new, back) if x not in record["targets"]],
                                "updated_at": stamp})
    marked = [dict(rec, undone=True, undone_at=stamp, undone_by=by, undo_events=len(change.events))
              if rec.get("decision_id") == decision_id else rec for rec in owner.decisions]
    change.set(owner.memory_id, {"decisions": marked})
    return change


def own_links(store: MemoryStore, fields: dict[str, Any], user: str) -> dict[str, Any]:
    """Saved before-fields with only the links that still name a memory of `user`: a hard delete since the
    decision frees an id, and another user's memory may hold it now (restoring the link showed that memory's
    text in this user's history)."""
    ids = [x for k in ("supersedes", "merged_from") for x in fields.get(k) or []]
    ids += [x for k in ("superseded_by", "merged_into") if (x := fields.get(k))]
    got = store.retrieve(ids) if ids else {}
    mine = {mid for mid, m in got.items() if m.user_id == user}
    out = dict(fields)
    for k in ("supersedes", "merged_from"):
        if k in out:
            out[k] = [x for x in out[k] or [] if x in mine]
    for k, left in (("superseded_by", "superseded"), ("merged_into", "merged")):
        if out.get(k) and out[k] not in mine:
            out[k] = None
            if out.get("status") == left:
                out["status"] = "active"  # what replaced it is gone: current again, as a hard delete leaves it
    return out


def undo_decision(store: MemoryStore, decision_id: str, by: str | None = None) -> changes.Change:
    """Reverts one decision (see `plan_undo`) and returns the change written; its events are the
    caller's to publish, then `changes.mark_sent`."""
    change = plan_undo(store, decision_id, by)
    changes.apply(store, change)
    store.flush()
    return change


def _undo_pass(store: MemoryStore, record: dict[str, Any], decision_id: str, change: changes.Change,
               stamp: str, user: str) -> None:
    """A consolidation pass: every touched memory gets its before-state, what it created expires
    (kept, hidden). Hard-deleted memories cannot come back; the record says which they were. Only the
    pass's user's memories, and none a person deleted since (their delete outranks the undo)."""
    evidence = {"undo_of": decision_id, "deleted_not_restored": record.get("deleted", [])}
    members = {k: m for k, m in store.retrieve([*record.get("targets", []), *record.get("created", [])]).items()
               if m.user_id == user}
    before_all: dict[str, dict[str, Any]] = record.get("before", {})
    ours = set(before_all) | set(record.get("created", []))

    after: dict[str, dict[str, Any]] | None = record.get("after")

    def as_left(m: Memory) -> bool:
        """Its status and links are what the pass left (a record from before "after" was kept: no decision
        touched it since, every decision appending its id)."""
        if after is not None:
            left = after.get(m.memory_id)
            return left is not None and all(
                (list(v) if isinstance(v := getattr(m, k), list) else v) == left.get(k) for k in left)
        return bool(m.decision_ids) and m.decision_ids[-1] == decision_id

    for mid, fields in before_all.items():
        m = members.get(mid)
        if m is None or (m.status == "deleted" and fields.get("status") != "deleted"):
            continue
        if not as_left(m):
            # Changed since (an update, a merge, another pass): its state now is a later decision's. Only the
            # links this pass added to its lists go; its status and the rest stay.
            lists = {f: [x for x in getattr(m, f) if x in fields.get(f, []) or x not in ours]
                     for f in ("supersedes", "merged_from")}
            change.set(mid, {**{f: v for f, v in lists.items() if v != getattr(m, f)}, "updated_at": stamp})
            continue
        restored = own_links(store, fields, user)
        if m.status != restored["status"]:
            change.events.append(status_event(decision_id, mid, m.user_id, m.status, restored["status"], None,
                                              "undo", evidence, undo=True))
        change.set(mid, {**restored, "updated_at": stamp})
    for mid in record.get("created", []):
        m = members.get(mid)
        if m is None or m.status == "expired":
            continue
        if not as_left(m):
            # Something joined it since (a memory merged into it) or a person changed it: it stays, without the
            # originals this undo brings back, so nothing merged into it disappears from reads.
            change.set(mid, {"merged_from": [x for x in m.merged_from if x not in before_all],
                             "updated_at": stamp})
            continue
        change.events.append(status_event(decision_id, mid, m.user_id, m.status, "expired", None, "undo",
                                          evidence, undo=True))
        change.set(mid, {"status": "expired", "updated_at": stamp})
