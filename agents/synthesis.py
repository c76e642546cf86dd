"""Synthesis: from one user's many small memories, find themes and write one pattern memory per theme.

Pure: no Kafka, no Qdrant. The pipeline reads the user's memories, calls `synthesize` (or the pieces:
`eligible`, `find_themes`, `match_existing`) and stores each `Theme` as a `kind="pattern"` memory whose
`sources` are the theme's evidence.

Why topics, not wording: a theme's memories ("runs 40 km a week", "tracks workouts on a Garmin",
"signed up for a marathon") share a higher-order topic, not words, so plain clustering of sentence
embeddings misses most themes. Each memory is therefore described by how strongly it belongs to each
domain of a broad, generic taxonomy of life and work areas (zero-shot, same embedding model), and
memories are clustered on that topic profile. Most memories belong to no theme, so a group must be
tight and large enough, more so when the user has many memories (more memories, more chance groups).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta

import numpy as np
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components
from scipy.spatial.distance import squareform

from dreamstream.schemas.memory import Memory, parse_time

Embed = Callable[[list[str]], np.ndarray]

MIN_MEMORIES = 20
"""A user with fewer memories gets no synthesis: too little is known to claim a pattern."""
MIN_THEME_SIZE = 3
"""The fewest memories a theme may rest on; users with many memories need more (see `min_theme_size`)."""
MATCH_OVERLAP = 0.5
"""A new theme takes over an existing pattern's id when they share at least this share of evidence."""

TEMPERATURE = 0.05
"""Softmax temperature over domain scores: low enough that a memory's profile is dominated by its
two or three best domains, high enough that a memory between two domains keeps both."""
TOPIC_WEIGHT = 0.6
"""Pair similarity = TOPIC_WEIGHT * topic-profile cosine + the rest * centred embedding cosine: the
profile sees shared topics, the embedding sees shared entities and topics the taxonomy lacks."""
CUT_BASE = 0.2
"""Minimum mean pair similarity within one group (average linkage), for a user with few memories."""
CUT_SLOPE = 0.3
"""How much stricter the cut gets per doubling of the user's eligible memories above CUT_PIVOT."""
CUT_PIVOT = 16
CUT_MAX = 0.5
SIZE_PER_THEME = 5
"""A user with n eligible memories needs themes of about n / SIZE_PER_THEME members (3 to 5)."""
MAX_MIN_SIZE = 5
RESTATEMENT_COS = 0.7
"""Members this close (plain embedding cosine) say one thing twice (a restatement, a repeated event,
one slot's old and new value): they count once towards a theme's size. Distinct memories of one
real theme sit well below (99% of the dev themes' pairs under 0.61)."""
LABEL_MIN_SCORE = 0.16
"""Below this mean score no taxonomy domain describes the group (a topic the taxonomy lacks, e.g.
sailing): the pattern is then worded without a domain, and keyed on its first evidence instead."""
UNNAMED_LABEL = "one recurring topic"

