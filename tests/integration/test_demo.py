"""`make demo` as a new user runs it: a real worker, the sample events, decisions and reads printed."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.kafka


def test_the_demo_shows_what_the_worker_decided(kafka: str, tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "dreamstream.streams.dev.demo"], capture_output=True, text=True,
                         timeout=600, env={**os.environ, "KAFKA_BOOTSTRAP": kafka, "HF_HUB_OFFLINE": "1",
                                           "DREAM_DEMO_DIR": str(tmp_path / "demo")})
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout
    assert "'memories': 32, 'active': 25, 'superseded': 4, 'merged': 3" in text
    assert "7 memory.status events" in text and "3 dead letters" in text
    carla = text.split("user-carla — default")[1].split("\n\n")[0].splitlines()[1:]
    labels = [line.split("]")[0].strip(" [") for line in carla]
    assert labels and "history" in labels and labels == sorted(labels, key=lambda x: x == "history")
    assert f"dream get --store {os.path.relpath(tmp_path / 'demo' / 'store')}" in text
    # Its topics are gone from the broker once it has run (each run names its own).
    name = text.split("to topic added-")[1].split(",")[0]
    assert name.startswith("demo-")
    assert not [t for t in asyncio.run(topic_names(kafka)) if t.endswith(f"-{name}") or f"dream-{name}-" in t]


async def topic_names(kafka: str) -> list[str]:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=kafka)
    await admin.start()
    try:
        return list(await admin.list_topics())
    finally:
        await admin.close()
