"""`make train-judge`: distil the labelled corpus into the learned judge, seeded, on CPU.

    python -m dreamstream.streams.dev.train_judge [--head-only | --calibrate] [--json]

Reads bench/corpus (streams, labels), embeds every memory with the product's model, and on the
train split's pairs:
1. the evidence head: each pair's features (`agents.pair_features`), a linear head or a one-layer
   MLP chosen by cross-validated log-loss over the train split's people, fitted on all of it;
2. the cross-encoder: the packaged MiniLM fine-tuned to read both texts at once (all six layers,
   the token tables frozen; 3 epochs; restatements also seen the other way round). About 10
   minutes on two cores; `--head-only` keeps the shipped one.
Then it calibrates the thresholds on the calibration split, through the shipped ONNX graphs and
the judge's own combination (`learned_judge.probabilities`): automatic where precision >= 0.97,
review where a proposal is right at least `REVIEW_TARGET` of the time; below the least similar pair it
acted on or proposed (less `FLOOR_MARGIN`), the judge does not read a pair at all. It writes
streams/core/models/judge.{onnx,json} and cross.safetensors (`--calibrate` only judge.json's thresholds,
from the shipped models). The sealed test split is never read.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from typing import Any

import click
import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss
from sklearn.model_selection import GroupKFold
from sklearn.neural_network import MLPClassifier

from dreamstream.agents import pair_features as pf
from dreamstream.agents.learned_judge import (
    CLASSES,
    LearnedJudge,
    Thresholds,
    decide_pair,
    pair_text,
    probabilities,
    read_anyway,
    scores,
)
from dreamstream.agents.merge_supersede import OfflineJudge, Verdict, gate
from dreamstream.schemas.memory import Memory
from dreamstream.streams.core import judge_model
from dreamstream.streams.core.embedding import Embedder, model_path
from dreamstream.streams.dev import judge_corpus as jc

SEED = 20261204
TARGET = 0.97
REVIEW_TARGET = 0.85
"""Proposals a person reads must be right most of the time: 0.75 on the corpus gave 0.55 for merge and
0.1 for supersede proposals on real conversations (bench/audits/real-locomo-reviews.jsonl)."""
MIN_AUTO = 5
"""An automatic threshold needs at least this many calibration decisions above it."""
FLOOR_MARGIN = 0.1
"""The judge's floor (`Thresholds.floor`) lies this far below the least similar calibration pair without an
update's cue that it acted on or proposed: such pairs that far apart are not read at all."""


def pair_matrix(pairs: Sequence[dict[str, Any]], mems: dict[str, Any]) -> np.ndarray:
    """Each labelled pair's features, as the learned judge builds them at ingest."""
    return features_matrix([(mems[p["newer"]], mems[p["older"]]) for p in pairs])


def features_matrix(examples: Sequence[tuple[Memory, Memory]]) -> np.ndarray:
    rules = OfflineJudge()
    rows = []
    for new, old in examples:
        fn, fo = jc.features_of(new), jc.features_of(old)
        ruled = rules.judge_pair(new, old, fn, fo)
        rows.append(pf.pair_vector(new, old, fn, fo, ruled.relation, ruled.rule))
    return pf.matrix(rows)


Ruled = tuple[str, str, float]
"""The rule judge's relation, rule and the pair's cosine."""


def rule_readings(pairs: Sequence[dict[str, Any]], mems: dict[str, Memory]) -> list[Ruled]:
    """The rule judge's reading of each pair (evidence the judge calibrates with)."""
    rules = OfflineJudge()
    out: list[Ruled] = []
    for p in pairs:
        new, old = mems[p["newer"]], mems[p["older"]]
        v = rules.judge_pair(new, old, jc.features_of(new), jc.features_of(old))
        out.append((v.relation, v.rule, float(v.scores.get("cos", 0.0))))
    return out


AUGMENT = 0.25
"""Share of train pairs also seen with one side's subject worded as another producer would ("User ...")."""