# A broad, generic taxonomy of life and work areas. Each domain has a label (used in the pattern text)
# and a few short example statements in the style of memories; a memory's score for a domain is its
# mean cosine to the examples. Keep it general: it must cover users and topics never seen in tuning.
DOMAINS: dict[str, tuple[str, tuple[str, ...]]] = {
    # body, health, mind
    "fitness": ("fitness and exercise", (
        "User works out regularly at the gym.", "User goes running and trains for races.",
        "User follows a weekly training plan to get fitter.", "User tracks workouts, steps and heart rate.")),
    "sports": ("playing sports", (
        "User plays football in a weekly league.", "User plays tennis and squash with friends.",
        "User swims laps at the pool.", "User climbs at the bouldering gym.")),
    "outdoors": ("hiking and the outdoors", (
        "User goes hiking in the mountains.", "User likes camping and backpacking trips.",
        "User spends weekends outdoors in nature.", "User is into trail walking and kayaking.")),
    "cycling": ("cycling", (
        "User rides a bike for long weekend rides.", "User commutes by bicycle.",
        "User maintains and upgrades their bike.")),
    "nutrition": ("diet and nutrition", (
        "User follows a specific diet.", "User counts calories and protein.",
        "User avoids certain foods for health reasons.", "User takes vitamins and supplements.")),
    "cooking": ("cooking and food", (
        "User loves cooking new recipes at home.", "User bakes bread and cakes.",
        "User meal-preps for the week.", "User enjoys trying restaurants and cuisines.")),
    "medical": ("health conditions and medical care", (
        "User has a chronic health condition.", "User sees a doctor about symptoms.",
        "User takes medication daily.", "User has allergies and medical appointments.")),
    "mental_health": ("mental health and wellbeing", (
        "User is dealing with stress and anxiety.", "User practises meditation and breathing exercises.",
        "User sees a therapist.", "User is working on burnout and work-life balance.")),
    "sleep": ("sleep", (
        "User has trouble sleeping at night.", "User wakes up tired.",
        "User is trying to fix their sleep schedule.", "User tracks their sleep.")),
    "routine": ("daily routine and habits", (
        "User has a fixed daily routine.", "User gets up early every morning.",
        "User plans their day in a set order.", "User is building better daily habits.")),
    "productivity": ("personal productivity and organisation", (
        "User keeps a to-do list and plans the week.", "User uses time blocking and focus sessions.",
        "User organises notes in an app.", "User tries to avoid distractions.")),
    # people
    "parenting": ("parenting and children", (
        "User has a young child.", "User is a new parent looking after a baby.",
        "User helps their kids with school.", "User arranges childcare and daycare.")),
    "family": ("family relationships", (
        "User's parents live in another city.", "User visits their siblings and relatives.",
        "User takes care of an elderly parent.", "User has a big family.")),
    "relationships": ("romantic relationship and partner", (
        "User has a partner they live with.", "User is dating someone new.",
        "User plans date nights with their spouse.")),
    "celebrations": ("weddings and big celebrations", (
        "User is planning their wedding.", "User is organising a big party.",
        "User is booking a venue and guest list for a celebration.")),
    "social": ("friends and social life", (
        "User meets friends every weekend.", "User hosts dinner parties.",
        "User is part of a local club or community group.")),
    "pets": ("pets and animals", (
        "User has a dog.", "User has a cat.", "User takes their pet to the vet.",
        "User is training their puppy.")),
    # home, money, admin
    "home_improvement": ("home improvement and DIY", (
        "User is renovating their house.", "User does DIY repairs at home.",
        "User bought power tools for a home project.", "User is painting and redecorating rooms.")),
    "gardening": ("gardening and plants", (
        "User grows vegetables in the garden.", "User has many house plants.",
        "User takes care of their garden and lawn.")),
    "housing": ("housing and moving home", (
        "User is looking for a new apartment.", "User is moving to a new city.",
        "User is buying a house.", "User deals with their landlord and rent.")),
    "finance": ("personal finance, saving and budgeting", (
        "User is saving money for a big purchase.", "User keeps a strict monthly budget.",
        "User invests in index funds.", "User is paying off debt.")),
    "admin": ("paperwork, bills and admin", (
        "User needs to renew their documents.", "User files taxes and pays bills.",
        "User handles insurance and bank paperwork.")),
    "shopping": ("shopping and purchases", (
        "User is comparing products before buying.", "User bought new clothes.",
        "User looks for deals and discounts.")),
    "cars": ("cars and driving", (
        "User drives a car.", "User takes their car in for service.",
        "User is thinking about buying an electric car.")),
    "commute": ("commuting and transport", (
        "User commutes to work by train.", "User takes the bus every day.",
        "User works from home some days.")),
    # leisure and learning
    "travel": ("travel and trips", (
        "User is planning a trip abroad.", "User books flights and hotels.",
        "User loves exploring new countries.", "User prefers certain seats and airlines.")),
    "languages": ("learning a language", (
        "User is learning a foreign language.", "User practises vocabulary with an app.",
        "User takes language lessons with a tutor.", "User speaks several languages.")),
    "education": ("studying and courses", (
        "User is taking an online course.", "User is studying for an exam.",
        "User is doing a degree part-time.", "User wants to learn a new skill.")),
    "reading": ("books and reading", (
        "User reads a lot of novels.", "User is in a book club.", "User reads before bed.")),
    "writing": ("writing and journaling", (
        "User writes a blog.", "User keeps a journal.", "User is writing a novel.")),
    "music": ("music", (
        "User plays an instrument.", "User listens to a lot of music.", "User goes to concerts.",
        "User takes music lessons.")),
    "photography": ("photography", (
        "User takes photos with a camera.", "User edits photos.",
        "User likes photographing landscapes and people.")),
    "crafts": ("arts and crafts", (
        "User paints and draws.", "User knits and sews.", "User makes pottery.",
        "User does woodworking as a hobby.")),
    "film_tv": ("films and TV", (
        "User is watching a TV series.", "User loves going to the cinema.", "User watches documentaries.")),
    "games": ("games and gaming", (
        "User plays video games.", "User plays board games with friends.", "User collects games.",
        "User likes tabletop and card games.")),
    "style": ("fashion and personal style", (
        "User cares about their clothes and style.", "User has a skincare routine.",
        "User gets their hair done regularly.")),
    "causes": ("volunteering and causes", (
        "User volunteers at a local charity.", "User cares about the environment and sustainability.",
        "User donates to causes.")),
    "faith": ("religion and spirituality", (
        "User goes to church or temple.", "User practises their faith.",
        "User observes religious holidays.")),
    "news": ("news and current affairs", (
        "User follows politics and the news.", "User reads newsletters.", "User avoids social media.")),
    "gadgets": ("gadgets and personal tech", (
        "User uses a smartphone and smartwatch.", "User bought a new laptop.",
        "User likes trying new gadgets and apps.")),
    "home_tech": ("home servers and networking", (
        "User runs servers at home.", "User sets up their home network and router.",
        "User self-hosts services.", "User tinkers with single-board computers.")),
    # work
    "job_search": ("job search and career moves", (
        "User is looking for a new job.", "User is preparing for job interviews.",
        "User is updating their CV.", "User got a job offer.")),
    "career": ("career growth", (
        "User wants a promotion.", "User is thinking about changing careers.",
        "User has a mentor at work.")),
    "management": ("leading a team", (
        "User manages a team of engineers.", "User runs one-on-ones with reports.",
        "User is hiring for their team.")),
    "meetings": ("meetings and workplace communication", (
        "User has too many meetings.", "User prefers async communication at work.",
        "User writes status updates for stakeholders.")),
    "business": ("running a business", (
        "User runs a small business.", "User is launching a startup.",
        "User works as a freelancer with clients.", "User handles sales and marketing.")),
    "research": ("research and academia", (
        "User is writing a research paper.", "User is doing a PhD.", "User analyses experiment results.")),
    "teaching": ("teaching and mentoring", (
        "User teaches a class.", "User mentors junior colleagues.", "User gives talks and workshops.")),
    "design": ("design and user experience", (
        "User designs user interfaces.", "User works on UX research.", "User cares about visual design.")),
    "data": ("data analysis and machine learning", (
        "User analyses data with SQL and notebooks.", "User trains machine learning models.",
        "User builds dashboards and reports.")),
    # software engineering
    "code_style": ("coding conventions and code review", (
        "User follows strict coding conventions.", "User reviews pull requests carefully.",
        "User prefers certain formatting and naming rules.")),
    "testing": ("software testing", (
        "User writes tests for their code.", "User runs the test suite in CI.",
        "User cares about test coverage.")),
    "typing": ("type systems and static analysis", (
        "User uses static types in their code.", "User runs a type checker.", "User avoids untyped code.")),
    "migrations": ("programming languages and migrations", (
        "User is migrating a codebase to a new language.", "User is learning a new programming language.",
        "User upgrades frameworks and library versions.")),
    "frontend": ("frontend and web UI development", (
        "User builds web frontends.", "User works on UI components and styling.",
        "User cares about how the web app renders in browsers.")),
    "backend": ("backend services and APIs", (
        "User builds backend APIs.", "User designs service endpoints.",
        "User works with databases and queries.")),
    "infrastructure": ("cloud infrastructure and deployment", (
        "User deploys services to the cloud.", "User manages servers and containers.",
        "User automates deployments and CI pipelines.")),
    "operations": ("production operations and reliability", (
        "User is on call for production systems.", "User watches dashboards and alerts.",
        "User investigates incidents and outages.")),
    "performance": ("software performance", (
        "User optimises code for speed.", "User profiles slow queries and endpoints.",
        "User measures latency and memory use.")),
    "security": ("software security", (
        "User cares about application security.", "User manages secrets and access control.",
        "User patches vulnerabilities.")),
    "docs": ("documentation and technical writing", (
        "User writes documentation for their code.", "User keeps design documents and READMEs up to date.",
        "User writes technical specs before coding.")),
    "dev_tools": ("developer tools and environment", (
        "User uses a particular code editor.", "User customises their terminal and shell.",
        "User uses git in a particular way.")),
}
DOMAIN_KEYS: tuple[str, ...] = tuple(DOMAINS)


