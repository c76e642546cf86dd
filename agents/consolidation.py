"""The consolidation pass and light/full consolidation: pure decision logic, no Kafka or Qdrant.

`analyse` turns one scope's memories into a `Plan` (merge proposals, contradictions, prune
candidates); `render_report` / `render_summary` / `auto_line` print it in the shape users script
against. The decay, co-access and clustering functions are the maths of light and full
consolidation. Everything here takes memories and returns values, so the CLI, the control topic,
the worker's schedules and the tests all share it; streams/core/consolidation.py does the I/O.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import numpy as np

from dreamstream.agents import text_features as tf
from dreamstream.agents.merge_supersede import FeaturesOf, OfflineJudge, Verdict, cosine, gate, said_later
from dreamstream.agents.merge_supersede import Judge as JudgeOfMany
from dreamstream.schemas.memory import Memory, parse_time
from dreamstream.schemas.schedules import (  # noqa: F401  (part of this module's interface)
    NAMED_SCHEDULES,
    parse_schedule,
    runs_on_firing,
    schedule_fired,
    schedule_id,
)

log = logging.getLogger("dreamstream.consolidation")

SOURCE = "dream-consolidate"
"""metadata.source of the memories a pass writes (merged canonicals, reminders)."""

Retention = dict[str, int | None]
DEFAULT_RETENTION: Retention = {"session_state": 90, "compact_summary": 90}
"""metadata.type -> days kept; a type not listed (or null) is never pruned for age."""

LOW_CONFIDENCE = 0.3
MERGE_COS = 0.75
"""With most of one's words in the other, two memories of one type this close say one thing twice."""
MERGE_CONTAINED = 0.6
CONFLICT_COS = 0.55
TRUNCATE = 120


# --- retention ------------------------------------------------------------------------------------


def parse_retention(obj: Any) -> Retention:
    """A {type: days | null} mapping, checked; raises ValueError with what is wrong."""
    if not isinstance(obj, Mapping):
        raise ValueError("retention must map metadata.type to days or null")
    out: Retention = {}
    for key, days in obj.items():
        if days is not None and (isinstance(days, bool) or not isinstance(days, int) or days < 0):
            raise ValueError(f"retention for {key!r} must be a whole number of days (>= 0) or null")
        out[str(key)] = days
    return out


# --- the plan -------------------------------------------------------------------------------------


@dataclass
class MergeProposal:
    a: Memory
    b: Memory
    merged_text: str
    score: float
    held: bool = False
    """A person decides it: ingest held the pair for review, the judge only may see one fact, or a merge
    would join what ingest's gates keep apart (a negation, another value in one slot, a number the other
    lacks). An unattended pass (`--auto`, `--yes`, a schedule) leaves it waiting (`unattended`)."""

    @property
    def item(self) -> str:
        """The proposal's id in the plan, stable across re-plans (answers name items by it)."""
        return f"m:{self.a.memory_id}+{self.b.memory_id}"


@dataclass
class Conflict:
    a: Memory
    b: Memory
    likely: str
    """"A" or "B": the more recent with the higher confidence (the older one only when surer)."""
    score: float
    reason: str = ""
    """Why it was flagged, for the person who answers it (the judge's rule, or ingest's review item)."""

    @property
    def item(self) -> str:
        return f"c:{self.a.memory_id}|{self.b.memory_id}"


@dataclass
class Prune:
    memory: Memory
    age_days: int
    policy: str
    """Why: "<days>d" for retention, "confidence <c> < 0.3" for a low-confidence generic memory."""

    @property
    def item(self) -> str:
        return f"p:{self.memory.memory_id}"


