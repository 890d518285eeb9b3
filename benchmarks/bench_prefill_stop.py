"""Stop during a chunked prefill: how long until the engine returns, and what polling costs.

    python benchmarks/bench_prefill_stop.py [--model GGUF] [--threads N]
           [--prompt 2000] [--chunk 512] [--trials 30] [--repeats 3]

Latency: a timer thread sets the Stop flag at a random moment 0.2-1.5 s into the prefill of a
`--prompt`-token prompt (chunks of `--chunk`); the figure is the time from setting the flag to
`run_raw_completion_chunked_cancellable` returning (p50 / p99 / max over `--trials`). Each
result is checked: CANCELLED, kv_position == the committed tokens == the producer's cursor.
Throughput: chunked prefill tok/s with a Stop flag that llama.cpp polls after every graph node
(its abort callback, installed around each chunk on the CPU) but never set, against the same
run without one (NEVER: no callback), alternating, medians of `--repeats`.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from turbospark_app.engine import (  # noqa: E402
    GenerationConfig,
    StopReason,
    run_raw_completion_chunked,
    run_raw_completion_chunked_cancellable,
)
from turbospark_app.chat.backend import load_backend  # noqa: E402
from turbospark_app.model.llamacpp.producer import LlamaCppProducer  # noqa: E402


def stop_latency(producer: LlamaCppProducer, tok, ids: list[int], chunk: int, delay: float) -> float:
    flag = threading.Event()
    stamp: list[float] = []

    def press() -> None:
        stamp.append(time.perf_counter())
        flag.set()

    timer = threading.Timer(delay, press)
    producer.reset()  # no prefix left from the last trial: every trial prefills from 0
    cfg = GenerationConfig(max_new_tokens=1)
    vocab = producer.context.n_vocab
    timer.start()
    result = run_raw_completion_chunked_cancellable(
        producer, tok, ids, cfg, len(ids) + 8, vocab, flag.is_set, chunk_size=chunk)
    done = time.perf_counter()
    timer.cancel()
    if not stamp:
        raise RuntimeError("the prefill ended before Stop was pressed: use a longer --prompt")
    assert result.reason is StopReason.CANCELLED and result.new_tokens == 0
    assert result.kv_position == producer.kv_position == len(result.kv_backed_token_ids)
    assert result.kv_position == producer.context.seq_pos_max(producer.seq) + 1
    assert result.kv_position % chunk == 0  # whole chunks only
    return done - stamp[0]


def throughput(producer: LlamaCppProducer, tok, ids: list[int], chunk: int, polled: bool) -> float:
    cfg = GenerationConfig(max_new_tokens=1)
    vocab = producer.context.n_vocab
    producer.reset()
    t = time.perf_counter()
    if polled:
        run_raw_completion_chunked_cancellable(
            producer, tok, ids, cfg, len(ids) + 8, vocab, lambda: False, chunk_size=chunk)
    else:
        run_raw_completion_chunked(producer, tok, ids, cfg, len(ids) + 8, vocab, chunk_size=chunk)
    return len(ids) / (time.perf_counter() - t)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--prompt", type=int, default=2000)
    ap.add_argument("--chunk", type=int, default=512)
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    if args.model is None:
        from turbospark_app.model.fetch import default_model_path

        args.model = default_model_path()
    backend = load_backend(args.model, session_slots=1, max_context=args.prompt + 64,
                           threads=args.threads)
    tok = backend.tokenizer
    producer = LlamaCppProducer(backend.context, 0)
    rng = np.random.default_rng(3)
    ids = [int(t) for t in rng.integers(100, min(backend.vocab_size, 30000), args.prompt)]
    print(f"{args.model.name}: {backend.model_info()['runs_on']}, {args.prompt}-token prompt, "
          f"chunks of {args.chunk}", flush=True)

    never, polled = [], []
    for _ in range(args.repeats):
        never.append(throughput(producer, tok, ids[:512], args.chunk, False))
        polled.append(throughput(producer, tok, ids[:512], args.chunk, True))
    a, b = statistics.median(never), statistics.median(polled)
    print(f"chunked prefill  {a:.1f} tok/s without a Stop flag, {b:.1f} tok/s polling one "
          f"during chunks: {100 * (a - b) / a:+.1f}% loss (medians of {args.repeats})", flush=True)

    pick = random.Random(7)
    lat = []
    for _ in range(args.trials):
        lat.append(stop_latency(producer, tok, ids, args.chunk, pick.uniform(0.2, 1.5)))
    lat.sort()
    p99 = lat[min(len(lat) - 1, int(round(0.99 * (len(lat) - 1))))]
    print(f"Stop latency     p50 {statistics.median(lat) * 1e3:.1f} ms, p99 {p99 * 1e3:.1f} ms, "
          f"max {lat[-1] * 1e3:.1f} ms over {len(lat)} trials")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
