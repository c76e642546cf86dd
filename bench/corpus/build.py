"""The corpus tool: nominate the pairs to label, cut them into labelling batches, collect the labels.

    python bench/corpus/build.py nominate          # streams/*.jsonl -> pairs.jsonl (a sample of the nominated pairs)
    python bench/corpus/build.py batches OUT N     # pairs -> N batch files for labellers (no split, no scores)
    python bench/corpus/build.py collect A B       # two labellers' answers -> labels.jsonl + agreement.json
                                                   # (bench/corpus/labels/{A,B}; the batches they read beside them)
    python bench/corpus/build.py themes-agreement  # themes-second/ (a second writer, 8 people) against themes/

Every pair is labelled by two labellers who did not write its stream, from GUIDE.md; pairs they
disagree on are dropped (reported in agreement.json), so every kept label has two readers behind it.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

import orjson

from dreamstream.streams.core.embedding import Embedder
from dreamstream.streams.dev import judge_corpus as jc

HERE = Path(__file__).resolve().parent
RANK_WEIGHT = {0: 1.0, 1: 0.3, 2: 0.17, 3: 0.1, 4: 0.06, 5: 0.06}
"""Chance that a nominated pair is sampled, by its rank among the newer memory's nearest (0 = exact
text). Fixed per pair, so people added later leave earlier samples as they were."""


def _u(key: str) -> float:
    """A stable uniform draw per pair: the sample does not depend on the order of anything."""
    return int(hashlib.sha256(key.encode()).hexdigest()[:12], 16) / float(16**12)


def _weight(c: jc.Candidate) -> float:
    w = RANK_WEIGHT.get(c.rank, 0.025 if c.rank <= 10 else 0.008)
    return min(1.0, w * (1.8 if c.cos >= 0.55 else 1.0))  # close calls over-represented


def _complete(rows: list[dict]) -> list[dict]:
    """Only people whose stream is finished: a later person in the same file, or a writer marked done."""
    done = {p.stem for p in jc.STREAMS.glob("*.done")}
    by_file: dict[str, list[str]] = defaultdict(list)
    for r in rows:
        w = str(r["person"]).split("-")[0]
        if r["person"] not in by_file[w]:
            by_file[w].append(r["person"])
    ok = {p for w, ps in by_file.items() for p in (ps if w in done else ps[:-1])}
    return [r for r in rows if r["person"] in ok]


def nominate() -> None:
    rows = _complete(jc.stream_rows())
    mems = jc.memories(rows, Embedder(backend="onnx"))
    by_text = {(m.user_id, m.text): m.memory_id for m in mems}
    intended: set[tuple[str, str]] = set()
    for path in sorted(jc.STREAMS.glob("*.intent.jsonl")):
        for it in jc.read_jsonl(path):
            new, old = by_text.get((it["person"], it["newer"])), by_text.get((it["person"], it["older"]))
            if new and old:
                intended.add((new, old))
    cands = jc.nominate(mems)
    chosen = [c for c in cands if (c.newer, c.older) in intended or _u(c.newer + c.older) < _weight(c)]
    ranks = {(c.newer, c.older): c.rank for c in cands}
    found = sum(1 for p in intended if p in ranks)
    top10 = sum(1 for p in intended if 0 <= ranks.get(p, 99) <= 10)
    mem = {m.memory_id: m for m in mems}
    with jc.PAIRS.open("wb") as f:
        for c in sorted(chosen, key=lambda c: (c.newer, c.rank)):
            n, o = mem[c.newer], mem[c.older]
            f.write(orjson.dumps({
                "id": f"{c.newer}~{c.older}", "person": n.user_id, "split": jc.split_of(n.user_id),
                "voice": n.metadata.get("voice"), "newer": c.newer, "older": c.older, "rank": c.rank,
                "cos": round(c.cos, 4), "intended": (c.newer, c.older) in intended,
                "same_session": n.metadata.get("session") == o.metadata.get("session"),
                "newer_text": n.text, "older_text": o.text,
                "newer_date": n.created_at[:10], "older_date": o.created_at[:10],
            }) + b"\n")
    print(f"{len(mems)} memories of {len({m.user_id for m in mems})} people; {len(cands)} nominated pairs "
          f"(k={jc.NOMINATE_K}); {len(chosen)} sampled; intended pairs {len(intended)}: "
          f"{found} nominated, {top10} in the nearest 10")


def batches(out: Path, n: int) -> None:
    """Batches of the pairs not sent before (`out/sent.txt` lists those), named after the wave."""
    out.mkdir(parents=True, exist_ok=True)
    sent_file = out / "sent.txt"
    sent = set(sent_file.read_text().split()) if sent_file.exists() else set()
    pairs = [p for p in jc.read_jsonl(jc.PAIRS) if p["id"] not in sent]
    wave = len(list(out.glob("batch*-01.jsonl"))) + 1
    by_person: dict[str, list[dict]] = defaultdict(list)
    for p in pairs:
        by_person[p["person"]].append(p)
    files = [[] for _ in range(n)]  # type: list[list[dict]]
    for person in sorted(by_person, key=lambda p: -len(by_person[p])):
        min(files, key=len).extend(by_person[person])  # a person's pairs stay in one batch
    for k, rows in enumerate(files):
        with (out / f"batch{wave}-{k + 1:02d}.jsonl").open("wb") as f:
            for p in rows:
                f.write(orjson.dumps({
                    "id": p["id"], "voice": p["voice"], "same_session": p["same_session"],
                    "older": f"[{p['older_date']}] {p['older_text']}",
                    "newer": f"[{p['newer_date']}] {p['newer_text']}",
                }) + b"\n")
        print(f"batch{wave}-{k + 1:02d}: {len(rows)} pairs")
    with sent_file.open("a") as f:
        f.writelines(p["id"] + "\n" for p in pairs)


def _answers(folder: Path) -> dict[str, dict]:
    got: dict[str, dict] = {}
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_bytes().splitlines():
            try:
                row = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if row.get("label") in jc.LABELS_OK:
                got[str(row["id"])] = row
    return got


def _kappa(a: list[str], b: list[str]) -> float:
    n = len(a)
    if not n:
        return 0.0
    po = sum(x == y for x, y in zip(a, b, strict=True)) / n
    ca, cb = Counter(a), Counter(b)
    pe = sum(ca[k] * cb[k] for k in ca) / (n * n)
    return (po - pe) / (1 - pe) if pe < 1 else 1.0


def collect(folders: list[Path]) -> None:
    """Two readers per pair: agreement on the class the judge learns; disagreements dropped."""
    pairs = {p["id"]: p for p in jc.read_jsonl(jc.PAIRS)}
    # Only pairs whose texts are still the ones the labellers read (a stream rewritten since is dropped).
    sent = {}
    for path in sorted([*folders[0].parent.glob("batch*.jsonl"), *folders[0].parent.glob("batches/batch*.jsonl")]):
        sent.update({r["id"]: (r["older"], r["newer"]) for r in jc.read_jsonl(path)})
    pairs = {i: p for i, p in pairs.items() if sent.get(i) == (
        f"[{p['older_date']}] {p['older_text']}", f"[{p['newer_date']}] {p['newer_text']}")}
    readers = [_answers(f) for f in folders]
    both = [i for i in pairs if sum(i in r for r in readers) >= 2]
    a_lab, b_lab, a_cls, b_cls = [], [], [], []
    kept = []
    for i in both:
        first, second = [r[i] for r in readers if i in r][:2]
        ca = jc.class_of(first["label"], first.get("fuller"))
        cb = jc.class_of(second["label"], second.get("fuller"))
        a_lab.append(first["label"])
        b_lab.append(second["label"])
        a_cls.append(ca)
        b_cls.append(cb)
        if ca == cb:
            p = pairs[i]
            label = first["label"] if first["label"] == second["label"] else "both_hold"
            kept.append({k: p[k] for k in ("id", "person", "newer", "older", "rank", "cos", "same_session")}
                        | {"split": jc.split_of(p["person"])}
                        | {"label": label, "fuller": first.get("fuller") if label == "same" else None, "cls": ca,
                           "unsure": bool(first.get("unsure") or second.get("unsure"))})
    with jc.LABELS.open("wb") as f:
        for row in sorted(kept, key=lambda r: r["id"]):
            f.write(orjson.dumps(row) + b"\n")
    report = {
        "pairs": len(pairs), "labelled_twice": len(both), "kept": len(kept),
        "label_agreement": round(sum(x == y for x, y in zip(a_lab, b_lab, strict=True)) / max(len(both), 1), 4),
        "label_kappa": round(_kappa(a_lab, b_lab), 4),
        "class_agreement": round(len(kept) / max(len(both), 1), 4),
        "class_kappa": round(_kappa(a_cls, b_cls), 4),
        "kept_by_split_class": {s: dict(Counter(r["cls"] for r in kept if r["split"] == s)) for s in jc.SPLITS},
    }
    (HERE / "agreement.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


def themes_agreement(second: Path = HERE / "themes-second") -> dict[str, float]:
    """How far two careful readers agree on themes, by the rule synthesis is scored with (score.py: a theme
    is found by a group of the same person whose members have Jaccard >= 0.5 with it). `themes-second/`
    holds themes a second helper wrote from THEMES.md for a few calibration people without seeing
    `themes/`; the first writer's themes are the reference."""
    def jaccard(a: set[int], b: set[int]) -> float:
        return len(a & b) / len(a | b)

    first: dict[str, list[set[int]]] = defaultdict(list)
    other: dict[str, list[set[int]]] = defaultdict(list)
    for path in sorted(second.glob("*.jsonl")):
        for t in jc.read_jsonl(path):
            other[str(t["person"])].append(set(t["members"]))
    for person in other:
        for t in jc.read_jsonl(HERE / "themes" / f"{person.split('-')[0]}.jsonl"):
            if t["person"] == person:
                first[person].append(set(t["members"]))
    found = sum(1 for p, ts in first.items() for t in ts if any(jaccard(t, o) >= 0.5 for o in other[p]))
    matched = sum(1 for p, os in other.items() for o in os if any(jaccard(t, o) >= 0.5 for t in first[p]))
    n_first, n_other = sum(map(len, first.values())), sum(map(len, other.values()))
    out = {"people": len(other), "themes_first": n_first, "themes_second": n_other,
           "recall": round(found / n_first, 4) if n_first else 0.0,
           "precision": round(matched / n_other, 4) if n_other else 0.0}
    print(json.dumps(out))
    return out


def main(argv: list[str]) -> None:
    if not argv or argv[0] not in ("nominate", "batches", "collect", "themes-agreement"):
        sys.exit(__doc__)
    if argv[0] == "themes-agreement":
        themes_agreement()
    elif argv[0] == "nominate":
        nominate()
    elif argv[0] == "batches":
        batches(Path(argv[1]), int(argv[2]))
    else:
        collect([Path(a) for a in argv[1:]])


if __name__ == "__main__":
    main(sys.argv[1:])
