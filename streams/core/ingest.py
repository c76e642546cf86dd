"""The ingest pipeline: validate, deduplicate, embed, decide, apply — one batch at a time.

The same `Processor` serves the Faust agent, `dream replay` and the tests, so a file replayed in
process and the same events streamed through Kafka end in the same store. Decisions come from
the pure agents (dreamstream.agents.*); this module only reads and writes the store.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import hashlib
import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from dreamstream.agents import merge_supersede
from dreamstream.agents.decisions import HIDDEN_ON_ARRIVAL, Decision
from dreamstream.schemas.errors import StoreError
from dreamstream.schemas.events import (
    InvalidEvent,
    dead_letter,
    erase_of,
    now_iso,
    parse_memory_event,
    signed_by,
    status_event,
)
from dreamstream.schemas.memory import EMBEDDING_DIM, LINK_FIELDS, Memory, MemoryAdded, parse_time
from dreamstream.streams import faults, settings
from dreamstream.streams.core import changes, judges
from dreamstream.streams.core.undo import HIDDEN_BY, undo_decision
from dreamstream.streams.store import MemoryStore, text_key

log = logging.getLogger("dreamstream.pipeline")

Decide = Callable[[Memory, Sequence[Memory]], list[Decision]]
Embed = Callable[[Sequence[str]], np.ndarray]
Features = dict[str, Any] | None


REPROCESS_BATCH = 256
"""Memories per write when reprocessing a user (a worker's batch is about this size too)."""


@dataclass(frozen=True)
class Incoming:
    """One raw record and where it came from (for the dead-letter record); `key` is its Kafka key
    (None outside Kafka: a file replay)."""

    raw: bytes | str | dict[str, Any] | None
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    key: bytes | None = None


@dataclass
class BatchResult:
    status_events: list[dict[str, Any]] = field(default_factory=list)
    dead_letters: list[dict[str, Any]] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    decisions: Counter[str] = field(default_factory=Counter)
    stored: list[Memory] = field(default_factory=list)
    outbox_owners: list[str] = field(default_factory=list)
    """Memories whose stored status events are in `status_events`: marked sent once published."""
    erased: list[str] = field(default_factory=list)
    """Users a `user.erase` record erased: the worker deletes the files that hold their texts too."""
    embed_seconds: float = 0.0
    embedded: int = 0
    lags: list[float] = field(default_factory=list)
    retired: set[str] = field(default_factory=set)
    """Patterns a supersede in this batch retired (the store sees it only when the batch is written)."""

    def extend(self, other: BatchResult) -> None:
        self.status_events += other.status_events
        self.outbox_owners += other.outbox_owners
        self.erased += other.erased
        self.dead_letters += other.dead_letters
        self.outcomes.update(other.outcomes)
        self.decisions.update(other.decisions)
        self.stored += other.stored
        self.embed_seconds += other.embed_seconds
        self.embedded += other.embedded
        self.lags += other.lags


def default_decide() -> tuple[Decide, int]:
    """The judge the settings choose (DREAM_JUDGE; offline unless configured) and its candidate count."""
    judge = judges.judge_from_settings(settings.load())

    def decide(new: Memory, candidates: Sequence[Memory]) -> list[Decision]:
        return merge_supersede.decide_with(judge, new, candidates)

    return decide, int(merge_supersede.CANDIDATE_K)


def check_key(key: bytes | None, user_id: str) -> None:
    """A Kafka record must be keyed by its user_id: per-user order rests on the key's partition, so a
    record keyed otherwise (or empty, or not UTF-8) could overtake that user's other events.
    Dead-lettered as `key_mismatch`; records without a key context (a file replay) are not checked."""
    if key is None:
        return
    if not key:
        raise InvalidEvent("key_mismatch", "the Kafka record has no key; key records by user_id")
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidEvent("key_mismatch", "the Kafka key is not UTF-8; key records by user_id") from None
    if text != user_id:
        shown = text if len(text) <= 64 else text[:61] + "..."
        raise InvalidEvent("key_mismatch", f"the Kafka key {shown!r} is not the event's user_id {user_id!r}")


def embed_with_features(embed: Embed, texts: Sequence[str]) -> tuple[np.ndarray, list[Features]]:
    """Vectors and the judge's word features (payload form) from one model pass where the embedder
    gives both; an embedder without them (a stand-in) gives vectors and no features."""
    if not texts:
        return np.zeros((0, EMBEDDING_DIM), np.float32), []
    full = getattr(embed, "encode_with_features", None)
    if full is None:
        return np.asarray(embed(texts), np.float32), [None] * len(texts)
    vecs, feats = full(texts)
    return np.asarray(vecs, np.float32), [f.to_payload() for f in feats]


def _lag_seconds(created_at: str) -> float | None:
    try:
        return time.time() - parse_time(created_at).timestamp()
    except ValueError:
        return None


EMBED_CHUNK = 32
"""Texts per model call inside a batch: large enough for the model's batching to pay. The first chunks
are smaller (8, then 16): the first one is embedded before anything can be decided."""


def _chunks(items: list[Any]) -> list[list[Any]]:
    out: list[list[Any]] = []
    size, i = 8, 0
    while i < len(items):
        out.append(items[i: i + size])
        i += size
        size = min(size * 2, EMBED_CHUNK)
    return out


GC_THRESHOLDS = (100_000, 50, 100)
"""The cycle collector's thresholds for a process that ingests (the worker, `dream replay`). Every store
hit becomes a payload dict and a vector list of 384 floats, millions of short-lived objects per batch,
and at Python's default (700 allocations) the collector runs, and scans the long-lived model and
tables, hundreds of times a second. At these thresholds it runs rarely, and the dev case replays about
7% faster (`dream replay`, 34.0 -> 31.5 s; as fast as with the collector off). Memory is not held:
reference counting frees nearly everything, and the collector still runs."""


def tune_gc() -> None:
    """Sets GC_THRESHOLDS for this process; a process that ingests calls it once at start."""
    gc.set_threshold(*GC_THRESHOLDS)


_model_executor: ThreadPoolExecutor | None = None


def _model_thread() -> ThreadPoolExecutor:
    """One thread for the model, shared: the model (and its threads) is one per process."""
    global _model_executor
    if _model_executor is None:
        _model_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dream-model")
    return _model_executor


PREFETCH_SLACK = 16
"""Nearest neighbours read beyond the candidate count per new fact, so that the ones the batch's earlier
events supersede or merge can be dropped without asking the store again."""


def _scope(memory: Memory) -> dict[str, Any]:
    return {"user_id": memory.user_id, "status": "active", "kind": "fact"}


@dataclass
class _Prefetched:
    limit: int
    exact: dict[str, list[Memory]] = field(default_factory=dict)
    replaced: dict[str, list[Memory]] = field(default_factory=dict)
    """Exact normalised-text matches that a newer fact superseded (`Processor.restates_replaced`)."""
    near: dict[str, list[tuple[Memory, float]]] = field(default_factory=dict)


@dataclass
class _Batch:
    """One batch in flight: its prefetched reads, and the memories it has created or changed so far
    (the store sees them only when the batch is written)."""

    pre: _Prefetched
    new: list[Memory] = field(default_factory=list)
    """What the batch stores, in event order (its latest copy of each)."""
    changed: dict[str, Memory] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)
    replaces: dict[str, str] = field(default_factory=dict)
    """New memory id -> the memory it replaces (an update the user asked for)."""
    _at: dict[str, int] = field(default_factory=dict)

    def current(self, stored: Memory) -> Memory | None:
        """The batch's latest copy of a prefetched memory, or None when it is no longer an active fact."""
        latest = self.changed.get(stored.memory_id, stored)
        return latest if latest.status == "active" and latest.kind == "fact" else None

    def own_facts(self, user_id: str, key: str) -> tuple[list[Memory], list[Memory]]:
        """The batch's new active facts of this user: all of them, and those with this text key."""
        mine = [m for m in self.new if m.user_id == user_id and m.kind == "fact" and m.status == "active"]
        return mine, [m for m in mine if self.keys[m.memory_id] == key]

    def stage(self, memory: Memory, targets: dict[str, Memory]) -> None:
        """A decided memory and the changed copies of its targets (a target the batch itself added
        takes its place in `new`)."""
        self._at[memory.memory_id] = len(self.new)
        self.new.append(memory)
        self.keys[memory.memory_id] = text_key(memory.user_id, memory.text)
        for tid, target in targets.items():
            self.changed[tid] = target
            if tid in self._at:
                self.new[self._at[tid]] = target
        self.changed[memory.memory_id] = memory


