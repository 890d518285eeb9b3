"""What a family module describes: how its GGUF differs from plain Llama.

Every engine (the compact ONNX Runtime graph and the float32 reference) reads these fields instead
of comparing architecture names, so a family's whole difference lives in its own module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from ..gguf.file import LlamaConfig

# The per-layer tensors of a plain Llama block, with their numpy shapes (rows = out, cols = in).
LLAMA_LAYER_TENSORS = ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate",
                       "ffn_up", "ffn_down")


def llama_layer_shapes(c: "LlamaConfig", i: int) -> dict[str, tuple[int, ...]]:
    """The weights of layer `i` of a plain Llama block (no biases)."""
    p = f"blk.{i}."
    return {
        p + "attn_norm.weight": (c.dim,),
        p + "attn_q.weight": (c.q_dim, c.dim),
        p + "attn_k.weight": (c.kv_dim, c.dim),
        p + "attn_v.weight": (c.kv_dim, c.dim),
        p + "attn_output.weight": (c.dim, c.q_dim),
        p + "ffn_norm.weight": (c.dim,),
        p + "ffn_gate.weight": (c.ffn_dim, c.dim),
        p + "ffn_up.weight": (c.ffn_dim, c.dim),
        p + "ffn_down.weight": (c.dim, c.ffn_dim),
    }


def qk_norm_shapes(c: "LlamaConfig", i: int) -> dict[str, tuple[int, ...]]:
    """q/k RMSNorm weights of layer `i`: per head (one head_dim vector shared by the heads), or
    over the whole projection (OLMo 2: q_dim and kv_dim long)."""
    p = f"blk.{i}."
    if c.qk_norm == "full":
        return {p + "attn_q_norm.weight": (c.q_dim,), p + "attn_k_norm.weight": (c.kv_dim,)}
    return {p + "attn_q_norm.weight": (c.head_dim,), p + "attn_k_norm.weight": (c.head_dim,)}


def post_norm_shapes(c: "LlamaConfig", i: int) -> dict[str, tuple[int, ...]]:
    """The norms on each branch's output before its residual add (Gemma 2/3, OLMo 2)."""
    p = f"blk.{i}."
    return {p + "post_attention_norm.weight": (c.dim,), p + "post_ffw_norm.weight": (c.dim,)}


def qkv_bias_shapes(c: "LlamaConfig", i: int) -> dict[str, tuple[int, ...]]:
    """The q/k/v biases of layer `i` (Qwen2)."""
    p = f"blk.{i}."
    return {p + "attn_q.bias": (c.q_dim,), p + "attn_k.bias": (c.kv_dim,), p + "attn_v.bias": (c.kv_dim,)}


Lookup = Callable[[str, Any], Any]
"""lookup(key, default) -> the value of `<arch>.<key>`; default None = required (ModelFileError)."""


def no_extra(lookup: Lookup, config: "LlamaConfig") -> dict[str, Any]:
    """A family that reads nothing beyond the common keys."""
    return {}


def swa_layers(pattern: Any, n_layers: int) -> tuple[int, ...]:
    """The sliding-window layers of `<arch>.attention.sliding_window_pattern` (llama.cpp
    `set_swa_pattern`): a per-layer bool array (true = sliding), or a scalar n: layer il slides
    iff il % n < n - 1, so the last layer of each group of n is global."""
    if isinstance(pattern, (list, tuple)):
        if len(pattern) != n_layers:
            raise ValueError(f"sliding_window_pattern has {len(pattern)} entries for {n_layers} layers")
        return tuple(i for i, local in enumerate(pattern) if local)
    n = int(pattern)
    if n <= 0:
        raise ValueError(f"sliding_window_pattern = {n} (must be > 0)")
    return tuple(il for il in range(n_layers) if il % n < n - 1)


@dataclass(frozen=True)
class Family:
    """One GGUF architecture as TurboSpark computes it (values llama.cpp hard-codes per arch)."""

    arch: str  # general.architecture
    label: str  # the models people know it by, for messages
    rope_style: str  # "interleaved" (llama.cpp NORM: the converter permuted q/k) or "neox"
    qkv_bias: bool  # reads blk.N.attn_{q,k,v}.bias
    qk_norm: str = ""  # RMSNorm of q and k before RoPE: "head" (per head) or "full" (whole projection)
    pre_norms: bool = True  # attn_norm / ffn_norm before each branch (OLMo 2 has none)
    post_norms: bool = False  # post_attention_norm / post_ffw_norm on each branch's output
    activation: str = "silu"  # the gated FFN's: "silu" (SwiGLU) or "gelu_tanh" (GeGLU)
    output: str = "optional"  # output.weight: "optional" (absent = tied), "required", "never" (tied)
    fused: bool = False  # q|k|v in one attn_qkv and gate|up in one ffn_up (Phi-3)
    layer_shapes: Callable[["LlamaConfig", int], dict[str, tuple[int, ...]]] = llama_layer_shapes
    # The family's own keys -> LlamaConfig fields (scales, sliding windows, soft-caps, ...), given
    # the config of the common keys.
    read_extra: Callable[[Lookup, "LlamaConfig"], dict[str, Any]] = no_extra
    no_rope_step: int = 0  # n > 0: layers il with (il + 1) % n == 0 skip RoPE (llama.cpp hard-codes it)
    # How many tensors a layer has at least (bounds block_count before anything loops on it).
    tensors_per_layer: int = len(LLAMA_LAYER_TENSORS)
