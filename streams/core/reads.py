"""Dream's three read modes, shared by the Python API, the HTTP endpoint and the CLI.

default: active + superseded (labelled history) + patterns; merged and expired hidden.
latest_only: active only (patterns included). include_merged: everything.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np

from dreamstream.agents.consolidation import RANK_FLOOR, memory_rank_factor, now_utc
from dreamstream.agents.merge_supersede import said_later
from dreamstream.schemas.memory import Memory
from dreamstream.streams.store import MemoryStore

Mode = Literal["default", "latest_only", "include_merged"]
STATUSES: dict[str, tuple[str, ...] | None] = {
    "default": ("active", "superseded"),
    "latest_only": ("active",),
    "include_merged": ("active", "superseded", "merged", "expired"),
}
"""What each read mode shows; a soft-deleted memory (`deleted`) is in none of them (by id it still answers)."""


def mode_from_flags(latest_only: bool = False, include_merged: bool = False) -> Mode:
    if latest_only and include_merged:
        raise ValueError("latest_only and include_merged exclude each other")
    return "latest_only" if latest_only else "include_merged" if include_merged else "default"


MAX_LIMIT = 1000
"""The most rows one read returns (HTTP `limit`); more is a paginated read (not offered yet)."""
_TRUE, _FALSE = ("1", "true", "yes", "on", ""), ("0", "false", "no", "off")


@dataclass(frozen=True)
class ReadQuery:
    user: str
    mode: Mode
    limit: int
    text: str | None
    threshold: float | None = None
    """A search's floor on `relevance` (the raw similarity, 0..1), before decay ranks what is left."""


def user_param(params: Mapping[str, str]) -> str:
    """The `user` every read names, checked (ValueError for a 400): reads are per user, never stripped."""
    user = params.get("user") or ""
    if not user.strip():
        raise ValueError("name a user (?user=...): every read and change here is one user's")
    if user != user.strip() or not user.isprintable() or "/" in user or "\\" in user or user in (".", ".."):
        # The same rule as a stored user id (`events.check_id`): no such user can exist, so say so.
        raise ValueError(f"user must be printable, without surrounding spaces or a path: {user[:40]!r}")
    return user


def read_query(params: Mapping[str, str]) -> ReadQuery:
    """The HTTP read parameters, checked: ValueError with the reason for a 400. `limit` defaults to 50
    for a search and to MAX_LIMIT for a listing."""
    user = user_param(params)
    flags = {}
    for name in ("latest_only", "include_merged"):
        value = params.get(name)
        if value is not None and value.lower() not in _TRUE + _FALSE:
            raise ValueError(f"{name} must be 1/true or 0/false, not {value[:20]!r}")
        flags[name] = value is not None and value.lower() in _TRUE
    mode = mode_from_flags(flags["latest_only"], flags["include_merged"])
    text = params.get("q")
    if text is not None and not text.strip():  # an unset variable in a URL: as `dream search ""`, an error
        raise ValueError("q is empty: give the text to search for, or leave q out to list")
    raw = params.get("limit", "50" if text else str(MAX_LIMIT))
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= MAX_LIMIT:  # "²" is a digit to isdigit
        raise ValueError(f"limit must be a whole number from 1 to {MAX_LIMIT}, not {raw[:20]!r}")
    threshold = params.get("threshold")
    floor = None
    if threshold is not None:
        if text is None:
            raise ValueError("threshold applies to a search: give q=TEXT with it")
        try:
            floor = float(threshold)
        except ValueError:
            floor = -1.0
        if not 0.0 <= floor <= 1.0:
            raise ValueError(f"threshold must be a number from 0 to 1, not {threshold[:20]!r}")
    return ReadQuery(user=user, mode=mode, limit=int(raw), text=text, threshold=floor)


def _where(user_id: str, mode: str) -> dict[str, Any]:
    if not user_id:
        raise ValueError("a read must name a user")
    if mode not in STATUSES:
        raise ValueError(f"unknown read mode {mode!r}")
    where: dict[str, Any] = {"user_id": user_id}
    statuses = STATUSES[mode]
    if statuses is not None:
        where["status"] = list(statuses)
    return where


