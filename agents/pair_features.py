"""What the learned judge sees of one (newer, older) pair of a user's memories: one float vector.

Pure: built from what every stored memory already carries (its sentence vector, its word features,
its text and time), so judging embeds nothing. Evidence only, no raw embedding dimensions: with them
the head fitted the topics of the corpus (cross-validated log-loss 0.50 against 0.46 without), so
MiniLM enters through what it measures of the pair:
- sentence similarity, and word alignment both ways (`alignment.coverage`): how much of each
  statement the other says, which words are left over, and whether one value stands in another's place;
- time apart and whether it is one conversation; names and numbers one side has and the other lacks;
  negation, plans, reports of something done, change and addition cues;
- the rule judge's reading of the pair and its reason, as evidence for the model, not as a veto.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from dreamstream.agents import alignment as al
from dreamstream.agents import text_features as tf
from dreamstream.agents import update_cues as uc
from dreamstream.agents.merge_supersede import cosine
from dreamstream.schemas.memory import Memory, parse_time

RULE_RELATIONS = ("same", "replaces", "unrelated", "review_same", "review_replaces")
RULE_FAMILIES = (
    "exact_text", "contained", "equivalent", "reversal", "explicit_end", "slot_change", "slot_change_additive",
    "plan_done", "plan_maybe_done", "only_planned", "near_restatement", "polarity_unclear", "polarity_differs",
    "different_subject", "roles_swapped", "another_occasion", "same_session", "no_evidence",
)
"""The rule judge's reason for its reading (the first part of its rule name): evidence, not a veto."""

SCALAR_NAMES: tuple[str, ...] = (
    "cos", "exact_text",
    "old_in_new_full", "old_in_new_missing_frac", "old_in_new_weakest", "old_in_new_mean",
    "new_in_old_full", "new_in_old_missing_frac", "new_in_old_weakest", "new_in_old_mean",
    "unmatched_new", "unmatched_old", "substitution_sim", "value_change",
    "log_words_new", "log_words_old", "words_ratio",
    "names_new_only", "names_old_only", "numbers_new_only", "numbers_old_only",
    "neg_new", "neg_old", "change_new", "change_old", "additive_new",
    "end_new", "plan_new", "plan_old", "done_new", "done_old", "future_new", "past_new", "reported_new",
    "third_new", "third_old", "third_differs",
    "same_session", "log_days_apart", "older_first", "later_change", "later_cos",
    *(f"rule_{r}" for r in RULE_RELATIONS),
    *(f"why_{r}" for r in RULE_FAMILIES),
)
N_FEATURES = len(SCALAR_NAMES)

SESSION_GAP_S = 3600.0


@lru_cache(maxsize=8192)
def norm_words(text: str) -> tuple[str, ...]:
    """A text's words as the exact-restatement rule compares them (read once per text)."""
    return tf.words(text)


class _Cues(NamedTuple):
    slots: frozenset[str]
    change: bool
    """An end, a change marker, or a report of something done: what an update says."""


@lru_cache(maxsize=8192)
def _cues(text: str) -> _Cues:
    return _Cues(frozenset(uc.slots(text)), bool(uc.endings(text)) or tf.has_change_cue(text)
                 or bool(uc.reports_done(text)))


def update_cued(new_text: str, old_text: str) -> bool:
    """Whether the pair carries a cue the rules read an update from, whatever its sentence similarity:
    both fill one single-valued slot ("I live in Boston" / "Talia currently lives in Melbourne", cosine
    0.19 across two voices), or the newer one reports an end, a change or something done. Read per text."""
    n, o = _cues(new_text), _cues(old_text)
    return bool(n.slots & o.slots) or n.change


def _days_apart(new: Memory, old: Memory) -> float | None:
    try:
        return (parse_time(new.created_at) - parse_time(old.created_at)).total_seconds() / 86400.0
    except ValueError:
        return None


def one_session(new: Memory, old: Memory) -> bool:
    """One conversation: the same run id, or (without run ids) created within an hour."""
    if new.run_id and old.run_id:
        return new.run_id == old.run_id
    if new.run_id or old.run_id:
        return False
    days = _days_apart(new, old)
    return days is None or abs(days) * 86400.0 < SESSION_GAP_S


def _alignment(fn: al.TokenFeatures, fo: al.TokenFeatures,
               memo: al.CoverageMemo | None) -> tuple[al.PairAlignment, bool]:
    """The pair's alignment, from the judging pass's memo when given (aligned once for both judges),
    and whether it is held as (fo, fn)."""
    return memo.pair(fn, fo) if memo is not None else (al.align(fn, fo), False)


def _align(cov: al.Coverage, best: np.ndarray | None) -> tuple[float, float, float, float]:
    """(full, fraction of the words missing in the other, weakest match, mean best match) of one
    direction: `cov` and each word's best cosine in the other statement."""
    mean = float(np.clip(best, 0.0, 1.0).mean()) if best is not None else 0.0
    missing = len(cov.missing) / max(cov.required, 1)
    return float(cov.full), float(missing), float(max(cov.weakest, 0.0)), mean


