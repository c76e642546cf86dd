"""Decide, for one new memory, whether it restates, completes or replaces a user's active facts.

Pure logic: no Kafka, no Qdrant, no network. The ingest pipeline calls `decide(new, candidates)`
with the same user's active facts (exact text matches first, then nearest by cosine, at most
`CANDIDATE_K`) and applies the returned `Decision`s.

Structure: a `Judge` labels each (new, candidate) pair as "same" / "replaces" / "unrelated";
`decide_with` turns those verdicts into decisions (which duplicate is canonical, which fact is
superseded, pinned targets -> `conflict`). The default `OfflineJudge` uses only the stored
embedding vectors and generic text signals (see `text_features`), so it is deterministic and
cheap; an optional `embedder` adds one embedding per masked difference for the top candidates.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np

from dreamstream.agents import text_features as tf
from dreamstream.agents.decisions import Decision
from dreamstream.schemas.memory import Memory

CANDIDATE_K: int = 32
"""Nearest active facts of the same user the pipeline passes. Replacements can have low cosine
("I work at X" -> "New job at Y"), so this is wider than the handful a duplicate check needs."""

Relation = Literal["same", "replaces", "unrelated"]
Embedder = Callable[[list[str]], np.ndarray]


@dataclass(frozen=True)
class Verdict:
    """A judge's reading of one (new, candidate) pair, with the evidence for the audit trail."""

    candidate_id: str
    relation: Relation
    confidence: float
    rule: str
    scores: dict[str, float] = field(default_factory=dict)
    new_fuller: bool | None = None
    """For "same": whether the new memory is the more complete statement; None = let the policy judge."""


class Judge(Protocol):
    """Anything that labels each candidate against the new memory. Must be deterministic."""

    name: str

    def judge(self, new: Memory, candidates: Sequence[Memory]) -> list[Verdict]: ...


def _cos(a: Memory, b: Memory) -> float:
    if a.vector is None or b.vector is None:
        return 0.0
    return float(np.dot(a.vector, b.vector))


def _norm(text: str) -> str:
    return " ".join(tf.words(text))


def _unmatched(values: frozenset[str], other: frozenset[str]) -> set[str]:
    """Values with no counterpart in `other`; one that starts another ("trpc" / "trpc api") is
    the same name said more or less fully, not a different one ("api" / "trpc api" is)."""

    def nested(a: str, b: str) -> bool:
        wa, wb = a.split(), b.split()
        n = min(len(wa), len(wb))
        return wa[:n] == wb[:n]

    return {v for v in values if not any(nested(v, o) for o in other)}


