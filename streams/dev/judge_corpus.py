"""The project's labelled corpus (bench/corpus): memory streams written by helpers, the pairs the
pipeline would nominate from them, their labels, and the split by person.

Shared by the corpus tool (`bench/corpus/build.py`), the trainer (`make train-judge`) and the
quality bench, so all three read the same memories, the same pairs and the same split.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from dreamstream.agents import alignment as al
from dreamstream.schemas.memory import Memory

ROOT = Path(__file__).resolve().parents[2] / "bench" / "corpus"
STREAMS = ROOT / "streams"
PAIRS = ROOT / "pairs.jsonl"
LABELS = ROOT / "labels.jsonl"
SPLITS = ("train", "calibration", "test")

NOMINATE_K = 20
"""Nearest earlier memories of the same person each memory is paired with (no similarity floor)."""

LABELS_OK = ("same", "update", "both_hold", "unrelated")
FULLER = ("new", "old", "equal", "each")
CLASSES = ("none", "same_equal", "same_new", "same_old", "same_each", "update")
"""What the learned judge predicts: "none" = both hold or unrelated (nothing to do)."""


def split_of(person: str) -> str:
    """Train, calibration or sealed test, by person. Each writer's people rotate through six slots
    (one test, two calibration, three train) so every split has every writer and voice. The head has
    few weights and learns from half the people; the thresholds need the many decisions of a third."""
    writer, _, p = person.partition("-p")
    try:
        w, k = int(writer.lstrip("w")), int(p)
    except ValueError:
        digest = int(hashlib.sha256(person.encode()).hexdigest(), 16)
        return SPLITS[(0, 0, 0, 1, 1, 2)[digest % 6]]
    slot = (k - 1 + w) % 6
    return "test" if slot == 0 else "calibration" if slot in (1, 2) else "train"


def class_of(label: str, fuller: str | None) -> str:
    if label == "same":
        return f"same_{fuller or 'equal'}"
    return "update" if label == "update" else "none"


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def stream_rows(folder: Path = STREAMS) -> list[dict[str, Any]]:
    """Every written memory, in stream order, with a stable id and a time (sessions a day apart
    at least; within one, a minute between memories)."""
    out: list[dict[str, Any]] = []
    for path in sorted(folder.glob("w*.jsonl")):
        if path.name.endswith(".intent.jsonl"):
            continue
        counters: dict[str, int] = defaultdict(int)
        for row in read_jsonl(path):
            person = str(row["person"])
            i = counters[person]
            counters[person] += 1
            minute = i % 600
            out.append({
                **row, "memory_id": f"{person}-{i:04d}",
                "created_at": f"{row['date']}T{8 + minute // 60:02d}:{minute % 60:02d}:00Z",
            })
    return out


def memories(rows: Sequence[dict[str, Any]], embed: Any) -> list[Memory]:
    """Memories as the pipeline stores them: sentence vector and word features from the model."""
    texts = [str(r["text"]) for r in rows]
    vecs, feats = embed.encode_with_features(texts)
    return [
        Memory(memory_id=r["memory_id"], user_id=str(r["person"]), text=str(r["text"]),
               created_at=r["created_at"], updated_at=r["created_at"], run_id=None,
               vector=np.asarray(v, np.float32), features=f.to_payload(),
               metadata={"voice": r.get("voice"), "session": r.get("session")})
        for r, v, f in zip(rows, vecs, feats, strict=True)
    ]


@dataclass(frozen=True)
class Candidate:
    newer: str
    older: str
    rank: int
    """1 = the nearest earlier memory; 0 = an exact text match outside the nearest."""
    cos: float


def nominate(mems: Sequence[Memory], k: int = NOMINATE_K) -> list[Candidate]:
    """For each memory, the same person's `k` nearest earlier memories and every exact text match:
    the pairs the pipeline judges (no similarity floor)."""
    by_user: dict[str, list[Memory]] = defaultdict(list)
    for m in mems:
        by_user[m.user_id].append(m)
    out: list[Candidate] = []
    for ms in by_user.values():
        mat = np.stack([np.asarray(m.vector) for m in ms])
        sims = mat @ mat.T
        for i in range(1, len(ms)):
            order = np.argsort(-sims[i, :i], kind="stable")
            chosen = {int(j): r + 1 for r, j in enumerate(order[:k])}
            norm = " ".join(ms[i].text.lower().split())
            for j in range(i):
                if j not in chosen and " ".join(ms[j].text.lower().split()) == norm:
                    chosen[j] = 0
            out += [Candidate(ms[i].memory_id, ms[j].memory_id, r, float(sims[i, j])) for j, r in chosen.items()]
    return out


def labelled_pairs(path: Path = LABELS) -> list[dict[str, Any]]:
    """The adjudicated labels: one row per kept pair (id, newer, older, person, split, label, fuller, cls)."""
    return read_jsonl(path)


WRITTEN = ROOT / "written"
"""Pairs written as pairs (`written/TN.jsonl`, each labelled by its writer) and labelled again blind by a
second helper (`written/TN.labels.jsonl`): restatements and updates worded far apart, which the nominated pairs
hold few of. Trained on only with `make train-judge ARGS=--with-written` (train split only; measured, not
shipped: docs/decisions.md)."""
BLIND = ROOT.parent / "blind-pairs"
"""Pairs written the same way by other helpers and never trained on: the judge's test on text nobody tuned it
on (`make bench-quality`)."""


def written_pairs(folder: Path, split: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(rows, pairs) of the written pairs in `folder` whose writer and second labeller agree on the class:
    rows as `stream_rows` gives them (an older and a newer memory per pair, one conversation a few minutes
    apart when both name one session), pairs as `labelled_pairs` does."""
    rows: list[dict[str, Any]] = []
    pairs: list[dict[str, Any]] = []
    for path in sorted(folder.glob("*.jsonl")):
        if path.name.endswith(".labels.jsonl") or not path.with_suffix(".labels.jsonl").exists():
            continue
        second = {r["id"]: class_of(r["label"], r.get("fuller")) for r in read_jsonl(path.with_suffix(".labels.jsonl"))}
        for r in read_jsonl(path):
            cls = class_of(r["label"], r.get("fuller"))
            if second.get(r["id"]) != cls:
                continue
            old, new = r["older"], r["newer"]
            one = old["date"] == new["date"] and old["session"] == new["session"]
            at_new = "09:05" if one else "18:00" if old["date"] == new["date"] else "09:00"
            for side, at, m in (("o", "09:00", old), ("n", at_new, new)):
                rows.append({"person": r["person"], "voice": path.stem, "session": m["session"], "date": m["date"],
                             "text": m["text"], "memory_id": f"{r['id']}-{side}",
                             "created_at": f"{m['date']}T{at}:00Z"})
            pairs.append({"id": r["id"], "newer": f"{r['id']}-n", "older": f"{r['id']}-o", "person": r["person"],
                          "split": split, "label": r["label"], "fuller": r.get("fuller"), "cls": cls})
    return rows, pairs


