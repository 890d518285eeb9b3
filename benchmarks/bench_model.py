"""Benchmark the Llama engine on the real default model. Prints medians.

    python benchmarks/bench_model.py [--model PATH] [--weights compact|f32] [--prompt-tokens 500]
                                     [--decode-tokens 128] [--chunks 32,64,128,256,512] [--repeats 3]

Figures: cold load (fresh temporary weight cache, measured in a child process so its peak RSS
stays separate) and warm load; prefill tok/s of a ~500-token prompt token by token ("off" mode:
produce_prefill per token, the head only for the last) and chunked at several chunk sizes;
decode tok/s over 128 tokens after that prompt; peak RSS. Float32 weights: the ratio of a decode
step's median time to the median time of the same step's weight matmuls alone (fused qkv, o,
gate+up, down per layer + the output head), timed interleaved. Compact weights: where a decode
step's time goes (kernel-library stages, numpy attention, head, Python glue; `breakdown.py`)
and the operator split of one layer stage inside ONNX Runtime.

The prompt is deterministic pseudo-random token ids (speed does not depend on which ids).
OPENBLAS_CORETYPE and thread settings are left as the environment has them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from turbospark_app.model.reference.forward import LlamaModel  # noqa: E402
from turbospark_app.model.producer import LlamaProducer  # noqa: E402


def _model_path(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    env = os.environ.get("TURBOSPARK_MODEL", "").strip()
    if env:
        return Path(env)
    from turbospark_app.model.fetch import default_model_path

    return default_model_path()


def _peak_rss_mib() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1 << 20) if sys.platform == "darwin" else peak / 1024


_COLD_CHILD = """
import json, resource, sys, time
sys.path.insert(0, {root!r})
t = time.perf_counter()
from turbospark_app.model.reference.forward import LlamaModel
m = LlamaModel.from_gguf({path!r}, cache_dir={cache!r}, weights={weights!r})
cold = time.perf_counter() - t
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({{"seconds": cold, "origin": m.weights.origin,
                  "peak_rss_mib": peak / (1 << 20) if sys.platform == "darwin" else peak / 1024}}))
