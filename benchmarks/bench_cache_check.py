"""What the weight-cache integrity check costs (issue: reliability).

Side by side, on the default model with a warm cache: the warm load (what the user waits for;
the check is not in it), the background check alone (hashing every cache file), and the first
reply's time to first token right after a warm load, with the check running beside it vs with
the check switched off (both on a fresh load: the same page faults). Medians, runs alternated.

    .venv/bin/python benchmarks/bench_cache_check.py [--model GGUF] [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

from turbospark_app.chat.api import ChatMessage, TurnSettings
from turbospark_app.chat import backend as backend_mod
from turbospark_app.chat.backend import load_backend
from turbospark_app.engine import GenerationConfig, TokenProgress
from turbospark_app.engine.raw_completion import drive_raw_completion
from turbospark_app.model.cache_integrity import verify_entry
from turbospark_app.model.fetch import resolve_model_path


def first_token_seconds(backend) -> float:
    settings = TurnSettings(generation=GenerationConfig(max_new_tokens=1))
    start = time.perf_counter()
    turn = backend.prepare_turn("bench", [ChatMessage("user", "Name a fruit.")], settings)
    first: list[float] = []

    def on_progress(e: object) -> None:
        if isinstance(e, TokenProgress) and not first:
            first.append(time.perf_counter() - start)

    drive_raw_completion(backend.stream_turn(turn, lambda: False), settings.generation.rate,
                         lambda: False, on_progress)
    return first[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    path = resolve_model_path(args.model)
    for _ in range(3):  # warm and checked (an entry from before checksums is rebuilt once)
        check = load_backend(path, session_slots=1).cache_check
        if check is not None and check.join() and check.state == "ok":
            break
    loads, checks, beside, after = [], [], [], []
    size = 0
    real_check = backend_mod.verify_in_background
    for _ in range(args.runs):
        t = time.perf_counter()
        backend = load_backend(path, session_slots=1)
        loads.append(time.perf_counter() - t)
        beside.append(first_token_seconds(backend))  # the check runs meanwhile
        backend.cache_check.join()
        entry = backend.model.weights.cache_path
        size = sum(p.stat().st_size for p in entry.iterdir())
        t = time.perf_counter()
        assert verify_entry(entry) == []
        checks.append(time.perf_counter() - t)
        backend_mod.verify_in_background = lambda entry, on_problem=None: None  # switched off
        try:
            after.append(first_token_seconds(load_backend(path, session_slots=1)))
        finally:
            backend_mod.verify_in_background = real_check
    med = statistics.median
    print(f"cache entry: {size / 2**20:.0f} MiB; runs: {args.runs}")
    print(f"warm load (the check is not in it): median {med(loads) * 1000:.0f} ms")
    print(f"background check alone: median {med(checks) * 1000:.0f} ms "
          f"({size / 2**20 / med(checks):.0f} MiB/s, one core)")
    print(f"first token with the check running beside it: median {med(beside) * 1000:.0f} ms; "
          f"check switched off: median {med(after) * 1000:.0f} ms "
          f"(ratio {med(beside) / med(after):.2f})")


if __name__ == "__main__":
    main()
