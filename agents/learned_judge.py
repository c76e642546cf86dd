"""The learned judge: two small models, distilled from the project's labelled corpus, read each pair.

Pure logic. The models are run by callables the caller passes (`streams/core/judge_model.py` loads
them on ONNX Runtime):
- `predict`, the evidence head: a linear model over `pair_features` (alignment, names and numbers,
  time and session, the rule judge's reading), cheap enough for every candidate;
- `cross`, a cross-encoder fine-tuned from the packaged MiniLM that reads both texts at once. It is
  asked only about the pairs the head does not rule out (`SHORTLIST`), so the cost per event stays
  bounded, and the two are combined by `combine`: an action needs both to see it.
The combined class probabilities become verdicts with thresholds calibrated on the corpus's
calibration split: an action is automatic only where its calibrated precision was at least
`Thresholds.target` (0.97), a likely case below that is a review item, the rest nothing. The rule
judge still reads every pair: as evidence for the head (its relation and reason are features); as a
second way to act, where it found explicit evidence and the head alone is sure enough (calibrated
with the rest, `decide_pair`); and for the few truths no model sees: an exact repeat is one fact,
except an occasion ("this morning") repeated on another day. The gates of `merge_supersede.gate`
apply as to every
judge: a merge never hides a name or number the kept memory lacks; pinned memories never change.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from dreamstream.agents import alignment as al
from dreamstream.agents import pair_features as pf
from dreamstream.agents.merge_supersede import OfflineJudge, Relation, Verdict, cosine
from dreamstream.schemas.memory import Memory

CLASSES = ("none", "same_equal", "same_new", "same_old", "same_each", "update")
"""The model's output, in order: none = both hold or unrelated; same_* = one fact (which is fuller);
update = the newer memory replaces the older one's value."""

Predict = Callable[[np.ndarray], np.ndarray]
"""(pairs, N_FEATURES) float32 -> (pairs, len(CLASSES)) probabilities."""
CrossPredict = Callable[[Sequence[tuple[str, str]]], np.ndarray]
"""(older text, newer text with its time cue) pairs -> (pairs, len(CLASSES)) probabilities."""

SHORTLIST = 0.8
"""The cross-encoder reads a pair only when the head gives "nothing to do" at most this probability:
the pairs the head rules out would stay "none" however the cross-encoder read them (see `combine`)."""


def pair_text(new: Memory, old: Memory) -> tuple[str, str]:
    """What the cross-encoder reads: the older text, then the newer one with whether it was said in
    the same conversation (the session is evidence, not a veto)."""
    gap = "same conversation" if pf.one_session(new, old) else "later"
    return old.text, f"({gap}) {new.text}"


def combine(head: np.ndarray, cross: np.ndarray) -> np.ndarray:
    """Both models must see a class: the smaller of their two probabilities, renormalised."""
    low = np.minimum(np.asarray(head, np.float64), np.asarray(cross, np.float64))
    return low / np.maximum(low.sum(axis=-1, keepdims=True), 1e-12)


def probabilities(head: np.ndarray, texts: Sequence[tuple[str, str]], cross: CrossPredict | None) -> np.ndarray:
    """The judge's class probabilities for a batch of pairs: the head's, and where the head leaves a
    pair open and a cross-encoder is given, both combined. Training calibrates on exactly this."""
    out = np.array(head, np.float64, copy=True)
    if cross is None or not len(out):
        return out
    idx = [i for i in range(len(out)) if out[i, 0] <= SHORTLIST]
    if idx:
        out[idx] = combine(out[idx], cross([texts[i] for i in idx]))
    return out