"""


def bench_load(path: Path, cache: Path, weights: str) -> tuple[dict, list[float]]:
    root = str(Path(__file__).resolve().parents[1])
    code = _COLD_CHILD.format(root=root, path=str(path), cache=str(cache), weights=weights)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    cold = json.loads(out.stdout.strip().splitlines()[-1])
    warm = []
    for _ in range(5):
        t = time.perf_counter()
        m = LlamaModel.from_gguf(path, cache_dir=cache, weights=weights)
        warm.append(time.perf_counter() - t)
        assert m.weights.origin == "cache"
    return cold, warm


def prefill_off(producer: LlamaProducer, ids: list[int], logits: np.ndarray) -> float:
    producer.reset()
    t = time.perf_counter()
    for pos, tok in enumerate(ids[:-1]):
        producer.produce_prefill(tok, pos, logits)
    producer.produce(ids[-1], len(ids) - 1, logits)
    return time.perf_counter() - t


def prefill_chunked(producer: LlamaProducer, ids: list[int], chunk: int, logits: np.ndarray) -> float:
    producer.reset()
    t = time.perf_counter()
    for start in range(0, len(ids), chunk):
        part = ids[start : start + chunk]
        last = start + chunk >= len(ids)
        producer.produce_chunk(part, start, logits if last else None)
    return time.perf_counter() - t


def bare_step(model: LlamaModel, bufs: dict[str, np.ndarray]) -> float:
    """The weight matmuls of one decode step, nothing else (same arrays as the model uses)."""
    c = model.config
    x, a, h = bufs["x"], bufs["attn"], bufs["h"]
    qkv, o, gu, d, logits = bufs["qkv"], bufs["o"], bufs["gu"], bufs["d"], bufs["logits"]
    t = time.perf_counter()
    for i in range(c.n_layers):
        np.matmul(x, model._wqkv_t[i], out=qkv)
        np.matmul(a, model._wo_t[i], out=o)
        np.matmul(x, model._wgu_t[i], out=gu)
        np.matmul(h, model._wd_t[i], out=d)
    np.matmul(x, model._head_t, out=logits)
    return time.perf_counter() - t


def bench_decode(
    model: LlamaModel, producer: LlamaProducer, ids: list[int], n_new: int, logits: np.ndarray
) -> tuple[list[float], list[float]]:
    """Greedy decode n_new tokens after `ids`; each step followed by one bare-matmul step."""
    c = model.config
    rng = np.random.default_rng(0)
    bufs = {
        "x": rng.standard_normal(c.dim).astype(np.float32),
        "attn": rng.standard_normal(c.q_dim).astype(np.float32),
        "h": rng.standard_normal(c.ffn_dim).astype(np.float32),
        "qkv": np.empty(c.q_dim + 2 * c.kv_dim, np.float32),
        "o": np.empty(c.dim, np.float32),
        "gu": np.empty(2 * c.ffn_dim, np.float32),
        "d": np.empty(c.dim, np.float32),
        "logits": np.empty(c.vocab_size, np.float32),
    }
    prefill_chunked(producer, ids, 128, logits)
    steps, bare = [], []
    pos = len(ids)
    for _ in range(n_new):
        tok = int(np.argmax(logits))
        t = time.perf_counter()
        producer.produce(tok, pos, logits)
        steps.append(time.perf_counter() - t)
        bare.append(bare_step(model, bufs))
        pos += 1
    return steps, bare


def report_f32_decode(model: LlamaModel, producer: LlamaProducer, ids: list[int], n_new: int,
                      logits: np.ndarray) -> None:
    n = len(ids)
    steps, bare = bench_decode(model, producer, ids, n_new, logits)
    step_med, bare_med = statistics.median(steps), statistics.median(bare)
    print(f"decode           {len(steps) / sum(steps):7.1f} tok/s over {len(steps)} tokens "
          f"(context {n}..{n + len(steps)}); median step {step_med * 1e3:.2f} ms "
          f"= {1 / step_med:.1f} tok/s")
    print(f"decode ratio     {step_med / bare_med:.3f}  (median step {step_med * 1e3:.2f} ms / "
          f"median bare weight matmuls {bare_med * 1e3:.2f} ms)")
    short_steps, short_bare = bench_decode(model, producer, ids[:32], 64, logits)
    s_med, b_med = statistics.median(short_steps), statistics.median(short_bare)
    print(f"decode ratio     {s_med / b_med:.3f}  at short context (32..96): step "
          f"{s_med * 1e3:.2f} ms / bare {b_med * 1e3:.2f} ms")


def report_compact_decode(model: LlamaModel, ids: list[int], n_new: int) -> None:
    from breakdown import decode_breakdown, op_breakdown

    for label, prompt in (("after the prompt", ids), ("short context (38)", ids[:38])):
        parts = decode_breakdown(model, prompt, n_new if label != "short context (38)" else 64)
        step = parts.pop("step")
        print(f"decode           {1e3 / step:7.1f} tok/s {label} (median step {step:.2f} ms)")
        for name, ms in sorted(parts.items(), key=lambda kv: -kv[1]):
            print(f"  {name:<48}{ms:7.2f} ms  {100 * ms / step:5.1f}%")
    for rows, prompt in ((1, ids[:38]), (128, ids[:128])):
        ops = op_breakdown(model, prompt, rows)
        total = sum(ops.values())
        what = "decode step" if rows == 1 else f"{rows}-token chunk"
        print(f"inside ONNX Runtime, one {what} ({model.kernels} kernels), profiled: {total:.2f} ms")
        for name, ms in sorted(ops.items(), key=lambda kv: -kv[1]):
            print(f"  {name:<48}{ms:7.2f} ms  {100 * ms / total:5.1f}%")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="GGUF path (default: TURBOSPARK_MODEL, else the default model)")
    ap.add_argument("--prompt-tokens", type=int, default=500)
    ap.add_argument("--decode-tokens", type=int, default=128)
    ap.add_argument("--chunks", default="32,64,128,256,512")
    ap.add_argument("--repeats", type=int, default=3, help="runs per prefill figure (median)")
    ap.add_argument("--weights", default="compact", choices=["compact", "f32"])
    args = ap.parse_args()
    path = _model_path(args.model)
    if not path.is_file():
        print(f"model not found: {path} (run `make model` or pass --model)", file=sys.stderr)
        return 2
    chunks = [int(x) for x in args.chunks.split(",") if x]

    print(f"model            {path.name} ({path.stat().st_size / 1e6:.1f} MB)")
    print(f"machine          {platform.machine()}, {os.cpu_count()} CPUs, numpy {np.__version__}, "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")

    tmp = Path(tempfile.mkdtemp(prefix="turbospark-bench-"))
    try:
        cold, warm = bench_load(path, tmp, args.weights)
        model = LlamaModel.from_gguf(path, cache_dir=tmp, weights=args.weights)
        c = model.config
        print(f"config           {c.architecture} {c.n_layers} layers, dim {c.dim}, heads {c.n_heads}/"
              f"{c.n_kv_heads}, ffn {c.ffn_dim}, vocab {c.vocab_size}, {c.quantization}, "
              f"{c.n_params / 1e6:.1f}M params, {model.weights_kind} weights {model.weights.nbytes / 2**20:.0f} MiB "
              f"(cache arrays)")
        print(f"load cold        {cold['seconds']:.2f} s  (empty cache; child peak RSS "
              f"{cold['peak_rss_mib']:.0f} MiB)")
        print(f"load warm        {statistics.median(warm) * 1e3:.1f} ms  (median of {len(warm)})")

        producer = LlamaProducer(model)
        logits = np.empty(c.vocab_size, np.float32)
        ids = [int(t) for t in np.random.default_rng(42).integers(100, c.vocab_size, args.prompt_tokens)]
        prefill_chunked(producer, ids, 128, logits)  # warm-up: page the mapped weights in
        n = len(ids)
        runs: dict[str, list[float]] = {"off": [], **{str(ch): [] for ch in chunks}}
        for _ in range(args.repeats):  # interleaved, so every mode sees the same machine load
            runs["off"].append(prefill_off(producer, ids, logits))
            for chunk in chunks:
                runs[str(chunk)].append(prefill_chunked(producer, ids, chunk, logits))
        off = statistics.median(runs["off"])
        print(f"prefill off      {n / off:7.1f} tok/s  ({n} tokens in {off:.2f} s)")
        for chunk in chunks:
            sec = statistics.median(runs[str(chunk)])
            print(f"prefill chunk {chunk:<3d}{n / sec:7.1f} tok/s  ({sec:.3f} s, {off / sec:.1f}x off mode)")

        if model.weights_kind == "compact":
            report_compact_decode(model, ids, args.decode_tokens)
        else:
            report_f32_decode(model, producer, ids, args.decode_tokens, logits)
        print(f"KV cache         {producer.kv_nbytes / 2**20:.1f} MiB allocated "
              f"(capacity {producer.cache.capacity} of {producer.max_context})")
        print(f"peak RSS         {_peak_rss_mib():.0f} MiB (this process: warm load + runs; "
              f"mapped weights count once touched)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
