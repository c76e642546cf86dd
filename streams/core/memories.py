"""The memory API's services without Faust or HTTP: a new event from a request, one memory, its
history, and filtered, paginated listings. The worker's HTTP pages (worker/api.py) call these."""

from __future__ import annotations

import base64
import hashlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from dreamstream.schemas.events import (
    MAX_EVENT_BYTES,
    MEMORY_ADDED,
    InvalidEvent,
    now_iso,
    parse_memory_event,
    status_event,
)
from dreamstream.schemas.memory import LINK_FIELDS, Memory
from dreamstream.streams.core import changes, consolidation, reads
from dreamstream.streams.store import MemoryStore

FILTERS = ("app_id", "agent_id", "run_id", "kind", "status")
"""Payload fields a listing filters on, as query parameters of the same names (plus `type`, the
metadata type)."""


def new_event(body: Any) -> dict[str, Any]:
    """A `memory.added` event from an HTTP body: `user_id` and `text` are required; `event_id`,
    `memory_id` and `created_at` get fresh values when absent. Raises InvalidEvent (a 400)."""
    return _checked_event(body)[0]


def _checked_event(body: Any) -> tuple[dict[str, Any], str]:
    """`new_event`'s event and its text as ingest stores it (one validation for both)."""
    if not isinstance(body, dict):
        raise InvalidEvent("not_an_object", "the body must be a JSON object (a list for several)")
    if body.get("type", MEMORY_ADDED) != MEMORY_ADDED:
        raise InvalidEvent("unknown_type", "only memories can be added over HTTP (patterns are the worker's own)")
    event = {"type": MEMORY_ADDED, "created_at": now_iso(), **body}
    token = uuid.uuid4().hex[:16]
    event.setdefault("event_id", f"e-{token}")
    event.setdefault("memory_id", f"m-{token}")
    parsed = parse_memory_event(event)  # the same validation as ingest
    size = len(orjson.dumps(event))  # what ingest measures: the record as the API sends it
    if size > MAX_EVENT_BYTES:
        raise InvalidEvent("oversize", f"event is {size} bytes; the limit is {MAX_EVENT_BYTES}")
    return event, parsed.text


def new_events(body: Any) -> list[dict[str, Any]]:
    """One event, or a list of them (add_many): every one valid, or a 400 naming the first bad one."""
    items = body if isinstance(body, list) else [body]
    if not items or len(items) > 1000:
        raise InvalidEvent("bad_field", "give 1 to 1000 memories")
    out = []
    firsts: dict[tuple[str, str], tuple[int, tuple[str, str, str]]] = {}
    for n, item in enumerate(items):
        where = f"item {n}: " if isinstance(body, list) else ""
        try:
            event, text = _checked_event(item)
        except InvalidEvent as exc:
            raise InvalidEvent(exc.reason, where + exc.message) from exc
        # Within one list, as ingest reads it: an id again with other content is refused there, after a 202.
        content = (event["memory_id"], event["user_id"], text)
        for key, reason in (("event_id", "duplicate_event_id"), ("memory_id", "memory_id_conflict")):
            earlier = firsts.setdefault((key, event[key]), (n, content))
            if earlier[1] != content:
                raise InvalidEvent(reason, f"{where}{key} {event[key]} is item {earlier[0]}'s, with other content")
        out.append(event)
    return out


def taken(store: MemoryStore, events: list[dict[str, Any]]) -> str | None:
    """Why ingest would refuse one of these events for what the store holds (a memory id or an event id
    already used for other content, an update of a memory the user does not have), or None: said at once,
    not dead-lettered after a 202."""
    parsed = [parse_memory_event(e) for e in events]
    replaced = [p.replaces for p in parsed if p.replaces]
    stored = store.retrieve([e["memory_id"] for e in events] + replaced)
    by_event = {m.event_id: m for m in store.scroll({"event_id": [e["event_id"] for e in events]}) if m.event_id}
    buried = store.buried([changes.gone_key(p.user_id, p.memory_id, p.text) for p in parsed])
    earlier: set[str] = set()
    for e, p in zip(events, parsed, strict=True):
        if changes.gone_key(p.user_id, p.memory_id, p.text) in buried:
            # Ingest would pass over it (`Processor._screen`): a 202 would be followed by nothing at all.
            return (f"removed_for_good: {e['memory_id']} was erased or deleted for good with these words, and is "
                    "not stored again (a new memory needs a new memory_id or other words)")
        content = (e["memory_id"], e["user_id"], p.text)
        m = stored.get(e["memory_id"])
        if m is not None and (m.user_id, m.text) != content[1:]:
            return f"memory_id_conflict: {e['memory_id']} already stored as another memory"
        m = by_event.get(e["event_id"])
        if m is not None and (m.memory_id, m.user_id, m.text) != content:
            return f"duplicate_event_id: event_id {e['event_id']} was already used for other content"
        target = stored.get(p.replaces) if p.replaces else None
        if p.replaces and p.replaces not in earlier and (
                target is None or target.user_id != p.user_id or target.status == "deleted"):
            return f"bad_field: replaces {p.replaces}: no memory of user {p.user_id} to replace"
        earlier.add(e["memory_id"])
    return None


