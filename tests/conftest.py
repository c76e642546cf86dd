"""Shared fixtures: the real packaged model, both store backends, and the local Kafka broker."""

from __future__ import annotations

import os
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
KAFKA_PORT = int(os.environ.get("DREAM_KAFKA_PORT", "9092"))


@pytest.fixture(scope="session")
def embedder():
    """One real all-MiniLM-L6-v2 for the whole session (loading it takes seconds)."""
    from dreamstream.streams.core.embedding import shared_embedder

    return shared_embedder()


@pytest.fixture(params=["edge", "server"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[object]:
    """Each store test runs on qdrant-edge and on qdrant-client's API (local mode stands in for a server)."""
    from dreamstream.streams.store import EdgeStore, ServerStore

    s = EdgeStore(tmp_path / "store") if request.param == "edge" else ServerStore(location=":memory:")
    yield s
    s.close()


@pytest.fixture
def edge_store(tmp_path: Path) -> Iterator[object]:
    from dreamstream.streams.store import EdgeStore

    s = EdgeStore(tmp_path / "store")
    yield s
    s.close()


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="session")
def kafka() -> str:
    """The project's own single-node KRaft broker (deploy/kafka/kafka.sh), started if not running."""
    if not _port_open(KAFKA_PORT):
        subprocess.run([str(ROOT / "deploy" / "kafka" / "kafka.sh"), "start"], check=True)
    return f"127.0.0.1:{KAFKA_PORT}"


@pytest.fixture
def unique() -> str:
    """A suffix for topic names and consumer groups so tests never see each other's data."""
    return uuid.uuid4().hex[:10]
