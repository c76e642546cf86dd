#!/usr/bin/env python3
"""Writes the held-out generalisation case (events/labels/themes.jsonl, FORMAT.md of shared/bench).

Written before any tuning, with slots, wording and styles of its own (coding-agent rules, dev tools,
health, family, travel, preferences; first person, "User ...", a person's name, terse notes), so
that dev-fitted rules show up as a drop here. Deterministic (seeded). Per user: 1-3 chains of a
single-valued slot (explicit change cue or just the new value), 1-3 duplicate groups (restatement
or fuller version; canonical = highest level, first on ties) and hard negatives (a second value,
a complementary fact, another person's slot, repeated events, the trip back, compatible
negation), plus identical texts across users.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

R = random.Random(77031)

# --- single-valued slots: values, plain statements, explicit changes ("{o}" = the old value) ------
SLOTS: list[dict[str, Any]] = [
    dict(
        vals=["Neovim", "VS Code", "Emacs", "Helix", "Zed", "Sublime Text"],
        plain=["I write code in {v}.", "Editor: {v}.", "User's editor of choice is {v}.", "{N} edits code in {v}."],
        change=["I switched my editor to {v}.", "Dropped {o}, editing everything in {v} these days.",
                "User has moved from {o} over to {v}."],
        other=["My teammate Jonas swears by {v}.", "{N}'s manager edits in {v}."],
        comp=["My {v} config lives in a dotfiles repo.", "User keeps {v} plugins to a minimum."],
    ),
    dict(
        vals=["zsh", "fish", "bash", "nushell"],
        plain=["My login shell is {v}.", "Shell: {v}.", "The user works in a {v} shell."],
        change=["Changed my login shell to {v}.", "Now on {v} instead of {o}.", "Shell is {v} now."],
        other=["The CI image only ships {v}."],
        comp=["User has a custom {v} prompt showing the git branch."],
    ),
    dict(
        vals=["Python 3.10", "Python 3.11", "Python 3.12", "Python 3.13"],
        plain=["The {p} service targets {v}.", "{p}: runs on {v}.", "We build {p} against {v}."],
        change=["Bumped {p} to {v}.", "{p} was upgraded from {o} to {v}.", "{p} is on {v} as of this sprint."],
        other=["The {q} service targets {v}."],
        comp=["The {p} service has strict mypy settings."],
    ),
    dict(
        vals=["pytest", "unittest", "nose2", "ward"],
        plain=["Tests for {p} are written with {v}.", "{p} test runner: {v}.", "Run the {p} tests with {v}."],
        change=["We ported the {p} tests from {o} to {v}.", "{p} tests use {v} now."],
        other=["The {q} repo's tests are written with {v}."],
        comp=["The {p} tests need a local Redis."],
    ),
    dict(
        vals=["two spaces", "four spaces", "tabs"],
        plain=["Indent with {v}.", "Indentation: {v}.", "User wants code indented with {v}."],
        change=["Please indent with {v} from here on.", "Switching indentation to {v}, not {o}."],
        other=["The vendored library uses {v}."],
        comp=[],
    ),
    dict(
        vals=["Dr. Okafor", "Dr. Lindqvist", "Dr. Moreau", "Dr. Haddad"],
        plain=["My GP is {v}.", "GP: {v}.", "The user's family doctor is {v}.", "{N} sees {v} as a GP."],
        change=["I registered with a new GP, {v}.", "Changed practices; my doctor is {v} now.",
                "{N} left {o}'s practice and now sees {v}."],
        other=["My mother's GP is {v}.", "{N}'s husband sees {v}."],
        comp=["{v}'s practice is closed on Wednesdays."],
    ),
    dict(
        vals=["10 mg", "20 mg", "40 mg"],
        plain=["I take {v} of atorvastatin every evening.", "Atorvastatin {v} nightly.",
               "User is prescribed {v} of atorvastatin."],
        change=["My atorvastatin dose went up to {v}.", "Doctor changed the atorvastatin to {v}.",
                "Atorvastatin was reduced to {v}."],
        other=["My dad takes {v} of atorvastatin."],
        comp=["Takes the atorvastatin with water, never with grapefruit juice."],
    ),
    dict(
        vals=["Heathrow", "Schiphol", "Frankfurt", "Dublin", "Copenhagen"],
        plain=["My home airport is {v}.", "Usually flies out of {v}.", "Home airport: {v}.",
               "{N} always departs from {v}."],
        change=["Since the move I fly out of {v}.", "My home airport is {v} now, not {o}."],
        other=["My sister always flies from {v}."],
        comp=["Has lounge access at {v}."],
    ),
    dict(
        vals=["English", "Spanish", "German", "Portuguese", "Japanese"],
        plain=["Reply to me in {v}.", "User wants answers in {v}.", "Language for responses: {v}."],
        change=["From now on answer in {v}, not {o}.", "Please switch to {v} for replies."],
        other=["Emails to my landlord should be drafted in {v}."],
        comp=[],
    ),
    dict(
        vals=["Pixel 8", "iPhone 15", "Galaxy S23", "Fairphone 5"],
        plain=["My phone is a {v}.", "Phone: {v}.", "{N} uses a {v}."],
        change=["Traded in the {o} for a {v}.", "Got a {v} to replace my {o}.", "Phone is a {v} now."],
        other=["My son has a {v}."],
        comp=["The {v} screen is cracked in one corner."],
    ),
    dict(
        vals=["Marta Ruiz", "Tom Becker", "Aiko Sato", "Femi Adeyemi"],
        plain=["My manager is {v}.", "Reports to {v}.", "{N}'s line manager is {v}."],
        change=["I report to {v} after the reorg.", "New manager: {v}.", "{N} now reports to {v} instead of {o}."],
        other=["My partner's manager is {v}."],
        comp=["{v} holds one-to-ones with me every second Thursday."],
    ),
    dict(
        vals=["6:00", "7:30", "8:15"],
        plain=["I get up at {v} on weekdays.", "Weekday alarm: {v}.", "{N} wakes at {v} on workdays."],
        change=["Started getting up at {v} on weekdays.", "Weekday alarm moved to {v}."],
        other=["The kids get up at {v}."],
        comp=[],
    ),
    dict(
        vals=["Monzo", "ING", "Revolut Business", "a local credit union"],
        plain=["My main bank is {v}.", "Banks with {v}.", "Salary goes into {v}."],
        change=["Moved my current account to {v}.", "Closed the {o} account; banking with {v} now."],
        other=["My wife banks with {v}."],
        comp=["Has a savings pot for travel at {v}."],
    ),
]
# Reversed preferences: (first, reversal) pairs per topic; value = the side.
REVERSALS: list[tuple[list[str], list[str]]] = [
    (["I like spicy food.", "Loves very spicy dishes.", "{N} enjoys spicy food."],
     ["I can't handle spicy food anymore.", "No longer eats spicy dishes.", "{N} stopped eating spicy food."]),
    (["Give me detailed explanations with examples.", "User likes long, thorough answers."],
     ["Keep answers short from now on; skip the long explanations.", "User now prefers terse answers."]),
    (["I prefer morning meetings.", "Mornings are best for meetings."],
     ["Afternoons suit me better for meetings now.", "No more morning meetings, please."]),
    (["Drinks coffee with milk.", "I take my coffee with milk."],
     ["I've started drinking my coffee black.", "Coffee: black now, no milk."]),
    (["Enable autoformat on save.", "Format files automatically on save."],
     ["Turn off format-on-save; I'll run the formatter myself.", "Stop autoformatting on save."]),
]

# --- duplicate groups: level -> templates ------------------------------------------------------
GROUPS: list[dict[int, list[str]]] = [
    {1: ["Blood type O negative.", "User's blood group is O-.", "My blood type is O negative."],
     2: ["I'm O negative and a registered blood donor.", "User is blood type O negative and donates blood regularly."]},
    {1: ["I have two kids.", "User is a parent of two.", "{N} has two children."],
     2: ["I have two kids, Lena and Max.", "User has two children, Lena and Max."],
     3: ["I have two kids: Lena, 7, and Max, 4.", "{N} has two children, Lena (7) and Max (4)."]},
    {1: ["Allergic to shellfish.", "I have a shellfish allergy.", "User can't eat shellfish (allergy)."],
     2: ["User has a shellfish allergy that causes hives and swelling.",
         "My shellfish allergy gives me hives and swelling."]},
    {1: ["Use Conventional Commits.", "Commit messages follow Conventional Commits.", "commits: conventional"],
     2: ["Commit messages follow Conventional Commits with a scope, e.g. feat(api): add paging.",
         "Use Conventional Commits and always include a scope, like fix(db): ..."]},
    {1: ["Rebase instead of merging.", "Prefer rebasing to merge commits.", "User wants rebase, not merge."],
     2: ["Rebase feature branches onto main before opening a PR; no merge commits.",
         "Always rebase onto main before a PR and never create merge commits."]},
    {1: ["Never edit the generated protobuf code.", "Don't hand-edit generated protobuf files."],
     2: ["Never hand-edit the generated protobuf code under gen/; regenerate it with buf generate.",
         "Generated protobuf files in gen/ must not be edited by hand: run buf generate instead."]},
    {1: ["I grew up in Gdansk.", "User is originally from Gdansk.", "{N} was raised in Gdansk."],
     2: ["User grew up in Gdansk and lived there until university.",
         "I was raised in Gdansk and stayed there until I left for university."]},
    {1: ["Prefers the train to flying.", "I'd rather take the train than fly.", "travel pref: train over plane"],
     2: ["Prefers the train to flying for any trip under five hours.",
         "For trips under five hours I'd rather take the train than fly."]},
    {1: ["I'm into bouldering.", "User goes bouldering.", "Hobby: bouldering."],
     2: ["User goes bouldering three times a week at a gym near the office.",
         "I boulder three times a week at the gym near work."]},
    {1: ["I have type 1 diabetes.", "User is a type 1 diabetic.", "{N} has type 1 diabetes."],
     2: ["I have type 1 diabetes and use an insulin pump.", "User has type 1 diabetes, managed with an insulin pump."],
     3: ["Type 1 diabetic since age 12; uses an Omnipod insulin pump and a Dexcom sensor.",
         "I've had type 1 diabetes since I was 12 and use an Omnipod pump with a Dexcom CGM."]},
    {1: ["PR titles start with the ticket key.", "Put the ticket key at the start of PR titles."],
     2: ["PR titles start with the ticket key, like PAY-123, followed by a short summary.",
         "Start every PR title with the ticket key (e.g. PAY-123) and then a one-line summary."]},
    {1: ["Works fully remote.", "I work from home full-time.", "User is a fully remote employee."],
     2: ["Works fully remote from a home office and visits the Berlin office once a quarter.",
         "I work from home full-time and go into the Berlin office once a quarter."]},
    {1: ["Vegetarian.", "I don't eat meat.", "User is vegetarian."],
     2: ["User has been vegetarian for ten years but eats eggs and dairy.",
         "I'm vegetarian, ten years now, and still eat eggs and dairy."]},
    {1: ["Speaks Dutch.", "I speak Dutch.", "{N} speaks Dutch."],
     2: ["I speak Dutch fluently; my mother is from Utrecht.", "User is fluent in Dutch because their mother is from Utrecht."]},
]

# --- stand-alone hard negatives: (anchor, negative) -----------------------------------------------
MULTI = [
    ("I play the piano.", "I also play the cello."),
    ("Lint Python with ruff.", "We also run mypy in CI."),
    ("User speaks Italian.", "User also speaks some Greek."),
    ("I have a parrot called Kiwi.", "We got a second bird, a canary named Sol."),
    ("Subscribes to The Economist.", "Also subscribes to a local newspaper."),
    ("I volunteer at a food bank.", "I also coach a kids' football team on Saturdays."),
]
COMPLEMENTARY = [
    ("My daughter Lena is seven.", "Lena is starting piano lessons in autumn."),
    ("The payments service is written in Go.", "The payments service exposes a gRPC API."),
    ("I drive a Mazda 3.", "The Mazda needs new tyres before winter."),
    ("We have a flat in Leith.", "The flat in Leith has a small balcony."),
    ("User's partner is called Ana.", "Ana works as a pharmacist."),
    ("The monorepo uses Bazel.", "Bazel remote caching is enabled on CI."),
]
OTHER_PERSON = [
    ("I drive a Mazda 3.", "My wife drives a Volvo XC40."),
    ("I live in Edinburgh.", "My brother lives in Glasgow."),
    ("My favourite band is Radiohead.", "My partner's favourite band is Coldplay."),
    ("I work at a bank.", "My flatmate works at a hospital."),
    ("I'm allergic to pollen.", "My son is allergic to peanuts."),
]
SERIES = [
    ["Ran 10 km on {d}.", "Ran 12 km on {d}.", "Went for a 5 km run on {d}."],
    ["Deployed v2.{i}.0 to staging on {d}.", "Released v2.{i}.1 to production on {d}."],
    ["Had a migraine on {d}.", "Had another migraine on {d}.", "Migraine again on {d}."],
    ["Called mum on {d}.", "Video call with mum on {d}."],
    ["Dentist appointment on {d}.", "Dentist check-up on {d}."],
]
TRIPS = [("Flew from Madrid to Oslo.", "Flew from Oslo to Madrid."),
         ("Took the train from Lyon to Paris.", "Took the train from Paris to Lyon."),
         ("Drove from Porto to Braga.", "Drove back from Braga to Porto.")]
COMPATIBLE_NEG = [
    ("I drink coffee.", "I don't drink coffee after 3pm."),
    ("Use type hints everywhere.", "Don't use Any in type hints."),
    ("I eat fish.", "I never eat raw fish."),
    ("Write tests for new code.", "Don't write tests for throwaway scripts."),
]
FILLER = [
    "Bought a new backpack for commuting.", "The user is reading a book about Roman history.",
    "Keep secrets out of the repo; use the vault.", "Likes watching football on Sundays.",
    "Prefers dark themes in terminals.", "Has a standing desk at home.", "Wants links to docs in answers.",
    "The staging database is reset every Monday.", "Is saving for a house deposit.", "Enjoys jigsaw puzzles.",
]
NAMES = ["Ruth", "Omar", "Keiko", "Bjorn", "Lucia", "Tariq", "Hana", "Piotr", "Zara", "Mateo"]
PROJECTS = ["billing", "search", "ingest", "auth", "notifications", "reporting"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday", "March 3", "April 12"]


def fill(t: str, p: dict[str, str]) -> str:
    for k, v in p.items():
        t = t.replace("{" + k + "}", v)
    return t


def build_user(uid: str) -> list[tuple[str, str]]:
    """Items as (text, label) in event order; label as in handmade: "", c:<id>, g:<id>[*]."""
    name = R.choice(NAMES)
    proj, other_proj = R.sample(PROJECTS, 2)
    base = {"N": name, "p": proj, "q": other_proj}
    tracks: list[list[tuple[str, str]]] = []
    for si, s in enumerate(R.sample(SLOTS, R.randint(1, 3))):
        vals = R.sample(s["vals"], min(len(s["vals"]), R.choice([2, 2, 3])))
        cid = f"{uid}-c{si}"
        seq = [(fill(R.choice(s["plain"]), {**base, "v": vals[0]}), f"c:{cid}")]
        for a, b in zip(vals, vals[1:], strict=False):
            tpl = R.choice(s["change"]) if R.random() < 0.55 else R.choice(s["plain"])
            seq.append((fill(tpl, {**base, "v": b, "o": a}), f"c:{cid}"))
        # a hard negative about the same slot: someone else's value, or a complementary fact
        negs = [t for t in s["other"] + s["comp"]]
        if negs and R.random() < 0.6:
            seq.insert(R.randint(1, len(seq)), (fill(R.choice(negs), {**base, "v": R.choice(s["vals"])}), ""))
        tracks.append(seq)
    if R.random() < 0.5:
        first, rev = R.choice(REVERSALS)
        tracks.append([(fill(R.choice(first), base), f"c:{uid}-r"), (fill(R.choice(rev), base), f"c:{uid}-r")])
    for gi, g in enumerate(R.sample(GROUPS, R.randint(1, 3))):
        levels = sorted(g)
        n = R.choice([2, 2, 3])
        if R.random() < 0.35:
            lv = [R.choice(levels)] * n
        else:
            lv = [R.choice(levels[:-1]) for _ in range(n)]
            lv[R.randrange(n)] = levels[-1]
        used: list[str] = []
        items = []
        for lvl in lv:
            pool = [t for t in g[lvl] if t not in used] or g[lvl]
            t = R.choice(pool)
            used.append(t)
            items.append(fill(t, base))
        canon = max(range(n), key=lambda i: (lv[i], -i))
        tracks.append([(t, f"g:{uid}-g{gi}" + ("*" if i == canon else "")) for i, t in enumerate(items)])
    for kind in R.sample(["multi", "comp", "other", "series", "trip", "neg"], R.randint(2, 4)):
        if kind == "series":
            s = R.choice(SERIES)
            days = R.sample(DAYS, len(s))
            tracks.append([(fill(t, {"d": d, "i": str(R.randint(1, 9))}), "") for t, d in zip(s, days, strict=True)])
        else:
            pool = {"multi": MULTI, "comp": COMPLEMENTARY, "other": OTHER_PERSON, "trip": TRIPS,
                    "neg": COMPATIBLE_NEG}[kind]
            a, b = R.choice(pool)
            tracks.append([(fill(a, base), ""), (fill(b, base), "")])
    for t in R.sample(FILLER, R.randint(1, 3)):
        tracks.append([(t, "")])
    # interleave the tracks, keeping each track's order
    out: list[tuple[str, str]] = []
    while any(tracks):
        tr = R.choice([t for t in tracks if t])
        out.append(tr.pop(0))
    return out


def main(out: Path) -> None:
    users = {f"u-x{i:03d}": build_user(f"u-x{i:03d}") for i in range(1, 49)}
    # identical texts of other users (must never link)
    uids = list(users)
    for a, b in zip(uids[::2], uids[1::2], strict=True):
        if R.random() < 0.5:
            text = users[a][0][0]
            if not any(t == text for t, _ in users[b]):
                users[b].append((text, ""))
    t0 = datetime(2026, 2, 1, 8, 0, tzinfo=UTC)
    rows: list[tuple[datetime, str, str, str]] = []
    for u, items in users.items():
        t = t0 + timedelta(minutes=R.randint(0, 600))
        for text, lab in items:
            t += timedelta(hours=R.randint(3, 90))
            rows.append((t, u, text, lab))
    rows.sort(key=lambda r: (r[0], r[1]))
    events: list[dict[str, Any]] = []
    labels: list[dict[str, Any]] = []
    chain_last: dict[str, dict[str, Any]] = {}
    for i, (t, user, text, lab) in enumerate(rows, start=1):
        mid = f"x-{i:05d}"
        events.append(
            {"type": "memory.added", "event_id": f"e-x{i:05d}", "memory_id": mid, "user_id": user,
             "app_id": None, "agent_id": None, "run_id": None, "text": text,
             "created_at": t.strftime("%Y-%m-%dT%H:%M:%SZ"),
             "metadata": {"type": "user_fact", "confidence": 0.9, "pinned": False}}
        )
        row: dict[str, Any] = {"memory_id": mid, "expect": "active"}
        if lab.startswith("c:"):
            row["chain"] = lab[2:]
            if lab[2:] in chain_last:
                chain_last[lab[2:]].update(expect="superseded", by=mid)
            chain_last[lab[2:]] = row
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
