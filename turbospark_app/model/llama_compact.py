"""The Llama forward pass over compact weights: GGUF blocks, matmuls in ONNX Runtime.

Same contract, RoPE, KV cache and numpy attention as the float32 `LlamaModel` (both subclass
`llama_base.LlamaBase`); only the weight side differs. Each forward pass is n_layers + 2 runs of one ONNX Runtime
session (`ort_graph.py`): the embed stage (attn_norm + q|k|v of layer 0), one stage per layer
(o proj, feed-forward, and the NEXT layer's q|k|v), and the head. Attention runs in numpy
between stages, on the float32 q|k|v the session returns.
"""

from __future__ import annotations

import os
import time
from typing import Callable

import numpy as np

from .gguf_file import LlamaConfig
from .kv_cache import KVCache
from .llama_base import ForwardCancelled, LlamaBase
from .compact_weights import CompactWeights, embed_rows, load_compact
from .ort_graph import build_stage_protos, default_threads, make_session

_F32 = np.float32


class CompactLlamaModel(LlamaBase):
    """A LlamaModel whose weights stay the GGUF's blocks (see the module docstring)."""

    weights_kind = "compact"

    def __init__(self, config: LlamaConfig, weights: CompactWeights) -> None:
        self.weights = weights  # type: ignore[assignment]
        self._init_common(config, weights.rope_freq_factors)
        t0 = time.perf_counter()
        self._threads = default_threads()
        self._decode_stages = self._stages(config, weights, False)
        self._prefill_stages = self._stages(config, weights, True)
        self.session_seconds = time.perf_counter() - t0
        n = config.n_layers
        self._layer_outs = [["x_out", "qkv"]] * (n - 1) + [["x_out"]]

    def _stages(self, config: LlamaConfig, w: CompactWeights, prefill: bool) -> list[Callable]:
        """One run(outputs, activations) per stage: embed, layers..., head."""
        protos = build_stage_protos(config, w.layers, w.head, w.output_norm, w.external_ref, prefill)
        out = []
        for proto, feeds in protos:
            run = make_session(proto, w.cache_path, self._threads).run
            out.append(_with_feeds(run, feeds) if feeds else run)
        return out

    @classmethod
    def load(
        cls, path: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None = None
    ) -> "CompactLlamaModel":
        """Load a GGUF's compact weights through the weight cache and build the session."""
        config, weights = load_compact(path, cache_dir)
        return cls(config, weights)

    def _head(self, x: np.ndarray, logits_out: np.ndarray | None, chunk: bool = False) -> np.ndarray:
        stages = self._prefill_stages if chunk else self._decode_stages
        (logits,) = stages[-1](["logits"], {"x": x.reshape(1, -1)})  # (1, vocab)
        if logits_out is None:
            return logits[0]
        np.copyto(logits_out, logits[0])
        return logits_out

    def _decode(self, token: int, cache: KVCache) -> np.ndarray:
        """One token at position cache.offset; returns the final residual (dim,)."""
        b = self._buffers()
        pos = cache.offset
        cache.reserve(pos + 1)
        rot = self._rope_table(pos + 1)[pos]  # (rope_dims/2,) complex64
        attend = self._attend_one
        k_layers, v_layers = cache.k_layers, cache.v_layers
        stages = self._decode_stages
        x = embed_rows(self.weights.embd, np.array([token]))  # (1, dim)
        (qkv,) = stages[0](["qkv"], {"x": x})  # (1, nqkv)
        for i, (run, outs) in enumerate(zip(stages[1:-1], self._layer_outs)):
            np.copyto(b.qkv, qkv[0])  # the buffer's views give q, k, v and the RoPE pairs
            a = attend(b, k_layers[i], v_layers[i], pos, rot).reshape(1, -1)  # (1, q_dim)
            res = run(outs, {"x": x, "attn": a})
            x = res[0]
            if len(res) > 1:
                qkv = res[1]
        cache.advance(1)
        return x[0]

    def _chunk(
        self, ids: np.ndarray, cache: KVCache, cancel: Callable[[], bool] | None = None
    ) -> np.ndarray:
        """T >= 2 tokens at [offset, offset+T); `cancel` is polled before every layer."""
        t_len = ids.size
        p = cache.offset
        cache.reserve(p + t_len)
        rot = self._rope_table(p + t_len)[p : p + t_len, None, :]  # (T, 1, rope_dims/2)
        stages = self._prefill_stages
        x = embed_rows(self.weights.embd, ids)  # (T, dim)
        (qkv,) = stages[0](["qkv"], {"x": x})  # (T, nqkv)
        for i, (run, outs) in enumerate(zip(stages[1:-1], self._layer_outs)):
            if cancel is not None and cancel():
                raise ForwardCancelled()
            a = self._attend_chunk(qkv, cache.k_layers[i], cache.v_layers[i], p, rot)
            res = run(outs, {"x": x, "attn": a})
            x = res[0]
            if len(res) > 1:
                qkv = res[1]
        cache.advance(t_len)
        return x[-1]


def _with_feeds(run: Callable, feeds: dict[str, np.ndarray]) -> Callable:
    """`run` with the stage's weight inputs added to every call's activations."""

    def run_with(outputs: list[str], activations: dict[str, np.ndarray]) -> list[np.ndarray]:
        return run(outputs, {**feeds, **activations})

    return run_with
