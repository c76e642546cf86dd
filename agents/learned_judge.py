"""The learned judge: a small model, distilled from the project's labelled corpus, reads each pair.

Pure logic. The model itself (an ONNX graph over `pair_features`) is run by the caller's `predict`
(`streams/core/judge_model.py` loads it); this module turns its class probabilities into verdicts
with thresholds calibrated on the corpus's calibration split: an action is automatic only where its
calibrated precision was at least `Thresholds.target` (0.97), a likely case below that is a review
item, the rest nothing. The rule judge still reads every pair, as evidence for the model (its
relation is a feature) and for the few truths the model cannot see: an exact repeat of an occasion
("this morning" on two days) is two events. The gates of `merge_supersede.gate` apply as to every
judge: a merge never hides a name or number the kept memory lacks; pinned memories never change.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dreamstream.agents import pair_features as pf
from dreamstream.agents.merge_supersede import OfflineJudge, Verdict
from dreamstream.schemas.memory import Memory

CLASSES = ("none", "same_equal", "same_new", "same_old", "same_each", "update")
"""The model's output, in order: none = both hold or unrelated; same_* = one fact (which is fuller);
update = the newer memory replaces the older one's value."""

Predict = Callable[[np.ndarray], np.ndarray]
"""(pairs, N_FEATURES) float32 -> (pairs, len(CLASSES)) probabilities."""


@dataclass(frozen=True)
class Thresholds:
    """Scores at which an action is automatic or a review item (from `make train-judge`)."""

    merge: float = 1.01
    merge_review: float = 1.01
    supersede: float = 1.01
    supersede_review: float = 1.01
    target: float = 0.97

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Thresholds:
        return cls(**{k: float(data[k]) for k in ("merge", "merge_review", "supersede", "supersede_review", "target")
                      if k in data})


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


@dataclass
class LearnedJudge:
    """Labels each pair from the model's calibrated scores; the rule judge's reading is one input."""

    predict: Predict
    thresholds: Thresholds
    rules: OfflineJudge = field(default_factory=OfflineJudge)
    name: str = "learned"
    session_veto: bool = False
    """An update within one conversation is the model's call (it sees the session), not a blanket veto."""

    def judge(self, new: Memory, candidates: Sequence[Memory]) -> list[Verdict]:
        if not candidates:
            return []
        feats = self.rules.features([new, *candidates])
        fn = feats[0]
        ruled = [self.rules.judge_pair(new, c, fn, fo) for c, fo in zip(candidates, feats[1:], strict=True)]
        x = pf.matrix([pf.pair_vector(new, c, fn, fo, r.relation)
                       for c, fo, r in zip(candidates, feats[1:], ruled, strict=True)])
        probs = np.asarray(self.predict(x), np.float64)
        return [self.verdict(c, r, row) for c, r, row in zip(candidates, ruled, probs, strict=True)]

    def verdict(self, old: Memory, ruled: Verdict, probs: np.ndarray) -> Verdict:
        s = scores(probs)
        t = self.thresholds
        shown = {k: round(v, 4) for k, v in s.items()} | {"cos": ruled.scores.get("cos", 0.0)}

        def v(rel: Any, conf: float, rule: str, new_fuller: bool | None = None) -> Verdict:
            return Verdict(old.memory_id, rel, round(conf, 4), f"learned:{rule}", shown, new_fuller)

        if ruled.rule == "another_occasion" and ruled.scores.get("cos", 0.0) >= 0.999:
            return v("unrelated", 0.0, "another_occasion")  # the same words of two days: two events
        keep = max(s["keep_new"], s["keep_old"])
        new_fuller = s["keep_new"] > s["keep_old"]
        if ruled.rule == "exact_text":
            return v("same", max(keep, 0.99), "exact_text", new_fuller)
        if keep >= t.merge and keep >= s["update"]:
            return v("same", keep, "same", new_fuller)
        if s["update"] >= t.supersede:
            return v("replaces", s["update"], "update")
        if s["update"] >= t.supersede_review and s["update"] >= s["same"]:
            return v("review_replaces", s["update"], "maybe_update")
        if s["same"] >= t.merge_review:
            return v("review_same", s["same"], "maybe_same", new_fuller)
        if s["update"] >= t.supersede_review:
            return v("review_replaces", s["update"], "maybe_update")
        return v("unrelated", 1.0 - max(s["same"], s["update"]), "none")