def get_memory(store: MemoryStore, memory_id: str, user: str) -> dict[str, Any] | None:
    """One memory of this user; None (a 404) for an unknown id and for another user's alike, so that a
    read cannot even tell that someone else's memory exists."""
    got = store.retrieve([memory_id]).get(memory_id)
    if got is None or got.user_id != user:
        return None
    row = reads.row(got)
    reads.replaced_by(store, [row])
    reads.mark_reviews(store, [got], [row])
    return row


UPDATABLE = ("text", "metadata")


def update_event(store: MemoryStore, memory_id: str, user: str, body: Any) -> dict[str, Any] | None:
    """The `memory.added` event of an update (`PATCH`): a new version with the new text and/or metadata
    (merged over the old), the same app, agent, run and project, `replaces` naming the old one, which
    ingest then supersedes (kept as history, undoable). None for an unknown id or another user's."""
    if not isinstance(body, dict) or not body or set(body) - set(UPDATABLE):
        raise InvalidEvent("bad_field", f"an update is a JSON object of {' and/or '.join(UPDATABLE)}")
    if "metadata" in body and not isinstance(body["metadata"], dict):
        raise InvalidEvent("bad_field", "metadata must be an object")
    got = store.retrieve([memory_id]).get(memory_id)
    if got is None or got.user_id != user:
        return None
    if got.status != "active" or got.kind != "fact":
        raise InvalidEvent("bad_field", f"memory {memory_id} is {got.status}: only a current fact can be updated")
    return new_event({"user_id": user, "text": body.get("text", got.text), "replaces": memory_id,
                      "metadata": {**got.metadata, **(body.get("metadata") or {})},
                      **{k: getattr(got, k) for k in ("app_id", "agent_id", "run_id", "project_id")}})


def _links(memory: Memory) -> dict[str, Any]:
    """Its status and links as a decision's before-state (lists copied)."""
    return {k: (list(v) if isinstance(v := getattr(memory, k), list) else v) for k in LINK_FIELDS}


def delete_memory(store: MemoryStore, memory_id: str, user: str) -> list[dict[str, Any]] | None:
    """A soft delete: status `deleted` (hidden from every read mode, kept with its links), one decision
    that `undo` reverts, written crash-safe (core/changes.py). The active patterns drawn from it are
    retired with it (`expired`): their text may quote it. Returns its status events, unsent until
    the caller publishes them (then `changes.sent`); None for an unknown id or another user's.
    ValueError when it is deleted already."""
    got = store.retrieve([memory_id]).get(memory_id)
    if got is None or got.user_id != user:
        return None
    if got.status == "deleted":
        raise ValueError(f"memory {memory_id} is deleted already")
    stamp = now_iso()
    did = "del-" + uuid.uuid4().hex[:16]
    before: dict[str, dict[str, Any]] = {memory_id: _links(got)}
    record = {"decision_id": did, "action": "delete", "new_id": None, "targets": [memory_id], "at": stamp,
              "evidence": {"by": "api"}, "before": before}
    change = changes.Change(change_id=did, holder=memory_id, events=[status_event(
        did, memory_id, user, got.status, "deleted", None, "delete", {"by": "api"})])
    # A pattern drawn from it may quote it: retired with it (expired, kept), and back with its undo.
    for pattern in changes.patterns_quoting(store, user, [memory_id]):
        before[pattern.memory_id] = _links(pattern)
        change.events.append(status_event(did, pattern.memory_id, user, "active", "expired", memory_id, "delete",
                                          {"by": "api", "source_deleted": memory_id}))
        change.set(pattern.memory_id, {"status": "expired", "updated_at": stamp,
                                       "decision_ids": [*pattern.decision_ids, did]})
    change.set(memory_id, {"status": "deleted", "updated_at": stamp, "decision_ids": [*got.decision_ids, did],
                           "decisions": [*got.decisions, record]})
    changes.apply(store, change)
    store.flush()
    return change.events