def revoiced_pairs(pairs: Sequence[dict[str, Any]], mems: dict[str, Memory], embed: Embedder,
                   rows: Sequence[dict[str, Any]]) -> dict[str, tuple[Memory, Memory]]:
    """Pair id -> (newer, older) with one side revoiced (`judge_corpus.revoiced`), for a seeded share."""
    import random

    rng = random.Random(SEED)
    names = {person: jc.person_name([r["text"] for r in rows if r["person"] == person])
             for person in {p["person"] for p in pairs}}
    chosen: dict[str, tuple[str, str]] = {}
    for p in pairs:
        if rng.random() >= AUGMENT:
            continue
        side = rng.choice(("newer", "older"))
        text = jc.revoiced(mems[p[side]].text, names[p["person"]])
        if text:
            chosen[p["id"]] = (side, text)
    texts = sorted({t for _, t in chosen.values()})
    vecs, feats = embed.encode_with_features(texts)
    made = {t: (v, f.to_payload()) for t, v, f in zip(texts, vecs, feats, strict=True)}
    out = {}
    for p in pairs:
        if p["id"] in chosen:
            side, text = chosen[p["id"]]
            m = replace(mems[p[side]], text=text, vector=np.asarray(made[text][0], np.float32),
                        features=made[text][1])
            new, old = (m, mems[p["older"]]) if side == "newer" else (mems[p["newer"]], m)
            out[p["id"]] = (new, old)
    return out


def _candidates() -> dict[str, Any]:
    return {
        "linear_c0.03": lambda: LogisticRegression(C=0.03, max_iter=4000),
        "linear_c0.1": lambda: LogisticRegression(C=0.1, max_iter=4000),
        "linear_c0.3": lambda: LogisticRegression(C=0.3, max_iter=4000),
        "mlp64": lambda: MLPClassifier((64,), alpha=3.0, early_stopping=True, random_state=SEED, max_iter=800),
    }


def _full_probs(model: Any, x: np.ndarray) -> np.ndarray:
    """Probabilities over every class, also those a fold never saw."""
    out = np.zeros((len(x), len(CLASSES)))
    out[:, list(model.classes_)] = model.predict_proba(x)
    return out


