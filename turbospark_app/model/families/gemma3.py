"""`gemma3`: Gemma 3 text (270M-27B), as llama.cpp's gemma3 (iswa) graph computes it.

    x = token_embd[ids] * sqrt(dim)                              (f32, not applied to the head)
    per layer: h = RMSNorm(x) * attn_norm; q, k, v (no bias, head_dim from key_length)
               q, k: per-head RMSNorm * attn_{q,k}_norm, then NeoX RoPE
               local layers: RoPE base rope.freq_base_swa (10000), no scaling, sliding window;
               global layers: rope.freq_base and its linear scaling, full causal attention
               x += RMSNorm(W_o attn) * post_attention_norm
               x += RMSNorm(W_down(gelu_tanh(W_gate h2) * W_up h2)) * post_ffw_norm, h2 = RMSNorm(x) * ffn_norm
    logits = head(RMSNorm(x) * output_norm), soft-capped when final_logit_softcapping is set

Every norm weight is stored with Gemma's +1 already added by the converter: x * w, never x * (1 + w).
The sliding window is on when `gemma3.attention.sliding_window` is there (pattern: the key
`attention.sliding_window_pattern`, else 6: five local layers, then a global one).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .family import (
    Family,
    Lookup,
    llama_layer_shapes,
    post_norm_shapes,
    qk_norm_shapes,
    swa_layers,
)


def gemma_attention_scale(config: Any, big_n_layers: int) -> float:
    """llama.cpp's f_attention_scale: 1/sqrt(dim / heads) for the 27B shape (its layer count),
    else 0 (= 1/sqrt(head_dim)). The only value llama.cpp keys on a size; the file has no key."""
    return 1.0 / math.sqrt(config.dim / config.n_heads) if config.n_layers == big_n_layers else 0.0


def embedding_scale(config: Any) -> float:
    """sqrt(dim) as llama.cpp computes it (sqrtf, float32)."""
    return float(np.sqrt(np.float32(config.dim)))


def _read(lookup: Lookup, config: Any) -> dict[str, Any]:  # (.., LlamaConfig)
    extra: dict[str, Any] = {
        "embedding_scale": embedding_scale(config),
        "attention_scale": gemma_attention_scale(config, 62),
        "final_softcap": float(lookup("final_logit_softcapping", 0.0) or 0.0),
    }
    window = int(lookup("attention.sliding_window", 0) or 0)
    if window > 0:
        extra["sliding_window"] = window
        extra["swa_layers"] = swa_layers(lookup("attention.sliding_window_pattern", 6), config.n_layers)
        extra["rope_base_local"] = float(lookup("rope.freq_base_swa", 10000.0))
    return extra


def _layer_shapes(c, i: int) -> dict[str, tuple[int, ...]]:  # (LlamaConfig, layer)
    return {**llama_layer_shapes(c, i), **qk_norm_shapes(c, i), **post_norm_shapes(c, i)}


FAMILY = Family(arch="gemma3", label="Gemma 3", rope_style="neox", qkv_bias=False, qk_norm="head",
                post_norms=True, activation="gelu_tanh", layer_shapes=_layer_shapes, read_extra=_read)
