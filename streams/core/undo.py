"""Undo: one decision, or a whole consolidation pass, reverted from the before-state its record keeps.

Apart from ingest and the consolidation runs so that both can offer undo without importing each other.
An undo is a `changes.Change`: computed whole, then written crash-safe (its intent and status events
with the first write, finished by `changes.recover` after a crash).
"""

from __future__ import annotations

from typing import Any

from dreamstream.agents.consolidation import SOURCE as PASS_SOURCE
from dreamstream.agents.decisions import HIDDEN_ON_ARRIVAL
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


def plan_undo(store: MemoryStore, decision_id: str, by: str | None = None, user: str | None = None) -> changes.Change:
    """What reverting one decision writes: both sides get their earlier status and links back, and
    the record is marked undone (by `by`, a command id, so that a redelivered command is known).

    Raises KeyError when no memory holds the decision (or, with `user`, no memory of that user: a request
    in one user's name never reverts another's decision), AlreadyUndone when it was undone already.
    """
    holders = {m.memory_id: m for m in store.scroll({"decision_ids": decision_id})}
    record, owner = None, None
    for memory in holders.values():
        for rec in memory.decisions:
            if rec.get("decision_id") == decision_id:
                record, owner = rec, memory
    if record is None or owner is None:
        raise KeyError(f"no decision {decision_id}")
    if user is not None and owner.user_id != user:
        raise KeyError(f"no decision {decision_id} for user {user}")
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
            # the deleted memory, and the patterns retired with it (expired; a later run may have moved them on)
            if m is not None and m.user_id == owner.user_id and (
                    m.status == "deleted" or (m.kind == "pattern" and m.status == "expired"
                                              and _quotes_only_current(store, m, record, owner.user_id))):
                restored = own_links(store, fields, owner.user_id)
                change.events.append(status_event(decision_id, mid, m.user_id, m.status, restored["status"], None,
                                                  "undo", evidence, undo=True))
                change.set(mid, {**restored, "updated_at": stamp})
        for mid in record.get("targets", []):
            # A pattern another delete retired while this one already stood (so this record does not list it):
            # back too, once every source it quotes is current again.
            for p in changes.patterns_quoting(store, owner.user_id, [mid], "expired"):
                if p.memory_id in change.updates or not (p.decision_ids and p.decision_ids[-1].startswith("del-")):
                    continue  # listed here, or retired by synthesis since (its run decides)
                if _quotes_only_current(store, p, record, owner.user_id):
                    change.events.append(status_event(decision_id, p.memory_id, p.user_id, "expired", "active", None,
                                                      "undo", evidence, undo=True))
                    change.set(p.memory_id, {"status": "active", "updated_at": stamp})
    else:
        # Only the decision's own user's memories: an id freed by a hard delete may since name another user's.
        members = {k: m for k, m in store.retrieve([new_id, *record["targets"]]).items() if m.user_id == owner.user_id}
        new = members.get(new_id)
        if new is not None and action in HIDDEN_ON_ARRIVAL and record["targets"]:
            # The new memory was hidden behind its target: merged into it, or (said before it, arrived late)
            # superseded by it.
            hidden = HIDDEN_ON_ARRIVAL[action]
            link, back = HIDDEN_BY[hidden]
            canonical = members.get(record["targets"][0])
            before = record["before"][new_id]["status"]
            if new.status == hidden and getattr(new, link) == record["targets"][0]:
                # still as the decision left it (a person's delete, or a later merge elsewhere, outranks it)
                change.set(new_id, {"status": before, link: None, "updated_at": stamp})
                change.events.append(status_event(decision_id, new_id, new.user_id, hidden, before, None, "undo",
                                                  evidence, undo=True))
            if canonical is not None:
                change.set(canonical.memory_id, {
                    back: [x for x in getattr(canonical, back) if x != new_id], "updated_at": stamp})
        elif new is not None and action in ("merge_old", "supersede"):
            link = "merged_into" if action == "merge_old" else "superseded_by"
            back = "merged_from" if action == "merge_old" else "supersedes"
            left = "merged" if action == "merge_old" else "superseded"
            came_back = False
            for tid in record["targets"]:
                t = members.get(tid)
                if t is None:
                    continue
                if t.status != left or getattr(t, link) != new_id:
                    # Changed since (deleted by a person, replaced again): the link goes, the status stays.
                    change.set(tid, {link: None, "updated_at": stamp} if getattr(t, link) == new_id
                               else {"updated_at": stamp})
                    continue
                before = record["before"][tid]["status"]
                change.set(tid, {"status": before, link: None, "updated_at": stamp})
                change.events.append(status_event(decision_id, tid, t.user_id, t.status, before, None, "undo",
                                                  evidence, undo=True))
                came_back = True
            change.set(new_id, {back: [x for x in getattr(new, back) if x not in record["targets"]],
                                "updated_at": stamp})
            if came_back:  # the old text is current again; else (deleted since) the edit is all the user has
                _withdraw_edit(record, new, change, decision_id, evidence, stamp)
        if action == "supersede":  # the patterns it retired with the fact it superseded
            _restore_patterns(store, record, decision_id, change, evidence, stamp, owner.user_id)
    settle(store, change, owner.user_id, decision_id, evidence, stamp)
    marked = [dict(rec, undone=True, undone_at=stamp, undone_by=by, undo_events=len(change.events))
              if rec.get("decision_id") == decision_id else rec for rec in owner.decisions]
    change.set(owner.memory_id, {"decisions": marked})
    return change


