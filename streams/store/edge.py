"""The embedded backend: Qdrant's engine in process (qdrant-edge-py), a shard in a local folder.

With a keyword index on user_id it serves thousands of filtered nearest-neighbour queries a second.
"""

from __future__ import annotations

import atexit
import ctypes
import fcntl
import os
import shutil
import sqlite3
import sys
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import closing
from typing import Any

import numpy as np

from dreamstream.schemas.errors import StoreError, StoreLocked
from dreamstream.schemas.memory import Memory
from dreamstream.streams import faults
from dreamstream.streams.store.base import (
    INDEXED_FIELDS,
    MIN_FREE_BYTES,
    UNSHOWN,
    VECTOR_SIZE,
    Where,
    conditions,
    guarded,
    point_id,
    scored,
    stored_payload,
    to_memory,
)

STORE_MARKER = "edge_config.json"
"""The file every embedded store's folder holds (the engine's config): a folder without it is no store."""
LOCK_FILE = "dream.lock"
TOMBSTONES = "tombstones.sqlite"
"""What was removed for good (`bury`): no text, only ids and times."""
COMPACT_DIR, OLD_DIR, COMPACT_DONE = ".compact", ".compacted-away", "DONE"
"""`compact`'s new copy, the engine files it replaced, and the mark that the copy is whole."""

INDEXING_THRESHOLD_KB = 0
HNSW_M = 0
"""No segment is ever indexed (HNSW): an indexing threshold of 0 turns indexing off, and a graph of no
edges (`HNSW_M`) differs from the config an indexed segment was built with, so `optimize()` rebuilds a store's
earlier indexed segments as plain ones. Every read is scoped to one user, which the user_id payload
index answers by scanning that user's points; an indexed segment only made those reads slower
(bench/scale.py at 100k: adds 8.9 -> 15.3 ms after `optimize()`, the nearest query 2.7 -> 7.9 ms; the
same with m=0 alone), and building it took a minute."""


def _finish_compaction(path: str) -> None:
    """Completes or discards a `compact` a crash interrupted: a whole copy (its DONE mark) is swapped in, the
    engine's entries one rename each (the old one moved aside first); a partial one is dropped."""
    work, old = os.path.join(path, COMPACT_DIR), os.path.join(path, OLD_DIR)
    if os.path.isdir(work) and os.path.exists(os.path.join(work, COMPACT_DONE)):
        os.makedirs(old, exist_ok=True)
        for name in os.listdir(work):
            if name == COMPACT_DONE:
                continue
            if name not in os.listdir(old) and os.path.exists(os.path.join(path, name)):
                os.rename(os.path.join(path, name), os.path.join(old, name))
            os.rename(os.path.join(work, name), os.path.join(path, name))
        os.remove(os.path.join(work, COMPACT_DONE))
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)


MEMORY_FILE_SYSTEMS = frozenset({"tmpfs", "ramfs", "shm"})


def _memory_backed(path: str) -> bool:
    """Whether `path` is on a memory-backed file system (by the longest mount point above it in /proc/mounts)."""
    real = os.path.realpath(path)
    try:
        with open("/proc/mounts", encoding="utf-8") as f:
            mounts = [line.split()[:3] for line in f if len(line.split()) >= 3]
    except OSError:  # not Linux: no such file system known
        return False
    best, kind = "", ""
    for _dev, point, fstype in mounts:
        point = point.replace("\\040", " ")
        if (real == point or real.startswith(point.rstrip("/") + "/")) and len(point) > len(best):
            best, kind = point, fstype
    return kind in MEMORY_FILE_SYSTEMS


def _holes(path: str) -> int:
    """Bytes the store's files reach past the blocks they hold (sparse files the engine maps)."""
    total = 0
    for folder, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.stat(os.path.join(folder, name))
            except OSError:
                continue
            total += max(0, st.st_size - st.st_blocks * 512)
    return total


