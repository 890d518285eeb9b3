"""Dequantized, fused float32 weights, prepared once and cached as memory-mapped .npy files.

Layout (all float32, C-contiguous, rows = output features, so `x @ W.T` reads each row
contiguously and the tied output head can share `token_embd`):

    token_embd  (vocab, dim)
    output      (vocab, dim)          the same array as token_embd when the GGUF has no output.weight
    output_norm (dim,)
    wqkv        (L, q_dim + 2*kv_dim, dim)  rows [q | k | v]; attn_norm folded into the columns,
                                            q pre-scaled by 1/sqrt(head_dim); q/k rows of NeoX
                                            models permuted so RoPE is always over adjacent pairs
    bqkv        (L, q_dim + 2*kv_dim)       qwen2 only (same scaling/permutation), else None
    q_norm, k_norm (L, head_dim)            q/k RMSNorm weights (families with qk_norm; (L, q_dim) and
                                            (L, kv_dim) when over the whole projection), permuted like
                                            the rows; q's softmax scale is folded into q_norm instead
                                            of the q rows (the norm would undo it)
    post_attn_norm, post_ffw_norm (L, dim)  the norms on each branch's output (Gemma, OLMo 2)
    wo          (L, dim, q_dim)
    wgu         (L, 2*ffn, dim)             rows [gate | up]; ffn_norm folded into the columns
    wd          (L, dim, ffn)
    rope_freq_factors (rope_dims/2,)        only when the GGUF has rope_freqs.weight

The cache entry for a GGUF lives in `<cache_dir>/weights/<stem>-<kind>-<content key>/`,
where kind is "f32" (these arrays) or "compact" (`compact_weights.py`: the GGUF's blocks) and the
content key (`weight_cache.keys`) depends on the file's bytes only, so a copy, move or rename
finds the same entry; the manifest's identity adds `LAYOUT_VERSION`. Entries are evicted least
recently used first under the cache budget (`weight_cache.store`), never one in use. Every entry is
written by `_build_entry` and read by `_load_entry` (one place for both kinds): written into a
temporary folder and renamed into place, so a half-written entry never looks valid; an entry
that fails validation (bad manifest, truncated .npy, wrong shape or dtype) is rebuilt. Each entry
carries `checksums.json` (`cache_integrity`): a payload damaged at the right size is found by the
background check after a warm load.
"""

from __future__ import annotations

import json
import logging
import mmap
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ...engine.load_progress import PREPARING, report
from ..cache_integrity import note_warm_load, write_checksums
from ..gguf.file import GGUFFile, LlamaConfig, ModelFileError, check_magic, open_gguf
from ..weight_cache import keys as cache_keys
from ..weight_cache import leases, store, usage

log = logging.getLogger(__name__)

LAYOUT_VERSION = 2
_ARRAY_NAMES = ("token_embd", "output", "output_norm", "wqkv", "bqkv", "wo", "wgu", "wd",
                "rope_freq_factors", "q_norm", "k_norm", "post_attn_norm", "post_ffw_norm")


@dataclass
class LlamaWeights:
    """The prepared float32 arrays (see the module docstring for shapes)."""

    token_embd: np.ndarray
    output: np.ndarray
    output_norm: np.ndarray
    wqkv: np.ndarray
    wo: np.ndarray
    wgu: np.ndarray
    wd: np.ndarray
    bqkv: np.ndarray | None = None
    rope_freq_factors: np.ndarray | None = None
    q_norm: np.ndarray | None = None
    k_norm: np.ndarray | None = None
    post_attn_norm: np.ndarray | None = None
    post_ffw_norm: np.ndarray | None = None
    origin: str = "memory"  # "cache" (warm), "built" (cold, then cached) or "memory" (not cached)
    cache_path: Path | None = field(default=None, compare=False)

    def arrays(self) -> dict[str, np.ndarray]:
        """Name -> array for every present array (output omitted when tied)."""
        out = {}
        for name in _ARRAY_NAMES:
            arr = getattr(self, name)
            if arr is None or (name == "output" and arr is self.token_embd):
                continue
            out[name] = arr
        return out

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays().values())


