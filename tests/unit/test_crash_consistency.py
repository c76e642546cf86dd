"""A crash at any step of applying a decision is invisible or completed on the next delivery, and no
decision's status events are lost (the outbox). Crashes are raised in process at the fault points
(streams/faults.py); the worker-level SIGKILL campaign is `make fault-test`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dreamstream.schemas.errors import StoreError
from dreamstream.streams import faults
from dreamstream.streams.core.ingest import Incoming, Processor
from dreamstream.streams.store import EdgeStore
from tests.conftest import ROOT

SAMPLE = [line for line in (ROOT / "streams" / "dev" / "sample" / "memories.jsonl").read_bytes().splitlines()
          if line.strip()]
GOOD = SAMPLE[:32]  # the sample's last lines are its bad examples
LINKS = ("status", "superseded_by", "supersedes", "merged_into", "merged_from", "decision_ids")


class Crash(BaseException):
    """Stands in for SIGKILL: not an Exception, so nothing on the write path can swallow it."""


def crash() -> None:
    raise Crash


@pytest.fixture(autouse=True)
def _disarmed() -> Iterator[None]:
    yield
    faults.disarm()


def state(store: Any) -> dict[str, tuple[Any, ...]]:
    return {m.memory_id: tuple(getattr(m, k) if not isinstance(getattr(m, k), list) else tuple(getattr(m, k))
                               for k in LINKS) + (m.pending == {},)
            for m in store.scroll()}


def run_worker_like(proc: Processor, batches: list[list[bytes]], published: list[dict[str, Any]]) -> None:
    """What the ingest agent does per batch: process, publish (collected here), mark sent."""
    for batch in batches:
        result = proc.process([Incoming(raw=r, topic="memory.added") for r in batch])
        published.extend(result.status_events)
        faults.point("published")
        proc.mark_sent(result.outbox_owners)


def batches_of(lines: list[bytes], size: int = 8) -> list[list[bytes]]:
    return [lines[i:i + size] for i in range(0, len(lines), size)]


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> dict[str, tuple[Any, ...]]:
    store = EdgeStore(tmp_path_factory.mktemp("clean") / "store")
    events: list[dict[str, Any]] = []
    run_worker_like(Processor(store, embedder, keep_outbox=True), batches_of(GOOD), events)
    out = state(store)
    store.close()
    assert len({e["decision_id"] for e in events}) >= 6  # the sample's supersedes and merges
    return out


# Each step is passed once per batch ("target" once per changed target): four batches of eight.
@pytest.mark.parametrize(("step", "n"), [("stored", 1), ("stored", 3), ("target", 1), ("target", 3),
                                         ("applied", 4), ("published", 2)])
def test_a_crash_at_any_step_ends_as_a_clean_run_with_every_decision_published(
        step: str, n: int, tmp_path: Path, embedder: Any, clean: dict[str, tuple[Any, ...]]) -> None:
    store = EdgeStore(tmp_path / "store")
    published: list[dict[str, Any]] = []
    batches = batches_of(GOOD)
    faults.arm(step, n, crash)
    with pytest.raises(Crash):
        run_worker_like(Processor(store, embedder, keep_outbox=True), batches, published)
    faults.disarm()
    # The restarted worker: unsent events first, then the uncommitted batches delivered again.
    proc = Processor(store, embedder, keep_outbox=True)
    unsent = proc.unsent()
    published.extend(unsent.status_events)
    proc.mark_sent(unsent.outbox_owners)
    run_worker_like(proc, batches, published)
    assert state(store) == clean
    decided = {d["decision_id"] for m in store.scroll() for d in m.decisions}
    assert decided and decided <= {e["decision_id"] for e in published}  # at least once, by decision id
    assert proc.unsent().status_events == []
    store.close()


def test_a_crash_after_the_first_write_leaves_the_decision_stored_with_what_is_left(
        tmp_path: Path, embedder: Any) -> None:
    store = EdgeStore(tmp_path / "store")
    faults.arm("stored", 2, crash)  # demo-m009 (the second batch) moves Ana to Porto: it supersedes demo-m001
    with pytest.raises(Crash):
        run_worker_like(Processor(store, embedder, keep_outbox=True), batches_of(GOOD[:9], 8), [])
    half = store.retrieve(["demo-m009", "demo-m001"])
    assert half["demo-m009"].supersedes == ["demo-m001"] and "demo-m001" in half["demo-m009"].pending
    assert half["demo-m001"].status == "active"  # not yet: the pending write is still to come
    assert [e["memory_id"] for e in half["demo-m009"].outbox] == ["demo-m001"]
    result = Processor(store, embedder, keep_outbox=True).process([Incoming(raw=GOOD[8])])
    assert result.outcomes["rolled_forward"] == 1 and result.outbox_owners == ["demo-m009"]
    done = store.retrieve(["demo-m009", "demo-m001"])
    assert done["demo-m001"].status == "superseded" and done["demo-m001"].superseded_by == "demo-m009"
    assert done["demo-m009"].pending == {}
    store.close()


def test_a_replay_keeps_no_outbox(edge_store: Any, embedder: Any) -> None:
    Processor(edge_store, embedder).process([Incoming(raw=r) for r in GOOD[:10]])
    assert Processor(edge_store, embedder).unsent().status_events == []
    assert all(not m.outbox for m in edge_store.scroll())


class FailingStore:
    """A real store whose writes fail, as a full disk makes them."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def upsert(self, memories: Any) -> None:
        raise StoreError("No space left on device")


