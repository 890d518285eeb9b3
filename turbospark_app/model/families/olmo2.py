"""`olmo2`: OLMo 2 (1B-32B), and Olmo 3 with its sliding window.

    no norm before either branch: q, k, v = W x on the raw residual, and the FFN reads x itself
    q = RMSNorm(q over all q_dim) * attn_q_norm, k = RMSNorm(k over all kv_dim) * attn_k_norm
    (over the whole projection, NOT per head), then NeoX RoPE
    x += RMSNorm(W_o attn) * post_attention_norm; x += RMSNorm(SwiGLU(x)) * post_ffw_norm
    output.weight required (never tied)
    optional sliding window (attention.sliding_window; pattern from the file, else 4); its local
    layers keep rope.freq_base and skip the RoPE scaling
"""

from __future__ import annotations

from typing import Any

from .family import Family, Lookup, post_norm_shapes, qk_norm_shapes, swa_layers


def _read(lookup: Lookup, config: Any) -> dict[str, Any]:  # (.., LlamaConfig)
    window = int(lookup("attention.sliding_window", 0) or 0)
    if window <= 0:
        return {}
    return {"sliding_window": window, "rope_base_local": config.rope_base,
            "swa_layers": swa_layers(lookup("attention.sliding_window_pattern", 4), config.n_layers)}


def _layer_shapes(c, i: int) -> dict[str, tuple[int, ...]]:  # (LlamaConfig, layer)
    p = f"blk.{i}."
    return {
        p + "attn_q.weight": (c.q_dim, c.dim),
        p + "attn_k.weight": (c.kv_dim, c.dim),
        p + "attn_v.weight": (c.kv_dim, c.dim),
        p + "attn_output.weight": (c.dim, c.q_dim),
        p + "ffn_gate.weight": (c.ffn_dim, c.dim),
        p + "ffn_up.weight": (c.ffn_dim, c.dim),
        p + "ffn_down.weight": (c.dim, c.ffn_dim),
        **qk_norm_shapes(c, i),
        **post_norm_shapes(c, i),
    }


FAMILY = Family(arch="olmo2", label="OLMo 2", rope_style="neox", qkv_bias=False, qk_norm="full",
                pre_norms=False, post_norms=True, output="required", layer_shapes=_layer_shapes,
                read_extra=_read)
