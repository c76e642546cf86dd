#!/usr/bin/env python3
"""Writes the hand-made generalisation case (events/labels/themes.jsonl, FORMAT.md of shared/bench).

Own wording, deliberately unlike the dev generator: lowercase, typos, Q/A transcripts, a person's
name as the subject, third parties inside the sentence. Each row: (user, text, type, label) where
label is "" (stay active), "c:<chain>" (chain member, in order) or "g:<group>[*]" (* = canonical).
"""

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROWS = [
    ("u-h01", "maria lives in porto with her husband.", "user_fact", "c:c1"),
    ("u-h01", "maria drinks coffee every morning", "user_fact", ""),
    ("u-h01", "maria's flatmate works at a bakery downtown.", "user_fact", ""),
    ("u-h01", "maria has a cat called pimenta.", "user_fact", "g:g1"),
    ("u-h01", "maria works at deloitte as an auditor.", "user_fact", "c:c2"),
    ("u-h01", "q: where do you live now? a: we relocated to madrid last month.", "user_fact", "c:c1"),
    ("u-h01", "maria also has a dog, bolt.", "user_fact", ""),
    ("u-h01", "maria doesnt drink coffee after 4pm.", "user_fact", ""),
    (
        "u-h01",
        "maria's cat pimenta is a 6 year old siamese she rescued.",
        "user_fact",
        "g:g1*",
    ),
    ("u-h01", "maria is learning japanese.", "user_fact", ""),
    ("u-h01", "she's also picking up korean on duolingo.", "user_fact", ""),
    ("u-h01", "maria quit deloitte and now works for kpmg.", "user_fact", "c:c2"),
    ("u-h02", "i drive a volkswagon polo", "user_fact", "c:c3"),
    ("u-h02", "my brother drives a bmw x5.", "user_fact", ""),
    ("u-h02", "Q: any allergies? A: im allergic to penicilin.", "user_fact", "g:g2*"),
    ("u-h02", "i play tennis on weekends.", "preference", "g:g3*"),
    ("u-h02", "my editor is vim.", "preference", "c:c4"),
    ("u-h02", "got rid of the polo, i'm driving a kia ev6 now", "user_fact", "c:c3"),
    ("u-h02", "allergic to penicillin.", "user_fact", "g:g2"),
    ("u-h02", "played tennis with tom on saturday.", "user_fact", ""),
    ("u-h02", "i play tennis on weekends", "preference", "g:g3"),
    ("u-h02", "played tennis with tom on sunday.", "user_fact", ""),
    ("u-h02", "my partner sam is a nurse.", "user_fact", ""),
    ("u-h02", "switched from vim to vscode for work stuff.", "preference", "c:c4"),
    ("u-h02", "sam works night shifts at the hospital.", "user_fact", ""),
    ("u-h03", "the billing worker uses celery for background jobs.", "decision", "c:c5"),
    ("u-h03", "billing worker: python 3.11.", "decision", "g:g4*"),
    ("u-h03", "log format is json lines.", "decision", "g:g5"),
    ("u-h03", "the api gateway rate-limits at 100 req/s per client.", "decision", "c:c6"),
    ("u-h03", "we use black for formatting.", "decision", ""),
    ("u-h03", "the billing worker runs on python 3.11", "decision", "g:g4"),
    ("u-h03", "frontend package manager: npm", "decision", "c:c7"),
    (
        "u-h03",
        "billing worker jobs now run on dramatiq; celery was removed.",
        "decision",
        "c:c5",
    ),
    ("u-h03", "we also use isort for import ordering.", "decision", ""),
    (
        "u-h03",
        "logs are emitted as json lines, one object per line, with a trace_id.",
        "decision",
        "g:g5*",
    ),
    ("u-h03", "rate limit raised to 250 req/s per client on the api gateway.", "decision", "c:c6"),
    ("u-h03", "moved the frontend from npm to pnpm.", "decision", "c:c7"),
    ("u-h04", "Kenji's favourite food is ramen.", "preference", ""),
    ("u-h04", "Kenji was born in 1990 in Nagoya.", "user_fact", "g:g6*"),
    ("u-h04", "Kenji is vegetarian.", "user_fact", "c:c8"),
    ("u-h04", "Kenji's sister loves sushi.", "user_fact", ""),
    ("u-h04", "Kenji's phone is an iPhone 12.", "user_fact", "c:c9"),
    ("u-h04", "Kenji flew from Osaka to Seoul.", "user_fact", ""),
    ("u-h04", "Kenji is from Nagoya.", "user_fact", "g:g6"),
    ("u-h04", "Kenji's gym is Anytime Fitness.", "user_fact", "c:c10"),
    ("u-h04", "Kenji started eating meat again last year.", "user_fact", "c:c8"),
    ("u-h04", "Kenji flew from Seoul to Osaka.", "user_fact", ""),
    ("u-h04", "Kenji upgraded to a Pixel 8 and gave the iPhone to his mum.", "user_fact", "c:c9"),
    ("u-h04", "Kenji cancelled Anytime Fitness, he goes to a climbing gym instead.", "user_fact", "c:c10"),
    ("u-h05", "i play tennis on weekends.", "preference", ""),
    ("u-h05", "my editor is vim.", "preference", ""),
    ("u-h05", "Lives in Porto.", "user_fact", ""),
]


def main(out: Path) -> None:
    t0 = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)
    events: list[dict] = []
    labels: list[dict] = []
    chain_last: dict[str, str] = {}
    for i, (user, text, mtype, lab) in enumerate(ROWS, start=1):
        mid = f"h-{i:04d}"
        events.append(
            {
                "type": "memory.added",
                "event_id": f"e-h{i:04d}",
                "memory_id": mid,
                "user_id": user,
                "app_id": None,
                "agent_id": None,
                "run_id": None,
                "text": text,
                "created_at": (t0 + timedelta(hours=7 * i)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "metadata": {"type": mtype, "confidence": 0.9, "pinned": False},
            }
        )
        row: dict = {"memory_id": mid, "expect": "active"}
        if lab.startswith("c:"):
            chain = lab[2:]
            row["chain"] = chain
            if chain in chain_last:
                prev = next(r for r in labels if r["memory_id"] == chain_last[chain])
                prev.update(expect="superseded", by=mid)
            chain_last[chain] = mid
        elif lab.startswith("g:"):
            row["group"] = lab[2:].rstrip("*")
            if not lab.endswith("*"):
                row["expect"] = "merged"
        labels.append(row)
    with (out / "events.jsonl").open("w") as f:
        f.writelines(json.dumps(e) + "\n" for e in events)
    with (out / "labels.jsonl").open("w") as f:
        f.writelines(json.dumps(r) + "\n" for r in labels)
    (out / "themes.jsonl").write_text("")


if __name__ == "__main__":
    main(Path(__file__).resolve().parent)
