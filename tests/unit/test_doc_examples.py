"""The documentation's examples end to end (real model, real store) where test_pipeline.py lacks them.

Lisbon -> Berlin and "Use PostgreSQL for auth" / "Auth DB is PostgreSQL" are covered there.
"""

from __future__ import annotations

import pytest

from dreamstream.streams.core import reads
from dreamstream.streams.core.ingest import Incoming, Processor
from tests.helpers import event, line


@pytest.fixture
def proc(edge_store, embedder) -> Processor:  # type: ignore[no-untyped-def]
    return Processor(edge_store, embedder)


def test_subaru_sold_for_tesla_latest_only_returns_tesla(proc: Processor) -> None:
    proc.process([
        Incoming(line(event(1, "u1", "User drives a Subaru Outback.", day=1))),
        Incoming(line(event(2, "u1", "I sold the Subaru and bought a Tesla Model 3.", day=9))),
    ])
    old, new = proc.store.retrieve(["m-u1-1", "m-u1-2"]).values()
    assert old.status == "superseded" and old.superseded_by == new.memory_id
    assert [r["memory_id"] for r in reads.get(proc.store, "u1", "latest_only")] == ["m-u1-2"]


def test_rex_folded_into_fuller_memory_and_hidden_unless_include_merged(proc: Processor) -> None:
    proc.process([
        Incoming(line(event(1, "u1", "User has a dog named Rex.", day=1))),
        Incoming(line(event(2, "u1", "My dog Rex is a 3-year-old golden retriever.", day=3))),
    ])
    bare, full = proc.store.retrieve(["m-u1-1", "m-u1-2"]).values()
    assert bare.status == "merged" and bare.merged_into == full.memory_id and full.status == "active"
    assert [r["memory_id"] for r in reads.get(proc.store, "u1")] == ["m-u1-2"]
    assert sorted(r["memory_id"] for r in reads.get(proc.store, "u1", "include_merged")) == ["m-u1-1", "m-u1-2"]