WITHHELD = "[withheld: the pattern quotes memories that are not stored]"

ERASED: dict[str, int] = {}
"""Erase requests this process applied, by request id, with how many memories each deleted: the API, on the
worker that holds the user's partition, waits here for the erase it sent (`ERASED_KEPT` most recent)."""
ERASED_KEPT = 1000


def erase_intent(erase_dir: str, request: str) -> str:
    """Where an erase request keeps the count it found (`changes.erase_user`): written before its delete."""
    return os.path.join(erase_dir, hashlib.sha256(request.encode()).hexdigest()[:24] + ".json")


def erase_sent(erase_dir: str, request: str) -> str:
    """Where a worker marks that it sent an erase request's record (`request_erase`): read again before
    ingest applied it, the request is not sent twice."""
    return erase_intent(erase_dir, request).removesuffix(".json") + ".sent"


def erased_before(erase_dir: str, request: str) -> int | None:
    """The count of an erase request this worker applied already (None: not applied here)."""
    return changes.erased_count(erase_intent(erase_dir, request))


def _updated(newer: Memory, older: str) -> bool:
    """Whether `newer` replaced `older` as the user's update (not the judge's supersede), still standing."""
    return any(rec.get("action") == "supersede" and older in rec.get("targets", ()) and not rec.get("undone")
               and (rec.get("evidence") or {}).get("rule") == "update" for rec in newer.decisions)


def fresh_id(did: str, memories: Sequence[Memory]) -> str:
    """The decision's id, or, when these memories already hold a decision of that id that was undone (a
    full consolidation deciding the same pair again), a new one: an id names one decision, so the undo
    stays in the history and consumers that deduplicate on it keep the second."""
    undone = {r.get("decision_id") for m in memories for r in m.decisions if r.get("undone")}
    n, out = 1, did
    while out in undone:
        n += 1
        out = f"{did}-{n}"
    return out


