"""The store contract, run on both backends (qdrant-edge and qdrant-client's API)."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from dreamstream.schemas.memory import Memory
from dreamstream.streams.store import EdgeStore, normalise_text


def vec(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=384).astype(np.float32)
    return v / np.linalg.norm(v)


def mem(mid: str, user: str, text: str, seed: int, **kw: object) -> Memory:
    return Memory(mid, user, text, "2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z", vector=vec(seed), **kw)  # type: ignore[arg-type]


def test_upsert_retrieve_update(store) -> None:
    store.upsert([mem("a", "u1", "User lives in Lisbon.", 1)])
    store.update("a", {"status": "superseded", "superseded_by": "b"})
    got = store.retrieve(["a", "missing"], with_vectors=True)
    assert list(got) == ["a"]
    assert got["a"].status == "superseded" and got["a"].superseded_by == "b"
    assert got["a"].vector is not None and np.allclose(got["a"].vector, vec(1), atol=1e-5)


def test_nearest_is_scoped_to_the_user(store) -> None:
    store.upsert([mem("a", "u1", "x", 1), mem("b", "u2", "x", 1), mem("c", "u1", "y", 2)])
    hits = store.nearest(vec(1), {"user_id": "u1"}, 5)
    assert [m.memory_id for m, _ in hits][0] == "a"
    assert {m.user_id for m, _ in hits} == {"u1"}


def test_filters_match_any_and_count(store) -> None:
    store.upsert([mem("a", "u1", "x", 1), mem("b", "u1", "y", 2, status="merged"), mem("c", "u1", "z", 3)])
    assert store.count({"user_id": "u1", "status": ["active"]}) == 2
    assert {m.memory_id for m in store.scroll({"status": ["merged", "superseded"]})} == {"b"}
    store.delete(["a"])
    assert store.count() == 2


def test_scroll_pages_through_everything(store) -> None:
    store.upsert([mem(f"m{i}", "u1", f"t{i}", i) for i in range(1200)])
    assert len(list(store.scroll({"user_id": "u1"}))) == 1200


def test_reads_can_leave_the_word_features_out(store) -> None:
    """A listing or search asks for what it shows: the judge's word features stay in the store."""
    feats = {"words": ["lisbon"], "vectors": "AAAA"}
    store.upsert([mem("a", "u1", "Lives in Lisbon.", 1, features=feats)])
    assert next(iter(store.scroll({"user_id": "u1"}))).features == feats
    light = next(iter(store.scroll({"user_id": "u1"}, with_features=False)))
    assert light.features is None and light.text == "Lives in Lisbon."
    [(hit, _)] = store.nearest(vec(1), {"user_id": "u1"}, 1, with_features=False)
    assert hit.features is None and hit.memory_id == "a"
    assert store.retrieve(["a"])["a"].features == feats


def test_edge_store_survives_reopen(tmp_path) -> None:
    s = EdgeStore(tmp_path / "s")
    s.upsert([mem("a", "u1", "x", 1)])
    s.close()
    again = EdgeStore(tmp_path / "s")
    assert again.retrieve(["a"])["a"].text == "x"
    again.close()


def test_normalised_text_ignores_case_accents_and_punctuation() -> None:
    assert normalise_text("Use PostgreSQL, for AUTH!") == normalise_text("use postgresql for auth")
    assert normalise_text("Café") == normalise_text("cafe")


def test_batched_reads_and_writes(store) -> None:
    store.upsert([mem("a", "u1", "x", 1), mem("b", "u1", "y", 2), mem("c", "u2", "x", 1)])
    store.update_many(["a", "b"], {"outbox": [{"decision_id": "d1"}], "outbox_state": "unsent"})
    assert {m.memory_id for m in store.scroll({"outbox_state": "unsent", "user_id": ["u1", "u3"]})} == {"a", "b"}
    hits = store.nearest_many([vec(1), vec(2)], [{"user_id": "u1"}, {"user_id": "u2"}], 3)
    assert [m.memory_id for m, _ in hits[0]][0] == "a" and {m.user_id for m, _ in hits[1]} == {"u2"}
    store.update("a", {"decision_ids": ["d1", "d2"]})
    assert [m.memory_id for m in store.scroll({"decision_ids": "d2"})] == ["a"]