@dataclass(frozen=True)
class Thresholds:
    """Scores at which an action is automatic or a review item (from `make train-judge`)."""

    merge: float = 1.01
    merge_ruled: float = 1.01
    """Also a merge where the rule judge found word-for-word containment and the head alone says this."""
    merge_review: float = 1.01
    supersede: float = 1.01
    supersede_ruled: float = 1.01
    """Also a supersede where the rule judge found explicit evidence (an end, a slot with another value,
    a plan done) and the head alone says this: the rules carry what the cross-encoder may miss."""
    supersede_review: float = 1.01
    target: float = 0.97
    floor: float = -1.0
    """Sentence cosine below which a pair is not read at all: the judge takes no action and proposes
    nothing there. Set by calibration below the least similar pair it acted on or proposed (`make
    train-judge`); two thirds of a new memory's nearest facts are below it, and reading them cost a
    quarter of the judge's time. An exact restatement, and a pair with an update's cue (`pair_features.update_cued`),
    is read however its vectors compare."""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Thresholds:
        return cls(**{k: float(v) for k, v in data.items() if k in cls.__dataclass_fields__})


def scores(probs: np.ndarray) -> dict[str, float]:
    """The model's probabilities as the judge's scores: a merge keeping the new / the old memory is
    right when the kept one says at least as much (equal, or it is the fuller)."""
    p = dict(zip(CLASSES, (float(x) for x in probs), strict=True))
    return {
        "keep_new": p["same_equal"] + p["same_new"],
        "keep_old": p["same_equal"] + p["same_old"],
        "same": p["same_equal"] + p["same_new"] + p["same_old"] + p["same_each"],
        "update": p["update"],
    }


TIE = 0.05
"""Keep-new and keep-old scores this close are a tie, and a tie keeps the first memory."""


def merge_choice(s: dict[str, float]) -> tuple[bool, float]:
    """(whether the new memory is kept, the score of that merge being right)."""
    new_fuller = s["keep_new"] > s["keep_old"] + TIE
    return new_fuller, s["keep_new"] if new_fuller else s["keep_old"]


@dataclass
class LearnedJudge:
    """Labels each pair from the model's calibrated scores; the rule judge's reading is one input."""

    predict: Predict
    thresholds: Thresholds
    rules: OfflineJudge = field(default_factory=OfflineJudge)
    cross: CrossPredict | None = None
    name: str = "learned"
    session_veto: bool = False
    """An update within one conversation is the model's call (it sees the session), not a blanket veto."""

    def reads(self, new: Memory, old: Memory, cos: float | None = None) -> bool:
        """Whether the judge reads this pair at all (`Thresholds.floor`): from the vectors and texts alone.
        A pair without both vectors has no similarity to fall below: it is read."""
        if new.vector is None or old.vector is None:
            return True
        return (cosine(new, old) if cos is None else cos) >= self.thresholds.floor or read_anyway(new.text, old.text)

    def judge(self, new: Memory, candidates: Sequence[Memory]) -> list[Verdict]:
        if not candidates:
            return []
        cos = [cosine(new, c) for c in candidates]
        read = [i for i, (c, x) in enumerate(zip(candidates, cos, strict=True)) if self.reads(new, c, x)]
        verdicts = dict(zip(read, self._read(new, [candidates[i] for i in read]), strict=True))
        return [verdicts[i] if i in verdicts else below_floor(c, x)
                for i, (c, x) in enumerate(zip(candidates, cos, strict=True))]

    def _read(self, new: Memory, candidates: Sequence[Memory]) -> list[Verdict]:
        """Both models and the rules on the pairs above the floor."""
        if not candidates:
            return []
        feats = self.rules.features([new, *candidates])
        fn = feats[0]
        memo = al.CoverageMemo()  # the rules and the features align the same pairs: once each way
        rules = replace(self.rules, memo=memo)
        ruled = [rules.judge_pair(new, c, fn, fo) for c, fo in zip(candidates, feats[1:], strict=True)]
        x = pf.matrix([pf.pair_vector(new, c, fn, fo, r.relation, r.rule, memo)
                       for c, fo, r in zip(candidates, feats[1:], ruled, strict=True)])
        head = np.asarray(self.predict(x), np.float64)
        probs = probabilities(head, [pair_text(new, c) for c in candidates], self.cross)
        return [self.verdict(c, r, row, h) for c, r, row, h in zip(candidates, ruled, probs, head, strict=True)]

    def verdict(self, old: Memory, ruled: Verdict, probs: np.ndarray, head: np.ndarray | None = None) -> Verdict:
        s = scores(probs)
        shown = {k: round(v, 4) for k, v in s.items()} | {"cos": ruled.scores.get("cos", 0.0)}
        rel, conf, why, new_fuller = decide_pair(s, scores(probs if head is None else head), ruled.relation,
                                                 ruled.rule, ruled.scores.get("cos", 0.0), self.thresholds)
        return Verdict(old.memory_id, rel, round(conf, 4), f"learned:{why}", shown, new_fuller)


