"""Synthesis: from one user's many small memories, find themes and write one pattern memory per theme.

Pure: no Kafka, no Qdrant. The pipeline reads the user's memories, calls `synthesize` (or the pieces:
`eligible`, `find_themes`, `match_existing`) and stores each `Theme` as a `kind="pattern"` memory whose
`sources` are the theme's evidence.

Why content, not labels: a pattern is read as insight about a person, so a wrong one misleads more
than none. A group counts only when its members are about the same concrete thing and hang together
with one another: every member must be close to most other members (not a chain, not only to a
shared topic label), by what the person says specifically (sentence embeddings centred on that
person's own average, so what all their memories share, such as their name, counts for nothing)
and by the rarer content words they share (entities, activities, objects, numbers). Most memories
belong to no theme, and a user with no clear pattern gets none.

The offline wording is extractive: the person named as the sources name them, then the members'
own clauses, shortened and chosen to cover the group's distinct details, in one sentence. Nothing
is claimed that no source says.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta

import numpy as np
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components
from scipy.spatial.distance import squareform

from dreamstream.agents import text_features as tf
from dreamstream.agents.theme_reader import MAX_LINES, ReadTheme
from dreamstream.schemas.memory import Memory, parse_time

Embed = Callable[[list[str]], np.ndarray]

MIN_MEMORIES = 20
"""A user with fewer memories gets no synthesis: too little is known to claim a pattern."""
MIN_THEME_SIZE = 3
"""The fewest memories a theme may rest on; users with many memories need more (see `min_theme_size`)."""
MATCH_OVERLAP = 0.5
"""A new theme takes over an existing pattern's id when they share at least this share of evidence."""
SIZE_PER_THEME = 5
"""A user with n eligible memories needs themes of about n / SIZE_PER_THEME members (3 to 5)."""
MAX_MIN_SIZE = 5
RESTATEMENT_COS = 0.7
"""Members this close (plain embedding cosine) say one thing twice (a restatement, a repeated event,
one slot's old and new value): they count once towards a theme's size. Distinct memories of one
real theme sit well below (99% of the dev themes' pairs under 0.61)."""

TEMPERATURE = 0.05
"""Softmax temperature over hint-area scores: a memory's profile is dominated by its two or three best areas."""
TOPIC_WEIGHT = 0.3
"""Pair affinity = TOPIC_WEIGHT * topic-profile cosine + the rest * content affinity (`content_affinity`)."""
CUT_BASE = 0.15
"""Minimum mean pair affinity within one group (average linkage), for a user with few memories."""
CUT_SLOPE = 0.1
"""How much stricter the cut gets per doubling of the user's eligible memories above CUT_PIVOT."""
CUT_PIVOT = 16
CUT_MAX = 0.4
DIRECT_MIN = 0.05
"""A linked pair must also be this close in its own content: the same topic area alone links nothing."""
LEX_WEIGHT = 0.25
"""Weight of shared rare content words in a pair's affinity, next to the centred embedding cosine."""
LINK_MIN = 0.15
"""A pair is linked when its affinity reaches this: both memories are about the same concrete thing."""
DENSITY = 0.5
"""Each member must be linked to at least this share of the group's other members (no chains)."""
COHESION_MIN = 0.15
"""Mean content affinity inside a group that counts as shared content without a shared word."""
COHESION_WITH_WORD = 0.05
"""Mean content affinity a group needs when a specific word recurs in SHARED_MIN of its members."""
STRAY_FRAC = 0.3
STRAY_MIN = 0.05
"""A member's mean content affinity to the rest of its group must reach STRAY_FRAC of the group's median
member's and STRAY_MIN: members belong to the group's core, not to one neighbour."""
OVERLAP_FRAC = 0.6
"""Two themes of one person whose cross affinity reaches this share of the smaller one's cohesion overlap."""
SHARED_MIN = 0.3
"""At least one content word (or entity) must recur in this share of the members: they share content."""
PAIR_BASE = 0.1
"""The median centred cosine of unrelated memory pairs (dev: 0.11); a user's median above it is their
shared background and is taken off every pair."""
COMMON_DF = 0.2
BACKGROUND_MIN = 5.0
"""A word needs more than this many memories (and COMMON_DF of them) to count as the person's background:
a theme may fill most of a small record."""
"""Content words in more than this share of the user's memories are their background, not a theme's."""
MAX_WORDS = 45
"""The offline pattern's supporting details stay within this many words (its lead sentence comes on top)."""
MIN_DETAILS = 2
"""A theme is written only when at least this many members can be worded as its details."""
CLAUSE_WORDS = 14
"""A member's clause longer than this (after cutting at its first clause boundary) is left out."""
SLOT_COS = 0.65
"""An earlier member this close to a later one of the same theme (cosine of the person-centred vectors)
says the same thing or the slot's old value ("budget is 40,000" before "budget has gone up to 55,000"):
the later one speaks for both, so a pattern never states an earlier state as current. On the corpus's
labelled train pairs, 87% of pairs this close are one fact restated or updated; plain cosine is no
guide across voices (short third-person notes about one person sit at 0.6 for distinct facts).
"""
PLAN_DONE_COS = 0.45
"""A plan ("wants to start a catering business") is not evidence once a later memory that is no plan
shares its specific words and is at least this close, person-centred ("registered his catering business")."""


# A broad, generic taxonomy of everyday life and work areas, each with a few example statements in the
# style of memories. A hint only: a memory's softmax profile over these areas says which neighbourhood
# of meaning it sits in, which helps link "bought a prime lens" with "edits RAW files" where the words
# and the plain embeddings barely meet. It is never enough on its own (pairs must also be close in
# their own content), never names a theme and never appears in a pattern's text. The mean of all the
# examples is also the generic component removed from every embedding before comparing.
TOPIC_HINTS: dict[str, tuple[str, ...]] = {
    # body, health, mind
    "fitness": (
        "User works out regularly at the gym.", "User goes running and trains for races.",
        "User follows a weekly training plan to get fitter.", "User tracks workouts, steps and heart rate."),
    "sports": (
        "User plays football in a weekly league.", "User plays tennis and squash with friends.",
        "User swims laps at the pool.", "User climbs at the bouldering gym."),
    "outdoors": (
        "User goes hiking in the mountains.", "User likes camping and backpacking trips.",
        "User spends weekends outdoors in nature.", "User is into trail walking and kayaking."),
    "cycling": (
        "User rides a bike for long weekend rides.", "User commutes by bicycle.",
        "User maintains and upgrades their bike."),
    "nutrition": (
        "User follows a specific diet.", "User counts calories and protein.",
        "User avoids certain foods for health reasons.", "User takes vitamins and supplements."),
    "cooking": (
        "User loves cooking new recipes at home.", "User bakes bread and cakes.",
        "User meal-preps for the week.", "User enjoys trying restaurants and cuisines."),
    "medical": (
        "User has a chronic health condition.", "User sees a doctor about symptoms.",
        "User takes medication daily.", "User has allergies and medical appointments."),
    "mental_health": (
        "User is dealing with stress and anxiety.", "User practises meditation and breathing exercises.",
        "User sees a therapist.", "User is working on burnout and work-life balance."),
    "sleep": (
        "User has trouble sleeping at night.", "User wakes up tired.",
        "User is trying to fix their sleep schedule.", "User tracks their sleep."),
    "routine": (
        "User has a fixed daily routine.", "User gets up early every morning.",
        "User plans their day in a set order.", "User is building better daily habits."),
    "productivity": (
        "User keeps a to-do list and plans the week.", "User uses time blocking and focus sessions.",
        "User organises notes in an app.", "User tries to avoid distractions."),
    # people
    "parenting": (
        "User has a young child.", "User is a new parent looking after a baby.",
        "User helps their kids with school.", "User arranges childcare and daycare."),
    "family": (
        "User's parents live in another city.", "User visits their siblings and relatives.",
        "User takes care of an elderly parent.", "User has a big family."),
    "relationships": (
        "User has a partner they live with.", "User is dating someone new.",
        "User plans date nights with their spouse."),
    "celebrations": (
        "User is planning their wedding.", "User is organising a big party.",
        "User is booking a venue and guest list for a celebration."),
    "social": (
        "User meets friends every weekend.", "User hosts dinner parties.",
        "User is part of a local club or community group."),
    "pets": (
        "User has a dog.", "User has a cat.", "User takes their pet to the vet.",
        "User is training their puppy."),
    # home, money, admin
    "home_improvement": (
        "User is renovating their house.", "User does DIY repairs at home.",
        "User bought power tools for a home project.", "User is painting and redecorating rooms."),
    "gardening": (
        "User grows vegetables in the garden.", "User has many house plants.",
        "User takes care of their garden and lawn."),
    "housing": (
        "User is looking for a new apartment.", "User is moving to a new city.",
        "User is buying a house.", "User deals with their landlord and rent."),
    "finance": (
        "User is saving money for a big purchase.", "User keeps a strict monthly budget.",
        "User invests in index funds.", "User is paying off debt."),
    "admin": (
        "User needs to renew their documents.", "User files taxes and pays bills.",
        "User handles insurance and bank paperwork."),
    "shopping": (
        "User is comparing products before buying.", "User bought new clothes.",
        "User looks for deals and discounts."),
    "cars": (
        "User drives a car.", "User takes their car in for service.",
        "User is thinking about buying an electric car."),
    "commute": (
        "User commutes to work by train.", "User takes the bus every day.",
        "User works from home some days."),
    # leisure and learning
    "travel": (
        "User is planning a trip abroad.", "User books flights and hotels.",
        "User loves exploring new countries.", "User prefers certain seats and airlines."),
    "languages": (
        "User is learning a foreign language.", "User practises vocabulary with an app.",
        "User takes language lessons with a tutor.", "User speaks several languages."),
    "education": (
        "User is taking an online course.", "User is studying for an exam.",
        "User is doing a degree part-time.", "User wants to learn a new skill."),
    "reading": (
        "User reads a lot of novels.", "User is in a book club.", "User reads before bed."),
    "writing": (
        "User writes a blog.", "User keeps a journal.", "User is writing a novel."),
    "music": (
        "User plays an instrument.", "User listens to a lot of music.", "User goes to concerts.",
        "User takes music lessons."),
    "photography": (
        "User takes photos with a camera.", "User edits photos.",
        "User likes photographing landscapes and people."),
    "crafts": (
        "User paints and draws.", "User knits and sews.", "User makes pottery.",
        "User does woodworking as a hobby."),
    "film_tv": (
        "User is watching a TV series.", "User loves going to the cinema.", "User watches documentaries."),
    "games": (
        "User plays video games.", "User plays board games with friends.", "User collects games.",
        "User likes tabletop and card games."),
    "style": (
        "User cares about their clothes and style.", "User has a skincare routine.",
        "User gets their hair done regularly."),
    "causes": (
        "User volunteers at a local charity.", "User cares about the environment and sustainability.",
        "User donates to causes."),
    "faith": (
        "User goes to church or temple.", "User practises their faith.",
        "User observes religious holidays."),
    "news": (
        "User follows politics and the news.", "User reads newsletters.", "User avoids social media."),
    "gadgets": (
        "User uses a smartphone and smartwatch.", "User bought a new laptop.",
        "User likes trying new gadgets and apps."),
    "home_tech": (
        "User runs servers at home.", "User sets up their home network and router.",
        "User self-hosts services.", "User tinkers with single-board computers."),
    # work
    "job_search": (
        "User is looking for a new job.", "User is preparing for job interviews.",
        "User is updating their CV.", "User got a job offer."),
    "career": (
        "User wants a promotion.", "User is thinking about changing careers.",
        "User has a mentor at work."),
    "management": (
        "User manages a team of engineers.", "User runs one-on-ones with reports.",
        "User is hiring for their team."),
    "meetings": (
        "User has too many meetings.", "User prefers async communication at work.",
        "User writes status updates for stakeholders."),
    "business": (
        "User runs a small business.", "User is launching a startup.",
        "User works as a freelancer with clients.", "User handles sales and marketing."),
    "research": (
        "User is writing a research paper.", "User is doing a PhD.", "User analyses experiment results."),
    "teaching": (
        "User teaches a class.", "User mentors junior colleagues.", "User gives talks and workshops."),
    "design": (
        "User designs user interfaces.", "User works on UX research.", "User cares about visual design."),
    "data": (
        "User analyses data with SQL and notebooks.", "User trains machine learning models.",
        "User builds dashboards and reports."),
    # software engineering
    "code_style": (
        "User follows strict coding conventions.", "User reviews pull requests carefully.",
        "User prefers certain formatting and naming rules."),
    "testing": (
        "User writes tests for their code.", "User runs the test suite in CI.",
        "User cares about test coverage."),
    "typing": (
        "User uses static types in their code.", "User runs a type checker.", "User avoids untyped code."),
    "migrations": (
        "User is migrating a codebase to a new language.", "User is learning a new programming language.",
        "User upgrades frameworks and library versions."),
    "frontend": (
        "User builds web frontends.", "User works on UI components and styling.",
        "User cares about how the web app renders in browsers."),
    "backend": (
        "User builds backend APIs.", "User designs service endpoints.",
        "User works with databases and queries."),
    "infrastructure": (
        "User deploys services to the cloud.", "User manages servers and containers.",
        "User automates deployments and CI pipelines."),
    "operations": (
        "User is on call for production systems.", "User watches dashboards and alerts.",
        "User investigates incidents and outages."),
    "performance": (
        "User optimises code for speed.", "User profiles slow queries and endpoints.",
        "User measures latency and memory use."),
    "security": (
        "User cares about application security.", "User manages secrets and access control.",
        "User patches vulnerabilities."),
    "docs": (
        "User writes documentation for their code.", "User keeps design documents and READMEs up to date.",
        "User writes technical specs before coding."),
    "dev_tools": (
        "User uses a particular code editor.", "User customises their terminal and shell.",
        "User uses git in a particular way."),
}
BACKGROUND: tuple[str, ...] = tuple(p for ps in TOPIC_HINTS.values() for p in ps)