@dataclass
class Plan:
    project: str
    user_id: str
    app_id: str | None
    merges: list[MergeProposal] = field(default_factory=list)
    conflicts: list[Conflict] = field(default_factory=list)
    prunes: list[Prune] = field(default_factory=list)
    considered: int = 0

    @property
    def empty(self) -> bool:
        return not (self.merges or self.conflicts or self.prunes)

    @property
    def plan_id(self) -> str:
        """Derived from what it proposes, so the same state yields the same plan id."""
        parts = [m.item for m in self.merges] + [c.item for c in self.conflicts] + [p.item for p in self.prunes]
        digest = hashlib.sha256("\n".join([self.user_id, self.app_id or "", *parts]).encode()).hexdigest()
        return f"plan-{digest[:16]}"

    def to_dict(self) -> dict[str, Any]:
        """The plan as ids and texts (for a dry run's reply and its approval later)."""
        return {
            "plan_id": self.plan_id, "project": self.project, "user": self.user_id, "app": self.app_id,
            "considered": self.considered,
            "merges": [{"item": m.item, "a": m.a.memory_id, "b": m.b.memory_id, "a_text": m.a.text,
                        "b_text": m.b.text, "merged_text": m.merged_text, "score": round(m.score, 4),
                        "held": m.held}
                       for m in self.merges],
            "conflicts": [{"item": c.item, "a": c.a.memory_id, "b": c.b.memory_id, "a_text": c.a.text,
                           "b_text": c.b.text, "likely": c.likely, "reason": c.reason, "score": round(c.score, 4)}
                          for c in self.conflicts],
            "prunes": [{"item": p.item, "memory": p.memory.memory_id, "text": p.memory.text,
                        "type": p.memory.memory_type, "age_days": p.age_days, "policy": p.policy}
                       for p in self.prunes],
            "seen": {m.memory_id: fingerprint(m) for m in self.memories()},
        }

    def memories(self) -> list[Memory]:
        """Every memory the plan would change."""
        return [*(x for m in self.merges for x in (m.a, m.b)), *(x for c in self.conflicts for x in (c.a, c.b)),
                *(p.memory for p in self.prunes)]


def fingerprint(memory: Memory) -> str:
    """What a plan saw of a memory: its status, its links, its text and when it was last written. An approval
    applies an item only while its memories are as seen (another plan, an update, a merge into it, a delete or
    an undo since makes the item stale; a review flag or a read, which change none of these, does not)."""
    links = "|".join(f"{k}={getattr(memory, k)}" for k in ("superseded_by", "supersedes", "merged_into",
                                                            "merged_from"))
    digest = hashlib.sha256(f"{links}|{memory.text}".encode()).hexdigest()[:16]
    return f"{memory.status}|{memory.updated_at}|{digest}"


def restated_at(memories: Iterable[Memory]) -> dict[str, str]:
    """Per canonical, the latest `created_at` of the memories merged into it (for `analyse`'s `restated`)."""
    latest: dict[str, str] = {}
    for m in memories:
        if m.status == "merged" and m.merged_into:
            seen = latest.get(m.merged_into)
            if seen is None or parse_time(m.created_at) > parse_time(seen):
                latest[m.merged_into] = m.created_at
    return latest


def age_days(memory: Memory, now: datetime) -> int:
    return max(0, (now - parse_time(memory.created_at)).days)


_SPECIFIC = re.compile(
    r"(?:[\w.-]*/[\w./-]+)"  # a path: src/auth.py, /etc/hosts
    r"|(?:\b[\w-]+\.(?:py|js|ts|tsx|go|rs|java|rb|sql|ya?ml|json|toml|md|sh|c|h|cpp|css|html)\b)"  # a file
    r"|(?:\b[a-z0-9-]+(?:\.[a-z0-9-]+)*\.(?:com|org|net|io|dev|ai|app|co|edu|gov)\b)"  # a domain
    r"|(?:`[^`]+`)"  # code
    r"|(?:\b[a-z]+[A-Z]\w*|\b[A-Z]{2,}[a-z]*\d*\b|\b\w+_\w+\b)"  # camelCase, ACRONYM, snake_case
    r"|(?:\b[A-Za-z]+-?\d+[\w.-]*\b)"  # v2.3, JIRA-123
)


def is_specific(text: str) -> bool:
    """Carries something particular to the project (a file path, an identifier, a domain name)."""
    return _SPECIFIC.search(text) is not None


def _eligible(memory: Memory) -> bool:
    """A fact a pass may merge, resolve or prune: not pinned, and not one of the passes' own reminders
    (they restate each other by design; merging them was a pass changing its own notes every run)."""
    return memory.kind == "fact" and not memory.pinned and memory.status in ("active", "superseded") \
        and not memory.metadata.get("reminder")