def test_the_pipeline_and_a_crash_safe_change_end_the_same_on_every_backend(store, embedder, tmp_path) -> None:
    """The sample through ingest, then a consolidation pass killed after its first write and recovered:
    the export equals the embedded store's, field for field that matters."""
    from dreamstream.agents import consolidation as cons
    from dreamstream.streams.core import changes
    from dreamstream.streams.core import consolidation as runner
    from dreamstream.streams.core.ingest import Incoming, Processor
    from dreamstream.streams.core.replay import export_rows
    from tests.unit.test_consolidation import NOW, memories
    from tests.unit.test_crash_consistency import GOOD
    from tests.unit.test_writer_crashes import Crash, CrashAfter

    def run(target: object) -> list[tuple[object, ...]]:
        proc = Processor(target, embedder)  # type: ignore[arg-type]
        proc.process([Incoming(raw=r) for r in GOOD])
        target.upsert(memories(embedder))  # type: ignore[attr-defined]
        plan, _ = runner.make_plan(target, "u1", "proj", cons.DEFAULT_RETENTION, now=NOW)  # type: ignore[arg-type]
        assert plan.merges and plan.prunes
        with pytest.raises(Crash):
            runner.apply_plan(CrashAfter(target, 1), embedder, plan, {0: "A"},  # type: ignore[arg-type]
                              pass_id="cons-congruence")
        assert changes.recover(target)  # type: ignore[arg-type]
        return sorted((r["memory_id"], r["status"], r["superseded_by"], tuple(r["supersedes"]), r["merged_into"],
                       tuple(r["merged_from"])) for r in export_rows(target))  # type: ignore[arg-type]

    reference = EdgeStore(tmp_path / "reference")
    try:
        want = run(reference)
    finally:
        reference.close()
    assert run(store) == want


def test_a_memory_id_claimed_for_one_user_is_refused_to_another_at_the_same_time(store, embedder) -> None:
    """An audit: two workers sharing a Qdrant server each found one memory id free for two users and both wrote
    it; the second write replaced the first user's memory (a point's id comes from the memory id alone). Ingest
    now claims new ids before it decides: of two at once one wins, the other is a memory_id_conflict. An embedded
    store is one process's, where the stored check alone sees every earlier write."""
    from dreamstream.streams.core.ingest import Incoming, Processor

    if isinstance(store, EdgeStore):
        assert store.claim({"x": "ana"}) == {} and store.claim({"x": "bob"}) == {}
        return
    assert store.claim({"x": "ana", "y": "ana"}) == {}
    assert store.claim({"x": "bob", "z": "bob"}) == {"x": "ana"}  # bob's worker, a moment later
    assert store.claim({"x": "ana"}) == {}  # ana's redelivery, or her retry after a crash
    # Bob's worker is mid-batch with "w" (claimed, not yet written) when ana's event for "w" arrives.
    assert store.claim({"w": "bob"}) == {}
    raw = {"type": "memory.added", "event_id": "e-w", "memory_id": "w", "user_id": "ana",
           "text": "Ana keeps bees.", "created_at": "2026-01-01T09:00:00Z"}
    result = Processor(store, embedder).process([Incoming(raw=orjson.dumps(raw), topic="t", partition=0, offset=1,
                                                          key=b"ana")])
    assert [d["reason"] for d in result.dead_letters] == ["memory_id_conflict"]
    assert store.retrieve(["w"]) == {}
    # Freed ids: a hard delete (or an erase) lets the id be claimed again.
    store.delete(["x"])
    assert store.claim({"x": "bob"}) == {}
    store.release_claims("ana")
    assert store.claim({"y": "bob"}) == {}
