"""Ctrl-C in `turbospark chat --prompt` during a long prefill: time to the summary and to exit.

    python benchmarks/bench_cli_interrupt.py [--trials 20] [--before-tree DIR] [--model GGUF]
           [--chunk-size 128] [--max-new 64] [--load N]

Each trial spawns `python -m turbospark_app chat --prompt <~1500-token prompt> --max-new 64` as a
child process, waits for the `> ...` line it prints on stderr right before the turn starts (the
model is loaded, the prefill begins within milliseconds), waits a random 0.2-1.0 s more (the
prefill of ~1500 tokens takes seconds, so this lands inside it, at a random point of a chunk),
sends SIGINT and stamps the time. Figures (p50 / p90 / p99 / max over the trials): from SIGINT to
the summary line on stderr, and to the process's exit. Each trial is checked: the summary says
`stop cancelled` with 0 new tokens (stopped in prefill) and the exit code is 0.

The exit is stamped by a blocking waitpid() on a thread: `Popen.wait(timeout)` polls with a
doubling sleep (1, 2, 4 ... 50 ms), which rounded every exit up to 31 / 63 / 113 / 163 ms.

`--load N` keeps N busy-looping processes running during the trials: the tail shows on a busy
machine (other jobs on the 2 cores), and this makes that condition repeatable.

`--before-tree DIR` runs the same trials, alternating, against another checkout (e.g.
`git archive main | tar -x -C DIR`), with the same interpreter: the child's working directory
is DIR, so `-m turbospark_app` imports that tree's code.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def long_prompt(lines: int = 80) -> str:
    """A deterministic prompt of ~1500 tokens (the summary line reports the exact count)."""
    return " ".join(
        f"Note {i}: the quick brown fox number {i * 7 % 13} jumps over the lazy dog." for i in range(lines)
    ) + " Summarize the notes."


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100): with 20-100 trials p99 is the max or next to it."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def wait_exit(child: subprocess.Popen[str], timeout: float) -> tuple[int, float]:
    """(exit code, perf_counter at the exit): a blocking wait, woken by the exit itself."""
    stamp: list[float] = []

    def reap() -> None:
        child.wait()  # no timeout: one blocking waitpid(), no polling
        stamp.append(time.perf_counter())

    reaper = threading.Thread(target=reap, daemon=True)
    reaper.start()
    reaper.join(timeout)
    if not stamp:
        raise subprocess.TimeoutExpired(child.args, timeout)
    return child.returncode, stamp[0]


def trial(tree: Path, prompt: str, args: argparse.Namespace, rng: random.Random) -> tuple[float, float, str]:
    """One child: (seconds SIGINT -> summary line, seconds SIGINT -> exit, the summary line)."""
    cmd = [sys.executable, "-m", "turbospark_app", "chat", "--prompt", prompt,
           "--max-new", str(args.max_new), "--chunk-size", str(args.chunk_size)]
    if args.model is not None:
        cmd += ["--model", str(args.model)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    child = subprocess.Popen(cmd, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True, env=env)
    started = threading.Event()
    summary: list[tuple[float, str]] = []
    lines: list[str] = []

    def read_stderr() -> None:
        assert child.stderr is not None
        for line in child.stderr:
            now = time.perf_counter()
            lines.append(line)
            if line.startswith("> "):
                started.set()
            elif line.startswith("[prompt "):
                summary.append((now, line.strip()))
        started.set()  # end of output: unblock the waiter (the check below reports it)

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        if not started.wait(300) or child.poll() is not None:
            raise RuntimeError("the child never reached the turn:\n" + "".join(lines))
        time.sleep(rng.uniform(0.2, 1.0))
        sent = time.perf_counter()
        child.send_signal(signal.SIGINT)
        code, exited = wait_exit(child, 60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    reader.join(10)
    if code != 0 or not summary:
        raise RuntimeError(f"exit code {code}, no summary line:\n" + "".join(lines))
    at, line = summary[0]
    if "stop cancelled" not in line or "| new 0 tok |" not in line:
        raise RuntimeError(f"not stopped in prefill (use a longer prompt): {line}")
    return at - sent, exited - sent, line


def report(name: str, to_summary: list[float], to_exit: list[float]) -> None:
    """Print one row of figures, in ms."""
    def fig(v: list[float]) -> str:
        return (f"p50 {statistics.median(v) * 1000:.0f} ms, p90 {percentile(v, 90) * 1000:.0f} ms, "
                f"p99 {percentile(v, 99) * 1000:.0f} ms, max {max(v) * 1000:.0f} ms")

    print(f"{name}: SIGINT -> summary line: {fig(to_summary)}")
    print(f"{name}: SIGINT -> process exit: {fig(to_exit)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--before-tree", type=Path, default=None,
                    help="another checkout to measure too (the code before the change)")
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--chunk-size", type=int, default=128)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--seed", type=int, default=20)
    ap.add_argument("--load", type=int, default=0, metavar="N",
                    help="busy-looping processes to run alongside (a loaded machine)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    prompt = long_prompt()
    trees = {"after": ROOT}
    if args.before_tree is not None:
        trees = {"before": args.before_tree.resolve(), **trees}
    results: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in trees}
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.processor() or '?'}, "
          f"Python {platform.python_version()}, load {os.getloadavg()[0]:.2f}, "
          f"{args.load} busy processes alongside")
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    first_line = ""
    try:
        for i in range(args.trials):
            for name, tree in trees.items():  # alternating, so drift of the machine hits both alike
                to_summary, to_exit, first_line = trial(tree, prompt, args, rng)
                results[name][0].append(to_summary)
                results[name][1].append(to_exit)
                print(f"  trial {i + 1:2d} {name:6s}: summary {to_summary * 1000:6.1f} ms, "
                      f"exit {to_exit * 1000:6.1f} ms", flush=True)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    print(f"{args.trials} trials, chunks of {args.chunk_size}, load {args.load}, e.g. {first_line}")
    for name in trees:
        report(name, *results[name])
    return 0


if __name__ == "__main__":
    sys.exit(main())