def near_duplicate(newer: Memory, older: Memory, cos: float) -> bool:
    """The pass's wider net: one memory mostly restating the other, with detail added, and nothing
    that makes them two facts (another value, a negation, someone else, another occasion). Ingest
    leaves such pairs apart; the pass proposes one fuller text for a person to approve."""
    if cos < MERGE_COS:
        return False
    o = tf.overlap(newer.text, older.text)
    if max(o.old_in_new, o.new_in_old) < MERGE_CONTAINED or o.literal_conflict:
        return False
    return (tf.has_negation(newer.text) == tf.has_negation(older.text)
            and tf.third_parties(newer.text) == tf.third_parties(older.text)
            and tf.episode_words(newer.text) == tf.episode_words(older.text))


def draft_merge(a: Memory, b: Memory) -> str:
    """A merged text at least as complete as either, offline: the fuller text, plus what only the other says."""
    full, other = (a, b) if tf.completeness(a.text) >= tf.completeness(b.text) else (b, a)
    extra = [w for w in tf.content(other.text) if w not in set(tf.content(full.text))]
    extra_nums = tf.numbers(other.text) - tf.numbers(full.text)
    if not extra and not extra_nums:
        return full.text.strip()
    return joined(full.text.strip().rstrip("."), other.text.strip().rstrip("."))


def joined(first: str, then: str) -> str:
    """Two statements as one text. After a semicolon when the second starts with a common word, lower-
    cased ("...; she likes hiking."); as a sentence of its own otherwise, so that a name, an acronym or
    "I" keeps its case ("... Berlin. Ana likes hiking.") without guessing which capitals are names."""
    word = then.split(maxsplit=1)[0] if then.split() else ""
    if word and word != "I" and word[1:] == word[1:].lower() and word.lower() in tf.STOPWORDS:
        return f"{first}; {then[:1].lower() + then[1:]}."
    return f"{first}. {then}."


Judge = Callable[[Memory, Memory], tuple[str, str]]
"""(newer, older) -> (relation, rule): "same", "replaces", "unrelated", or the judge's abstentions
"review_same" / "review_replaces", which the pass proposes like the others: a person decides here."""


def pairwise(judge: JudgeOfMany) -> Judge:
    """Any ingest judge (learned, rules, NLI, LLM) read pair by pair, so the pass proposes what ingest
    would decide."""

    def pair(newer: Memory, older: Memory) -> tuple[str, str]:
        verdict = judge.judge(newer, [older])[0]
        return verdict.relation, verdict.rule

    return pair


def offline_judge(featurize: FeaturesOf | None = None) -> Judge:
    """The rule judge read pairwise; `featurize` serves memories stored without word features."""
    return pairwise(OfflineJudge(featurize=featurize))


def recorded_reviews(active: Mapping[str, Memory]) -> list[tuple[Memory, Memory, str, float]]:
    """The pairs ingest's judge abstained on (kept on the newer memory as review items), where both
    are still active: (newer, older, "merge"|"supersede", cosine), oldest first."""
    out = []
    for newer in sorted(active.values(), key=lambda m: (m.created_at, m.memory_id)):
        dismissed = newer.undone_decisions()  # `dream undo` dismisses
        for item in newer.conflicts:
            proposal = item.get("review") if item.get("decision_id") not in dismissed else None
            for other in item.get("with") or []:
                older = active.get(other)
                if proposal and older is not None and older.user_id == newer.user_id:
                    out.append((newer, older, str(proposal), cosine(newer, older)))
    return out


def dismissed_pairs(active: Mapping[str, Memory]) -> set[frozenset[str]]:
    """The pairs a person dismissed as review items (`dream undo` on the review decision): they said these are
    two facts, so the pass does not propose them again."""
    out: set[frozenset[str]] = set()
    for newer in active.values():
        undone = newer.undone_decisions()
        for item in newer.conflicts:
            if item.get("review") and item.get("decision_id") in undone:
                out |= {frozenset((newer.memory_id, str(other))) for other in item.get("with") or []}
    return out


