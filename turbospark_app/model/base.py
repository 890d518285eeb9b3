"""What every Llama forward pass shares, whatever holds the weights: RoPE, the KV cache, the
numpy attention (one token or a causal chunk), the `forward` contract and Stop between layers.

`llama.LlamaModel` (float32 weights, the reference) and `llama_compact.CompactLlamaModel`
(the GGUF's blocks through ONNX Runtime) subclass `LlamaBase` and supply `_decode`, `_chunk`
and `_head`.
"""

from __future__ import annotations

import os
import threading
from typing import Callable, Sequence

import numpy as np

from .choice.weights import DEFAULT_WEIGHTS, WEIGHT_MODES, WEIGHTS_ENV  # noqa: F401 (re-exported)
from .gguf.file import LlamaConfig
from .kv_cache import KVCache

_F32 = np.float32
_ROPE_TABLE_STEP = 1024  # positions of cos/sin added per growth of the RoPE table
_ATTN_BLOCK_ELEMS = 1 << 22  # max float32 scores held at once by chunked attention (16 MiB)
_ATTN_QUERY_BLOCK = 128  # query tokens per block of chunked attention


def weights_mode(explicit: str | None = None) -> str:
    """The weight mode to load with: `explicit`, else $TURBOSPARK_WEIGHTS, else "compact"."""
    mode = (explicit or os.environ.get(WEIGHTS_ENV, "") or DEFAULT_WEIGHTS).strip().lower()
    if mode not in WEIGHT_MODES:
        raise ValueError(f"unknown weight mode {mode!r} (choose one of {', '.join(WEIGHT_MODES)})")
    return mode


class ForwardCancelled(Exception):
    """A chunk's forward pass stopped between layers: the KV cache did not advance."""


