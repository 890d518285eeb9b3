"""The sampler's cost per token on a large vocabulary, per shaping (µs of CPU, medians).

    python benchmarks/bench_sampling.py [--vocab 128256,49152] [--draws 400]

In-process, the engine's own sampler (`engine.selection.make_sampler`) on logits shaped like a
language model's (a few tokens well above a long normal tail), the row in a fresh buffer each
draw and 32 MB of other memory touched between draws, as a decode step leaves the caches (its
weights stream through them): the figure is what a step pays, not a warm loop's. CPU time of
this thread (`time.thread_time_ns`), so a loaded machine moves it less than wall time.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from turbospark_app.engine.config import Shaping  # noqa: E402
from turbospark_app.engine.selection import make_sampler  # noqa: E402

SHAPINGS = {
    "greedy": Shaping(),
    "temperature 1 (the API's default)": Shaping(temperature=1.0, seed=1),
    "temperature 0.8, top-k 40": Shaping(temperature=0.8, top_k=40, seed=1),
    "temperature 0.8, top-p 0.95": Shaping(temperature=0.8, top_p=0.95, seed=1),
    "temperature 0.8, min-p 0.05": Shaping(temperature=0.8, min_p=0.05, seed=1),
    "llama.cpp's defaults (T 0.8, k 40, p 0.95, min-p 0.05)":
        Shaping(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=1),
    "temperature 0.7, top-p 0.9, repetition 1.1": Shaping(temperature=0.7, top_p=0.9, repetition_penalty=1.1, seed=1),
}


def lm_logits(n: int, rng: np.random.Generator) -> np.ndarray:
    x = rng.standard_normal(n).astype(np.float32) * 2.0
    hot = rng.choice(n, 24, replace=False)
    x[hot] += rng.uniform(6, 14, hot.size).astype(np.float32)
    return x


def measure(n: int, shaping: Shaping, draws: int) -> float:
    rng = np.random.default_rng(7)
    rows = [lm_logits(n, rng) for _ in range(8)]
    sink = np.ones(32 << 20, np.uint8)
    history = list(rng.integers(0, n, 200))
    sampler = make_sampler(shaping)
    buf = np.empty(n, np.float32)
    times = []
    for i in range(draws):
        np.copyto(buf, rows[i % len(rows)])
        sink += 1  # the step's weights stream through the caches
        t0 = time.thread_time_ns()
        sampler(buf, history)
        times.append(time.thread_time_ns() - t0)
    return statistics.median(times) / 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", default="128256,49152")
    ap.add_argument("--draws", type=int, default=400)
    a = ap.parse_args()
    sizes = [int(v) for v in a.vocab.split(",")]
    print(f"# sampler µs a token (CPU, median of {a.draws}, cold caches) · {platform.machine()} · "
          f"load {os.getloadavg()[0]:.1f}")
    print(f"{'shaping':<58}" + "".join(f"{f'vocab {n:,}':>16}" for n in sizes))
    for name, shaping in SHAPINGS.items():
        print(f"{name:<58}" + "".join(f"{measure(n, shaping, a.draws):>16.1f}" for n in sizes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
