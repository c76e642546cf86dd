"""`dream consolidate --auto` publishing its status events to the real broker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_consolidation import _dream, _filled_store


@pytest.mark.kafka
def test_auto_applies_skips_conflicts_and_stores_a_reminder(tmp_path: Path, embedder: Any, kafka: str,
                                                            unique: str) -> None:
    import asyncio

    from dreamstream.streams.dev.localrun import consume_all
    from dreamstream.streams.store import EdgeStore

    store_dir = _filled_store(tmp_path, embedder)
    topic = f"status-{unique}"
    out = _dream("consolidate", "--user", "u1", "--app", "proj", "--auto", store=store_dir,
                 KAFKA_BOOTSTRAP=kafka, DREAM_TOPIC_MEMORY_STATUS=topic)
    assert out.returncode == 0, out.stderr[-2000:]
    line = "[dream --auto] project=proj  merged=1  pruned=2  conflicts_skipped=1  merges_held=0"
    assert line in out.stdout.splitlines()
    events = asyncio.run(consume_all(kafka, topic, 6, 30))  # 2 merged, 1 canonical, 2 expired, 1 reminder
    assert sorted(e["action"] for e in events) == ["consolidate_merge"] * 2 + ["consolidate_new"] * 2 + \
        ["consolidate_prune"] * 2
    s = EdgeStore(store_dir)
    try:
        [reminder] = [m for m in s.scroll({"user_id": "u1"}) if m.metadata.get("type") == "task_learning"]
        assert "1 contradiction needs review" in reminder.text and "dream consolidate --user u1 --app proj" in \
            reminder.text
        assert s.retrieve(["fri-1"])["fri-1"].status == "active"  # conflicts untouched by --auto
    finally:
        s.close()
    empty = _dream("consolidate", "--user", "nobody", "--dry-run", store=store_dir)
    assert empty.stdout.strip() == "No memories found for project nobody. Nothing to consolidate."