HIDDEN_BY = {"superseded": ("superseded_by", "supersedes"), "merged": ("merged_into", "merged_from")}
"""A hidden status, the link that says what hides it, and the list on that memory that names it back."""
BACK = {"supersedes": "superseded_by", "merged_from": "merged_into"}


def settle(store: MemoryStore, change: changes.Change, user: str, decision_id: str, evidence: dict[str, Any],
           stamp: str) -> None:
    """Leaves every memory an undo touches consistent with the decisions that still stand. Undos in any
    order restore saved before-states, and a state saved before a later decision was undone names links
    that no longer hold: a memory `superseded` or `merged` behind one that does not name it back (or that
    the undo of its pass expired) is current again, and a shown memory's list names only memories that name
    it back (an expired or deleted one keeps its lists: its history). A
    memory a consolidation pass created, whose pass was undone while a later merge kept it, expires with
    the last memory merged into it. Nothing else changes: no memory's text, no other user's memory."""
    stored: dict[str, Memory | None] = {}  # each memory read once: only the change moves while settling

    def read(ids: list[str]) -> dict[str, Memory]:
        missing = [x for x in ids if x not in stored]
        if missing:
            got = store.retrieve(missing)
            stored.update({x: got.get(x) for x in missing})
        return {x: m for x in ids if (m := stored[x]) is not None and m.user_id == user}

    for _ in range(4):  # a memory set free can leave another's list stale: a few rounds settle a chain
        touched = [mid for mid in change.updates if mid not in change.deletes]
        state = {mid: _fields(m, change.updates.get(mid, {})) for mid, m in read(touched).items()}
        linked = {x for f in state.values() for k in ("supersedes", "merged_from") for x in f[k]}
        linked |= {f[k] for f in state.values() for k in ("superseded_by", "merged_into") if f[k]}
        state |= {mid: _fields(m, change.updates.get(mid, {})) for mid, m in read(sorted(linked - set(state))).items()}
        moved = False
        for mid in touched:
            f = state.get(mid)
            if f is None:
                continue
            for lst, single in BACK.items():
                if f["status"] in ("expired", "deleted"):
                    break  # hidden for good or by a person: its lists are its history, kept as they were
                kept = [x for x in f[lst] if x in state and state[x][single] == mid]
                if kept != f[lst]:
                    change.set(mid, {lst: kept, "updated_at": stamp})
                    moved = True
            if f["status"] in HIDDEN_BY:
                link, back = HIDDEN_BY[f["status"]]
                holder = state.get(f[link] or "")
                if holder is None or holder["status"] == "expired" or mid not in holder[back]:
                    change.set(mid, {"status": "active", link: None, "updated_at": stamp})
                    _moved_to(change, decision_id, mid, user, f["status"], "active", evidence)
                    moved = True
        if not moved:
            break
    for mid, m in sorted(read(sorted(change.updates)).items()):
        after = _fields(m, change.updates.get(mid, {}))
        # (its pass's undo may have emptied its list already, when it was merged on or deleted at the time)
        made = m.metadata.get("source") == PASS_SOURCE and not m.metadata.get("reminder")
        if (m.merged_from or made) and not after["merged_from"] and after["status"] == "active" \
                and _pass_undone(store, m):
            change.set(mid, {"status": "expired", "updated_at": stamp})
            _moved_to(change, decision_id, mid, user, "active", "expired", evidence)


