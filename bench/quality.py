#!/usr/bin/env python3
"""`make bench-quality`: decision quality on every case from one run, synthetic and real.

    .venv/bin/python bench/quality.py [--json] [--only NAME ...] [--synthesis]

Each case is replayed with `dream replay` into a fresh embedded store and exported, as a user
would. Synthetic cases (labelled: ../shared/bench/dev and the project's own bench/cases/*) are
scored by `score.py`; real cases (../shared/bench/real/locomo and msc, unlabelled) are measured by
`audit.py` with the project's committed verdicts (bench/audits/real-<case>.jsonl): precision over
judged decisions, how many are still unjudged, recall against the hand-found truths. Abstentions
(review items) are counted from the replay. `--synthesis` also runs synthesis on every synthetic case
that has themes (theme recall and pattern precision per case) and on locomo (its patterns audited).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "bench"
WORK = REPO / ".cache" / "bench-quality"
BIN = Path(sys.executable).parent
SYNTHETIC = {"dev": SHARED / "dev", **{p.name: p for p in sorted((REPO / "bench" / "cases").iterdir()) if p.is_dir()}}
REAL = {"locomo": SHARED / "real" / "locomo", "msc": SHARED / "real" / "msc"}


def replay(name: str, case: Path, synthesis: bool) -> tuple[Path, dict[str, int]]:
    """Replay and export one case; returns the export and the replay's decision counts."""
    store, state = WORK / name / "store", WORK / name / "state.jsonl"
    subprocess.run(["rm", "-rf", str(WORK / name)], check=True)
    (WORK / name).mkdir(parents=True)
    cmd = [str(BIN / "dream"), "replay", str(case / "events.jsonl"), "--store", str(store)]
    out = subprocess.run(cmd + (["--synthesis"] if synthesis else []), check=True, capture_output=True,
                         text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}).stdout
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="one JSON object instead of tables")
    ap.add_argument("--only", nargs="*", help="case names to run (default: all)")
    ap.add_argument("--synthesis", action="store_true", help="also run synthesis on the dev case")
    a = ap.parse_args()
    if not (SHARED / "score.py").exists():
        print(f"bench-quality: {SHARED} not found (the shared benchmark folder sits beside the checkout)",
              file=sys.stderr)
        return 2
    want = set(a.only or [*SYNTHETIC, *REAL])
    result: dict[str, Any] = {"synthetic": {}, "real": {}}
    for name, case in SYNTHETIC.items():
        if name not in want or not (case / "events.jsonl").exists():
            continue
        print(f"replaying {name} ...", file=sys.stderr, flush=True)
        themed = (case / "themes.jsonl").exists() and (case / "themes.jsonl").stat().st_size > 0
        state, counts = replay(name, case, a.synthesis and themed)
        scores = run_json([sys.executable, str(SHARED / "score.py"), str(case), str(state), "--json"])
        result["synthetic"][name] = {**scores, "decisions": counts, "synthesis": a.synthesis and themed}
    for name, case in REAL.items():
        if name not in want or not (case / "events.jsonl").exists():
            continue
        print(f"replaying {name} ...", file=sys.stderr, flush=True)
        state, counts = replay(name, case, a.synthesis and name == "locomo")
        judged = REPO / "bench" / "audits" / f"real-{name}.jsonl"
        cmd = [sys.executable, str(SHARED / "real" / "audit.py"), str(case), str(state), "--json"]
        audit = run_json(cmd + (["--judged", str(judged)] if judged.exists() else []))
        result["real"][name] = {**audit, "decisions": counts}
    if a.json:
        print(json.dumps(result))
        return 0
    syn = result["synthetic"]
    print("Synthetic cases (labelled; score.py)")
    print(table([[n, s["supersede_precision"], s["supersede_recall"], s["supersede_f1"], s["false_supersede_rate"],
                  s["merge_precision"], s["merge_recall"], s["merge_f1"], s["canonical_accuracy"],
                  s["cross_user_links"], s["decisions"].get("review", 0)] for n, s in syn.items()],
                ["case", "sup P", "sup R", "sup F1", "false sup", "merge P", "merge R", "merge F1", "canonical",
                 "cross-user", "reviews"]))
    if a.synthesis:
        for n, s in syn.items():
            if s["synthesis"]:
                print(f"{n} synthesis: {s['patterns']} patterns, theme recall {s['theme_recall']}, "
                      f"pattern precision {s['pattern_precision']}")
    print("\nReal cases (audit.py with bench/audits/real-<case>.jsonl)")
    rows = []
    for n, r in result["real"].items():
        for action in ("supersede", "merge", "pattern"):
            if action not in r:
                continue
            s = r[action]
            rows.append([n, action, s["decisions"], s["per_1000_memories"], s["judged"], s["correct"],
                         s["incorrect"], s["borderline"], s["precision"], s["decisions"] - s["judged"]])
    print(table(rows, ["case", "action", "decisions", "per 1,000", "judged", "correct", "incorrect", "borderline",
                       "precision", "unjudged"]))
    for n, r in result["real"].items():
        line = f"{n}: {r['decisions'].get('review', 0)} review items (abstentions)"
        if "recall" in r:
            rc = r["recall"]
            line += (f"; recall: updates {rc['updates_caught']}/{rc['updates']}, restatement links "
                     f"{rc['restatement_links_made']}/{rc['restatement_links_needed']}")
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