def dequantize_tensor(tensor: Any) -> np.ndarray:
    """A GGUF tensor as float32 (rows, cols) (or (n,) for vectors) via `gguf.quants.dequantize`."""
    from gguf.quants import dequantize

    shape = tuple(int(d) for d in reversed(tensor.shape.tolist()))
    arr = dequantize(np.asarray(tensor.data), tensor.tensor_type)
    return np.asarray(arr, dtype=np.float32).reshape(shape)


def _neox_to_interleaved(head_dim: int, rope_dims: int) -> np.ndarray:
    """Row permutation within a head taking NeoX pairs (i, i+n/2) to adjacent pairs (2i, 2i+1)."""
    half = rope_dims // 2
    perm = np.arange(head_dim)
    perm[0:rope_dims:2] = np.arange(half)
    perm[1:rope_dims:2] = np.arange(half) + half
    return perm


Alloc = Callable[..., np.ndarray]
"""alloc(name, shape, dtype=np.float32) -> a writable array that becomes cache file `name`. A
cache build's allocator also has `alloc.stream(name, shape, dtype)` -> `NpyStream`, for arrays
written front to back."""


def prepare_weights(gf: GGUFFile, alloc: Alloc | None = None) -> dict[str, np.ndarray]:
    """Dequantize and fuse every tensor of `gf` into arrays from `alloc(name, shape)`."""
    alloc = alloc or (lambda name, shape, dtype=np.float32: np.empty(shape, dtype))
    c: LlamaConfig = gf.config
    nqkv = c.q_dim + 2 * c.kv_dim
    deq = lambda name: dequantize_tensor(gf.tensor(name))  # noqa: E731
    out: dict[str, np.ndarray] = {}

    out["token_embd"] = alloc("token_embd", (c.vocab_size, c.dim))
    out["token_embd"][...] = deq("token_embd.weight")
    if not c.tied_embeddings:
        out["output"] = alloc("output", (c.vocab_size, c.dim))
        out["output"][...] = deq("output.weight")
    out["output_norm"] = alloc("output_norm", (c.dim,))
    out["output_norm"][...] = deq("output_norm.weight")
    if gf.has_tensor(c.rope_factors):
        out["rope_freq_factors"] = alloc("rope_freq_factors", (c.rope_dims // 2,))
        out["rope_freq_factors"][...] = deq(c.rope_factors)

    wqkv = out["wqkv"] = alloc("wqkv", (c.n_layers, nqkv, c.dim))
    wo = out["wo"] = alloc("wo", (c.n_layers, c.dim, c.q_dim))
    wgu = out["wgu"] = alloc("wgu", (c.n_layers, 2 * c.ffn_dim, c.dim))
    wd = out["wd"] = alloc("wd", (c.n_layers, c.dim, c.ffn_dim))
    bqkv = out["bqkv"] = alloc("bqkv", (c.n_layers, nqkv)) if c.qkv_bias else None
    perm = _neox_to_interleaved(c.head_dim, c.rope_dims) if c.rope_style == "neox" else None
    q_scale = np.float32(c.softmax_scale)
    full = c.qk_norm == "full"
    q_norm = out["q_norm"] = alloc("q_norm", (c.n_layers, c.q_dim if full else c.head_dim)) if c.qk_norm else None
    k_norm = out["k_norm"] = alloc("k_norm", (c.n_layers, c.kv_dim if full else c.head_dim)) if c.qk_norm else None
    post_attn = out["post_attn_norm"] = alloc("post_attn_norm", (c.n_layers, c.dim)) if c.post_norms else None
    post_ffw = out["post_ffw_norm"] = alloc("post_ffw_norm", (c.n_layers, c.dim)) if c.post_norms else None
    ones = np.ones(c.dim, np.float32)  # the pre-norm of a family without one (OLMo 2)
    row_scale = np.float32(1.0) if c.qk_norm else q_scale  # with a q norm the scale goes on it
    qs, ks, vs = slice(0, c.q_dim), slice(c.q_dim, c.q_dim + c.kv_dim), slice(c.q_dim + c.kv_dim, nqkv)

    def rope_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
        if perm is None:
            return w
        return w.reshape(n_heads, c.head_dim, *w.shape[1:])[:, perm].reshape(w.shape)

    for i in range(c.n_layers):
        report(PREPARING, i / c.n_layers)
        p = f"blk.{i}."
        attn_norm = deq(p + "attn_norm.weight") if c.pre_norms else ones  # (dim,)
        if c.fused:  # Phi-3: one attn_qkv, rows [q | k | v]
            fused = deq(p + "attn_qkv.weight")
            wq, wk, wv = fused[qs], fused[ks], fused[vs]
        else:
            wq, wk, wv = deq(p + "attn_q.weight"), deq(p + "attn_k.weight"), deq(p + "attn_v.weight")
        wqkv[i, qs] = rope_rows(wq, c.n_heads) * attn_norm * row_scale
        wqkv[i, ks] = rope_rows(wk, c.n_kv_heads) * attn_norm
        wqkv[i, vs] = wv * attn_norm
        if bqkv is not None:
            bqkv[i, qs] = rope_rows(deq(p + "attn_q.bias"), c.n_heads) * row_scale
            bqkv[i, ks] = rope_rows(deq(p + "attn_k.bias"), c.n_kv_heads)
            bqkv[i, vs] = deq(p + "attn_v.bias")
        if q_norm is not None and k_norm is not None:
            q_norm[i] = rope_rows(deq(p + "attn_q_norm.weight"), c.n_heads if full else 1) * q_scale
            k_norm[i] = rope_rows(deq(p + "attn_k_norm.weight"), c.n_kv_heads if full else 1)
        if post_attn is not None and post_ffw is not None:
            post_attn[i] = deq(p + "post_attention_norm.weight")
            post_ffw[i] = deq(p + "post_ffw_norm.weight")
        wo[i] = deq(p + "attn_output.weight")
        ffn_norm = deq(p + "ffn_norm.weight") if c.pre_norms else ones
        if c.fused:  # Phi-3: one ffn_up, rows [gate | up]: our layout already
            wgu[i] = deq(p + "ffn_up.weight") * ffn_norm
        else:
            wgu[i, : c.ffn_dim] = deq(p + "ffn_gate.weight") * ffn_norm
            wgu[i, c.ffn_dim :] = deq(p + "ffn_up.weight") * ffn_norm
        wd[i] = deq(p + "ffn_down.weight")
    report(PREPARING, 1.0)
    return {k: v for k, v in out.items() if v is not None}


def _weights_from_arrays(arrays: dict[str, np.ndarray], origin: str, cache_path: Path | None) -> LlamaWeights:
    embd = arrays["token_embd"]
    return LlamaWeights(
        token_embd=embd,
        output=arrays.get("output", embd),
        output_norm=arrays["output_norm"],
        wqkv=arrays["wqkv"],
        wo=arrays["wo"],
        wgu=arrays["wgu"],
        wd=arrays["wd"],
        bqkv=arrays.get("bqkv"),
        rope_freq_factors=arrays.get("rope_freq_factors"),
        q_norm=arrays.get("q_norm"),
        k_norm=arrays.get("k_norm"),
        post_attn_norm=arrays.get("post_attn_norm"),
        post_ffw_norm=arrays.get("post_ffw_norm"),
        origin=origin,
        cache_path=cache_path,
    )


# ---------------------------------------------------------------------------------------------
# The on-disk cache


def default_cache_dir() -> Path:
    """The app's per-user cache folder: $TURBOSPARK_CACHE_DIR if set, else platformdirs'."""
    from turbospark_app.host.folders import cache_dir

    return cache_dir()


def file_identity(path: Path, kind: str = "f32") -> dict[str, Any]:
    """What makes a cache entry valid for `path`: its content key (not its name, place or
    mtime: a copy or rename reuses the entry), the kind and `LAYOUT_VERSION`."""
    return {"layout_version": LAYOUT_VERSION, "kind": kind,
            "content_key": cache_keys.content_key(path)}


def cache_entry_dir(path: Path, cache_dir: Path, identity: dict[str, Any]) -> Path:
    """The cache folder for this GGUF content: `<stem>-<kind>-<content key>` (the stem of the
    file that first built it is only there for people reading the folder)."""
    safe = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in path.stem)[:60]
    return cache_dir / "weights" / f"{safe}-{identity.get('kind', 'f32')}-{identity['content_key']}"


def _entry_for(path: Path, cache_root: Path, identity: dict[str, Any]) -> Path:
    """The existing entry of this content under any stem (a renamed copy), else a new name."""
    suffix = f"-{identity.get('kind', 'f32')}-{identity['content_key']}"
    root = cache_root / "weights"
    try:
        found = sorted(p for p in root.iterdir() if p.name.endswith(suffix) and not p.name.startswith("."))
    except OSError:
        found = []
    return found[0] if found else cache_entry_dir(path, cache_root, identity)


def _in_use(path: Path, entry: Path, kind: str, arrays: dict[str, np.ndarray]) -> None:
    """Lease the entry for as long as its arrays live (never evicted meanwhile); note the use."""
    leases.hold(entry).tie_to(arrays.values())
    usage.record_use(entry, model=path.stem, kind=kind, source=path)


@dataclass
class CacheHit:
    """A cache entry's arrays (plain views of its memory maps) and what the manifest says."""

    config: LlamaConfig
    arrays: dict[str, np.ndarray]
    layout: Any  # what the preparer returned besides the arrays (JSON), None for f32
    entry: Path
    _files: dict[int, tuple[str, int]] = field(default_factory=dict, repr=False)

    def file_of(self, arr: np.ndarray) -> tuple[str, int] | None:
        """(file name in `entry`, byte offset of the data) for one of `arrays`, else None."""
        return self._files.get(id(arr))


class NpyStream:
    """A .npy file written front to back (`alloc.stream(name, shape, dtype)` in a cache build):
    plain writes instead of stores into a fresh memory map, which fault in every page (~4x
    slower here) and count the dirty pages in the process's RSS until unmapped."""

    def __init__(self, path: Path, shape: tuple[int, ...], dtype: Any) -> None:
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self._fh = open(path, "wb")
        np.lib.format.write_array_header_1_0(
            self._fh, {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False,
                       "shape": self.shape})
        self._left = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def write(self, arr: np.ndarray) -> None:
        """Append `arr` (its dtype must be the file's; C order)."""
        if arr.dtype != self.dtype:
            raise TypeError(f"{arr.dtype} written to a {self.dtype} file")
        data = np.ascontiguousarray(arr)
        self._left -= data.nbytes
        if self._left < 0:
            raise ValueError(f"{self._fh.name}: more bytes than its shape {self.shape}")
        self._fh.write(memoryview(data).cast("B"))

    def close(self) -> None:
        """Close; an incomplete file raises (it would otherwise fail only at load)."""
        if not self._fh.closed:
            self._fh.close()
            if self._left:
                raise ValueError(f"{self._fh.name}: {self._left} bytes short of its shape {self.shape}")


Preparer = Callable[[GGUFFile, Alloc], Any]
"""Fills arrays from alloc(name, shape, dtype); returns the JSON layout stored beside them."""


def _map_npy(file: Path, dtype: np.dtype, shape: tuple[int, ...]) -> tuple[np.ndarray, int] | None:
    """The .npy `file` memory-mapped read-only as (array, data offset) when its header is exactly
    the one `np.save` writes for (dtype, shape) and its size matches; else None. ~10x cheaper
    than `np.load(mmap_mode="r")` (no header evaluation, no np.memmap): a warm open maps 100-400."""
    with open(file, "rb") as fh:
        head = fh.read(12)
        if len(head) < 10 or head[:6] != b"\x93NUMPY":
            return None
        if head[6] == 1:
            start, length = 10, int.from_bytes(head[8:10], "little")
        else:
            start, length = 12, int.from_bytes(head[8:12], "little")
        fh.seek(start)
        header = fh.read(length).decode("latin1")
        expected = "{'descr': %r, 'fortran_order': False, 'shape': %r, }" % (dtype.str, shape)
        count = int(np.prod(shape, dtype=np.int64))
        offset = start + length
        if header.rstrip() != expected or os.fstat(fh.fileno()).st_size != offset + count * dtype.itemsize:
            return None
        if count == 0:
            return np.empty(shape, dtype), offset
        view = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    return np.frombuffer(view, dtype, count, offset).reshape(shape), offset


def _load_entry(entry: Path, identity: dict[str, Any]) -> CacheHit | None:
    """The cached arrays memory-mapped, or None when the entry is absent, stale or corrupt."""
    try:
        manifest = json.loads((entry / "manifest.json").read_text("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("weight cache %s: unreadable manifest (%s); rebuilding", entry, exc)
        return None
    try:
        if manifest.get("identity") != identity:
            return None
        hit = CacheHit(LlamaConfig.from_dict(manifest["config"]), {}, manifest.get("layout"), entry)
        for name, meta in manifest["arrays"].items():
            file = entry / f"{name}.npy"
            dtype, shape = np.dtype(meta.get("dtype", "float32")), tuple(meta["shape"])
            mapped = _map_npy(file, dtype, shape)
            if mapped is None:  # not the header np.save writes for it: let numpy say what is wrong
                mm = np.load(file, mmap_mode="r", allow_pickle=False)
                if mm.dtype != dtype or mm.shape != shape:
                    raise ValueError(f"{file.name}: shape {mm.shape} / {mm.dtype} != manifest")
                if mm.offset + mm.nbytes != file.stat().st_size:
                    raise ValueError(f"{file.name}: size does not match its header")
                mapped = np.asarray(mm), mm.offset
            arr, offset = mapped
            hit.arrays[name] = arr
            hit._files[id(arr)] = (file.name, offset)
        return hit
    except (OSError, ValueError, KeyError, TypeError, EOFError) as exc:
        log.warning("weight cache %s is corrupt (%s); rebuilding", entry, exc)
        return None


def _build_entry(gf: GGUFFile, entry: Path, identity: dict[str, Any], prepare: Preparer) -> None:
    """Write the prepared arrays into a temp folder, then rename it to `entry` atomically."""
    root = entry.parent
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".tmp-{entry.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        maps: dict[str, Any] = {}

        def alloc(name: str, shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
            mm = np.lib.format.open_memmap(tmp / f"{name}.npy", "w+", np.dtype(dtype), shape)
            maps[name] = mm
            return mm

        def stream(name: str, shape: tuple[int, ...], dtype: Any = np.float32) -> NpyStream:
            maps[name] = out = NpyStream(tmp / f"{name}.npy", shape, dtype)
            return out

        alloc.stream = stream  # type: ignore[attr-defined]
        try:
            layout = prepare(gf, alloc)
        finally:
            for out in maps.values():
                if isinstance(out, NpyStream):
                    out.close()
        # No msync: the page cache is what readers see, and forcing the writeback here cost
        # ~1.5 s (far more on a busy disk) of a 1B first open. A crash before the kernel wrote the
        # pages leaves files whose checksums fail, and the entry is rebuilt (cache_integrity).
        manifest = {
            "identity": identity,
            "source": str(gf.path),
            "created": time.time(),
            "config": gf.config.to_dict(),
            "arrays": {k: {"shape": list(a.shape), "dtype": a.dtype.name} for k, a in maps.items()},
            "layout": layout,
        }
        maps.clear()  # close the maps before the rename
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1), "utf-8")
        write_checksums(tmp)  # content digests, verified in the background after warm loads
        if entry.exists() and _load_entry(entry, identity) is not None:
            return  # another process finished the same entry meanwhile: keep theirs
        if entry.exists():  # stale or corrupt: move aside first (rename is atomic, rmtree is not)
            trash = root / f".trash-{entry.name}-{uuid.uuid4().hex[:8]}"
            os.replace(entry, trash)
            shutil.rmtree(trash, ignore_errors=True)
        try:
            os.replace(tmp, entry)
        except OSError:
            if not (entry / "manifest.json").exists():  # someone else won the race: keep theirs
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def cached_arrays(
    path: str | os.PathLike[str],
    cache_dir: str | os.PathLike[str] | None,
    kind: str,
    prepare: Preparer,
) -> tuple[LlamaConfig, CacheHit | None, str, dict[str, np.ndarray], Any]:
    """(config, hit, origin, arrays, layout) of `kind` for a GGUF, through the cache.

    Warm: memory-mapped from the entry (origin "cache"). Cold: validate the GGUF, `prepare`
    into a new entry, map it (origin "built"). When the cache cannot be written the arrays are
    prepared in memory (origin "memory", hit None).
    """
    path = Path(path)
    check_magic(path)
    cache_root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    identity = file_identity(path, kind)
    entry = _entry_for(path, cache_root, identity)
    hit = _load_entry(entry, identity)
    if hit is not None:
        note_warm_load(path, entry)  # verified by the loader before the first token
        _in_use(path, entry, kind, hit.arrays)
        return hit.config, hit, "cache", hit.arrays, hit.layout

    gf = open_gguf(path)
    try:
        try:
            _build_entry(gf, entry, identity, prepare)
        except OSError as exc:
            log.warning("cannot write the weight cache in %s (%s); preparing in memory", entry, exc)
            arrays: dict[str, np.ndarray] = {}

            def alloc(name: str, shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
                arrays[name] = np.empty(shape, dtype)
                return arrays[name]

            layout = prepare(gf, alloc)
            return gf.config, None, "memory", arrays, layout
    finally:
        gf.close()
    hit = _load_entry(entry, identity)
    if hit is None:
        raise ModelFileError(path, f"the weight cache {entry} could not be read back")
    _in_use(path, entry, kind, hit.arrays)
    store.remove_abandoned(cache_root)
    store.enforce_budget(cache_root)  # least recently used first; this entry is leased
    return hit.config, hit, "built", hit.arrays, hit.layout


def _prepare_f32(gf: GGUFFile, alloc: Alloc) -> None:
    prepare_weights(gf, alloc)


def load_weights(
    path: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None = None
) -> tuple[LlamaConfig, LlamaWeights]:
    """The model's config and prepared float32 weights, memory-mapped from the cache when warm.

    `cache_dir` is the app's cache root (default: `default_cache_dir()`); entries go in its
    `weights/` subfolder. A cold load validates the GGUF, dequantizes, writes the entry and maps
    it. When the cache cannot be written, the weights are prepared in memory instead.
    """
    config, hit, origin, arrays, _ = cached_arrays(path, cache_dir, "f32", _prepare_f32)
    return config, _weights_from_arrays(arrays, origin, hit.entry if hit else None)


__all__ = [
    "LAYOUT_VERSION",
    "CacheHit",
    "cached_arrays",
    "LlamaWeights",
    "cache_entry_dir",
    "default_cache_dir",
    "dequantize_tensor",
    "file_identity",
    "load_weights",
    "prepare_weights",
]
