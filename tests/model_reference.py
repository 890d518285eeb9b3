"""Plain, obviously-correct references for the model tests (not imported by the app).

- `ref_dequantize(raw, qtype, shape)`: block formats transcribed from llama.cpp's
  ggml-common.h / ggml-quants.c (dequantize_row_*), vectorised only over blocks.
- `ref_forward(weights, cfg, tokens)`: a float64 Llama/Qwen2 forward with per-head, per-token
  loops and RoPE written pair by pair. Returns the logits of EVERY position.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

QK_K = 256
REFERENCE_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K")


def _f16(b: np.ndarray) -> np.ndarray:
    """Little-endian half floats from a (n_blocks, 2) uint8 array -> (n_blocks,) float64."""
    return np.ascontiguousarray(b).view("<f2")[:, 0].astype(np.float64)


def _scale_min_k4(j: int, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """llama.cpp get_scale_min_k4 over blocks: q is (n_blocks, 12) uint8."""
    q = q.astype(np.int64)
    if j < 4:
        return q[:, j] & 63, q[:, j + 4] & 63
    d = (q[:, j + 4] & 0xF) | ((q[:, j - 4] >> 6) << 4)
    m = (q[:, j + 4] >> 4) | ((q[:, j] >> 6) << 4)
    return d, m


def ref_dequantize(raw: np.ndarray, qtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """Dequantize raw GGUF tensor bytes of type `qtype` (a name) into float64 `shape`."""
    raw = np.ascontiguousarray(raw).reshape(-1).view(np.uint8)
    if qtype == "F32":
        return raw.view("<f4").astype(np.float64).reshape(shape)
    if qtype == "F16":
        return raw.view("<f2").astype(np.float64).reshape(shape)
    if qtype == "BF16":
        bits = raw.view("<u2").astype(np.uint32) << 16
        return bits.view(np.float32).astype(np.float64).reshape(shape)
    size = {"Q4_0": 18, "Q4_1": 20, "Q5_0": 22, "Q5_1": 24, "Q8_0": 34,
            "Q4_K": 144, "Q5_K": 176, "Q6_K": 210}[qtype]
    b = raw.reshape(-1, size)  # (n_blocks, bytes)
    nb = b.shape[0]
    if qtype == "Q8_0":
        d = _f16(b[:, 0:2])
        qs = b[:, 2:34].view(np.int8).astype(np.float64)
        y = qs * d[:, None]
    elif qtype in ("Q4_0", "Q4_1"):
        d = _f16(b[:, 0:2])
        m = _f16(b[:, 2:4]) if qtype == "Q4_1" else None
        qs = b[:, 4:20] if qtype == "Q4_1" else b[:, 2:18]
        y = np.zeros((nb, 32))
        for j in range(16):
            lo, hi = (qs[:, j] & 0x0F).astype(np.float64), (qs[:, j] >> 4).astype(np.float64)
            if m is None:
                y[:, j], y[:, j + 16] = (lo - 8) * d, (hi - 8) * d
            else:
                y[:, j], y[:, j + 16] = lo * d + m, hi * d + m
    elif qtype in ("Q5_0", "Q5_1"):
        d = _f16(b[:, 0:2])
        if qtype == "Q5_1":
            m, qh, qs = _f16(b[:, 2:4]), b[:, 4:8], b[:, 8:24]
        else:
            m, qh, qs = None, b[:, 2:6], b[:, 6:22]
        qh32 = np.ascontiguousarray(qh).view("<u4")[:, 0].astype(np.int64)
        y = np.zeros((nb, 32))
        for j in range(16):
            xh0 = ((qh32 >> j) << 4) & 0x10
            xh1 = (qh32 >> (j + 12)) & 0x10
            x0 = (qs[:, j] & 0x0F).astype(np.int64) | xh0
            x1 = (qs[:, j] >> 4).astype(np.int64) | xh1
            if m is None:
                y[:, j], y[:, j + 16] = (x0 - 16) * d, (x1 - 16) * d
            else:
                y[:, j], y[:, j + 16] = x0 * d + m, x1 * d + m
    elif qtype in ("Q4_K", "Q5_K"):
        d, dmin = _f16(b[:, 0:2]), _f16(b[:, 2:4])
        scales = b[:, 4:16]
        qh = b[:, 16:48] if qtype == "Q5_K" else None
        ql = b[:, 48:176] if qtype == "Q5_K" else b[:, 16:144]
        y = np.zeros((nb, QK_K))
        out, q_off, is_, u1, u2 = 0, 0, 0, 1, 2
        for _j in range(0, QK_K, 64):
            sc1, m1 = _scale_min_k4(is_, scales)
            sc2, m2 = _scale_min_k4(is_ + 1, scales)
            d1, mm1, d2, mm2 = d * sc1, dmin * m1, d * sc2, dmin * m2
            for l in range(32):
                q = (ql[:, q_off + l] & 0xF).astype(np.float64)
                if qh is not None:
                    q += np.where(qh[:, l] & u1, 16, 0)
                y[:, out + l] = d1 * q - mm1
            for l in range(32):
                q = (ql[:, q_off + l] >> 4).astype(np.float64)
                if qh is not None:
                    q += np.where(qh[:, l] & u2, 16, 0)
                y[:, out + 32 + l] = d2 * q - mm2
            out, q_off, is_, u1, u2 = out + 64, q_off + 32, is_ + 2, u1 << 2, u2 << 2
    elif qtype == "Q6_K":
        ql_all, qh_all = b[:, 0:128].astype(np.int64), b[:, 128:192].astype(np.int64)
        sc_all = b[:, 192:208].view(np.int8).astype(np.float64)
        d = _f16(b[:, 208:210])
        y = np.zeros((nb, QK_K))
        for n in range(0, QK_K, 128):
            ql = ql_all[:, n // 2 : n // 2 + 64]
            qh = qh_all[:, n // 4 : n // 4 + 32]
            sc = sc_all[:, n // 16 : n // 16 + 8]
            for l in range(32):
                is_ = l // 16
                q1 = ((ql[:, l] & 0xF) | (((qh[:, l] >> 0) & 3) << 4)) - 32
                q2 = ((ql[:, l + 32] & 0xF) | (((qh[:, l] >> 2) & 3) << 4)) - 32
                q3 = ((ql[:, l] >> 4) | (((qh[:, l] >> 4) & 3) << 4)) - 32
                q4 = ((ql[:, l + 32] >> 4) | (((qh[:, l] >> 6) & 3) << 4)) - 32
                y[:, n + l] = d * sc[:, is_] * q1
                y[:, n + l + 32] = d * sc[:, is_ + 2] * q2
                y[:, n + l + 64] = d * sc[:, is_ + 4] * q3
                y[:, n + l + 96] = d * sc[:, is_ + 6] * q4
    else:
        raise ValueError(qtype)
    return y.reshape(shape)


def _rms(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x) + eps) * w


def _rope(vec: np.ndarray, pos: int, cfg: dict[str, Any], factors: np.ndarray | None,
          base: float | None = None, linear_scale: float | None = None, mscale: float = 1.0) -> np.ndarray:
    """Rotate one head vector at absolute position `pos`, pair by pair."""
    out = vec.copy()
    n_rot = cfg["rope_dims"]
    half = n_rot // 2
    base = cfg["rope_base"] if base is None else base
    linear_scale = cfg.get("linear_scale", 1.0) if linear_scale is None else linear_scale
    for i in range(half):
        freq = base ** (-2.0 * i / n_rot)
        if factors is not None:
            freq /= factors[i]
        theta = pos / linear_scale * freq
        a, b = (i, i + half) if cfg["arch"] in NEOX else (2 * i, 2 * i + 1)
        c, s = math.cos(theta) * mscale, math.sin(theta) * mscale
        out[a] = vec[a] * c - vec[b] * s
        out[b] = vec[a] * s + vec[b] * c
    return out


NEOX = ("qwen2", "qwen3", "gemma2", "gemma3", "olmo2", "phi3")
GEMMA = ("gemma2", "gemma3")


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def _local_layers(cfg: dict[str, Any]) -> tuple[set[int], int]:
    """(sliding-window layers, window) as llama.cpp reads them for the test's families."""
    meta, arch, n = cfg.get("meta", {}), cfg["arch"], cfg["n_layers"]
    window = meta.get("attention.sliding_window", 4096 if arch == "gemma2" else 0)
    if not window:
        return set(), 0
    pattern = meta.get("attention.sliding_window_pattern", {"gemma2": 2, "gemma3": 6}.get(arch, 4))
    if isinstance(pattern, list):
        return {i for i, local in enumerate(pattern) if local}, window
    return {il for il in range(n) if il % pattern < pattern - 1}, window


