"""`phi3`: Phi-3 / Phi-3.5-mini, Phi-3-medium, Phi-4, Phi-4-mini.

    q|k|v: ONE fused matrix blk.N.attn_qkv (rows [q | k | v]); gate|up: ONE fused blk.N.ffn_up
    (rows [gate | up], gate first, as SwiGLU reads them); no ffn_gate
    NeoX RoPE over the first rope.dimension_count dims (partial rotary on Phi-4-mini)
    LongRoPE: per-frequency factors rope_factors_long / rope_factors_short, the long ones when the
    context the model runs with exceeds rope.scaling.original_context_length; cos and sin are
    multiplied by rope.scaling.attn_factor (so the scores by its square)
    phi3.attention.sliding_window is read and ignored, as llama.cpp does

TurboSpark's KV cache spans the file's whole context_length, so that is the context that picks the
factors (llama.cpp picks by the n_ctx it was started with).
"""

from __future__ import annotations

from typing import Any

from .family import Family, Lookup


def _read(lookup: Lookup, config: Any) -> dict[str, Any]:  # (.., LlamaConfig)
    original = int(lookup("rope.scaling.original_context_length", config.context_length) or config.context_length)
    attn_factor = float(lookup("rope.scaling.attn_factor", 1.0) or 1.0)
    long = config.context_length > original
    return {"rope_factors": "rope_factors_long.weight" if long else "rope_factors_short.weight",
            "rope_attn_factor": attn_factor}


def _layer_shapes(c, i: int) -> dict[str, tuple[int, ...]]:  # (LlamaConfig, layer)
    p = f"blk.{i}."
    return {
        p + "attn_norm.weight": (c.dim,),
        p + "attn_qkv.weight": (c.q_dim + 2 * c.kv_dim, c.dim),
        p + "attn_output.weight": (c.dim, c.q_dim),
        p + "ffn_norm.weight": (c.dim,),
        p + "ffn_up.weight": (2 * c.ffn_dim, c.dim),
        p + "ffn_down.weight": (c.dim, c.ffn_dim),
    }


FAMILY = Family(arch="phi3", label="Phi-3, Phi-3.5, Phi-4, Phi-4-mini", rope_style="neox", qkv_bias=False,
                fused=True, layer_shapes=_layer_shapes, read_extra=_read, tensors_per_layer=6)
