"""`make train-judge`: distil the labelled corpus into the learned judge, seeded, on CPU.

    python -m dreamstream.streams.dev.train_judge [--json]

Reads bench/corpus (streams, labels), embeds every memory with the product's model, builds each
labelled pair's features (`agents.pair_features`), chooses between a linear head and a one-layer
MLP by cross-validation over the train split's people, fits the chosen one on the whole train
split, calibrates the thresholds on the calibration split (automatic where precision >= 0.97,
review where a proposal is right at least `REVIEW_TARGET` of the time), and writes
streams/core/models/judge.{onnx,json}. The sealed test split is never read here.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import click
import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss
from sklearn.model_selection import GroupKFold
from sklearn.neural_network import MLPClassifier

from dreamstream.agents import pair_features as pf
from dreamstream.agents.learned_judge import CLASSES, Thresholds, scores
from dreamstream.agents.merge_supersede import OfflineJudge
from dreamstream.streams.core import judge_model
from dreamstream.streams.core.embedding import Embedder
from dreamstream.streams.dev import judge_corpus as jc

SEED = 20261204
TARGET = 0.97
REVIEW_TARGET = 0.75
MIN_AUTO = 5
"""An automatic threshold needs at least this many calibration decisions above it."""


def pair_matrix(pairs: Sequence[dict[str, Any]], mems: dict[str, Any]) -> np.ndarray:
    """Each labelled pair's features, as the learned judge builds them at ingest."""
    rules = OfflineJudge()
    rows = []
    for p in pairs:
        new, old = mems[p["newer"]], mems[p["older"]]
        fn, fo = jc.features_of(new), jc.features_of(old)
        rows.append(pf.pair_vector(new, old, fn, fo, rules.judge_pair(new, old, fn, fo).relation))
    return pf.matrix(rows)