def by_id(mems: Iterable[Memory]) -> dict[str, Memory]:
    return {m.memory_id: m for m in mems}


def features_of(m: Memory) -> al.TokenFeatures | None:
    return al.TokenFeatures.from_payload(m.features)


MERGEABLE = ("same_equal", "same_new", "same_old")


def score_pairs(judge: Any, pairs: Sequence[dict[str, Any]], mems: dict[str, Memory]) -> dict[str, Any]:
    """Precision and recall of one judge on labelled pairs, each judged alone as the pipeline would
    (its verdict through `merge_supersede.gate`): automatic merges and supersedes, and review proposals.

    A merge is right when the pair is one fact and the memory kept says at least as much; a supersede
    when the pair is an update; a review proposal when it proposes the pair's own action."""
    from dreamstream.agents.merge_supersede import _more_complete, gate

    veto = bool(getattr(judge, "session_veto", True))
    tally = {k: 0 for k in ("merges", "merges_right", "mergeable", "mergeable_merged", "supersedes",
                            "supersedes_right", "updates", "updates_superseded", "reviews", "reviews_right")}
    for p in pairs:
        new, old = mems[p["newer"]], mems[p["older"]]
        v = gate(judge.judge(new, [old])[0], new, old, veto)
        cls = p["cls"]
        tally["mergeable"] += cls in MERGEABLE
        tally["updates"] += cls == "update"
        if v.relation == "same":
            fuller = v.new_fuller if v.new_fuller is not None else _more_complete(new, old)
            right = cls in (("same_new", "same_equal") if fuller else ("same_old", "same_equal"))
            tally["merges"] += 1
            tally["merges_right"] += right
            tally["mergeable_merged"] += cls in MERGEABLE
        elif v.relation == "replaces":
            tally["supersedes"] += 1
            tally["supersedes_right"] += cls == "update"
            tally["updates_superseded"] += cls == "update"
        elif v.relation.startswith("review"):
            tally["reviews"] += 1
            tally["reviews_right"] += (cls.startswith("same") if v.relation == "review_same" else cls == "update")

    def ratio(a: str, b: str) -> float | None:
        return round(tally[a] / tally[b], 4) if tally[b] else None

    return {**tally, "pairs": len(pairs),
            "merge_precision": ratio("merges_right", "merges"),
            "restatement_recall": ratio("mergeable_merged", "mergeable"),
            "supersede_precision": ratio("supersedes_right", "supersedes"),
            "update_recall": ratio("updates_superseded", "updates"), "review_right": ratio("reviews_right", "reviews")}


