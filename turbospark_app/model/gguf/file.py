"""Opening and validating a GGUF model file; the model's shape as a `LlamaConfig`.

`open_gguf(path)` returns a `GGUFFile`: the checked header (`gguf_header.read_header`, a bounded
walk that runs before anything trusts the file), the tensors over one memory map and a validated
`LlamaConfig`. Every problem with the file is a `ModelFileError` naming the file and the reason:
not a GGUF (bad magic), truncated, a count or size the file cannot hold, unsupported architecture,
unsupported tensor type, missing tensor, missing metadata, or a tensor whose shape contradicts
the metadata.

The architectures it accepts, and what each reads, are the families (`model.families`): one
module per architecture.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..families import SUPPORTED_ARCHITECTURES, cannot_run_message, family_of  # noqa: F401 (re-exported)
from .header import (  # noqa: F401 (ModelFileError, check_magic: re-exported)
    GGUFHeader,
    ModelFileError,
    TensorInfo,
    check_magic,
    read_header,
    tensor_views,
)


def _supported_types() -> frozenset[Any]:
    from gguf import GGMLQuantizationType as Q

    return frozenset(
        {Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q4_K, Q.Q5_K, Q.Q6_K}
    )


@dataclass(frozen=True)
class LlamaConfig:
    """The model's hyper-parameters, read from the GGUF metadata (and tensor shapes)."""

    architecture: str  # general.architecture, a key of families.FAMILIES
    n_layers: int
    dim: int  # embedding width
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn_dim: int
    vocab_size: int
    context_length: int
    rope_base: float
    rope_dims: int  # leading dims of each head that RoPE rotates (<= head_dim)
    rope_style: str  # "interleaved": pairs (x[2i], x[2i+1]); "neox": pairs (x[i], x[i+rope_dims/2])
    rope_linear_scale: float  # positions are divided by this (1.0 = no scaling)
    norm_eps: float
    qkv_bias: bool
    tied_embeddings: bool  # no output.weight: the head reuses token_embd
    file_type: int | None  # general.file_type (llama.cpp's LlamaFileType), None if absent
    quantization: str  # e.g. "Q4_1", "F16"
    n_params: int
    name: str = ""
    # Where a family differs from plain Llama (see families.Family; defaults = Llama):
    qk_norm: str = ""  # q/k RMSNorm before RoPE: "head" or "full"
    pre_norms: bool = True  # attn_norm / ffn_norm before each branch
    post_norms: bool = False  # post_attention_norm / post_ffw_norm on each branch's output
    activation: str = "silu"  # "silu" (SwiGLU) or "gelu_tanh" (GeGLU)
    embedding_scale: float = 1.0  # x = token_embd[ids] * this
    residual_scale: float = 1.0  # x = x + this * branch
    attention_scale: float = 0.0  # the softmax scale; 0 = 1/sqrt(head_dim)
    logit_scale: float = 1.0  # logits = head(x) / this
    attn_softcap: float = 0.0  # c > 0: scores = c * tanh(scores / c) (after the scale)
    final_softcap: float = 0.0  # c > 0: logits = c * tanh(logits / c)
    no_rope_step: int = 0  # n > 0: layers with (il + 1) % n == 0 skip RoPE
    sliding_window: int = 0  # n_swa > 0: local layers see the n_swa most recent positions (self too)
    swa_layers: tuple[int, ...] = ()  # the local (sliding-window) layers
    rope_base_local: float = 0.0  # the local layers' RoPE base (0 = rope_base); they never scale
    rope_factors: str = "rope_freqs.weight"  # the per-frequency divisors' tensor, when the file has it
    rope_attn_factor: float = 1.0  # cos and sin are multiplied by this (LongRoPE's mscale)
    fused: bool = False  # q|k|v in attn_qkv, gate|up in ffn_up

    def __post_init__(self) -> None:  # JSON gives a list back
        object.__setattr__(self, "swa_layers", tuple(int(i) for i in self.swa_layers))

    def is_local(self, layer: int) -> bool:
        """Whether `layer` attends through the sliding window (and uses the local RoPE table)."""
        return self.sliding_window > 0 and layer in self.swa_layers

    @property
    def softmax_scale(self) -> float:
        """What q.k is multiplied by before the softmax."""
        return self.attention_scale or 1.0 / float(np.sqrt(self.head_dim))

    def rope_on(self, layer: int) -> bool:
        """Whether layer `layer` rotates q and k (SmolLM3's NoPE layers do not)."""
        return not (self.no_rope_step and (layer + 1) % self.no_rope_step == 0)

    @property
    def group_size(self) -> int:
        """Query heads per KV head (grouped-query attention)."""
        return self.n_heads // self.n_kv_heads

    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "LlamaConfig":
        return cls(**data)