LINKS = ("superseded_by", "merged_into", "supersedes", "merged_from", "sources")
"""Every field that names another memory."""


def hard_delete_memory(store: MemoryStore, memory_id: str, user: str) -> list[dict[str, Any]] | None:
    """Removes one memory for good (`DELETE ...?hard=true`), with every link to it: a memory it had
    superseded or merged is current again (nothing replaces it now), and a pattern drawn from it goes too
    (its text may quote it; synthesis writes the theme again from what is left). Not undoable. Crash-safe
    (core/changes.py, a linked memory holds the intent). Returns the status events (unsent until the caller
    publishes them); None for an unknown id or another user's."""
    got = store.retrieve([memory_id]).get(memory_id)
    if got is None or got.user_id != user:
        return None
    linked = {v for f in ("superseded_by", "merged_into") if (v := getattr(got, f))}
    linked |= {v for f in ("supersedes", "merged_from", "sources") for v in getattr(got, f)}
    for f in LINKS:
        linked |= {m.memory_id for m in store.scroll({f: memory_id, "user_id": user})}
    # Co-access: memories read together with it keep its id in their links and pending reads.
    linked |= {m.memory_id for m in store.scroll({"user_id": user}, with_features=False) if co_read(m, memory_id)}
    others = {mid: m for mid, m in store.retrieve(sorted(linked - {memory_id})).items() if m.user_id == user}
    # A pattern drawn from it may quote it: removed with it (the next synthesis run writes the theme again
    # from what is left). Nothing else links to a pattern.
    derived = sorted(mid for mid, m in others.items() if m.kind == "pattern" and memory_id in m.sources)
    stamp = now_iso()
    did = "hdel-" + uuid.uuid4().hex[:16]
    evidence = {"by": "api", "hard": True, "removed": memory_id}
    events = [status_event(did, memory_id, user, got.status, "deleted", None, "delete", evidence)]
    events += [status_event(did, mid, user, others[mid].status, "deleted", None, "delete", evidence) for mid in derived]
    for mid in derived:
        del others[mid]
    change = changes.Change(change_id=did, holder=min(others) if others else "", deletes=[memory_id, *derived])
    heir = _heir(got, others)
    inherited: dict[str, list[str]] = {"supersedes": [], "merged_from": []}
    for mid, m in sorted(others.items()):
        fields: dict[str, Any] = {"updated_at": stamp}
        for f in ("superseded_by", "merged_into"):
            if getattr(m, f) == memory_id:
                fields[f] = None
        hidden = fields.keys() & {"superseded_by", "merged_into"} and m.status in ("superseded", "merged")
        if hidden and heir is not None:
            # The memory gone was history itself: what it hid is older still, and stays history behind what
            # replaced it (a restatement of a replaced fact is replaced too). Current again, it showed an outdated
            # value beside the current one.
            link, back = ("merged_into", "merged_from") if got.status == m.status == "merged" \
                else ("superseded_by", "supersedes")
            status = "merged" if link == "merged_into" else "superseded"
            fields.update({link: heir.memory_id, "status": status})
            inherited[back].append(mid)
            events.append(status_event(did, mid, user, m.status, status, heir.memory_id, "delete", evidence))
        elif hidden:
            fields["status"] = "active"  # what replaced it is gone (a deleted or expired one stays so)
            events.append(status_event(did, mid, user, m.status, "active", None, "delete", evidence))
        for f in ("supersedes", "merged_from", "sources"):
            if memory_id in getattr(m, f):
                fields[f] = [x for x in getattr(m, f) if x != memory_id]
        if co_read(m, memory_id):
            fields["links"] = {k: v for k, v in m.links.items() if k != memory_id}
            fields["access"] = {**m.access, "pending": [
                {**p, "with": [x for x in p.get("with") or [] if x != memory_id]}
                for p in m.access.get("pending") or []]}
        change.set(mid, fields)
    if heir is not None and any(inherited.values()):
        now = change.updates.get(heir.memory_id, {})
        change.set(heir.memory_id, {f: [*now.get(f, getattr(heir, f)), *ids] for f, ids in inherited.items() if ids})
    _move_pass_records(store, change, got, set(derived), user)
    change.events = events
    if not change.holder:  # nothing else linked: one the change updates (a pass record's heir), else a tombstone
        change.holder = next((mid for mid in sorted(change.updates) if mid not in change.deletes), memory_id)
    changes.apply(store, change)
    store.flush()
    return events