def test_a_store_fault_is_raised_for_a_retry_not_dead_lettered(edge_store: Any, embedder: Any) -> None:
    proc = Processor(FailingStore(edge_store), embedder)
    with pytest.raises(StoreError):
        proc.process([Incoming(raw=GOOD[0])])
    assert edge_store.count() == 0
    result = Processor(edge_store, embedder).process([Incoming(raw=GOOD[0])])  # the fault cleared
    assert result.outcomes["stored"] == 1 and not result.dead_letters


def test_a_deterministic_failure_of_one_event_is_dead_lettered(edge_store: Any, embedder: Any) -> None:
    def broken(new: Any, candidates: Any) -> list[Any]:
        raise ValueError("judge bug")

    proc = Processor(edge_store, embedder, decide=broken)
    result = proc.process([Incoming(raw=r) for r in GOOD[:2]])
    # The first memory has no candidates (nothing to judge); the second's judge fails.
    assert result.outcomes["stored"] == 1 and [d["reason"] for d in result.dead_letters] == ["processing_error"]


@pytest.mark.parametrize(("key", "reason"), [(b"user-ana", None), (None, None), (b"user-bob", "key_mismatch"),
                                             (b"", "key_mismatch"), (b"\xff\xfe", "key_mismatch")])
def test_a_record_keyed_by_another_user_is_dead_lettered(edge_store: Any, embedder: Any, key: bytes | None,
                                                         reason: str | None) -> None:
    result = Processor(edge_store, embedder).process([Incoming(raw=GOOD[0], topic="memory.added", key=key)])
    assert [d["reason"] for d in result.dead_letters] == ([reason] if reason else [])
    assert result.outcomes["stored"] == (0 if reason else 1)


def test_events_stored_and_not_marked_sent_are_found_at_start(edge_store: Any, embedder: Any) -> None:
    first = Processor(edge_store, embedder, keep_outbox=True).process([Incoming(raw=r) for r in GOOD[:12]])
    assert first.status_events and first.outbox_owners  # the worker died before marking them sent
    restarted = Processor(edge_store, embedder, keep_outbox=True)
    unsent = restarted.unsent()
    assert sorted(map(str, unsent.status_events)) == sorted(map(str, first.status_events))
    restarted.mark_sent(unsent.outbox_owners)
    assert restarted.unsent().status_events == []


def test_a_crash_after_the_upsert_loses_no_link_whatever_order_recovery_takes(edge_store: Any,
                                                                               embedder: Any) -> None:
    """Two restatements of one fact in one batch both merge into it; killed after the batch's upsert, the
    start's `changes.recover` rolls memories forward in the store's order, not the batch's. The fact still
    lists both, whichever of the two the store returns first."""
    from dreamstream.streams.core import changes
    from dreamstream.streams.store import point_id

    def ev(mid: str, day: int) -> dict[str, Any]:
        return {"type": "memory.added", "event_id": f"e-{mid}", "memory_id": mid, "user_id": "bruno",
                "text": "Bruno prefers tabs over spaces.", "created_at": f"2026-01-0{day}T00:00:00Z"}

    names = [f"n{i}" for i in range(40)]
    late_scroll, early_scroll = max(names, key=point_id), min(names, key=point_id)  # the batch's order reversed
    proc = Processor(edge_store, embedder, keep_outbox=True)
    proc.mark_sent(proc.process([Incoming(raw=ev("c", 1), topic="memory.added")]).outbox_owners)
    faults.arm("stored", 1, crash)
    with pytest.raises(Crash):
        proc.process([Incoming(raw=ev(late_scroll, 2), topic="memory.added"),
                      Incoming(raw=ev(early_scroll, 3), topic="memory.added")])
    faults.disarm()
    changes.recover(edge_store)
    got = edge_store.retrieve(["c", late_scroll, early_scroll])
    assert sorted(got["c"].merged_from) == sorted([late_scroll, early_scroll])
    assert len(got["c"].decision_ids) == 2 and all(got[m].merged_into == "c" for m in (late_scroll, early_scroll))
