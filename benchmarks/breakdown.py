"""Where a compact decode step's time goes (used by bench_model.py).

`decode_breakdown` times each part of real decode steps by wrapping the model's own stage
calls (no copy of the step loop): the embed stage, the per-layer kernel-library stages, the
numpy attention, the head; the rest of the step is Python glue (embedding lookup, buffer
copies, the loop). `stage_ops` profiles one layer stage inside ONNX Runtime to split it into
the 4-bit matmuls, the minimum corrections, RMSNorm and SwiGLU.
"""

from __future__ import annotations

import collections
import json
import os
import statistics
import tempfile
import time
from typing import Any, Callable

import numpy as np


def _timed(fn: Callable, key: str, acc: dict[str, float]) -> Callable:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            acc[key] += time.perf_counter() - t

    return wrapper


def decode_breakdown(model: Any, prompt: list[int], steps: int) -> dict[str, float]:
    """Median ms per decode step of each part, over `steps` greedy steps after `prompt`."""
    acc: dict[str, float] = collections.defaultdict(float)
    saved = model._decode_stages
    names = (["embed stage (qkv of layer 0)"] + ["layer stages (o, ffn, next qkv)"] * (len(saved) - 2)
             + ["head stage"])
    model._decode_stages = [_timed(run, name, acc) for run, name in zip(saved, names)]
    model._attend_one = _timed(model._attend_one, "attention (numpy)", acc)
    per: dict[str, list[float]] = collections.defaultdict(list)
    try:
        cache = model.new_cache()
        logits = model.forward(prompt, cache).copy()
        for _ in range(steps):
            acc.clear()
            t = time.perf_counter()
            model.forward([int(np.argmax(logits))], cache, True, logits)
            total = time.perf_counter() - t
            for k, v in acc.items():
                per[k].append(v)
            per["Python glue (rest of the step)"].append(total - sum(acc.values()))
            per["step"].append(total)
    finally:
        model._decode_stages = saved
        del model._attend_one
    return {k: statistics.median(v) * 1e3 for k, v in per.items()}


_KINDS = {"MatMulNBits": "quantized matmuls", "Gemm": "minimum corrections",
          "ReduceSum": "minimum corrections", "Reshape": "minimum corrections",
          "SimplifiedLayerNormalization": "RMSNorm", "Sigmoid": "SwiGLU", "Mul": "SwiGLU/scale",
          "QuickGelu": "SwiGLU", "Split": "SwiGLU"}


def stage_ops(model: Any, rows: int, runs: int = 20) -> dict[str, float]:
    """ms per run of one layer stage's operator kinds, from ONNX Runtime's profiler."""
    import onnxruntime as ort

    from turbospark_app.model.ort_graph import build_stage_protos

    w, c = model.weights, model.config
    prefill = rows > 1  # the model runs chunks on the prefill stages
    proto, feeds = build_stage_protos(c, w.layers[:2], w.head, w.output_norm, w.external_ref, prefill)[1]
    with tempfile.TemporaryDirectory() as tmp:
        so = ort.SessionOptions()
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(tmp, "stage")
        so.intra_op_num_threads = model._threads
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        so.log_severity_level = 3
        if w.cache_path is not None:
            so.add_session_config_entry(
                "session.model_external_initializers_file_folder_path", str(w.cache_path))
        sess = ort.InferenceSession(proto, so, providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(0)
        feeds = {**feeds, "x": rng.standard_normal((rows, c.dim)).astype(np.float32),
                 "attn": rng.standard_normal((rows, c.q_dim)).astype(np.float32)}
        for _ in range(runs):
            sess.run(None, feeds)
        with open(sess.end_profiling()) as fh:
            events = json.load(fh)
    out: dict[str, float] = collections.defaultdict(float)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            op = e["args"]["op_name"]
            out[_KINDS.get(op, "other (add, concat, copy)")] += e["dur"] / 1e3 / runs
    return dict(out)
