"""Batched decode in the engine thread: N streams decoding at once vs one. Prints medians.

    python benchmarks/bench_batching.py [--model GGUF] [--synthetic-1b] [--rounds 3] [--tokens 64]

In-process: the app's EngineThread over `load_backend` (what panes and the local API share),
N = 1, 2, 4, 8 streams submitted together — half as pane turns (TurnRequest), half as API
requests (PromptRequest) when N >= 2 — each with its own prompt and `--tokens` new tokens,
greedy. Rounds alternate N = 1, 2, 4, 8, ... so the ratios are side by side. Figures:
  aggregate   all decoded tokens / (last token - first token over all streams)
  vs 1        aggregate / the N = 1 aggregate (median rounds)
  slowest     the slowest stream's decode rate / the mean of the others'
  batch       mean rows per batched pass (the engine's own count)
Then Stop while batched: 4 streams decoding, one cancelled after a random 4-12 tokens, the
engine-measured cancel -> ended latency, `--stops` times: p50 / p99 / max.
`--batch off` runs the same with batching disabled (each step alone), for the comparison.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from turbospark_app.chat.api import ChatMessage, TurnSettings  # noqa: E402
from turbospark_app.chat.backend import load_backend  # noqa: E402
from turbospark_app.engine import GenerationConfig  # noqa: E402
from turbospark_app.service.engine_thread import EngineThread  # noqa: E402
from turbospark_app.service.events import (  # noqa: E402
    Failed,
    Finished,
    PromptRequest,
    Token,
    TurnRequest,
)


class Recorder:
    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.token_times: dict[int, list[float]] = {}
        self.done: dict[int, Any] = {}

    def __call__(self, event: Any) -> None:
        now = time.perf_counter()
        with self.cond:
            if isinstance(event, Token):
                self.token_times.setdefault(event.request_id, []).append(now)
            elif isinstance(event, (Finished, Failed)):
                self.done[event.request_id] = event
                self.cond.notify_all()

    def wait(self, rids: list[int]) -> None:
        with self.cond:
            self.cond.wait_for(lambda: all(r in self.done for r in rids), timeout=600)


def prompt_text(tag: str) -> str:
    return f"List {tag}: " + ", ".join(str(i) for i in range(1, 12)) + ","


def requests(n: int, tokens: int, tag: str, backend: Any, shaping: Any = None) -> list[Any]:
    config = GenerationConfig(max_new_tokens=tokens, **({} if shaping is None else {"shaping": shaping}))
    settings = TurnSettings(generation=config)
    out: list[Any] = []
    for i in range(n):
        text = prompt_text(f"{tag}-{i}")
        if i % 2 == 1:  # an API request: prompt ids, as the local server submits them
            out.append(PromptRequest(tuple(backend.prompts.raw_ids(text)), settings, builder=backend.prompts))
            continue
        out.append(TurnRequest(f"pane-{tag}-{i}", (ChatMessage("user", text),), settings, raw=True))
    return out


def run_streams(engine: EngineThread, rec: Recorder, reqs: list[Any]) -> dict[str, float]:
    before = dict(engine.batch.describe())
    rids = [engine.submit(r) for r in reqs]
    rec.wait(rids)
    times = [rec.token_times.get(r, []) for r in rids]
    first = min(t[0] for t in times if t)
    last = max(t[-1] for t in times if t)
    total = sum(len(t) for t in times)
    rates = [(len(t) - 1) / (t[-1] - t[0]) for t in times if len(t) > 2 and t[-1] > t[0]]
    slowest = 1.0
    if len(rates) > 1:
        low = min(rates)
        others = sorted(rates)[1:]
        slowest = low / statistics.mean(others)
    after = engine.batch.describe()
    steps = after["batched_steps"] - before["batched_steps"]
    rows = after["batched_rows"] - before["batched_rows"]
    return {"agg": (total - len(rids)) / (last - first), "slowest": slowest,
            "batch": rows / steps if steps else 1.0}


def stop_latencies(engine: EngineThread, rec: Recorder, backend: Any, count: int) -> list[float]:
    out = []
    rng = random.Random(7)
    for k in range(count):
        reqs = requests(4, 200, f"stop{k}", backend)
        rids = [engine.submit(r) for r in reqs]
        victim = rids[k % 4]
        after = rng.randint(4, 12)
        deadline = time.monotonic() + 120
        while len(rec.token_times.get(victim, [])) < after and time.monotonic() < deadline:
            time.sleep(0.002)
        engine.cancel(victim)
        rec.wait([victim])
        stats = rec.done[victim].stats
        if stats.stop_latency is not None:
            out.append(stats.stop_latency)
        for r in rids:
            engine.cancel(r)
        rec.wait(rids)
    return out


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q / 100 * len(s) + 0.5) - 1))]


def bench_model(path: Path, label: str, args: argparse.Namespace) -> None:
    backend = load_backend(path, session_slots=8)
    if args.batch == "off":
        backend.decode_batch = None  # type: ignore[assignment]  (the engine then steps alone)
    rec = Recorder()
    engine = EngineThread(lambda: backend, rec, max_active=8)
    engine.start()
    try:
        run_streams(engine, rec, requests(2, 8, "warm", backend))  # warm-up: sessions, arena
        figures: dict[int, list[dict[str, float]]] = {n: [] for n in args.streams}
        for r in range(args.rounds):
            for n in args.streams:
                figures[n].append(run_streams(engine, rec, requests(n, args.tokens, f"r{r}n{n}", backend)))
        base = statistics.median(f["agg"] for f in figures[args.streams[0]])
        print(f"\n{label} (batching {args.batch}; {args.tokens} tokens per stream; medians of {args.rounds})")
        print(f"{'streams':>8} {'aggregate tok/s':>16} {'vs 1':>6} {'slowest/others':>15} {'mean batch':>11}")
        for n in args.streams:
            agg = statistics.median(f["agg"] for f in figures[n])
            slow = statistics.median(f["slowest"] for f in figures[n])
            batch = statistics.median(f["batch"] for f in figures[n])
            print(f"{n:>8} {agg:>16.1f} {agg / base:>5.2f}x {slow:>15.2f} {batch:>11.2f}")
        if args.stops:
            lat = stop_latencies(engine, rec, backend, args.stops)
            print(f"Stop while 4 streams decode (engine-measured cancel -> ended, n={len(lat)}): "
                  f"p50 {1000 * pct(lat, 50):.0f} ms, p99 {1000 * pct(lat, 99):.0f} ms, max {1000 * max(lat):.0f} ms")
    finally:
        engine.shutdown(timeout=30)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="a GGUF (default: the default model)")
    ap.add_argument("--synthetic-1b", action="store_true", help="also a Llama-3.2-1B-shaped Q4_0 synthetic")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--stops", type=int, default=20)
    ap.add_argument("--streams", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 4, 8])
    ap.add_argument("--batch", choices=["on", "off"], default="on")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-batching-") as tmp:  # the synthetic GGUF: never left behind
        return _run(args, tmp)


def _run(args: argparse.Namespace, tmp: str) -> int:
    from turbospark_app.model.fetch import default_model_path

    print(f"machine: {platform.machine()} {os.cpu_count()} cores, {platform.processor() or ''} "
          f"load avg {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    bench_model(Path(args.model) if args.model else default_model_path(), "default model" if not args.model
                else Path(args.model).name, args)
    if args.synthetic_1b:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import subprocess

        out = Path(tmp) / "synthetic-1b-q4_0.gguf"
        subprocess.run([sys.executable, str(Path(__file__).resolve().parent / "synthetic_gguf.py"), str(out),
                        "--type", "Q4_0"], check=True)
        bench_model(out, "synthetic 1B Q4_0", args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
