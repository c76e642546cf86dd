"""Crash-safe changes outside ingest: consolidation passes, undo, full consolidation's merges.

Ingest keeps a decision crash-safe by writing the new memory first, carrying what its targets still
need (`pending`) and its status events (`outbox`); this module gives every other writer the same
path. A `Change` is computed whole before anything is written, then:

1. one write holds the intent: the holder (a memory the change creates, or else one it updates) gets
   its own fields, every other memory's fields and deletes as `pending`, and the change's status
   events appended to its `outbox` (`outbox_state` unsent);
2. each target is written (absolute fields: a repeat is harmless), deletes last;
3. the holder's `pending` is cleared; publishing the events, then `sent`, are the caller's.

A crash after step 1 is finished by `recover` (the worker's start, and every CLI command that writes)
before anything else touches the store, and the events go out with the other unsent ones; a crash
before step 1 leaves nothing. Fault points (streams/faults.py) sit after each write.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from dreamstream.schemas.events import now_iso
from dreamstream.schemas.memory import Memory
from dreamstream.streams import faults
from dreamstream.streams.store import STORE_MARKER, MemoryStore

log = logging.getLogger(__name__)

DELETE = "$delete"
"""The pending entry of a memory the change deletes (a field name no payload uses)."""


@dataclass
class Change:
    """Everything one writer will do, known before its first write."""

    change_id: str
    holder: str
    """The memory that carries the intent: one the change creates, or one it updates and keeps."""
    creates: list[Memory] = field(default_factory=list)
    updates: dict[str, dict[str, Any]] = field(default_factory=dict)
    deletes: list[str] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)

    def set(self, memory_id: str, fields: dict[str, Any]) -> None:
        """Fields for one memory, merged with what the change already sets there."""
        self.updates.setdefault(memory_id, {}).update(fields)

    @property
    def empty(self) -> bool:
        return not (self.creates or self.updates or self.deletes)


def patterns_quoting(store: MemoryStore, user: str, ids: Sequence[str], status: str = "active") -> list[Memory]:
    """The user's patterns in `status` whose sources name any of `ids`, by id: a change that hides a fact (a
    delete, a supersede, a pass) retires the active ones with it, and its undo looks for the expired ones."""
    found = store.scroll({"user_id": user, "kind": "pattern", "status": status, "sources": sorted(ids)})
    return sorted((p for p in found if p.user_id == user), key=lambda p: p.memory_id)


TOMBSTONE: dict[str, Any] = {
    "status": "deleted", "text": "", "text_key": None, "features": None, "metadata": {}, "decisions": [],
    "conflicts": [], "links": {}, "access": {}, "sources": [], "supersedes": [], "merged_from": [],
    "superseded_by": None, "merged_into": None}
"""What a deleted holder keeps until its change's events are sent: its id, user and those events; no words."""


def gone_key(user: str, memory_id: str, text: str) -> str:
    """A memory deleted for good, as a digest of whose, which and what it said: the same event sent again
    matches it; another user's memory under the freed id, or new words under it, do not."""
    return "gone:" + hashlib.sha256(f"{user}\0{memory_id}\0{text}".encode()).hexdigest()


def bury_deleted(store: MemoryStore, memory_ids: Sequence[str]) -> None:
    """A memory deleted for good stays so: ingest passes over a redelivery of its event (a producer's
    resend, a replayed backfill) instead of storing it again (`Processor._screen`)."""
    found = store.retrieve(list(memory_ids))
    store.bury([gone_key(m.user_id, m.memory_id, m.text) for m in found.values() if m.text], now_iso())