@dataclass(frozen=True)
class Theme:
    """A group of one user's memories that together imply a pattern, and the pattern's text."""

    user_id: str
    memory_ids: tuple[str, ...]
    label: str
    text: str
    pattern_id: str
    key: str = ""
    """The theme's stable identity (its domain), from which `pattern_id` is derived."""
    typical: tuple[str, ...] = ()
    """The members' texts, most typical of the theme first: what a pattern writer words it from."""


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


# --- topic profiles -----------------------------------------------------------------------------

_PROMPTS: tuple[str, ...] = tuple(p for k in DOMAIN_KEYS for p in DOMAINS[k][1])
_PROMPT_OWNER = np.array([i for i, k in enumerate(DOMAIN_KEYS) for _ in DOMAINS[k][1]])
_prompt_cache: dict[tuple[object, object], tuple[object, np.ndarray]] = {}


def _embed_key(embed: Embed) -> tuple[object, object]:
    # A bound method is a fresh object on every attribute access; key on its instance and function.
    return (getattr(embed, "__self__", None), getattr(embed, "__func__", embed))


def _domain_matrix(embed: Embed) -> np.ndarray:
    """The taxonomy's example embeddings, computed once per embedding function (fixed text)."""
    key = _embed_key(embed)
    hit = _prompt_cache.get(key)
    if hit is None:
        vectors = _unit(np.asarray(embed(list(_PROMPTS)), dtype=np.float32))
        hit = (embed, vectors)  # keep `embed` alive so the key's objects are never reused
        _prompt_cache[key] = hit
    return hit[1]


