"""Host overhead per decode step: the wall time outside `llama_decode` (sampling, logits access,
stop matching, detokenizing, events, the listener's work), in µs, per stream count and
vocabulary size. Prints medians.

    python benchmarks/bench_host_overhead.py [--model GGUF] [--vocab-128k] [--streams 1,2,4]
                                             [--tokens 96] [--rounds 3] [--sampled]

In-process: the app's EngineThread over `load_backend` (what panes and the local API share),
N streams submitted together (half pane turns, half API prompt requests, greedy or with
`--sampled` llama.cpp's default sampling chain, `--tokens` new tokens each), rounds alternating N. The figure is the engine's own gauge (`engine.host_gauge`,
the one the QA panel shows): the gap from one decode step's `llama_decode` end to the next one's
start, for steps of exactly N rows (median; the mean too, which the rare long gap of a
snapshot read or a GC pause moves); per stream = / N; share = of the step's whole time.
`--vocab-128k` also runs a Llama-3.2-1B-shaped synthetic of 2 layers (vocabulary 128,256, the
1B's output head, random Q4_0 weights; written to a temporary folder and removed): what grows
with the vocabulary shows there. The default model's vocabulary is 49,152.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_batching import Recorder, requests, run_streams  # noqa: E402
from bench_model import _model_path  # noqa: E402
from turbospark_app.chat.backend import load_backend  # noqa: E402
from turbospark_app.engine.config import Shaping  # noqa: E402
from turbospark_app.service.engine_thread import EngineThread  # noqa: E402


def bench(path: Path, label: str, a: argparse.Namespace) -> list[str]:
    backend = load_backend(path, session_slots=max(a.streams), threads=a.threads)
    rec = Recorder()
    engine = EngineThread(lambda: backend, rec, max_active=max(a.streams))
    engine.start()
    rows: dict[int, list[dict[str, float]]] = {n: [] for n in a.streams}
    try:
        run_streams(engine, rec, requests(2, 8, "warm", backend))
        for r in range(a.rounds):
            for n in a.streams[r % len(a.streams):] + a.streams[: r % len(a.streams)]:
                backend.context.host.clear()
                run_streams(engine, rec, requests(n, a.tokens, f"r{r}n{n}", backend, a.shaping))
                got = backend.context.host.describe().get(str(n))
                if got:
                    rows[n].append(got)
    finally:
        engine.shutdown(30)  # (it closes the backend)
    out = []
    for n, runs in rows.items():
        if not runs:
            continue
        med = {k: statistics.median(x[k] for x in runs)
               for k in ("step_us", "per_stream_us", "mean_us", "decode_ms", "share")}
        out.append(f"{label:<34}{backend.vocab_size:>8,}{n:>8}{med['step_us']:>10.0f}{med['per_stream_us']:>12.0f}"
                   f"{med['mean_us']:>10.0f}{med['decode_ms']:>12.2f}{100 * med['share']:>8.1f}%"
                   f"{sum(x['steps'] for x in runs):>8}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--vocab-128k", action="store_true")
    ap.add_argument("--streams", default="1,2,4")
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--sampled", action="store_true",
                    help="llama.cpp's default sampling (T 0.8, top-k 40, top-p 0.95, min-p 0.05) instead of greedy")
    a = ap.parse_args()
    a.shaping = Shaping(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=1) if a.sampled else None
    a.streams = [int(s) for s in a.streams.split(",")]
    path = _model_path(a.model)
    lines = bench(path, path.name[:33], a)
    if a.vocab_128k:
        from synthetic_gguf import write_synthetic

        with tempfile.TemporaryDirectory(prefix="bench-host-") as tmp:
            big = write_synthetic(Path(tmp) / "synthetic-1b-2layers-q4_0.gguf", "Q4_0", 2)
            lines += bench(big, "1B-shaped synthetic, 2 layers", a)
    print(f"# host overhead per decode step · {platform.machine()} · {a.tokens} tokens a stream · "
          f"medians of {a.rounds} rounds · {'sampled (llama.cpp defaults)' if a.sampled else 'greedy'} · "
          f"load {os.getloadavg()[0]:.1f}")
    print(f"{'model':<34}{'vocab':>8}{'streams':>8}{'µs/step':>10}{'µs/stream':>12}{'mean µs':>10}{'decode ms':>12}"
          f"{'share':>9}{'steps':>8}")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