def read_anyway(new_text: str, old_text: str) -> bool:
    """A pair read however far apart its vectors are: the same words, or an update's cue
    (`pair_features.update_cued`). Calibration sets the floor from the other pairs."""
    return pf.norm_words(old_text) == pf.norm_words(new_text) or pf.update_cued(new_text, old_text)


def below_floor(old: Memory, cos: float) -> Verdict:
    """A pair the judge does not read (`Thresholds.floor`): unrelated, with its similarity as evidence."""
    return Verdict(old.memory_id, "unrelated", round(1.0 - cos, 4), "learned:below_floor", {"cos": round(cos, 4)})


VETOES = frozenset(("different_subject", "roles_swapped", "polarity_differs"))
"""Truths the models do not see and the rules do: the statement is about someone else ("My wife banks
with Monzo"), the same people or places in exchanged roles ("from Oslo to Madrid" / "from Madrid to
Oslo"), or the opposite polarity without a reversal ("I eat fish" / "I never eat raw fish"). Such a
pair is never one fact nor an update; without these the learned judge merged them (heldout case)."""


def decide_pair(s: dict[str, float], h: dict[str, float], rule_relation: str, rule: str, cos: float,
                t: Thresholds) -> tuple[Relation, float, str, bool | None]:
    """(relation, confidence, reason, new memory fuller) from the combined scores `s`, the head's own
    `h` and the rule judge's reading; `make train-judge` calibrates `t` through this very function."""
    family = rule.split(":", 1)[0]
    if family in VETOES or (rule == "another_occasion" and cos >= 0.999):
        return "unrelated", 0.0, f"rule:{family}", None
    if family == "unseen_difference":
        # The pair differs only where no feature looks ("-5" / "5 degrees", two emoji, two Cyrillic sentences):
        # what the scores say goes to a person, never applied.
        rel, conf, why, fuller = decide_pair(s, h, "unrelated", "no_evidence", cos, t)
        if rel in ("same", "replaces"):
            return ("review_same" if rel == "same" else "review_replaces"), conf, "unseen_difference", fuller
        return rel, conf, why, fuller
    new_fuller, keep = merge_choice(s)
    if rule == "exact_text":
        return "same", max(keep, 0.99), "exact_text", False
    if keep >= t.merge and keep >= s["update"]:
        return "same", keep, "same", new_fuller
    head_fuller, head_keep = merge_choice(h)
    if rule_relation == "same" and head_keep >= t.merge_ruled and head_keep >= h["update"]:
        return "same", head_keep, "same_ruled", head_fuller
    if s["update"] >= t.supersede:
        return "replaces", s["update"], "update", None
    if rule_relation == "replaces" and h["update"] >= t.supersede_ruled:
        return "replaces", h["update"], "update_ruled", None
    if s["update"] >= t.supersede_review and s["update"] >= s["same"]:
        return "review_replaces", s["update"], "maybe_update", None
    if s["same"] >= t.merge_review:
        return "review_same", s["same"], "maybe_same", new_fuller
    if s["update"] >= t.supersede_review:
        return "review_replaces", s["update"], "maybe_update", None
    return "unrelated", 1.0 - max(s["same"], s["update"]), "none", None