@guarded
class EdgeStore:
    """The embedded backend: a qdrant-edge shard in a local folder, owned by one process at a time.

    The owner holds an exclusive lock on `dream.lock` in the folder, naming itself there; any other
    process is refused with that name (StoreLocked) before it touches the engine's files, so a CLI read
    never disturbs a running worker. The lock goes with the process, however it ends."""

    def __init__(self, path: str | os.PathLike[str], owner: str | None = None,
                 min_free_bytes: int = MIN_FREE_BYTES) -> None:
        import qdrant_edge as qe

        self._qe = qe
        self.path = os.fspath(path)
        self.min_free_bytes = min_free_bytes
        os.makedirs(self.path, exist_ok=True)
        self._files_checked = 0.0
        self._in_memory = _memory_backed(self.path)
        self._writable(every_file=True)
        self._free("opening it (the engine writes its log even to read)")
        self._lock = _take_lock(self.path, owner or f"pid {os.getpid()} ({os.path.basename(sys.argv[0]) or 'python'})")
        try:
            self.shard = self._open_shard()
        except BaseException:
            self._lock.close()
            raise
        _open_stores.add(self)

    def _config(self) -> Any:
        qe = self._qe
        return qe.EdgeConfig(
            vectors=qe.EdgeVectorParams(size=VECTOR_SIZE, distance=qe.Distance.Cosine),
            max_search_threads=2,
            optimizers=qe.EdgeOptimizersConfig(indexing_threshold=INDEXING_THRESHOLD_KB),
            hnsw_config=qe.HnswIndexConfig(m=HNSW_M, ef_construct=100, full_scan_threshold=10_000),
        )

    def _open_shard(self) -> Any:
        qe = self._qe
        config = self._config()
        _finish_compaction(self.path)
        fresh = not any(name not in (".lock", LOCK_FILE, TOMBSTONES) for name in os.listdir(self.path))
        # Loading checks the config against the store's (vector size, distance) and writes it over the
        # saved one (atomically): a store an older version made, with indexed segments, takes it too.
        shard = qe.EdgeShard.create(self.path, config) if fresh else qe.EdgeShard.load(self.path, config)
        if fresh:
            for name in INDEXED_FIELDS:
                shard.update(qe.UpdateOperation.create_field_index(name, qe.PayloadSchemaType.Keyword))
        return shard

    def _filter(self, where: Where | None) -> Any:
        qe = self._qe
        if not where:
            return None
        return qe.Filter(must=[
            qe.FieldCondition(key=key, match=qe.MatchAny(any=value) if any_of else qe.MatchValue(value))
            for key, value, any_of in conditions(where)])

    def _writable(self, every_file: bool = False) -> None:
        """Raises StoreError when the engine could not write its files: an immutable (`chattr +i`) or
        read-only folder or file. The engine writes through memory maps, and a mapped write the
        filesystem refuses kills the process with SIGBUS (seen here), so this is asked before every
        write, flush and close: the folder and its first level each time, every file at most once a
        second."""
        now = time.monotonic()
        every_file = every_file or now - self._files_checked > 1.0
        if every_file:
            names = [name for folder, _dirs, files in os.walk(self.path)
                     for name in (folder, *(os.path.join(folder, f) for f in files))]
        else:  # the folder and its first level: what an immutable or read-only store shows at once
            with os.scandir(self.path) as entries:
                names = [self.path, *(e.path for e in entries if e.is_dir(follow_symlinks=False))]
        for name in names:
            if not os.access(name, os.W_OK):
                # No "held until": a worker holds and retries (its own log says so), a CLI command stops.
                raise StoreError(f"the store cannot write {name} (immutable, read-only or not ours; the engine "
                                 "writes its lock and log even to read)")
        if every_file:
            self._files_checked = now

    def _room(self) -> None:
        """Before a write: the store's files can be written, the disk has room for it (and no test has
        made the store unwritable)."""
        faults.check_writable(self.path)
        self._writable()
        self._free("writes")

    def _free(self, what: str) -> None:
        """StoreError unless the disk has min_free_bytes: the engine maps its files, and a mapped write
        past a full disk kills the process with SIGBUS (creating or loading a store on one did)."""
        free = shutil.disk_usage(self.path).free
        # On a memory-backed file system the engine's maps fill their files' holes as they are opened (a small
        # store's 14 MB became 87, and a read died of SIGBUS with more than the floor free): those count too.
        holes = _holes(self.path) if self._in_memory else 0
        if free < self.min_free_bytes + holes:
            mapped = f" and {holes // 2**20} MiB its files may still take on this tmpfs" if holes else ""
            raise StoreError(f"disk nearly full: {free // 2**20} MiB free under {self.path}, {what} needs "
                             f"{self.min_free_bytes // 2**20} MiB (DREAM_MIN_FREE_MB){mapped}")

    def upsert(self, memories: Sequence[Memory]) -> None:
        if not memories:
            return
        self._room()
        qe = self._qe
        points = []
        for memory in memories:
            if memory.vector is None:
                raise ValueError(f"memory {memory.memory_id} has no vector")
            vector = np.asarray(memory.vector, dtype=np.float32).tolist()
            points.append(qe.Point(point_id(memory.memory_id), vector, stored_payload(memory)))
        self.shard.update(qe.UpdateOperation.upsert_points(points))

    def update(self, memory_id: str, fields: Mapping[str, Any]) -> None:
        self.update_many([memory_id], fields)

    def update_many(self, memory_ids: Sequence[str], fields: Mapping[str, Any]) -> None:
        """The same fields on several memories, in one operation."""
        if memory_ids:
            self._room()
            self.shard.update(self._qe.UpdateOperation.set_payload([point_id(m) for m in memory_ids], dict(fields)))

    def retrieve(self, memory_ids: Sequence[str], with_vectors: bool = False) -> dict[str, Memory]:
        if not memory_ids:
            return {}
        records = self.shard.retrieve([point_id(m) for m in memory_ids], True, with_vectors)
        found = (to_memory(r.payload, r.vector if with_vectors else None) for r in records)
        return {m.memory_id: m for m in found}

    def _payload(self, with_features: bool) -> Any:
        return True if with_features else self._qe.PayloadSelector.Exclude(UNSHOWN)

    def _query(self, vector: np.ndarray, where: Where, limit: int, with_vectors: bool,
               with_features: bool = True) -> Any:
        qe = self._qe
        return qe.QueryRequest(
            limit=limit,
            query=qe.Query.Nearest(np.asarray(vector, dtype=np.float32).tolist()),
            filter=self._filter(where),
            with_payload=self._payload(with_features),
            with_vector=with_vectors,
        )

    def nearest(
        self, vector: np.ndarray, where: Where, limit: int, with_vectors: bool = False, with_features: bool = True
    ) -> list[tuple[Memory, float]]:
        return scored(self.shard.query(self._query(vector, where, limit, with_vectors, with_features)), with_vectors)

    def nearest_many(
        self, vectors: Sequence[np.ndarray], wheres: Sequence[Where], limit: int, with_vectors: bool = False
    ) -> list[list[tuple[Memory, float]]]:
        """One `nearest` per (vector, where), planned as one batch (a single pass over the segments)."""
        if not vectors:
            return []
        requests = [self._query(v, w, limit, with_vectors) for v, w in zip(vectors, wheres, strict=True)]
        results = self.shard.query_batch(self._qe.QueryBatchRequest(requests))
        return [scored(hits, with_vectors) for hits in results]

    def scroll(self, where: Where | None = None, with_vectors: bool = False,
               with_features: bool = True) -> Iterator[Memory]:
        qe = self._qe
        offset = None
        while True:
            request = qe.ScrollRequest(
                offset=offset, limit=512, filter=self._filter(where),
                with_payload=self._payload(with_features), with_vector=with_vectors,
            )
            records, offset = self.shard.scroll(request)
            for r in records:
                yield to_memory(r.payload, r.vector if with_vectors else None)
            if offset is None:
                return

    def count(self, where: Where | None = None) -> int:
        return int(self.shard.count(self._qe.CountRequest(exact=True, filter=self._filter(where))))

    def delete(self, memory_ids: Sequence[str]) -> None:
        if memory_ids:
            self._room()  # a delete writes too (the engine's log): refused like every write on a full disk
            self.shard.update(self._qe.UpdateOperation.delete_points([point_id(m) for m in memory_ids]))

    def compact(self) -> bool:
        """Rewrites the store with only the memories it holds now: the engine keeps a deleted point's payload
        in its log and its segment pages (an audit found an erased user's texts there after an optimize), so
        an erasure ends with this. The copy is built in `.compact` and swapped in entry by entry, which a crash
        at any point leaves to `_finish_compaction` at the next open. False (and nothing done) when the disk
        lacks room for the copy."""
        qe = self._qe
        size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(self.path) for f in fs)
        if shutil.disk_usage(self.path).free - size < self.min_free_bytes:
            return False
        self._room()
        work = os.path.join(self.path, COMPACT_DIR)
        shutil.rmtree(work, ignore_errors=True)
        shard = qe.EdgeShard.create(work, self._config())
        for name in INDEXED_FIELDS:
            shard.update(qe.UpdateOperation.create_field_index(name, qe.PayloadSchemaType.Keyword))
        offset = None
        while True:
            records, offset = self.shard.scroll(qe.ScrollRequest(offset=offset, limit=512, with_payload=True,
                                                                 with_vector=True))
            if records:
                shard.update(qe.UpdateOperation.upsert_points([qe.Point(r.id, r.vector, r.payload) for r in records]))
            if offset is None:
                break
        shard.flush()
        shard.close()
        with open(os.path.join(work, COMPACT_DONE), "wb") as f:
            os.fsync(f.fileno())
        self.shard.flush()
        self.shard.close()
        try:
            _finish_compaction(self.path)
        finally:  # whatever the swap did, the store is open again (on the copy, or on the old files)
            self.shard = self._open_shard()
        return True

    def bury(self, keys: Sequence[str], at: str) -> None:
        """Remembers what was removed for good (`changes.bury_deleted`, `erase_user`), in a SQLite file beside
        the engine's: kept out of the collection, so no read, count or scan of memories ever meets it."""
        if not keys:
            return
        self._room()
        with closing(sqlite3.connect(os.path.join(self.path, TOMBSTONES))) as db, db:
            db.execute("CREATE TABLE IF NOT EXISTS gone (key TEXT PRIMARY KEY, at TEXT NOT NULL)")
            db.executemany("INSERT OR REPLACE INTO gone VALUES (?, ?)", [(k, at) for k in keys])

    def claim(self, owners: Mapping[str, str]) -> dict[str, str]:
        """Nothing to claim: one process holds an embedded store, and ingest's check of what is stored sees every
        earlier write (see ServerStore.claim)."""
        return {}

    def release_claims(self, user_id: str) -> None:
        """No claims are kept here (see `claim`)."""

    def buried(self, keys: Sequence[str]) -> dict[str, str]:
        """Key -> when, for the keys `bury` was given."""
        path = os.path.join(self.path, TOMBSTONES)
        if not keys or not os.path.exists(path):
            return {}
        with closing(sqlite3.connect(path)) as db:
            found: dict[str, str] = {}
            for start in range(0, len(keys), 500):
                chunk = list(keys[start:start + 500])
                rows = db.execute(f"SELECT key, at FROM gone WHERE key IN ({','.join('?' * len(chunk))})", chunk)
                found.update({str(k): str(a) for k, a in rows})
            return found

    def flush(self) -> None:
        self._writable()
        self.shard.flush()

    def optimize(self) -> None:
        """Runs the engine's optimizers (merging segments, dropping deleted points); never builds an index
        of the vectors, and rebuilds an older version's indexed segments as plain ones (`INDEXING_THRESHOLD_KB`)."""
        self._writable(every_file=True)
        self.shard.optimize()

    def rebuild_indexes(self) -> None:
        """Drops and recreates the payload indexes, then optimises (full consolidation's last step); no
        segment becomes an indexed one, which made adds slower."""
        qe = self._qe
        self._writable(every_file=True)
        for name in INDEXED_FIELDS:
            self.shard.update(qe.UpdateOperation.delete_field_index(name))
            self.shard.update(qe.UpdateOperation.create_field_index(name, qe.PayloadSchemaType.Keyword))
        self.shard.optimize()

    def _abandon_if_unwritable(self) -> bool:
        """An engine dropped on a store it cannot write writes anyway and dies by SIGBUS (seen here): such
        a shard is never dropped (one reference leaked on purpose; its WAL has every write)."""
        try:
            self._writable(every_file=True)
        except StoreError as exc:
            if not getattr(self, "_abandoned", False):
                ctypes.pythonapi.Py_IncRef(ctypes.py_object(self.shard))
                self._abandoned = True
                print(f"dreamstream: {exc}; closing without a flush", file=sys.stderr)
            return True
        return False

    def close(self) -> None:
        """Flushes and closes; a store that cannot be written is closed without the flush (its WAL has
        every write; the next open replays it) rather than killed by SIGBUS."""
        try:
            if not self._abandon_if_unwritable():
                self.shard.flush()
                self.shard.close()
        finally:
            self._lock.close()  # releases the lock


_open_stores: weakref.WeakSet[EdgeStore] = weakref.WeakSet()


@atexit.register
def _at_exit() -> None:
    """Before the interpreter drops what is left open: no shard on an unwritable store is dropped."""
    for store in list(_open_stores):
        store._abandon_if_unwritable()


def lock_holder(path: str | os.PathLike[str]) -> str | None:
    """Who holds the store folder's lock now (as it named itself), or None when it is free."""
    name = os.path.join(os.fspath(path), LOCK_FILE)
    try:
        handle = open(name)  # noqa: SIM115  (closed below)
    except (FileNotFoundError, NotADirectoryError):  # no store there (a file named as one): nobody holds it
        return None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return handle.read().strip() or "another process"
    finally:
        handle.close()  # releases the probe's lock, if it got it
    return None


def _take_lock(path: str, owner: str) -> Any:
    """The folder's lock, or StoreLocked naming who holds it."""
    handle = open(os.path.join(path, LOCK_FILE), "a+")  # noqa: SIM115  (held for the store's lifetime)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise StoreLocked(f"store {path} is in use by {holder}") from None
    handle.seek(0)
    handle.truncate()
    handle.write(owner)
    handle.flush()
    return handle
