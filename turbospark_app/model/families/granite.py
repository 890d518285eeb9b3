"""`granite`: IBM Granite 3.x dense. Llama plus four scales, all read from the file:

    x = token_embd[ids] * embedding_scale                  (granite.embedding_scale, 0/absent: 1)
    x = x + residual_scale * branch                        (both branches; granite.residual_scale)
    softmax scale = attention.scale                        (REPLACES 1/sqrt(head_dim) when set)
    logits = head(x) / logit_scale                         (granite.logit_scale, required)

rope.scaling.finetuned = false would switch RoPE off in every layer; no released model does, so
such a file is refused rather than run wrong.
"""

from __future__ import annotations

from typing import Any

from .family import Family, Lookup


def _read(lookup: Lookup, config: Any) -> dict[str, Any]:  # (.., LlamaConfig)
    if lookup("rope.scaling.finetuned", True) is False:
        raise ValueError("granite.rope.scaling.finetuned = false (no RoPE) is not supported")
    logit_scale = float(lookup("logit_scale", None))
    if not logit_scale > 0:
        raise ValueError(f"granite.logit_scale = {logit_scale} (must be > 0)")
    return {
        "logit_scale": logit_scale,
        "residual_scale": float(lookup("residual_scale", 1.0) or 1.0),
        "embedding_scale": float(lookup("embedding_scale", 1.0) or 1.0),
        "attention_scale": float(lookup("attention.scale", 0.0) or 0.0),
    }


FAMILY = Family(arch="granite", label="Granite 3.x", rope_style="interleaved", qkv_bias=False,
                read_extra=_read)