# --- the rules ---------------------------------------------------------------------------------------
# A rule is one function. A pair rule names the proposal it makes for two active memories of one
# type ("merge" or "conflict"; the report shows each under its section); a prune rule returns the
# policy line the report prints for a memory it would expire. The first rule that speaks wins.

PairRule = Callable[[Memory, Memory, float, Judge], str | None]
PruneRule = Callable[[Memory, int, Mapping[str, int | None]], str | None]


def judged_update(newer: Memory, older: Memory, cos: float, judge: Judge) -> str | None:
    """The judge says the newer one replaces the older (or would, with review): which is current?"""
    return "conflict" if judge(newer, older)[0] in ("replaces", "review_replaces") else None


def judged_restatement(newer: Memory, older: Memory, cos: float, judge: Judge) -> str | None:
    """The judge says they state the same thing (or may), or their wording nearly coincides."""
    same = judge(newer, older)[0] in ("same", "review_same")
    return "merge" if same or near_duplicate(newer, older, cos) else None


def past_retention(memory: Memory, age: int, retention: Mapping[str, int | None]) -> str | None:
    """Older than its type's retention policy: "<days>d"."""
    days = retention.get(memory.memory_type)
    return f"{days}d" if days is not None and age > days else None


def unsure_and_generic(memory: Memory, age: int, retention: Mapping[str, int | None]) -> str | None:
    """Stored with low confidence and naming nothing specific: "confidence <c> < 0.3"."""
    if memory.confidence < LOW_CONFIDENCE and not is_specific(memory.text):
        return f"confidence {memory.confidence:g} < {LOW_CONFIDENCE}"
    return None


PAIR_RULES: tuple[PairRule, ...] = (judged_update, judged_restatement)
PRUNE_RULES: tuple[PruneRule, ...] = (past_retention, unsure_and_generic)


def _asked_once(judge: Judge) -> Judge:
    """The judge, asked once per pair however many rules consult it."""
    seen: dict[tuple[str, str], tuple[str, str]] = {}

    def ask(newer: Memory, older: Memory) -> tuple[str, str]:
        key = (newer.memory_id, older.memory_id)
        if key not in seen:
            seen[key] = judge(newer, older)
        return seen[key]

    return ask


def _propose(plan: Plan, proposal: str, newer: Memory, older: Memory, score: float, reason: str = "",
             held: bool = True) -> None:
    if proposal == "conflict":
        # "newer" is the later to arrive; the likely winner is the later said (created_at), unless the other
        # is surer: an event that came late with an older date must not win over what replaced it.
        a_recent = not said_later(older, newer)
        recent, earlier = (newer, older) if a_recent else (older, newer)
        likely = ("A" if a_recent else "B") if recent.confidence >= earlier.confidence else ("B" if a_recent else "A")
        plan.conflicts.append(Conflict(a=newer, b=older, likely=likely, score=score, reason=reason))
    else:
        plan.merges.append(MergeProposal(a=older, b=newer, merged_text=draft_merge(older, newer), score=score,
                                         held=held))


def sure_merge(newer: Memory, older: Memory, relation: str) -> bool:
    """A merge an unattended pass may apply: the judge reads one fact, and ingest's gates would let it merge."""
    if relation != "same":
        return False
    verdict = Verdict(older.memory_id, "same", 1.0, "consolidate", {}, None)
    return gate(verdict, newer, older, False).relation == "same"


def unattended(plan: Plan) -> tuple[Plan, int]:
    """What a pass nobody answers applies: the plan without its held merges, and how many wait for a person."""
    kept = [m for m in plan.merges if not m.held]
    return replace(plan, merges=kept), len(plan.merges) - len(kept)


