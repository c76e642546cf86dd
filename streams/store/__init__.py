"""The memory collection: one schema, two backends behind one interface.

`EdgeStore` (edge.py) runs Qdrant's engine in process and is the embedded default; `ServerStore`
(server.py) talks to a Qdrant server through qdrant-client. `open_store` picks one from the settings.
"""

from __future__ import annotations

from typing import Any

from dreamstream.schemas.errors import ConfigError, DreamError, StoreError
from dreamstream.streams.settings import Settings
from dreamstream.streams.store.base import (
    COLLECTION,
    INDEXED_FIELDS,
    MIN_FREE_BYTES,
    VECTOR_SIZE,
    MemoryStore,
    Where,
    normalise_text,
    point_id,
    sorted_by_time,
    text_key,
)
from dreamstream.streams.store.edge import STORE_MARKER, EdgeStore
from dreamstream.streams.store.server import ServerStore

__all__ = ["COLLECTION", "INDEXED_FIELDS", "STORE_MARKER", "VECTOR_SIZE", "EdgeStore", "MemoryStore", "ServerStore",
           "Where", "normalise_text", "open_configured", "open_store", "point_id", "sorted_by_time", "text_key"]


def open_store(store_dir: str | None = None, qdrant_url: str | None = None, api_key: str | None = None,
               owner: str | None = None, min_free_bytes: int = MIN_FREE_BYTES,
               collection: str = COLLECTION) -> Any:
    """The configured backend: a Qdrant server when a URL is given, else the embedded shard (locked by
    this process, `owner` saying who it is to any other that tries). Failures are StoreErrors."""
    if not qdrant_url and not store_dir:
        raise ConfigError("no store: give --store DIR (embedded) or set QDRANT_URL")
    try:
        if qdrant_url:
            if qdrant_url == ":memory:":
                return ServerStore(location=":memory:")
            return ServerStore(url=qdrant_url, api_key=api_key, collection=collection)
        return EdgeStore(str(store_dir), owner=owner, min_free_bytes=min_free_bytes)
    except DreamError:
        raise
    except Exception as exc:
        raise StoreError(f"cannot open the store: {type(exc).__name__}: {exc}") from exc


def open_configured(settings: Settings, store_dir: str | None = None, owner: str | None = None) -> Any:
    """The store the settings name: QDRANT_URL when set, else `store_dir` or DREAM_STORE."""
    return open_store(store_dir or settings.store_dir, settings.qdrant_url, settings.qdrant_api_key, owner,
                      int(settings.min_free_mb * 2**20), settings.qdrant_collection)
