"""The KV cache's element types (llama-server's `--cache-type-k` / `--cache-type-v`, `-ctk` /
`-ctv`): f16 (the default), q8_0 or q4_0, for keys and values apart, and who chose them: the
flag, else $TURBOSPARK_CACHE_TYPE_K / _V, else the app's setting, else f16.

A quantized cache keeps blocks of 32 numbers with one f16 scale (q8_0: 34 bytes a block, 0.53x
of f16; q4_0: 18 bytes, 0.28x), so every key or value row must be a whole number of blocks: a
model whose head size is not a multiple of 32 cannot have it (`check`, before llama.cpp is
asked, which would refuse it or abort). llama.cpp quantizes V only with flash attention
(its V is read transposed without it): a quantized V turns flash attention on
(`flash_attention`).

Cheap to import (no numpy): the CLI's parser and the settings dialog read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ...engine.errors import EngineError
from .common import ChoiceSpec, LoadChoice

CACHE_TYPES = ("f16", "q8_0", "q4_0")  # llama-server's names; the first is the default
CACHE_TYPE_K = ChoiceSpec("--cache-type-k", "TURBOSPARK_CACHE_TYPE_K", CACHE_TYPES, "KV cache type")
CACHE_TYPE_V = ChoiceSpec("--cache-type-v", "TURBOSPARK_CACHE_TYPE_V", CACHE_TYPES, "KV cache type")
# (bytes, numbers) of one block: ggml's type traits for these three
_BLOCK = {"f16": (2, 1), "q8_0": (34, 32), "q4_0": (18, 32)}


class CacheTypeError(EngineError, ValueError):
    """A KV cache type this model cannot have; the message says why and what to choose."""


def row_bytes(cache_type: str, numbers: int) -> int:
    """Bytes of a row of `numbers` keys or values in `cache_type` (whole blocks)."""
    size, per = _BLOCK[cache_type]
    return -(-numbers // per) * size


@dataclass(frozen=True)
class KVCacheTypes:
    """The K and V cache types of one load."""

    k: str = CACHE_TYPES[0]
    v: str = CACHE_TYPES[0]

    def __post_init__(self) -> None:
        for name, value in (("K", self.k), ("V", self.v)):
            if value not in _BLOCK:
                raise CacheTypeError(f"{value!r} is not a {name} cache type (choose "
                                     f"{', '.join(CACHE_TYPES[:-1])} or {CACHE_TYPES[-1]})")

    @property
    def flash_attention(self) -> bool:
        """Whether llama.cpp must run flash attention: it keeps a quantized V only with it."""
        return self.v != "f16"

    @property
    def label(self) -> str:
        """"f16" when both are, else "K q8_0 / V q4_0"."""
        return self.k if self.k == self.v else f"K {self.k} / V {self.v}"

    def check(self, head_dim: int, value_dim: int) -> None:
        """CacheTypeError when a key (value) row of `head_dim` (`value_dim`) numbers is not a
        whole number of the type's blocks: llama.cpp would refuse the context or abort."""
        for name, kind, dim in (("K", self.k, head_dim), ("V", self.v, value_dim)):
            per = _BLOCK[kind][1]
            if dim <= 0 or dim % per:
                raise CacheTypeError(
                    f"the {name} cache cannot be {kind} for this model: its blocks hold {per} "
                    f"numbers and a {name} row of the model has {dim}; use f16 for it")

    def bytes_per_token(self, n_layers: int, n_kv_heads: int, head_dim: int, value_dim: int) -> int:
        """K + V bytes one token takes in every layer (an estimate for models whose layers
        differ, as the f16 figure was)."""
        return n_layers * (row_bytes(self.k, n_kv_heads * head_dim)
                           + row_bytes(self.v, n_kv_heads * value_dim))

    def to_dict(self) -> dict[str, Any]:
        return {"type_k": self.k, "type_v": self.v, "flash_attention": self.flash_attention}


def cache_types_of(args: Any, environ: Mapping[str, str] | None = None) -> KVCacheTypes:
    """The types `turbospark chat` / `serve` load with: --cache-type-k / -v > the environment >
    f16 (LoadChoiceError for a bad environment value)."""
    k, v = choose_cache_types(getattr(args, "cache_type_k", None), getattr(args, "cache_type_v", None),
                              environ=environ)
    return KVCacheTypes(k.mode, v.mode)


def choose_cache_types(flag_k: str | None = None, flag_v: str | None = None,
                       setting_k: Any = None, setting_v: Any = None,
                       environ: Mapping[str, str] | None = None) -> tuple[LoadChoice, LoadChoice]:
    """K and V each: flag > environment > setting > f16. Raises LoadChoiceError for a bad flag
    or environment value."""
    return (CACHE_TYPE_K.choose(flag_k, setting_k, environ),
            CACHE_TYPE_V.choose(flag_v, setting_v, environ))
