"""The compact model's forward pass as ONE ONNX Runtime graph (`MatMulNBits`, `GroupQueryAttention`).

    x (T, dim) --> [per layer: RMSNorm, q|k|v, GroupQueryAttention over the KV cache
                    (RoPE inside, keys/values written in place), o proj + residual, RMSNorm,
                    gate|up, SwiGLU, down + residual] --> last rows: RMSNorm, head --> logits

(the last layer's o proj and FFN run on the rows the head reads only: the other rows' output
feeds nothing). A decode step and a prefill chunk are one `run` of the same session: no Python
between layers, and the kernel library's thread pool stays busy (`forward.py` binds the KV
cache's buffers as both the past and the present of every layer, so they are updated in place).

Weights stay the GGUF's blocks: RMSNorm weights and 1/sqrt(head_dim) act on activations
(`SimplifiedLayerNormalization`, the attention's `scale`), never on the weights. A matrix with
minimums adds `(block sums of x) @ mins.T` to the re-centred 4/8-bit product (see
`quant_blocks.py`). The kernels quantize activations to int8 per block; with `exact` every
matmul input is first split into its value on that int8 grid plus the remainder, and both
rows go through the kernel (the same weights read once): the product of the first is exact
and the remainder's int8 error is ~1/250 of the plain kernel's (see `_split_exact`). That
doubles a chunk's kernel work, and a one-token step leaves the kernel's fast one-row path, so
the default (`KERNEL_MODES`) splits prompt tokens only: every row of every prompt chunk, in
every layer, so the first reply token's logits are float32's (to ~2e-4 of their range).
Measured on the default model (40 chat prompts): splitting only the last row, only the last
chunk of a longer prompt, or only half of the layers leaves the first token's logits 1-3e-2
off (int8 everywhere: 3e-2) -- the keys and values of every earlier row and layer decide it.
Each stretch between two attentions is then an If with an exact and a plain branch
(`_Graph.segment`); both read the same weight initializers. ONNX Runtime keeps one prepacked
copy of each (memory as the int8 graph's, +70 MiB on a 1B) but repacks per branch: a session
takes ~2.4x the int8 graph's to create (gemma3-shaped 1B Q4_K_M: 0.94 vs 0.38 s). Taking the
weights' nodes out of the Ifs (an If around each split and each fold) halved that and cost 15%
of a 135M decode step (~5 us per If in this graph), so the Ifs stay per stretch.

Weights are never copied into the graph proto when they live in the cache: initializers are
ONNX "external data" pointing into the cache entry's .npy files at their data offset.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ..choice.kernels import KERNEL_MODES
from ..gguf.file import LlamaConfig
from ..gguf.quant_blocks import DenseMatrix, Matrix

# MatMulNBits accuracy_level 4: int8 activations, the only fast CPU path for 4/8-bit blocks
# (levels 0-3 measured ~15x slower per decode step: no prepacked float kernel on x86).
ACCURACY_LEVEL = 4
_OPSET = 21

ExternalRef = Callable[[np.ndarray], tuple[str, int] | None]
"""Where an array lives on disk: (file name in the folder, byte offset), or None (inline)."""


def supports(config: LlamaConfig) -> str | None:
    """Why this model cannot run on the compact graph, or None when it can."""
    if config.head_dim % 16:
        return f"head_dim {config.head_dim} is not a multiple of 16 (GroupQueryAttention needs that)"
    return None


@dataclass
class LayerMatrices:
    """One layer's weight matmuls (each a list: formats that differ cannot share a call)."""

    qkv: list[Matrix]  # rows [q | k | v] (q/k rows of NeoX models permuted to adjacent pairs)
    o: list[Matrix]
    gate_up: list[Matrix]  # rows [gate | up]
    down: list[Matrix]
    attn_norm: np.ndarray | None  # (dim,) float32; None: no pre-norm (OLMo 2)
    ffn_norm: np.ndarray | None  # (dim,) float32
    bqkv: np.ndarray | None  # (nqkv,) float32, families with q/k/v biases
    q_norm: np.ndarray | None = None  # (head_dim,) per head, or (q_dim,) over the projection
    k_norm: np.ndarray | None = None
    post_attn_norm: np.ndarray | None = None  # (dim,) on each branch's output (Gemma, OLMo 2)
    post_ffw_norm: np.ndarray | None = None


