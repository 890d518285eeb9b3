"""Compact weights: the GGUF's own blocks (`quant_blocks.py`), cached beside the float32 kind.

Cache arrays, per matrix group (`L{i}.qkv`, `L{i}.o`, `L{i}.gate_up`, `L{i}.down`, `embd`,
`head`), one entry per stacked part j: `{group}.{j}.packed` (uint8), `.scales` (float32),
`.mins` (float32, formats with minimums) or `.weight` (float32, types without blocks); plus
`L{i}.attn_norm`, `L{i}.ffn_norm`, `L{i}.bqkv` (qwen2), `output_norm`, `rope_freq_factors`.
The manifest's layout says which parts each group has. A tied head is the `embd` group itself.
The token embedding is read row by row (`embed_rows`), the rest only by ONNX Runtime.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...engine.load_progress import PREPARING, report
from ..gguf.file import GGUFFile, LlamaConfig
from ..gguf.quant_blocks import (
    BlockMatrix,
    DenseMatrix,
    Matrix,
    matrix_from_tensor,
    tensor_kind,
    tensor_rows,
    unpack,
)
from ..reference.weights import (
    Alloc,
    CacheHit,
    _neox_to_interleaved,
    cached_arrays,
    dequantize_tensor,
)
from .graph import LayerMatrices


@dataclass
class CompactWeights:
    """The compact model's weights (views of the cache's memory maps when cached)."""

    layers: list[LayerMatrices]
    embd: list[Matrix]
    head: list[Matrix]
    output_norm: np.ndarray
    rope_freq_factors: np.ndarray | None
    origin: str
    hit: CacheHit | None = field(default=None, repr=False)

    @property
    def cache_path(self) -> Path | None:
        return None if self.hit is None else self.hit.entry

    def external_ref(self, arr: np.ndarray) -> tuple[str, int] | None:
        """Where `arr` lives in the cache entry (for ONNX external data), None if in memory."""
        return None if self.hit is None else self.hit.file_of(arr)

    @property
    def nbytes(self) -> int:
        """Bytes of every array (the head counted once when tied)."""
        arrays = {} if self.hit is None else self.hit.arrays
        return sum(a.nbytes for a in arrays.values())


Source = tuple[Any, np.ndarray | None]
"""A GGUF tensor and the order of its rows (None: as stored)."""

_CHUNK_BYTES = 16 << 20  # GGUF bytes decoded at once: temporaries stay small, pages are freed


def _store(alloc: Alloc, group: str, sources: list[Source]) -> list[dict[str, Any]]:
    """Decode `sources` straight into the group's cache arrays, `_CHUNK_BYTES` of GGUF at a
    time: consecutive tensors of one kind share one stacked part (q|k|v, gate|up), written in
    place instead of concatenated, and no whole-tensor temporaries are made."""
    runs: list[list[Source]] = []
    for src in sources:
        if runs and tensor_kind(runs[-1][0][0]) == tensor_kind(src[0]):
            runs[-1].append(src)
        else:
            runs.append([src])
    meta: list[dict[str, Any]] = []
    for j, run in enumerate(runs):
        parts: dict[str, _Rows] = {}
        for tensor, order in run:
            n = tensor_rows(tensor)
            step = max(1, _CHUNK_BYTES * n // max(1, int(tensor.n_bytes)))
            for r0 in range(0, n, step):
                rows = slice(r0, min(n, r0 + step))
                m = matrix_from_tensor(tensor, rows if order is None else order[rows])
                if not parts:  # the first piece tells the arrays' shapes and the part's meta
                    total = sum(tensor_rows(t) for t, _ in run)
                    meta.append(_part_meta(m))
                    for name, arr in _arrays_of(m).items():
                        parts[name] = _Rows(alloc, f"{group}.{j}.{name}", (total, *arr.shape[1:]), arr.dtype)
                for name, arr in _arrays_of(m).items():
                    parts[name].append(arr)
    return meta


class _Rows:
    """A cache array filled front to back: streamed to its file when the allocator can
    (`NpyStream`: a cache build), else stored into the array it gives (in memory)."""

    def __init__(self, alloc: Alloc, name: str, shape: tuple[int, ...], dtype: Any) -> None:
        stream = getattr(alloc, "stream", None)
        self._out = stream(name, shape, dtype) if stream is not None else alloc(name, shape, dtype)
        self._at = 0

    def append(self, rows: np.ndarray) -> None:
        if isinstance(self._out, np.ndarray):
            self._out[self._at : self._at + len(rows)] = rows
        else:
            self._out.write(rows)
        self._at += len(rows)


def _part_meta(m: Matrix) -> dict[str, Any]:
    if isinstance(m, DenseMatrix):
        return {"dense": True}
    return {"bits": m.bits, "block_size": m.block_size, "zero": m.zero, "mins": m.mins is not None}


def _arrays_of(m: Matrix) -> dict[str, np.ndarray]:
    if isinstance(m, DenseMatrix):
        return {"weight": m.weight}
    parts = {"packed": m.packed, "scales": m.scales}
    return parts if m.mins is None else {**parts, "mins": m.mins}


def _load(arrays: dict[str, np.ndarray], group: str, meta: list[dict[str, Any]]) -> list[Matrix]:
    out: list[Matrix] = []
    for j, m in enumerate(meta):
        p = f"{group}.{j}."
        if m.get("dense"):
            out.append(DenseMatrix(arrays[p + "weight"]))
        else:
            out.append(BlockMatrix(int(m["bits"]), int(m["block_size"]), int(m["zero"]),
                                   arrays[p + "packed"], arrays[p + "scales"],
                                   arrays[p + "mins"] if m["mins"] else None))
    return out


def prepare_compact(gf: GGUFFile, alloc: Alloc) -> dict[str, Any]:
    """Write every compact array through `alloc`; return the layout (JSON)."""
    c: LlamaConfig = gf.config
    groups: dict[str, list[dict[str, Any]]] = {}
    perm = _neox_to_interleaved(c.head_dim, c.rope_dims) if c.rope_style == "neox" else None

    def src(name: str, n_heads: int = 0) -> Source:
        t = gf.tensor(name)
        if perm is None or not n_heads:
            return t, None
        return t, (np.arange(n_heads)[:, None] * c.head_dim + perm[None, :]).reshape(-1)

    def fused_qkv(name: str) -> Source:
        t = gf.tensor(name)
        if perm is None:
            return t, None
        heads = np.arange(c.n_heads + c.n_kv_heads)[:, None] * c.head_dim + perm[None, :]
        return t, np.concatenate([heads.reshape(-1), np.arange(c.q_dim + c.kv_dim, c.q_dim + 2 * c.kv_dim)])

    def vec(name: str, n_heads: int = 0) -> np.ndarray:
        v = dequantize_tensor(gf.tensor(name)).reshape(-1)
        if perm is not None and n_heads:
            v = v.reshape(n_heads, c.head_dim)[:, perm].reshape(-1)
        return v

    def put(name: str, arr: np.ndarray) -> None:
        alloc(name, arr.shape, arr.dtype)[...] = arr

    groups["embd"] = _store(alloc, "embd", [src("token_embd.weight")])
    if not c.tied_embeddings:
        groups["head"] = _store(alloc, "head", [src("output.weight")])
    put("output_norm", vec("output_norm.weight"))
    if gf.has_tensor(c.rope_factors):
        put("rope_freq_factors", vec(c.rope_factors))
    for i in range(c.n_layers):
        report(PREPARING, i / c.n_layers)
        p = f"blk.{i}."
        if c.fused:  # Phi-3: one attn_qkv; its q and k rows permuted like separate ones
            groups[f"L{i}.qkv"] = _store(alloc, f"L{i}.qkv", [fused_qkv(p + "attn_qkv.weight")])
        else:
            qkv = [src(p + "attn_q.weight", c.n_heads), src(p + "attn_k.weight", c.n_kv_heads),
                   src(p + "attn_v.weight")]
            groups[f"L{i}.qkv"] = _store(alloc, f"L{i}.qkv", qkv)
        groups[f"L{i}.o"] = _store(alloc, f"L{i}.o", [src(p + "attn_output.weight")])
        if c.fused:  # Phi-3: ffn_up is [gate | up] already
            gu = [src(p + "ffn_up.weight")]
        else:
            gu = [src(p + "ffn_gate.weight"), src(p + "ffn_up.weight")]
        groups[f"L{i}.gate_up"] = _store(alloc, f"L{i}.gate_up", gu)
        groups[f"L{i}.down"] = _store(alloc, f"L{i}.down", [src(p + "ffn_down.weight")])
        if c.pre_norms:
            put(f"L{i}.attn_norm", vec(p + "attn_norm.weight"))
            put(f"L{i}.ffn_norm", vec(p + "ffn_norm.weight"))
        if c.post_norms:
            put(f"L{i}.post_attn_norm", vec(p + "post_attention_norm.weight"))
            put(f"L{i}.post_ffw_norm", vec(p + "post_ffw_norm.weight"))
        if c.qk_norm:  # permuted like the q/k rows: per head, or over the whole projection
            full = c.qk_norm == "full"
            put(f"L{i}.q_norm", vec(p + "attn_q_norm.weight", c.n_heads if full else 1))
            put(f"L{i}.k_norm", vec(p + "attn_k_norm.weight", c.n_kv_heads if full else 1))
        if c.qkv_bias:
            bias = [vec(p + "attn_q.bias", c.n_heads), vec(p + "attn_k.bias", c.n_kv_heads),
                    vec(p + "attn_v.bias")]
            put(f"L{i}.bqkv", np.concatenate(bias))
    report(PREPARING, 1.0)
    return {"groups": groups}


def load_compact(
    path: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None = None
) -> tuple[LlamaConfig, CompactWeights]:
    """The config and compact weights of a GGUF, through the weight cache (kind "compact")."""
    config, hit, origin, arrays, layout = cached_arrays(path, cache_dir, "compact", prepare_compact)
    groups = layout["groups"]
    layers = [
        LayerMatrices(
            qkv=_load(arrays, f"L{i}.qkv", groups[f"L{i}.qkv"]),
            o=_load(arrays, f"L{i}.o", groups[f"L{i}.o"]),
            gate_up=_load(arrays, f"L{i}.gate_up", groups[f"L{i}.gate_up"]),
            down=_load(arrays, f"L{i}.down", groups[f"L{i}.down"]),
            attn_norm=arrays.get(f"L{i}.attn_norm"),
            ffn_norm=arrays.get(f"L{i}.ffn_norm"),
            post_attn_norm=arrays.get(f"L{i}.post_attn_norm"),
            post_ffw_norm=arrays.get(f"L{i}.post_ffw_norm"),
            bqkv=arrays.get(f"L{i}.bqkv"),
            q_norm=arrays.get(f"L{i}.q_norm"),
            k_norm=arrays.get(f"L{i}.k_norm"),
        )
        for i in range(config.n_layers)
    ]
    embd = _load(arrays, "embd", groups["embd"])
    head = _load(arrays, "head", groups["head"]) if "head" in groups else embd
    weights = CompactWeights(layers, embd, head, arrays["output_norm"],
                             arrays.get("rope_freq_factors"), origin, hit)
    return config, weights


def embed_rows(embd: list[Matrix], ids: np.ndarray) -> np.ndarray:
    """Token embeddings (T, dim) float32, dequantized from the blocks of the rows asked for."""
    (m,) = embd  # one tensor, never stacked
    if isinstance(m, DenseMatrix):
        return np.array(m.weight[ids], np.float32)
    q = unpack(m.packed[ids], m.bits).astype(np.float32)  # (T, nb, bs)
    q -= np.float32(m.zero)
    q *= m.scales[ids][..., None]
    if m.mins is not None:
        q += m.mins[ids][..., None]
    return q.reshape(len(ids), -1)
