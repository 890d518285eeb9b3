"""`gemma2`: Gemma 2 (2B, 9B, 27B). Gemma 3's block without the q/k norms, plus soft-capping:

    attention scores (after the scale) = c * tanh(scores / c), c = attn_logit_softcapping (50)
    logits = c * tanh(logits / c), c = final_logit_softcapping (30), always on
    sliding window always on: attention.sliding_window (4096), even layers local (pattern 2);
    local layers' RoPE base = rope.freq_base_swa, else rope.freq_base
    the head is always token_embd (output.weight, if any, is never read)
"""

from __future__ import annotations

from typing import Any

from .family import Family, Lookup, llama_layer_shapes, post_norm_shapes, swa_layers
from .gemma3 import embedding_scale, gemma_attention_scale


def _read(lookup: Lookup, config: Any) -> dict[str, Any]:  # (.., LlamaConfig)
    window = int(lookup("attention.sliding_window", 4096) or 4096)
    return {
        "embedding_scale": embedding_scale(config),
        "attention_scale": gemma_attention_scale(config, 46),
        "attn_softcap": float(lookup("attn_logit_softcapping", 50.0) or 0.0),
        "final_softcap": float(lookup("final_logit_softcapping", 30.0) or 0.0),
        "sliding_window": window,
        "swa_layers": swa_layers(lookup("attention.sliding_window_pattern", 2), config.n_layers),
        "rope_base_local": float(lookup("rope.freq_base_swa", config.rope_base)),
    }


def _layer_shapes(c, i: int) -> dict[str, tuple[int, ...]]:  # (LlamaConfig, layer)
    return {**llama_layer_shapes(c, i), **post_norm_shapes(c, i)}


FAMILY = Family(arch="gemma2", label="Gemma 2", rope_style="neox", qkv_bias=False, post_norms=True,
                activation="gelu_tanh", output="never", layer_shapes=_layer_shapes, read_extra=_read)
