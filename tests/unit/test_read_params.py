"""Read parameters: an unknown one is refused (a typo must not return everything), `threshold` floors a
search's relevance, and any metadata key filters."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from dreamstream.streams.core import memories, reads
from dreamstream.streams.core.ingest import Incoming, Processor
from tests.helpers import event


def test_unknown_parameters_are_refused_known_ones_pass() -> None:
    memories.check_params({"user": "u", "q": "x", "threshold": "0.5", "metadata.topic": "garden", "app_id": "a"})
    for typo in ("usr", "app", "metadata.", "latestonly"):
        with pytest.raises(ValueError, match="unknown parameter"):
            memories.check_params({"user": "u", typo: "1"})


def test_threshold_needs_a_search_and_a_number_from_0_to_1() -> None:
    assert reads.read_query({"user": "u", "q": "x", "threshold": "0.4"}).threshold == 0.4
    for bad in ({"user": "u", "threshold": "0.4"}, {"user": "u", "q": "x", "threshold": "2"},
                {"user": "u", "q": "x", "threshold": "high"}, {"user": "u", "q": "x", "threshold": "nan"}):
        with pytest.raises(ValueError, match="threshold"):
            reads.read_query(bad)


def test_threshold_and_metadata_filters_narrow_a_read(edge_store: Any, embedder: Any) -> None:
    rows = [event(1, "u1", "Keeps bees on the roof.", metadata={"type": "user_fact", "topic": "garden"}),
            event(2, "u1", "Grows tomatoes in pots.", metadata={"type": "user_fact", "topic": "garden"}),
            event(3, "u1", "Works as a tax accountant.", metadata={"type": "user_fact", "topic": "work"})]
    Processor(edge_store, embedder).process([Incoming(raw=orjson.dumps(r)) for r in rows])
    every = memories.list_page(edge_store, embedder, reads.read_query({"user": "u1", "q": "bees"}), {}, None).rows
    floor = (every[0]["relevance"] + every[-1]["relevance"]) / 2
    some = memories.list_page(edge_store, embedder, reads.read_query(
        {"user": "u1", "q": "bees", "threshold": str(floor)}), {}, None).rows
    assert 0 < len(some) < len(every) and all(r["relevance"] >= floor for r in some)
    params = {"user": "u1", "metadata.topic": "garden"}
    garden = memories.list_page(edge_store, embedder, reads.read_query(params), memories.filters(params), None).rows
    assert sorted(r["text"] for r in garden) == ["Grows tomatoes in pots.", "Keeps bees on the roof."]


def test_a_hard_delete_removes_the_memory_and_every_link_to_it(edge_store: Any, embedder: Any) -> None:
    """What it had replaced is current again, a pattern drawn from it goes with it (its text may quote it),
    another user's memory is never touched, and one status event per memory changed says so."""
    import numpy as np

    from dreamstream.schemas.memory import Memory

    texts = ["Lives in Lisbon.", "Moved to Porto.", "Likes the sea.", "Lives in Lisbon."]
    vectors = embedder(texts)
    stamp = "2026-01-01T10:00:00Z"

    def mem(mid: str, i: int, user: str = "u1", **links: Any) -> Memory:
        return Memory(memory_id=mid, user_id=user, text=texts[i], created_at=stamp, updated_at=stamp,
                      vector=np.asarray(vectors[i], dtype=np.float32), **links)

    edge_store.upsert([mem("old", 0, status="superseded", superseded_by="new"),
                       mem("new", 1, supersedes=["old"]),
                       mem("pat", 2, kind="pattern", sources=["new", "old"]),
                       mem("foreign", 3, user="u2", status="superseded", superseded_by="new"),
                       mem("gone", 3, status="deleted", superseded_by="new")])
    assert memories.hard_delete_memory(edge_store, "new", "u2") is None  # not u2's
    events = memories.hard_delete_memory(edge_store, "new", "u1")
    assert events is not None
    assert [(e["memory_id"], e["from_status"], e["to_status"]) for e in events] == [
        ("new", "active", "deleted"), ("pat", "active", "deleted"), ("old", "superseded", "active")]
    got = edge_store.retrieve(["old", "new", "pat", "foreign"])
    assert "new" not in got and "pat" not in got
    assert (got["old"].status, got["old"].superseded_by) == ("active", None)
    assert (got["foreign"].status, got["foreign"].superseded_by) == ("superseded", "new")
    gone = edge_store.retrieve(["gone"])["gone"]
    assert (gone.status, gone.superseded_by) == ("deleted", None)  # unlinked, not brought back
