"""Where a compact forward pass's time goes (used by bench_model.py and bench_peer.py).

`decode_breakdown` times real greedy decode steps and splits each into the session run (the
whole forward pass inside ONNX Runtime) and the Python around it (embedding lookup, bindings,
the logits copy). `op_breakdown` runs the same steps (or a prefill chunk) on a profiled twin
of the model's session and sums ONNX Runtime's per-node kernel times by kind: the 4/8-bit
matmuls, the minimum corrections, the exact split, attention (with RoPE and the KV write),
norms, SwiGLU (If nodes are skipped: the nodes of the branch they ran are counted); what the
profile does not cover is the executor's per-node overhead.
"""

from __future__ import annotations

import collections
import json
import os
import statistics
import tempfile
import time
from typing import Any

import numpy as np

_KINDS = {
    "MatMulNBits": "4/8-bit matmuls",
    "Gemm": "minimum corrections",
    "GroupQueryAttention": "attention (GQA, RoPE, KV write)",
    "SimplifiedLayerNormalization": "RMSNorm",
    "Sigmoid": "SwiGLU", "Split": "SwiGLU",
    "Abs": "exact split", "ReduceMax": "exact split", "Max": "exact split", "Div": "exact split",
    "Round": "exact split", "Sub": "exact split", "Concat": "exact split",
}


class _TimedSession:
    """The model's session with `run_with_iobinding` timed (everything else passed through)."""

    def __init__(self, session: Any) -> None:
        self._session = session
        self.seconds = 0.0

    def run_with_iobinding(self, *args: Any) -> Any:
        t = time.perf_counter()
        try:
            return self._session.run_with_iobinding(*args)
        finally:
            self.seconds += time.perf_counter() - t

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)


def decode_breakdown(model: Any, prompt: list[int], steps: int) -> dict[str, float]:
    """Median ms per greedy decode step after `prompt`: "step", "session run", "Python glue"."""
    saved = model._session
    timed = _TimedSession(saved)
    per: dict[str, list[float]] = collections.defaultdict(list)
    model._session = timed
    try:
        cache = model.new_cache()
        logits = model.forward(prompt, cache).copy()
        for _ in range(steps):
            timed.seconds = 0.0
            t = time.perf_counter()
            model.forward([int(np.argmax(logits))], cache, True, logits)
            total = time.perf_counter() - t
            per["step"].append(total)
            per["session run (whole forward pass)"].append(timed.seconds)
            per["Python glue (embedding, bindings, logits copy)"].append(total - timed.seconds)
    finally:
        model._session = saved
    return {k: statistics.median(v) * 1e3 for k, v in per.items()}


def op_breakdown(model: Any, prompt: list[int], rows: int, runs: int = 20) -> dict[str, float]:
    """ms per forward pass of each operator kind, from ONNX Runtime's profiler: `runs` decode
    steps after `prompt` (rows=1), or `runs` chunks of `rows` tokens, each from `prompt`'s KV."""
    from turbospark_app.model.compact.graph import build_model_proto, make_session, session_options

    w, c = model.weights, model.config
    proto = build_model_proto(c, w.layers, w.head, w.output_norm, w.external_ref, model.kernels)
    saved = model._session
    with tempfile.TemporaryDirectory() as tmp:
        so = session_options(w.cache_path, model._threads)
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(tmp, "forward")
        model._session = make_session(proto, w.cache_path, so=so)
        try:
            cache = model.new_cache()
            model.forward(prompt, cache, want_logits=False)
            base = cache.offset
            rng = np.random.default_rng(0)
            for _ in range(runs):
                ids = rng.integers(0, c.vocab_size, rows).tolist()
                model.forward(ids, cache)
                if rows > 1:
                    cache.trim(base)
            with open(model._session.end_profiling()) as fh:
                events = json.load(fh)
        finally:
            model._session = saved
    out: dict[str, float] = collections.defaultdict(float)
    n_calls = runs + 1  # the prompt's pass is profiled too: scale it out below
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            op = e["args"]["op_name"]
            if op == "If":  # its branch's nodes are counted one by one
                continue
            out[_KINDS.get(op, "other (add, mul, reshape, slice)")] += e["dur"] / 1e3
    # The prompt pass is a different size: drop it by measuring totals per pass over `runs`.
    total_runs = [e["dur"] / 1e3 for e in events if e.get("name") == "model_run"]
    if len(total_runs) == n_calls:
        prompt_share = total_runs[0] / sum(total_runs)
        return {k: v * (1 - prompt_share) / runs for k, v in out.items()}
    return {k: v / n_calls for k, v in out.items()}