def _readings(fn: al.TokenFeatures | None, fo: al.TokenFeatures | None,
              memo: al.CoverageMemo | None) -> tuple[list[float], list[float]]:
    """Both directions of `_align` (old in new, new in old) and `_unmatched`, from one alignment."""
    if fn is None or fo is None:
        return [0.0, 1.0, 0.0, 0.0] * 2, [0.0, 0.0, 0.0]
    pair, flipped = _alignment(fn, fo, memo)
    n_in_o, best_n = (pair.b_in_a, pair.best_of_b) if flipped else (pair.a_in_b, pair.best_of_a)
    o_in_n, best_o = (pair.a_in_b, pair.best_of_a) if flipped else (pair.b_in_a, pair.best_of_b)
    aligned = [*(_align(o_in_n, best_o) if fo.words else (0.0, 1.0, 0.0, 0.0)),
               *(_align(n_in_o, best_n) if fn.words else (0.0, 1.0, 0.0, 0.0))]
    return aligned, _unmatched(pair, flipped)


def _unmatched(pair: al.PairAlignment, flipped: bool) -> list[float]:
    """Words of each side with no counterpart in the other, and how alike the closest two of them are:
    one value put in another's place ("Lisbon" / "Porto", "tea" / "coffee") is what an update looks like."""
    un_a, un_b = pair.unmatched()
    sub = float(pair.sims[np.ix_(un_a, un_b)].max()) if un_a and un_b else 0.0
    un_n, un_o = (un_b, un_a) if flipped else (un_a, un_b)
    return [float(len(un_n)), float(len(un_o)), sub]


class _Facts(NamedTuple):
    """What the features read from one text alone."""

    words: tuple[str, ...]
    names: frozenset[str]
    numbers: frozenset[str]
    third_parties: frozenset[str]
    negation: bool
    additive: bool
    ending: bool
    plan: bool
    done: bool
    future: bool
    past: bool
    reported: bool


@lru_cache(maxsize=8192)
def _facts(text: str) -> _Facts:
    """Read once per text: a new memory meets a dozen candidates, and a stored one many new memories."""
    return _Facts(tf.words(text), tf._names(text), tf.numbers(text), tf.third_parties(text), tf.has_negation(text),
                  tf.has_additive_cue(text), bool(uc.endings(text)), uc.plan(text) is not None,
                  bool(uc.reports_done(text)), bool(uc.future(text)), bool(uc.about_the_past(text)),
                  bool(uc.reported(text)))


def scalars(new: Memory, old: Memory, fn: al.TokenFeatures | None, fo: al.TokenFeatures | None,
            rule: str, why: str, memo: al.CoverageMemo | None = None) -> list[float]:
    """The evidence, in `SCALAR_NAMES` order; `rule` / `why` are the rule judge's relation and rule name;
    `memo` is the judging pass's (the rule judge aligned the same pair)."""
    cos = cosine(new, old)
    nt, ot = new.text, old.text
    n, o = _facts(nt), _facts(ot)
    exact = float(" ".join(n.words) == " ".join(o.words))
    wn, wo = len(n.words), len(o.words)
    names_n, names_o = n.names, o.names
    nums_n, nums_o = n.numbers, o.numbers
    tp_n, tp_o = n.third_parties, o.third_parties
    days = _days_apart(new, old)
    session = one_session(new, old)
    aligned, unmatched = _readings(fn, fo, memo)
    change = float(tf.has_change_cue(nt, ot))
    family = why.split(":", 1)[0]
    return [
        cos, exact,
        *aligned, *unmatched, float(bool(names_n - names_o) and bool(names_o - names_n)),
        math.log1p(wn), math.log1p(wo), (wn + 1) / (wo + 1),
        float(len(names_n - names_o)), float(len(names_o - names_n)),
        float(len(nums_n - nums_o)), float(len(nums_o - nums_n)),
        float(n.negation), float(o.negation),
        change, float(tf.has_change_cue(ot, nt)), float(n.additive),
        float(n.ending), float(n.plan), float(o.plan),
        float(n.done), float(o.done), float(n.future), float(n.past),
        float(n.reported),
        float(bool(tp_n)), float(bool(tp_o)), float(tp_n != tp_o),
        float(session), math.log1p(abs(days)) if days is not None else 0.0,
        float(days is None or days >= 0), change * float(not session), cos * float(not session),
        *(float(rule == r) for r in RULE_RELATIONS),
        *(float(family == f) for f in RULE_FAMILIES),
    ]


def pair_vector(new: Memory, old: Memory, fn: al.TokenFeatures | None, fo: al.TokenFeatures | None,
                rule: str, why: str = "", memo: al.CoverageMemo | None = None) -> np.ndarray:
    """The whole feature vector of one pair (`N_FEATURES` floats)."""
    return np.asarray(scalars(new, old, fn, fo, rule, why, memo), np.float32)


def matrix(rows: Sequence[np.ndarray]) -> np.ndarray:
    """Stack pair vectors (an empty batch keeps its width)."""
    return np.stack(rows).astype(np.float32) if rows else np.zeros((0, N_FEATURES), np.float32)