def analyse(
    memories: Iterable[Memory],
    *,
    project: str,
    user_id: str,
    app_id: str | None,
    now: datetime,
    retention: Mapping[str, int | None],
    judge: Judge | None = None,
    restated: Mapping[str, str] | None = None,
) -> Plan:
    """Merge proposals, contradictions and prune candidates of one scope, per metadata.type.

    Pinned memories are never proposed for anything. Each memory takes part in one proposal at most
    (merges first, then conflicts), so applying the plan never acts twice on one memory. `restated`: per
    memory, when a restatement merged into it was said last (`restated_at`): a fact said again is as old
    as its last saying, so retention never hides a recent restatement behind its old canonical.
    """
    judge = _asked_once(judge or offline_judge())
    pool = [m for m in memories if _eligible(m)]
    plan = Plan(project=project, user_id=user_id, app_id=app_id, considered=len(pool))
    used: set[str] = set()
    by_type: dict[str, list[Memory]] = {}
    for m in sorted(pool, key=lambda m: (m.created_at, m.memory_id)):
        if m.status == "active":
            by_type.setdefault(m.memory_type, []).append(m)
    active = {m.memory_id: m for m in pool if m.status == "active"}
    dismissed = dismissed_pairs(active)
    for newer, older, proposal, score in recorded_reviews(active):
        if newer.memory_id in used or older.memory_id in used:
            continue
        replacing = "B may replace it: B was said after A, which arrived late" if said_later(older, newer) \
            else "it may replace B"  # a late older fact is the one replaced
        note = replacing if proposal == "supersede" else "it may be the same as B"
        _propose(plan, "conflict" if proposal == "supersede" else "merge", newer, older, score,
                 f"held for review when A was added: {note} (similarity {score:.2f})")
        used.update((older.memory_id, newer.memory_id))
    for mtype in sorted(by_type):
        group = by_type[mtype]
        pairs = sorted(
            ((cosine(x, y), i, j) for i, x in enumerate(group) for j, y in enumerate(group) if i < j),
            reverse=True,
        )
        for cos, i, j in pairs:
            if cos < CONFLICT_COS:
                break
            older, newer = group[i], group[j]
            if older.memory_id in used or newer.memory_id in used \
                    or frozenset((older.memory_id, newer.memory_id)) in dismissed:
                continue
            made = next((p for rule in PAIR_RULES if (p := rule(newer, older, cos, judge))), None)
            if made is None:
                continue
            relation, rule = judge(newer, older)
            reading = "reads A as replacing B" if relation == "replaces" else "was unsure whether A replaces B"
            _propose(plan, made, newer, older, cos, f"the judge {reading} ({rule}; similarity {cos:.2f})",
                     held=made == "merge" and not sure_merge(newer, older, relation))
            used.update((older.memory_id, newer.memory_id))
    for m in sorted(pool, key=lambda m: (m.created_at, m.memory_id)):
        if m.memory_id in used:
            continue
        said = max(m.created_at, (restated or {}).get(m.memory_id, m.created_at), key=parse_time)
        age = max(0, (now - parse_time(said)).days)
        policy = next((why for rule in PRUNE_RULES if (why := rule(m, age, retention))), None)
        if policy is not None:
            plan.prunes.append(Prune(memory=m, age_days=age, policy=policy))
    plan.conflicts.sort(key=lambda c: (c.a.created_at, c.a.memory_id))
    return plan


# --- the texts users read (and script against) ----------------------------------------------------


def truncate(text: str, limit: int = TRUNCATE) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def no_memories(project: str) -> str:
    return f"No memories found for project {project}. Nothing to consolidate."


NOTHING = "Dream complete. No duplicate, contradictory, or stale memories found."


def _day(memory: Memory) -> str:
    return memory.created_at[:10]


APPLY_PROMPT = "Apply? [Y/n]"


def confidence_shown(memory: Memory) -> str:
    """The confidence the producer gave, or `unset` (the 1.0 used for ranking is not what they said)."""
    value = memory.metadata.get("confidence")
    return f"{value:g}" if isinstance(value, int | float) and not isinstance(value, bool) else "unset"


