"""Where each input partition stands: the offsets ingest has stored, so it alone decides what is committed.

Faust commits an input offset once every stream that got the record has acked it, and it fills gaps in
the offsets it reads as if they were acked (meant for compacted topics and transaction markers). Seen
here after a SIGKILL restart: the fetch resumed past the committed offset (faust-streaming #216
family), Faust filled the gap, and the next commit skipped records no agent had seen. So ingest reads
its topics with Faust's acks off and keeps this ledger instead:

- a partition's `next` offset is the first one not yet stored (everything before it is stored);
- records arrive in offset order; one below `next` is a redelivery (skipped), one at `next` is taken;
- one above `next` is a gap. The log is asked what the first record at or after `next` really is
  (`floor`): transaction markers take offsets that hold no record, so a gap up to the floor loses
  nothing. A gap past the floor means records were not delivered: they are dropped (not stored
  out of order), the partition is seeked back to `next`, and they come again;
- ingest commits `next` after a batch is stored, never more.

Pure: the worker (streams/worker/app.py) does the probing, seeking and committing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Generic, TypeVar

P = TypeVar("P")


class Verdict(Enum):
    TAKE = "take"  # the next record: process it
    SKIP = "skip"  # already stored (a redelivery)
    PROBE = "probe"  # a gap: ask the log for the first record at or after `next`, then admit again
    SEEK = "seek"  # records were skipped: drop this one and seek the partition back to `next`
    DROP = "drop"  # still past a gap a seek is closing: drop it, it comes again


@dataclass
class _State:
    next: int
    epoch: object = None  # the consumer generation the partition was started in
    floor: int | None = None  # the first record at or after `next`, as the log answered
    sought_at: float | None = None  # the last seek back to `next`
    behind_since: float | None = None  # the first seek back to `next` (cleared when `next` is taken)


@dataclass
class InputOffsets(Generic[P]):
    """The ledger; `reseek_after` seconds without the seek taking effect and the partition is seeked again."""

    reseek_after: float = 10.0
    parts: dict[P, _State] = field(default_factory=dict)
    gaps_skipped: int = 0
    """Offsets with no record (transaction markers) passed over."""

    def known(self, tp: P, epoch: object = None) -> bool:
        """Started in this generation: after a rebalance a partition starts again from its commit (it may
        have been another worker's meanwhile)."""
        return tp in self.parts and self.parts[tp].epoch == epoch

    def start(self, tp: P, next_offset: int, epoch: object = None) -> None:
        """The partition was (re)assigned: reading resumes at its committed offset (or the log start)."""
        self.parts[tp] = _State(next_offset, epoch)

    def next_offset(self, tp: P) -> int:
        return self.parts[tp].next

    def admit(self, tp: P, offset: int, now: float) -> Verdict:
        state = self.parts[tp]
        if offset < state.next:
            return Verdict.SKIP
        if offset == state.next or offset == state.floor:
            if offset > state.next:
                self.gaps_skipped += offset - state.next
            state.next, state.floor, state.sought_at, state.behind_since = offset + 1, None, None, None
            return Verdict.TAKE
        if state.floor is None:
            return Verdict.PROBE
        if offset < state.floor:  # the log said there is no record here: a stale answer; ask again
            state.floor = None
            return Verdict.PROBE
        if state.sought_at is None or now - state.sought_at >= self.reseek_after:
            state.sought_at = now
            if state.behind_since is None:
                state.behind_since = now
            return Verdict.SEEK
        return Verdict.DROP

    def floor_is(self, tp: P, first_record: int | None) -> None:
        """The log's answer to PROBE; None (no answer) is treated as a loss to seek back over."""
        state = self.parts[tp]
        state.floor = first_record if first_record is not None and first_record >= state.next else state.next

    def rewind(self, tp: P, offset: int, now: float) -> None:
        """A batch failed to store: read again from its first record (the caller seeks there)."""
        state = self.parts[tp]
        state.next = min(state.next, offset)
        state.floor, state.sought_at = state.next, now  # not `behind_since`: a store outage is not a wedge

    def heal(self, tp: P, committed: int | None) -> bool:
        """A partition seeked back to records that never came, while the group has committed past them:
        those records are stored (a commit follows a store), the ledger started too low. It resumes at
        the commit; True when it did (the caller seeks there)."""
        state = self.parts.get(tp)
        if state is None or committed is None or committed <= state.next:
            return False
        self.parts[tp] = _State(committed, state.epoch)
        return True

    def unanswered(self, now: float, after: float) -> list[P]:
        """Partitions seeked back over `after` seconds ago whose missing record has not come: the
        fetcher is wedged (the watchdog then fails /healthz, and a restart reads from the commit)."""
        return [tp for tp, s in self.parts.items() if s.behind_since is not None and now - s.behind_since > after]
