"""Store faults: a full disk, a folder held by another process, a failing backend. Each is a clear
StoreError (retried by ingest, never a dead letter) and none damages the store."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dreamstream.schemas.errors import StoreError, StoreLocked
from dreamstream.schemas.memory import Memory
from dreamstream.streams.core.ingest import Incoming, Processor
from dreamstream.streams.store import EdgeStore, ServerStore
from tests.unit.test_crash_consistency import GOOD

DREAM = str(Path(sys.executable).with_name("dream"))


def test_a_second_owner_is_refused_with_the_first_ones_name(tmp_path: Path) -> None:
    first = EdgeStore(tmp_path / "store", owner="worker pid 4242; read it over HTTP at http://127.0.0.1:6066")
    try:
        with pytest.raises(StoreLocked, match="in use by worker pid 4242; read it over HTTP"):
            EdgeStore(tmp_path / "store")
    finally:
        first.close()
    EdgeStore(tmp_path / "store").close()  # released with its owner


def test_the_cli_refuses_a_store_a_worker_holds_and_leaves_it_intact(tmp_path: Path, embedder: Any) -> None:
    holder = EdgeStore(tmp_path / "store", owner="worker pid 4242; read it over HTTP at http://127.0.0.1:6066")
    try:
        Processor(holder, embedder).process([Incoming(raw=r) for r in GOOD[:5]])
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        out = subprocess.run([DREAM, "export", "--store", str(tmp_path / "store")],
                             capture_output=True, text=True, timeout=120, env=env)
        assert out.returncode == 1
        assert out.stderr.strip().splitlines() == [
            f"Error: store {tmp_path / 'store'} is in use by worker pid 4242; read it over HTTP at "
            "http://127.0.0.1:6066"]
        # A read goes to the API the holder named; nobody answers there, and the CLI says so in one line.
        read = subprocess.run([DREAM, "get", "--user", "user-ana", "--store", str(tmp_path / "store")],
                              capture_output=True, text=True, timeout=120, env=env)
        assert read.returncode == 1
        assert read.stderr.strip() == "Error: no worker at http://127.0.0.1:6066: connection refused"
        assert holder.count() == 5  # the holder's store still works
        Processor(holder, embedder).process([Incoming(raw=GOOD[5])])
        assert holder.count() == 6
    finally:
        holder.close()


def test_a_full_disk_refuses_writes_keeps_reads_and_recovers(tmp_path: Path, embedder: Any) -> None:
    store = EdgeStore(tmp_path / "store")
    proc = Processor(store, embedder)
    proc.process([Incoming(raw=r) for r in GOOD[:3]])
    store.min_free_bytes = 2**62  # no disk has this much free: "full"
    with pytest.raises(StoreError, match="disk nearly full"):
        proc.process([Incoming(raw=GOOD[3])])
    assert store.count() == 3 and store.retrieve(["demo-m001"])["demo-m001"].text == "User lives in Lisbon."
    store.min_free_bytes = 0
    result = proc.process([Incoming(raw=GOOD[3])])
    assert result.outcomes["stored"] == 1 and not result.dead_letters
    store.close()


def test_a_store_is_not_opened_on_a_full_disk(tmp_path: Path, embedder: Any) -> None:
    """Creating or loading a store on a full disk is a StoreError (one line in the CLI), never the engine's
    mapped write past the disk's end: on a 20 MiB tmpfs `dream replay` and `dream get` died of SIGBUS."""
    with pytest.raises(StoreError, match="disk nearly full: .* opening it"):
        EdgeStore(tmp_path / "fresh", min_free_bytes=2**62)
    store = EdgeStore(tmp_path / "store")
    Processor(store, embedder).process([Incoming(raw=r) for r in GOOD[:2]])
    store.close()
    with pytest.raises(StoreError, match="disk nearly full"):
        EdgeStore(tmp_path / "store", min_free_bytes=2**62)
    got = subprocess.run([DREAM, "get", "--user", "user-ana", "--store", str(tmp_path / "store")],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "HF_HUB_OFFLINE": "1", "DREAM_MIN_FREE_MB": str(2**40)})
    assert got.returncode == 1 and len(got.stderr.strip().splitlines()) == 1 and "disk nearly full" in got.stderr
    again = EdgeStore(tmp_path / "store")  # the refused opens left no lock behind
    assert again.count() == 2
    again.close()


def test_backend_failures_surface_as_store_errors() -> None:
    store = ServerStore(location=":memory:")
    store.close()
    with pytest.raises(StoreError, match="store count failed"):
        store.count()
    with pytest.raises(StoreError, match="store scroll failed"):
        list(store.scroll())
    memory = Memory(memory_id="m", user_id="u", text="t", created_at="2026-01-01T00:00:00Z",
                    updated_at="2026-01-01T00:00:00Z")
    with pytest.raises(StoreError):
        store.upsert([memory])