def render_report(plan: Plan) -> str:
    """The consolidation report, empty sections left out, ending with the Apply prompt's text."""
    if plan.empty:
        return NOTHING
    out = ["## Dream — Memory Consolidation Report", ""]
    if plan.merges:
        out += [f"### Merge proposals ({len(plan.merges)} pairs)"]
        for m in plan.merges:
            out += [
                f"MERGE [mem:{m.a.memory_id}] + [mem:{m.b.memory_id}] → NEW",
                *(["  Held: the judge is not sure these are one fact; --auto leaves it for you"] if m.held else []),
                f'  - Original 1: "{truncate(m.a.text)}"',
                f'  - Original 2: "{truncate(m.b.text)}"',
                f'  - Merged:     "{" ".join(m.merged_text.split())}"',  # one line: the answers follow lines
                "",
            ]
    if plan.conflicts:
        out += [f"### Contradictions ({len(plan.conflicts)} pairs)"]
        for c in plan.conflicts:
            out += [
                f"CONFLICT [mem:{c.a.memory_id}] vs [mem:{c.b.memory_id}]",
                f'  - A: "{truncate(c.a.text)}" ({_day(c.a)}, confidence: {confidence_shown(c.a)})',
                f'  - B: "{truncate(c.b.text)}" ({_day(c.b)}, confidence: {confidence_shown(c.b)})',
                *([f"  Why: {c.reason}"] if c.reason else []),
                "  Which is current? [A/B/skip]",
                "",
            ]
    if plan.prunes:
        out += [f"### Prune candidates ({len(plan.prunes)} memories)"]
        for p in plan.prunes:
            # The producer's type on one line: the interactive pass reads the report line by line.
            out.append(f"PRUNE [mem:{p.memory.memory_id}] — {' '.join(p.memory.memory_type.split())}, "
                       f"{p.age_days}d old (policy: {' '.join(p.policy.split())})")
        out.append("")
    out += [
        "---",
        f"Proposed: {len(plan.merges)} merges, {len(plan.prunes)} prunes, {len(plan.conflicts)} conflicts",
        APPLY_PROMPT,
    ]
    return "\n".join(out)


def report_without_prompt(plan: Plan) -> str:
    """The report as a dry run and the control topic show it: nothing to answer."""
    text = render_report(plan)
    return text.removesuffix("\n" + APPLY_PROMPT)
CANCELLED = "Cancelled. No changes made."


def parse_choice(answer: str) -> str | None:
    """A, B or None (skip): case-insensitive; empty or anything else skips."""
    a = answer.strip().lower()
    return "A" if a == "a" else "B" if a == "b" else None


ANSWERS = {"merge": ("apply", "skip"), "conflict": ("A", "B", "apply", "skip"), "prune": ("apply", "skip")}
"""What each kind of item takes: apply or skip; a conflict's A or B (apply: its likely winner)."""


def answer_plan(plan: Plan, answers: Mapping[str, str], rest: str = "apply") -> tuple[Plan, dict[int, str | None]]:
    """The part of a plan a person approved, item by item: `answers` maps an item id (`m:…`, `c:…`,
    `p:…`, as `to_dict` gives them) to its answer; the items not named are applied as proposed
    (`rest="apply"`: merges, prunes, conflicts at their likely winner) or skipped (`rest="skip"`). A held
    merge (the judge is not sure the two are one fact) is applied only when answered "apply": `rest` never
    merges it, since nobody said yes to it (an approval with no answers merged "prefers tea" into "prefers
    coffee"). Returns the plan to apply and the conflict choices. ValueError names an unknown item or answer."""
    if rest not in ("apply", "skip"):
        raise ValueError("rest must be apply or skip")
    kinds = {m.item: "merge" for m in plan.merges} | {c.item: "conflict" for c in plan.conflicts}
    kinds |= {p.item: "prune" for p in plan.prunes}
    for item, answer in answers.items():
        if item not in kinds:
            raise ValueError(f"no item {item} in plan {plan.plan_id} (it may have changed since: plan again)")
        if answer not in ANSWERS[kinds[item]]:
            raise ValueError(f"{item} is a {kinds[item]}: answer {' or '.join(ANSWERS[kinds[item]])}")

    def chosen(item: str) -> str:
        return answers.get(item, rest)

    out = replace(plan, merges=[m for m in plan.merges
                                if (answers.get(m.item) if m.held else chosen(m.item)) == "apply"],
                  prunes=[p for p in plan.prunes if chosen(p.item) == "apply"])
    choices: dict[int, str | None] = {}
    for i, c in enumerate(plan.conflicts):
        answer = chosen(c.item)
        choices[i] = c.likely if answer == "apply" else None if answer == "skip" else answer
    return out, choices