# Kinds of memory that are true of a person but are no evidence of a pattern: standing facts of their
# record (where they live, birthdays, relatives' names, languages, favourites), statements of
# feeling, belief or value, and how they respond to someone else in a conversation. A memory clearly
# nearer (NOT_EVIDENCE_MARGIN) to one of these examples than to any TOPIC_HINTS example is left out of
# the themes, and a theme whose typical member leans this way (GROUP_LEAN) is dropped: a group of them
# is a profile, an outlook or a conversation, not a concrete pursuit.
NOT_EVIDENCE: dict[str, tuple[str, ...]] = {
    "profile": (
        "User lives in a city.", "User's birthday is in spring.", "User grew up in a small town.",
        "User's sister lives abroad.", "User's mother is called Anna.", "User's partner is called Sam.",
        "User speaks two languages.", "User's favourite food is pasta.", "User's favourite colour is blue.",
        "User is left handed.", "User supports a football team.", "User's phone number changed.",
        "User is 34 years old.", "User's flat is on the second floor."),
    "outlook": (
        "User values kindness and honesty.", "User believes in helping others.",
        "User feels grateful for their friends.", "User is proud of how far they have come.",
        "User thinks it is important to stay positive.", "User finds it inspiring to see people grow.",
        "User felt happy and moved by the moment.", "User is excited about the future.",
        "User appreciates the support of the people around them.", "User feels calm and relaxed.",
        "User loves how it makes them feel."),
    "interaction": (
        "User asks their friend how things are going.", "User congratulated their friend on the news.",
        "User encourages their friend to keep going.", "User supports their friend's project.",
        "User is interested in their friend's trip and photos.", "User thanked their friend for the advice."),
}
NOT_EVIDENCE_MARGIN = 0.05
"""How much nearer a NOT_EVIDENCE example must be than any area's to leave a memory out (a gift "for her
birthday" is still about the gift)."""
GROUP_LEAN = -0.03
"""A theme's typical (median) member must be nearer to an everyday area than to a NOT_EVIDENCE kind by
this much: a group of memories that each only half describe something done is an outlook, not a pattern."""
_NOT_EVIDENCE_TEXTS: tuple[str, ...] = tuple(p for ps in NOT_EVIDENCE.values() for p in ps)

@dataclass(frozen=True)
class Theme:
    """A group of one user's memories that together imply a pattern, and the pattern's text."""

    user_id: str
    memory_ids: tuple[str, ...]
    label: str
    """The content words the members share, most shared first (a hint for a pattern writer)."""
    text: str
    pattern_id: str
    key: str = ""
    """The theme's stable identity (its earliest evidence), from which `pattern_id` is derived."""
    typical: tuple[str, ...] = ()
    """The members' texts, most typical of the theme first: what a pattern writer words it from."""
    person: str = "User"
    """The person as the sources name them ("User" when they use no name)."""
    dates: tuple[str, ...] = ()
    """The members' created_at, in `typical`'s order."""

    def dated(self) -> tuple[str, ...]:
        """The members' texts oldest first, each after its month ("(Jun 2025) ..."): what a pattern writer reads."""
        rows = sorted(zip(self.dates, self.typical, strict=True)) if len(self.dates) == len(self.typical) else []
        return tuple(f"({_month(d)}) {t}" if _month(d) else t for d, t in rows) or self.typical


# --- gates --------------------------------------------------------------------------------------


def eligible(memories: Sequence[Memory], boundary: str | None) -> list[Memory]:
    """The memories synthesis may use as evidence.

    Only active facts (superseded and merged ones are not evidence; patterns are not evidence for
    patterns), scoped to the user alone (app, agent and run ids all None: an app's or agent's memories
    describe that context, not the person), and created after the forward boundary set when synthesis
    was enabled, so enabling it never rewrites history.
    """
    cutoff = parse_time(boundary) if boundary else None
    return [
        m for m in memories
        if m.kind == "fact" and m.status == "active"
        and m.app_id is None and m.agent_id is None and m.run_id is None
        and (cutoff is None or parse_time(m.created_at) > cutoff)
    ]


def gate_count(memories: Sequence[Memory]) -> int:
    """How much is known about the user, for the MIN_MEMORIES gate: all their facts, any scope or status.

    Counted over everything the user has told, not only the eligible evidence: a user with 50 memories
    of which 8 are user-scoped is well known, and those 8 may well form a theme (the benchmark's themed
    users look exactly like this: gating on eligible memories alone drops dev theme recall to 0.07).
    Superseded and merged facts count, as the user did say them. Evidence stays `eligible` only.
    """
    return sum(1 for m in memories if m.kind == "fact")


def is_due(enabled: bool, n_eligible: int, last_run: str | None, now: str, cadence_days: float) -> bool:
    """Whether to run synthesis for a user now: enabled, enough memories, and a cadence elapsed.

    `n_eligible` is the count the MIN_MEMORIES gate applies to (the pipeline passes `gate_count`).
    """
    if not enabled or n_eligible < MIN_MEMORIES:
        return False
    if last_run is None:
        return True
    return parse_time(now) - parse_time(last_run) >= timedelta(days=cadence_days)


# --- content words and the person's name ---------------------------------------------------------