class _DecodeBuffers:
    """Per-thread buffers and views for the one-token step (no allocation in the hot loop)."""

    def __init__(self, c: LlamaConfig) -> None:
        nqkv = c.q_dim + 2 * c.kv_dim
        self.x = np.empty(c.dim, _F32)  # (dim,) residual stream
        self.xn = np.empty(c.dim, _F32)  # (dim,) normalised input of a matmul
        self.tmp = np.empty(c.dim, _F32)  # (dim,) a sublayer's output
        self.qkv = np.empty(nqkv, _F32)  # (q_dim + 2 kv_dim,)
        self.gu = np.empty(2 * c.ffn_dim, _F32)  # (2 ffn,) [gate | up]
        self.act = np.empty(c.ffn_dim, _F32)  # (ffn,)
        qk = self.qkv[: c.q_dim + c.kv_dim].view(np.complex64)
        # (n_heads + n_kv, rope_dims/2) complex view of q and k: adjacent pairs = (re, im)
        self.qk_rot = qk.reshape(c.n_heads + c.n_kv_heads, c.head_dim // 2)[:, : c.rope_dims // 2]
        # (n_kv, g, 1, hd): each query head as a row vector
        self.q = self.qkv[: c.q_dim].reshape(c.n_kv_heads, c.group_size, 1, c.head_dim)
        self.k = self.qkv[c.q_dim : c.q_dim + c.kv_dim].reshape(c.n_kv_heads, c.head_dim)
        self.v = self.qkv[c.q_dim + c.kv_dim :].reshape(c.n_kv_heads, c.head_dim)
        self.gate = self.gu[: c.ffn_dim]
        self.up = self.gu[c.ffn_dim :]


class LlamaBase:
    """A Llama/Qwen2 model: `forward(tokens, cache, want_logits)` over a caller-owned KVCache."""

    weights_kind = "?"
    keys_transposed = True  # the KV cache layout this model reads (see kv_cache.py)

    def _init_common(self, config: LlamaConfig, rope_freq_factors: np.ndarray | None) -> None:
        self.config = c = config
        inv_freq = c.rope_base ** (-np.arange(0, c.rope_dims, 2, dtype=np.float64) / c.rope_dims)
        if rope_freq_factors is not None:
            inv_freq = inv_freq / rope_freq_factors.astype(np.float64)
        self._inv_freq = inv_freq / c.rope_linear_scale  # (rope_dims/2,) float64
        self._rope_gain = c.rope_attn_factor  # LongRoPE's mscale on cos and sin (global table)
        self._rot = np.empty((0, c.rope_dims // 2), np.complex64)  # (positions, rope_dims/2)
        # Sliding-window layers' own table (Gemma: another base; never scaled), when it differs.
        base_local = c.rope_base_local or c.rope_base
        local = base_local ** (-np.arange(0, c.rope_dims, 2, dtype=np.float64) / c.rope_dims)
        self._inv_freq_local = None if not c.swa_layers or np.array_equal(local, self._inv_freq) else local
        self._rot_local = np.empty((0, c.rope_dims // 2), np.complex64)
        self._rot_lock = threading.Lock()
        self._tls = threading.local()

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    def new_cache(self, max_context: int | None = None, step: int = 256) -> KVCache:
        """An empty KV cache for this model (grows in `step`-token steps up to max_context)."""
        c = self.config
        return KVCache(c.n_layers, c.n_kv_heads, c.head_dim, max_context or c.context_length, step,
                       keys_transposed=self.keys_transposed)

    # -- RoPE -----------------------------------------------------------------------------------

    def _rope_table(self, n_positions: int, local: bool = False) -> np.ndarray:
        """cos + i sin of every (position, frequency) up to n_positions: (n, rope_dims/2) complex64.
        `local`: the sliding-window layers' table (the global one when they share it)."""
        local = local and self._inv_freq_local is not None
        rot = self._rot_local if local else self._rot
        if rot.shape[0] >= n_positions:
            return rot
        with self._rot_lock:
            rot = self._rot_local if local else self._rot
            if rot.shape[0] < n_positions:
                n = -(-n_positions // _ROPE_TABLE_STEP) * _ROPE_TABLE_STEP
                inv_freq = self._inv_freq_local if local else self._inv_freq
                angles = np.outer(np.arange(n, dtype=np.float64), inv_freq)
                gain = 1.0 if local else self._rope_gain
                rot = ((np.cos(angles) + 1j * np.sin(angles)) * gain).astype(np.complex64)
                if local:
                    self._rot_local = rot
                else:
                    self._rot = rot
            return rot

    @property
    def has_local_rope(self) -> bool:
        """Whether the sliding-window layers rotate with their own table."""
        return self._inv_freq_local is not None

    # -- forward --------------------------------------------------------------------------------

    def forward(
        self,
        tokens: Sequence[int] | np.ndarray,
        cache: KVCache,
        want_logits: bool = True,
        logits_out: np.ndarray | None = None,
        cancel: Callable[[], bool] | None = None,
        prompt: bool | None = None,
    ) -> np.ndarray | None:
        """Feed `tokens` at positions [cache.offset, cache.offset + T); advance the cache.

        Returns the (vocab,) float32 logits after the LAST token (written into `logits_out`
        when given), or None when `want_logits` is False (the output head is skipped).
        A chunk (T >= 2) polls `cancel` between layers; when it says True the pass stops with
        `ForwardCancelled` and the cache keeps its offset (the chunk is not committed).
        `prompt`: whether the tokens are prompt tokens (None: when T >= 2); the compact model
        runs those through its exact kernels (`ort_graph.KERNEL_MODES`), the float32 one
        ignores it.
        """
        ids = self._check_tokens(tokens, cache)
        with np.errstate(over="ignore"):  # exp(-gate) may overflow to inf: silu -> 0, fine
            if ids.size == 1:
                x = self._decode(int(ids[0]), cache)
            else:
                x = self._chunk(ids, cache, cancel)
        if not want_logits:
            return None
        return self._head(x, logits_out, ids.size > 1)

    def forward_rows(self, tokens: Sequence[int] | np.ndarray, cache: KVCache,
                     logits_out: np.ndarray) -> np.ndarray:
        """Feed `tokens` with the logits after EVERY one, (T, vocab) into `logits_out` (a
        draft's verification). Here: one decode step per token, the numerics of `forward`."""
        ids = self._check_tokens(tokens, cache)
        for t, token in enumerate(ids):
            self.forward((int(token),), cache, True, logits_out[t])
        return logits_out

    def forward_batch(self, tokens: Sequence[int], caches: Sequence[KVCache],
                      logits_out: np.ndarray) -> np.ndarray:
        """One decode step for each (token, cache) pair, row b's logits into logits_out[b].
        Here: one step after the other (the compact model runs them as one pass)."""
        self._check_batch(tokens, caches, logits_out)
        for b, (token, cache) in enumerate(zip(tokens, caches)):
            self.forward((int(token),), cache, True, logits_out[b])
        return logits_out

    def _check_batch(self, tokens: Sequence[int], caches: Sequence[KVCache], logits_out: np.ndarray) -> None:
        if len(tokens) != len(caches) or logits_out.shape != (len(caches), self.config.vocab_size):
            raise ValueError("forward_batch needs one token and one logits row per cache")

    def _check_tokens(self, tokens: Sequence[int] | np.ndarray, cache: KVCache) -> np.ndarray:
        """The token ids as an (T,) intp array, after checking them and the cache's shape."""
        c = self.config
        if (cache.n_layers, cache.n_kv_heads, cache.head_dim, cache.keys_transposed) != (
            c.n_layers,
            c.n_kv_heads,
            c.head_dim,
            self.keys_transposed,
        ):
            raise ValueError(f"{cache!r} was not made for this model")
        ids = np.asarray(tokens, dtype=np.intp).reshape(-1)
        if ids.size == 0:
            raise ValueError("forward() needs at least one token")
        if ids.min() < 0 or ids.max() >= c.vocab_size:
            raise ValueError(f"token id out of range [0, {c.vocab_size}): {tokens!r}"[:200])
        return ids

    def _head(self, x: np.ndarray, logits_out: np.ndarray | None, chunk: bool = False) -> np.ndarray:
        raise NotImplementedError

    def _decode(self, token: int, cache: KVCache) -> np.ndarray:
        raise NotImplementedError

    def _chunk(
        self, ids: np.ndarray, cache: KVCache, cancel: Callable[[], bool] | None = None
    ) -> np.ndarray:
        raise NotImplementedError

    def _buffers(self) -> _DecodeBuffers:
        buf = getattr(self._tls, "buf", None)
        if buf is None:
            buf = self._tls.buf = _DecodeBuffers(self.config)
        return buf

    def _attend_one(
        self, b: _DecodeBuffers, kt: np.ndarray, vv: np.ndarray, pos: int, rot: np.ndarray,
        window: int = 0,
    ) -> np.ndarray:
        """RoPE on b.qkv's q and k, store k/v at `pos`, attend over [0, pos]: (q_dim,).

        kt: (n_kv, hd, capacity) keys transposed; vv: (n_kv, capacity, hd). q is pre-scaled.
        `window` > 0: only the `window` most recent positions (self included) are seen.
        """
        n = pos + 1
        lo = max(0, n - window) if window > 0 else 0
        matmul = np.matmul
        np.multiply(b.qk_rot, rot, out=b.qk_rot)  # RoPE on q and k at once
        kt[:, :, pos] = b.k
        vv[:, pos] = b.v
        # Batched vector-matrix products (BLAS gemv, one per query head): ~2x faster than
        # (g x hd) @ (hd x n) gemms, which OpenBLAS handles poorly for 3-row operands.
        s = matmul(b.q, kt[:, None, :, lo:n])  # (n_kv, g, 1, hd) @ (n_kv, 1, hd, n) -> (n_kv, g, 1, n)
        self._softcap(s)
        s -= np.maximum.reduce(s, axis=3, keepdims=True)
        np.exp(s, out=s)
        o = matmul(s, vv[:, None, lo:n])  # (n_kv, g, 1, n) @ (n_kv, 1, n, hd) -> (n_kv, g, 1, hd)
        o /= np.add.reduce(s, axis=3, keepdims=True)
        return o.reshape(self.config.q_dim)

    def _softcap(self, s: np.ndarray) -> None:
        """Gemma 2's score soft-cap, in place: s = c * tanh(s / c) (s is already scaled)."""
        cap = self.config.attn_softcap
        if cap > 0:
            s *= 1.0 / cap
            np.tanh(s, out=s)
            s *= cap

    def _attend_chunk(
        self, qkv: np.ndarray, kt: np.ndarray, vv: np.ndarray, p: int, rot: np.ndarray, window: int = 0
    ) -> np.ndarray:
        """RoPE on a chunk's (T, nqkv) q|k|v (in place), store its k/v at [p, p+T), causal
        attention over the cache: (T, q_dim). rot: (T, 1, rope_dims/2)."""
        c = self.config
        t_len = qkv.shape[0]
        n = p + t_len
        q_dim = c.q_dim
        qk = qkv[:, : q_dim + c.kv_dim].view(np.complex64).reshape(t_len, -1, c.head_dim // 2)
        qk[:, :, : c.rope_dims // 2] *= rot  # RoPE, (T, n_heads + n_kv, rope_dims/2)
        kv_new = qkv[:, q_dim:].reshape(t_len, 2, c.n_kv_heads, c.head_dim)
        kt[:, :, p:n] = kv_new[:, 0].transpose(1, 2, 0)  # (n_kv, hd, T)
        vv[:, p:n] = kv_new[:, 1].transpose(1, 0, 2)  # (n_kv, T, hd)
        q = qkv[:, :q_dim].reshape(t_len, c.n_kv_heads, c.group_size, c.head_dim)
        return self._attend(q.transpose(1, 0, 2, 3), kt, vv, p, window)

    def _attend(self, q: np.ndarray, kt: np.ndarray, vv: np.ndarray, p: int, window: int = 0) -> np.ndarray:
        """Causal GQA of a chunk at positions p..p+T-1 over the cache -> (T, q_dim).

        q: (n_kv, T, g, hd); kt: (n_kv, hd, capacity) keys transposed; vv: (n_kv, capacity, hd).
        Queries go in blocks of <= 128 tokens: a block attends to keys [0, p + its end) only (the
        later ones are masked for all of its queries anyway), and only its own diagonal block
        of keys needs the causal mask. Scores stay small enough for the L2 cache.
        """
        n_kv, t_len, g, hd = q.shape
        out = np.empty((t_len, n_kv, g, hd), _F32)  # (T, n_kv, g, hd)
        block = max(1, min(t_len, _ATTN_QUERY_BLOCK, _ATTN_BLOCK_ELEMS // (n_kv * g * (p + t_len))))
        tri = np.triu(np.full((block, block), -np.inf, _F32), k=1)  # (block, block) causal mask
        for t0 in range(0, t_len, block):
            t1 = min(t_len, t0 + block)
            nb, n_keys = t1 - t0, p + t1
            qb = q[:, t0:t1].reshape(n_kv, nb * g, hd)  # (n_kv, nb*g, hd)
            s = np.matmul(qb, kt[:, :, :n_keys])  # (n_kv, nb*g, n_keys)
            s4 = s.reshape(n_kv, nb, g, n_keys)
            self._softcap(s)
            s4[..., p + t0 :] += tri[None, :nb, None, :nb]  # keys of the block itself
            if window > 0:  # sliding window: key s is hidden from query t iff t - s >= window
                far = (np.arange(p + t0, p + t1)[:, None] - np.arange(n_keys)[None, :]) >= window
                s4 += np.where(far, -np.inf, 0.0).astype(_F32)[None, :, None, :]
            s -= np.maximum.reduce(s, axis=2, keepdims=True)
            np.exp(s, out=s)
            o = np.matmul(s, vv[:, :n_keys])  # (n_kv, nb*g, hd)
            o /= np.add.reduce(s, axis=2, keepdims=True)
            out[t0:t1] = o.reshape(n_kv, nb, g, hd).transpose(1, 0, 2, 3)
        return out.reshape(t_len, n_kv * g * hd)