def _standardise(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    return mean, np.where(scale < 1e-6, 1.0, scale)


def choose(x: np.ndarray, y: np.ndarray, groups: Sequence[str]) -> tuple[str, dict[str, float]]:
    """The head with the lowest cross-validated log-loss, folds by person."""
    losses: dict[str, float] = {}
    folds = list(GroupKFold(n_splits=5).split(x, y, groups))
    for name, make in _candidates().items():
        probs = np.zeros((len(x), len(CLASSES)))
        for tr, te in folds:
            mean, scale = _standardise(x[tr])
            model = make().fit((x[tr] - mean) / scale, y[tr])
            probs[te] = _full_probs(model, (x[te] - mean) / scale)
        probs = np.clip(probs, 1e-7, 1)
        losses[name] = round(float(log_loss(y, probs / probs.sum(axis=1, keepdims=True),
                                            labels=range(len(CLASSES)))), 4)
        click.echo(f"  {name}: cross-validated log-loss {losses[name]}", err=True)
    return min(losses, key=lambda k: losses[k]), losses


def _layers(model: Any) -> list[tuple[np.ndarray, np.ndarray]]:
    """The fitted head as dense layers over all classes (a class it never saw gets no mass)."""
    cols = list(model.classes_)
    if isinstance(model, LogisticRegression):
        hidden: list[tuple[np.ndarray, np.ndarray]] = []
        w_out, b_out = model.coef_.T, model.intercept_
    else:
        hidden = [(w, b) for w, b in zip(model.coefs_[:-1], model.intercepts_[:-1], strict=True)]
        w_out, b_out = model.coefs_[-1], model.intercepts_[-1]
    w = np.zeros((w_out.shape[0], len(CLASSES)))
    b = np.full(len(CLASSES), -30.0)
    w[:, cols], b[cols] = w_out, b_out
    return [*hidden, (w, b)]


Z = 0.0
"""How far below its calibration precision an automatic action's precision is taken to be (the lower
end of a Wilson interval, in standard deviations). 0: the point estimate. 0.5 and 1.0 were measured:
they turn off the rule-backed ways to act and with them the plain updates the cross-encoder is unsure
of ("Noor lives in Tunis." / "Noor moved to Sfax."), for one fewer wrong merge in a hundred."""


def lower_bound(right: int, n: int, z: float = Z) -> float:
    """Wilson score interval's lower end for `right` of `n`."""
    if not n:
        return 0.0
    p = right / n
    centre = p + z * z / (2 * n)
    spread = z * ((p * (1 - p) + z * z / (4 * n)) / n) ** 0.5
    return (centre - spread) / (1 + z * z / n)


GRID = tuple(round(1.0 - 0.005 * i, 3) for i in range(141))  # 1.0 down to 0.3


Gated = tuple[bool, bool, bool, bool]
"""Whether the gate turns a merge keeping the newer memory, one keeping the older, one whose fuller side the
policy picks, and a supersede, into a review item (`gated`)."""


def gated(pairs: Sequence[dict[str, Any]], mems: dict[str, Memory]) -> list[Gated]:
    """Per pair, what `merge_supersede.gate` (the checks every automatic action passes at ingest) does to each
    action: the thresholds are calibrated on what ships, so a merge the gate stops is a review item there, not
    a wrong merge."""
    def stops(new: Memory, old: Memory, relation: str, fuller: bool | None) -> bool:
        verdict = Verdict(old.memory_id, relation, 1.0, "calibration", {}, fuller)  # type: ignore[arg-type]
        return gate(verdict, new, old, LearnedJudge.session_veto).relation != relation

    out = []
    for p in pairs:
        new, old = mems[p["newer"]], mems[p["older"]]
        out.append((stops(new, old, "same", True), stops(new, old, "same", False), stops(new, old, "same", None),
                    stops(new, old, "replaces", None)))
    return out


def tally(s: Sequence[dict[str, float]], h: Sequence[dict[str, float]], ruled: Sequence[Ruled],
          cls: Sequence[str], t: Thresholds, gates: Sequence[Gated] | None = None) -> dict[str, list[int]]:
    """Decisions and right ones per outcome, with the judge's own decision function and, given `gates`, the
    gate after it."""
    out = {k: [0, 0] for k in ("merge", "supersede", "review_same", "review_replaces")}
    names = {"same": "merge", "replaces": "supersede", "review_same": "review_same",
             "review_replaces": "review_replaces"}
    for i, (si, hi, (relation, rule, cos), c) in enumerate(zip(s, h, ruled, cls, strict=True)):
        rel, _, why, new_fuller = decide_pair(si, hi, relation, rule, cos, t)
        if gates is not None and why != "exact_text":
            if rel == "same" and gates[i][0 if new_fuller else 1 if new_fuller is False else 2]:
                rel = "review_same"
            elif rel == "replaces" and gates[i][3]:
                rel = "review_replaces"
        if rel not in names:
            continue
        if rel == "same":
            right = c in (("same_new", "same_equal") if new_fuller else ("same_old", "same_equal"))
        elif rel == "review_same":
            right = c.startswith("same")
        else:
            right = c == "update"
        out[names[rel]][0] += 1
        out[names[rel]][1] += right
    return out


def calibrate(probs: np.ndarray, head: np.ndarray, ruled: Sequence[Ruled], cls: Sequence[str],
              cued: Sequence[bool], gates: Sequence[Gated] | None = None) -> tuple[Thresholds, dict[str, Any]]:
    """Each threshold in turn, the lowest on `GRID` at which its outcome stays right at least the target
    share of the time (0.97 for an automatic action, with at least `MIN_AUTO` decisions; `REVIEW_TARGET`
    for proposals), evaluated through `decide_pair` and the gate on the calibration split."""
    s = [scores(p) for p in probs]
    h = [scores(p) for p in head]
    t = Thresholds(target=TARGET)
    plan = (("merge", "merge", TARGET), ("merge_ruled", "merge", TARGET), ("supersede", "supersede", TARGET),
            ("supersede_ruled", "supersede", TARGET), ("supersede_review", "review_replaces", REVIEW_TARGET),
            ("merge_review", "review_same", REVIEW_TARGET))
    for field, outcome, target in plan:
        best = getattr(t, field)
        before = tally(s, h, ruled, cls, t, gates)[outcome][0]  # a threshold that adds no decision stays off
        for g in GRID:
            n, right = tally(s, h, ruled, cls, replace(t, **{field: g}), gates)[outcome]
            sure = lower_bound(right, n) if target == TARGET else (right / n if n else 0.0)
            if n > before and n >= MIN_AUTO and sure >= target:
                best = g
        t = replace(t, **{field: best})
    acted = [cos for si, hi, (relation, rule, cos), cue in zip(s, h, ruled, cued, strict=True)
             if not cue and decide_pair(si, hi, relation, rule, cos, t)[0] != "unrelated"]
    if acted:
        t = replace(t, floor=round(min(acted) - FLOOR_MARGIN, 3))
    got = tally(s, h, ruled, cls, t, gates)
    mergeable = sum(c in ("same_new", "same_old", "same_equal") for c in cls)
    updates = sum(c == "update" for c in cls)

    def fig(outcome: str, of: int | None = None) -> dict[str, Any]:
        n, right = got[outcome]
        out: dict[str, Any] = {"decisions": n, "precision": round(right / n, 4) if n else None}
        if of is not None:
            out |= {"of": of, "recall": round(right / of, 4) if of else None}
        return out

    below = sum(cos < t.floor and not cue for (_, _, cos), cue in zip(ruled, cued, strict=True))
    return t, {"merge": fig("merge", mergeable), "supersede": fig("supersede", updates),
               "merge_review": fig("review_same"), "supersede_review": fig("review_replaces"),
               "floor": {"least_similar_acted": round(min(acted), 4) if acted else None,
                         "pairs_below": below, "of": len(ruled)}}


SWAPPED = {"same_new": "same_old", "same_old": "same_new"}


def train_cross(examples: Sequence[tuple[Memory, Memory, str]], epochs: float = 3.0) -> dict[str, Any]:
    """Fine-tune MiniLM as a cross-encoder on (newer, older, class) examples; write its layers and classifier."""
    import random

    import torch
    from safetensors.torch import save_file
    from transformers import AutoModel, AutoTokenizer

    random.seed(SEED)
    torch.manual_seed(SEED)
    tok = AutoTokenizer.from_pretrained(model_path())
    enc = AutoModel.from_pretrained(model_path())
    data: list[tuple[tuple[str, str], int]] = []
    for new, old, cls in examples:
        data.append((pair_text(new, old), CLASSES.index(cls)))
        if cls.startswith("same") or (cls == "none" and random.random() < 0.3):
            # one fact read the other way round: which is fuller swaps, the time cue stays
            gap = pair_text(new, old)[1].split(") ", 1)[0] + ") "
            data.append(((new.text, gap + old.text), CLASSES.index(SWAPPED.get(cls, cls))))
    for q in enc.embeddings.parameters():
        q.requires_grad = False
    head = torch.nn.Linear(2 * enc.config.hidden_size, len(CLASSES))
    params = [q for q in enc.parameters() if q.requires_grad] + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=5e-5, weight_decay=0.01)
    batch = 16
    steps = int(len(data) * epochs / batch)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda k: min(1.0, (k + 1) / (0.1 * steps)) * max(0.0, (steps - k) / steps))

    def forward(texts: Sequence[tuple[str, str]]) -> Any:
        x = tok([a for a, _ in texts], [b for _, b in texts], padding=True, truncation=True,
                max_length=judge_model.CROSS_MAX_TOKENS, return_tensors="pt")
        x["token_type_ids"] = torch.zeros_like(x["input_ids"])  # the ONNX graph reads no segment ids
        h = enc(**x).last_hidden_state
        m = x["attention_mask"].unsqueeze(-1).float()
        return head(torch.cat([h[:, 0], (h * m).sum(1) / m.sum(1)], dim=-1))

    enc.train()
    step, start, losses = 0, time.perf_counter(), []
    with click.progressbar(length=steps, label="cross-encoder", file=sys.stderr) as bar:
        while step < steps:
            random.shuffle(data)
            for i in range(0, len(data) - batch + 1, batch):
                if step >= steps:
                    break
                chunk = data[i:i + batch]
                loss = torch.nn.functional.cross_entropy(forward([c[0] for c in chunk]),
                                                         torch.tensor([c[1] for c in chunk]))
                loss.backward()
                opt.step()
                sched.step()
                opt.zero_grad()
                losses.append(loss.item())
                step += 1
                bar.update(1)
    tensors = {k: v.detach().to(torch.float16).contiguous() for k, v in enc.state_dict().items()
               if k.startswith("encoder.")}
    tensors |= {"head.weight": head.weight.detach().contiguous(), "head.bias": head.bias.detach().contiguous()}
    save_file(tensors, str(judge_model.MODEL_DIR / judge_model.CROSS_FILE))
    return {"examples": len(data), "steps": steps, "epochs": epochs,
            "last_loss": round(float(np.mean(losses[-50:])), 4), "seconds": round(time.perf_counter() - start, 1)}