def apply(store: MemoryStore, change: Change) -> None:
    """Writes a change in the crash-safe order above; the caller flushes. A change that only deletes has
    no memory to keep its intent on: its holder is one of the deleted, written first as a tombstone
    (`TOMBSTONE`, hidden from every read) that carries the intent and the events, and is removed by
    `sent` once they are published, so a crash before that loses none of them."""
    if change.empty:
        return
    if change.deletes:  # first: a crash after it leaves the memories, and the change is made again
        bury_deleted(store, change.deletes)
    pending: dict[str, dict[str, Any]] = {
        mid: dict(fields) for mid, fields in change.updates.items() if mid != change.holder}
    for mid in change.deletes:
        pending[mid] = {DELETE: True}
    if change.holder in change.deletes:
        if change.creates or change.updates:
            raise ValueError(f"change {change.change_id}: its holder {change.holder} cannot be deleted")
        current = store.retrieve([change.holder]).get(change.holder)
        if current is None:
            raise KeyError(f"no memory {change.holder}")
        store.update(change.holder, {**TOMBSTONE, "pending": pending, "outbox": [*current.outbox, *change.events],
                                     "outbox_state": "unsent", "updated_at": now_iso()})
        faults.point("stored")
        roll_forward(store, change.holder, pending)
        return
    created = {m.memory_id: m for m in change.creates}
    holder = created.get(change.holder)
    if holder is not None:
        for k, v in change.updates.get(change.holder, {}).items():
            setattr(holder, k, v)
        holder.pending = pending
        holder.outbox = [*holder.outbox, *change.events]
        holder.updated_at = now_iso()
        store.upsert(change.creates)
        faults.point("stored")
    else:
        current = store.retrieve([change.holder]).get(change.holder)
        if current is None:
            raise KeyError(f"no memory {change.holder}")
        # Stamped now: `recover` on a shared store tells a young intent (its writer's) by this time, and a
        # holder last changed months ago (a full pass's kept memory) must not look abandoned at once.
        fields = {**change.updates.get(change.holder, {}), "pending": pending, "updated_at": now_iso()}
        if change.events:
            fields["outbox"] = [*current.outbox, *change.events]
        if change.events or pending:  # `recover` looks among the unsent: an intent without events too
            fields["outbox_state"] = "unsent"
        store.update(change.holder, fields)
        faults.point("stored")
        if change.creates:
            store.upsert(change.creates)
            faults.point("stored")
    roll_forward(store, change.holder, pending)


def roll_forward(store: MemoryStore, holder: str, pending: dict[str, dict[str, Any]]) -> None:
    """Writes each pending target (deletes last), then clears the holder's pending: every step repeats.
    A tombstone holder (deleted by its own change) keeps only its own delete, which `sent` carries out."""
    deletes = [mid for mid, fields in pending.items() if fields.get(DELETE) and mid != holder]
    for mid, fields in pending.items():
        if not fields.get(DELETE):
            store.update(mid, fields)
            faults.point("target")
    if deletes:
        store.delete(deletes)
        faults.point("target")
    if pending:
        store.update(holder, {"pending": {holder: {DELETE: True}} if holder in pending else {}})
    faults.point("applied")


