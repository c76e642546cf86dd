"""Undo: one decision, or a whole consolidation pass, reverted from the before-state its record keeps.

Apart from ingest and the consolidation runs so that both can offer undo without importing each other.
"""

from __future__ import annotations

from typing import Any

from dreamstream.schemas.events import now_iso, status_event
from dreamstream.schemas.memory import Memory
from dreamstream.streams.store import MemoryStore


def undo_decision(store: MemoryStore, decision_id: str) -> list[dict[str, Any]]:
    """Reverts one decision: both sides get their earlier status and links back.

    Raises KeyError when no memory holds the decision, ValueError when it was undone already.
    """
    holders = {m.memory_id: m for m in store.scroll({"decision_ids": decision_id})}
    record = None
    for memory in holders.values():
        for rec in memory.decisions:
            if rec.get("decision_id") == decision_id:
                record, owner = rec, memory
    if record is None:
        raise KeyError(f"no decision {decision_id}")
    if record.get("undone"):
        raise ValueError(f"decision {decision_id} was already undone")
    action, new_id = record["action"], record["new_id"]
    if action == "consolidate":  # a whole consolidation pass (streams/core/consolidation.py)
        reverted = undo_pass(store, record, decision_id)
        _mark_undone(store, owner.memory_id, decision_id)
        return reverted
    events: list[dict[str, Any]] = []
    evidence = {"undo_of": decision_id, "original": record.get("evidence", {})}
    members = store.retrieve([new_id, *record["targets"]])
    new = members.get(new_id)

    def restore(m: Memory, fields: dict[str, Any]) -> None:
        for k, v in fields.items():
            setattr(m, k, v)
        store.update(m.memory_id, {**fields, "updated_at": now_iso()})

    if new is not None and action == "merge_new" and record["targets"]:
        canonical = members.get(record["targets"][0])
        before = record["before"][new_id]["status"]
        restore(new, {"status": before, "merged_into": None})
        events.append(status_event(decision_id, new_id, new.user_id, "merged", before, None, "undo", evidence,
                                   undo=True))
        if canonical is not None:
            restore(canonical, {"merged_from": [x for x in canonical.merged_from if x != new_id]})
    elif new is not None and action in ("merge_old", "supersede"):
        link = "merged_into" if action == "merge_old" else "superseded_by"
        back = "merged_from" if action == "merge_old" else "supersedes"
        for tid in record["targets"]:
            t = members.get(tid)
            if t is None:
                continue
            before = record["before"][tid]["status"]
            current = t.status
            restore(t, {"status": before, link: None})
            events.append(status_event(decision_id, tid, t.user_id, current, before, None, "undo", evidence,
                                       undo=True))
        restore(new, {back: [x for x in getattr(new, back) if x not in record["targets"]]})
    _mark_undone(store, owner.memory_id, decision_id)
    return events


def _mark_undone(store: MemoryStore, owner_id: str, decision_id: str) -> None:
    owner = store.retrieve([owner_id])[owner_id]
    for rec in owner.decisions:
        if rec.get("decision_id") == decision_id:
            rec["undone"] = True
            rec["undone_at"] = now_iso()
    store.update(owner_id, {"decisions": owner.decisions})


def undo_pass(store: MemoryStore, record: dict[str, Any], decision_id: str) -> list[dict[str, Any]]:
    """Reverts a consolidation pass: every touched memory gets its before-state, what it created
    expires (kept, hidden). Hard-deleted memories cannot come back; the record says which they were."""
    events: list[dict[str, Any]] = []
    evidence = {"undo_of": decision_id, "deleted_not_restored": record.get("deleted", [])}
    members = store.retrieve([*record.get("targets", []), *record.get("created", [])])
    stamp = now_iso()
    for mid, fields in record.get("before", {}).items():
        m = members.get(mid)
        if m is None:
            continue
        if m.status != fields["status"]:
            events.append(status_event(decision_id, mid, m.user_id, m.status, fields["status"], None, "undo",
                                       evidence, undo=True))
        store.update(mid, {**fields, "updated_at": stamp})
    for mid in record.get("created", []):
        m = members.get(mid)
        if m is not None and m.status != "expired":
            events.append(status_event(decision_id, mid, m.user_id, m.status, "expired", None, "undo", evidence,
                                       undo=True))
            store.update(mid, {"status": "expired", "updated_at": stamp})
    return events