@dataclass
class OfflineJudge:
    """Embedding similarity + generic text features; no LLM, no network.

    Thresholds were set by looking at score distributions, not at particular wordings: the
    rules ask "is it the same statement?", "does one contain the other?", "does the new one
    change a value of the same slot?" (substitution plus a change cue, or a near-identical
    frame with another value).
    """

    embedder: Embedder | None = None
    name: str = "offline"
    same_cos: float = 0.72
    contain_cos: float = 0.45
    replace_cos_cue: float = 0.33
    replace_cos_cue_any: float = 0.55
    replace_cos_implicit: float = 0.60
    top_n_embed: int = 4
    frame_same: float = 0.90
    frame_change: float = 0.80
    frame_change_loose: float = 0.88
    polarity_cos: float = 0.55

    def frame_sims(self, new: Memory, candidates: Sequence[Memory]) -> list[float | None]:
        """Cosine of the value-masked frames (`text_features.frame`), one embedding per distinct text.

        Catches one slot said two ways with different values ("Works for Acme." / "User has a job at
        Globex."), which whole-sentence cosine ranks low because the values dominate it."""
        if self.embedder is None or not candidates:
            return [None] * len(candidates)
        texts = [tf.frame(new.text)[0]] + [tf.frame(c.text)[0] for c in candidates]
        vecs = np.asarray(self.embedder(texts), dtype=np.float32)
        return [float(np.dot(vecs[0], v)) for v in vecs[1:]]

    def judge(self, new: Memory, candidates: Sequence[Memory]) -> list[Verdict]:
        sims = [_cos(new, c) for c in candidates]
        fsims = self.frame_sims(new, candidates)
        top = max(sims, default=0.0)
        return [
            self.judge_pair(new, c, nearest=s >= top - 0.02, frame_cos=f)
            for c, s, f in zip(candidates, sims, fsims, strict=True)
        ]

    def judge_pair(
        self, new: Memory, old: Memory, *, nearest: bool = True, frame_cos: float | None = None
    ) -> Verdict:
        """`nearest`: `old` is (about) the new memory's nearest candidate, which lets a change cue
        ("moved to", "now") count at a lower similarity: the slot is the closest thing on record.
        `frame_cos`: similarity of the value-masked frames, where an embedder is configured."""
        cos = _cos(new, old)
        o = tf.overlap(new.text, old.text)
        scores = {"cos": round(cos, 4), "jaccard": round(o.jaccard, 4), "old_in_new": round(o.old_in_new, 4)}
        if frame_cos is not None:
            scores["frame_cos"] = round(frame_cos, 4)
        fn, vals_new, subj_new = tf.frame(new.text)
        fo, vals_old, subj_old = tf.frame(old.text)

        def v(rel: Relation, conf: float, rule: str) -> Verdict:
            return Verdict(old.memory_id, rel, round(conf, 4), rule, scores)

        if _norm(new.text) == _norm(old.text):
            return v("same", 1.0, "exact_text")
        # Evidence that the two are about different things, whatever the similarity says.
        if tf.third_parties(new.text) ^ tf.third_parties(old.text) and not (
            tf.third_parties(new.text) and tf.third_parties(old.text)
        ):
            return v("unrelated", 1 - cos, "different_subject")
        ep_new, ep_old = tf.episode_words(new.text), tf.episode_words(old.text)
        if (ep_new or ep_old) and ep_new != ep_old:
            return v("unrelated", 1 - cos, "distinct_occasion")
        small_diff = len(o.only_new) <= 2 and len(o.only_old) <= 2
        if small_diff and tf.order_swapped(new.text, old.text):
            return v("unrelated", 1 - cos, "roles_swapped")
        cue_new = tf.has_change_cue(new.text, old.text)
        change = cue_new and not tf.has_change_cue(old.text)
        additive = tf.has_additive_cue(new.text) and not tf.has_additive_cue(old.text)
        fc = frame_cos if frame_cos is not None else -1.0
        # Each side names a value the other lacks (another city, another tool): never one fact.
        value_conflict = bool(_unmatched(vals_new, vals_old)) and bool(_unmatched(vals_old, vals_new))
        fo_ = tf.overlap(fn, fo)
        frame_diff = max(len(fo_.only_new), len(fo_.only_old))  # slot words that differ, values masked
        if tf.has_negation(new.text) != tf.has_negation(old.text) and cos >= self.polarity_cos and o.shared:
            # Polarity flip on one topic: a reversal ("I drink coffee" -> "I don't drink coffee",
            # "... anymore"), unless the negated side narrows it ("I never eat *raw* fish").
            neg_side = o.only_new if tf.has_negation(new.text) else o.only_old
            if cue_new or not neg_side:
                return v("replaces", max(cos, fc), "polarity_flip")
            shorter_left = o.only_old if o.old_len <= o.new_len else o.only_new
            if (tf.negation_only_in_added_clause(new.text if tf.has_negation(new.text) else old.text)
                    and cos >= self.contain_cos and len(o.shared) >= 2 and len(shorter_left) <= 1):
                # "Secrets live in Doppler, never in the repo": the negation is detail of its own.
                return v("same", cos, "negated_detail")
            return v("unrelated", 1 - cos, "narrowed_negation")
        if fc >= self.frame_same and not change and vals_new == vals_old:
            return v("same", fc, "frame_same_values")
        if (
            fc >= self.frame_change
            and (fc >= self.frame_change_loose or frame_diff <= 1)
            and value_conflict
            and tf.value_kind(vals_new) == tf.value_kind(vals_old)
            and (cue_new or not (vals_new & vals_old))
            and subj_new == subj_old
            and not additive
            and not (tf.is_event(new.text) and tf.is_event(old.text) and not change)
        ):
            return v("replaces", fc, "frame_value_change")
        if o.literal_conflict and not cue_new:
            return v("unrelated", 1 - cos, "different_literal")
        if additive and not (change and tf.has_replacing_cue(new.text)):
            return v("unrelated", 1 - cos, "additive_cue")  # "also started X" adds; "X instead" replaces
        if not change and not value_conflict:
            if cos >= self.same_cos:
                return v("same", cos, "paraphrase")
            shorter_left = o.only_old if o.old_len <= o.new_len else o.only_new
            if cos >= self.contain_cos and len(o.shared) >= 2 and len(shorter_left) <= 1:
                return v("same", cos, "containment")
        substitution = bool(o.only_new) and bool(o.only_old)
        if (
            substitution
            and change
            and (cos >= self.replace_cos_cue_any or (nearest and cos >= self.replace_cos_cue))
        ):
            return v("replaces", cos, "change_cue")
        if (
            substitution
            and value_conflict
            and cos >= self.replace_cos_implicit
            and len(o.shared) >= 2
            and len(o.only_old) <= 2
            and len(o.only_new) <= 3
        ):
            return v("replaces", cos, "implicit_substitution")
        return v("unrelated", 1 - cos, "default")