def _candidates() -> dict[str, Any]:
    return {
        "linear_c0.05": lambda: LogisticRegression(C=0.05, max_iter=3000),
        "linear_c0.3": lambda: LogisticRegression(C=0.3, max_iter=3000),
        "mlp64": lambda: MLPClassifier((64,), alpha=0.05, early_stopping=True, random_state=SEED, max_iter=400),
        "mlp128": lambda: MLPClassifier((128,), alpha=0.2, early_stopping=True, random_state=SEED, max_iter=400),
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
        losses[name] = round(float(log_loss(y, np.clip(probs, 1e-7, 1), labels=range(len(CLASSES)))), 4)
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


def _auto_threshold(score: np.ndarray, right: np.ndarray, target: float) -> tuple[float, int, float]:
    """The lowest score whose decisions above it are right at least `target` of the time (and at least
    `MIN_AUTO` of them): (threshold, decisions, precision); 1.01 (never) when none is."""
    order = np.argsort(-score, kind="stable")
    hits = np.cumsum(right[order])
    n = np.arange(1, len(order) + 1)
    prec = hits / n
    ok = [k for k in range(len(order)) if n[k] >= MIN_AUTO and prec[k] >= target
          and (k + 1 == len(order) or score[order[k + 1]] < score[order[k]])]
    if not ok:
        return 1.01, 0, 0.0
    k = max(ok)
    return float(score[order[k]]), int(n[k]), float(prec[k])


def _review_threshold(score: np.ndarray, right: np.ndarray, auto: float) -> tuple[float, int, float]:
    """The lowest score from which proposals below the automatic threshold are right at least
    `REVIEW_TARGET` of the time."""
    band = score < auto
    return _auto_threshold(np.where(band, score, -1.0), np.where(band, right, False), REVIEW_TARGET)


def calibrate(probs: np.ndarray, cls: Sequence[str]) -> tuple[Thresholds, dict[str, Any]]:
    """Thresholds from the calibration split's pairs, as the judge reads them."""
    s = [scores(p) for p in probs]
    keep_new = np.array([x["keep_new"] for x in s])
    keep_old = np.array([x["keep_old"] for x in s])
    update = np.array([x["update"] for x in s])
    same_any = np.array([x["same"] for x in s])
    keep = np.maximum(keep_new, keep_old)
    merge_right = np.array([
        c in (("same_new", "same_equal") if kn > ko else ("same_old", "same_equal"))
        for c, kn, ko in zip(cls, keep_new, keep_old, strict=True)])
    merge_score = np.where(keep >= update, keep, 0.0)
    is_update = np.array([c == "update" for c in cls])
    is_same = np.array([c.startswith("same") for c in cls])
    m_auto, m_n, m_p = _auto_threshold(merge_score, merge_right, TARGET)
    s_auto, s_n, s_p = _auto_threshold(update, is_update, TARGET)
    m_rev, mr_n, mr_p = _review_threshold(same_any, is_same, m_auto)
    s_rev, sr_n, sr_p = _review_threshold(update, is_update, s_auto)
    th = Thresholds(merge=round(m_auto, 4), merge_review=round(m_rev, 4), supersede=round(s_auto, 4),
                    supersede_review=round(s_rev, 4), target=TARGET)
    fig = {"merge": {"decisions": m_n, "precision": round(m_p, 4), "of_mergeable": int(sum(
               c in ("same_new", "same_old", "same_equal") for c in cls))},
           "supersede": {"decisions": s_n, "precision": round(s_p, 4), "of_updates": int(is_update.sum())},
           "merge_review": {"proposals": mr_n, "right": round(mr_p, 4)},
           "supersede_review": {"proposals": sr_n, "right": round(sr_p, 4)}}
    return th, fig


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
def main(as_json: bool) -> None:
    """Train, calibrate and write the learned judge (streams/core/models/judge.*)."""
    start = time.perf_counter()
    labels = [p for p in jc.labelled_pairs() if p["split"] in ("train", "calibration")]  # never "test"
    rows = jc.stream_rows()
    needed = {p["person"] for p in labels}
    click.echo(f"embedding {sum(r['person'] in needed for r in rows)} memories ...", err=True)
    mems = jc.by_id(jc.memories([r for r in rows if r["person"] in needed], Embedder(batch_size=64)))
    train = [p for p in labels if p["split"] == "train"]
    cal = [p for p in labels if p["split"] == "calibration"]
    click.echo(f"features of {len(train)} train and {len(cal)} calibration pairs ...", err=True)
    x_tr, x_cal = pair_matrix(train, mems), pair_matrix(cal, mems)
    y_tr = np.array([CLASSES.index(p["cls"]) for p in train])
    best, losses = choose(x_tr, y_tr, [p["person"] for p in train])
    mean, scale = _standardise(x_tr)
    np.random.seed(SEED)
    model = _candidates()[best]().fit((x_tr - mean) / scale, y_tr)
    graph = judge_model.build_graph(_layers(model), mean, scale)
    judge_model.MODEL_DIR.mkdir(parents=True, exist_ok=True)
    (judge_model.MODEL_DIR / "judge.onnx").write_bytes(graph)
    probs = judge_model.JudgeModel.__new__(judge_model.JudgeModel)  # the graph as shipped, before its meta
    import onnxruntime as ort

    probs.session = ort.InferenceSession(graph, providers=["CPUExecutionProvider"])
    p_cal = probs(x_cal)
    th, fig = calibrate(p_cal, [p["cls"] for p in cal])
    meta = {
        "classes": list(CLASSES), "features": pf.N_FEATURES, "scalars": list(pf.SCALAR_NAMES),
        "head": best, "cv_log_loss": losses, "seed": SEED, "thresholds": asdict(th),
        "calibration": fig, "train_pairs": len(train), "calibration_pairs": len(cal),
        "train_seconds": round(time.perf_counter() - start, 1),
    }
    (judge_model.MODEL_DIR / "judge.json").write_text(json.dumps(meta, indent=2) + "\n")
    judge_model.load.cache_clear()
    if as_json:
        print(json.dumps(meta, indent=2))
    else:
        click.echo(f"head {best} (cv log-loss {losses[best]}); thresholds {asdict(th)}")
        click.echo(f"calibration: {json.dumps(fig)}")
        click.echo(f"wrote {judge_model.MODEL_DIR}/judge.onnx ({len(graph) // 1024} KB) in {meta['train_seconds']} s")


if __name__ == "__main__":
    main(sys.argv[1:])
