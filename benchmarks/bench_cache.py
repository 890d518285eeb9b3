"""The weight cache's figures (issue #19): key cost, disk use against the GGUF (per kind and
per prepacked-session policy), load time and memory with and without a saved prepacked session
(the model alone, and a whole backend up to its first token), and what verifying before the
first token costs (the same with the check switched off).

    .venv/bin/python benchmarks/bench_cache.py [--model GGUF] [--runs 3] [--kernels exact-prompt,int8,exact]
    .venv/bin/python benchmarks/bench_cache.py --synthetic-1b [--kernels exact-prompt]

Everything runs against a fresh cache folder in a temp directory (your own cache is not
touched); loads are measured in child processes (a clean RSS each), medians of `--runs`.
`--synthetic-1b` writes a Llama-3.2-1B-shaped Q4_0 GGUF (benchmarks/synthetic_gguf.py) first.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MIB = 2**20

CHILD = r"""
import json, os, sys, time
import psutil
from turbospark_app.chat import backend as backend_mod
from turbospark_app.chat.backend import load_backend
from turbospark_app.chat.api import ChatMessage, TurnSettings
from turbospark_app.engine import GenerationConfig, TokenProgress
from turbospark_app.engine.raw_completion import drive_raw_completion
from turbospark_app.model.compact import forward as forward_mod
path, cache, kernels, mode = sys.argv[1:5]
if mode == "unsaved":  # the session made from the graph on every load, never saved
    from turbospark_app.model.compact.graph import make_session
    forward_mod.cached_session = lambda proto, entry, k, threads: (make_session(proto, entry, threads), "built")
if mode == "unchecked":  # no verification, no held first token: what the gate costs
    backend_mod.start_cache_check = lambda path, on_problem: None
proc = psutil.Process()
rss0 = proc.memory_info().rss
t = time.perf_counter()
b = load_backend(path, cache_dir=cache, session_slots=1, kernels=kernels)
load = time.perf_counter() - t
settings = TurnSettings(generation=GenerationConfig(max_new_tokens=1))
ids = [1] + [100 + i for i in range(40)]  # a 41-token prompt, no template needed
turn = b.prepare_prompt("bench", ids, settings)
first = []
start = time.perf_counter()
drive_raw_completion(b.stream_turn(turn, lambda: False), settings.generation.rate, lambda: False,
                     lambda e: first.append(time.perf_counter() - start)
                     if isinstance(e, TokenProgress) and not first else None)
check = b.cache_check
if check is not None:
    check.join()
print(json.dumps({"load": load, "ttft": first[0], "rss": proc.memory_info().rss - rss0,
                  "origin": getattr(b.model, "session_origin", "-"),
                  "check_seconds": check.seconds if check is not None else 0.0,
                  "check_state": check.state if check is not None else "none"}))
"""


MODEL_ONLY = r"""
import json, sys, time
import psutil
from turbospark_app.model.compact import forward as forward_mod
from turbospark_app.model.compact.graph import make_session
path, cache, kernels, mode = sys.argv[1:5]
if mode == "unsaved":
    forward_mod.cached_session = lambda proto, entry, k, threads: (make_session(proto, entry, threads), "built")
