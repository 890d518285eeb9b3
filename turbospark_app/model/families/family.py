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
    """Per-head q/k RMSNorm weights of layer `i` (one head_dim vector each, shared by the heads)."""
    p = f"blk.{i}."
    return {p + "attn_q_norm.weight": (c.head_dim,), p + "attn_k_norm.weight": (c.head_dim,)}


def qkv_bias_shapes(c: "LlamaConfig", i: int) -> dict[str, tuple[int, ...]]:
    """The q/k/v biases of layer `i` (Qwen2)."""
    p = f"blk.{i}."
    return {p + "attn_q.bias": (c.q_dim,), p + "attn_k.bias": (c.kv_dim,), p + "attn_v.bias": (c.kv_dim,)}


Lookup = Callable[[str, Any], Any]
"""lookup(key, default) -> the value of `<arch>.<key>`; default None = required (ModelFileError)."""


def no_extra(lookup: Lookup) -> dict[str, Any]:
    """A family that reads nothing beyond the common keys."""
    return {}


@dataclass(frozen=True)
class Family:
    """One GGUF architecture as TurboSpark computes it (values llama.cpp hard-codes per arch)."""

    arch: str  # general.architecture
    label: str  # the models people know it by, for messages
    rope_style: str  # "interleaved" (llama.cpp NORM: the converter permuted q/k) or "neox"
    qkv_bias: bool  # reads blk.N.attn_{q,k,v}.bias
    qk_norm: bool = False  # per-head RMSNorm of q and k after the projection, before RoPE
    layer_shapes: Callable[["LlamaConfig", int], dict[str, tuple[int, ...]]] = llama_layer_shapes
    # The family's own keys -> LlamaConfig fields (embedding/residual/attention/logit scales, ...).
    read_extra: Callable[[Lookup], dict[str, Any]] = no_extra
    no_rope_step: int = 0  # n > 0: layers il with (il + 1) % n == 0 skip RoPE (llama.cpp hard-codes it)

    @property
    def tensors_per_layer(self) -> int:
        """How many tensors a layer has at least (bounds block_count before anything loops on it)."""
        return len(LLAMA_LAYER_TENSORS)