class Processor:
    """Applies memory events to a store; stateless apart from the store itself."""

    def __init__(
        self,
        store: MemoryStore,
        embed: Embed,
        decide: Decide | None = None,
        candidate_k: int | None = None,
        keep_outbox: bool = False,
        erase_dir: str | None = None,
        erase_key: bytes | None = None,
        patterns_topic: str | None = None,
    ) -> None:
        self.store = store
        self.patterns_topic = patterns_topic
        """With a topic, a `pattern.added` read from any other Kafka topic is a dead letter: patterns are the
        worker's own (its synthesis writes them there), and one a producer sent on memory.added was stored as
        the user's pattern past the topics' ACLs and the project's synthesis switch."""
        self.erase_dir = erase_dir
        """Where each `user.erase` request keeps its first count (a file per request; None: none kept)."""
        self.erase_key = erase_key
        """With a key, only `user.erase` records the worker signed erase (settings.erase_key)."""
        self.embed = embed
        self.keep_outbox = keep_outbox
        """Keep each decision's status events in the store until `mark_sent` (the worker publishes them);
        a file replay has nowhere to publish and keeps none."""
        if decide is None:
            decide, k = default_decide()
            candidate_k = candidate_k or k
        self.decide = decide
        self.candidate_k = candidate_k or 32
        self._tombstones: set[str] = set()
        """Hard deletes' holders `unsent` found: their events published, `mark_sent` deletes them."""

    # -- ingest -----------------------------------------------------------------------------

    def process(self, items: Sequence[Incoming]) -> BatchResult:
        """Process one batch in order; bad records become dead letters, never exceptions. A `user.erase`
        record splits the batch: what came before it is applied, then the user is erased, then the rest."""
        result = BatchResult()
        segment: list[Incoming] = []
        for item in items:
            try:
                erase = erase_of(item.raw)
                if erase is not None:
                    check_key(item.key, erase["user_id"])
                    if self.erase_key is not None and not signed_by(self.erase_key, erase):
                        raise InvalidEvent("unauthorised", "a user.erase without the worker's signature: erase "
                                           "through the API or `dream control erase`")
            except InvalidEvent as exc:
                self._dead(result, item, exc.reason, exc.message)
                continue
            if erase is None:
                segment.append(item)
                continue
            if segment:
                self._process(segment, result)
                segment = []
            self._erase(erase, item, result)
        if segment:
            self._process(segment, result)
        return result

    def _erase(self, erase: dict[str, Any], item: Incoming, result: BatchResult) -> None:
        """Deletes every memory of the user (an erasure: no text is kept, not even in a dead letter) and says
        so in one audit event on memory.status, with the count, never the texts. Read again after a crash, it
        deletes what is left and reports the first run's count (kept in `erase_dir`). A copy of a request that
        ran, read at another place in the log (a signed record captured and sent again), is a dead letter: it
        would take every memory the user added since."""
        user, request = str(erase["user_id"]), str(erase["request"])
        intent = erase_intent(self.erase_dir, request) if self.erase_dir is not None else None
        at = [item.topic, item.partition, item.offset] if item.offset is not None else None
        first = changes.erased_at(intent) if intent is not None else None
        if first is not None and at is not None and first != at:
            self._dead(result, item, "replayed", f"user.erase request {request} ran already, read at "
                       f"{first[0]}-{first[1]}@{first[2]}: a copy would erase what {user} added since")
            return
        deleted = changes.erase_user(self.store, user, intent, at)
        result.status_events.append(status_event(
            f"erase-{request}", f"user:{user}", user, None, "erased", None, "erase",
            {"request": request, "issued_by": erase.get("issued_by") or "kafka", "user": user, "deleted": deleted}))
        result.outcomes["erased"] += 1
        result.erased.append(user)
        ERASED[request] = deleted
        while len(ERASED) > ERASED_KEPT:
            ERASED.pop(next(iter(ERASED)))

    def _process(self, items: Sequence[Incoming], result: BatchResult) -> None:
        parsed: list[tuple[Incoming, MemoryAdded]] = []
        for item in items:
            try:
                event = parse_memory_event(item.raw)
                check_key(item.key, event.user_id)
                if event.kind == "pattern" and self.patterns_topic and item.partition is not None \
                        and item.topic != self.patterns_topic:  # read from Kafka, not the worker's own topic
                    raise InvalidEvent("unknown_type", f"pattern.added is the worker's own (its synthesis writes it to "
                                       f"{self.patterns_topic}); {item.topic} takes memory.added and user.erase")
                parsed.append((item, event))
            except InvalidEvent as exc:
                self._dead(result, item, exc.reason, exc.message)
            except Exception as exc:  # a record no check foresaw: its own dead letter, not a batch read forever
                log.exception("record at %s-%s@%s could not be read", item.topic, item.partition, item.offset)
                self._dead(result, item, "processing_error", f"{type(exc).__name__}: {exc}")
        fresh = self._screen(parsed, result)
        if not fresh:
            return
        # The model embeds the next chunk on its own thread while this one is decided: the pipeline runs at
        # the model's pace when deciding a chunk takes less time than embedding one.
        chunks = _chunks(fresh)
        batch = _Batch(_Prefetched(limit=self.candidate_k + PREFETCH_SLACK),
                       replaces={e.memory_id: e.replaces for _, e in fresh if e.replaces})
        ahead = _model_thread().submit(self._vectors, [e for _, e in chunks[0]])
        try:
            for j, chunk in enumerate(chunks):
                vectors, seconds, embedded = ahead.result()
                if j + 1 < len(chunks):
                    ahead = _model_thread().submit(self._vectors, [e for _, e in chunks[j + 1]])
                result.embed_seconds += seconds
                result.embedded += embedded
                memories = [self._memory(event, vector, features)
                            for (_, event), (vector, features) in zip(chunk, vectors, strict=True)]
                self._prefetch(batch.pre, [m for m in memories if m.kind != "pattern"])
                for (item, event), memory in zip(chunk, memories, strict=True):
                    try:
                        self._apply_event(memory, batch, result)
                    except StoreError:
                        raise  # transient: the batch is read again, nothing is dead-lettered
                    except InvalidEvent as exc:  # valid alone, not against the store (an update of nothing)
                        self._dead(result, item, exc.reason, exc.message)
                    except Exception as exc:  # a deterministic failure of one event must not stop the partition
                        log.exception("event %s failed", event.event_id)
                        self._dead(result, item, "processing_error", f"{type(exc).__name__}: {exc}")
        finally:
            wait([ahead])  # nothing of this batch is left running on the model thread
        self._write(batch)
        result.stored += batch.new

    def _dead(self, result: BatchResult, item: Incoming, reason: str, message: str, withhold: bool = False) -> None:
        """A dead letter with the record; `withhold`: with its text left out (a pattern quoting memories that
        are gone, e.g. an erased user's: their words must not come back through the dead letters)."""
        raw = item.raw
        if withhold:  # a pattern event, parsed before: a JSON object
            body = item.raw if isinstance(item.raw, dict) else orjson.loads(item.raw or b"{}")
            raw = {**{k: v for k, v in body.items() if k not in ("text", "embedding")}, "text": WITHHELD}
        result.dead_letters.append(dead_letter(raw, reason, message, item.topic, item.partition, item.offset))
        result.outcomes[f"dead_letter:{reason}"] += 1

    def _screen(
        self, parsed: list[tuple[Incoming, MemoryAdded]], result: BatchResult
    ) -> list[tuple[Incoming, MemoryAdded]]:
        """Idempotency: a redelivered event changes nothing; a reused event_id is dead-lettered."""
        if not parsed:
            return []
        existing = self.store.retrieve(list(dict.fromkeys(e.memory_id for _, e in parsed)))
        # Removed for good: a memory hard-deleted, a user erased. Their events sent again (a producer's resend, a
        # replayed backfill) are passed over, not stored again; counted, never dead-lettered (that keeps the text).
        # A fact stored still is asked too: a hard delete's holder stays, a tombstone, until its events are out.
        gone = self.store.buried([changes.gone_key(e.user_id, e.memory_id, e.text) for _, e in parsed
                                  if e.kind != "pattern"])  # one call per batch
        if gone:
            kept = []
            for item, event in parsed:
                if changes.gone_key(event.user_id, event.memory_id, event.text) in gone:
                    result.outcomes["removed_for_good"] += 1
                    continue
                kept.append((item, event))
            parsed = kept
        by_event: dict[str, Memory] = {}
        event_ids = list(dict.fromkeys(e.event_id for _, e in parsed))
        for memory in self.store.scroll({"event_id": event_ids}):
            if memory.event_id:
                by_event[memory.event_id] = memory
        seen_events: dict[str, MemoryAdded] = {}
        seen_memories: dict[str, MemoryAdded] = {}  # memory_id -> its first event within this batch
        fresh: list[tuple[Incoming, MemoryAdded]] = []
        for item, event in parsed:
            earlier = by_event.get(event.event_id)
            prior = seen_events.get(event.event_id)
            if earlier is not None or prior is not None:
                first = earlier or prior
                assert first is not None
                # The same event again is the same user's memory with the same text: another user's event
                # that reuses an event_id is no redelivery, whatever it says.
                same = (first.memory_id, first.user_id, first.text) == (event.memory_id, event.user_id, event.text)
                if same and event.kind != "pattern":
                    self._redelivered(earlier or existing.get(event.memory_id), result)
                    continue
                if not same:
                    self._dead(result, item, "duplicate_event_id",
                               f"event_id {event.event_id} was already used for other content")
                    continue
            stored = existing.get(event.memory_id)
            batch_first = seen_memories.get(event.memory_id)
            if event.kind == "pattern":
                if stored is not None and stored.kind == "pattern" and stored.status == "deleted" \
                        and stored.user_id == event.user_id:
                    # The person deleted it: its record read again (a redelivery, an offset reset) or a run that
                    # began before the delete must not bring it back (synthesis never writes a declined theme).
                    result.outcomes["pattern_declined"] += 1
                    continue
                problem = self._pattern_problem(event, stored)
                if problem is None and batch_first is not None and (
                        batch_first.kind != "pattern" or batch_first.user_id != event.user_id):
                    # An earlier event of this batch holds the id: a pattern must not replace it before it is
                    # even stored (another user's fact, or a fact at all).
                    problem = ("memory_id_conflict",
                               f"memory_id {event.memory_id} is another memory; a pattern cannot replace it", False)
                if problem:
                    self._dead(result, item, *problem)
                    continue
                fresh.append((item, event))  # a pattern may be rewritten with more evidence
            elif stored is not None or batch_first is not None:
                owner = stored.user_id if stored is not None else batch_first.user_id  # type: ignore[union-attr]
                known = stored.text if stored is not None else batch_first.text  # type: ignore[union-attr]
                if owner != event.user_id:
                    self._dead(result, item, "memory_id_conflict",
                               f"memory_id {event.memory_id} belongs to another user")
                elif known != event.text:
                    self._dead(result, item, "memory_id_conflict",
                               f"memory_id {event.memory_id} is already stored with other text")
                else:
                    self._redelivered(stored, result)
                continue
            else:
                fresh.append((item, event))
            seen_events.setdefault(event.event_id, event)
            seen_memories.setdefault(event.memory_id, event)
        # Stored by no one a moment ago: another worker may be storing the same id for another user right now.
        taken = self.store.claim({e.memory_id: e.user_id for _, e in fresh}) if fresh else {}
        if taken:
            kept = []
            for item, event in fresh:
                if event.memory_id in taken:
                    self._dead(result, item, "memory_id_conflict", f"memory_id {event.memory_id} belongs to another "
                                                                   "user (stored by another worker at the same time)")
                else:
                    kept.append((item, event))
            fresh = kept
        return fresh

    def _pattern_problem(self, event: MemoryAdded, stored: Memory | None) -> tuple[str, str, bool] | None:
        """A pattern may only rewrite a pattern of the same user, from evidence of that user: a forged
        one must not replace another memory (or another user's) nor point at memories that are not there.
        (reason, message, whether its dead letter withholds the text: it quotes memories that are gone)."""
        if stored is not None and (stored.kind != "pattern" or stored.user_id != event.user_id):
            return ("memory_id_conflict",
                    f"memory_id {event.memory_id} is another memory; a pattern cannot replace it", False)
        if not event.sources:
            return "bad_field", "a pattern needs its sources (the memories it was synthesized from)", False
        found = self.store.retrieve(list(dict.fromkeys(event.sources)))
        foreign = [s for s in event.sources if s not in found or found[s].user_id != event.user_id]
        if foreign:
            return "bad_field", f"pattern sources not stored for user {event.user_id}: {', '.join(foreign[:3])}", True
        gone = [s for s in event.sources if found[s].status == "deleted"]
        if gone:  # deleted by a person while the pattern was being written: it must not quote them
            return "bad_field", f"pattern sources deleted: {', '.join(gone[:3])}", True
        replaced = [s for s in event.sources if found[s].status in ("superseded", "expired")]
        if replaced:  # replaced or pruned since the run read them: it would state them as current (the next run
            # writes the theme again from what holds)
            return "bad_field", f"pattern sources no longer current: {', '.join(replaced[:3])}", False
        return None

    def _redelivered(self, stored: Memory | None, result: BatchResult) -> None:
        """An event stored before: finish what a crash left half-done, and hand back its unsent events."""
        result.outcomes["redelivered"] += 1
        if stored is None:
            return
        if stored.pending:
            present = self.store.retrieve(list(stored.pending))
            stored.pending = {tid: fields for tid, fields in stored.pending.items() if tid in present}
            self._roll_forward(stored)
            result.outcomes["rolled_forward"] += 1
        if stored.outbox:
            result.status_events.extend(stored.outbox)
            result.outbox_owners.append(stored.memory_id)

    def _roll_forward(self, memory: Memory) -> None:
        """Writes each target's pending fields, then clears them: every step can be repeated."""
        for tid, fields in memory.pending.items():
            self.store.update(tid, fields)
            faults.point("target")
        if memory.pending:
            memory.pending = {}
            self.store.update(memory.memory_id, {"pending": {}})
        faults.point("applied")

    def mark_sent(self, memory_ids: Sequence[str]) -> None:
        """The status events kept on these memories were published: clear them. A memory deleted since it was
        stored (a `user.erase` later in the same batch, a hard delete while the batch was published) has no
        outbox left to clear: the store refuses an update naming it, so the rest are cleared without it (were
        the batch read again instead, it would store the deleted memory again)."""
        ids = list(dict.fromkeys(memory_ids))
        sent = {"outbox": [], "outbox_state": "sent"}
        if gone := [m for m in ids if m in self._tombstones]:
            # A hard delete's holder that `unsent` found (`changes.apply`): its events are out, so it goes, as
            # `changes.sent` does; cleared only, it stayed for good, keeping its id from its user and everyone.
            self.store.delete(gone)
            self._tombstones.difference_update(gone)
            ids = [m for m in ids if m not in gone]
        try:
            self.store.update_many(ids, sent)
        except StoreError:
            present = self.store.retrieve(ids)
            if len(present) == len(ids):
                raise  # all there: a real store fault
            self.store.update_many([m for m in ids if m in present], sent)

    def unsent(self) -> BatchResult:
        """Every status event stored and not yet published (after a crash, at the worker's start)."""
        result = BatchResult()
        unsent = self.store.scroll({"outbox_state": "unsent"})
        for memory in sorted(unsent, key=lambda m: (m.created_at, m.memory_id)):
            result.status_events.extend(memory.outbox)
            result.outbox_owners.append(memory.memory_id)
            if memory.pending.get(memory.memory_id, {}).get(changes.DELETE):
                self._tombstones.add(memory.memory_id)  # `mark_sent` removes it once these are published
        return result

    def _vectors(self, events: list[MemoryAdded]) -> tuple[list[tuple[np.ndarray, Features]], float, int]:
        """Each event's vector and the judge's word features, the seconds spent in the model and the
        texts it embedded. A producer's embedding (checked and normalised by the schema) is used as it
        is; its word features are computed later, only if the judge has candidates to compare it with."""
        texts = [e.text for e in events if e.embedding is None]
        start = time.perf_counter()
        vecs, feats = embed_with_features(self.embed, texts)
        seconds = time.perf_counter() - start
        computed = iter(zip(vecs, feats, strict=True))
        out: list[tuple[np.ndarray, Features]] = []
        for e in events:
            if e.embedding is None:
                vec, feat = next(computed)
                out.append((np.asarray(vec, np.float32), feat))
            else:
                out.append((np.asarray(e.embedding, np.float32), None))
        return out, seconds, len(texts)

    def _prefetch(self, pre: _Prefetched, facts: list[Memory]) -> None:
        """The store reads a chunk's facts need, in two calls: exact normalised-text matches (vector
        recall can miss them) and each fact's nearest active facts, with room for the batch's own changes.
        The batch writes nothing before its end, so every chunk reads the store as the batch found it."""
        if not facts:
            return
        keys = {text_key(m.user_id, m.text) for m in facts}
        scope = {"user_id": sorted({m.user_id for m in facts}), "status": ["active", "superseded"], "kind": "fact"}
        for m in self.store.scroll({**scope, "text_key": sorted(keys)}, with_vectors=True):
            (pre.exact if m.status == "active" else pre.replaced).setdefault(text_key(m.user_id, m.text), []).append(m)
        wheres = [{"user_id": m.user_id, "status": "active", "kind": "fact"} for m in facts]
        vectors = [np.asarray(m.vector, np.float32) for m in facts]  # every new fact has its vector by now
        hits = self.store.nearest_many(vectors, wheres, pre.limit, with_vectors=True)
        pre.near.update((m.memory_id, h) for m, h in zip(facts, hits, strict=True))

    def candidates(self, new: Memory, batch: _Batch) -> list[Memory]:
        """Exact normalised-text matches first, then the nearest active facts, as the store would answer
        with the batch's earlier events applied: the prefetched reads seen through what the batch changed,
        plus its own new facts. Copies, so that a failing event leaves the batch as it was."""
        assert new.vector is not None
        key = text_key(new.user_id, new.text)
        own, own_exact = batch.own_facts(new.user_id, key)
        exact = [m for m in (batch.current(c) for c in batch.pre.exact.get(key, [])) if m is not None]
        exact += own_exact
        hits = batch.pre.near.get(new.memory_id)
        if hits is None:  # a fact the prefetch did not see (not expected): ask the store now
            hits = self.store.nearest(new.vector, _scope(new), batch.pre.limit, with_vectors=True)
        scored = [(m, sc) for m, sc in ((batch.current(c), sc) for c, sc in hits) if m is not None]
        if len(hits) >= batch.pre.limit and len(scored) < self.candidate_k:
            # The batch changed so many of the prefetched ones that the store's next ones may count: ask again.
            more = self.store.nearest(new.vector, _scope(new), batch.pre.limit + len(hits), with_vectors=True)
            scored = [(m, sc) for m, sc in ((batch.current(c), sc) for c, sc in more) if m is not None]
        scored += [(m, float(np.dot(m.vector, new.vector))) for m in own if m.vector is not None]
        scored.sort(key=lambda pair: -pair[1])
        # The newest exact matches first, and no more than candidate_k: a text a user repeats on many days
        # stays active each time (another occasion), and judging every copy made each new one cost more.
        out = sorted({m.memory_id: m for m in exact if m.memory_id != new.memory_id}.values(),
                     key=lambda m: m.created_at, reverse=True)
        seen = {m.memory_id for m in out} | {new.memory_id}
        for m, _ in scored:
            if m.memory_id not in seen:
                seen.add(m.memory_id)
                out.append(m)
        return [copy.copy(m) for m in out[: self.candidate_k]]

    def _memory(self, event: MemoryAdded, vector: np.ndarray, features: Features) -> Memory:
        return Memory(
            memory_id=event.memory_id, user_id=event.user_id, text=event.text,
            created_at=event.created_at, updated_at=now_iso(), kind=event.kind,
            app_id=event.app_id, agent_id=event.agent_id, run_id=event.run_id,
            project_id=event.project_id, sources=list(event.sources),
            metadata=dict(event.metadata), event_id=event.event_id, vector=vector, features=features,
        )

    def _apply_event(self, memory: Memory, batch: _Batch, result: BatchResult) -> None:
        """Decides one memory against the batch's view of the store; what it changes is written with the
        batch (`_write`)."""
        if memory.kind == "pattern":
            batch.stage(memory, {})
            result.outcomes["pattern_stored"] += 1
            return
        candidates = self.candidates(memory, batch)
        replaced = batch.replaces.get(memory.memory_id)
        if replaced is not None and self._apply_update(memory, replaced, candidates, batch, result):
            return  # an update: it superseded what it replaces, as the user asked
        # (An edit of a fact merged or replaced by a newer one since it was asked is kept as a new memory and
        # judged like any other: never forced over the newer fact, never dropped.)
        if candidates and memory.features is None and hasattr(self.embed, "features"):
            start = time.perf_counter()  # a producer's embedding: the judge still aligns words
            memory.features = self.embed.features([memory.text])[0].to_payload()
            result.embed_seconds += time.perf_counter() - start
            result.embedded += 1
        decisions = self.decide(memory, candidates) if candidates else []
        by_id = {c.memory_id: c for c in candidates}
        if not any(d.action in ("merge_new", "merge_old", "supersede") for d in decisions):
            # Before the judge's own "superseded on arrival": the same words as a fact in history are that fact.
            restated = self.restates_replaced(memory, batch)
            if restated is not None:  # an old fact arriving late: history, never current beside its replacement
                decisions, by_id = [restated[0]], {restated[1].memory_id: restated[1]}
        copies = dict(by_id)  # apply_decision drops superseded ones from by_id
        first_event = len(result.status_events)
        pending: dict[str, dict[str, Any]] = {}
        for decision in decisions:
            for tid, fields in self.apply_decision(decision, memory, by_id, result).items():
                pending.setdefault(tid, {}).update(fields)
        memory.pending = pending
        if self.keep_outbox and len(result.status_events) > first_event:
            memory.outbox = result.status_events[first_event:]
            result.outbox_owners.append(memory.memory_id)
        batch.stage(memory, {tid: copies[tid] for tid in pending if tid in copies})
        result.outcomes["stored"] += 1
        lag = _lag_seconds(memory.created_at)
        if lag is not None:
            result.lags.append(lag)

    def restates_replaced(self, memory: Memory, batch: _Batch) -> tuple[Decision, Memory] | None:
        """`merge_supersede.restates_replaced` over the user's replaced facts with this text, as the batch sees
        them (one its earlier events replaced counts too, and one it stored itself: a backfill in one batch
        left the late restatement current beside the replacement); the decision and its target's copy."""
        key = text_key(memory.user_id, memory.text)
        pairs = []
        own = [m for m in batch.new if batch.keys.get(m.memory_id) == key]  # replaced earlier in this batch
        for stored in {m.memory_id: m for m in [*batch.pre.replaced.get(key, []), *batch.pre.exact.get(key, []),
                                                *own]}.values():
            old = batch.changed.get(stored.memory_id, stored)
            if old.status == "superseded" and old.superseded_by:
                newer = batch.changed.get(old.superseded_by) or self.store.retrieve([old.superseded_by]).get(
                    old.superseded_by)
                if newer is not None:
                    pairs.append((old, newer))
        decision = merge_supersede.restates_replaced(memory, pairs)
        if decision is None:
            return None
        return decision, copy.copy(next(old for old, _ in pairs if old.memory_id == decision.targets[0]))

    def _apply_update(self, memory: Memory, replaced: str, candidates: list[Memory], batch: _Batch,
                      result: BatchResult) -> bool:
        """A user's update of one memory: the new version supersedes it (no judge), kept as history with
        the decision, undoable like any other. The replaced memory must be the user's: its current version
        (itself, or where the user's own updates of it led). False when the judge merged it or replaced it
        with a newer fact since the edit was asked (the caller judges the edit as a new memory)."""
        target = next((c for c in candidates if c.memory_id == replaced), None)
        if target is None:
            target = self._current_version(replaced, memory.user_id, batch)
        if target is None:
            asked = batch.changed.get(replaced) or self.store.retrieve([replaced]).get(replaced)
            if asked is not None and asked.user_id == memory.user_id \
                    and asked.status in ("merged", "superseded", "deleted"):
                # Merged or replaced by the judge, or deleted by the person, since the edit was asked (an agent
                # that updates a fact and then deletes the old version): the edit's text is kept, never dropped.
                memory.metadata = {**memory.metadata, "edit_of": replaced}  # what the person meant to edit
                return False
            raise InvalidEvent("bad_field", f"replaces {replaced}: no current memory of user {memory.user_id}")
        detail: dict[str, Any] = {"by": "update"}
        if target.memory_id != replaced:
            detail["asked"] = replaced  # an edit of a version edited since: it updates the current one
        decision = Decision("supersede", memory.memory_id, memory.user_id, (target.memory_id,), judge="user",
                            rule="update", detail=detail)
        by_id = {target.memory_id: target}
        first_event = len(result.status_events)
        memory.pending = dict(self.apply_decision(decision, memory, dict(by_id), result))
        if self.keep_outbox and len(result.status_events) > first_event:
            memory.outbox = result.status_events[first_event:]
            result.outbox_owners.append(memory.memory_id)
        batch.stage(memory, {target.memory_id: target})
        result.outcomes["stored"] += 1
        return True

    def _current_version(self, memory_id: str, user_id: str, batch: _Batch) -> Memory | None:
        """The user's current version of a fact: itself while active, else what the user's own updates of it
        led to (two quick edits of one memory: the second arrives after the first superseded it). Not past a
        judge's supersede: a newer fact is no version of the one edited. A copy, or None."""
        seen: set[str] = set()
        nxt: str | None = memory_id
        previous: str | None = None
        while nxt is not None and nxt not in seen:
            seen.add(nxt)
            # The batch's copy first (what it added or changed already), else the store's.
            node = batch.changed.get(nxt) or self.store.retrieve([nxt]).get(nxt)
            if node is None or node.user_id != user_id:
                return None
            if previous is not None and not _updated(node, previous):
                return None
            if node.status == "active" and node.kind == "fact":
                return copy.copy(node)
            previous, nxt = nxt, (node.superseded_by if node.status == "superseded" else None)
        return None

    def _write(self, batch: _Batch) -> None:
        """The batch's writes, crash-safe in this order: one upsert holds every new memory with its
        decisions, links, status events and what its targets still need (`pending`); then the targets;
        then the pendings are cleared. A crash between them is rolled forward on redelivery."""
        if not batch.new:
            return
        targets: dict[str, dict[str, Any]] = {}
        holder: dict[str, Memory] = {}
        for memory in batch.new:  # in event order: a later event's fields for one target win
            for tid, fields in memory.pending.items():
                targets.setdefault(tid, {}).update(fields)
                holder[tid] = memory
        # Each target's combined fields on one memory only (the last that touches it): a crash after the
        # upsert is rolled forward memory by memory, in no particular order (`changes.recover`, a
        # redelivery), and an earlier memory's shorter list must not overwrite a later one's.
        for memory in batch.new:
            memory.pending = {tid: targets[tid] for tid in memory.pending if holder[tid] is memory}
        self.store.upsert(batch.new)
        faults.point("stored")
        for tid, fields in targets.items():
            self.store.update(tid, fields)
            faults.point("target")
        cleared = [m.memory_id for m in batch.new if m.pending]
        if cleared:
            self.store.update_many(cleared, {"pending": {}})
            for memory in batch.new:
                memory.pending = {}
        faults.point("applied")

    # -- decisions --------------------------------------------------------------------------

    def apply_decision(
        self, decision: Decision, new: Memory, by_id: dict[str, Memory], result: BatchResult
    ) -> dict[str, dict[str, Any]]:
        """Turns one decision into status and link changes on both sides, plus its status events.

        `new` is mutated in place and the targets' copies too; returned are the fields to set on each
        target, which the caller writes (after `new`, so a crash between is rolled forward).
        """
        writes: dict[str, dict[str, Any]] = {}
        targets = [by_id[t] for t in decision.targets if t in by_id]
        evidence = decision.evidence()
        did = fresh_id(decision.decision_id, [new, *targets])
        record: dict[str, Any] = {
            "decision_id": did, "action": decision.action, "new_id": new.memory_id,
            "targets": [t.memory_id for t in targets], "evidence": evidence, "at": now_iso(),
            "before": {m.memory_id: {k: getattr(m, k) for k in LINK_FIELDS} for m in [new, *targets]},
        }
        if decision.action in ("conflict", "review"):
            # Nothing changes: the case is kept on the new memory for a person (consolidation pass).
            item = {"decision_id": did, "with": record["targets"], "evidence": evidence}
            if decision.action == "review":
                item["review"] = decision.detail.get("proposal", "merge")
            new.conflicts.append(item)
            new.decisions.append(record)
            new.decision_ids.append(did)
            for t in targets:
                t.decision_ids = [*t.decision_ids, did]
                writes.setdefault(t.memory_id, {})["decision_ids"] = t.decision_ids
                result.status_events.append(status_event(
                    did, t.memory_id, t.user_id, t.status, t.status, new.memory_id, decision.action, evidence))
            result.decisions[decision.action] += 1
            return writes
        if not targets:
            return writes
        if decision.action in HIDDEN_ON_ARRIVAL:
            # The new memory hidden behind its target: merged into it (a restatement), or superseded by it (said
            # before it, it arrived late).
            canonical = targets[0]
            hidden = HIDDEN_ON_ARRIVAL[decision.action]
            link, back = HIDDEN_BY[hidden]
            before = new.status
            new.status = hidden  # type: ignore[assignment]
            setattr(new, link, canonical.memory_id)
            setattr(canonical, back, [*getattr(canonical, back), new.memory_id])
            canonical.decision_ids = [*canonical.decision_ids, did]
            writes.setdefault(canonical.memory_id, {}).update(
                {back: getattr(canonical, back), "decision_ids": canonical.decision_ids})
            result.status_events.append(status_event(
                did, new.memory_id, new.user_id, before, hidden, canonical.memory_id, decision.action, evidence))
        elif decision.action in ("merge_old", "supersede"):
            to_status = "merged" if decision.action == "merge_old" else "superseded"
            link = "merged_into" if decision.action == "merge_old" else "superseded_by"
            back = "merged_from" if decision.action == "merge_old" else "supersedes"
            for t in targets:
                before = t.status
                t.status = to_status  # type: ignore[assignment]
                setattr(t, link, new.memory_id)
                t.decision_ids = [*t.decision_ids, did]
                writes.setdefault(t.memory_id, {}).update({
                    "status": t.status, link: new.memory_id, "decision_ids": t.decision_ids,
                    "updated_at": now_iso()})
                setattr(new, back, [*getattr(new, back), t.memory_id])
                result.status_events.append(status_event(
                    did, t.memory_id, t.user_id, before, to_status, new.memory_id, decision.action, evidence))
                by_id.pop(t.memory_id, None)
            if decision.action == "supersede":
                self._retire_patterns(did, new, targets, record, writes, result, evidence)
        else:
            raise ValueError(f"unknown action {decision.action!r}")
        new.decisions.append(record)
        new.decision_ids.append(did)
        result.decisions[decision.action] += 1
        return writes

    def _retire_patterns(self, did: str, new: Memory, targets: list[Memory], record: dict[str, Any],
                         writes: dict[str, dict[str, Any]], result: BatchResult, evidence: dict[str, Any]) -> None:
        """The active patterns drawn from a fact this decision superseded are retired with it (`expired`,
        kept), as a delete retires them: their text states the old value as current. The undo brings them
        back; the next synthesis run writes the theme again from the facts that hold."""
        gone = [t.memory_id for t in targets]
        for pattern in changes.patterns_quoting(self.store, new.user_id, gone):
            if pattern.memory_id in result.retired:
                continue
            result.retired.add(pattern.memory_id)
            record["before"][pattern.memory_id] = {k: getattr(pattern, k) for k in LINK_FIELDS}
            source = next(x for x in pattern.sources if x in gone)
            writes.setdefault(pattern.memory_id, {}).update({
                "status": "expired", "decision_ids": [*pattern.decision_ids, did], "updated_at": now_iso()})
            result.status_events.append(status_event(
                did, pattern.memory_id, new.user_id, "active", "expired", new.memory_id, "supersede",
                {**evidence, "source_superseded": source}))

    def undo(self, decision_id: str, by: str | None = None, user: str | None = None) -> list[dict[str, Any]]:
        """Reverts one decision (core/undo.py), crash-safe; returns its status events, kept unsent in
        the store until `changes.sent`. KeyError when unknown (or, with `user`, another user's), ValueError
        when undone already."""
        return undo_decision(self.store, decision_id, by, user).events

    def reprocess_user(self, user_id: str, backup_dir: str, run_id: str | None = None) -> BatchResult:
        """Re-derives one user's statuses and links from scratch, in created_at order (after a judge changed).

        The user's facts are taken out and fed back through `process` with their stored vectors, ids
        and texts, exactly as a replay would; expired memories and patterns stay as they are. The
        earlier decisions' records are replaced by the new ones (their status events say what changed).

        Crash-safe on any worker: before anything is deleted, the events are copied into the store itself
        (`changes.backup_user`: hidden, under a name no user id can have), and a run that finds copies finishes
        from them, never from the half-emptied user. On a shared store the worker that takes the user's
        partition over finds them too (a backup on the first worker's disk left the new one an empty user).
        The copies go once the run is done; an erase takes them with the user. With `run_id` (a control
        command's id), a run that finished already answers from its record in `backup_dir`.
        """
        os.makedirs(backup_dir, exist_ok=True)
        done = os.path.join(backup_dir, f"done-{hashlib.sha256(run_id.encode()).hexdigest()[:24]}.json") \
            if run_id else None
        if done is not None and os.path.exists(done):
            with open(done, "rb") as f:
                summary = orjson.loads(f.read())
            result = BatchResult()
            result.outcomes.update(summary["outcomes"])
            result.decisions.update(summary["decisions"])
            return result
        copies = list(self.store.scroll({"user_id": changes.backup_user(user_id)}, with_vectors=True))
        legacy = reprocess_backup(backup_dir, user_id)  # an earlier version's backup file: finished from too
        if copies:
            events = sorted((_from_copy(c) for c in copies), key=lambda ev: (ev["created_at"], ev["memory_id"]))
            log.warning("reprocess of %s: finishing an interrupted run (%d memories)", user_id, len(events))
        else:
            if os.path.exists(legacy):
                with open(legacy, "rb") as f:
                    events = [orjson.loads(line) for line in f.read().splitlines() if line.strip()]
            else:
                events = self._reprocess_events(user_id)
            copies = [_copy(ev, user_id) for ev in events]
            try:
                for start in range(0, len(copies), REPROCESS_BATCH):
                    self.store.upsert(copies[start:start + REPROCESS_BATCH])
                self.store.flush()
            except StoreError:
                # Refused (a full disk): nothing of the user changed; a later run reads the user afresh.
                with contextlib.suppress(StoreError):
                    self.store.delete([c.memory_id for c in copies])
                raise
        forget_reprocess(backup_dir, user_id)
        # Every memory the copies hold, as the run found them (one a run cut short had stored again too: it is
        # decided again with the rest); what the user added since stays.
        self.store.delete([ev["memory_id"] for ev in events])
        self.store.flush()
        faults.point("stored")
        # In batches as ingest writes them: one upsert of a large user's every memory is more than a Qdrant
        # server takes in one request (32 MB), and the user's memories were deleted above.
        result = BatchResult()
        for start in range(0, len(events), REPROCESS_BATCH):
            result.extend(self.process([Incoming(raw=ev, topic="reprocess", offset=start + i)
                                        for i, ev in enumerate(events[start:start + REPROCESS_BATCH])]))
        # A person's update whose original is no current fact in the new order (the judge merged it away, a
        # memory created in between): its text must not be lost with the old store, so the judge decides it.
        lost = {dl["offset"] for dl in result.dead_letters if dl["reason"] == "bad_field"
                and "no current memory" in dl["error"]}
        retry = [{k: v for k, v in ev.items() if k != "replaces"} for i, ev in enumerate(events)
                 if i in lost and "replaces" in ev]
        if retry:
            result.dead_letters = [dl for dl in result.dead_letters if dl["offset"] not in lost]
            result.outcomes["dead_letter:bad_field"] -= len(retry)
            if result.outcomes["dead_letter:bad_field"] <= 0:
                del result.outcomes["dead_letter:bad_field"]
            result.extend(self.process([Incoming(raw=ev, topic="reprocess") for ev in retry]))
        self.store.flush()
        if done is not None:
            summary = {"outcomes": dict(result.outcomes), "decisions": dict(result.decisions)}
            changes.write_durably(done, orjson.dumps(summary))
        self.store.delete([c.memory_id for c in copies])
        self.store.flush()
        return result

    def _reprocess_events(self, user_id: str) -> list[dict[str, Any]]:
        facts = sorted(
            (m for m in self.store.scroll({"user_id": user_id, "kind": "fact"}, with_vectors=True)
             if m.status in ("active", "superseded", "merged")),
            key=lambda m: (m.created_at, m.memory_id),
        )
        present = {m.memory_id for m in facts}

        def replaces(m: Memory) -> dict[str, str]:
            """A person's own update (`replaces`, judge "user") is what they said, not the judge's to re-decide."""
            for rec in m.decisions:
                if (rec.get("new_id") == m.memory_id and rec.get("action") == "supersede" and not rec.get("undone")
                        and (rec.get("evidence") or {}).get("judge") == "user" and rec.get("targets")
                        and rec["targets"][0] in present):
                    return {"replaces": rec["targets"][0]}
            return {}

        return [{
            "type": "memory.added", "event_id": m.event_id or f"reprocess-{m.memory_id}", "memory_id": m.memory_id,
            "user_id": m.user_id, "app_id": m.app_id, "agent_id": m.agent_id, "run_id": m.run_id,
            "project_id": m.project_id, "text": m.text, "created_at": m.created_at, "metadata": dict(m.metadata),
            "embedding": None if m.vector is None else [float(x) for x in m.vector], **replaces(m),
        } for m in facts]