_STOP = frozenset((
    "a", "about", "above", "after", "again", "against", "all", "also", "am", "an", "and", "any", "are", "aren't",
    "as", "at", "be", "because", "been", "before", "being", "below", "between", "both", "but", "by", "can", "could",
    "did", "do", "does", "doing", "done", "down", "during", "each", "even", "ever", "every", "few", "for", "from",
    "further", "had", "has", "have", "having", "he", "her", "here", "hers", "herself", "him", "himself", "his",
    "how", "i", "if", "in", "into", "is", "it", "its", "itself", "just", "let", "me", "more", "most", "much", "my",
    "myself", "no", "nor", "not", "now", "of", "off", "on", "once", "one", "only", "or", "other", "our", "ours",
    "out", "over", "own", "same", "she", "should", "so", "some", "such", "than", "that", "the", "their", "theirs",
    "them", "themselves", "then", "there", "these", "they", "this", "those", "through", "to", "too", "under",
    "until", "up", "upon", "us", "very", "was", "we", "were", "what", "when", "where", "which", "while", "who",
    "whom", "why", "will", "with", "would", "you", "your", "yours", "yourself", "still", "really", "quite",
    "always", "often", "usually", "lately", "recently", "currently", "already", "soon", "yet", "back", "ago",
    "since", "around", "lot", "lots", "way", "ways", "thing", "things", "something", "anything", "everything",
    "someone", "anyone", "everyone", "people", "person", "user", "users", "i'm", "i've", "i'd", "i'll", "it's",
    "that's", "like", "likes", "liked", "love", "loves", "loved", "enjoy", "enjoys", "enjoyed", "want", "wants",
    "wanted", "feel", "feels", "felt", "think", "thinks", "thought", "believe", "believes", "believed", "find",
    "finds", "found", "make", "makes", "made", "get", "gets", "got", "go", "goes", "went", "going", "gone", "take",
    "takes", "took", "know", "knows", "knew", "see", "sees", "saw", "say", "says", "said", "tell", "tells", "told",
    "keep", "keeps", "kept", "seem", "seems", "seemed", "try", "tries", "tried", "use", "uses", "used", "need",
    "needs", "needed", "come", "comes", "came", "give", "gives", "gave", "look", "looks", "looked", "help", "helps",
    "helped", "value", "values", "valued", "appreciate", "appreciates", "appreciated", "new", "good", "great",
    "big", "little", "many", "well", "sure", "able", "last", "next", "first", "time", "times", "day", "days",
    "week", "weeks", "month", "months", "year", "years", "today", "tonight", "yesterday", "tomorrow", "may",
    "might", "must", "shall", "via", "per", "etc", "e.g", "i.e", "important", "importance", "positive", "negative",
    "tough", "hard", "moment", "moments", "special", "amazing", "awesome", "happy", "joy", "inspiring", "inspired",
    "motivated", "motivation", "motivating", "passion", "passionate", "rewarding", "difference", "impact", "life",
    "world", "together", "others", "feeling", "feelings", "excited", "exciting", "proud", "grateful", "encourage",
    "encourages", "encouraged", "support", "supports", "supported", "supportive", "best", "better", "fun", "nice",
    "cool", "kind", "stuff", "part",
))
"""Function words, the generic verbs, adjectives and time words every kind of memory uses, and the
evaluative words of feelings and values: none of them is concrete content two memories can share."""

_TOKEN = re.compile(r"[A-Za-z][A-Za-z0-9'’\-]*[A-Za-z0-9]|[A-Za-z]|\d+(?:[.,]\d+)?")
_LEAD = re.compile(r"\s*([A-Za-z][a-z]+(?:-[A-Za-z][a-z]+)?)('s|’s)?\b")
_IMPERATIVES = frozenset((
    "use", "prefer", "write", "run", "avoid", "add", "keep", "make", "put", "check", "follow", "install", "call",
    "set", "try", "remember", "note", "ensure", "create", "update", "delete", "remove", "format", "commit", "push",
    "deploy", "build", "document", "import", "export", "return", "read", "open", "close", "start", "stop", "split",
    "include", "ask", "let", "see", "get", "give", "take", "send", "save", "pin", "test", "lint", "ship", "review",
    "refactor", "rename", "move", "mock", "skip", "treat", "wrap", "log",
))
"""Verbs a coding agent's notes lead with ("Write tests first", "Use pnpm"): never a person's name.
Verbs that are also common names (Mark, Will, Bill, Sue, Pat, Drew) are not listed."""
_NOT_NAMES = frozenset(_STOP | _IMPERATIVES | {"user", "the", "my", "our", "goal", "new", "old", "about",
                                               "after", "before", "when", "while", "since", "during", "every",
                                               "each"})