def _heir(gone: Memory, others: dict[str, Memory]) -> Memory | None:
    """What replaced or absorbed a memory being removed for good, when it was history itself (superseded or
    merged, and that memory is still there and not deleted): the memories it hid are linked to it instead."""
    link = {"superseded": gone.superseded_by, "merged": gone.merged_into}.get(gone.status)
    heir = others.get(link or "")
    return heir if heir is not None and heir.status != "deleted" else None


def _move_pass_records(store: MemoryStore, change: changes.Change, gone: Memory, derived: set[str], user: str) -> None:
    """A consolidation pass keeps its one record on one memory: when that memory goes for good, the record
    moves to another the pass touched that stays, so the rest of the pass can still be undone and shown
    (the deleted one listed as not restorable)."""
    for rec in gone.decisions:
        if rec.get("action") != "consolidate":
            continue
        mid = gone.memory_id
        ids = [x for x in [*rec.get("created", []), *rec.get("targets", [])] if x != mid and x not in derived]
        got = store.retrieve(ids) if ids else {}
        heir = next((got[x] for x in ids if x in got and got[x].user_id == user and got[x].status != "deleted"), None)
        if heir is None:
            continue  # nothing of the pass is left to undo
        moved: dict[str, Any] = {**rec, "deleted": [*rec.get("deleted", []), mid]}
        for k in ("targets", "created"):
            moved[k] = [x for x in rec.get(k, []) if x != mid]
        for k in ("before", "after"):
            if k in rec:
                moved[k] = {x: v for x, v in (rec[k] or {}).items() if x != mid}
        pending = change.updates.get(heir.memory_id, {})
        ids_now = pending.get("decision_ids", heir.decision_ids)
        change.set(heir.memory_id, {
            "decisions": [*pending.get("decisions", heir.decisions), moved],
            "decision_ids": ids_now if rec["decision_id"] in ids_now else [*ids_now, rec["decision_id"]]})


def co_read(memory: Memory, other_id: str) -> bool:
    """Whether `memory` keeps `other_id` as a co-access link or in a pending read (light consolidation)."""
    pending = memory.access.get("pending") or []
    return other_id in memory.links or any(other_id in (p.get("with") or []) for p in pending)


def decision_user(store: MemoryStore, decision_id: str) -> str | None:
    """The user whose memory holds a decision's record (None: no memory holds it)."""
    for holder in store.scroll({"decision_ids": decision_id}):
        if any(rec.get("decision_id") == decision_id for rec in holder.decisions):
            return holder.user_id
    return None


def history(store: MemoryStore, memory_id: str, user: str) -> dict[str, Any] | None:
    """Its decisions (with evidence) and links both ways; None for an unknown id or another user's."""
    got = store.retrieve([memory_id]).get(memory_id)
    if got is None or got.user_id != user:
        return None
    try:
        return consolidation.provenance(store, memory_id)
    except KeyError:
        return None


@dataclass(frozen=True)
class Page:
    rows: list[dict[str, Any]]
    next_cursor: str | None


def read_tag(read: reads.ReadQuery, where: Mapping[str, str]) -> str:
    """Which read a cursor continues: one user's query, mode, floor and filters. A cursor given to another
    read is refused: ana's cursor with user=bob answered bob's rows after ana's place, skipping his first."""
    return hashlib.sha256(orjson.dumps([read.user, read.text, read.mode, read.threshold,
                                        sorted(where.items())])).hexdigest()[:16]


def _cursor(offset: int, tag: str) -> str:
    return base64.urlsafe_b64encode(orjson.dumps({"o": offset, "r": tag})).decode().rstrip("=")


def _key_cursor(key: tuple[int, str, str], tag: str) -> str:
    return base64.urlsafe_b64encode(orjson.dumps({"k": list(key), "r": tag})).decode().rstrip("=")


def _decoded(cursor: str, tag: str) -> dict[str, Any]:
    try:
        value = orjson.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, TypeError) as exc:
        raise ValueError("cursor is not one this API gave out") from exc
    if not isinstance(value, dict):
        raise ValueError("cursor is not one this API gave out")
    if value.get("r") != tag:
        raise ValueError("cursor belongs to another read (another user, query, mode or filter): "
                         "start again without it")
    return value


def _offset(cursor: str | None, tag: str) -> int:
    if not cursor:
        return 0
    value = _decoded(cursor, tag).get("o")
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_OFFSET:
        raise ValueError("cursor is not one this API gave out")
    return value