def parse_confirm(answer: str) -> bool | None:
    """Y/n: Enter is yes; None for anything else ("skip", "cancel", "nope" were read as yes), asked again."""
    word = answer.strip().lower()
    return True if word in ("", "y", "yes") else False if word in ("n", "no") else None


@dataclass
class Outcome:
    """What applying a plan did, for the summary and the JSON reply."""

    merged_pairs: int = 0
    new_memories: int = 0
    pruned: int = 0
    resolved: int = 0
    skipped: int = 0
    held: int = 0
    """Merges left for a person by a pass nobody answered (`unattended`)."""
    deleted: int = 0
    """Of `pruned`, those deleted for good (`hard_delete`); the rest were expired, and undo brings them back."""
    kept_linked: int = 0
    """Of `pruned`, those a hard delete expired instead: other memories link to them (`kept: linked`)."""
    hard_delete: bool = False
    decision_id: str | None = None
    reminder_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def render_summary(o: Outcome) -> str:
    pruned = f"{o.pruned} memories expired"
    if o.hard_delete:
        pruned = f"{o.deleted} memories deleted" + (f", {o.kept_linked} expired instead (linked)"
                                                     if o.kept_linked else "")
    return "\n".join([
        "Dream complete.",
        f"  Merged:  {o.merged_pairs} pairs → {o.new_memories} new memories",
        f"  Pruned:  {pruned}",
        f"  Flagged: {o.resolved} contradictions resolved, {o.skipped} skipped",
    ])


def auto_line(project: str, o: Outcome) -> str:
    return (f"[dream --auto] project={project}  merged={o.merged_pairs}  pruned={o.pruned}  "
            f"conflicts_skipped={o.skipped}  merges_held={o.held}")


def reminder_text(skipped: int, user_id: str, app_id: str | None, held: int = 0) -> str:
    scope = f"--user {user_id}" + (f" --app {app_id}" if app_id else "")
    parts = [f"{n} {noun}{'' if n == 1 else 's'}" for n, noun in ((skipped, "contradiction"),
                                                                 (held, "possible merge")) if n]
    verb = "needs" if skipped + held == 1 else "need"
    what = "which memory is current for each" if not held else "what holds"
    return f"Dream: {' and '.join(parts)} {verb} review. Run `dream consolidate {scope}` to choose {what}."


# --- decay -------------------------------------------------------------------------------------------

INITIAL_STABILITY = 3.0
"""Days: a memory never read again keeps R above 0.5 for about ten days."""
RANK_FLOOR = 0.5
"""Decay biases ranking, never hides: the least retrievable memory keeps half its relevance."""


def retrievability(t_days: float, stability: float) -> float:
    """R(t, S) = (1 + 0.9 t / S) ^ -0.5: 1 right after an access, falling slower the more stable."""
    return float((1.0 + 0.9 * max(0.0, t_days) / max(stability, 1e-6)) ** -0.5)


def next_stability(stability: float, t_days: float) -> float:
    """Stability after an access `t_days` after the previous one: a recall that was harder (lower R)
    strengthens more, as in spaced repetition; every access grows S."""
    r = retrievability(t_days, stability)
    return stability * (1.0 + 2.0 * (1.0 - r)) + 1.0


def rank_factor(t_days: float, stability: float, floor: float = RANK_FLOOR) -> float:
    return floor + (1.0 - floor) * retrievability(t_days, stability)


def replay_accesses(stability: float, last: str | None, times: Sequence[str]) -> tuple[float, str | None]:
    """Folds pending access times into (stability, last access)."""
    for at in sorted(times):
        if last is not None:
            gap = (parse_time(at) - parse_time(last)).total_seconds() / 86400.0
            stability = next_stability(stability, gap)
        last = at
    return stability, last


# --- co-access (Hebbian) -------------------------------------------------------------------------

HEBB_RATE = 0.3
LINK_DECAY = 0.9
LINK_FLOOR = 0.1

Links = dict[str, dict[str, float]]


