"""The ONNX graph built from the packaged weights against sentence-transformers on torch (the reference).

fp32 (the default) must give torch's vectors; int8 (opt-in) must stay close (its quality figures are
measured with `DREAM_EMBED_BACKEND=onnx-int8 make bench-quality`, its speed in `make bench`). The judge's word features
must come out with the same words from either runtime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dreamstream.schemas.errors import ConfigError
from dreamstream.streams.core import onnx_model
from dreamstream.streams.core.embedding import Embedder, model_path

pytest.importorskip("sentence_transformers", reason="the torch extra is the reference")

TEXTS = [
    "User moved from Lisbon to Berlin in March.",
    "i switched jobs, now at a small robotics startup",
    "Maya's daughter started violin lessons on Tuesdays.",
    "Q: where do you keep the spare keys? A: under the blue flowerpot",
    "deploy target: fly.io (was heroku until 2024)",
    "User runs about 40 km a week and tracks every run on a Garmin watch.",
    "No longer eats meat; vegetarian since the summer.",
    "The team's standup moved to 9:30 because of the new intern schedule.",
    "Prefers tabs over spaces in Go code, but spaces in Python.",
    "Bought a second-hand cello for €450 from a music shop in Ghent.",
    "Rafael is allergic to peanuts and carries an EpiPen.",
    "Planning a three-week trip through Japan next April, mostly by train.",
    "Favourite film: Spirited Away; watched it again last weekend with Leo.",
    "Our app uses PostgreSQL 16 for auth and Redis for sessions.",
    "Started a pottery class at the community centre; the first bowl cracked in the kiln.",
    "a very long note " + "about many small things, " * 40 + "that ends here.",
]


@pytest.fixture(scope="module")
def encoded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[np.ndarray, list]]:
    cache = tmp_path_factory.mktemp("models")
    mp = pytest.MonkeyPatch()
    mp.setenv("DREAM_MODEL_CACHE", str(cache))
    try:
        return {name: Embedder(backend=name, threads=2).encode_with_features(TEXTS)
                for name in ("torch", "onnx", "onnx-int8")}
    finally:
        mp.undo()


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.asarray((a * b).sum(axis=1))


def test_fp32_graph_gives_torchs_vectors(encoded: dict[str, tuple[np.ndarray, list]]) -> None:
    assert cosines(encoded["onnx"][0], encoded["torch"][0]).min() > 0.9999


def test_int8_graph_stays_close_to_torch(encoded: dict[str, tuple[np.ndarray, list]]) -> None:
    cos = cosines(encoded["onnx-int8"][0], encoded["torch"][0])
    assert cos.mean() >= 0.99 and cos.min() >= 0.97
    norms = np.linalg.norm(encoded["onnx-int8"][0], axis=1)
    assert np.allclose(norms, 1.0, atol=1e-5)


@pytest.mark.parametrize("backend", ["onnx", "onnx-int8"])
def test_word_features_match_torchs(backend: str, encoded: dict[str, tuple[np.ndarray, list]]) -> None:
    ours, ref = encoded[backend][1], encoded["torch"][1]
    for a, b in zip(ours, ref, strict=True):
        assert (a.words, a.names) == (b.words, b.names)
        if a.words:
            assert float(cosines(a.vecs, b.vecs).mean()) > (0.9999 if backend == "onnx" else 0.97)


def test_a_text_past_the_token_limit_is_truncated_not_refused(encoded: dict[str, tuple[np.ndarray, list]]) -> None:
    long_vec = encoded["onnx-int8"][0][-1]
    assert np.isfinite(long_vec).all() and abs(float(np.linalg.norm(long_vec)) - 1.0) < 1e-5


def test_the_graph_is_built_once_into_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DREAM_MODEL_CACHE", str(tmp_path))
    first = onnx_model.graph_path(model_path(), quantized=False)
    stamp = first.stat().st_mtime_ns
    assert onnx_model.graph_path(model_path(), quantized=False) == first
    assert first.stat().st_mtime_ns == stamp  # read, not rebuilt
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no temporary files left behind


def test_an_unknown_backend_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown embedding backend"):
        Embedder(backend="tensorflow")


def test_a_texts_vector_does_not_depend_on_the_padding_of_its_batch(tmp_path: Path) -> None:
    """The graph packs padding away between attentions: a short text batched with a long one (mostly
    padding) gets the vector and word vectors it gets alone, and the same as the plain-op graph's."""
    import onnxruntime as ort

    short, long_text = TEXTS[6], TEXTS[-1]
    embedder = Embedder(backend="onnx", threads=2)
    alone_vec, alone_feats = embedder.encode_with_features([short])
    both_vec, both_feats = embedder.encode_with_features([long_text, short])
    assert float(cosines(alone_vec, both_vec[1:])[0]) > 0.99999
    assert np.abs(alone_feats[0].vecs - both_feats[1].vecs).max() < 1e-4

    plain = tmp_path / "plain.onnx"
    onnx_model.build(Path(model_path()), plain, quantized=False, fused=False)
    tokens = embedder.backend.tokenizer.encode_batch([long_text, short])  # type: ignore[attr-defined]
    feeds = {"input_ids": np.array([t.ids for t in tokens], np.int64),
             "attention_mask": np.array([t.attention_mask for t in tokens], np.int64)}
    ref = ort.InferenceSession(str(plain), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    ours = embedder.backend.session.run(None, feeds)[0]  # type: ignore[attr-defined]
    real = feeds["attention_mask"].astype(bool)
    assert np.abs(ours[real] - ref[real]).max() < 1e-3
    assert not ours[~real].any()  # padding rows come back as zeros, never computed


def test_int8_products_are_exact_on_every_processor(tmp_path: Path) -> None:
    """Without VNNI, ONNX Runtime pairs u8 x s8 products in saturating 16-bit sums: the learned judge's
    int8 cross-encoder gave other scores there than on the machine its thresholds were calibrated on (and
    merged other pairs). The unsigned graph multiplies the same integers as u8 x u8, exact on every machine."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from dreamstream.streams.core import onnx_model

    rng = np.random.default_rng(7)
    weights = (np.where(rng.random((256, 8)) < 0.5, 1.0, -1.0) * rng.uniform(0.9, 1.0, (256, 8))).astype(np.float32)
    weights[::2] = np.abs(weights[::2])  # neighbouring rows of one sign: their products pair up past 16 bits
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
                              [numpy_helper.from_array(weights, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "f.onnx"))
    quantize_dynamic(str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx"), weight_type=QuantType.QInt8)
    onnx_model.unsigned_int8(tmp_path / "q.onnx", tmp_path / "exact.onnx")
    x = rng.uniform(0.0, 1.0, (1, 256)).astype(np.float32)
    x[0, 0] = -0.01  # a zero point above 0: the activations are centred before the product

    def run(name: str) -> np.ndarray:
        return ort.InferenceSession(str(tmp_path / name), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]

    # the exact int8 result, from the quantized operands, in numpy
    scale_x = (x.max() - min(0.0, x.min())) / 255
    zp = np.clip(np.round(-min(0.0, x.min()) / scale_x), 0, 255)
    xq = np.clip(np.round(x / scale_x) + zp, 0, 255) - zp
    wq = {i.name: numpy_helper.to_array(i) for i in onnx.load(str(tmp_path / "q.onnx")).graph.initializer}
    w_int = wq["w_quantized"].astype(np.float64) - float(wq["w_zero_point"])
    expected = (xq.astype(np.float64) @ w_int) * scale_x * float(wq["w_scale"])
    assert np.allclose(run("exact.onnx"), expected, rtol=1e-5, atol=1e-6)
    kinds = {i.name: numpy_helper.to_array(i).dtype for i in onnx.load(str(tmp_path / "exact.onnx")).graph.initializer}
    assert kinds["w_quantized"] == np.uint8  # still an integer graph, not a float one
    assert np.allclose(run("exact.onnx"), x @ weights, rtol=0.05, atol=0.05)  # and near the float graph


def test_which_processors_multiply_int8_exactly() -> None:
    from dreamstream.streams.core import onnx_model

    assert not onnx_model.int8_exact_here("model name : AMD EPYC\nflags : fpu sse2 avx2 fma\n")
    assert onnx_model.int8_exact_here("flags\t\t: fpu avx2 avx512f avx512_vnni\n")
    assert onnx_model.int8_exact_here("Features\t: fp asimd asimddp\n")
