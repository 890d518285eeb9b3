"""`qwen2`: Qwen2 / Qwen2.5. Llama plus q/k/v biases, with NeoX RoPE (pairs i, i + rope_dims/2)."""

from __future__ import annotations

from .family import Family, llama_layer_shapes, qkv_bias_shapes


def _layer_shapes(c, i: int) -> dict[str, tuple[int, ...]]:  # (LlamaConfig, layer)
    return {**llama_layer_shapes(c, i), **qkv_bias_shapes(c, i)}


FAMILY = Family(arch="qwen2", label="Qwen2, Qwen2.5", rope_style="neox", qkv_bias=True,
                layer_shapes=_layer_shapes)
