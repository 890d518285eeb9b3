"""The llama.cpp engine in-process, on the default model (or --model): what each figure of the
producer costs on this machine. Prints medians.

    python benchmarks/bench_model.py [--model PATH] [--threads N] [--prompt-tokens 512]
                                     [--decode-tokens 128] [--repeats 3]

Figures: warm open (`load_backend`: header, llama.cpp's mmap load, tokenizer, template checks,
context); chunked prefill tok/s of a `--prompt-tokens` prompt (one llama_decode per 512-token
chunk); decode tok/s (one llama_decode per token, logits copied out); the aggregate of 1, 2, 4
and 8 sequences decoding in one llama_decode step against one; a draft verify of 4 and 8 rows
against one step (what speculation pays per pass); Stop inside a 512-token chunk (the abort
callback); peak RSS. (`make bench` runs it.)

The prompt is deterministic pseudo-random token ids (speed does not depend on which ids).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from turbospark_app.chat.backend import load_backend  # noqa: E402
from turbospark_app.model.llamacpp.producer import LlamaCppProducer, produce_batch  # noqa: E402


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


def _prefill(p: LlamaCppProducer, ids: list[int], out: np.ndarray) -> float:
    p.reset()
    t = time.perf_counter()
    for at in range(0, len(ids), 512):
        chunk = ids[at: at + 512]
        p.produce_chunk(chunk, at, out if at + 512 >= len(ids) else None)
    return len(ids) / (time.perf_counter() - t)


def _decode(p: LlamaCppProducer, start: int, n: int, out: np.ndarray) -> float:
    tok = int(out.argmax())
    t = time.perf_counter()
    for i in range(n):
        p.produce(tok, start + i, out)
        tok = int(out.argmax())
    return n / (time.perf_counter() - t)


def _batched(producers: list[LlamaCppProducer], ids: list[int], steps: int, outs: list[np.ndarray]) -> float:
    for p in producers:
        p.reset()
        p.produce_chunk(ids[:64], 0, None)
    t = time.perf_counter()
    for step in range(steps):
        produce_batch([(p, 5 + step, 64 + step, o) for p, o in zip(producers, outs)])
    return len(producers) * steps / (time.perf_counter() - t)


def _verify_cost(p: LlamaCppProducer, ids: list[int], rows: int, repeats: int, out: np.ndarray) -> float:
    """Seconds of a `rows`-row verify pass over a one-token step's, medians."""
    p.reset()
    p.produce_chunk(ids[:64], 0, None)
    buf = np.empty((rows, out.shape[0]), np.float32)
    one, many = [], []
    for _ in range(repeats * 4):
        t = time.perf_counter()
        p.produce(7, 64, out)
        one.append(time.perf_counter() - t)
        p.trim(64)
        t = time.perf_counter()
        p.produce_rows(ids[64: 64 + rows], 64, buf)
        many.append(time.perf_counter() - t)
        p.trim(64)
    return statistics.median(many) / statistics.median(one)


def _abort_latency(p: LlamaCppProducer, ids: list[int], trials: int) -> list[float]:
    lat = []
    for i in range(trials):
        p.reset()
        flag = threading.Event()
        stamp: list[float] = []

        def press() -> None:
            stamp.append(time.perf_counter())
            flag.set()

        timer = threading.Timer(0.05 + 0.02 * i, press)
        timer.start()
        done = p.produce_chunk_cancellable(ids[:512], 0, None, flag.is_set)
        end = time.perf_counter()
        timer.cancel()
        if stamp and not done:
            lat.append(end - stamp[0])
    return lat


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--decode-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    path = _model_path(args.model)
    opens = []
    for _ in range(args.repeats):
        t = time.perf_counter()
        backend = load_backend(path, session_slots=8, max_context=4096, threads=args.threads)
        opens.append(time.perf_counter() - t)
        if len(opens) < args.repeats:
            backend.close()
    info = backend.model_info()
    print(f"{path.name}: {info['engine_description']}, {info['runs_on']}, llama-cpp-python "
          f"{info['llama_cpp_python']}; {platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}")
    print(f"warm open (load_backend)           {statistics.median(opens):.3f} s (median of {len(opens)})")
    ctx = backend.context
    rng = np.random.default_rng(0)
    ids = [int(t) for t in rng.integers(100, min(backend.vocab_size, 30000), max(args.prompt_tokens, 600))]
    prompt = ids[: args.prompt_tokens]
    p = LlamaCppProducer(ctx, 0)
    out = np.empty(backend.vocab_size, np.float32)
    _prefill(p, prompt, out)  # warm-up: page the mapped weights in
    pre = [_prefill(p, prompt, out) for _ in range(args.repeats)]
    dec = []
    for _ in range(args.repeats):
        _prefill(p, prompt, out)
        dec.append(_decode(p, len(prompt), args.decode_tokens, out))
    print(f"chunked prefill ({len(prompt)} tok)          {statistics.median(pre):.1f} tok/s")
    print(f"decode ({args.decode_tokens} tok after the prompt)   {statistics.median(dec):.1f} tok/s")
    producers = [LlamaCppProducer(ctx, s) for s in range(8)]
    outs = [np.empty(backend.vocab_size, np.float32) for _ in producers]
    agg = {n: statistics.median(_batched(producers[:n], ids, 24, outs[:n]) for _ in range(args.repeats))
           for n in (1, 2, 4, 8)}
    print("sequences in one llama_decode step: " + ", ".join(
        f"{n}: {agg[n]:.1f} tok/s ({agg[n] / agg[1]:.2f}x)" for n in agg))
    cost = {rows: _verify_cost(p, ids, rows, args.repeats, out) for rows in (4, 8)}
    print("verify pass cost vs one step:       " + ", ".join(f"{r} rows {c:.2f}x" for r, c in cost.items()))
    lat = sorted(_abort_latency(p, ids, 10))
    if lat:
        print(f"Stop inside a 512-token chunk       p50 {statistics.median(lat) * 1e3:.1f} ms, "
              f"max {lat[-1] * 1e3:.1f} ms ({len(lat)} stopped)")
    print(f"peak RSS                           {_peak_rss_mib():.0f} MiB")
    backend.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