class GGUFFile:
    """An open, validated GGUF: `header`, `config`, `tensor(name)`, `has_tensor(name)`, `close()`."""

    def __init__(self, path: Path, header: GGUFHeader, config: LlamaConfig) -> None:
        self.path = path
        self.header = header
        self.config = config
        self._data: np.memmap | None = np.memmap(path, np.uint8, mode="r")
        self.tensors = tensor_views(header, self._data)
        self._tensors = {t.name: t for t in self.tensors}

    def has_tensor(self, name: str) -> bool:
        return name in self._tensors

    def tensor(self, name: str) -> Any:
        """The `gguf.ReaderTensor` called `name` (ModelFileError when absent)."""
        try:
            return self._tensors[name]
        except KeyError:
            raise ModelFileError(self.path, f"missing tensor {name!r}") from None

    def close(self) -> None:
        """Drop the memory map (the file can then be replaced or deleted)."""
        mm, self._data = self._data, None
        self.tensors, self._tensors = [], {}
        if mm is not None and getattr(mm, "_mmap", None) is not None:
            try:
                mm._mmap.close()
            except (BufferError, ValueError):
                pass  # a view is still alive; the map goes when it is collected


def open_gguf(path: str | os.PathLike[str]) -> GGUFFile:
    """Open and validate a GGUF model file: the bounded header walk first (`read_header`), then
    metadata, tensor presence, types and shapes."""
    path = Path(path)
    header = read_header(path)
    return GGUFFile(path, header, validate_header(header))


