"""The Llama forward pass in numpy, float32 end to end.

RMSNorm -> fused QKV matmul (+ qwen2 biases) -> RoPE over adjacent pairs -> grouped-query
attention over the KV cache (causal within a chunk) -> output projection -> residual ->
RMSNorm -> fused gate/up matmul -> SwiGLU -> down projection -> residual; final RMSNorm and
the output head for the last token only.

Tricks (all prepared once in `weights.py`): RMSNorm weights are folded into the following
matmul, so a norm is one scalar per token; q is pre-scaled by 1/sqrt(head_dim); RoPE is one
complex64 multiply over the q and k parts of the fused QKV buffer (adjacent float32 pairs are
the real and imaginary parts). A one-token decode step runs on preallocated buffers and
precomputed views, so each layer is ~20 numpy calls around its four matrix-vector products.
"""

from __future__ import annotations

import logging
import math
import os
from typing import Callable

import numpy as np

from ..base import (  # noqa: F401  (re-exported: the model's public names live here)
    WEIGHT_MODES,
    WEIGHTS_ENV,
    ForwardCancelled,
    LlamaBase,
    weights_mode,
)
from ..gguf.file import LlamaConfig
from ..kv_cache import KVCache
from .weights import LlamaWeights, load_weights

_F32 = np.float32
log = logging.getLogger(__name__)


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GELU, tanh approximation (ggml_gelu; Gemma's GeGLU), float32."""
    inner = x * x
    inner *= 0.044715
    inner += 1.0
    inner *= x
    inner *= 0.7978845608028654  # sqrt(2/pi)
    np.tanh(inner, out=inner)
    inner += 1.0
    inner *= x
    inner *= 0.5
    return inner


class LlamaModel(LlamaBase):
    """A Llama/Qwen2 model: `forward(tokens, cache, want_logits)` over a caller-owned KVCache.

    This class is the float32 reference; `from_gguf` returns its compact subclass
    (`llama_compact.CompactLlamaModel`) unless the weight mode says "f32".
    """

    weights_kind = "f32"

    def __init__(self, config: LlamaConfig, weights: LlamaWeights) -> None:
        self.weights = weights
        self._init_common(config, weights.rope_freq_factors)
        # Per-layer transposed views: x @ W.T reads each weight row contiguously.
        self._wqkv_t = [w.T for w in weights.wqkv]  # (dim, nqkv)
        self._wo_t = [w.T for w in weights.wo]  # (q_dim, dim)
        self._wgu_t = [w.T for w in weights.wgu]  # (dim, 2 ffn)
        self._wd_t = [w.T for w in weights.wd]  # (ffn, dim)
        self._bqkv = None if weights.bqkv is None else list(weights.bqkv)  # (nqkv,) each
        self._qk_norm = None if weights.q_norm is None or weights.k_norm is None else (
            list(weights.q_norm), list(weights.k_norm))  # (head_dim,) each, q's scale folded in
        # Which RoPE table each layer reads, decided once: "global", "local" or "none" (NoPE).
        self._layer_rope = tuple("none" if not config.rope_on(i) else "local" if config.is_local(i)
                                 else "global" for i in range(config.n_layers))
        self._post_attn = None if weights.post_attn_norm is None else list(weights.post_attn_norm)
        self._post_ffw = None if weights.post_ffw_norm is None else list(weights.post_ffw_norm)
        self._embd = weights.token_embd  # (vocab, dim)
        self._head_t = weights.output.T  # (dim, vocab)
        self._out_norm = weights.output_norm  # (dim,)

    @classmethod
    def from_gguf(
        cls,
        path: str | os.PathLike[str],
        cache_dir: str | os.PathLike[str] | None = None,
        weights: str | None = None,
        kernels: str | None = None,
    ) -> LlamaBase:
        """Load a GGUF (warm: memory-map from the weight cache; cold: prepare and cache).

        `weights`: "compact" or "f32" (default: `weights_mode()`, i.e. $TURBOSPARK_WEIGHTS).
        `kernels`: the compact model's kernel mode (`ort_graph.KERNEL_MODES`; default:
        $TURBOSPARK_KERNELS, else "exact-prompt"); ignored by the float32 model.
        """
        if weights_mode(weights) == "compact":
            from ..compact.forward import CompactLlamaModel, CompactUnsupported

            try:
                return CompactLlamaModel.load(path, cache_dir, kernels)
            except CompactUnsupported as exc:  # weights_kind tells the app which path runs
                log.warning("%s: compact weights unsupported (%s); using float32", path, exc)
        config, prepared = load_weights(path, cache_dir)
        return LlamaModel(config, prepared)

    def _head(self, x: np.ndarray, logits_out: np.ndarray | None, chunk: bool = False) -> np.ndarray:
        """Final RMSNorm + output head for one (dim,) residual vector (after a chunk or not)."""
        c = self.config
        r = 1.0 / math.sqrt(float(np.dot(x, x)) / c.dim + c.norm_eps)
        xn = x * self._out_norm
        xn *= r
        out = logits_out if logits_out is not None else np.empty(c.vocab_size, _F32)
        np.matmul(xn, self._head_t, out=out)  # (vocab,)
        if c.logit_scale != 1.0:
            out *= 1.0 / c.logit_scale
        if c.final_softcap > 0:  # Gemma: logits = c * tanh(logits / c)
            out *= 1.0 / c.final_softcap
            np.tanh(out, out=out)
            out *= c.final_softcap
        return out

    def _decode(self, token: int, cache: KVCache) -> np.ndarray:
        """One token at position cache.offset; returns the final residual (dim,) (a buffer)."""
        c = self.config
        b = self._buffers()
        pos = cache.offset
        cache.reserve(pos + 1)
        rots = self._layer_rotations(pos, pos + 1)  # per layer (rope_dims/2,) complex64
        x, xn, tmp, qkv, gu, act = b.x, b.xn, b.tmp, b.qkv, b.gu, b.act
        gate, up = b.gate, b.up
        k_layers, v_layers = cache.k_layers, cache.v_layers  # after reserve(): current
        inv_dim, eps = 1.0 / c.dim, c.norm_eps
        wqkv_t, wo_t, wgu_t, wd_t, bqkv = self._wqkv_t, self._wo_t, self._wgu_t, self._wd_t, self._bqkv
        dot, matmul, multiply, exp, sqrt = np.dot, np.matmul, np.multiply, np.exp, math.sqrt
        attend = self._attend_one
        silu, pre = c.activation == "silu", c.pre_norms
        np.copyto(x, self._embd[token])
        if c.embedding_scale != 1.0:
            x *= c.embedding_scale
        for i in range(c.n_layers):
            # attention
            if pre:  # the norm's weight is folded into the matmul
                multiply(x, 1.0 / sqrt(float(dot(x, x)) * inv_dim + eps), out=xn)
            else:
                np.copyto(xn, x)
            matmul(xn, wqkv_t[i], out=qkv)  # (nqkv,)
            if bqkv is not None:
                qkv += bqkv[i]
            if self._qk_norm is not None:
                self._norm_heads(qkv, i)
            window = c.sliding_window if c.is_local(i) else 0
            matmul(attend(b, k_layers[i], v_layers[i], pos, rots[i], window), wo_t[i], out=tmp)  # (dim,)
            x += self._branch(tmp, self._post_attn, i)
            # feed-forward
            if pre:
                multiply(x, 1.0 / sqrt(float(dot(x, x)) * inv_dim + eps), out=xn)
            else:
                np.copyto(xn, x)
            matmul(xn, wgu_t[i], out=gu)  # (2 ffn,)
            if silu:
                np.negative(gate, out=act)
                exp(act, out=act)
                act += 1.0
                np.divide(gate, act, out=act)  # silu(gate)
            else:
                act[...] = _gelu_tanh(gate)
            act *= up
            matmul(act, wd_t[i], out=tmp)  # (dim,)
            x += self._branch(tmp, self._post_ffw, i)
        cache.advance(1)
        return x

    def _chunk(
        self, ids: np.ndarray, cache: KVCache, cancel: Callable[[], bool] | None = None
    ) -> np.ndarray:
        """T >= 2 tokens at positions [offset, offset+T): one matmul per weight per layer."""
        c = self.config
        t_len = ids.size
        p = cache.offset
        cache.reserve(p + t_len)
        rots = self._layer_rotations(p, p + t_len)  # per layer (T, 1, rope_dims/2)
        f = c.ffn_dim
        x = self._embd[ids]  # (T, dim) copy
        if c.embedding_scale != 1.0:
            x *= c.embedding_scale
        norm = self._rms if c.pre_norms else (lambda v: v)
        for i in range(c.n_layers):
            if cancel is not None and cancel():
                raise ForwardCancelled()
            qkv = norm(x) @ self._wqkv_t[i]  # (T, nqkv)
            if self._bqkv is not None:
                qkv += self._bqkv[i]
            if self._qk_norm is not None:
                self._norm_heads(qkv, i)
            window = c.sliding_window if c.is_local(i) else 0
            a = self._attend_chunk(qkv, cache.k_layers[i], cache.v_layers[i], p, rots[i], window)
            x += self._branch(a @ self._wo_t[i], self._post_attn, i)
            gu = norm(x) @ self._wgu_t[i]  # (T, 2 ffn)
            gate = gu[:, :f]
            if c.activation == "silu":
                h = np.exp(-gate)
                h += 1.0
                np.divide(gate, h, out=h)
            else:
                h = _gelu_tanh(gate)
            h *= gu[:, f:]
            x += self._branch(h @ self._wd_t[i], self._post_ffw, i)
        cache.advance(t_len)
        return x[-1]

    def _layer_rotations(self, start: int, end: int) -> list[np.ndarray]:
        """Each layer's RoPE factors for positions [start, end): the global or the local table,
        or ones for a layer without RoPE. (rope_dims/2,) for one position, else (T, 1, rope_dims/2)."""
        one = end - start == 1

        def rows(table: np.ndarray) -> np.ndarray:
            return table[start] if one else table[start:end, None, :]

        tables = {"global": rows(self._rope_table(end))}
        kinds = self._layer_rope
        if "local" in kinds:
            tables["local"] = rows(self._rope_table(end, local=True)) if self.has_local_rope else tables["global"]
        if "none" in kinds:
            tables["none"] = np.ones_like(tables["global"])
        return [tables[kind] for kind in kinds]

    def _branch(self, y: np.ndarray, post: list[np.ndarray] | None, i: int) -> np.ndarray:
        """A branch's output before its residual add: the post norm (Gemma, OLMo 2) and the
        residual scale (Granite), in place on `y`."""
        c = self.config
        if post is not None:
            y *= self._rms_scale(y)
            y *= post[i]
        if c.residual_scale != 1.0:
            y *= c.residual_scale
        return y

    def _rms_scale(self, y: np.ndarray) -> np.ndarray | float:
        """1/RMS of y's rows: a scalar for (dim,), (T, 1) for (T, dim)."""
        eps = self.config.norm_eps
        if y.ndim == 1:
            return 1.0 / math.sqrt(float(np.dot(y, y)) / y.size + eps)
        return (1.0 / np.sqrt(np.einsum("td,td->t", y, y) * (1.0 / y.shape[1]) + eps))[:, None]

    def _norm_heads(self, qkv: np.ndarray, i: int) -> None:
        """Per-head RMSNorm of the q and k parts of (..., nqkv) q|k|v in place, before RoPE."""
        c = self.config
        assert self._qk_norm is not None
        lead = qkv.shape[:-1]
        full = c.qk_norm == "full"  # OLMo 2: one norm over the whole projection
        parts = ((slice(0, c.q_dim), 1 if full else c.n_heads, self._qk_norm[0][i]),
                 (slice(c.q_dim, c.q_dim + c.kv_dim), 1 if full else c.n_kv_heads, self._qk_norm[1][i]))
        for cols, n_heads, weight in parts:
            width = (cols.stop - cols.start) // n_heads
            h = qkv[..., cols].reshape(*lead, n_heads, width)  # (..., heads, hd) or (..., 1, q_dim)
            ms = np.einsum("...d,...d->...", h, h) * (1.0 / width)  # (..., heads)
            h = h * (1.0 / np.sqrt(ms + c.norm_eps))[..., None]
            qkv[..., cols] = (h * weight).reshape(*lead, n_heads * width)

    def _rms(self, x: np.ndarray) -> np.ndarray:
        """Row-wise RMS normalisation (the weight is folded into the next matmul): (T, dim)."""
        ss = np.einsum("td,td->t", x, x)  # (T,)
        r = 1.0 / np.sqrt(ss * (1.0 / self.config.dim) + self.config.norm_eps)
        return x * r[:, None]
