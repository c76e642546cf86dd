"""The learned judge's model on ONNX Runtime: a small head over `agents.pair_features`.

`make train-judge` writes two files into `streams/core/models/`: `judge.onnx` (standardise, then
dense layers, then softmax over `agents.learned_judge.CLASSES`) and `judge.json` (the calibrated
thresholds, the feature layout it was trained on, and its figures). Both ship with the package
(tens of KB), so a fresh install judges without training.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from dreamstream.agents import pair_features as pf
from dreamstream.agents.learned_judge import CLASSES, LearnedJudge, Thresholds
from dreamstream.agents.merge_supersede import FeaturesOf, OfflineJudge
from dreamstream.schemas.errors import ConfigError

MODEL_DIR = Path(__file__).resolve().parent / "models"
OPSET = 17


class JudgeModelError(ConfigError):
    """The judge's model files are missing or do not fit this version's features."""


def build_graph(layers: Sequence[tuple[np.ndarray, np.ndarray]], mean: np.ndarray, scale: np.ndarray) -> bytes:
    """An ONNX graph: (x - mean) / scale, then Gemm + Relu per hidden layer, Gemm, Softmax."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(mean.astype(np.float32), "mean"),
             numpy_helper.from_array(scale.astype(np.float32), "scale")]
    nodes = [helper.make_node("Sub", ["x", "mean"], ["centred"]),
             helper.make_node("Div", ["centred", "scale"], ["h0"])]
    h = "h0"
    for i, (w, b) in enumerate(layers):
        inits += [numpy_helper.from_array(w.astype(np.float32), f"w{i}"),
                  numpy_helper.from_array(b.astype(np.float32), f"b{i}")]
        out = f"z{i}"
        nodes.append(helper.make_node("Gemm", [h, f"w{i}", f"b{i}"], [out]))
        if i < len(layers) - 1:
            nodes.append(helper.make_node("Relu", [out], [f"h{i + 1}"]))
            h = f"h{i + 1}"
        else:
            nodes.append(helper.make_node("Softmax", [out], ["probs"], axis=1))
    graph = helper.make_graph(
        nodes, "dreamstream-judge",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, int(mean.shape[0])])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [None, int(layers[-1][0].shape[1])])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


class JudgeModel:
    """The head on ONNX Runtime; one session per process (`load`)."""

    def __init__(self, folder: Path = MODEL_DIR) -> None:
        import onnxruntime as ort

        meta_path, graph_path = folder / "judge.json", folder / "judge.onnx"
        if not meta_path.exists() or not graph_path.exists():
            raise JudgeModelError(f"the learned judge's model is missing in {folder}: run `make train-judge`")
        self.meta: dict[str, Any] = json.loads(meta_path.read_text())
        if self.meta.get("classes") != list(CLASSES) or self.meta.get("features") != pf.N_FEATURES \
                or self.meta.get("scalars") != list(pf.SCALAR_NAMES):
            raise JudgeModelError(f"{graph_path} was trained on other features: run `make train-judge`")
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(graph_path), options, providers=["CPUExecutionProvider"])
        self.thresholds = Thresholds.from_dict(self.meta["thresholds"])

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if not len(x):
            return np.zeros((0, len(CLASSES)), np.float32)
        return np.asarray(self.session.run(None, {"x": np.ascontiguousarray(x, np.float32)})[0])


@cache
def load(folder: Path = MODEL_DIR) -> JudgeModel:
    return JudgeModel(folder)


def learned_judge(featurize: FeaturesOf | None = None, folder: Path = MODEL_DIR) -> LearnedJudge:
    """The shipped learned judge (the rule judge inside it gets `featurize` for old memories)."""
    model = load(folder)
    return LearnedJudge(predict=model, thresholds=model.thresholds, rules=OfflineJudge(featurize=featurize))