def _withdraw_edit(record: dict[str, Any], new: Memory, change: changes.Change, decision_id: str,
                   evidence: dict[str, Any], stamp: str) -> None:
    """Undoing a person's edit (a `replaces` update, not the judge's supersede) reverts the edit: the version it
    wrote is withdrawn (`deleted`: hidden from every read, kept, by id it still answers), or the old and the new
    text were both current. Only while nothing has joined or replaced that version since (then it stays)."""
    ev = record.get("evidence") or {}
    if ev.get("judge") != "user" or ev.get("rule") != "update" or new.status != "active" \
            or new.merged_from or set(new.supersedes) - set(record["targets"]):
        return
    change.set(new.memory_id, {"status": "deleted", "updated_at": stamp})
    change.events.append(status_event(decision_id, new.memory_id, new.user_id, "active", "deleted", None, "undo",
                                      {**evidence, "edit_withdrawn": True}, undo=True))


def _quotes_only_current(store: MemoryStore, pattern: Memory, record: dict[str, Any], user: str) -> bool:
    """Whether a pattern a delete or a supersede retired may come back with its undo: none of its other
    sources was deleted, replaced or expired since (it quotes them as current; the next synthesis run writes
    the theme again from what holds). A merged source is still said, by the memory it was merged into."""
    back = set(record.get("before", {}))
    others = [x for x in pattern.sources if x not in back]
    got = store.retrieve(others) if others else {}
    return all((m := got.get(x)) is not None and m.user_id == user
               and m.status not in ("deleted", "superseded", "expired") for x in others)


def _restore_patterns(store: MemoryStore, record: dict[str, Any], decision_id: str, change: changes.Change,
                      evidence: dict[str, Any], stamp: str, user: str) -> None:
    """A supersede's undo: the patterns it retired come back, unless something moved them on since (a
    synthesis run, a delete) or another of their sources no longer holds."""
    ids = [x for x in record.get("before", {}) if x != record["new_id"] and x not in record["targets"]]
    for mid, p in sorted((store.retrieve(ids) if ids else {}).items()):
        if p.user_id != user or p.kind != "pattern" or p.status != "expired" or not p.decision_ids \
                or p.decision_ids[-1] != decision_id or not _quotes_only_current(store, p, record, user):
            continue
        change.events.append(status_event(decision_id, mid, user, "expired", "active", None, "undo", evidence,
                                          undo=True))
        change.set(mid, {"status": "active", "updated_at": stamp})


def _moved_to(change: changes.Change, decision_id: str, mid: str, user: str, was: str, status: str,
              evidence: dict[str, Any]) -> None:
    """One status event per memory and undo: a status the change had already set is corrected in its
    event (from the status stored to the one written), never announced and then taken back."""
    for ev in change.events:
        if ev["memory_id"] == mid:
            ev["to_status"] = status
            if ev["from_status"] == status:
                change.events.remove(ev)
            return
    change.events.append(status_event(decision_id, mid, user, was, status, None, "undo", evidence, undo=True))


def _fields(m: Memory, pending: dict[str, Any]) -> dict[str, Any]:
    """A memory's status and links as they will be once the change is written."""
    out = {k: pending.get(k, getattr(m, k)) for k in ("status", "superseded_by", "merged_into")}
    out |= {k: list(pending.get(k, getattr(m, k)) or []) for k in ("supersedes", "merged_from")}
    return out


def _pass_undone(store: MemoryStore, m: Memory) -> bool:
    """Whether `m` was created by a consolidation pass that has been undone (it stayed only for what was
    merged into it since)."""
    for did in m.decision_ids:
        for holder in store.scroll({"decision_ids": did}):
            for rec in holder.decisions:
                if rec.get("decision_id") == did and rec.get("action") == "consolidate" \
                        and m.memory_id in rec.get("created", []):
                    return bool(rec.get("undone"))
    return False


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


def _kept(now: Any, left: Any) -> bool:
    """A field as a pass left it, or only without links the undo of another decision took away since (its
    status, and any link added since, make it a later decision's)."""
    if isinstance(now, list):
        return set(now) <= set(left or [])
    return bool(now == left or (now is None and left))


def undo_decision(store: MemoryStore, decision_id: str, by: str | None = None,
                  user: str | None = None) -> changes.Change:
    """Reverts one decision (see `plan_undo`) and returns the change written; its events are the
    caller's to publish, then `changes.mark_sent`."""
    change = plan_undo(store, decision_id, by, user)
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
            return left is not None and all(_kept(getattr(m, k), left.get(k)) for k in left)
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
