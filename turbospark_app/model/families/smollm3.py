"""`smollm3`: SmolLM3-3B. Llama (adjacent-pair RoPE, SwiGLU, tied output) except that every 4th
layer (il = 3, 7, 11, ...) skips RoPE entirely (NoPE) and caches its keys unrotated.

The step of 4 is not in the GGUF: llama.cpp hard-codes it for this architecture, and so do we.
"""

from __future__ import annotations

from .family import Family

FAMILY = Family(arch="smollm3", label="SmolLM3", rope_style="interleaved", qkv_bias=False,
                no_rope_step=4)
