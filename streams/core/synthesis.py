"""Running synthesis against a store: durable settings, per-user state, gates, and pattern events.

Settings and state live in one small JSON file (`synthesis_state.json`) beside the embedded store, or
under `$DREAM_STATE_DIR` (default `var/state`) for a server store::

    {"projects": {"<project_id or _default>": {"enabled": true, "boundary": "<ISO time>"}},
     "users": {"<user_id>": {"last_run": "<ISO time>", "evidence_used": ["m-1", ...],
                             "read_digest": "...", "read_patterns": ["p-...", ...]}}}

Synthesis is off for every project until enabled; enabling sets a forward boundary so only memories
created after it are evidence (history is never rewritten). A run does not write to the store: it
returns `pattern.added` event dicts that the caller feeds to `Processor.process`, so patterns are
stored by the same ingest path as from the stream.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from dreamstream.agents import synthesis as syn
from dreamstream.schemas.errors import DreamError
from dreamstream.schemas.events import PATTERN_ADDED, normalise_time, now_iso
from dreamstream.schemas.memory import Memory
from dreamstream.streams.store import MemoryStore

Embed = Callable[[list[str]], np.ndarray]
WriteText = Callable[[str, Sequence[str]], "str | None"]
"""Optional pattern wording (label, member texts oldest first, each after its month) -> text, or None: keep the
offline text. `agents.pattern_writer.LLMPatternWriter` is one."""
ReadThemes = syn.ReadThemes
"""Optional grouping by a reader of the whole record (`agents.theme_reader.LLMThemeReader`); offline otherwise."""

STATE_FILE = "synthesis_state.json"
DEFAULT_PROJECT = "_default"
CADENCE_DAYS = 7.0
"""The weekly schedule: a user is synthesised again once this much time has passed since their last run."""
SOURCE = "dream-synthesis"


# --- state ---------------------------------------------------------------------------------------


def state_path(store_dir: str | os.PathLike[str] | None, server: bool = False) -> Path:
    """`<store_dir>/synthesis_state.json` for the embedded store; `$DREAM_STATE_DIR/...` for a server."""
    if server or not store_dir:
        return Path(os.environ.get("DREAM_STATE_DIR", os.path.join("var", "state"))) / STATE_FILE
    return Path(store_dir) / STATE_FILE


@dataclass
class SynthesisState:
    """Per-project settings and per-user run state; `save` writes it atomically (if it has a path)."""

    path: Path | None = None
    projects: dict[str, dict[str, Any]] = field(default_factory=dict)
    users: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None) -> SynthesisState:
        if path is None:
            return cls()
        p = Path(path)
        if not p.exists():
            return cls(path=p)
        data = json.loads(p.read_text(encoding="utf-8") or "{}")
        return cls(path=p, projects=dict(data.get("projects") or {}), users=dict(data.get("users") or {}))

    def to_json(self) -> dict[str, Any]:
        return {"projects": self.projects, "users": self.users}

    def save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, self.path)

    def project(self, project_id: str | None) -> dict[str, Any] | None:
        """The settings of an enabled project (None -> `_default`), or None when synthesis is off there."""
        settings = self.projects.get(project_id or DEFAULT_PROJECT)
        return settings if settings and settings.get("enabled") else None


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def enable(state: SynthesisState, project: str | None, boundary: str | None = None) -> dict[str, Any]:
    """Turn synthesis on for a project; only memories created after `boundary` (default: now) are evidence.

    Enabling a project that is already on keeps its boundary unless a new one is given.
    """
    key = project or DEFAULT_PROJECT
    current = state.projects.get(key) or {}
    if boundary is not None:
        chosen = normalise_time(boundary, "boundary")
    elif current.get("boundary"):
        chosen = str(current["boundary"])
    else:
        chosen = _now()
    state.projects[key] = {"enabled": True, "boundary": chosen}
    state.save()
    return state.projects[key]


def disable(state: SynthesisState, project: str | None) -> dict[str, Any]:
    """Turn synthesis off for a project (its boundary is kept for a later enable)."""
    key = project or DEFAULT_PROJECT
    settings = dict(state.projects.get(key) or {})
    settings["enabled"] = False
    state.projects[key] = settings
    state.save()
    return settings


# --- runs ----------------------------------------------------------------------------------------


@dataclass
class RunRecord:
    user_id: str
    ran: bool = False
    reason: str = ""
    """Why the user was skipped (disabled, too_few_memories, not_due; unchanged: the reader already read exactly
    this evidence), or "" when it ran."""
    memories_considered: int = 0
    themes: int = 0
    patterns_written: int = 0
    patterns_updated: int = 0
    patterns_unchanged: int = 0
    patterns_retired: int = 0
    text_fallbacks: int = 0
    """Patterns a configured writer could not word (endpoint down, unusable reply): offline text kept."""
    themes_by: str = "offline"
    """Who grouped the themes: `llm` (the configured reader) or `offline` (no reader, or it gave no usable answer)."""
    theme_fallback: bool = False
    """A reader was configured but gave no usable answer, so the offline grouping ran."""
    read_digest: str | None = None
    """What the reader read (`synthesis.reading_digest`) when it grouped this run; None otherwise, or when
    patterns of the reading were dropped before they were sent (`drop_unsourced`)."""
    duration_seconds: float = 0.0
    pattern_ids: list[str] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    retired: list[str] = field(default_factory=list)
    """Ids of this user's earlier synthesis patterns that the run no longer finds: `apply` expires them
    (hidden by default, kept; if the theme comes back, its topic-derived id comes back with it)."""

    def describe(self) -> str:
        if not self.ran:
            return f"{self.user_id}: skipped ({self.reason})"
        return (f"{self.user_id}: {self.memories_considered} memories considered, {self.themes} themes, "
                f"{self.patterns_written} patterns written, {self.patterns_updated} updated, "
                f"{self.patterns_unchanged} unchanged, {self.patterns_retired} retired in {self.duration_seconds:.2f}s"
                + (f" ({self.text_fallbacks} worded offline: the writer failed)" if self.text_fallbacks else "")
                + (" (grouped offline: the reader failed)" if self.theme_fallback else ""))


def pattern_event(theme: syn.Theme, now: str, project_id: str | None = None,
                  text_by: str = "offline") -> dict[str, Any]:
    """The `pattern.added` event for one theme; the same theme, evidence and text -> the same event_id (a
    redelivery), a new wording of the same evidence -> a new one (ingest refuses an event_id reused for other
    text, and a reader that words a theme anew, or a retired one that comes back, must be stored)."""
    sources = sorted(theme.memory_ids)
    digest = hashlib.sha1(f"{theme.pattern_id}|{'|'.join(sources)}|{theme.text}".encode()).hexdigest()[:16]
    event: dict[str, Any] = {
        "type": PATTERN_ADDED,
        "event_id": f"syn-{theme.pattern_id}-{digest}",
        "memory_id": theme.pattern_id,
        "user_id": theme.user_id,
        "text": theme.text,
        "created_at": now,
        "sources": sources,
        "kind": "pattern",
        "metadata": {"type": "pattern", "confidence": 1.0, "pinned": False, "source": SOURCE,
                     "text_by": text_by},
    }
    if project_id:
        event["project_id"] = project_id
    return event


def _evidence(state: SynthesisState, facts: Sequence[Memory]) -> tuple[list[Memory], str | None]:
    """Eligible evidence from the enabled projects, each after its own boundary; and the main project."""
    out: list[Memory] = []
    counts: dict[str | None, int] = {}
    for project_id, members in _by_project(facts).items():
        settings = state.project(project_id)
        if settings is None:
            continue
        chosen = syn.eligible(members, settings.get("boundary"))
        out += chosen
        counts[project_id] = len(chosen)
    main = max(counts, key=lambda p: (counts[p], p or ""), default=None)
    return out, main


def _by_project(memories: Sequence[Memory]) -> dict[str | None, list[Memory]]:
    groups: dict[str | None, list[Memory]] = defaultdict(list)
    for m in memories:
        groups[m.project_id].append(m)
    return groups


def run_memories(
    user_id: str,
    memories: Sequence[Memory],
    embed: Embed,
    now: str,
    state: SynthesisState,
    force: bool,
    cadence_days: float,
    write_text: WriteText | None = None,
    read_themes: ReadThemes | None = None,
) -> RunRecord:
    """One user's step on their memories as read from the store (facts and patterns); touches no store, so a
    caller may run it off its store thread (an LLM reader or writer can take a while)."""
    start = time.perf_counter()
    record = RunRecord(user_id=user_id)
    now = normalise_time(now, "now")
    facts = [m for m in memories if m.kind == "fact"]
    patterns = [m for m in memories if m.kind == "pattern"]
    enabled = any(state.project(p) is not None for p in {m.project_id for m in facts})
    if not enabled:
        record.reason = "disabled"
        return record
    if syn.gate_count(facts) < syn.MIN_MEMORIES:
        record.reason = "too_few_memories"
        return record
    last_run = None if force else (state.users.get(user_id) or {}).get("last_run")
    if not syn.is_due(True, syn.gate_count(facts), last_run, now, cadence_days):
        record.reason = "not_due"
        return record
    evidence, project_id = _evidence(state, facts)
    found_themes: list[syn.Theme] | None = None
    digest = None
    if evidence and read_themes is not None:
        digest = syn.reading_digest(evidence, str(getattr(read_themes, "reading_id", "")))
    last = state.users.get(user_id) or {}
    stored = {p.memory_id for p in patterns if p.user_id == user_id}
    # What a pattern may stand on: the eligible evidence, and the current facts of projects whose synthesis
    # is off now (disabling is reversible and touches no memory: their patterns are not this run's to retire).
    standing = {m.memory_id for m in evidence} | {
        m.memory_id for m in facts if m.status == "active" and state.project(m.project_id) is None}
    status_of = {m.memory_id: m.status for m in facts}

    def outdated(p: Memory) -> bool:
        """It quotes a fact that is no longer current (deleted, replaced, expired, gone): it would state it."""
        return any(status_of.get(s) in (None, "deleted", "superseded", "expired") for s in p.sources)

    ours = [p for p in patterns
            if p.status == "active" and p.user_id == user_id and p.metadata.get("source") == SOURCE]
    # A pattern whose evidence has gone below a theme's worth (deleted, superseded, older than the lines a
    # reader is shown), or that quotes a fact no longer current, must still be retired: that is no reading's
    # to skip.
    stale = any(len(standing & set(p.sources)) < syn.MIN_THEME_SIZE or outdated(p) for p in ours)
    if digest is not None and last.get("read_digest") == digest and not stale \
            and set(last.get("read_patterns") or ()) <= stored:
        # The same reader read exactly this last time (in this process or another) and its patterns are all
        # still stored (in whatever state a person or a later run left them): its answer stands. A restated
        # fact merged away, a forced re-run or a restarted worker asks nothing, so patterns stay as they are.
        # A pattern gone from the store (never written after a crash, a rebuilt store, an erased user whose
        # memories came back) means the reading has to be done again.
        record.reason = "unchanged"
        record.themes_by = "llm"  # its patterns are the reader's (a run record said offline: read as a failure)
        return record
    project_of_id = {m.memory_id: m.project_id for m in evidence}
    if digest is not None and read_themes is not None:
        found_themes = syn.read_themes(evidence, embed, read_themes)
        record.themes_by, record.theme_fallback = ("llm", False) if found_themes is not None else ("offline", True)
    if found_themes is None:
        # Each project's evidence on its own: one pattern mixed two projects' memories under one project's
        # label, and enabling one project reworded another's patterns (an audit).
        found_themes = [t for group in _by_project(evidence).values()
                        for t in syn.find_themes(group, embed, judged_overlap())]
    else:  # a reader saw every enabled project at once: a theme across projects belongs to none of them
        found_themes = [t for t in found_themes if len({project_of_id[m] for m in t.memory_ids
                                                         if m in project_of_id}) <= 1]
    own_patterns = [p for p in patterns if p.user_id == user_id]
    themes = syn.match_existing(syn.not_declined(found_themes, own_patterns), patterns)
    existing = {p.memory_id: p for p in patterns}
    read_before = {p.memory_id for p in patterns if p.metadata.get("text_by") == "llm"}
    if record.theme_fallback:
        # The reader's patterns wait for the reader: the offline grouping neither rewrites nor retires them.
        themes = [t for t in themes if t.pattern_id not in read_before]
    for theme in themes:
        old = existing.get(theme.pattern_id)
        if old is not None and old.status == "deleted":
            continue  # a person deleted it (its topic's id, other evidence): no run brings it back
        record.pattern_ids.append(theme.pattern_id)
        # A writer that failed once this run is not asked again in it (each failure waits out its retries).
        writer_up = write_text is not None and record.themes_by != "llm" and not record.text_fallbacks
        if old is not None and old.status == "active" and sorted(old.sources) == sorted(theme.memory_ids) \
                and (old.metadata.get("text_by", "offline") != "offline" or (old.text == theme.text and not writer_up)):
            # Same evidence: a written sentence is not asked for again; an offline one is, while a writer is
            # configured and answering (an audit: one outage left the offline wording for good).
            record.patterns_unchanged += 1
            continue
        text_by = "offline"
        if record.themes_by == "llm":
            text_by = "llm"  # the reader worded it with the grouping
        elif write_text is not None and record.text_fallbacks:
            record.text_fallbacks += 1  # failed already this run: offline wording, no new wait
        elif write_text is not None:
            worded = write_text(theme.label, theme.dated() or (theme.text,))
            if worded:
                theme, text_by = replace(theme, text=worded), "llm"
            else:
                record.text_fallbacks += 1
        if old is None:
            record.patterns_written += 1
        else:
            record.patterns_updated += 1
        members = Counter(project_of_id.get(mid) for mid in theme.memory_ids)
        theme_project = max(members, key=lambda p: (members[p], p == project_id, p or ""), default=project_id)
        record.events.append(pattern_event(theme, now, theme_project, text_by))  # its own sources' project
    found = set(record.pattern_ids)
    # Additive offline: a pattern this run did not reproduce stays while its evidence stands (clustering
    # may simply have drawn the lines elsewhere this time); it is retired once fewer than a theme's worth
    # of its sources are still eligible (superseded, merged, or the boundary moved past them), or once one
    # of the facts it quotes is no longer current (deleted, replaced): it would state that fact as current. A reader's
    # answer is the person's themes as of now: what it no longer names is retired (expired, kept, and back
    # with its id when a later reading names it again). Kept as well, its patterns piled up run after run.
    # An empty reading retires nothing: a reader that suddenly sees no theme at all is more likely wrong
    # than every theme at once. Nor does a reading retire what it could not see: a pattern with fewer than a
    # theme's worth of sources among the lines shown (a long record shows only the most recent ones) stays
    # under the additive rule, so a heavy user's older patterns do not vanish as the window moves on.
    reread = record.themes_by == "llm" and bool(found_themes)
    shown = {m.memory_id for m in syn.shown_to_reader(evidence)} if reread else set()
    record.retired = sorted(
        p.memory_id for p in ours
        if p.memory_id not in found
        and (outdated(p)
             or (not (record.theme_fallback and p.memory_id in read_before)
                 and ((reread and len(shown & set(p.sources)) >= syn.MIN_THEME_SIZE)
                      or len(standing & set(p.sources)) < syn.MIN_THEME_SIZE))))
    record.patterns_retired = len(record.retired)
    record.ran = True
    record.memories_considered = len(evidence)
    record.themes = len(themes)
    state.users[user_id] = {
        "last_run": now,
        "evidence_used": sorted({mid for t in themes for mid in t.memory_ids}),
    }
    if record.themes_by == "llm" and digest is not None:
        record.read_digest = digest
        state.users[user_id] |= {"read_digest": digest, "read_patterns": list(record.pattern_ids)}
    record.duration_seconds = time.perf_counter() - start
    return record


def apply(store: MemoryStore, records: Sequence[RunRecord]) -> None:
    """Expires the patterns the runs retired: hidden from default reads, kept (nothing is lost).

    New and updated patterns go through `Processor.process`; a retired theme that comes back gets its
    topic-derived id back and is rewritten active.
    """
    stamp = now_iso()
    for r in records:
        if not r.retired:
            continue
        # Read again: in a worker the store may have changed since the run read it (a pattern deleted or
        # erased meanwhile stays as it is).
        now_stored = store.retrieve(list(r.retired))
        for pid in r.retired:
            p = now_stored.get(pid)
            if p is not None and p.status == "active" and p.user_id == r.user_id and p.kind == "pattern":
                store.update(pid, {"status": "expired", "updated_at": stamp})


def drop_unsourced(store: MemoryStore, record: RunRecord) -> int:
    """Drops the run's pattern events whose sources are no longer all stored for the user: deleted (soft or
    hard), or the user erased, while the run decided (a worker decides off its store thread, an LLM reader
    may take minutes). Sent anyway, such an event would carry text drawn from deleted memories onto
    `memory.patterns`, and ingest would dead-letter it with that text. Returns how many were dropped."""
    wanted = list(dict.fromkeys(s for e in record.events for s in e["sources"]))
    if not wanted:
        return 0
    found = store.retrieve(wanted)
    keep = [e for e in record.events
            if all(s in found and found[s].user_id == record.user_id and found[s].status != "deleted"
                   for s in e["sources"])]
    dropped = len(record.events) - len(keep)
    gone = {e["memory_id"] for e in record.events} - {e["memory_id"] for e in keep}
    record.events = keep
    record.pattern_ids = [p for p in record.pattern_ids if p not in gone]  # the run record names none of them
    if dropped:
        record.read_digest = None  # that reading was not stored whole: the next run reads again
    return dropped


def judged_overlap() -> syn.PairScore | None:
    """The shipped learned judge's reading of two members of a theme: P(the later restates or replaces the
    earlier), whatever judge ingest is configured with (this one is offline and cheap; an LLM judge per pair
    would not be). A pair the judge does not read (far apart) scores 0. None where the model cannot load."""
    from dreamstream.streams.core import judges

    try:
        judge = judges.learned()
    except DreamError:
        return None

    def score(later: Memory, earlier: Memory) -> float:
        [verdict] = judge.judge(later, [earlier])
        return float(verdict.scores.get("same", 0.0)) + float(verdict.scores.get("update", 0.0))

    return score


def run_for_user(
    store: MemoryStore,
    embed: Embed,
    user_id: str,
    now: str,
    state: SynthesisState,
    force: bool = False,
    cadence_days: float = CADENCE_DAYS,
    save: bool = True,
    write_text: WriteText | None = None,
    read_themes: ReadThemes | None = None,
) -> RunRecord:
    """One user's synthesis step; `force` skips only the cadence gate. Feed `record.events` to a Processor."""
    memories = list(store.scroll({"user_id": user_id}, with_vectors=True))
    record = run_memories(user_id, memories, embed, now, state, force, cadence_days, write_text, read_themes)
    if save and record.ran:
        state.save()
    return record


def run_due(
    store: MemoryStore,
    embed: Embed,
    now: str,
    state: SynthesisState,
    force: bool = False,
    cadence_days: float = CADENCE_DAYS,
    users: Iterable[str] | None = None,
    write_text: WriteText | None = None,
    read_themes: ReadThemes | None = None,
    save: bool = True,
) -> list[RunRecord]:
    """Every user (or the given ones) whose gates pass at `now`; one record per user looked at. With
    `save=False` the caller saves `state` once the records' patterns are stored: a run whose patterns
    could not be written (a full disk) must not count, or the user waits a whole cadence for them."""
    by_user: dict[str, list[Memory]] = defaultdict(list)
    wanted = set(users) if users is not None else None
    where = {"user_id": sorted(wanted)} if wanted else None
    if wanted is not None and not wanted:
        return []
    for m in store.scroll(where, with_vectors=True):
        by_user[m.user_id].append(m)
    records = [run_memories(u, by_user[u], embed, now, state, force, cadence_days, write_text, read_themes)
               for u in sorted(by_user)]
    if save and any(r.ran for r in records):
        state.save()
    return records


def _ts_str(value: datetime) -> str:
    return normalise_time(value.astimezone(UTC).isoformat(), "time")