# KERNEL_MODES (choice/kernels.py): exact-prompt (default): prompt tokens split exactly, decode
# steps plain int8; exact: every pass split; int8: plain int8 activations (llama.cpp's numerics).


class _Graph:
    def __init__(self, external: ExternalRef, kernels: str) -> None:
        self.nodes: list = []
        self.inits: list = []
        self.inputs: list = []
        self.outputs: list = []
        self._external = external
        if kernels not in KERNEL_MODES:
            raise ValueError(f"unknown kernel mode {kernels!r} (choose one of {', '.join(KERNEL_MODES)})")
        self._kernels = kernels
        self._flag = False  # the "exact" input exists (exact-prompt mode)
        self._exact_now = kernels == "exact"  # whether the nodes being built split exactly
        self._weights: dict[tuple[int, str], str] = {}  # one initializer per weight array
        self._n = 0
        self._consts: dict[tuple, str] = {}
        # Per branch: what was derived from an activation (its split, block view, block sums),
        # made once however many matrices read it (sessions run with no graph optimizer).
        self._derived: dict[tuple[str, str, int], str] = {}

    def name(self, base: str) -> str:
        self._n += 1
        return f"{base}_{self._n}"

    def const(self, base: str, arr: np.ndarray) -> str:
        from onnx import TensorProto, helper, numpy_helper

        name = self.name(base)
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

    def node(self, op: str, inputs: list[str], n_out: int = 1, domain: str = "",
             names: list[str] | None = None, **attrs) -> list[str]:
        from onnx import helper

        outs = names or [self.name(op.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, domain=domain or None, **attrs))
        return outs

    def small(self, arr: np.ndarray) -> str:
        """A small constant (shapes, axes, scalars), made once per graph."""
        key = (arr.dtype.str, arr.shape, arr.tobytes())
        if key not in self._consts:
            self._consts[key] = self.const("c", arr)
        return self._consts[key]

    def input(self, name: str, dtype: int, shape: list) -> str:
        from onnx import helper

        self.inputs.append(helper.make_tensor_value_info(name, dtype, shape))
        return name

    def output(self, src: str | None, name: str, dtype: int, shape: list) -> None:
        """Declare graph output `name` (copied from `src`, or produced under that name)."""
        from onnx import helper

        if src is not None:
            producer = next((n for n in reversed(self.nodes) if src in n.output), None)
            if producer is None or any(src in n.input for n in self.nodes):  # input, or read on
                self.nodes.append(helper.make_node("Identity", [src], [name]))
            else:  # renamed at its producer: no copy per run
                producer.output[list(producer.output).index(src)] = name
        self.outputs.append(helper.make_tensor_value_info(name, dtype, shape))

    # -- building blocks --------------------------------------------------------------------

    def rms(self, x: str, weight: np.ndarray, eps: float) -> str:
        return self.node("SimplifiedLayerNormalization", [x, self.weight(weight, "norm", lambda: weight)],
                         axis=-1, epsilon=float(eps), stash_type=1)[0]

    def linear(self, x: str, mats: list[Matrix]) -> str:
        """x (T, k) @ [m.T for m in mats] concatenated: (T, sum of rows)."""
        outs = [self._one(x, m) for m in mats]
        return outs[0] if len(outs) == 1 else self.node("Concat", outs, axis=1)[0]

    def _exact_input(self) -> str:
        """The graph input "exact" (bool scalar: the tokens are prompt tokens), made once."""
        from onnx import TensorProto

        if not self._flag:
            self.input("exact", TensorProto.BOOL, [])
            self._flag = True
        return "exact"

    def weight(self, owner: object, role: str, make: Callable[[], np.ndarray]) -> str:
        """The initializer of one weight, made once: both branches of an If read the same one
        (ONNX Runtime keeps one prepacked copy; see the module docstring)."""
        key = (id(owner), role)
        if key not in self._weights:
            self._weights[key] = self.const(role, make())
        return self._weights[key]

    def segment(self, build: Callable[[], list[str]]) -> list[str]:
        """The nodes `build()` adds, returning their outputs. In exact-prompt mode built twice,
        exact and plain int8, as the two branches of an If on the graph input "exact": a decode
        step then runs the plain branch, with no trace of the split."""
        if self._kernels != "exact-prompt":
            return build()
        from onnx import TensorProto, helper

        branches = []
        for exact in (True, False):
            saved, self.nodes, self._derived = self.nodes, [], {}
            self._exact_now = exact
            outs = build()
            branches.append(helper.make_graph(
                self.nodes, self.name("branch"), [],
                [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs]))
            self.nodes = saved
        self._derived = {}
        return self.node("If", [self._exact_input()], n_out=len(outs),
                         then_branch=branches[0], else_branch=branches[1])

    def _blocks(self, x: str, k: int, bs: int) -> str:
        """x (T, k) viewed as blocks of bs: (T, k // bs, bs)."""
        key = ("blocks", x, bs)
        if key not in self._derived:
            shape = self.small(np.array([-1, k // bs, bs], np.int64))
            self._derived[key] = self.node("Reshape", [x, shape])[0]
        return self._derived[key]

    def _block_sums(self, x: str, k: int, bs: int) -> str:
        """The sums of x's blocks of bs (what a matrix's minimums multiply): (T, k // bs)."""
        key = ("sums", x, bs)
        if key not in self._derived:
            axis = self.small(np.array([2], np.int64))
            self._derived[key] = self.node("ReduceSum", [self._blocks(x, k, bs), axis], keepdims=0)[0]
        return self._derived[key]

    def _split_exact(self, x: str, k: int, bs: int) -> str:
        """[x rounded to the kernel's int8 grid (per block of bs); x minus that]: (2T, k).

        The kernel re-quantizes the first half without loss (it is on the grid already), and
        the second half's own rounding error is ~1/250 of x's: their sum is ~exact.
        """
        key = ("split", x, bs)
        if key not in self._derived:
            i64 = np.int64
            blocks = self._blocks(x, k, bs)
            amax = self.node("ReduceMax", [self.node("Abs", [blocks])[0], self.small(np.array([2], i64))],
                             keepdims=1)[0]  # (T, nb, 1)
            scale = self.node("Max", [self.node("Mul", [amax, self.small(np.array(1 / 127, np.float32))])[0],
                                      self.small(np.array(1e-30, np.float32))])[0]
            grid = self.node("Mul", [self.node("Round", [self.node("Div", [blocks, scale])[0]])[0], scale])[0]
            rest = self.node("Sub", [blocks, grid])[0]
            both = self.node("Concat", [grid, rest], axis=0)[0]  # (2T, nb, bs)
            self._derived[key] = self.node("Reshape", [both, self.small(np.array([-1, k], i64))])[0]
        return self._derived[key]

    def _fold(self, y: str) -> str:
        """(2T, n) -> the two halves' sum (T, n). Split + Add: ONNX Runtime's ReduceSum over the
        leading axis of (2, T, n) measured ~18x slower (37 vs 2 ms at T=128, n=16384)."""
        grid, rest = self.node("Split", [y], n_out=2, axis=0, num_outputs=2)
        return self.node("Add", [grid, rest])[0]

    def _one(self, x: str, m: Matrix) -> str:
        if isinstance(m, DenseMatrix):
            return self.node("Gemm", [x, self.weight(m, "w", lambda: m.weight)], transB=1)[0]
        n, k = m.shape
        xa = self._split_exact(x, k, m.block_size) if self._exact_now else x
        # Zero points passed even when they are the kernel's default (8): without them the
        # one-row int8 kernel measured ~6% slower per decode step (1B Q4_0, 54 vs 57 tok/s).
        y = self.node(
            "MatMulNBits",
            [xa, self.weight(m, "q", lambda: m.packed), self.weight(m, "s", lambda: m.scales),
             self.weight(m, "z", m.zero_points)],
            domain="com.microsoft", K=k, N=n, bits=m.bits, block_size=m.block_size,
            accuracy_level=ACCURACY_LEVEL,
        )[0]
        if xa is not x:
            y = self._fold(y)
        if m.mins is None:
            return y
        sums = self._block_sums(x, k, m.block_size)  # (T, nb)
        # y + sums @ mins.T in one Gemm (C = y): (T, n)
        return self.node("Gemm", [sums, self.weight(m, "mins", lambda: m.mins), y], transB=1)[0]


def _model(g: _Graph) -> bytes:
    from onnx import helper

    graph = helper.make_graph(g.nodes, "turbospark", g.inputs, g.outputs, g.inits)
    model = helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", _OPSET), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    return model.SerializeToString()


def build_model_proto(
    config: LlamaConfig,
    layers: list[LayerMatrices],
    head: list[Matrix],
    output_norm: np.ndarray,
    external: ExternalRef,
    kernels: str = "exact-prompt",
    local_rope: bool = False,
) -> bytes:
    """The serialized ONNX model of a whole forward pass (see the module docstring).

    Inputs: x (B*T, dim) embeddings of B sequences of T tokens each (B = 1: a prompt chunk,
    a decode step or a draft to verify; T = 1: a batched decode step, one row per stream); exact
    () bool, true for prompt tokens (exact-prompt mode only); seqlens_k (B,) int32 = each
    row's offset + T - 1; total () int32 = the largest offset + T; rows (1,) int64 = -n, the
    head runs on the last n rows; cos, sin (positions >= total, rope_dims/2) of the RoPE table
    (and cos_local, sin_local of the sliding-window layers' own table when `local_rope`); per
    layer i k{i}, v{i} (B, n_kv, capacity, head_dim), the KV caches' buffers (B rows of one
    arena when B > 1, see kv_cache.KVArena). Outputs: logits (n, vocab) and k{i}_out,
    v{i}_out (bound to the same buffers).
    """
    from onnx import TensorProto

    c = config
    f32, i32 = TensorProto.FLOAT, TensorProto.INT32
    g = _Graph(external, kernels)
    x = g.input("x", f32, ["T", c.dim])
    seqlens = g.input("seqlens_k", i32, ["B"])
    total = g.input("total", i32, [])
    rows = g.input("rows", TensorProto.INT64, [1])
    cos, sin = (g.input(n, f32, ["P", c.rope_dims // 2]) for n in ("cos", "sin"))
    if local_rope:  # the sliding-window layers' own table (Gemma)
        cos_local, sin_local = (g.input(n, f32, ["P", c.rope_dims // 2]) for n in ("cos_local", "sin_local"))
    else:
        cos_local, sin_local = cos, sin
    kv_shape = ["B", c.n_kv_heads, "C", c.head_dim]
    i64 = np.int64
    nqkv = c.q_dim + 2 * c.kv_dim
    # (B, T, nqkv): B from seqlens_k, so one graph serves a chunk and a batch of streams
    by_row = g.node("Concat", [g.node("Shape", [seqlens])[0], g.small(np.array([-1, nqkv], i64))], axis=0)[0]

    def pre_norm(h: str, weight: np.ndarray | None) -> str:
        return h if weight is None else g.rms(h, weight, c.norm_eps)

    def qkv_of(h: str, layer: LayerMatrices) -> str:
        qkv = g.linear(pre_norm(h, layer.attn_norm), layer.qkv)  # (T, nqkv)
        if layer.bqkv is not None:
            qkv = g.node("Add", [qkv, g.weight(layer.bqkv, "bias", lambda: layer.bqkv)])[0]
        if layer.q_norm is not None and layer.k_norm is not None:
            qkv = norm_heads(qkv, layer.q_norm, layer.k_norm)
        return qkv

    def norm_heads(qkv: str, q_norm: np.ndarray, k_norm: np.ndarray) -> str:
        """Per-head RMSNorm of q and k (before the attention's RoPE): (T, nqkv)."""
        q, k, v = g.node("Split", [qkv, g.small(np.array([c.q_dim, c.kv_dim, c.kv_dim], i64))],
                         n_out=3, axis=1)
        normed = []
        full = c.qk_norm == "full"  # OLMo 2: one norm over the whole projection
        for part, n, w in ((q, 1 if full else c.n_heads, q_norm), (k, 1 if full else c.n_kv_heads, k_norm)):
            width = w.shape[0]
            heads = g.node("Reshape", [part, g.small(np.array([-1, n, width], i64))])[0]
            h = g.rms(heads, w, c.norm_eps)  # (T, n, hd) or (T, 1, q_dim)
            normed.append(g.node("Reshape", [h, g.small(np.array([-1, n * width], i64))])[0])
        return g.node("Concat", [*normed, v], axis=1)[0]

    def scaled(y: str, factor: float) -> str:
        return y if factor == 1.0 else g.node("Mul", [y, g.small(np.array(factor, np.float32))])[0]

    def branch(y: str, post: np.ndarray | None) -> str:
        """A branch's output before its residual add: post norm (Gemma, OLMo 2), residual scale."""
        return scaled(y if post is None else g.rms(y, post, c.norm_eps), c.residual_scale)

    def rest_of_layer(h: str, a: str, layer: LayerMatrices) -> str:
        """o-proj + residual, RMSNorm, gate|up, SwiGLU or GeGLU, down + residual: (T, dim)."""
        x1 = g.node("Add", [h, branch(g.linear(a, layer.o), layer.post_attn_norm)])[0]
        gu = g.linear(pre_norm(x1, layer.ffn_norm), layer.gate_up)
        gate, up = g.node("Split", [gu], n_out=2, axis=1, num_outputs=2)
        if c.activation == "gelu_tanh":
            act = g.node("Mul", [g.node("Gelu", [gate], approximate="tanh")[0], up])[0]
        else:
            act = g.node("Mul", [g.node("Mul", [gate, g.node("Sigmoid", [gate])[0]])[0], up])[0]
        return g.node("Add", [x1, branch(g.linear(act, layer.down), layer.post_ffw_norm)])[0]

    def last_rows(t: str) -> str:
        """The last n rows of t (rows = -n): (n, width)."""
        return g.node("Slice", [t, rows, g.small(np.array([2**62], i64)), g.small(np.array([0], i64))])[0]

    def head_of(last: str) -> str:
        """last (n, dim): the final hidden rows -> logits (n, vocab)."""
        logits = scaled(g.linear(g.rms(last, output_norm, c.norm_eps), head), 1.0 / c.logit_scale)
        if c.final_softcap > 0:  # Gemma: c * tanh(logits / c)
            logits = scaled(g.node("Tanh", [scaled(logits, 1.0 / c.final_softcap)])[0], c.final_softcap)
        return logits  # (n, vocab)

    x = scaled(x, c.embedding_scale)

    # Segments between attentions (each an If in exact-prompt mode): layer 0's q|k|v; then per
    # layer the rest of it with the next layer's q|k|v (the last: with the head).
    (qkv,) = g.segment(lambda: [qkv_of(x, layers[0])])
    logits = ""
    for i, layer in enumerate(layers):
        past_k, past_v = g.input(f"k{i}", f32, kv_shape), g.input(f"v{i}", f32, kv_shape)
        qkv3 = g.node("Reshape", [qkv, by_row])[0]  # (B, T, nqkv)
        # present = the graph outputs themselves (no Identity): bound to the past's buffers,
        # GroupQueryAttention then writes the new positions in place.
        rope = c.rope_on(i)  # SmolLM3's NoPE layers: no rotary, keys cached unrotated
        local = c.is_local(i)
        layer_cos, layer_sin = (cos_local, sin_local) if local else (cos, sin)
        window = {"local_window_size": c.sliding_window} if local else {}  # n_swa keys, self included
        softcap = {"softcap": float(c.attn_softcap)} if c.attn_softcap > 0 else {}
        (attn,) = g.node(
            "GroupQueryAttention",
            [qkv3, "", "", past_k, past_v, seqlens, total, layer_cos if rope else "",
             layer_sin if rope else ""],
            domain="com.microsoft", names=[g.name("attn"), f"k{i}_out", f"v{i}_out"],
            num_heads=c.n_heads, kv_num_heads=c.n_kv_heads, do_rotary=int(rope), rotary_interleaved=1,
            scale=float(c.softmax_scale), **window, **softcap)[:1]
        g.output(None, f"k{i}_out", f32, kv_shape)
        g.output(None, f"v{i}_out", f32, kv_shape)
        a = g.node("Reshape", [attn, g.small(np.array([-1, c.q_dim], i64))])[0]  # (T, q_dim)
        if i + 1 < len(layers):
            nxt = layers[i + 1]

            def step(h: str = x, a: str = a, layer: LayerMatrices = layer, nxt: LayerMatrices = nxt) -> list[str]:
                h2 = rest_of_layer(h, a, layer)
                return [h2, qkv_of(h2, nxt)]

            x, qkv = g.segment(step)
        else:  # only the rows the head reads go on: the others' rest of the last layer is unused
            h_last, a_last = last_rows(x), last_rows(a)
            (logits,) = g.segment(lambda: [head_of(rest_of_layer(h_last, a_last, layer))])
    g.output(logits, "logits", f32, ["N", c.vocab_size])
    return _model(g)


def default_threads() -> int:
    """Kernel threads: $TURBOSPARK_THREADS, else every core the process may use."""
    env = os.environ.get("TURBOSPARK_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS
        return max(1, os.cpu_count() or 1)


_RUNTIME_LOCK = threading.Lock()
_runtime: dict[str, bool] = {}


def _shared_runtime(threads: int) -> dict[str, bool]:
    """Make ONNX Runtime's process-wide thread pool and arena once: {"pool": .., "arena": ..}.

    One pool for every stage session instead of one per session: 32 sessions meant 32 pools
    whose workers had to sleep between runs (spinning ones fought each other), and waking
    them cost more than a decode step's kernels. The shared pool's workers spin, which is
    what makes one-token kernel calls cheap. One arena: stage activations are reused across
    sessions instead of each session keeping its own largest chunk's buffers.
    """
    with _RUNTIME_LOCK:
        if not _runtime:
            import onnxruntime as ort
            from onnxruntime.capi import _pybind_state as C

            try:  # fails when ONNX Runtime's environment was made before us
                C.set_global_thread_pool_sizes(threads, 1)
                _runtime["pool"] = True
            except Exception:
                _runtime["pool"] = False
            try:  # arena growth: exactly what is asked (1), not the next power of two
                info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0,
                                         ort.OrtMemType.DEFAULT)
                C.create_and_register_allocator(info, ort.OrtArenaCfg(0, 1, -1, -1))
                _runtime["arena"] = True
            except Exception:
                _runtime["arena"] = False
        return _runtime


def session_options(folder: Path | None, threads: int | None = None, parallel_prepack: bool = True):
    """ONNX Runtime session options for a stage; external data is read from `folder`.

    Sessions share the process-wide thread pool and arena (`_shared_runtime`) when they could
    be made (once the pool exists every session of the process must use it); otherwise each
    gets its own pool, whose workers then sleep between runs. `parallel_prepack`: repack the
    weights on every pool thread (faster; a higher peak of memory while it runs).
    """
    import onnxruntime as ort

    so = ort.SessionOptions()
    shared = _shared_runtime(threads or default_threads())
    if shared["pool"]:
        so.use_per_session_threads = False
    else:
        so.intra_op_num_threads = threads or default_threads()
        so.inter_op_num_threads = 1
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if shared["arena"]:
        so.add_session_config_entry("session.use_env_allocators", "1")
    # Repack the 4/8-bit weights on every pool thread: the bulk of a warm open (1B Q4_0 int8
    # graph 0.90 -> 0.50 s here; older ONNX Runtimes ignore the key). Its threads' buffers
    # raise the peak by ~0.1-0.2 GB at 1B: a first open, whose peak is the highest, goes serial.
    so.add_session_config_entry("session.prepack.enable_parallel", "1" if parallel_prepack else "0")
    # The graphs are built as they should run (fused stacks, contrib norms, nothing computed
    # twice: tests/test_graph_optimizer.py checks ORT's basic passes find nothing to change), so
    # no optimizer runs: ~50-70 ms of every open (3,000 nodes at 135M) for an identical graph.
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if folder is not None:
        so.add_session_config_entry(
            "session.model_external_initializers_file_folder_path", str(folder))
    return so


def make_session(proto: bytes, folder: Path | None, threads: int | None = None, so=None,
                 parallel_prepack: bool = True):
    """An ONNX Runtime CPU session over `proto` (options: `session_options` unless given)."""
    import onnxruntime as ort

    options = so if so is not None else session_options(folder, threads, parallel_prepack)
    return ort.InferenceSession(proto, options, providers=["CPUExecutionProvider"])