def ref_forward(w: dict[str, np.ndarray], cfg: dict[str, Any], tokens: list[int]) -> np.ndarray:
    """float64 logits (T, vocab) of every position of `tokens` fed from position 0."""
    n_heads, n_kv, hd, eps = cfg["n_heads"], cfg["n_kv"], cfg["head_dim"], cfg["eps"]
    arch, meta = cfg["arch"], cfg.get("meta", {})
    group = n_heads // n_kv
    factors = w.get("rope_freqs.weight")
    mscale = 1.0
    if arch == "phi3":  # LongRoPE: long factors past the original context; cos/sin * attn_factor
        long = cfg["context"] > meta.get("rope.scaling.original_context_length", cfg["context"])
        factors = w["rope_factors_long.weight" if long else "rope_factors_short.weight"]
        mscale = meta.get("rope.scaling.attn_factor", 1.0)
    t_len = len(tokens)
    local_layers, window = _local_layers(cfg)
    # granite's four scales; Gemma's sqrt(dim) embedding scale and soft-caps
    res = meta.get("residual_scale", 1.0)
    kq_scale = meta.get("attention.scale") or 1.0 / math.sqrt(hd)
    embd_scale = math.sqrt(cfg["dim"]) if arch in GEMMA else meta.get("embedding_scale", 1.0)
    attn_cap = meta.get("attn_logit_softcapping", 50.0) if arch == "gemma2" else 0.0
    final_cap = meta.get("final_logit_softcapping", 30.0 if arch == "gemma2" else 0.0)
    x = np.array([w["token_embd.weight"][t] for t in tokens]) * embd_scale  # (T, dim)
    for layer in range(cfg["n_layers"]):
        p = f"blk.{layer}."
        nope = arch == "smollm3" and (layer + 1) % 4 == 0  # SmolLM3: no RoPE
        local = layer in local_layers
        if local:  # the local layers' RoPE: their own base, never scaled
            default_base = 10000.0 if arch == "gemma3" else cfg["rope_base"]
            base, lin = (cfg["rope_base"] if arch == "olmo2" else meta.get("rope.freq_base_swa", default_base)), 1.0
        else:
            base, lin = None, None
        if arch == "olmo2":
            h = x
        else:
            h = np.array([_rms(x[t], w[p + "attn_norm.weight"], eps) for t in range(t_len)])
        if arch == "phi3":
            qkv = h @ w[p + "attn_qkv.weight"].T
            q, k, v = np.split(qkv, [n_heads * hd, (n_heads + n_kv) * hd], axis=1)
        else:
            q = h @ w[p + "attn_q.weight"].T
            k = h @ w[p + "attn_k.weight"].T
            v = h @ w[p + "attn_v.weight"].T
        if arch == "qwen2":
            q, k, v = q + w[p + "attn_q.bias"], k + w[p + "attn_k.bias"], v + w[p + "attn_v.bias"]
        if arch == "olmo2":  # q/k norms over the whole projection
            q = np.array([_rms(q[t], w[p + "attn_q_norm.weight"], eps) for t in range(t_len)])
            k = np.array([_rms(k[t], w[p + "attn_k_norm.weight"], eps) for t in range(t_len)])
        q = q.reshape(t_len, n_heads, hd)
        k = k.reshape(t_len, n_kv, hd)
        v = v.reshape(t_len, n_kv, hd)
        if arch in ("qwen3", "gemma3"):  # per-head RMSNorm before RoPE
            for t in range(t_len):
                for hh in range(n_heads):
                    q[t, hh] = _rms(q[t, hh], w[p + "attn_q_norm.weight"], eps)
                for hh in range(n_kv):
                    k[t, hh] = _rms(k[t, hh], w[p + "attn_k_norm.weight"], eps)
        for t in range(t_len if not nope else 0):
            for hh in range(n_heads):
                q[t, hh] = _rope(q[t, hh], t, cfg, factors, base, lin, mscale)
            for hh in range(n_kv):
                k[t, hh] = _rope(k[t, hh], t, cfg, factors, base, lin, mscale)
        attn = np.zeros((t_len, n_heads, hd))
        for hh in range(n_heads):
            kvh = hh // group
            for t in range(t_len):
                first = max(0, t - window + 1) if local else 0
                keys = range(first, t + 1)
                scores = np.array([q[t, hh] @ k[s, kvh] * kq_scale for s in keys])
                if attn_cap:
                    scores = attn_cap * np.tanh(scores / attn_cap)
                probs = np.exp(scores - scores.max())
                probs /= probs.sum()
                attn[t, hh] = sum(pr * v[s, kvh] for pr, s in zip(probs, keys))
        o = attn.reshape(t_len, n_heads * hd) @ w[p + "attn_output.weight"].T
        if p + "post_attention_norm.weight" in w:
            o = np.array([_rms(o[t], w[p + "post_attention_norm.weight"], eps) for t in range(t_len)])
        x = x + res * o
        if arch == "olmo2":
            h = x
        else:
            h = np.array([_rms(x[t], w[p + "ffn_norm.weight"], eps) for t in range(t_len)])
        if arch == "phi3":
            gate, up = np.split(h @ w[p + "ffn_up.weight"].T, 2, axis=1)
        else:
            gate = h @ w[p + "ffn_gate.weight"].T
            up = h @ w[p + "ffn_up.weight"].T
        act = _gelu_tanh(gate) if arch in GEMMA else gate / (1.0 + np.exp(-gate))
        f = (act * up) @ w[p + "ffn_down.weight"].T
        if p + "post_ffw_norm.weight" in w:
            f = np.array([_rms(f[t], w[p + "post_ffw_norm.weight"], eps) for t in range(t_len)])
        x = x + res * f
    out_w = w["token_embd.weight"] if arch == "gemma2" else w.get("output.weight", w["token_embd.weight"])
    logits = np.array([_rms(x[t], w["output_norm.weight"], eps) @ out_w.T for t in range(t_len)])
    logits = logits / meta.get("logit_scale", 1.0)
    if final_cap:
        logits = final_cap * np.tanh(logits / final_cap)
    return logits