def read_config(header: GGUFHeader) -> LlamaConfig:
    """The model's hyper-parameters from a checked header (ModelFileError when unusable)."""
    path = header.path
    arch = header.value("general.architecture")
    if arch is None:
        raise ModelFileError(path, "missing metadata 'general.architecture'")
    if not isinstance(arch, str):  # a number or a (maybe huge) array: not a name to print back
        raise ModelFileError(path, f"bad metadata 'general.architecture': a "
                             f"{header.field_types.get('general.architecture')}, expected text")
    family = family_of(arch)
    if family is None:
        raise ModelFileError(path, cannot_run_message(arch))

    def required(key: str) -> Any:
        value = header.value(f"{arch}.{key}")
        if value is None:
            raise ModelFileError(path, f"missing metadata '{arch}.{key}'")
        return _typed(header, f"{arch}.{key}", value)

    def optional(key: str, default: Any) -> Any:
        value = header.value(f"{arch}.{key}")
        return default if value is None else _typed(header, f"{arch}.{key}", value)

    n_layers = int(required("block_count"))
    dim = int(required("embedding_length"))
    ffn_dim = required("feed_forward_length")
    n_heads = required("attention.head_count")
    n_kv_heads = optional("attention.head_count_kv", n_heads)
    if isinstance(ffn_dim, list) or isinstance(n_heads, list) or isinstance(n_kv_heads, list):
        raise ModelFileError(path, "per-layer head counts / FFN sizes are not supported")
    n_heads, n_kv_heads, ffn_dim = int(n_heads), int(n_kv_heads), int(ffn_dim)
    context_length = int(required("context_length"))
    norm_eps = float(required("attention.layer_norm_rms_epsilon"))
    head_dim = int(optional("attention.key_length", dim // max(n_heads, 1)))
    if int(optional("attention.value_length", head_dim)) != head_dim:
        raise ModelFileError(path, "attention value_length != key_length is not supported")
    rope_dims = int(optional("rope.dimension_count", head_dim))
    rope_base = float(optional("rope.freq_base", 10000.0))
    scaling = optional("rope.scaling.type", "none")
    factor = float(optional("rope.scaling.factor", 1.0) or 1.0)
    if scaling == "linear":
        linear_scale = factor
    elif scaling == "none" or factor == 1.0:
        linear_scale = 1.0
    else:
        raise ModelFileError(path, f"unsupported RoPE scaling {scaling!r}")
    for name, value in (("block_count", n_layers), ("embedding_length", dim),
                        ("feed_forward_length", ffn_dim), ("context_length", context_length),
                        ("attention.key_length", head_dim)):
        if value <= 0:
            raise ModelFileError(path, f"bad metadata '{arch}.{name}' = {value} (must be > 0)")
    per_layer = family.tensors_per_layer
    if n_layers * per_layer > len(header.tensors):  # before anything loops over the layers
        raise ModelFileError(path, f"bad metadata '{arch}.block_count' = {n_layers:,}: the file has "
                             f"{len(header.tensors):,} tensors, and each layer needs {per_layer}")
    if n_heads <= 0 or n_kv_heads <= 0 or n_heads % n_kv_heads:
        raise ModelFileError(path, f"bad head counts: {n_heads} heads, {n_kv_heads} KV heads")
    if rope_dims % 2 or not 0 < rope_dims <= head_dim:
        raise ModelFileError(path, f"bad RoPE dimension count {rope_dims} for head dim {head_dim}")

    tensors = {t.name: t for t in header.tensors}
    embd = tensors.get("token_embd.weight")
    if embd is None:
        raise ModelFileError(path, "missing tensor 'token_embd.weight'")
    vocab_size = int(embd.dims[1]) if len(embd.dims) == 2 else 0
    file_type = header.value("general.file_type")
    file_type = file_type if isinstance(file_type, int) else None  # any other type: not llama.cpp's
    config = LlamaConfig(
        architecture=arch,
        n_layers=n_layers,
        dim=dim,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        head_dim=head_dim,
        ffn_dim=ffn_dim,
        vocab_size=vocab_size,
        context_length=context_length,
        rope_base=rope_base,
        rope_dims=rope_dims,
        rope_style=family.rope_style,
        rope_linear_scale=linear_scale,
        norm_eps=norm_eps,
        qkv_bias=family.qkv_bias,
        qk_norm=family.qk_norm,
        pre_norms=family.pre_norms,
        post_norms=family.post_norms,
        activation=family.activation,
        fused=family.fused,
        no_rope_step=family.no_rope_step,
        tied_embeddings=family.output == "never" or "output.weight" not in tensors,
        file_type=None if file_type is None else int(file_type),
        quantization=quantization_name(file_type, header.tensors),
        n_params=int(sum(t.n_elements for t in header.tensors)),
        name=str(header.value("general.name") or path.stem),
    )

    def lookup(key: str, default: Any) -> Any:
        return required(key) if default is None else optional(key, default)

    try:
        return replace(config, **family.read_extra(lookup, config))
    except (TypeError, ValueError) as e:
        raise ModelFileError(path, f"bad {arch} metadata: {e}") from None


# The type each key `read_config` converts must have: a hostile file may store any type under
# any key, and int("two"), int(nan) or int([1, 2]) must be a ModelFileError naming the key.
_TEXT_KEYS = ("rope.scaling.type",)
_REAL_KEYS = ("attention.layer_norm_rms_epsilon", "rope.freq_base", "rope.scaling.factor")
_INT_KEYS = ("block_count", "embedding_length", "context_length", "attention.key_length",
             "attention.value_length", "rope.dimension_count")
_PER_LAYER_KEYS = ("feed_forward_length", "attention.head_count", "attention.head_count_kv")  # or arrays


def _typed(header: GGUFHeader, key: str, value: Any) -> Any:
    """`value`, when it has the type `read_config` converts for `key` (other keys: as they are)."""
    suffix = key.split(".", 1)[1]
    if suffix in _TEXT_KEYS:
        expected, ok = "text", isinstance(value, str)
    elif suffix in _REAL_KEYS:
        expected, ok = "a finite number", isinstance(value, (int, float)) and math.isfinite(value)
    elif suffix in _INT_KEYS or suffix in _PER_LAYER_KEYS:
        expected = "an integer"
        ok = isinstance(value, int) or (suffix in _PER_LAYER_KEYS and isinstance(value, list))
    else:
        return value
    if ok:
        return value
    raise ModelFileError(header.path, f"bad metadata '{key}' = {str(value)[:40]!r}: a "
                         f"{header.field_types.get(key, 'value')}, expected {expected}")


def quantization_name(file_type: Any, tensors: list[TensorInfo]) -> str:
    """llama.cpp's name of `general.file_type`, else the type holding most elements."""
    from gguf import LlamaFileType

    if file_type is not None:
        try:
            return LlamaFileType(int(file_type)).name.removeprefix("MOSTLY_").removeprefix("ALL_")
        except (TypeError, ValueError):  # not llama.cpp's number (a hostile file's text, a list)
            pass
    counts: dict[str, int] = {}
    for t in tensors:
        counts[t.type_name] = counts.get(t.type_name, 0) + t.n_elements
    return max(counts, key=counts.__getitem__) if counts else "unknown"


def expected_tensor_shapes(config: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor the model reads, with its numpy shape (rows, cols) = (out, in)."""
    c = config
    shapes: dict[str, tuple[int, ...]] = {
        "token_embd.weight": (c.vocab_size, c.dim),
        "output_norm.weight": (c.dim,),
    }
    family = family_of(c.architecture)
    assert family is not None, c.architecture  # read_config accepted it
    if not c.tied_embeddings or family.output == "required":
        shapes["output.weight"] = (c.vocab_size, c.dim)
    for i in range(c.n_layers):
        shapes.update(family.layer_shapes(c, i))
    return shapes


def validate_header(header: GGUFHeader) -> LlamaConfig:
    """The config of a checked header, after checking every tensor the model reads is present,
    of a supported type and of the right shape (from the header alone: no tensor data read)."""
    config = read_config(header)
    supported = {q.value: q for q in _supported_types()}
    infos = {t.name: t for t in header.tensors}
    expected = expected_tensor_shapes(config)
    if config.rope_factors in infos:
        expected[config.rope_factors] = (config.rope_dims // 2,)
    for name, shape in expected.items():
        t = infos.get(name)
        if t is None:
            raise ModelFileError(header.path, f"missing tensor {name!r}")
        if t.type_id not in supported:
            names = ", ".join(sorted(q.name for q in supported.values()))
            raise ModelFileError(
                header.path,
                f"unsupported tensor type {t.type_name} for {name!r} (supported: {names})",
            )
        got = tuple(reversed(t.dims))
        if got != shape:
            raise ModelFileError(header.path, f"tensor {name!r} has shape {got}, expected {shape}")
    return config