def _copy(event: dict[str, Any], user_id: str) -> Memory:
    """A reprocess's copy of one event in the store: hidden (deleted, no text), under the user's backup name."""
    now = now_iso()
    return Memory(memory_id=changes.BACKUP + event["memory_id"], user_id=changes.backup_user(user_id), text="",
                  created_at=event["created_at"], updated_at=now, status="deleted",
                  metadata={"reprocess_event": {k: v for k, v in event.items() if k != "embedding"}},
                  vector=np.asarray(event["embedding"], np.float32))


def _from_copy(copy: Memory) -> dict[str, Any]:
    event = dict(copy.metadata["reprocess_event"])
    event["embedding"] = [float(x) for x in np.asarray(copy.vector, np.float32)]
    return event


def reprocess_backup(backup_dir: str, user_id: str) -> str:
    """Where an earlier version's `reprocess_user` kept a user's events while it ran (its marker: `+ ".deleted"`)."""
    return os.path.join(backup_dir, f"reprocess-{hashlib.sha256(user_id.encode()).hexdigest()[:24]}.jsonl")


def forget_reprocess(backup_dir: str, user_id: str) -> None:
    """An interrupted reprocess's backup of the user's events, and its marker: an erased user's texts must
    not stay on disk, nor come back through a later reprocess that would finish from it."""
    backup = reprocess_backup(backup_dir, user_id)
    for path in (backup + ".deleted", backup):
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def replay_lines(lines: Iterable[bytes], source: str = "replay") -> Iterable[Incoming]:
    """File lines as Incoming records (line numbers stand in for offsets)."""
    for number, line in enumerate(lines, start=1):
        if number == 1 and line.startswith(b"\xef\xbb\xbf"):
            line = line[3:]  # a byte-order mark some editors write: not part of the first event
        if line.strip():
            yield Incoming(raw=line.rstrip(b"\r\n"), topic=source, partition=None, offset=number)
