"""The model's shape as its GGUF header says it, for any architecture: `ModelConfig`.

Nothing here decides whether a file runs: llama.cpp's own load does (`model.llamacpp`). These
are the figures Model Info, the status bar and the export show, read generically from the
`<arch>.` keys (a Gemma 3, Mamba or MoE file shows its own), each checked for its type, since a
hostile file may store anything under any key.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .ggml_types import constants
from .header import GGUFHeader, LazyStrings, ModelFileError, TensorInfo


@dataclass(frozen=True)
class ModelConfig:
    """What the header says of the model (0 where it says nothing)."""

    architecture: str  # general.architecture
    name: str  # general.name, else the file's stem
    n_layers: int
    dim: int  # embedding width
    n_heads: int
    n_kv_heads: int
    head_dim: int  # key length per head
    value_dim: int  # value length per head
    context_length: int  # the context the model was trained for
    vocab_size: int
    sliding_window: int
    file_type: int | None  # general.file_type (llama.cpp's LlamaFileType)
    quantization: str  # e.g. "Q4_1"
    n_params: int  # elements of all tensors
    n_experts: int = 0

    @property
    def kv_bytes_per_token(self) -> int:
        """K + V bytes one token takes in an f16 KV cache (every layer; an estimate for models
        whose layers differ)."""
        return 2 * self.n_layers * self.n_kv_heads * (self.head_dim + self.value_dim)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ModelConfig":
        return cls(**data)


def _int(value: Any) -> int:
    """An integer value, the first of a per-layer array, else 0."""
    if isinstance(value, (list, np.ndarray)) and len(value):
        value = value[0]
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return max(0, int(value))
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return max(0, int(value))
    return 0


# The counts read here, checked for their type (a hostile file may store text under one; llama.cpp
# would then refuse it with a less precise line, or assert).
_COUNT_KEYS = ("block_count", "context_length", "embedding_length", "attention.head_count",
               "attention.head_count_kv", "attention.key_length", "attention.value_length")


def _check_count(header: GGUFHeader, key: str) -> None:
    value = header.fields.get(key)
    if value is None:
        return
    items = value.tolist() if isinstance(value, np.ndarray) else value
    items = items if isinstance(items, list) else [items]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in items):
        raise ModelFileError(header.path, f"bad metadata '{key}' = {str(header.value(key))[:40]!r}: a "
                             f"{header.field_types.get(key, 'value')}, expected an integer")


def read_config(header: GGUFHeader) -> ModelConfig:
    """The model's figures from a checked header; ModelFileError when it names no architecture."""
    arch = header.value("general.architecture")
    if arch is None:
        raise ModelFileError(header.path, "missing metadata 'general.architecture'")
    if not isinstance(arch, str) or not arch:
        raise ModelFileError(header.path, f"bad metadata 'general.architecture': a "
                             f"{header.field_types.get('general.architecture')}, expected text")
    for key in _COUNT_KEYS:
        _check_count(header, f"{arch}.{key}")
    get = lambda key: _int(header.value(f"{arch}.{key}"))  # noqa: E731
    layers = get("block_count")
    if layers > len(header.tensors):  # every layer of every architecture has a tensor
        raise ModelFileError(header.path, f"bad metadata '{arch}.block_count' = {layers:,}: the file "
                             f"has {len(header.tensors):,} tensors")
    n_heads = get("attention.head_count")
    dim = get("embedding_length")
    head_dim = get("attention.key_length") or (dim // n_heads if n_heads else 0)
    file_type = header.value("general.file_type")
    file_type = int(file_type) if isinstance(file_type, int) and not isinstance(file_type, bool) else None
    name = header.value("general.name")
    return ModelConfig(
        architecture=arch,
        name=name if isinstance(name, str) and name else header.path.stem,
        n_layers=get("block_count"),
        dim=dim,
        n_heads=n_heads,
        n_kv_heads=get("attention.head_count_kv") or n_heads,
        head_dim=head_dim,
        value_dim=get("attention.value_length") or head_dim,
        context_length=get("context_length"),
        vocab_size=_vocab_size(header, arch),
        sliding_window=get("attention.sliding_window"),
        file_type=file_type,
        quantization=quantization_name(file_type, header.tensors),
        n_params=int(sum(t.n_elements for t in header.tensors)),
        n_experts=get("expert_count"),
    )


def _vocab_size(header: GGUFHeader, arch: str) -> int:
    tokens = header.fields.get("tokenizer.ggml.tokens")
    if isinstance(tokens, (list, LazyStrings)):
        return len(tokens)
    declared = _int(header.fields.get(f"{arch}.vocab_size"))
    if declared:
        return declared
    embd = next((t for t in header.tensors if t.name == "token_embd.weight"), None)
    return int(embd.dims[1]) if embd is not None and len(embd.dims) == 2 else 0


def quantization_name(file_type: Any, tensors: list[TensorInfo]) -> str:
    """llama.cpp's name of `general.file_type`, else the type holding most elements."""
    LlamaFileType = constants().LlamaFileType

    if file_type is not None:
        try:
            return LlamaFileType(int(file_type)).name.removeprefix("MOSTLY_").removeprefix("ALL_")
        except (TypeError, ValueError):  # not llama.cpp's number (a hostile file's text, a list)
            pass
    counts: dict[str, int] = {}
    for t in tensors:
        counts[t.type_name] = counts.get(t.type_name, 0) + t.n_elements
    return max(counts, key=counts.__getitem__) if counts else "unknown"
