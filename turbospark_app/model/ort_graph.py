"""The compact model's weight matmuls as ONNX Runtime sessions (`MatMulNBits` kernels).

One small graph (session) per stage of a forward pass; attention stays in numpy between them:

    embed:   x            -> qkv           (attn_norm 0, q|k|v of layer 0, bias, q scale)
    layer i: x, attn      -> x_out, qkv    (o proj + residual, ffn_norm, gate|up, SwiGLU,
                                            down + residual, then layer i+1's attn_norm, q|k|v)
    head:    x            -> logits        (output_norm, output head)

so a decode step is n_layers + 2 kernel-library calls. Each stage exists twice: for decode
(one token: weights prepacked, int8 activations per block of 32, like llama.cpp's dot products)
and for prefill chunks (weights as run-time inputs: dequantized to float32 per call, exact;
see `build_stage_protos`). A prompt prefilled with int8 activations drifted enough on the
default model to change its greedy answer; the exact prefill costs no speed for large chunks.

RMSNorm weights and 1/sqrt(head_dim) act on activations (`SimplifiedLayerNormalization`, one
`Mul`), never on the weights, so the blocks stay the GGUF's. A matrix with minimums adds
`(block sums of x) @ mins.T` to the re-centred 4/8-bit product (see `quant_blocks.py`).

Weights are never copied into the graph proto when they live in the cache: initializers are
ONNX "external data" pointing into the cache entry's .npy files at their data offset.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from .gguf_file import LlamaConfig
from .quant_blocks import DenseMatrix, Matrix

# MatMulNBits accuracy_level per weight bit width: 4 = int8 activations (the fast CPU path),
# 0 = float32 activations (exact, slow).
ACCURACY_LEVEL = {4: 4, 8: 4}
_OPSET = 21

ExternalRef = Callable[[np.ndarray], tuple[str, int] | None]
"""Where an array lives on disk: (file name in the folder, byte offset), or None (inline)."""


@dataclass
class LayerMatrices:
    """One layer's weight matmuls (each a list: formats that differ cannot share a call)."""

    qkv: list[Matrix]  # rows [q | k | v] (q/k rows of NeoX models permuted to adjacent pairs)
    o: list[Matrix]
    gate_up: list[Matrix]  # rows [gate | up]
    down: list[Matrix]
    attn_norm: np.ndarray  # (dim,) float32
    ffn_norm: np.ndarray  # (dim,) float32
    bqkv: np.ndarray | None  # (nqkv,) float32, qwen2 only


class _Graph:
    def __init__(self, external: ExternalRef, weights_as_inputs: bool = False) -> None:
        self.nodes: list = []
        self.inits: list = []
        self.inputs: list = []
        self.outputs: list = []
        self.feeds: dict[str, np.ndarray] = {}  # weights passed at run time (weights_as_inputs)
        self._external = external
        self._as_inputs = weights_as_inputs
        self._n = 0

    def name(self, base: str) -> str:
        self._n += 1
        return f"{base}_{self._n}"

    def const(self, base: str, arr: np.ndarray) -> str:
        from onnx import TensorProto, helper, numpy_helper

        name = self.name(base)
        if self._as_inputs and arr.nbytes >= 4096:
            dtype = helper.np_dtype_to_tensor_dtype(arr.dtype)
            self.inputs.append(helper.make_tensor_value_info(name, dtype, list(arr.shape)))
            self.feeds[name] = arr
            return name
        where = self._external(arr) if arr.nbytes >= 4096 else None
        if where is None:
            self.inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
            return name
        t = TensorProto(name=name, data_type=helper.np_dtype_to_tensor_dtype(arr.dtype))
        t.dims.extend(arr.shape)
        t.data_location = TensorProto.EXTERNAL
        for key, value in (("location", where[0]), ("offset", where[1]), ("length", arr.nbytes)):
            entry = t.external_data.add()
            entry.key, entry.value = key, str(value)
        self.inits.append(t)
        return name

    def node(self, op: str, inputs: list[str], n_out: int = 1, domain: str = "", **attrs) -> list[str]:
        from onnx import helper

        outs = [self.name(op.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, domain=domain or None, **attrs))
        return outs

    def input(self, name: str, width: int) -> str:
        from onnx import TensorProto, helper

        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, ["T", width]))
        return name

    def output(self, src: str, name: str, width: int) -> None:
        from onnx import TensorProto, helper

        self.nodes.append(helper.make_node("Identity", [src], [name]))
        self.outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, ["T", width]))

    # -- building blocks --------------------------------------------------------------------

    def rms(self, x: str, weight: np.ndarray, eps: float) -> str:
        return self.node("SimplifiedLayerNormalization", [x, self.const("norm", weight)],
                         axis=-1, epsilon=float(eps), stash_type=1)[0]

    def linear(self, x: str, mats: list[Matrix]) -> str:
        """x (T, k) @ [m.T for m in mats] concatenated: (T, sum of rows)."""
        outs = [self._one(x, m) for m in mats]
        return outs[0] if len(outs) == 1 else self.node("Concat", outs, axis=1)[0]

    def _one(self, x: str, m: Matrix) -> str:
        if isinstance(m, DenseMatrix):
            return self.node("Gemm", [x, self.const("w", m.weight)], transB=1)[0]
        n, k = m.shape
        y = self.node(
            "MatMulNBits",
            [x, self.const("q", m.packed), self.const("s", m.scales), self.const("z", m.zero_points())],
            domain="com.microsoft", K=k, N=n, bits=m.bits, block_size=m.block_size,
            accuracy_level=ACCURACY_LEVEL[m.bits],
        )[0]
        if m.mins is None:
            return y
        nb = k // m.block_size
        shape = self.const("shape", np.array([-1, nb, m.block_size], np.int64))
        blocks = self.node("Reshape", [x, shape])[0]  # (T, nb, bs)
        axes = self.const("axes", np.array([2], np.int64))
        sums = self.node("ReduceSum", [blocks, axes], keepdims=0)[0]  # (T, nb)
        corr = self.node("Gemm", [sums, self.const("mins", m.mins)], transB=1)[0]  # (T, n)
        return self.node("Add", [y, corr])[0]