def strengthen(links: Links, groups: Iterable[Sequence[str]], rate: float = HEBB_RATE,
               decay: float = LINK_DECAY) -> Links:
    """Memories read together wire together: each co-accessed pair moves toward 1, the rest fade.

    w <- w + rate (1 - w) for each read of the pair together in this period; w <- w * decay when
    the period had none.
    """
    seen: Counter[tuple[str, str]] = Counter()
    for g in groups:
        ids = sorted(set(g))
        seen.update((a, b) for i, a in enumerate(ids) for b in ids[i + 1:])
    out: Links = {}
    pairs = {(a, b) for a, nbrs in links.items() for b in nbrs if a < b} | set(seen)
    for a, b in pairs:
        w = max(links.get(a, {}).get(b, 0.0), links.get(b, {}).get(a, 0.0))
        k = seen.get((a, b), 0)
        w = 1.0 - (1.0 - w) * (1.0 - rate) ** k if k else w * decay
        out.setdefault(a, {})[b] = w
        out.setdefault(b, {})[a] = w
    return out


def normalise_fanout(links: Links) -> Links:
    """Divides each weight by the root of both ends' total weight (when above 1), so a hub read
    with everything does not outweigh a specific pair; weights below LINK_FLOOR are dropped."""
    total = {a: sum(n.values()) for a, n in links.items()}
    out: Links = {}
    for a, nbrs in links.items():
        for b, w in nbrs.items():
            scaled = w / math.sqrt(max(1.0, total[a]) * max(1.0, total.get(b, 0.0)))
            if scaled >= LINK_FLOOR:
                out.setdefault(a, {})[b] = round(scaled, 6)
    return out


# --- clustering (full consolidation) -------------------------------------------------------------

MIN_CLUSTER = 3
SAMPLE_ABOVE = 5000


def stratified_sample(strata: Sequence[str], size: int, seed: int = 0) -> np.ndarray:
    """Indices of a sample of `size`, each stratum (e.g. metadata.type) in proportion, at least one each."""
    rng = np.random.default_rng(seed)
    labels = np.asarray(strata)
    chosen: list[np.ndarray] = []
    n = len(labels)
    for value in sorted(set(strata)):
        idx = np.flatnonzero(labels == value)
        k = min(len(idx), max(1, round(size * len(idx) / n)))
        chosen.append(rng.choice(idx, size=k, replace=False))
    return np.sort(np.concatenate(chosen))


def cluster(vectors: np.ndarray, strata: Sequence[str] | None = None, *, min_cluster_size: int = MIN_CLUSTER,
            sample_above: int = SAMPLE_ABOVE, seed: int = 0) -> np.ndarray:
    """HDBSCAN labels (-1 = noise) on cosine distance. Above `sample_above` rows a stratified sample
    is clustered and every other row joins the cluster of its nearest sampled neighbour (HDBSCAN's
    cost grows quadratically; the sample keeps a full pass within minutes)."""
    from sklearn.cluster import HDBSCAN

    n = len(vectors)
    if n < min_cluster_size:
        return np.full(n, -1, dtype=int)
    x = np.asarray(vectors, dtype=np.float64)
    x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)

    def hdbscan(rows: np.ndarray) -> np.ndarray:
        model = HDBSCAN(min_cluster_size=min_cluster_size, metric="cosine", copy=True)
        return np.asarray(model.fit_predict(rows), dtype=int)

    if n <= sample_above:
        return hdbscan(x)
    idx = stratified_sample(strata or ["all"] * n, sample_above, seed)
    sample_labels = hdbscan(x[idx])
    labels = np.empty(n, dtype=int)
    labels[idx] = sample_labels
    rest = np.setdiff1d(np.arange(n), idx)
    for start in range(0, len(rest), 2048):
        chunk = rest[start:start + 2048]
        nearest = np.argmax(x[chunk] @ x[idx].T, axis=1)
        labels[chunk] = sample_labels[nearest]
    return labels


def now_utc() -> datetime:
    return datetime.now(UTC)


def memory_rank_factor(memory: Memory, now: datetime) -> float:
    """The decay factor of one memory: days since its last read (or its creation) against its stability."""
    last = memory.access.get("last") or memory.created_at
    try:
        t = (now - parse_time(str(last))).total_seconds() / 86400.0
    except ValueError:
        return 1.0
    return rank_factor(t, float(memory.access.get("stability") or INITIAL_STABILITY))
