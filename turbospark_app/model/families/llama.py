"""`llama`: Llama 2/3, SmolLM2, TinyLlama, and Mistral (which llama.cpp converts as llama).

The plain case every other family is a difference from: RMSNorm, q|k|v without biases, RoPE over
adjacent pairs (llama.cpp's converter permuted q/k rows for it), SwiGLU, optional tied output.
"""

from __future__ import annotations

from .family import Family

FAMILY = Family(arch="llama", label="Llama 2/3, SmolLM2, TinyLlama, Mistral", rope_style="interleaved",
                qkv_bias=False)
