"""Start-up as a whole process: `turbospark chat --prompt Hi --max-new 1` against llama-cpp-python's
minimal script doing the same (`Llama(...)`, one greedy chat token), taking turns.

    python benchmarks/bench_startup.py [--model GGUF] [--rounds 7] [--first-open] [--threads 2]

Warm (default): the file was opened before (the probe child's verdict is remembered, the OS has
the file cached), as a user's second start. `--first-open`: every run of ours gets a fresh cache
folder (TURBOSPARK_CACHE_DIR), so the file is never seen before and its check in a child process
(`model/llamacpp/probe.py`) runs, as on a file's first open; llama-cpp-python has no such check.
Printed: medians of wall seconds and of the process's CPU seconds (user + sys, its children
included: the probe child counts), and the median of the paired ratios (each of ours over the
llama-cpp-python run beside it), with the load average, since the CPU figures move least on a
loaded machine. Runs alternate ours / theirs, theirs / ours.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_peer import _LLAMA_ONE_TOKEN as LLAMA_CPP_PYTHON  # noqa: E402  (the same script)


def run(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process and its children) of one run."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                            stdin=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode("utf-8", "replace") if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:3]} failed ({proc.returncode}): {err[-1500:]}")
    # wait4's usage counts the process and the children it waited for (the probe child)
    return wall, usage.ru_utime + usage.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--first-open", action="store_true")
    a = ap.parse_args()
    if a.model is None:
        from turbospark_app.model.fetch import ensure_default_model

        a.model = str(ensure_default_model(download=False))
    ours = [sys.executable, "-m", "turbospark_app", "chat", "--prompt", "Hi", "--max-new", "1",
            "--model", a.model, "--threads", str(a.threads), "--ctx-size", str(a.ctx)]
    theirs = [sys.executable, "-c", LLAMA_CPP_PYTHON, a.model, str(a.ctx), str(a.threads)]
    base = dict(os.environ)
    figures: dict[str, list[tuple[float, float]]] = {"ours": [], "theirs": []}
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        def our_env(k: int) -> dict[str, str]:
            if not a.first_open:
                return base
            return dict(base, TURBOSPARK_CACHE_DIR=str(Path(tmp) / f"cache{k}"))

        run(ours, base if not a.first_open else our_env(-1))  # warm-up: the OS file cache
        run(theirs, base)
        for k in range(a.rounds):
            order = ("ours", "theirs") if k % 2 == 0 else ("theirs", "ours")
            for side in order:
                figures[side].append(run(ours, our_env(k)) if side == "ours" else run(theirs, base))
            print(f"  round {k + 1}: ours {figures['ours'][-1][0]:.2f} s ({figures['ours'][-1][1]:.2f} CPU), "
                  f"theirs {figures['theirs'][-1][0]:.2f} s ({figures['theirs'][-1][1]:.2f} CPU)",
                  file=sys.stderr, flush=True)
    med = {s: (statistics.median(w for w, _ in f), statistics.median(c for _, c in f)) for s, f in figures.items()}
    wall_ratio = statistics.median(o[0] / t[0] for o, t in zip(figures["ours"], figures["theirs"]))
    cpu_ratio = statistics.median(o[1] / t[1] for o, t in zip(figures["ours"], figures["theirs"]))
    what = "first open (never-seen file: the probe child runs)" if a.first_open else "warm one-token reply"
    print(f"# {what}, whole process · {Path(a.model).name} · {a.rounds} rounds · "
          f"load {os.getloadavg()[0]:.1f}")
    print(f"{'':<28}{'wall s':>10}{'CPU s':>10}")
    print(f"{'turbospark chat':<28}{med['ours'][0]:>10.2f}{med['ours'][1]:>10.2f}")
    print(f"{'llama-cpp-python script':<28}{med['theirs'][0]:>10.2f}{med['theirs'][1]:>10.2f}")
    print(f"{'paired ratio (median)':<28}{wall_ratio:>9.2f}x{cpu_ratio:>9.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