@click.command()
@click.option("--head-only", is_flag=True, help="Keep the shipped cross-encoder; retrain the head only.")
@click.option("--cross-only", is_flag=True, help="Keep the shipped head; retrain the cross-encoder only.")
@click.option("--calibrate", "calibrate_only", is_flag=True,
              help="Keep both shipped models; recompute the thresholds and the floor only.")
@click.option("--with-written", is_flag=True,
              help="Also train on the pairs written as pairs (bench/corpus/written): measured, not shipped.")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
def main(head_only: bool, cross_only: bool, calibrate_only: bool, with_written: bool, as_json: bool) -> None:
    """Train, calibrate and write the learned judge (streams/core/models/)."""
    import onnxruntime as ort

    if head_only + cross_only + calibrate_only > 1:
        raise click.UsageError("give at most one of --head-only, --cross-only and --calibrate")
    start = time.perf_counter()
    labels = [p for p in jc.labelled_pairs() if p["split"] in ("train", "calibration")]  # never "test"
    rows = jc.stream_rows()
    if calibrate_only:
        labels = [p for p in labels if p["split"] == "calibration"]
    elif with_written:  # training only, never calibration (their share of actions is no stream's)
        written_rows, written = jc.written_pairs(jc.WRITTEN, "train")
        labels, rows = labels + written, rows + written_rows
    needed = {p["person"] for p in labels}
    click.echo(f"embedding {sum(r['person'] in needed for r in rows)} memories ...", err=True)
    embed = Embedder(batch_size=64)
    mems = jc.by_id(jc.memories([r for r in rows if r["person"] in needed], embed))
    cal = [p for p in labels if p["split"] == "calibration"]
    before = judge_model.MODEL_DIR / "judge.json"
    shipped: dict[str, Any] = json.loads(before.read_text()) if before.exists() else {}
    kept = ("head", "cv_log_loss", "cross_training", "train_pairs", "revoiced_pairs")
    if calibrate_only or cross_only:
        if not all(k in shipped for k in kept) or not (judge_model.MODEL_DIR / "judge.onnx").exists():
            raise click.UsageError(f"{'--calibrate' if calibrate_only else '--cross-only'} needs a trained judge "
                                   f"in {judge_model.MODEL_DIR}: run without it first")
        graph = (judge_model.MODEL_DIR / "judge.onnx").read_bytes()
        trained = {k: shipped[k] for k in kept}
        if cross_only:
            trained["cross_training"] = train_cross(train_examples(labels, mems, embed, rows))
    else:
        graph, trained = train(labels, mems, embed, rows, head_only, shipped.get("cross_training", {}))
    click.echo(f"calibrating on {len(cal)} pairs ...", err=True)
    session = ort.InferenceSession(graph, providers=["CPUExecutionProvider"])  # the graph as shipped
    p_head = np.asarray(session.run(None, {"x": pair_matrix(cal, mems)})[0])
    cross = judge_model.CrossEncoder(judge_model.MODEL_DIR / judge_model.CROSS_FILE, threads=0)
    texts = [pair_text(mems[p["newer"]], mems[p["older"]]) for p in cal]
    cls = [p["cls"] for p in cal]
    ruled = rule_readings(cal, mems)
    cued = [read_anyway(mems[p["newer"]].text, mems[p["older"]].text) for p in cal]
    gates = gated(cal, mems)
    th, fig = calibrate(probabilities(p_head, texts, cross), p_head, ruled, cls, cued, gates)
    _, head_fig = calibrate(p_head, p_head, ruled, cls, cued, gates)
    meta = {
        "classes": list(CLASSES), "features": pf.N_FEATURES, "scalars": list(pf.SCALAR_NAMES),
        "seed": SEED, "cross": True, **trained,
        "thresholds": asdict(th), "calibration": fig, "calibration_head_alone": head_fig,
        "calibration_pairs": len(cal),
        "train_seconds": shipped.get("train_seconds") if calibrate_only else round(time.perf_counter() - start, 1),
    }
    before.write_text(json.dumps(meta, indent=2) + "\n")
    judge_model.load.cache_clear()
    judge_model.load_cross.cache_clear()
    if as_json:
        print(json.dumps(meta, indent=2))
    else:
        click.echo(f"head {meta['head']} (cv log-loss {meta['cv_log_loss'][meta['head']]}); thresholds {asdict(th)}")
        click.echo(f"calibration, head and cross-encoder: {json.dumps(fig)}")
        click.echo(f"calibration, head alone: {json.dumps(head_fig)}")
        click.echo(f"wrote {judge_model.MODEL_DIR} in {round(time.perf_counter() - start, 1)} s")


