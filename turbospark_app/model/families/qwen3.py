"""`qwen3`: Qwen3 dense (0.6B-32B). Llama with NeoX RoPE, no biases, and a per-head RMSNorm of q
and k after the projection and BEFORE RoPE (over head_dim, one weight shared by all heads).

head_dim comes from `qwen3.attention.key_length` and is not dim / heads (0.6B: 1024/16 = 64,
head_dim 128), so q's width and W_o's input are n_heads * head_dim: `read_config` does that for
every family. The softmax scale stays 1/sqrt(head_dim).
"""

from __future__ import annotations

from .family import Family, llama_layer_shapes, qk_norm_shapes


def _layer_shapes(c, i: int) -> dict[str, tuple[int, ...]]:  # (LlamaConfig, layer)
    return {**llama_layer_shapes(c, i), **qk_norm_shapes(c, i)}


FAMILY = Family(arch="qwen3", label="Qwen3", rope_style="neox", qkv_bias=False, qk_norm="head",
                layer_shapes=_layer_shapes)
