"""The learned judge's models on ONNX Runtime: the evidence head and the cross-encoder.

`make train-judge` writes three files into `streams/core/models/`:
- `judge.onnx`: the head (standardise, dense layers, softmax over `agents.learned_judge.CLASSES`);
- `cross.safetensors`: the cross-encoder's fine-tuned encoder layers and its classifier, float16
  (about 21 MB). The rest of the encoder (the token and position tables) is the packaged MiniLM's
  own, so the graph is built from both at first use, like the embedder's, int8-quantized, and cached;
- `judge.json`: the calibrated thresholds, the feature layout, and the training figures.
All ship with the package, so a fresh install judges without training.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from dreamstream.agents import pair_features as pf
from dreamstream.agents.learned_judge import CLASSES, CrossPredict, LearnedJudge, Thresholds
from dreamstream.agents.merge_supersede import FeaturesOf, OfflineJudge
from dreamstream.schemas.errors import ConfigError
from dreamstream.streams.core import onnx_model
from dreamstream.streams.core.embedding import model_path

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


CROSS_FILE = "cross.safetensors"
CROSS_MAX_TOKENS = 128


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


CROSS_BUILDER = 1
"""The graph the cross-encoder's thresholds were calibrated on: onnx_model's plain-op builder (1)."""


def cross_graph(weights: Path) -> Path:
    """The cross-encoder's int8 graph: the packaged MiniLM with the fine-tuned layers in place, built
    once per weights file (cached beside the embedder's graphs, or in the temp folder)."""
    from safetensors.numpy import load_file

    digest = hashlib.sha256(weights.read_bytes()).hexdigest()[:16]
    name = f"judge-cross-{digest}-b{CROSS_BUILDER}-int8.onnx"
    exact = onnx_model.int8_exact_here()  # else the same integers as u8 x u8 (the thresholds hold)
    layers = {k: v for k, v in load_file(str(weights)).items() if k.startswith("encoder.")}
    for folder in (onnx_model.model_cache_dir(), Path(tempfile.gettempdir()) / "dreamstream-models"):
        path = folder / name
        emulated = path.with_name(path.stem + "-u8.onnx")
        if (path if exact else emulated).exists():
            return path if exact else emulated
        try:
            if not path.exists():
                onnx_model.build(Path(model_path()), path, quantized=True, overrides=layers, fused=False)
            if exact:
                return path
            onnx_model.unsigned_int8(path, emulated)
            return emulated
        except OSError:
            continue
    raise JudgeModelError("no folder to build the cross-encoder's graph in (DREAM_MODEL_CACHE)")


class CrossEncoder:
    """Reads (older, newer) text pairs at once; mean and first-token states, then the classifier."""

    def __init__(self, weights: Path, threads: int = 1) -> None:
        import onnxruntime as ort
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        if not weights.exists():
            raise JudgeModelError(f"the cross-encoder's weights are missing ({weights}): run `make train-judge`")
        tensors = load_file(str(weights))
        self.w = np.asarray(tensors["head.weight"], np.float32)
        self.b = np.asarray(tensors["head.bias"], np.float32)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(cross_graph(weights)), options, providers=["CPUExecutionProvider"])
        self.tokenizer = Tokenizer.from_file(os.path.join(model_path(), "tokenizer.json"))
        self.tokenizer.enable_truncation(CROSS_MAX_TOKENS)
        self.tokenizer.no_padding()  # each pair runs alone (whatever the packaged file sets)

    def __call__(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """One run per pair: the int8 graph scales its activations by the whole input's range, so a pair
        read beside others (and their padding) scored up to 0.024 apart from the same pair alone, and a
        verdict depended on which other memories were candidates. Alone, a pair's score is its own, the
        same in calibration as in service, and one pair a run is also the fastest here (no padding)."""
        if not pairs:
            return np.zeros((0, len(CLASSES)), np.float32)
        rows = []
        for enc in self.tokenizer.encode_batch(list(pairs)):
            ids = np.array([enc.ids], dtype=np.int64)
            hidden = self.session.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids)})[0][0]
            rows.append(np.concatenate([hidden[0], hidden.mean(axis=0)]))
        return _softmax(np.stack(rows) @ self.w.T + self.b)


@cache
def load(folder: Path = MODEL_DIR) -> JudgeModel:
    return JudgeModel(folder)


@cache
def load_cross(folder: Path = MODEL_DIR) -> CrossEncoder | None:
    """The cross-encoder, or None where the model was trained without one (`judge.json` says)."""
    if not load(folder).meta.get("cross"):
        return None
    return CrossEncoder(folder / CROSS_FILE, threads=1)  # the embedder's thread runs beside it: no oversubscription


def learned_judge(featurize: FeaturesOf | None = None, folder: Path = MODEL_DIR) -> LearnedJudge:
    """The shipped learned judge (the rule judge inside it gets `featurize` for old memories)."""
    model = load(folder)
    cross: CrossPredict | None = load_cross(folder)
    return LearnedJudge(predict=model, thresholds=model.thresholds, rules=OfflineJudge(featurize=featurize),
                        cross=cross)
