"""The store contract, run on both backends (qdrant-edge and qdrant-client's API)."""

from __future__ import annotations

import numpy as np

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