def _stem(word: str) -> str:
    """A light suffix stripper (photos -> photo, running -> run, dancing/dance -> danc): no dictionary."""
    w = word.lower().replace("’", "'")
    if w.endswith("'s"):
        w = w[:-2]
    for suffix, keep in (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3 and not (suffix == "s" and w.endswith(("ss", "us", "is"))):
            if suffix == "es" and not w[:-2].endswith(("s", "x", "ch", "sh", "o")):
                continue
            w = w[: -len(suffix)] + keep
            if suffix in ("ing", "ed") and len(w) > 3 and w[-1] == w[-2] and w[-1] not in "lsz":
                w = w[:-1]
            break
    return w[:-1] if len(w) > 4 and w.endswith("e") else w


def content_words(text: str, ignore: frozenset[str] = frozenset()) -> set[str]:
    """The stems of a text's content words: no function or generic words, no `ignore` (the person's name)."""
    out = set()
    for tok in _TOKEN.findall(text):
        low = tok.lower().replace("’", "'")
        if low in _STOP or low in ignore or (low.endswith("'s") and low[:-2] in ignore):
            continue
        if len(low) < 2 and not low.isdigit():
            continue
        out.add(_stem(low))
    return out


def person_name(texts: Sequence[str]) -> str:
    """The person as the sources name them: the most frequent leading name, or "User".

    A text's first word counts as a name when it is no function word, generic word or verb form, and
    it recurs (at least twice and in a sixth of the texts); when it also appears inside the texts it
    must be capitalised there or followed by "'s" (lower-case notes: "priya keeps bees"). Sources in
    the first person or saying "User" get "User".
    """
    counts: Counter[str] = Counter()
    # "Idris" and "Ines" are names, "Runs" a verb: a name also owns something ("Ines's friend") or is
    # capitalised mid-sentence somewhere.
    proper = proper_names(texts) | {m.group(1).lower() for t in texts if (m := _LEAD.match(t)) and m.group(2)}
    for t in texts:
        m = _LEAD.match(t)
        if not m:
            continue
        word = m.group(1)
        low = word.lower()
        if low in _NOT_NAMES or low in _VERBISH or low.endswith(("ed", "ing")) or (
                low.endswith("s") and not m.group(2) and low not in proper):
            continue
        counts[low] += 1
    if counts:
        low, n = max(counts.items(), key=lambda kv: (kv[1], kv[0]))
        if n >= 2 and n * 6 >= len(texts):
            return low[:1].upper() + low[1:]
    return "User"


def _canonical(term_sets: list[set[str]]) -> list[set[str]]:
    """Joins stems where one is a prefix of the other (photo, photograph; garden, gardener): 5+ letters."""
    vocab = sorted({t for s in term_sets for t in s}, key=lambda t: (len(t), t))
    mapping: dict[str, str] = {}
    roots: list[str] = []
    for t in vocab:
        root = next((r for r in roots if t.startswith(r)), None) if len(t) >= 5 else None
        mapping[t] = root or t
        if root is None and len(t) >= 5 and not t.isdigit():
            roots.append(t)
    return [{mapping[t] for t in s} for s in term_sets]


# --- evidence: the person's own, still-current facts ------------------------------------------------

RELATIONS = frozenset((
    "friend", "partner", "husband", "wife", "spouse", "boyfriend", "girlfriend", "fiance", "fiancee", "mother",
    "mom", "mum", "father", "dad", "parent", "brother", "sister", "sibling", "son", "daughter", "kid", "child",
    "children", "baby", "family", "cousin", "aunt", "uncle", "grandmother", "grandma", "grandfather", "grandpa",
    "grandparent", "colleague", "coworker", "co-worker", "boss", "manager", "neighbour", "neighbor", "roommate",
    "flatmate", "housemate", "niece", "nephew", "in-law", "classmate", "teammate", "team", "client", "mentor",
))
"""Who a memory may be about instead of the person ("Ines's friend adopted a dog", "his sister ...")."""
_NAME = re.compile(r"[^\W\d_][\w\-]*(?:['’][\w]+)?")
_PLAN = re.compile(
    r"(?i)\b(?:wants? to|would (?:like|love) to|['’]d (?:like|love) to|plans to|planning (?:to|on)|(?:i|we) plan to|"
    r"thinking (?:of|about)|considering|hopes? to|hoping to|is going to|intends? to|someday|one day)\b")


_CALENDAR = frozenset((
    "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday", "january", "february", "march",
    "april", "may", "june", "july", "august", "september", "october", "november", "december", "christmas",
    "easter", "lent", "ramadan",
))


def proper_names(texts: Sequence[str]) -> frozenset[str]:
    """Words the user's texts capitalise in mid-sentence (names of people, pets, places, clubs), lower-cased;
    days, months and holidays aside."""
    out: set[str] = set()
    for t in texts:
        for sentence in re.split(r"[.!?:;]\s+|\s[-–—]\s", t):
            words = _NAME.findall(sentence)
            for w in words[1:]:
                base = re.sub(r"['’]s$", "", w)
                if base[:1].isupper() and not base.isupper() and base.lower() not in _STOP | _CALENDAR:
                    out.add(base.lower())
    return frozenset(out)


_PERSON_VERBS = frozenset(("said", "says", "told", "tells", "thinks", "feels", "felt", "wants", "loves", "asked",
                           "asks", "mentioned", "believes", "hopes", "decided", "suggested", "suggests"))


def people_names(texts: Sequence[str], names: frozenset[str] | None = None) -> frozenset[str]:
    """The proper names that act like people's: they own something ("Esi's bakery") or say, feel and
    want things ("Esi thinks ..."); places, clubs and tools mostly do neither. `names`: the texts'
    `proper_names`, when the caller has them."""
    names = proper_names(texts) if names is None else names
    out: set[str] = set()
    for t in texts:
        words = _NAME.findall(t)
        for k, w in enumerate(words):
            base = re.sub(r"['’]s$", "", w)
            nxt = words[k + 1].lower() if k + 1 < len(words) else ""
            if base.lower() in names and (w != base or nxt in _PERSON_VERBS):
                out.add(base.lower())
    return frozenset(out)


def about_someone_else(text: str, person: str, names: frozenset[str]) -> bool:
    """Whether a memory is another person's fact: its subject is someone else by name ("Lucía is a former
    climber"), or the person's or a pronoun's relation ("Ines's friend adopted a dog", "her brother ...").
    Another subject that the text relates to the person ("Lucía and Dae-hyun ...", "Joost moved into
    Saoirse's flat") and the person's pets and things stay theirs. The others are not evidence: a pattern
    must never give the person someone else's fact.
    """
    words = _NAME.findall(text)
    if not words:
        return False
    first = words[0]
    base = re.sub(r"['’]s$", "", first).lower()
    owner = base == person.lower() or base in ("user", "i", "my", "he", "she", "his", "her", "their", "our", "we")
    if owner or base in ("the", "a", "an"):
        if len(words) > 1 and (first.lower().endswith(("'s", "’s")) or base in ("my", "his", "her", "their", "our")):
            return _stem(words[1].lower()) in RELATIONS or words[1].lower() in RELATIONS
        return False
    if len(words) > 1 and first.lower().endswith(("'s", "’s")) \
            and (_stem(words[1].lower()) in RELATIONS or words[1].lower() in RELATIONS):
        return True  # "Bjorn's manager edits in Emacs": someone's relation, whoever that someone is
    if base in names and base != person.lower():
        # "Joost moved into Saoirse's flat": a fact of the person's own life, told with another subject.
        rest = text[len(first):]
        me = r"I|me|my|us|our|we" if person == "User" else re.escape(person)
        return not re.search(rf"(?i)\b(?:{me})\b", rest)
    return False


def is_plan(text: str) -> bool:
    """A wish or an intention rather than a fact ("is thinking of getting a dog", "wants to run a marathon")."""
    return bool(_PLAN.search(text))


def plans_done(memories: Sequence[Memory], centred: np.ndarray, terms: Sequence[set[str]],
               weights: dict[str, float]) -> set[int]:
    """The plans a later memory reports on: it is no plan, shares the plan's specific words and is close
    (PLAN_DONE_COS, person-centred vectors). "Is considering getting a dog" is no evidence once "has two
    dogs" follows."""
    plans = [i for i, m in enumerate(memories) if is_plan(m.text)]
    done: set[int] = set()
    if not plans:
        return done
    sims = centred[plans] @ centred.T
    for row, i in enumerate(plans):
        specific = {t for t in terms[i] if t in weights}
        for j, m in enumerate(memories):
            if (j != i and m.created_at > memories[i].created_at and not is_plan(m.text)
                    and sims[row, j] >= PLAN_DONE_COS and specific & terms[j]):
                done.add(i)
                break
    return done


PairScore = Callable[[Memory, Memory], float]
"""(later memory, earlier memory) -> the probability that the later restates or replaces the earlier (the
learned judge's same + update, `streams/core/synthesis.py`)."""

RESTATED_OR_REPLACED = 0.5
"""A member the judge reads, more likely than not, as restated or replaced by a later member of its group is no
evidence of its own: the later one is kept. Without it, an update the judge did not dare to apply (too unsure
to act alone) became a "pattern" of its two states ("Editor: Emacs. Editor: Helix.", "got a Galaxy S23 ...
traded in the Galaxy S23"), and a restatement one of a thread repeated."""


def current_members(group: Sequence[int], memories: Sequence[Memory], centred: np.ndarray,
                    later_says: PairScore | None = None) -> list[int]:
    """The group without members a later member restates or updates (SLOT_COS on person-centred
    vectors, or the judge's reading, `RESTATED_OR_REPLACED`): the later one is kept."""
    order = sorted(group, key=lambda i: (memories[i].created_at, memories[i].memory_id))
    keep: list[int] = []
    for k, i in enumerate(order):
        later = order[k + 1:]
        if later and float((centred[later] @ centred[i]).max()) >= SLOT_COS:
            continue
        if later_says is not None and any(later_says(memories[j], memories[i]) >= RESTATED_OR_REPLACED
                                          for j in later):
            continue
        keep.append(i)
    return keep


# --- themes -------------------------------------------------------------------------------------


def _unit(a: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(a, axis=-1, keepdims=True)
    return np.asarray(a / np.where(norms == 0, 1.0, norms), dtype=np.float32)


def _vectors(memories: Sequence[Memory], embed: Embed) -> np.ndarray:
    """The memories' stored vectors; only those without one are embedded (one batch)."""
    missing = [m.text for m in memories if m.vector is None]
    fresh = iter(np.asarray(embed(missing), dtype=np.float32)) if missing else iter(())
    rows = [np.asarray(m.vector, dtype=np.float32) if m.vector is not None else next(fresh) for m in memories]
    return _unit(np.stack(rows))


def min_theme_size(n: int) -> int:
    """Members a theme needs: chance groups of 3 are common among many unrelated memories."""
    return max(MIN_THEME_SIZE, min(MAX_MIN_SIZE, round(n / SIZE_PER_THEME)))


def term_weights(term_sets: Sequence[set[str]]) -> dict[str, float]:
    """How specific each shared content word is for this user, in (0, 1]: rarer weighs more.

    Words in one memory only link nothing; words in more than COMMON_DF of the user's memories are
    their background (a partner's name, their job) and link nothing either.
    """
    n = len(term_sets)
    df = Counter(t for s in term_sets for t in s)
    limit = max(BACKGROUND_MIN, COMMON_DF * n)
    return {t: math.log(n / c) / math.log(max(n, 3)) for t, c in df.items() if 2 <= c <= limit}


_hint_cache: dict[tuple[object, ...], tuple[object, np.ndarray]] = {}
_HINT_OWNER = np.array([i for i, k in enumerate(TOPIC_HINTS) for _ in TOPIC_HINTS[k]])


def _embed_key(embed: Embed) -> tuple[object, object]:
    # A bound method is a fresh object on every attribute access; key on its instance and function.
    return (getattr(embed, "__self__", None), getattr(embed, "__func__", embed))


def _embedded(embed: Embed, texts: tuple[str, ...]) -> np.ndarray:
    """Unit embeddings of fixed example texts, computed once per embedding function."""
    key = (*_embed_key(embed), texts)
    hit = _hint_cache.get(key)
    if hit is None:
        hit = (embed, _unit(np.asarray(embed(list(texts)), dtype=np.float32)))
        _hint_cache[key] = hit  # keep `embed` alive so the key's objects are never reused
    return hit[1]


def _hints(embed: Embed) -> np.ndarray:
    """The hint areas' example embeddings (BACKGROUND, in TOPIC_HINTS order)."""
    return _embedded(embed, BACKGROUND)


def concrete(vectors: np.ndarray, embed: Embed) -> np.ndarray:
    """(n,) bool: the memory's nearest example is an everyday area's, not a NOT_EVIDENCE kind's (profile, outlook)."""
    return np.asarray(not_evidence_lean(vectors, embed) < NOT_EVIDENCE_MARGIN)


def not_evidence_lean(vectors: np.ndarray, embed: Embed) -> np.ndarray:
    """(n,) how much nearer each memory's nearest NOT_EVIDENCE example is than its nearest area example."""
    topic = (vectors @ _hints(embed).T).max(axis=1)
    other = (vectors @ _embedded(embed, _NOT_EVIDENCE_TEXTS).T).max(axis=1)
    return np.asarray(other - topic, dtype=np.float64)


def topic_profiles(vectors: np.ndarray, embed: Embed) -> np.ndarray:
    """Unit-length softmax over the hint areas of each memory's mean cosine to the area's examples."""
    sims = vectors @ _hints(embed).T
    counts = np.bincount(_HINT_OWNER, minlength=len(TOPIC_HINTS))
    sums = np.zeros((len(vectors), len(TOPIC_HINTS)), dtype=np.float64)
    np.add.at(sums.T, _HINT_OWNER, sims.T)
    scores = sums / counts
    weights = np.exp((scores - scores.max(axis=1, keepdims=True)) / TEMPERATURE)
    return _unit(weights / weights.sum(axis=1, keepdims=True))


def content_affinity(vectors: np.ndarray, term_sets: Sequence[set[str]], centre: np.ndarray) -> np.ndarray:
    """(n, n) what two memories have in common themselves: centred embedding cosine plus LEX_WEIGHT *
    their shared specific words (capped at 1).

    Centring on generic memory sentences removes what every memory sentence shares; then the user's
    pair scores are shifted so their median pair scores like anyone's unrelated pair (PAIR_BASE): what
    all of one person's memories share (their name, their way of speaking) links nothing.
    """
    n = len(vectors)
    centred = _unit(vectors - centre)
    sem = np.asarray(centred @ centred.T, dtype=np.float64)
    if n > 2:
        sem -= max(0.0, float(np.median(sem[np.triu_indices(n, 1)])) - PAIR_BASE)
    weights = term_weights(term_sets)
    lex = np.zeros((n, n), dtype=np.float64)
    holders: dict[str, list[int]] = {}
    for i, s in enumerate(term_sets):
        for t in s:
            if t in weights:
                holders.setdefault(t, []).append(i)
    for t, idx in holders.items():
        lex[np.ix_(idx, idx)] += weights[t]
    return sem + LEX_WEIGHT * np.minimum(lex, 1.0)


def cut_threshold(n: int) -> float:
    """Minimum mean affinity of a group, stricter as the user has more memories (more chance groups)."""
    return min(CUT_MAX, CUT_BASE + CUT_SLOPE * max(0.0, math.log2(max(n, 1) / CUT_PIVOT)))


def _clusters(aff: np.ndarray, threshold: float) -> list[list[int]]:
    n = len(aff)
    if n < 2:
        return [list(range(n))]
    dist = np.clip(1.0 - aff, 0.0, 2.0)
    dist = (dist + dist.T) / 2
    np.fill_diagonal(dist, 0.0)
    labels = fcluster(linkage(squareform(dist, checks=False), method="average"), t=1.0 - threshold,
                      criterion="distance")
    groups: dict[int, list[int]] = {}
    for i, lab in enumerate(labels):
        groups.setdefault(int(lab), []).append(i)
    return list(groups.values())


def dense_core(group: Sequence[int], linked: np.ndarray, aff: np.ndarray) -> list[int]:
    """Drops the least connected member until each is linked to DENSITY of the others: no chains."""
    g = list(group)
    while len(g) > 2:
        sub = aff[np.ix_(g, g)]
        links = linked[np.ix_(g, g)].sum(axis=1) - 1
        worst = min(range(len(g)), key=lambda i: (links[i], sub[i].sum(), g[i]))
        if links[worst] >= DENSITY * (len(g) - 1):
            break
        g.pop(worst)
    return g


def trim_strays(group: Sequence[int], direct: np.ndarray) -> list[int]:
    """Drops members whose own content is far from the rest of the group (a stray joined through one
    neighbour or the topic area): each member's mean content affinity to the others must reach
    STRAY_FRAC of the group's median member and STRAY_MIN."""
    g = list(group)
    while len(g) > 2:
        sub = direct[np.ix_(g, g)]
        own = (sub.sum(axis=1) - np.diag(sub)) / (len(g) - 1)
        worst = int(np.argmin(own))
        if own[worst] >= max(STRAY_MIN, STRAY_FRAC * float(np.median(own))):
            break
        g.pop(worst)
    return g


def shared_content(term_sets: Sequence[set[str]], weights: dict[str, float]) -> list[tuple[str, int]]:
    """The specific content words the members share, with how many members say each, most shared first."""
    counts = Counter(t for s in term_sets for t in s if t in weights)
    return sorted(((t, c) for t, c in counts.items() if c >= 2), key=lambda tc: (-tc[1], -weights[tc[0]], tc[0]))


def shares_content(group: Sequence[int], shared: Sequence[tuple[str, int]], direct: np.ndarray) -> bool:
    """Whether a group's members share concrete content, not only a topic area.

    Either one specific content word (an entity, activity, object) recurs in SHARED_MIN of them and
    their own content is at least loosely related (COHESION_WITH_WORD), or their own content is close
    on average (COHESION_MIN) where the wording differs ("prime lens", "RAW files in Lightroom").
    """
    k = len(group)
    sub = direct[np.ix_(group, group)]
    cohesion = float((sub.sum() - np.trace(sub)) / (k * (k - 1)))
    top = shared[0][1] if shared else 0
    word = top >= max(2, math.ceil(SHARED_MIN * k))
    return cohesion >= COHESION_MIN or (word and cohesion >= COHESION_WITH_WORD)


def _mean_cross(a: Sequence[int], b: Sequence[int], direct: np.ndarray) -> float:
    if a is b:
        sub = direct[np.ix_(a, a)]
        return float((sub.sum() - np.trace(sub)) / max(1, len(a) * (len(a) - 1)))
    return float(direct[np.ix_(a, b)].mean())


def drop_overlapping(found: list[tuple[list[int], list[tuple[str, int]]]],
                     direct: np.ndarray) -> list[tuple[list[int], list[tuple[str, int]]]]:
    """Keeps one theme per thing: a theme whose members are, on average, nearly as close to a larger kept
    theme's members (OVERLAP_FRAC of its own cohesion) is the same pursuit seen twice and is dropped."""
    kept: list[tuple[list[int], list[tuple[str, int]]]] = []
    for g, shared in found:  # largest first
        own = _mean_cross(g, g, direct)
        if any(_mean_cross(g, k, direct) >= OVERLAP_FRAC * own for k, _ in kept):
            continue
        kept.append((g, shared))
    return kept


def distinct_evidence(vectors: np.ndarray) -> int:
    """How many separate things a group says: members joined by restatement-close pairs count once."""
    n_parts, _ = connected_components(csr_matrix(vectors @ vectors.T >= RESTATEMENT_COS), directed=False)
    return int(n_parts)


def own_current(mems: Sequence[Memory], vectors: np.ndarray, person: str, names: frozenset[str]) -> list[int]:
    """Indexes of the memories that can be a pattern's evidence: no plan a later memory reports done, no
    fact about someone else, none a later memory may have replaced (`maybe_replaced`). (Superseded and
    merged memories never reach synthesis: `eligible`.)"""
    terms = _canonical([content_words(m.text, frozenset({person.lower(), "user"})) for m in mems])
    done = plans_done(mems, _unit(vectors - vectors.mean(axis=0)), terms, term_weights(terms))
    doubtful = maybe_replaced(mems)
    return [i for i, m in enumerate(mems) if i not in done and m.memory_id not in doubtful
            and not about_someone_else(m.text, person, names)]


def maybe_replaced(mems: Sequence[Memory]) -> set[str]:
    """Memories a later one may have replaced: the targets of an open review item proposing a supersede, or of
    a conflict (an update due on a pinned memory). The judge left them current because it was not sure
    enough to act; a pattern built on them stated the old value as current beside the new ("Editor: Emacs
    ... Editor: Helix"). Not evidence until a person decides (a dismissed item is undone, and counts no more)."""
    out: set[str] = set()
    for m in mems:
        undone = m.undone_decisions()
        for item in m.conflicts:
            if item.get("decision_id") in undone or item.get("review", "supersede") != "supersede":
                continue
            out.update(str(x) for x in item.get("with") or [])
    return out


def _one_user(mems: Sequence[Memory], caller: str) -> tuple[str, str]:
    """(user_id, the person's name as the texts give it); a mix of users is a caller's bug, never grouped."""
    users = {m.user_id for m in mems}
    if len(users) != 1:
        raise ValueError(f"{caller} takes one user's memories, got {sorted(users)}")
    return users.pop(), person_name([m.text for m in mems])


ReadThemes = Callable[[Sequence[tuple[str, str]]], "Sequence[ReadTheme] | None"]
"""A reader of one person's whole record: (created_at, text) oldest first -> themes, or None (group offline).
`agents.theme_reader.LLMThemeReader` is one."""


def shown_to_reader(user_memories: Sequence[Memory]) -> list[Memory]:
    """What a reader is shown of a user's evidence: oldest first, at most MAX_LINES (the most recent)."""
    return sorted(user_memories, key=lambda m: (m.created_at, m.memory_id))[-MAX_LINES:]


def reading_digest(user_memories: Sequence[Memory], reader_id: str = "") -> str:
    """A digest of what a reader (`reader_id`: its model and prompt) would be shown: a run whose digest equals
    the last reading's has nothing new to read, and asking again would only let the model's variance reword
    or retire the person's patterns."""
    h = hashlib.sha1(reader_id.encode())
    for m in shown_to_reader(user_memories):
        h.update(f"{m.memory_id}\x1f{m.created_at}\x1f{m.text}\x1e".encode())
    return h.hexdigest()[:16]


def read_themes(user_memories: Sequence[Memory], embed: Embed, reader: ReadThemes) -> list[Theme] | None:
    """Themes a reader (an LLM) groups from one user's evidence; None when it gives no usable answer (the
    caller then groups offline).

    The reader sees the eligible memories (current: superseded and merged ones never reach synthesis),
    oldest first with their month, at most MAX_LINES (the most recent), and its prompt carries the evidence
    rules (no replaced fact, no plan a later line reports done, no one else's fact). The offline heuristics
    for those rules (`own_current`) are not applied first: on the corpus's calibration split they hid 86 of
    the 668 members careful readers used (the person's own business or project named as the subject, a
    direction's first step), and the reader applies the rules better from the whole record. Each theme it
    names must have MIN_THEME_SIZE distinct pieces of evidence (restatements count once); its sentence is
    the pattern's text. Every run reads the whole record afresh; the caller keeps the ids of patterns
    whose evidence a theme shares (`match_existing`) and retires those the reader no longer names.
    """
    mems = sorted(user_memories, key=lambda m: (m.created_at, m.memory_id))
    if len(mems) < MIN_THEME_SIZE:
        return []
    user_id, person = _one_user(mems, "read_themes")
    shown = shown_to_reader(mems)
    answer = reader([(m.created_at, m.text) for m in shown])
    if answer is None:
        return None
    vectors = _vectors(shown, embed)
    ignore = frozenset({person.lower(), "user"})
    terms = _canonical([content_words(m.text, ignore) for m in shown])
    weights = term_weights(terms)
    themes: list[Theme] = []
    keys: set[str] = set()
    kept: list[set[int]] = []
    # In member order, not the reply's: the same themes listed in another order keep their anchors.
    for read in sorted(answer, key=lambda r: sorted(set(r.members))):
        g = sorted(set(read.members))
        if distinct_evidence(vectors[g]) < MIN_THEME_SIZE:
            continue  # one fact said several times is a restatement, not a pattern
        if any(len(set(g) ^ k) <= 1 for k in kept):
            continue  # the same theme given twice (the same members, give or take one)
        kept.append(set(g))
        members = [shown[i] for i in g]  # oldest first
        # Its identity: the earliest member no other theme of this run already took (themes may share one).
        first = next((m for m in members if "theme:" + m.memory_id not in keys), None)
        if first is None:
            continue  # every member already anchors another theme
        key = "theme:" + first.memory_id
        keys.add(key)
        shared = shared_content([terms[i] for i in g], weights)
        text = read.text
        if not traceable(text, shown, person):
            # A name or number the record does not hold (another person's fact, or an invented one): the theme
            # stays, worded from its members as offline, or goes when they word no pattern.
            text = pattern_text(person, [m.text for m in members], [t for t, _ in shared],
                                [m.created_at for m in members], min_details=MIN_DETAILS)
            if not text:
                continue
        themes.append(_theme(user_id, person, key, members, ", ".join(t for t, _ in shared[:4]), text))
    if answer and not themes:
        return None  # it named themes and none holds (restatements only): no usable answer, group offline
    return themes


def _vocabulary(record: Sequence[Memory], person: str) -> tuple[set[str], set[str]]:
    """(the words and names, the numbers) a person's record holds, with the years and months it was said in
    (a month's name is a time word, never a name: `text_features._names`)."""
    words = set(tf.words(person)) | {"user"}
    numbers: set[str] = set()
    for m in record:
        words |= set(tf.words(m.text)) | set(tf._names(m.text))
        numbers |= set(tf.numbers(m.text))
        year, month = m.created_at[:4], m.created_at[5:7]
        if month.isdigit() and 1 <= int(month) <= 12:
            numbers |= {year, str(int(month))}
    return words, numbers


def _known(token: str, words: set[str]) -> bool:
    """A name of the sentence the record holds: as it is, without a possessive, each part of a hyphenated one,
    or sharing all but its last letters with a word of the record ("Ghanaian" / "Ghana", "1920s" / "1920")."""
    token = token.removesuffix("'s").removesuffix("s'")
    if token in words or not token:
        return True
    if "-" in token:
        return all(_known(part, words) for part in token.split("-") if part)
    stem = token[:max(4, len(token) - 4)]
    return len(token) >= 5 and any(w.startswith(stem) and len(w) >= 4 for w in words)


def traceable(text: str, record: Sequence[Memory], person: str) -> bool:
    """Whether every name and number a reader's sentence states is in the person's record it was shown (or is
    the person, or a year or month a line was said in). The sentence is the pattern's text, and a reader's
    theme over four of a person's lines was stored saying another user's PIN and address (a synthesis audit):
    a theme whose sentence names what the record does not hold is worded from its members instead, never
    stored with sources that seem to back it. Names are matched loosely (possessives, hyphens, "Ghanaian" for
    "Ghana"), numbers exactly."""
    words, numbers = _vocabulary(record, person)
    return all(_known(t, words) for t in tf._names(text) if not any(ch.isdigit() for ch in t)) \
        and all(n in numbers or n in words for n in tf.numbers(text))


def find_themes(user_memories: Sequence[Memory], embed: Embed, later_says: PairScore | None = None) -> list[Theme]:
    """Group one user's eligible memories into themes and write one pattern text per theme.

    The caller passes memories already filtered by `eligible` (and gated by `is_due`). A group is kept
    only when it is dense (every member linked to most others), large enough in distinct evidence, and
    its members share at least one specific content word; `later_says` (the judge) drops the members a later
    one restates or replaces (`current_members`). Extra embeddings: only memories without a vector.
    """
    mems = sorted(user_memories, key=lambda m: m.memory_id)
    if len(mems) < MIN_THEME_SIZE:
        return []
    user_id, person = _one_user(mems, "find_themes")
    n_known = len(mems)  # chance groups grow with everything known, profile facts included
    vectors_all = _vectors(mems, embed)
    lean_all = not_evidence_lean(vectors_all, embed)
    ignore = frozenset({person.lower(), "user"})
    names = proper_names([m.text for m in mems])
    people = people_names([m.text for m in mems], names)
    own = own_current(mems, vectors_all, person, names)
    keep = [i for i in own if lean_all[i] < NOT_EVIDENCE_MARGIN]
    mems = [mems[i] for i in keep]
    lean = lean_all[keep]
    if len(mems) < MIN_THEME_SIZE:
        return []
    terms = _canonical([content_words(m.text, ignore) for m in mems])
    weights = term_weights(terms)
    vectors = vectors_all[keep]  # unit rows already: no second embedding of memories without a vector
    centred = _unit(vectors - vectors.mean(axis=0))
    direct = content_affinity(vectors, terms, _hints(embed).mean(axis=0))
    profiles = topic_profiles(vectors, embed)
    aff = TOPIC_WEIGHT * (profiles @ profiles.T) + (1.0 - TOPIC_WEIGHT) * direct
    linked = (aff >= LINK_MIN) & (direct >= DIRECT_MIN)
    np.fill_diagonal(linked, True)
    need = min_theme_size(n_known)
    found: list[tuple[list[int], list[tuple[str, int]]]] = []
    for cluster in _clusters(aff, cut_threshold(n_known)):
        g = sorted(current_members(trim_strays(dense_core(cluster, linked, aff), direct), mems, centred, later_says))
        if len(g) < need or distinct_evidence(vectors[g]) < need:
            continue
        shared = shared_content([terms[i] for i in g], weights)
        if not shares_content(g, shared, direct):
            continue
        if float(np.median(lean[g])) > GROUP_LEAN:
            continue  # the typical member is a feeling, a profile fact or a reply to someone: no pursuit
        found.append((g, shared))
    found.sort(key=lambda gs: (-len(gs[0]), mems[gs[0][0]].memory_id))
    found = drop_overlapping(found, direct)
    themes: list[Theme] = []
    for g, shared in found:
        members = [mems[i] for i in g]
        sub = aff[np.ix_(g, g)]
        order = np.argsort(-sub.sum(axis=1), kind="stable")
        typical = [members[i] for i in order]
        text = pattern_text(person, [m.text for m in typical], [t for t, _ in shared],
                            [m.created_at for m in typical], people, min_details=MIN_DETAILS)
        if not text:
            continue  # one detail under a thread shows no pattern
        # The earliest evidence stays first as the theme grows (new evidence comes later).
        key = "theme:" + min(members, key=lambda m: (m.created_at, m.memory_id)).memory_id
        themes.append(_theme(user_id, person, key, typical, ", ".join(t for t, _ in shared[:4]), text))
    return themes


def _theme(user_id: str, person: str, key: str, members: Sequence[Memory], label: str, text: str) -> Theme:
    """A theme of `members` (in the order a writer reads them: most typical, or oldest, first)."""
    return Theme(user_id=user_id, memory_ids=tuple(sorted(m.memory_id for m in members)), label=label, text=text,
                 pattern_id=pattern_id(user_id, key), key=key, typical=tuple(m.text for m in members),
                 person=person, dates=tuple(m.created_at for m in members))


# --- wording ------------------------------------------------------------------------------------

_PAST = frozenset((
    "ate", "began", "bought", "brought", "built", "came", "caught", "chose", "cut", "did", "drank", "drew", "drove",
    "fell", "felt", "flew", "forgot", "found", "gave", "got", "grew", "had", "heard", "held", "hit", "hung", "kept",
    "knew", "led", "left", "lent", "let", "lost", "made", "meant", "met", "paid", "put", "quit", "ran", "rang",
    "read", "rode", "said", "sang", "sat", "saw", "sent", "set", "shot", "slept", "sold", "spent", "spoke", "stood",
    "swam", "taught", "thought", "threw", "told", "took", "understood", "was", "went", "were", "woke", "won",
    "wore", "wrote",
))
_VERBISH = _PAST | {"is", "has", "does", "can", "will", "would", "should", "must", "cannot", "can't",
                    "doesn't", "isn't", "hasn't", "won't", "never", "often", "usually", "always", "still"}
_NOT_VERBS = frozenset({"this", "its", "his", "hers", "ours", "yours", "theirs", "was", "has", "does", "as", "yes",
                        "thus", "plus", "less", "unless", "always", "perhaps", "sometimes", "news", "series"})
_ADVERBS = "never|always|often|usually|also|still|really|just|sometimes|rarely"
_ADVERB_SET = frozenset(_ADVERBS.split("|"))
_THIRD = {"am": "is", "'m": "is", "have": "has", "'ve": "has", "do": "does", "go": "goes", "don't": "doesn't",
          "haven't": "hasn't", "am not": "is not"}
_BOUNDARY = re.compile(
    r"(?:,|;|:|\s[-–—]|\s\(|\s(?:because|since|which|who|whom|while|but|so that|in hopes?|in order to|"
    r"although|though|thanks to|as it|as they|as she|as he|whereas))\s")
_AND = re.compile(r"\s(?:and|as well as)\s")


def _third_person(verb: str) -> str:
    """The verb after "I" as it reads after the person's name (keep -> keeps, have -> has, went -> went)."""
    v = verb.lower()
    if v in _THIRD:
        return _THIRD[v]
    if v in _VERBISH or v.endswith(("ed", "n't")):
        return v
    if v.endswith(("s", "x", "ch", "sh", "o", "z")):
        return v + "es"
    if len(v) > 2 and v.endswith("y") and v[-2] not in "aeiou":
        return v[:-1] + "ies"
    return v + "s"


_TURN = re.compile(
    r"(?i)\b(?:but|although|though|whereas|yet|despite|however|until|eventually|finally|became|become|"
    r"came true|turned out|ended up|won|instead|no longer|anymore|now)\b")
"""Words that turn or settle what came before ("trailing in the fourth quarter, but they won"): a cut
that leaves them out would mislead, so such a clause is not shortened but left out."""
_STALE = re.compile(
    r"(?i)\s*\b(?:recently|just|currently|lately|the other day|yesterday|today|tonight|"
    r"(?:last|this) (?:week|weekend|night|month|year|monday|tuesday|wednesday|thursday|friday|saturday|sunday))\b,?")
"""Time words that were true when said and go stale in a summary; each detail carries its month instead."""


def _shorten(clause: str) -> str | None:
    """The clause up to its first boundary (after 3 words); None when still longer than CLAUSE_WORDS words,
    or when the part cut away turns or settles it (`_TURN`)."""
    whole = clause
    words = clause.split()
    for pattern in (_BOUNDARY, _AND):
        if len(words) <= CLAUSE_WORDS and pattern is _AND:
            break
        for m in pattern.finditer(clause):
            if len(clause[: m.start()].split()) >= 3:
                clause = clause[: m.start()]
                break
        words = clause.split()
    if _TURN.search(whole[len(clause):]):
        return None
    return clause.strip() if len(words) <= CLAUSE_WORDS else None


def clause_of(text: str, person: str) -> tuple[str, str] | None:
    """A member as ("vp", verb phrase of the person) or ("s", statement with its own subject), shortened.

    "Priya runs a bakery", "User runs", "I run" and a bare "Runs" all give the verb phrase "runs ...";
    "Priya's goal is ...", "My goal is ..." and other subjects stay statements. None when too long to
    shorten without cutting a clause in the middle.
    """
    t = " ".join(_STALE.sub("", text).split()).rstrip(".!?;:, ")
    t = re.sub(r"\bmy\b", "their", t) if not re.match(r"(?i)my\b", t) else t
    name = re.escape(person)
    if m := re.match(rf"(?i)(?:the user|user|{name}|she|he)\s+(?!'s)(.+)$", t):
        kind, body = "vp", m.group(1)
    elif m := re.match(r"(?i)i(?:'m| am)\s+(.+)$", t):
        kind, body = "vp", "is " + m.group(1)
    elif m := re.match(r"(?i)i(?:'ve)\s+(.+)$", t):
        kind, body = "vp", "has " + m.group(1)
    elif m := re.match(rf"(?i)i\s+({_ADVERBS})\s+(\S+)(.*)$", t):
        kind, body = "vp", f"{m.group(1).lower()} {_third_person(m.group(2))}{m.group(3)}"
    elif m := re.match(r"(?i)i\s+(\S+)(.*)$", t):
        kind, body = "vp", _third_person(m.group(1)) + m.group(2)
    elif m := re.match(rf"(?i)(?:the user's|user's|{name}'s|{name}’s|my)\s+(.+)$", t):
        kind, body = "s", f"{person}'s " + m.group(1)
    else:
        first = t.split()[0] if t.split() else ""
        low = first.lower()
        verbish = low in _VERBISH or low.endswith("ed") or (
            low.endswith("s") and not low.endswith(("ss", "us", "is")) and low not in _NOT_VERBS)
        if first[:1].isupper() and not first.isupper() and (verbish or low in _STOP or low in _NOT_NAMES):
            t = low + t[len(first):]
        kind, body = ("vp" if verbish else "s"), t
    short = _shorten(body)
    return (kind, short) if short else None


def _words(s: str) -> int:
    return len(s.split())


_HABIT = re.compile(
    r"(?i)\b(?:every|each (?:day|week|month|morning|evening|weekend)|daily|weekly|monthly|twice|"
    r"\w+ times a (?:week|month|day)|usually|regularly|often|most (?:days|mornings|evenings|weekends)|"
    r"on (?:mondays|tuesdays|wednesdays|thursdays|fridays|saturdays|sundays|weekends))\b")
_FIRST_PERSON = re.compile(r"(?i)\b(?:i|me|my|mine|we|us|our|i'm|i've|i'd|i'll)\b")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _month(created_at: str) -> str:
    """ "2025-06-20T..." -> "Jun 2025" ("" when the date does not parse)."""
    m = re.match(r"(\d{4})-(\d{2})", created_at)
    return f"{_MONTHS[int(m.group(2)) - 1]} {m.group(1)}" if m and 1 <= int(m.group(2)) <= 12 else ""


_NOT_THREADS = frozenset((
    "prefer", "like", "love", "want", "use", "said", "say", "think", "feel", "felt", "start", "started", "finish",
    "make", "made", "get", "got", "go", "went", "new", "now", "still", "time", "first", "last", "next", "year",
    "month", "week", "day", "today", "thing", "lot", "took", "take", "tri", "ask", "asked", "told", "tell",
    "asleep", "awake", "fall", "way", "place", "people", "part", "buy", "bought",
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec", "january",
    "february", "march", "april", "june", "july", "august", "september", "october", "november", "december",
    "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday", "weekend",
    "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve", "twenty",
    "hundred", "thousand", "dozen", "half", "couple", "several", "miss", "hate", "need", "hope", "wish", "know",
))
"""Shared words too general to name a thread on their own (verbs of saying, liking and missing, time and
number words: "Seun mentioned three several times", "kept coming back to missing")."""


def _gerund(verb: str) -> str:
    """The -ing form of a verb as a subject says it ("runs" -> "running", "bakes" -> "baking")."""
    v = verb.lower()
    if v.endswith("ing"):
        return v
    if v.endswith("ed") and len(v) > 4:
        v = v[:-2] if not v.endswith("ied") else v[:-3] + "y"
        return v + "ing"
    if v.endswith(("ches", "shes", "sses", "xes")):
        v = v[:-2]
    elif v.endswith("ies"):
        v = v[:-3] + "y"
    elif v.endswith("s") and not v.endswith("ss"):
        v = v[:-1]
    if v.endswith("ie"):
        return v[:-2] + "ying"
    if v.endswith("e") and not v.endswith(("ee", "ye", "oe")):
        return v[:-1] + "ing"
    if re.fullmatch(r"[^aeiou]*[aeiou][^aeiouwxy]", v):
        return v + v[-1] + "ing"
    return v + "ing"


def _note_verb(word: str) -> bool:
    """Whether a note's first word reads as its verb ("Swims Tue + Thu", "Cooked jollof"), not as a noun that
    opens it ("Asthma since age 7", "Deployment uses a Helm chart", "Service exposes gRPC": named "asthmaing",
    "deploymenting", "servicing" before)."""
    w = word.lower()
    if w.endswith("ed"):
        return True
    base = w[:-1] if w.endswith("s") and not w.endswith(("ss", "us", "is", "ics")) else ""
    # A plural noun opens a note as often as a verb does ("Deployments use ...", "Meetings run long").
    return bool(base) and not base.endswith(_NOUN_ENDINGS)


_NOUN_ENDINGS = ("ment", "tion", "sion", "ity", "ance", "ence", "ing", "ness", "ship", "ism", "ist", "er", "or",
                 "ete", "ure", "age")


def thread_phrase(texts: Sequence[str], shared: Sequence[str], person: str, phrases: bool = True) -> str:
    """The members' shared thread in their own words: the most shared specific word as they write it, or
    the two-word phrase around it that two or more members use ("book club", "Rennend Lombok"); a verb
    right after the person ("Ana runs ...") is named as an activity ("running"). "" for none."""
    subjects = {person.lower(), "user", "i", "he", "she", "they", "we"}
    before_verb = subjects | _ADVERB_SET
    for term in shared:
        if term.isdigit() or len(term) < 3 or term == person.lower() or term in _NOT_THREADS:
            continue
        singles: Counter[str] = Counter()
        pairs: Counter[str] = Counter()
        verbs = 0
        for text in texts:
            raw = _TOKEN.findall(text)
            toks = [re.sub(r"['’]s$", "", t) for t in raw]
            for k, tok in enumerate(toks):
                if not _stem(tok).startswith(term):
                    continue
                word = tok if k and tok[:1].isupper() else tok.lower()
                singles[word] += 1
                if _reads_as_verb(raw, k, before_verb) and not word.endswith("ing"):
                    verbs += 1
                for a, b in ((toks[k - 1] if k else "", word), (word, toks[k + 1] if k + 1 < len(toks) else "")):
                    other = a if b == word else b
                    if other and other.lower() not in _STOP and not other.isdigit() and other.lower() not in subjects:
                        pairs[f"{a if a is word or a[:1].isupper() and k > 1 else a.lower()} "
                              f"{b if b is word or b[:1].isupper() else b.lower()}"] += 1
                break
        if not singles:
            continue
        pair, n_pair = max(pairs.items(), key=lambda kv: (kv[1], kv[0]), default=("", 0))
        single, n_single = max(singles.items(), key=lambda kv: (kv[1], kv[0]))
        if verbs * 2 >= n_single:
            gerund = next((w for w in singles if w.endswith("ing")), _gerund(single))
            return gerund if gerund.lower() not in _NOT_THREADS else ""
        phrase = pair if phrases and n_pair >= 2 and 2 * n_pair >= n_single else single
        if phrase.lower() in _NOT_THREADS:
            continue
        plural = phrase + "s"  # "books" when the members also say it so
        said = re.search(rf"\b{re.escape(plural.lower())}\b", " ".join(texts).lower())
        return plural if said and not phrase.endswith(("s", "ing")) else phrase
    return ""


_NOUN_NEXT = frozenset(("is", "are", "was", "were", "has", "have", "will", "can", "'s"))


def _reads_as_verb(raw: Sequence[str], k: int, before_verb: frozenset[str] | set[str]) -> bool:
    """Whether token k is the verb of its sentence ("Ana runs", "Swims Tue + Thu"), not a noun after a
    possessive ("Naledi's Fern staff", named "ferning" before), a name mid-sentence ("is making Fern"), or
    a subject noun before its verb ("User releases are built": "releasing")."""
    tok = raw[k]
    if k + 1 < len(raw) and raw[k + 1].lower() in _NOUN_NEXT:
        return False
    if not k:
        return _note_verb(tok)
    before = raw[k - 1]
    if re.search(r"['’]s$", before) or tok[:1].isupper():
        return False
    return before.lower() in before_verb


def _lead(person: str, thread: str, texts: Sequence[str], dates: Sequence[str]) -> str:
    """The sentence that names what links the members: a regular habit when two or more say how often,
    otherwise how long the person has kept coming back to the thread (the months the details shown span);
    details all from one month claim no recurrence, only how often it came up."""
    months = sorted({d[:7] for d in dates if d})
    owner = "User's" if person == "User" else f"{person}'s"
    span = ""
    if len(months) >= 2:
        (y0, m0), (y1, m1) = (map(int, months[0].split("-")), map(int, months[-1].split("-")))
        n = (y1 - y0) * 12 + m1 - m0 + 1
        span = f"{_month(months[0])} to {_month(months[-1])}"
    if not thread:
        return f"Several of {owner} memories belong together" + (f" ({span})" if span else "")
    topic = thread[:1].upper() + thread[1:]
    last = thread.split()[-1].lower()
    be = "are" if last.endswith("s") and not last.endswith(("ss", "us", "is", "ics")) else "is"
    if sum(1 for t in texts if _HABIT.search(t)) >= 2:
        return f"{topic} {be} a regular part of {owner} routine" + (f" ({span})" if span else "")
    if thread.lower() in RELATIONS or _stem(thread.lower()) in RELATIONS:
        # "Priya's dad comes up again and again": a relation is the person's, not a kind of thing.
        return f"{owner} {thread.lower()} comes up again and again" + (f", from {span}" if span else "")
    if thread[:1].isupper() or last.endswith(("ing", "s", "ball")) or thread in _MASS:
        named = thread
    elif " " in thread or _definite(thread, texts):
        named = f"the {thread}"  # one thing: "the book club", "the shelter" (the members say "the shelter")
    elif _modifier(thread, texts) or not re.search(
            rf"(?i)\b(?:a|an|one|two|three|four|several|many|another|new)\s+{re.escape(thread)}\b", " ".join(texts)):
        named = thread  # "surf lessons": the word qualifies others; or it is never one of several
    else:
        named = _plural(thread)  # a kind: "trips", "cities", where the members name several
    if span:
        return f"{person} has kept coming back to {named} for {n} months, from {span}"
    if months:  # one month: that it recurs over time is not shown, only that it came up more than once
        times = "twice" if len(texts) == 2 else "several times"
        return f"{person} mentioned {named} {times} in {_month(months[0])}"
    return f"{topic} comes up again and again in {owner} memories"


def _modifier(word: str, texts: Sequence[str]) -> bool:
    """Whether the members mostly use the word before another content word ("surf lessons", "surf trip")."""
    after = [m.group(1).lower() for t in texts for m in re.finditer(rf"(?i)\b{re.escape(word)}\b\s*(\w*)", t)]
    return sum(1 for w in after if w and w not in _STOP) * 2 > len(after) > 0


def _definite(noun: str, texts: Sequence[str]) -> bool:
    """Whether the members say "the <noun>" (or "her <noun>") at least as often as "a <noun>" or another word
    before it: one particular thing rather than several."""
    before = Counter(m.group(1).lower() for t in texts
                     for m in re.finditer(rf"(?i)\b(\w+)\s+{re.escape(noun)}\b", t))
    the = sum(before[w] for w in ("the", "his", "her", "their", "my", "our"))
    return the * 2 >= sum(before.values()) > 0


def _plural(noun: str) -> str:
    if noun.endswith(("s", "x", "ch", "sh")):
        return noun + "es"
    if len(noun) > 2 and noun.endswith("y") and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


_MASS = frozenset(("music", "art", "pottery", "football", "tennis", "golf", "chess", "yoga", "photography", "poetry",
                   "politics", "cooking", "baking", "climbing", "travel", "fitness", "work", "school", "church",
                   "theatre", "theater", "dance", "nature", "family", "food", "fashion", "gardening", "volunteering"))
"""Topics said without "the" ("keeps coming back to pottery", not "to the pottery")."""


def pattern_text(person: str, typical_texts: Sequence[str], shared: Sequence[str] = (),
                 dates: Sequence[str] | None = None, names: frozenset[str] | None = None,
                 min_details: int = 1) -> str:
    """A lead sentence naming the members' shared thread, then their own clauses as supporting details,
    oldest first and dated when `dates` (the members' created_at) are given; at most MAX_WORDS words of detail.

    Details carry the thread the lead names (or, when too few do, the group's shared words) and are chosen
    greedily for the content they add, so restatements and near-repeats are left out and the distinct
    details come in. A plan is a detail only when nothing later took it up. Extractive: the
    lead names a word the members share and what their own dates and cues show ("every week"), the details
    are the members' clauses. Clauses about someone else (`names`: the people the user's memories name,
    `people_names`), or left in the first person, are used only when nothing else is left. "" when fewer
    than `min_details` members can be worded: one detail under a thread shows no pattern.
    """
    when = list(dates) if dates is not None else [""] * len(typical_texts)
    shared_set = tuple(shared)
    ignore = frozenset({person.lower(), "user"})
    cands: list[tuple[int, str, str, set[str]]] = []
    for i, text in enumerate(typical_texts):
        c = clause_of(text, person)
        if c and not _FIRST_PERSON.search(c[1]):
            cands.append((i, c[0], c[1], content_words(c[1], ignore)))
    # A clause about someone else ("admires Sam's patience") says little about the person: used only
    # when nothing else is left.
    others = people_names(typical_texts) if names is None else names
    own = [c for c in cands if not _about_other(c[2], person, others)]
    cands = own or cands

    def carries(terms: set[str], stems: tuple[str, ...]) -> bool:
        """Whether a detail says every word of the thread ("book club": both words)."""
        return all(any(t.startswith(x) or x.startswith(t) for t in terms) for x in stems)

    # The thread is the most shared word that at least two details carry; the lead names it, and then
    # every detail carries it (no "hiking" lead over a surfing detail).
    thread, need = "", shared_set
    for term in shared_set:
        for phrases in (True, False):
            phrase = thread_phrase(typical_texts, (term,), person, phrases)
            stems = tuple(content_words(phrase, ignore)) or (term,)
            if phrase and sum(1 for c in cands if carries(c[3], stems)) >= max(2, min_details):
                thread, need = phrase, stems
                break
        if thread:
            break
    # A plan that something later on its thread took up ("plans to take up travel photography", then
    # "joined a travel photography group": two words in common) is history, not a detail to state.
    cands = [c for c in cands if not (is_plan(typical_texts[c[0]]) and any(
        when[o[0]] > when[c[0]] and not is_plan(typical_texts[o[0]]) and len(c[3] & o[3]) >= 2
        for o in cands))]
    covered: set[str] = set()
    chosen: list[tuple[int, str, str, set[str]]] = []
    used = _words(person) + 1
    while True:
        best: tuple[float, int, str, str, set[str]] | None = None
        for rank, (i, kind, clause, terms) in enumerate(cands):
            if any(c[2] == clause for c in chosen) or used + _words(clause) + 3 > MAX_WORDS:
                continue
            if need and not (carries(terms, need) if thread else any(t.startswith(need) for t in terms)):
                continue  # a detail must carry the thread (or, with none, the group's shared content)
            if any(len(terms & c[3]) >= 0.5 * len(terms | c[3]) for c in chosen):
                continue  # one thing said again in other words is no second detail
            new = [t for t in terms if t not in covered]
            score = sum(3.0 if t.startswith(shared_set) else 1.0 for t in new) - 0.5 * rank / max(1, len(cands))
            if new and (best is None or score > best[0]):
                best = (score, i, kind, clause, terms)
        if best is None:
            break
        chosen.append((best[1], best[2], best[3], best[4]))
        covered |= best[4]
        used += _words(best[3]) + 3
    if len(chosen) < min_details:
        return ""
    lead = _lead(person, thread, typical_texts, [when[c[0]] for c in chosen if when[c[0]]])  # spans what it shows
    if not chosen:  # nothing short enough: the most typical member, cut to the word budget
        first = typical_texts[0].split() if typical_texts else []
        return f"{lead}: " + " ".join(first[:MAX_WORDS]).rstrip(".!?;:, ") + "."
    chosen.sort(key=lambda c: (when[c[0]], c[0]))

    def dated(i: int, clause: str) -> str:
        month = _month(when[i])
        return f"{clause} ({month})" if month else clause

    # Strictly oldest first: the person's verb phrases that follow one another share one sentence.
    sentences: list[list[str]] = []
    kinds: list[str] = []
    for i, kind, clause, _terms in chosen:
        if kind == "vp" and kinds and kinds[-1] == "vp":
            sentences[-1].append(dated(i, clause))
        else:
            sentences.append([dated(i, clause)])
            kinds.append(kind)
    parts: list[str] = []
    for kind, items in zip(kinds, sentences, strict=True):
        if kind == "vp":
            listed = items[0] if len(items) == 1 else (
                ", ".join(items[:-1]) + (", and " if len(items) > 2 else " and ") + items[-1])
            parts.append(f"{person} {listed}")
        else:
            parts.append(items[0][0].upper() + items[0][1:])
    details = _DOUBLED.sub(r"\1", ". ".join(parts))
    return f"{lead}. {details[0].upper()}{details[1:]}."


_DOUBLED = re.compile(r"\b(\w+)(?:\s+\1\b)+", re.IGNORECASE)
"""A word said twice in a row ("the the"), as joined or garbled clauses can leave it."""


def _about_other(clause: str, person: str, names: frozenset[str] = frozenset()) -> bool:
    """Whether a clause names another person's possession or quality ("admires Sam's patience") or another
    named person at all ("suggests Sam try other pets"; `names`: `people_names` of the texts)."""
    for m in re.finditer(r"\b([A-Za-z][\w-]*)(?:'s|’s)\b", clause):
        word = m.group(1)
        if word.lower() != person.lower() and word[:1].isupper():
            return True
    return any(w.lower() in names and w.lower() != person.lower() and w[:1].isupper()
               for w in _NAME.findall(clause)[1:])



# --- identity -----------------------------------------------------------------------------------


def pattern_id(user_id: str, theme_key: str) -> str:
    """Derived from the user and the theme's stable identity (its topic), not from its member set, so
    a re-run writes the same id and a theme that gained evidence updates its pattern in place. A user id
    with "|" in it is joined by NUL, as in schemas/schedules.py `schedule_id` (no two scopes share an id)."""
    sep = "\x00" if "|" in user_id else "|"
    return "p-" + hashlib.sha1(f"{user_id}{sep}{theme_key}".encode()).hexdigest()[:16]


def _overlap(a: set[str], b: set[str]) -> float:
    return len(a & b) / min(len(a), len(b)) if a and b else 0.0


def not_declined(themes: Sequence[Theme], existing_patterns: Sequence[Memory]) -> list[Theme]:
    """The themes a person has not declined: one that shares at least half its evidence with a pattern the
    person deleted is that pattern again (under its id or a new one), and no run brings it back."""
    declined = [set(p.sources) for p in existing_patterns if p.kind == "pattern" and p.status == "deleted"]
    return [t for t in themes if not any(_overlap(set(t.memory_ids), d) >= MATCH_OVERLAP for d in declined)]


def match_existing(themes: Sequence[Theme], existing_patterns: Sequence[Memory]) -> list[Theme]:
    """Reuse the id of an existing pattern that shares at least half its evidence with a theme.

    Covers a theme whose topic label drifted between runs (e.g. a new memory tipped its best domain):
    the evidence, not the label, says it is the same pattern. One existing pattern per theme, best
    overlap first; a theme with no match keeps its topic-derived id.
    """
    candidates = [p for p in existing_patterns if p.kind == "pattern" and p.status == "active"]
    pairs = sorted(
        ((_overlap(set(t.memory_ids), set(p.sources)), ti, pi)
         for ti, t in enumerate(themes) for pi, p in enumerate(candidates)
         if p.user_id == t.user_id),
        key=lambda x: (-x[0], x[1], x[2]),
    )
    out = list(themes)
    taken_t: set[int] = set()
    taken_p: set[int] = set()
    claimed = {t.pattern_id for t in themes}
    for score, ti, pi in pairs:
        if score < MATCH_OVERLAP or ti in taken_t or pi in taken_p:
            continue
        pid = candidates[pi].memory_id
        if pid != out[ti].pattern_id and pid in claimed:
            continue  # another theme of this run owns that id by topic
        taken_t.add(ti)
        taken_p.add(pi)
        out[ti] = replace(out[ti], pattern_id=pid)
    return out


def synthesize(memories: Sequence[Memory], boundary: str | None, embed: Embed,
               existing_patterns: Sequence[Memory] = ()) -> list[Theme]:
    """The whole step for one user: gate, select evidence, find themes, keep ids of known patterns."""
    if gate_count(memories) < MIN_MEMORIES:
        return []
    return match_existing(find_themes(eligible(memories, boundary), embed), existing_patterns)
