"""Model families: one module per GGUF architecture, each a `Family` (what it reads from the file and
where its forward pass differs from plain Llama), read by `gguf.file` and the two engines.

    family     the `Family` description every module fills in, and the tensors every family reads
    llama      Llama 2/3, SmolLM2, TinyLlama, Mistral (converted as llama): the plain case
    qwen2      Qwen2 / Qwen2.5: q/k/v biases, NeoX RoPE
    qwen3      Qwen3: per-head q/k RMSNorm before NeoX RoPE, head_dim from key_length
    granite    Granite 3.x: embedding, residual, attention and logit scales from the file
    smollm3    SmolLM3: every 4th layer without RoPE
    gemma3     Gemma 3: sqrt(dim) embeddings, q/k and post norms, GeGLU, 5:1 sliding window
    gemma2     Gemma 2: post norms, GeGLU, soft-capped scores and logits, 1:1 sliding window
    olmo2      OLMo 2: no pre-norms, full-width q/k norms, post norms
    phi3       Phi-3/3.5/4(-mini): fused q|k|v and gate|up, LongRoPE factors, partial rotary

A new family is a new module here plus its line in `FAMILIES`; the engines ask the family, never
the architecture's name.
"""

from __future__ import annotations

from .family import Family
from .gemma2 import FAMILY as GEMMA2
from .gemma3 import FAMILY as GEMMA3
from .granite import FAMILY as GRANITE
from .llama import FAMILY as LLAMA
from .olmo2 import FAMILY as OLMO2
from .phi3 import FAMILY as PHI3
from .qwen2 import FAMILY as QWEN2
from .qwen3 import FAMILY as QWEN3
from .smollm3 import FAMILY as SMOLLM3

FAMILIES: dict[str, Family] = {f.arch: f for f in (LLAMA, QWEN2, QWEN3, GEMMA3, GEMMA2, PHI3, GRANITE, SMOLLM3, OLMO2)}
SUPPORTED_ARCHITECTURES: tuple[str, ...] = tuple(FAMILIES)


def family_of(arch: str) -> Family | None:
    """The family of a `general.architecture` value, or None when TurboSpark cannot run it."""
    return FAMILIES.get(arch)


def cannot_run_message(arch: str) -> str:
    """The plain line for an architecture TurboSpark does not run; it lists the families, so it
    grows by itself as families are added. The same words in `model info`, Open Model and a load."""
    name = arch if len(arch) <= 64 else arch[:64] + "…"  # a hostile file's name stays one line
    return f"TurboSpark cannot run architecture {name!r} yet (it runs: {', '.join(SUPPORTED_ARCHITECTURES)})"


__all__ = ["FAMILIES", "Family", "SUPPORTED_ARCHITECTURES", "cannot_run_message", "family_of"]