t = time.perf_counter()
model = forward_mod.CompactLlamaModel.load(path, cache, kernels)
print(json.dumps({"load": time.perf_counter() - t, "rss": psutil.Process().memory_info().rss}))
"""


def child(path: Path, cache: Path, kernels: str, mode: str, code: str = CHILD) -> dict:
    env = dict(os.environ, TURBOSPARK_CACHE_DIR=str(cache), TURBOSPARK_CONFIG_DIR=str(cache / "config"),
               OPENBLAS_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", code, str(path), str(cache), kernels, mode],
                         capture_output=True, text=True, env=env, timeout=3600)
    if out.returncode:
        raise SystemExit(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def size_of(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def key_figures(path: Path, runs: int) -> None:
    from turbospark_app.model.weight_cache import keys

    keys.full_digest(path)  # page cache warm for both
    sampled, full = [], []
    for _ in range(runs):
        t = time.perf_counter()
        keys.content_key(path)
        sampled.append(time.perf_counter() - t)
        t = time.perf_counter()
        keys.full_digest(path)
        full.append(time.perf_counter() - t)
    med = statistics.median
    print(f"content key ({path.stat().st_size / MIB:.0f} MiB GGUF, page cache warm): sampled key "
          f"{med(sampled) * 1000:.1f} ms, full sha256 {med(full) * 1000:.0f} ms")


def disk_figures(path: Path, cache: Path, modes: list[str]) -> dict[str, dict]:
    gguf = path.stat().st_size
    loads = {}
    for mode in modes:
        cold = child(path, cache, mode, "saved")  # builds the entry (first mode) and saves a session
        loads[mode] = cold
    (entry,) = [p for p in (cache / "weights").iterdir() if "-compact-" in p.name and not p.name.startswith(".")]
    sessions = {json.loads((p / "usage.json").read_text())["kind"].split()[-1]: size_of(p)
                for p in entry.glob("ort-*")}
    own = size_of(entry) - sum(sessions.values())
    print(f"GGUF {gguf / MIB:.1f} MiB; compact entry {own / MIB:.1f} MiB = {own / gguf:.2f}x")
    for mode, size in sessions.items():
        print(f"  + prepacked session {mode}: {size / MIB:.1f} MiB = {size / gguf:.2f}x "
              f"-> entry + this session {(own + size) / gguf:.2f}x")
    print(f"  policy 'all' (entry + every session, {len(sessions)} modes): "
          f"{(own + sum(sessions.values())) / gguf:.2f}x; 'current': "
          f"{(own + max(sessions.values())) / gguf:.2f}x at most; 'none' (the default): {own / gguf:.2f}x")
    return loads


def model_load_figures(path: Path, cache: Path, mode: str, runs: int) -> None:
    """The model load alone (no tokenizer, template or backend): mapped session vs prepacking."""
    med = statistics.median
    rows: dict[str, list[dict]] = {"saved": [], "unsaved": []}
    for _ in range(runs):
        for variant in rows:
            rows[variant].append(child(path, cache, mode, variant, MODEL_ONLY))
    print(f"  {mode:>12} model load alone: mapped session {med(x['load'] for x in rows['saved']):.2f} s "
          f"/ RSS {med(x['rss'] for x in rows['saved']) / MIB:.0f} MiB; no saved session (prepacks) "
          f"{med(x['load'] for x in rows['unsaved']):.2f} s / RSS "
          f"{med(x['rss'] for x in rows['unsaved']) / MIB:.0f} MiB")


def load_figures(path: Path, cache: Path, mode: str, runs: int) -> None:
    med = statistics.median
    rows = {}
    for variant in ("saved", "unsaved", "unchecked"):
        rows[variant] = []
    for _ in range(runs):  # alternated, so the machine's drift hits every variant
        for variant in rows:
            rows[variant].append(child(path, cache, mode, variant))
    for variant, label in (("saved", "mapped prepacked session (verified before the 1st token)"),
                           ("unsaved", "no saved session (prepacked at every load)"),
                           ("unchecked", "mapped session, check switched off")):
        r = rows[variant]
        print(f"  {mode:>12} {label}: load {med(x['load'] for x in r):.2f} s, first token "
              f"{med(x['ttft'] for x in r) * 1000:.0f} ms, RSS +{med(x['rss'] for x in r) / MIB:.0f} MiB"
              + (f", check {med(x['check_seconds'] for x in r) * 1000:.0f} ms ({r[0]['check_state']})"
                 if variant == "saved" else ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--kernels", default="exact-prompt,int8,exact")
    ap.add_argument("--synthetic-1b", action="store_true")
    args = ap.parse_args()
    modes = args.kernels.split(",")
    with tempfile.TemporaryDirectory(prefix="bench-cache-") as tmp:
        if args.synthetic_1b:
            sys.path.insert(0, str(HERE))
            from synthetic_gguf import write_synthetic

            path = write_synthetic(Path(tmp) / "synthetic-1b-Q4_0.gguf")
        else:
            from turbospark_app.model.fetch import resolve_model_path

            path = resolve_model_path(str(args.model) if args.model else None)
        cache = Path(tmp) / "cache"
        (cache / "config").mkdir(parents=True)  # keep a session per mode, to measure each
        (cache / "config" / "cache.json").write_text(json.dumps({"sessions": "all"}))
        print(f"model {path.name}; load average {os.getloadavg()[0]:.1f}; runs {args.runs}")
        key_figures(path, args.runs)
        disk_figures(path, cache, modes)
        print("warm loads (child processes):")
        for mode in modes:
            model_load_figures(path, cache, mode, args.runs)
        print("warm load_backend, then the first token after a 41-token prompt:")
        for mode in modes:
            load_figures(path, cache, mode, args.runs)


if __name__ == "__main__":
    main()
