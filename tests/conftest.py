"""Shared fixtures: the real packaged model, both store backends, and the local Kafka broker."""

from __future__ import annotations

import os
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


SHARED_BIN = Path(os.environ.get("DREAM_SHARED_BIN") or ROOT.parent / "shared" / "bin")

GIVEN_QDRANT_URL = os.environ.pop("QDRANT_URL", "")
"""`QDRANT_URL=... make test` names the server the server-path tests use (the fixtures below). It is
taken out of the environment so that every other test's workers and CLI keep the store that test
gives them, instead of all falling back to one shared collection on that server."""


@pytest.fixture(scope="session")
def qdrant_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str | None]:
    """A real Qdrant server: QDRANT_URL when it names one, else the build in ../shared/bin started for
    this session on a free port (deploy/qdrant/qdrant.sh says how to run the official image); None
    where neither is there."""
    if GIVEN_QDRANT_URL.startswith(("http://", "https://")):
        yield GIVEN_QDRANT_URL
        return
    script = SHARED_BIN / "qdrant-server"
    if not script.exists():
        yield None
        return
    folder = tmp_path_factory.mktemp("qdrant")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = subprocess.run([str(script), "start", str(folder), str(port)], capture_output=True, text=True, check=True)
    try:
        yield out.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run([str(script), "stop", str(folder)], capture_output=True)


@pytest.fixture(params=["edge", "memory", "server"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[object]:
    """Each store test runs on qdrant-edge, on qdrant-client's local `:memory:` mode (a Python stand-in)
    and on a real Qdrant server, in a collection of its own (skipped only where no server can be had)."""
    from dreamstream.streams.store import EdgeStore, ServerStore

    if request.param == "edge":
        s: Any = EdgeStore(tmp_path / "store")
    elif request.param == "memory":
        s = ServerStore(location=":memory:")
    else:
        url = request.getfixturevalue("qdrant_url")
        if url is None:
            pytest.skip(f"no Qdrant server: {SHARED_BIN}/qdrant-server is missing and QDRANT_URL is unset")
        s = ServerStore(url=url, api_key=os.environ.get("QDRANT_API_KEY") or None,
                        collection=f"test_{uuid.uuid4().hex[:12]}")
    yield s
    if request.param == "server":
        s.drop()
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
def kafka() -> Iterator[str]:
    """The project's own single-node KRaft broker (deploy/kafka/kafka.sh), started if not running. At the
    end the topics this session made go (only its own: another session may share the broker)."""
    import asyncio

    from dreamstream.streams.dev import localrun

    if not _port_open(KAFKA_PORT):
        subprocess.run([str(ROOT / "deploy" / "kafka" / "kafka.sh"), "start"], check=True)
    yield f"127.0.0.1:{KAFKA_PORT}"
    try:
        asyncio.run(localrun.delete_topics_named(f"127.0.0.1:{KAFKA_PORT}", localrun.NAMES, UNIQUES))
    except Exception as exc:  # never fail a run over its clean-up
        print(f"conftest: the session's topics were not deleted ({exc})")


UNIQUES: list[str] = []


@pytest.fixture
def unique() -> str:
    """A suffix for topic names and consumer groups so tests never see each other's data."""
    UNIQUES.append(uuid.uuid4().hex[:10])
    return UNIQUES[-1]