def label(memory: Memory) -> str:
    """What a reader is shown beside the text: current, history, pattern, merged, expired."""
    if memory.kind == "pattern":
        return "pattern"
    return {"active": "current", "superseded": "history"}.get(memory.status, memory.status)


def row(memory: Memory, score: float | None = None) -> dict[str, Any]:
    out = memory.export_row()
    out["label"] = label(memory)
    if memory.access:
        out["access_count"] = int(memory.access.get("count", 0))
        out["last_accessed_at"] = memory.access.get("last")
    if score is not None:
        out["score"] = round(score, 4)
    return out


def current_first(memory: Memory) -> int:
    """0 for what holds now (active facts, patterns), 1 for history, 2 for merged and expired: every
    read lists current facts before history, so a replaced fact never tops a search."""
    return group_of(memory.status)


def group_of(status: str | None) -> int:
    """`current_first` by a status alone (a row's)."""
    return 0 if status == "active" else 1 if status == "superseded" else 2


def final_heirs(store: MemoryStore, heads: Mapping[str, tuple[str, str | None]],
                with_vectors: bool = False, known: Mapping[str, Memory] | None = None) -> dict[str, Memory]:
    """For each key, (its user, the memory that replaced or absorbed it), the memory at the end of that chain
    of replacements: the last one of the same user (an id freed by a hard delete may since name another
    user's). One store call per step of the longest chain, not per key; `known` saves the calls it can."""
    found: dict[str, Memory] = dict(known or {})
    asked: set[str] = set()

    def end(target: str | None) -> str | None:
        """Where the chain from `target` leaves what is known: the next id to fetch."""
        seen = set[str]()
        while target and target in found and target not in seen:
            seen.add(target)
            target = found[target].superseded_by or found[target].merged_into
        return target if target and target not in found else None

    for _ in range(20):  # chains are short; the bound only guards against a loop
        wanted = sorted({x for _, head in heads.values() if (x := end(head))} - asked)
        if not wanted:
            break
        asked.update(wanted)
        found.update(store.retrieve(wanted, with_vectors=with_vectors))
    out: dict[str, Memory] = {}
    for key, (user, target) in heads.items():
        seen = set[str]()
        while target and target in found and target not in seen and found[target].user_id == user:
            seen.add(target)
            out[key] = found[target]
            target = found[target].superseded_by or found[target].merged_into
    return out


def replaced_by(store: MemoryStore, rows: list[dict[str, Any]]) -> None:
    """Each history (or merged) row names the memory that holds now, following a chain of
    replacements, even when that memory is hidden in the read mode asked for (its text too, unless it
    was deleted: a deleted memory's words are shown nowhere)."""
    finals = final_heirs(store, {r["memory_id"]: (r["user_id"], r.get("superseded_by") or r.get("merged_into"))
                                 for r in rows})
    for row in rows:
        final = finals.get(row["memory_id"])
        if final is not None:  # a deleted memory's text is hidden from every read: its id and status only
            row["replaced_by"] = {"memory_id": final.memory_id, "status": final.status,
                                  **({"text": final.text} if final.status != "deleted" else {})}