_FIRST_PERSON = (("I am ", "User is "), ("I'm ", "User is "), ("I have ", "User has "), ("I've ", "User has "),
                 ("My ", "User's "), ("I ", "User "))
_NOT_NAMES = frozenset(["The", "A", "An", "This", "That", "These", "Those", "It", "He", "She", "They", "We", "You",
                        "User", "Our", "Their", "His", "Her"])


def person_name(texts: Sequence[str]) -> str | None:
    """The word a person's third-person memories most often start with (their first name), if any."""
    firsts = [t.split()[0].replace("\u2019", "'").removesuffix("'s").rstrip(",") for t in texts if t.split()]
    common = [w for w in firsts if w[:1].isupper() and w not in _NOT_NAMES]
    if not common:
        return None
    name = max(set(common), key=common.count)
    return name if common.count(name) >= len(texts) // 5 else None


def revoiced(text: str, name: str | None) -> str | None:
    """The same statement as another producer might word its subject: "Kofi sold ..." / "I sold ..."
    as "User sold ...". Producers mix these for one person; None where the text has no such subject."""
    for old, new in _FIRST_PERSON:
        if text.startswith(old):
            return new + text[len(old):]
    if name and text.startswith(name + " "):
        return "User " + text[len(name) + 1:]
    if name and text.startswith(name + "'s "):
        return "User's " + text[len(name) + 3:]
    return None


THEMES = ROOT / "themes"


def themes_case(split: str, out: Path, folder: Path = STREAMS) -> int:
    """The corpus's people of one split as a benchmark case in the shared format (events.jsonl,
    labels.jsonl, themes.jsonl), for synthesis's theme recall and pattern precision: the themes the
    helpers wrote (bench/corpus/THEMES.md), their members by memory id. Labels say only `active`:
    the case measures synthesis, not merges. Returns how many themes it holds."""
    events: list[dict[str, Any]] = []
    themes: list[dict[str, Any]] = []
    for path in sorted(folder.glob("w*.jsonl")):
        if path.name.endswith(".intent.jsonl") or not (THEMES / path.name).exists():
            continue  # a writer whose themes nobody wrote: their people would count every pattern as wrong
        ids: dict[int, str] = {}
        counters: dict[str, int] = defaultdict(int)
        for line, row in enumerate(read_jsonl(path), start=1):
            person = str(row["person"])
            i = counters[person]
            counters[person] += 1
            ids[line] = f"{person}-{i:04d}"
            if split_of(person) != split:
                continue
            minute = i % 600
            events.append({"type": "memory.added", "event_id": f"e-{ids[line]}", "memory_id": ids[line],
                           "user_id": person, "app_id": None, "agent_id": None, "run_id": None,
                           "text": str(row["text"]),
                           "created_at": f"{row['date']}T{8 + minute // 60:02d}:{minute % 60:02d}:00Z",
                           "metadata": {"type": "user_fact", "confidence": 0.9, "pinned": False}})
        for n, t in enumerate(read_jsonl(THEMES / path.name)):
            if split_of(str(t["person"])) == split:
                themes.append({"user_id": t["person"], "theme": f"{path.stem}-t{n:03d}", "hint": t["theme"],
                               "memory_ids": [ids[m] for m in t["members"]]})
    events.sort(key=lambda e: (e["created_at"], e["memory_id"]))
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("events", events), ("themes", themes),
                       ("labels", [{"memory_id": e["memory_id"], "expect": "active"} for e in events])):
        (out / f"{name}.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return len(themes)
