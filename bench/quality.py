#!/usr/bin/env python3
"""`make bench-quality`: decision quality on every case from one run, synthetic and real.

    .venv/bin/python bench/quality.py [--json] [--only NAME ...] [--synthesis] [--judges learned offline]

Each case is replayed with `dream replay` into a fresh embedded store and exported, as a user
would. Synthetic cases (labelled: ../shared/bench/dev and the project's own bench/cases/*) are
scored by `score.py`; real cases (../shared/bench/real/locomo and msc, unlabelled) are measured by
`audit.py` with the project's committed verdicts (bench/audits/real-<case>.jsonl): precision over
judged decisions, how many are still unjudged, recall against the hand-found truths. Abstentions
(review items) are counted from the replay. `--synthesis` also runs synthesis on every synthetic case
that has themes (theme recall and pattern precision per case) and on locomo (its patterns audited).

Judges are measured side by side (`--judges`, default: the learned judge and the rules alone): every
case is replayed once per judge. The project's own corpus comes first: the sealed test split's
labelled pairs (bench/corpus), each judged alone, precision and recall per action; with `--synthesis`,
also synthesis on those people's streams against the themes helpers wrote for them. On locomo the
review items (abstentions) are audited too: `--todo-reviews FILE` writes the unjudged ones for a
reader, and verdicts live in bench/audits/real-locomo-reviews.jsonl.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "bench"
WORK = REPO / ".cache" / "bench-quality"
BIN = Path(sys.executable).parent
SYNTHETIC = {"dev": SHARED / "dev", **{p.name: p for p in sorted((REPO / "bench" / "cases").iterdir()) if p.is_dir()}}
REAL = {"locomo": SHARED / "real" / "locomo", "msc": SHARED / "real" / "msc"}


def replay(name: str, case: Path, synthesis: bool, judge: str) -> tuple[Path, dict[str, int]]:
    """Replay and export one case with one judge; returns the export and the replay's decision counts."""
    work = WORK / judge / name
    store, state = work / "store", work / "state.jsonl"
    subprocess.run(["rm", "-rf", str(work)], check=True)
    work.mkdir(parents=True)
    cmd = [str(BIN / "dream"), "replay", str(case / "events.jsonl"), "--store", str(store)]
    out = subprocess.run(cmd + (["--synthesis"] if synthesis else []), check=True, capture_output=True,
                         text=True, env={**os.environ, "HF_HUB_OFFLINE": "1", "DREAM_JUDGE": judge}).stdout
    subprocess.run([str(BIN / "dream"), "export", "--store", str(store), "--out", str(state)], check=True,
                   capture_output=True)
    m = re.search(r"^decisions: (.*)$", out, re.MULTILINE)
    counts = {k: int(v) for k, v in (p.split("=") for p in m.group(1).split(", "))} if m else {}
    return state, counts