def _after(cursor: str, tag: str) -> tuple[int, str, str] | None:
    """A listing cursor's last row (its place in the listing's order); None for an offset cursor."""
    value = _decoded(cursor, tag)
    if "k" not in value:
        return None
    key = value["k"]
    if not (isinstance(key, list) and len(key) == 3 and isinstance(key[0], int) and not isinstance(key[0], bool)
            and all(isinstance(x, str) and len(x) <= 512 for x in key[1:])):
        raise ValueError("cursor is not one this API gave out")
    return key[0], key[1], key[2]


def _listing_key(r: Mapping[str, Any]) -> tuple[int, str, str]:
    """A row's place in a listing: `reads.get`'s order (current first, each group oldest first, then id)."""
    return reads.group_of(r.get("status")), str(r.get("created_at") or ""), str(r["memory_id"])


MAX_OFFSET = 1_000_000
"""The deepest page a cursor may point at (a cursor of 2**63 once answered 500)."""


READ_PARAMS = ("user", "q", "latest_only", "include_merged", "limit", "cursor", "threshold", "type", *FILTERS)
"""What a listing or search accepts, besides `metadata.<key>` filters on any metadata key."""


def check_params(params: Mapping[str, str]) -> None:
    """A parameter the API does not know is refused (a typo must not return everything)."""
    for name in params:
        if name not in READ_PARAMS and not (name.startswith("metadata.") and len(name) > len("metadata.")):
            raise ValueError(f"unknown parameter {name[:40]!r}: a read takes {', '.join(READ_PARAMS)} "
                             "and metadata.<key> filters")


def filters(params: Mapping[str, str]) -> dict[str, str]:
    """The filters of a read: payload fields, `type` (metadata.type) and any `metadata.<key>`. An empty
    value is refused: it is what an unset variable gives, and dropped it would return every app's rows."""
    where = {k: v for k, v in params.items() if k in (*FILTERS, "type") or k.startswith("metadata.")}
    for k, v in where.items():
        if not v:
            raise ValueError(f"{k[:40]} is empty: name a value (an unset variable?)")
    return where


def _field(row: Mapping[str, Any], key: str) -> str:
    """A field as a filter reads it: text as is, anything else in JSON (`true`, `3`, `null`)."""
    metadata = row.get("metadata") or {}
    if key == "type":
        value = metadata.get("type")
    elif key.startswith("metadata."):
        value = metadata.get(key.removeprefix("metadata."))
    else:
        value = row.get(key)
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def list_page(store: MemoryStore, embed: Any, read: reads.ReadQuery, where: Mapping[str, str],
              cursor: str | None) -> Page:
    """A read (a listing, or a search with `read.text`) with filters, `read.limit` rows from the cursor on.

    A search's pages are consecutive slices of one order (its matches by score, filters applied before
    slicing), each page current facts first: together they show every match once, and the first page is
    what `reads.search` gives. A listing's cursor is its last row's place in the listing's order, not a
    count: a memory added (or replaced) between pages moves no row onto a later page twice, nor off it."""
    tag = read_tag(read, where)
    after = _after(cursor, tag) if cursor and not read.text else None
    start = _offset(cursor, tag) if after is None else 0

    def keep(r: Mapping[str, Any]) -> bool:
        return all(_field(r, k) == v for k, v in where.items())

    if read.text:
        threshold = read.threshold

        judged: dict[str, bool] = {}  # each match once, however often the depth grows

        def wanted(x: reads.Scored) -> bool:
            mid = x[0].memory_id
            if mid not in judged:
                judged[mid] = (threshold is None or x[1] >= threshold) and keep(x[0].export_row())
            return judged[mid]

        matches = reads.ranked(store, embed, read.user, read.text, read.mode,
                               lambda sure: sum(map(wanted, sure)) > start + read.limit, threshold, keep=wanted)
        matches = [x for x in matches if wanted(x)]
        more = len(matches) > start + read.limit
        page = reads.current_first_rows(store, matches[start:start + read.limit])
        return Page(rows=page, next_cursor=_cursor(start + read.limit, tag) if more else None)
    rows = [r for r in reads.get(store, read.user, read.mode) if keep(r)]
    if after is not None:
        rows = [r for r in rows if _listing_key(r) > after]
    page = rows[start:start + read.limit]
    more = len(rows) > start + read.limit
    return Page(rows=page, next_cursor=_key_cursor(_listing_key(page[-1]), tag) if more and page else None)