def recover(store: MemoryStore, grace_seconds: float = 0.0) -> list[dict[str, Any]]:
    """Finishes every change (and ingest decision) a crash left half-applied; returns their status
    events, still unsent (the worker sends every unsent event at its start; the CLI sends these).

    Every holder of an intent has unsent events, so the unsent ones are where to look. Targets that
    are gone (a user erased meanwhile) are skipped. With a shared (server) store other workers may be in
    the middle of their own writes: `grace_seconds` leaves intents younger than that to their writer (or
    its redelivery), and each holder is read again just before its intent is finished."""
    events: list[dict[str, Any]] = []
    cutoff = (datetime.now(UTC) - timedelta(seconds=grace_seconds)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    for listed in list(store.scroll({"outbox_state": "unsent"})):
        if not listed.pending or (grace_seconds and listed.updated_at > cutoff):
            continue
        memory = store.retrieve([listed.memory_id]).get(listed.memory_id)
        if memory is None or not memory.pending:
            continue  # finished meanwhile by its own writer
        present = store.retrieve(list(memory.pending))
        pending = {mid: fields for mid, fields in memory.pending.items()
                   if mid in present or fields.get(DELETE)}
        roll_forward(store, memory.memory_id, pending)
        if not pending:
            store.update(memory.memory_id, {"pending": {}})
        events += memory.outbox
    if events:
        store.flush()
    return events


def unsent_of_writers(store: MemoryStore) -> list[dict[str, Any]]:
    """Unsent status events of the writers a CLI runs (passes, undo), as opposed to ingest's, which the
    worker sends: a CLI killed after its last write leaves them, the next CLI command sends them."""
    return [ev for m in store.scroll({"outbox_state": "unsent"}) for ev in m.outbox
            if ev.get("undo") or str(ev.get("action", "")).startswith("consolidate")]


def event_key(ev: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(ev.get(k) for k in ("decision_id", "memory_id", "to_status", "undo", "at"))


def sent(store: MemoryStore, events: Sequence[dict[str, Any]]) -> None:
    """These events were published: they leave the outbox of whichever memory carried them, and only
    they, so that another decision's unsent events on the same memory stay."""
    if not events:
        return
    keys = {event_key(ev) for ev in events}
    users = sorted({str(ev["user_id"]) for ev in events})
    for m in list(store.scroll({"outbox_state": "unsent", "user_id": users})):
        rest = [ev for ev in m.outbox if event_key(ev) not in keys]
        if len(rest) < len(m.outbox):
            if not rest and m.pending.get(m.memory_id, {}).get(DELETE):
                store.delete([m.memory_id])  # a tombstone (`apply`): its events are out, it goes too
                continue
            store.update(m.memory_id, {"outbox": rest, "outbox_state": "unsent" if rest else "sent"})


def write_durably(path: str, data: bytes) -> None:
    """A file written whole or not at all (an intent kept beside the store): a temp file, fsynced,
    renamed into place, the folder fsynced."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    handle = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def holder_of(creates: Sequence[Memory], touched: Sequence[str], deletes: Sequence[str]) -> str | None:
    """The memory to carry a change's intent: the first it creates, else the first it keeps."""
    if creates:
        return creates[0].memory_id
    return next((mid for mid in touched if mid not in set(deletes)), None)


BACKUP = "\x1f"
"""Starts the names a reprocess keeps its copies under (`backup_user`, memory ids): no id a producer sends can
hold it (ids are printable), so no read, write or user ever reaches them."""


def backup_user(user: str) -> str:
    """The user id of a reprocess's copies of `user`'s events (core/ingest.py `reprocess_user`)."""
    return f"{BACKUP}reprocess{BACKUP}{user}"


def read_intent(intent: str) -> dict[str, Any] | None:
    """What an erase request wrote before its delete (`erase_user`); None: it never ran here."""
    try:
        with open(intent, "rb") as f:
            record = orjson.loads(f.read())
        int(record["deleted"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return record if isinstance(record, dict) else None


def erased_count(intent: str) -> int | None:
    """The count an erase request wrote before its delete (`erase_user`); None: it never ran here."""
    record = read_intent(intent)
    return None if record is None else int(record["deleted"])


def erased_at(intent: str) -> list[Any] | None:
    """Where the erase request's record was read when it first ran (topic, partition, offset); None: never
    ran here, or read from no log (a file replay)."""
    try:
        with open(intent, "rb") as f:
            at = orjson.loads(f.read()).get("at")
    except (OSError, ValueError, AttributeError):
        return None
    return at if isinstance(at, list) else None


def erase_user(store: MemoryStore, user: str, intent: str | None = None, at: Sequence[Any] | None = None) -> int:
    """Deletes every memory of one user for good (an erasure: no text kept); returns how many. `bury` keeps a
    digest of each erased memory (user, id, text), so that its event sent again (a producer's resend, a
    replayed backfill) is not stored again (`Processor._screen`); what the user adds after the erasure, in the
    log's order, is theirs, whatever its date.

    With `intent` (a file per request) the first run writes down, before any delete, its count, the ids it
    found and `at` (where its record was read): a request read again after a crash deletes what is left of
    those ids only, never what the user added after it (ingested before the crash), reports the first count,
    and a copy of the record elsewhere in the log is known (`erased_at`)."""
    mine = list(store.scroll({"user_id": user}, with_features=False))
    first = read_intent(intent) if intent is not None else None
    if first is not None and isinstance(first.get("ids"), list):
        chosen = set(map(str, first["ids"]))
        mine = [m for m in mine if m.memory_id in chosen]
    found = int(first["deleted"]) if first is not None else len(mine)
    if intent is not None and first is None:
        write_durably(intent, orjson.dumps({"user": user, "deleted": found, "at": list(at) if at else None,
                                            "ids": [m.memory_id for m in mine]}))
    ids = [m.memory_id for m in mine]
    ids += [m.memory_id for m in store.scroll({"user_id": backup_user(user)}, with_features=False)]  # copies
    store.bury([gone_key(m.user_id, m.memory_id, m.text) for m in mine if m.text], now_iso())
    store.delete(ids)
    store.release_claims(user)  # ids claimed for events that were then refused are the user's too
    store.flush()
    compact(store)
    return found


def compact(store: MemoryStore) -> bool:
    """Rewrites an embedded store without what was deleted (`EdgeStore.compact`): the engine keeps deleted
    texts in its log and pages until then. A server compacts by its own optimizer: False there."""
    rewrite = getattr(store, "compact", None)
    return bool(rewrite()) if callable(rewrite) else False


OUTBOX_FILE = "status-outbox.jsonl"


def outbox_location(store_dir: str, server: bool) -> str:
    """Where a command keeps the status events no broker took: inside an embedded store, so they go where the
    store goes (a backup, a move) and an erase finds them; beside a server store's synthesis state else."""
    if server:
        return os.path.join(os.environ.get("DREAM_STATE_DIR", os.path.join("var", "state")), OUTBOX_FILE)
    return os.path.join(store_dir, OUTBOX_FILE)


def outbox_path(store_dir: str, server: bool) -> str:
    """`outbox_location`, for a command about to send or drop kept events: an earlier version's file, beside
    the store's folder, is taken in first (`adopt_legacy_outbox`)."""
    path = outbox_location(store_dir, server)
    adopt_legacy_outbox(store_dir, path)
    return path


def adopt_legacy_outbox(store_dir: str, path: str) -> int:
    """Moves the events an earlier version kept beside the store's folder (`<parent>/status-outbox.jsonl`,
    which nothing read after an upgrade: a pass's events were never sent, its undo's were) ahead of those at
    `path`, then removes that file; returns how many moved. Only where that folder holds no other store: the
    file does not say whose events it holds, and taken in by a sibling (a scratch store read first) they were
    sent, or erased, only with that one. Best effort: a folder it cannot write leaves the old file as it was."""
    parent = os.path.dirname(os.path.abspath(store_dir)) if store_dir else ""
    legacy = os.path.join(parent, OUTBOX_FILE)
    if not store_dir or os.path.abspath(path) == legacy or not os.path.exists(legacy):
        return 0
    others = [name for name in os.listdir(parent) if os.path.abspath(os.path.join(parent, name))
              != os.path.abspath(store_dir) and os.path.isfile(os.path.join(parent, name, STORE_MARKER))]
    if others:
        log.warning("%s holds status events an earlier version kept for one of the stores in %s (%s is another): "
                    "move it into that store's folder to have them sent", legacy, parent, others[0])
        return 0
    old = kept_events(legacy)
    try:
        if old:
            _write_events(path, [*old, *kept_events(path)])
        os.remove(legacy)
    except OSError as exc:
        log.warning("could not take in the status events an earlier version kept in %s: %s", legacy, exc)
        return 0
    if old:
        log.warning("took in %d status events an earlier version kept in %s; they are sent first", len(old), legacy)
    return len(old)


def kept_events(path: str) -> list[dict[str, Any]]:
    """The status events kept at `path` (`keep_events`), oldest first; a line a crash cut short is skipped."""
    try:
        with open(path, "rb") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    events = []
    for line in lines:
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(event, dict) and isinstance(event.get("user_id"), str):  # keyed by it when sent
            events.append(event)
    return events


def keep_events(path: str, events: Sequence[dict[str, Any]]) -> None:
    """Adds status events to the kept ones, durably: they are sent before anything newer once a broker answers."""
    _write_events(path, [*kept_events(path), *events])


def _write_events(path: str, events: Sequence[dict[str, Any]]) -> None:
    write_durably(path, b"".join(orjson.dumps(e) + b"\n" for e in events))


def drop_kept(path: str, user: str | None = None) -> int:
    """Forgets the kept status events (sent), or only `user`'s (erased: their ids must not outlive them);
    returns how many went."""
    events = kept_events(path)
    rest = [e for e in events if user is not None and e.get("user_id") != user]
    if len(rest) == len(events):
        return 0
    if rest:
        _write_events(path, rest)
    else:
        os.remove(path)
    return len(events) - len(rest)