def run_json(cmd: list[str]) -> dict[str, Any]:
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def table(rows: list[list[Any]], head: list[str]) -> str:
    cells = [head] + [["-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(head))]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
             for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


@functools.cache
def _embedder() -> Any:
    """The packaged model, loaded once for the corpus and the blind pairs."""
    from dreamstream.streams.core.embedding import Embedder

    return Embedder()


def _pair_judges(judges: list[str]) -> dict[str, Any]:
    """The judges asked for that judge pairs alone (the learned judge, the rules), built once each."""
    from dreamstream.agents.merge_supersede import OfflineJudge
    from dreamstream.streams.core import judge_model

    built = {"learned": judge_model.learned_judge, "offline": OfflineJudge}
    return {j: built[j]() for j in judges if j in built}


def corpus_scores(judges: list[str], splits: tuple[str, ...] = ("test",)) -> dict[str, Any]:
    """Each judge on the labelled pairs of the corpus's people in `splits` (the sealed test by default)."""
    from dreamstream.streams.dev import judge_corpus as jc

    if not jc.LABELS.exists():
        return {}
    labels = jc.labelled_pairs()
    people = {p["person"] for p in labels if p["split"] in splits}
    rows = [r for r in jc.stream_rows() if r["person"] in people]
    mems = jc.by_id(jc.memories(rows, _embedder()))
    built = _pair_judges(judges)
    return {split: {j: jc.score_pairs(judge, [p for p in labels if p["split"] == split], mems)
                    for j, judge in built.items()} for split in splits}


def blind_scores(judges: list[str]) -> dict[str, Any]:
    """Each judge on the blind pairs (bench/blind-pairs: written and labelled twice by helpers, never trained
    on), where writer and second labeller agree."""
    from dreamstream.streams.dev import judge_corpus as jc

    rows, pairs = jc.written_pairs(jc.BLIND, "blind")
    if not pairs:
        return {}
    mems = jc.by_id(jc.memories(rows, _embedder()))
    return {j: jc.score_pairs(judge, pairs, mems) for j, judge in _pair_judges(judges).items()}


def review_items(store: Path) -> list[dict[str, str]]:
    """The review items (abstentions) a replay left, as audit keys: action review_merge / review_supersede."""
    sys.path.insert(0, str(SHARED / "real"))
    from audit import pair_key  # type: ignore[import-not-found]

    from dreamstream.agents.consolidation import recorded_reviews
    from dreamstream.streams.store import EdgeStore

    st = EdgeStore(store)
    try:
        active = {m.memory_id: m for m in st.scroll({"status": "active"})}
    finally:
        st.close()
    out = []
    for newer, older, proposal, _ in recorded_reviews(active):
        action = f"review_{proposal}"
        out.append({"key": pair_key(action, newer.user_id, newer.text, older.text), "action": action,
                    "user_id": newer.user_id, "newer": newer.text, "older": older.text})
    return out


def review_audit(items: list[dict[str, str]], verdict_file: Path) -> dict[str, Any]:
    verdicts = {}
    if verdict_file.exists():
        verdicts = {v["key"]: v["verdict"] for v in map(json.loads, verdict_file.read_text().splitlines()) if v}
    judged = [verdicts[i["key"]] for i in items if i["key"] in verdicts]
    right = sum(v == "correct" for v in judged)
    return {"items": len(items), "judged": len(judged), "correct": right,
            "right": round(right / len(judged), 4) if judged else None}


def pattern_usefulness(case: Path, state: Path, verdict_file: Path) -> dict[str, Any]:
    """How useful the readers found this run's patterns (issue 26's usefulness mark: 0 misleading, 1 a true
    list, 2 a real higher-order pattern), from the `usefulness` of their verdicts; keys as audit.py names them."""
    with tempfile.TemporaryDirectory() as tmp:
        todo = Path(tmp) / "todo.jsonl"
        subprocess.run([sys.executable, str(SHARED / "real" / "audit.py"), str(case), str(state), "--todo", str(todo),
                        "--sample", "100000"], check=True, capture_output=True)
        keys = [r["key"] for r in map(json.loads, todo.read_text().splitlines()) if r["action"] == "pattern"]
    marks = {}
    if verdict_file.exists():
        marks = {v["key"]: v["usefulness"] for v in map(json.loads, verdict_file.read_text().splitlines())
                 if v and "usefulness" in v}
    got = [marks[k] for k in keys if k in marks]
    return {"patterns": len(keys), "marked": len(got), **{f"usefulness_{u}": got.count(u) for u in (0, 1, 2)},
            "share_2": round(got.count(2) / len(got), 4) if got else None}


def reader_themes(case: Path, answers: Path) -> dict[str, Any]:
    """The sealed corpus themes grouped by the LLM theme reader from its recorded answers (bench/llm_files.py):
    what DREAM_SYNTHESIS_THEMES=llm finds where a capable model answers. A prompt whose text changed since the
    answers were recorded finds none, and that person is grouped offline (counted as `unanswered`)."""
    state = WORK / f"corpus-themes-reader-{answers.name}.jsonl"
    out = subprocess.run([sys.executable, str(REPO / "bench" / "synthesis_offline.py"), str(case), "--keep-all",
                          "--llm-answers", str(answers), "--state", str(state)],
                         capture_output=True, text=True, check=True).stdout
    figures = dict(re.findall(r"^(theme_recall|pattern_precision|patterns)\s+(\S+)$", out, re.MULTILINE))
    unanswered = re.search(r"offline \(no answer yet\): (\d+)", out)
    return {"patterns": int(figures["patterns"]), "theme_recall": float(figures["theme_recall"]),
            "pattern_precision": float(figures["pattern_precision"]),
            "unanswered": int(unanswered.group(1)) if unanswered else 0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="one JSON object instead of tables")
    ap.add_argument("--only", nargs="*", help="case names to run (default: all, and the corpus)")
    ap.add_argument("--synthesis", action="store_true", help="also run synthesis on the dev case")
    ap.add_argument("--judges", nargs="*", default=["learned", "offline"], help="judges to compare")
    ap.add_argument("--todo-reviews", type=Path, help="write locomo's unjudged review items here (for a reader)")
    a = ap.parse_args()
    if not (SHARED / "score.py").exists():
        print(f"bench-quality: {SHARED} not found (the shared benchmark folder sits beside the checkout)",
              file=sys.stderr)
        return 2
    want = set(a.only or [*SYNTHETIC, *REAL, "corpus", "blind"])
    result: dict[str, Any] = {"corpus": {}, "synthetic": {}, "real": {}}
    if a.synthesis and want & {"corpus", "corpus-themes"}:
        # The corpus's sealed test people with the themes their streams carry (bench/corpus/THEMES.md):
        # synthesis only (their labels say nothing of merges).
        from dreamstream.streams.dev import judge_corpus as jc

        SYNTHETIC["corpus-themes"] = WORK / "corpus-themes-case"
        jc.themes_case("test", SYNTHETIC["corpus-themes"])
        want.add("corpus-themes")
        result["reader"] = {d.name: reader_themes(SYNTHETIC["corpus-themes"], d)
                            for d in sorted((REPO / "bench" / "corpus" / "reader-answers").glob("test*"))}
    if "corpus" in want:
        print("judging the corpus's sealed test pairs ...", file=sys.stderr, flush=True)
        result["corpus"] = corpus_scores(a.judges)
    if "blind" in want:
        print("judging the blind pairs ...", file=sys.stderr, flush=True)
        result["blind"] = blind_scores(a.judges)
    for judge in a.judges:
        for name, case in SYNTHETIC.items():
            if name not in want or not (case / "events.jsonl").exists():
                continue
            print(f"replaying {name} ({judge}) ...", file=sys.stderr, flush=True)
            themed = (case / "themes.jsonl").exists() and (case / "themes.jsonl").stat().st_size > 0
            state, counts = replay(name, case, a.synthesis and themed, judge)
            scores = run_json([sys.executable, str(SHARED / "score.py"), str(case), str(state), "--json"])
            result["synthetic"][f"{name}/{judge}"] = {**scores, "decisions": counts,
                                                       "synthesis": a.synthesis and themed}
        for name, case in REAL.items():
            if name not in want or not (case / "events.jsonl").exists():
                continue
            print(f"replaying {name} ({judge}) ...", file=sys.stderr, flush=True)
            state, counts = replay(name, case, a.synthesis and name == "locomo", judge)
            judged = REPO / "bench" / "audits" / f"real-{name}.jsonl"
            cmd = [sys.executable, str(SHARED / "real" / "audit.py"), str(case), str(state), "--json"]
            audit = run_json(cmd + (["--judged", str(judged)] if judged.exists() else []))
            row = {**audit, "decisions": counts}
            if name == "locomo":
                if a.synthesis:
                    row["usefulness"] = pattern_usefulness(case, state, judged)
                items = review_items(state.parent / "store")
                row["reviews"] = review_audit(items, REPO / "bench" / "audits" / "real-locomo-reviews.jsonl")
                if a.todo_reviews:
                    done = REPO / "bench" / "audits" / "real-locomo-reviews.jsonl"
                    seen = {json.loads(x)["key"] for x in done.read_text().splitlines()} if done.exists() else set()
                    with a.todo_reviews.open("a") as f:
                        for it in items:
                            if it["key"] not in seen:
                                f.write(json.dumps({**it, "verdict": "", "reason": ""}) + "\n")
            result["real"][f"{name}/{judge}"] = row
    if a.json:
        print(json.dumps(result))
        return 0
    if result["corpus"]:
        print("Sealed test split of the corpus (bench/corpus: labelled pairs, each judged alone)")
        print(table([[f"{split}/{j}", s["pairs"], s["merges"], s["merge_precision"], s["restatement_recall"],
                      s["supersedes"], s["supersede_precision"], s["update_recall"], s["reviews"], s["review_right"]]
                     for split, by in result["corpus"].items() for j, s in by.items()],
                    ["split/judge", "pairs", "merges", "merge P", "restatement R", "supersedes", "sup P",
                     "update R", "reviews", "reviews right"]))
        print()
    if result.get("blind"):
        print("Blind pairs (bench/blind-pairs: written and labelled twice by helpers, never trained on)")
        print(table([[j, s["pairs"], s["merges"], s["merge_precision"], s["restatement_recall"], s["supersedes"],
                      s["supersede_precision"], s["update_recall"], s["reviews"], s["review_right"]]
                     for j, s in result["blind"].items()],
                    ["judge", "pairs", "merges", "merge P", "restatement R", "supersedes", "sup P", "update R",
                     "reviews", "reviews right"]))
        print()
    syn = result["synthetic"]
    if syn:
        print("Synthetic cases (labelled; score.py)")
        print(table([[n, s["supersede_precision"], s["supersede_recall"], s["supersede_f1"], s["false_supersede_rate"],
                      s["merge_precision"], s["merge_recall"], s["merge_f1"], s["canonical_accuracy"],
                      s["cross_user_links"], s["decisions"].get("review", 0)] for n, s in syn.items()
                     if not n.startswith("corpus-themes/")],
                    ["case/judge", "sup P", "sup R", "sup F1", "false sup", "merge P", "merge R", "merge F1",
                     "canonical", "cross-user", "reviews"]))
    if a.synthesis:
        for n, s in syn.items():
            if s["synthesis"]:
                print(f"{n} synthesis: {s['patterns']} patterns, theme recall {s['theme_recall']}, "
                      f"pattern precision {s['pattern_precision']}")
        for name, r in (result.get("reader") or {}).items():
            print(f"corpus-themes, grouped by the LLM theme reader (DREAM_SYNTHESIS_THEMES=llm, recorded answers in "
                  f"bench/corpus/reader-answers/{name}; every memory active, one run): {r['patterns']} patterns, "
                  f"theme recall {r['theme_recall']}, pattern precision {r['pattern_precision']}, "
                  f"people without an answer {r['unanswered']}")
    if not result["real"]:
        return 0
    print("\nReal cases (audit.py with bench/audits/real-<case>.jsonl)")
    rows = []
    for n, r in result["real"].items():
        for action in ("supersede", "merge", "pattern"):
            if action not in r:
                continue
            s = r[action]
            rows.append([n, action, s["decisions"], s["per_1000_memories"], s["judged"], s["correct"],
                         s["incorrect"], s["borderline"], s["precision"], s["decisions"] - s["judged"]])
    print(table(rows, ["case/judge", "action", "decisions", "per 1,000", "judged", "correct", "incorrect",
                       "borderline", "precision", "unjudged"]))
    for n, r in result["real"].items():
        if "usefulness" in r:
            u = r["usefulness"]
            print(f"{n}: pattern usefulness (0 misleading / 1 a true list / 2 a higher-order pattern): "
                  f"{u['usefulness_0']} / {u['usefulness_1']} / {u['usefulness_2']} of {u['marked']} marked "
                  f"({u['patterns']} patterns); share of 2: {u['share_2']} (target >= 0.333)")
    for n, r in result["real"].items():
        line = f"{n}: {r['decisions'].get('review', 0)} review items (abstentions)"
        if "reviews" in r:
            rv = r["reviews"]
            line += f", {rv['judged']} judged, {rv['correct']} right"
        if "recall" in r:
            rc = r["recall"]
            line += (f"; recall: updates {rc['updates_caught']}/{rc['updates']}, restatement links "
                     f"{rc['restatement_links_made']}/{rc['restatement_links_needed']}")
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