def open_reviews(store: MemoryStore, memories: Sequence[Memory]) -> dict[str, dict[str, Any]]:
    """Per memory, the review item still waiting on it: a pair the judge would not decide alone (the
    proposal, `supersede` or `merge`, and the other memory). The newer memory holds the item; the
    older one only has its decision id, so those are looked up in one call. Open means: not undone,
    and both memories still current (a pass or an undo that changed either settled it)."""
    items: dict[str, tuple[Memory, dict[str, Any]]] = {}
    for m in memories:
        for item in m.conflicts:
            if item.get("review"):
                items[item["decision_id"]] = (m, item)
    elsewhere = sorted({d for m in memories for d in m.decision_ids} - set(items))
    if elsewhere and memories:
        for holder in store.scroll({"user_id": memories[0].user_id, "decision_ids": elsewhere}):
            for item in holder.conflicts:
                if item.get("review") and item["decision_id"] in elsewhere:
                    items[item["decision_id"]] = (holder, item)
    known = {m.memory_id: m for m in memories}
    missing = {t for _, item in items.values() for t in item.get("with", [])} - set(known)
    if missing:
        known.update(store.retrieve(sorted(missing)))
    out: dict[str, dict[str, Any]] = {}
    for did, (newer, item) in items.items():
        undone = any(r.get("decision_id") == did and r.get("undone") for r in newer.decisions)
        others = [known.get(t) for t in item.get("with", [])]
        if undone or newer.status != "active" or not others or any(
                o is None or o.status != "active" or o.user_id != newer.user_id for o in others):
            continue  # settled, or an id freed by a hard delete that now names another user's memory
        for other in others:
            assert other is not None
            # "newer": the one said later, which may replace the other (the holder arrived later, but a late
            # event may have been said before: its mark said it would replace what was said after it).
            late = said_later(other, newer)
            out.setdefault(newer.memory_id, {"decision_id": did, "proposal": item["review"],
                                             "side": "older" if late else "newer",
                                             "with": {"memory_id": other.memory_id, "text": other.text}})
            out.setdefault(other.memory_id, {"decision_id": did, "proposal": item["review"],
                                             "side": "newer" if late else "older",
                                             "with": {"memory_id": newer.memory_id, "text": newer.text}})
    return out


def review_note(review: Mapping[str, Any]) -> str:
    """A review mark in words, for people (the CLI)."""
    other = review["with"]
    quoted = f'{other["memory_id"]} ("{other["text"][:60]}")'
    if review["proposal"] == "merge":
        return f"review: may be the same as {quoted}"
    if review["side"] == "newer":
        return f"review: may replace {quoted}"
    return f"review: may be replaced by {quoted}"


def mark_reviews(store: MemoryStore, memories: Sequence[Memory], rows: list[dict[str, Any]]) -> None:
    """Puts `review` on each row with an open review item (see `open_reviews`)."""
    marks = open_reviews(store, memories)
    for r in rows:
        if r["memory_id"] in marks:
            r["review"] = marks[r["memory_id"]]


def get(store: MemoryStore, user_id: str, mode: str = "default") -> list[dict[str, Any]]:
    """A user's memories, current ones first, each group oldest first; a row with an open review item
    says so (`review`)."""
    memories = sorted(store.scroll(_where(user_id, mode), with_features=False),
                      key=lambda m: (current_first(m), m.created_at, m.memory_id))
    rows = [row(m) for m in memories]
    replaced_by(store, [r for r in rows if r["label"] in ("history", "merged")])
    mark_reviews(store, memories, rows)
    return rows


Scored = tuple[Memory, float, float]
"""A match: the memory, its raw relevance (cosine) and its ranked score (relevance times its rank factor)."""


def ranked(
    store: MemoryStore,
    embed: Callable[[Sequence[str]], np.ndarray],
    user_id: str,
    text: str,
    mode: str,
    enough: Callable[[list[Scored]], bool],
    min_relevance: float | None = None,
    keep: Callable[[Scored], bool] | None = None,
) -> list[Scored]:
    """The user's matches in score order (ties by id), as many as `enough` needs, exactly: a prefix of the
    order over all the user's memories, whatever depth was read. The store returns the nearest by
    relevance; a memory it did not return is no more relevant than the last it did, and its factor is at
    most 1, so only matches scoring above that bound are sure of their place. Reads deeper until
    `enough` holds for those, or every memory was read, or (with `min_relevance`) every memory left unread is
    less relevant than that. Each history match's current heir is then placed before it (`heirs_first`)."""
    vector = embed([text])[0]
    now = now_utc()
    where = _where(user_id, mode)
    depth = 32
    while True:
        hits = store.nearest(vector, where, depth, with_features=False)
        scored = sorted(((m, s, s * memory_rank_factor(m, now)) for m, s in hits),
                        key=lambda x: (-x[2], x[0].memory_id))
        last = hits[-1][1] if hits else 0.0
        if len(hits) < depth or (min_relevance is not None and last < min_relevance):
            return heirs_first(store, scored, vector, now, keep)  # every memory (that may be wanted) was read
        bound = last if last >= 0 else last * RANK_FLOOR
        sure = [x for x in scored if x[2] > bound]
        if enough(sure):
            return heirs_first(store, sure, vector, now, keep)
        depth *= 4