def _model(g: _Graph) -> bytes:
    from onnx import helper

    graph = helper.make_graph(g.nodes, "turbospark", g.inputs, g.outputs, g.inits)
    model = helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", _OPSET), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    return model.SerializeToString()


def build_stage_protos(
    config: LlamaConfig,
    layers: list[LayerMatrices],
    head: list[Matrix],
    output_norm: np.ndarray,
    external: ExternalRef,
    weights_as_inputs: bool = False,
) -> list[tuple[bytes, dict[str, np.ndarray]]]:
    """(serialized ONNX model, weight feeds) of every stage, in order: embed, layers..., head.

    Decode stages hold their weights as initializers, which ONNX Runtime prepacks for its int8
    kernels. With `weights_as_inputs` (the prefill stages) the weights are run-time inputs
    instead (the feeds: views of the cache's memory maps, passed without a copy): nothing is
    prepacked and `MatMulNBits` dequantizes each block to float32 and runs an sgemm, exact and
    as fast as float32 weights for a large chunk, with no second copy of the weights in memory.
    """
    c = config
    nqkv = c.q_dim + 2 * c.kv_dim
    qkv_scale = np.ones(nqkv, np.float32)
    qkv_scale[: c.q_dim] = 1.0 / np.sqrt(c.head_dim)  # on the activations: blocks stay exact

    def qkv_of(g: _Graph, x: str, layer: LayerMatrices) -> None:
        y = g.linear(g.rms(x, layer.attn_norm, c.norm_eps), layer.qkv)
        if layer.bqkv is not None:
            y = g.node("Add", [y, g.const("bias", layer.bqkv)])[0]
        g.output(g.node("Mul", [y, g.const("qscale", qkv_scale)])[0], "qkv", nqkv)

    g = _Graph(external, weights_as_inputs)
    qkv_of(g, g.input("x", c.dim), layers[0])
    protos = [(_model(g), g.feeds)]
    for i, layer in enumerate(layers):
        g = _Graph(external, weights_as_inputs)
        x, a = g.input("x", c.dim), g.input("attn", c.q_dim)
        x1 = g.node("Add", [x, g.linear(a, layer.o)])[0]
        gu = g.linear(g.rms(x1, layer.ffn_norm, c.norm_eps), layer.gate_up)
        gate, up = g.node("Split", [gu], n_out=2, axis=1, num_outputs=2)
        act = g.node("Mul", [g.node("Mul", [gate, g.node("Sigmoid", [gate])[0]])[0], up])[0]
        x2 = g.node("Add", [x1, g.linear(act, layer.down)])[0]
        g.output(x2, "x_out", c.dim)
        if i + 1 < len(layers):
            qkv_of(g, x2, layers[i + 1])
        protos.append((_model(g), g.feeds))
    g = _Graph(external, weights_as_inputs)
    h = g.input("x", c.dim)
    g.output(g.linear(g.rms(h, output_norm, c.norm_eps), head), "logits", c.vocab_size)
    protos.append((_model(g), g.feeds))
    return protos


def default_threads() -> int:
    """Kernel threads: $TURBOSPARK_THREADS, else every core the process may use."""
    env = os.environ.get("TURBOSPARK_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS
        return max(1, os.cpu_count() or 1)


def make_session(proto: bytes, folder: Path | None, threads: int | None = None):
    """An ONNX Runtime CPU session over `proto`; external data is read from `folder`.

    Its worker threads sleep between runs instead of spinning: numpy (attention) runs between
    two stages, and spinning ORT workers starve it (measured: chunked attention 5x slower).
    """
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads or default_threads()
    so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    # The graphs are already what should run (fused stacks, contrib norms): skipping the
    # optimizer passes cuts session creation (the warm load) by ~40%; weights are prepacked anyway.
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.log_severity_level = 3
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if folder is not None:
        so.add_session_config_entry(
            "session.model_external_initializers_file_folder_path", str(folder))
    return ort.InferenceSession(proto, so, providers=["CPUExecutionProvider"])
