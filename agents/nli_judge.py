"""Optional judge backed by a local sentence-transformers CrossEncoder NLI model (loaded by path).

Entailment both ways = same fact; the new entails the old only = same fact, new more complete;
contradiction = the new replaces the old. Only the top candidates by cosine that the offline
judge did not settle (exact text) are scored: 2 cross-encoder passes per candidate, so the cost
is bounded by `max_candidates`. No NLI model ships offline here; the pipeline only builds this
judge when given a model path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dreamstream.agents.merge_supersede import Judge, OfflineJudge, Verdict
from dreamstream.schemas.memory import Memory

Predict = Callable[[list[tuple[str, str]]], np.ndarray]
"""(premise, hypothesis) pairs -> probabilities, columns (contradiction, entailment, neutral)."""


def load_cross_encoder(path: str, device: str = "cpu") -> Predict:
    """A CrossEncoder NLI model from a local folder, with its label order read from the config."""
    from sentence_transformers import CrossEncoder

    model: Any = CrossEncoder(path, device=device, local_files_only=True)
    id2label = {int(k): str(v).lower() for k, v in model.config.id2label.items()}
    order = [
        next(i for i, lab in id2label.items() if lab.startswith(name))
        for name in ("contra", "entail", "neutral")
    ]

    def predict(pairs: list[tuple[str, str]]) -> np.ndarray:
        logits = np.asarray(
            model.predict(pairs, apply_softmax=False, convert_to_numpy=True), dtype=np.float64
        )
        logits = logits[:, order]
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    return predict


@dataclass
class NLIJudge:
    predict: Predict
    fallback: Judge = field(default_factory=OfflineJudge)
    max_candidates: int = 4
    entail: float = 0.7
    contradict: float = 0.7
    name: str = "nli"

    @classmethod
    def from_path(cls, path: str, **kwargs: Any) -> NLIJudge:
        return cls(predict=load_cross_encoder(path), **kwargs)

    def judge(self, new: Memory, candidates: Sequence[Memory]) -> list[Verdict]:
        base = self.fallback.judge(new, candidates)
        ranked = sorted(
            (i for i, v in enumerate(base) if v.rule != "exact_text"),
            key=lambda i: (-base[i].scores.get("cos", 0.0), i),
        )[: self.max_candidates]
        if not ranked:
            return base
        pairs = [(candidates[i].text, new.text) for i in ranked] + [
            (new.text, candidates[i].text) for i in ranked
        ]
        try:
            probs = self.predict(pairs)
        except Exception as exc:  # noqa: BLE001 - a broken model must not stop ingest
            return [
                Verdict(
                    v.candidate_id,
                    v.relation,
                    v.confidence,
                    f"{v.rule}|nli_fallback:{type(exc).__name__}",
                    v.scores,
                    v.new_fuller,
                )
                for v in base
            ]
        out = list(base)
        n = len(ranked)
        for k, i in enumerate(ranked):
            fwd, back = probs[k], probs[n + k]  # old => new, new => old
            v = base[i]
            scores = {
                **v.scores,
                "nli_entail_fwd": round(float(fwd[1]), 4),
                "nli_entail_back": round(float(back[1]), 4),
                "nli_contra": round(float(max(fwd[0], back[0])), 4),
            }
            if fwd[1] >= self.entail and back[1] >= self.entail:
                out[i] = Verdict(
                    v.candidate_id, "same", float(min(fwd[1], back[1])), "nli_equivalent", scores, False
                )
            elif back[1] >= self.entail:
                out[i] = Verdict(v.candidate_id, "same", float(back[1]), "nli_new_entails_old", scores, True)
            elif max(fwd[0], back[0]) >= self.contradict:
                out[i] = Verdict(
                    v.candidate_id, "replaces", float(max(fwd[0], back[0])), "nli_contradiction", scores
                )
            else:
                out[i] = Verdict(v.candidate_id, "unrelated", float(fwd[2]), "nli_neutral", scores)
        return out