def test_an_unwritable_store_is_a_store_error_until_it_is_writable_again(
        tmp_path: Path, embedder: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    flag = tmp_path / "unwritable"
    monkeypatch.setenv("DREAM_FAULT_UNWRITABLE", str(flag))
    store = EdgeStore(tmp_path / "store")
    proc = Processor(store, embedder)
    flag.touch()
    with pytest.raises(StoreError, match="Permission denied"):
        proc.process([Incoming(raw=GOOD[0])])
    flag.unlink()
    assert proc.process([Incoming(raw=GOOD[0])]).outcomes["stored"] == 1
    store.close()


IMMUTABLE = r"""
import subprocess, sys
import numpy as np
from dreamstream.schemas.errors import StoreError
from dreamstream.schemas.memory import Memory
from dreamstream.streams.store import EdgeStore

def mem(i):
    v = np.random.default_rng(i).random(384).astype(np.float32)
    return Memory(memory_id=f"m{i}", user_id="u", text="x" * 100, created_at="2026-01-01T00:00:00Z",
                  updated_at="2026-01-01T00:00:00Z", vector=v / np.linalg.norm(v))

store = EdgeStore(sys.argv[1])
store.upsert([mem(i) for i in range(100)])
store.flush()
subprocess.run(["chattr", "-R", "+i", sys.argv[1]], check=True)
refused = 0
for k in range(20):
    try:
        store.upsert([mem(1000 + 100 * k + i) for i in range(100)])
        store.flush()
    except StoreError:
        refused += 1
print("refused", refused, flush=True)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="chattr +i needs root")
def test_an_immutable_store_is_refused_not_killed_by_sigbus(tmp_path: Path) -> None:
    """Seen in the fault campaign: `chattr +i` on the store folder killed the worker by SIGBUS (the
    engine's memory-mapped writes), with no log line. Now every write is refused with a StoreError and
    the process ends normally, the store untouched."""
    folder = tmp_path / "store"
    if subprocess.run(["chattr", "+i", str(tmp_path)], capture_output=True).returncode != 0:
        pytest.skip("this filesystem has no immutable flag")
    subprocess.run(["chattr", "-i", str(tmp_path)], check=True)
    try:
        out = subprocess.run([sys.executable, "-c", IMMUTABLE, str(folder)], capture_output=True, text=True,
                             timeout=120, cwd=tmp_path)
    finally:
        subprocess.run(["chattr", "-R", "-i", str(folder)], check=False)
    assert out.returncode == 0, out.stderr[-2000:]  # -7 (SIGBUS) before
    assert "refused 20" in out.stdout and "closing without a flush" in out.stderr
    store = EdgeStore(folder)
    try:
        assert store.count() == 100
    finally:
        store.close()


def test_a_second_worker_on_a_held_embedded_store_is_refused_before_it_joins(tmp_path: Path) -> None:
    """Seen in the fault campaign: a second worker in the group took half the partitions, could not open
    the store, and held their events while /healthz said 200. Now it stops at once, in one line."""
    holder = EdgeStore(tmp_path / "store", owner="worker pid 4242; read it over HTTP at http://127.0.0.1:6066")
    try:
        out = subprocess.run([DREAM, "worker"], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "HF_HUB_OFFLINE": "1", "DREAM_STORE": str(tmp_path / "store"),
                                  "KAFKA_BOOTSTRAP": "127.0.0.1:1"})
    finally:
        holder.close()
    assert out.returncode == 1
    [line] = out.stderr.strip().splitlines()
    assert "in use by worker pid 4242" in line and "QDRANT_URL" in line


def test_a_server_collection_gets_its_missing_payload_indexes_on_open(qdrant_url: str | None) -> None:
    """A worker killed between creating the collection and its indexes left it without them for good, and
    every filtered read scanned: each open now adds whatever index is missing."""
    import uuid

    from dreamstream.streams.store import ServerStore
    from dreamstream.streams.store.base import INDEXED_FIELDS

    if qdrant_url is None:
        pytest.skip("no Qdrant server: ../shared/bin/qdrant-server is missing and QDRANT_URL is unset")
    name = f"test_{uuid.uuid4().hex[:12]}"
    first = ServerStore(url=qdrant_url, collection=name)
    try:
        first.client.delete_payload_index(name, "user_id")
        assert "user_id" not in (first.client.get_collection(name).payload_schema or {})
        again = ServerStore(url=qdrant_url, collection=name)
        assert set(INDEXED_FIELDS) <= set(again.client.get_collection(name).payload_schema or {})
        again.close()
    finally:
        first.client.delete_collection(name)
        first.close()


def test_on_a_memory_backed_file_system_the_floor_counts_the_holes_the_maps_fill(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An audit: on a tmpfs with more than DREAM_MIN_FREE_MB free, a plain `dream get` died of SIGBUS: opening the
    store filled its sparse files (14 MB became 87). There the floor counts those holes too; on a disk it does not
    (a read of a hole allocates nothing there)."""
    import shutil

    from dreamstream.streams.store import edge

    path = tmp_path / "store"
    EdgeStore(path).close()
    holes = edge._holes(str(path))
    assert holes > 32 * 2**20  # the engine's files are mostly holes when new
    floor = shutil.disk_usage(tmp_path).free - holes // 2
    EdgeStore(path, min_free_bytes=floor).close()
    monkeypatch.setattr(edge, "_memory_backed", lambda _path: True)
    with pytest.raises(StoreError, match="may still take on this tmpfs"):
        EdgeStore(path, min_free_bytes=floor)
    shm = [line.split()[2] for line in Path("/proc/mounts").read_text().splitlines() if line.split()[1] == "/dev/shm"]
    assert edge._memory_backed("/dev/shm") == (shm[-1:] == ["tmpfs"])
