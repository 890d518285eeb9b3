"""Model families: one module per GGUF architecture, each a `Family` (what it reads from the file and
where its forward pass differs from plain Llama), read by `gguf.file` and the two engines.

    family     the `Family` description every module fills in, and the tensors every family reads
    llama      Llama 2/3, SmolLM2, TinyLlama, Mistral (converted as llama): the plain case
    qwen2      Qwen2 / Qwen2.5: q/k/v biases, NeoX RoPE

A new family is a new module here plus its line in `FAMILIES`; the engines ask the family, never
the architecture's name.
"""

from __future__ import annotations

from .family import Family
from .llama import FAMILY as LLAMA
from .qwen2 import FAMILY as QWEN2

FAMILIES: dict[str, Family] = {f.arch: f for f in (LLAMA, QWEN2)}
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
