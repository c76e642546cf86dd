"""The bad-input corpus (streams/dev/corpus.py: 1,350 bad records of 30 kinds among valid ones) through
`dream replay`: each bad record dead-lettered exactly once with its reason, every valid one stored."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import orjson

from dreamstream.streams.dev.corpus import bad_corpus
from dreamstream.streams.store import EdgeStore

DREAM = str(Path(sys.executable).with_name("dream"))


def test_every_bad_record_is_dead_lettered_once_with_its_reason_and_no_valid_one_is_lost(tmp_path: Path) -> None:
    records, bad, valid = bad_corpus()
    assert len(bad) >= 1000 and len({kind for kind, _, _ in bad}) >= 15
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(b"".join(r.replace(b"\n", b" ") + b"\n" for r in records))
    dead = tmp_path / "dead.jsonl"
    out = subprocess.run([DREAM, "replay", str(path), "--store", str(tmp_path / "store"), "--dead-letters",
                          str(dead)], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"stored {len(valid)}" in out.stdout and f"{len(bad)} bad lines" in out.stdout
    letters = [orjson.loads(x) for x in dead.read_bytes().splitlines()]
    got = Counter((d.get("original_sha256") or base64.b64decode(d["original_b64"]), d["reason"]) for d in letters)
    # A dead letter keeps the original whole up to 64 KiB, past that its first 64 KiB and its sha256.
    assert got == Counter((raw if len(raw) <= 64 * 1024 else hashlib.sha256(raw).hexdigest(), reason)
                          for _, reason, raw in bad)
    store = EdgeStore(tmp_path / "store")
    try:
        stored = {m.memory_id: m.text for m in store.scroll()}
    finally:
        store.close()
    assert stored == {orjson.loads(v)["memory_id"]: orjson.loads(v)["text"] for v in valid}