def train(labels: Sequence[dict[str, Any]], mems: dict[str, Memory], embed: Embedder, rows: list[dict[str, Any]],
          head_only: bool, kept: dict[str, Any]) -> tuple[bytes, dict[str, Any]]:
    """The head (chosen by cross-validation, fitted on the train split) and, unless `head_only`, the
    cross-encoder; writes both and returns the head's graph and what the training reports."""
    train = [p for p in labels if p["split"] == "train"]
    revoiced = revoiced_pairs(train, mems, embed, rows)
    click.echo(f"features of {len(train)} train (+{len(revoiced)} revoiced) pairs ...", err=True)
    extra = [p for p in train if p["id"] in revoiced]
    x_tr = np.vstack([pair_matrix(train, mems), features_matrix([revoiced[p["id"]] for p in extra])])
    y_tr = np.array([CLASSES.index(p["cls"]) for p in [*train, *extra]])
    best, losses = choose(x_tr, y_tr, [p["person"] for p in [*train, *extra]])
    mean, scale = _standardise(x_tr)
    np.random.seed(SEED)
    model = _candidates()[best]().fit((x_tr - mean) / scale, y_tr)
    graph = judge_model.build_graph(_layers(model), mean, scale)
    judge_model.MODEL_DIR.mkdir(parents=True, exist_ok=True)
    (judge_model.MODEL_DIR / "judge.onnx").write_bytes(graph)
    cross_fig: dict[str, Any] = {**kept, "kept": True} if head_only else train_cross(
        train_examples(labels, mems, embed, rows, revoiced))
    return graph, {"head": best, "cv_log_loss": losses, "cross_training": cross_fig, "train_pairs": len(train),
                   "revoiced_pairs": len(revoiced)}


def train_examples(labels: Sequence[dict[str, Any]], mems: dict[str, Memory], embed: Embedder,
                   rows: list[dict[str, Any]], revoiced: dict[str, tuple[Memory, Memory]] | None = None,
                   ) -> list[tuple[Memory, Memory, str]]:
    """The cross-encoder's (newer, older, class) examples: the train split, a seeded share revoiced."""
    train = [p for p in labels if p["split"] == "train"]
    if revoiced is None:
        revoiced = revoiced_pairs(train, mems, embed, rows)
    return [(*revoiced.get(p["id"], (mems[p["newer"]], mems[p["older"]])), p["cls"]) for p in train]


if __name__ == "__main__":
    main(sys.argv[1:])