def _unit(a: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(a, axis=-1, keepdims=True)
    return np.asarray(a / np.where(norms == 0, 1.0, norms), dtype=np.float32)


def domain_scores(vectors: np.ndarray, embed: Embed) -> np.ndarray:
    """(n, domains): each memory's mean cosine to each domain's example statements."""
    sims = vectors @ _domain_matrix(embed).T
    counts = np.bincount(_PROMPT_OWNER, minlength=len(DOMAIN_KEYS))
    sums = np.zeros((len(vectors), len(DOMAIN_KEYS)), dtype=np.float64)
    np.add.at(sums.T, _PROMPT_OWNER, sims.T)
    return sums / counts


def topic_profiles(scores: np.ndarray) -> np.ndarray:
    """Unit-length softmax of domain scores: memories on one topic point the same way, whatever words."""
    weights = np.exp((scores - scores.max(axis=1, keepdims=True)) / TEMPERATURE)
    return _unit(weights / weights.sum(axis=1, keepdims=True))


def _vectors(memories: Sequence[Memory], embed: Embed) -> np.ndarray:
    """The memories' stored vectors; only those without one are embedded (one batch)."""
    missing = [m.text for m in memories if m.vector is None]
    fresh = iter(np.asarray(embed(missing), dtype=np.float32)) if missing else iter(())
    rows = [np.asarray(m.vector, dtype=np.float32) if m.vector is not None else next(fresh) for m in memories]
    return _unit(np.stack(rows))


# --- themes -------------------------------------------------------------------------------------


def cut_threshold(n: int) -> float:
    """Minimum mean profile similarity of a group, stricter as the user has more memories."""
    return min(CUT_MAX, CUT_BASE + CUT_SLOPE * max(0.0, math.log2(max(n, 1) / CUT_PIVOT)))


def min_theme_size(n: int) -> int:
    """Members a theme needs: chance groups of 3 are common among many unrelated memories."""
    return max(MIN_THEME_SIZE, min(MAX_MIN_SIZE, round(n / SIZE_PER_THEME)))


def pair_similarity(vectors: np.ndarray, embed: Embed) -> tuple[np.ndarray, np.ndarray]:
    """(n, n) similarity used for grouping, and the (n, domains) scores used to name the groups.

    Embeddings are centred on the mean of the taxonomy examples before the cosine: that removes the
    component every short memory sentence shares, so unrelated memories score near zero.
    """
    scores = domain_scores(vectors, embed)
    profiles = topic_profiles(scores)
    centred = _unit(vectors - _domain_matrix(embed).mean(axis=0))
    sim = TOPIC_WEIGHT * (profiles @ profiles.T) + (1.0 - TOPIC_WEIGHT) * (centred @ centred.T)
    return sim, scores


def _groups(sim: np.ndarray, threshold: float) -> list[list[int]]:
    n = len(sim)
    if n < 2:
        return [list(range(n))]
    dist = np.clip(1.0 - sim, 0.0, 2.0).astype(np.float64)
    dist = (dist + dist.T) / 2
    np.fill_diagonal(dist, 0.0)
    tree = linkage(squareform(dist, checks=False), method="average")
    labels = fcluster(tree, t=1.0 - threshold, criterion="distance")
    groups: dict[int, list[int]] = {}
    for i, lab in enumerate(labels):
        groups.setdefault(int(lab), []).append(i)
    return list(groups.values())


def distinct_evidence(vectors: np.ndarray) -> int:
    """How many separate things a group says: members joined by restatement-close pairs count once."""
    n_parts, _ = connected_components(csr_matrix(vectors @ vectors.T >= RESTATEMENT_COS), directed=False)
    return int(n_parts)


def find_themes(user_memories: Sequence[Memory], embed: Embed) -> list[Theme]:
    """Group one user's eligible memories into themes and write one pattern text per theme.

    The caller passes memories already filtered by `eligible` (and gated by `is_due`). Extra
    embeddings: the taxonomy once per embedding function, and only memories that lack a vector.
    """
    mems = sorted(user_memories, key=lambda m: m.memory_id)
    if len(mems) < MIN_THEME_SIZE:
        return []
    users = {m.user_id for m in mems}
    if len(users) != 1:
        raise ValueError(f"find_themes takes one user's memories, got {sorted(users)}")
    user_id = users.pop()
    vectors = _vectors(mems, embed)
    sim, scores = pair_similarity(vectors, embed)
    n = len(mems)
    need = min_theme_size(n)
    groups = [g for g in _groups(sim, cut_threshold(n)) if len(g) >= need and distinct_evidence(vectors[g]) >= need]
    # Largest, tightest first, so a contested domain key goes to the strongest group.
    groups.sort(key=lambda g: (-len(g), min(mems[i].memory_id for i in g)))
    themes: list[Theme] = []
    used: set[str] = set()
    for g in groups:
        members = [mems[i] for i in g]
        mean_scores = scores[g].mean(axis=0)
        ranking = [DOMAIN_KEYS[d] for d in np.argsort(-mean_scores, kind="stable")
                   if mean_scores[d] >= LABEL_MIN_SCORE and DOMAIN_KEYS[d] not in used]
        if ranking:
            key, label = ranking[0], DOMAINS[ranking[0]][0]
        else:  # the earliest evidence stays first as the theme grows (new evidence comes later)
            key = "topic:" + min(members, key=lambda m: (m.created_at, m.memory_id)).memory_id
            label = UNNAMED_LABEL
        used.add(key)
        centre = _unit(vectors[g].mean(axis=0))
        typical = [members[i] for i in np.argsort(-(vectors[g] @ centre), kind="stable")]
        themes.append(Theme(
            user_id=user_id,
            memory_ids=tuple(sorted(m.memory_id for m in members)),
            label=label,
            text=pattern_text(label, [m.text for m in typical]),
            pattern_id=pattern_id(user_id, key),
            key=key,
            typical=tuple(m.text for m in typical),
        ))
    return themes


_SUBJECT = re.compile(r"^(the user's|the user|user's|user|i'm|i am|i've|i)\b\s*", re.IGNORECASE)


def _gist(text: str, limit: int = 60) -> str:
    """A short example clause from a memory text (subject dropped), for the pattern's 'e.g.' part."""
    t = _SUBJECT.sub("", text.strip()).rstrip(".!? ")
    return t if len(t) <= limit else t[: limit - 1].rsplit(" ", 1)[0] + "…"


def pattern_text(label: str, typical_texts: Sequence[str]) -> str:
    """One concise sentence, more general than any source: the domain, how much evidence, two examples."""
    examples = "; ".join(_gist(t) for t in typical_texts[:2])
    if label == UNNAMED_LABEL:
        return (f"User keeps coming back to {label}, across {len(typical_texts)} related memories "
                f"(e.g. {examples}).")
    return (f"User has a recurring focus on {label}, across {len(typical_texts)} related memories "
            f"(e.g. {examples}).")


# --- identity -----------------------------------------------------------------------------------


def pattern_id(user_id: str, theme_key: str) -> str:
    """Derived from the user and the theme's stable identity (its topic), not from its member set, so
    a re-run writes the same id and a theme that gained evidence updates its pattern in place."""
    return "p-" + hashlib.sha1(f"{user_id}|{theme_key}".encode()).hexdigest()[:16]


def _overlap(a: set[str], b: set[str]) -> float:
    return len(a & b) / min(len(a), len(b)) if a and b else 0.0


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