def heirs_first(store: MemoryStore, matches: Sequence[Scored], vector: np.ndarray, now: Any,
                keep: Callable[[Scored], bool] | None = None) -> list[Scored]:
    """`matches` (in score order) with the current fact that replaced a history match (or absorbed a
    merged one) placed just before it, fetched when it ranked lower or was not read: a search never shows
    a replaced fact without what holds now, even at `limit` 1 ("where does Ana live" -> Porto, then
    Lisbon as history). It only moves memories earlier, so the first N rows depend on the first N matches
    and their heirs alone, and consecutive pages still show every match once. `keep` (a page's filters)
    must hold for the history match and its heir alike."""
    keep = keep or (lambda _x: True)
    older = [x[0] for x in matches if x[0].status in ("superseded", "merged") and keep(x)]
    if not older:
        return list(matches)
    placed = {m.memory_id: (m, r, s) for m, r, s in matches}
    finals = final_heirs(store, {m.memory_id: (m.user_id, m.superseded_by or m.merged_into) for m in older},
                         with_vectors=True, known={mid: x[0] for mid, x in placed.items()})
    q = np.asarray(vector, np.float32)
    heir_of: dict[str, Scored] = {}
    for m in older:
        heir = finals.get(m.memory_id)
        if heir is None or heir.status != "active":
            continue
        if heir.memory_id in placed:
            found = placed[heir.memory_id]
        elif heir.vector is not None:
            v = np.asarray(heir.vector, np.float32)
            rel = float(q @ v / max(float(np.linalg.norm(q) * np.linalg.norm(v)), 1e-12))
            found = (replace(heir, vector=None), rel, rel * memory_rank_factor(heir, now))
        else:
            continue
        if keep(found):
            heir_of[m.memory_id] = found
    out: list[Scored] = []
    shown: set[str] = set()
    for match in matches:
        h = heir_of.get(match[0].memory_id)
        if h is not None and h[0].memory_id not in shown:
            out.append(h)
            shown.add(h[0].memory_id)
        if match[0].memory_id not in shown:
            out.append(match)
            shown.add(match[0].memory_id)
    return out


def current_first_rows(store: MemoryStore, matches: Sequence[Scored]) -> list[dict[str, Any]]:
    """Rows of `matches` (already chosen by score), current facts first, each group by score."""
    ordered = sorted(matches, key=lambda x: (current_first(x[0]), -x[2], x[0].memory_id))
    rows = []
    for m, relevance, score in ordered:
        r = row(m, score)
        r["relevance"] = round(relevance, 4)
        rows.append(r)
    replaced_by(store, [r for r in rows if r["label"] in ("history", "merged")])
    mark_reviews(store, [m for m, _, _ in ordered], rows)
    return rows


def search(
    store: MemoryStore,
    embed: Callable[[Sequence[str]], np.ndarray],
    user_id: str,
    text: str,
    mode: str = "default",
    limit: int = 10,
) -> list[dict[str, Any]]:
    """The `limit` best matches, ranked by relevance times a retrievability factor (decay biases
    ranking, it never hides a memory: the factor has a floor), a replaced match's current fact placed
    before it (`heirs_first`), then listed current facts first and history after; each row keeps its raw
    `relevance` beside the ranked `score`. The first page of the API's search (`memories.list_page`) is
    the same rows."""
    best = ranked(store, embed, user_id, text, mode, lambda sure: len(sure) >= limit)[:limit]
    return current_first_rows(store, best)