def _more_complete(new: Memory, old: Memory) -> bool:
    """Strictly more complete: says clearly more than the old statement (ties keep the first)."""
    return tf.completeness(new.text) >= tf.completeness(old.text) + 2


def decide_with(judge: Judge, new: Memory, candidates: Sequence[Memory]) -> list[Decision]:
    """Turn a judge's verdicts into decisions for one new memory."""
    cands = [c for c in candidates if c.user_id == new.user_id and c.memory_id != new.memory_id]
    if not cands:
        return []
    by_id = {c.memory_id: c for c in cands}
    verdicts = judge.judge(new, cands)
    same = [x for x in verdicts if x.relation == "same"]
    repl = [x for x in verdicts if x.relation == "replaces"]
    out: list[Decision] = []

    def mk(action: str, targets: list[Verdict], rule: str) -> Decision:
        ids = tuple(x.candidate_id for x in targets)
        return Decision(
            action=action,  # type: ignore[arg-type]
            new_id=new.memory_id,
            user_id=new.user_id,
            targets=ids,
            judge=judge.name,
            rule=rule,
            scores={f"{x.candidate_id}:{k}": val for x in targets for k, val in x.scores.items()},
            detail={"verdicts": {x.candidate_id: x.rule for x in targets}},
        )

    if same:
        same.sort(key=lambda x: (-x.confidence, x.candidate_id))
        fuller = [
            x.new_fuller if x.new_fuller is not None else _more_complete(new, by_id[x.candidate_id])
            for x in same
        ]
        if all(fuller):
            action, targets = "merge_old", same
        else:
            action, targets = "merge_new", same[:1]
        rule = "+".join(sorted({x.rule for x in targets}))
        if any(by_id[x.candidate_id].pinned for x in targets) or (action == "merge_new" and new.pinned):
            out.append(mk("conflict", targets, f"pinned:{action}:{rule}"))
        else:
            out.append(mk(action, targets, rule))
        return out
    if repl:
        repl.sort(key=lambda x: (-x.confidence, x.candidate_id))
        best = repl[:1]
        rule = best[0].rule
        if by_id[best[0].candidate_id].pinned:
            out.append(mk("conflict", best, f"pinned:supersede:{rule}"))
        else:
            out.append(mk("supersede", best, rule))
    return out


_DEFAULT: Judge | None = None


def set_default_judge(judge: Judge | None) -> None:
    """Swap the judge `decide` uses (e.g. an `LLMJudge`, or an `OfflineJudge` with an embedder)."""
    global _DEFAULT
    _DEFAULT = judge


def packaged_embedder() -> Embedder | None:
    """The process's shared MiniLM model (the one that embedded the memories), for frame embeddings.

    Imported lazily so this module stays importable, and usable from stored vectors alone, without it."""
    try:
        from dreamstream.streams.embedding import shared_embedder
    except ImportError:  # pragma: no cover - the package always ships it
        return None
    return shared_embedder()


def decide(new: Memory, candidates: Sequence[Memory]) -> list[Decision]:
    """The pipeline entry point: decisions for `new` against the user's active `candidates`."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = OfflineJudge(embedder=packaged_embedder())
    return decide_with(_DEFAULT, new, candidates)
