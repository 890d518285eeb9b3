"""Frame times of two trees side by side: bench_code_stream.py's two-pane stream (two panes of
the real window streaming a code-heavy reply at 400 tok/s each) run from this tree and from
another one (e.g. main before a change), one round each in turn, so both see the same load.

    QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/compare_frames.py --before /path/to/main [--rounds 6]

Each round is a fresh process running that tree's own benchmarks/bench_code_stream.py with that
tree first on the import path (this venv's packages). Printed per tree: the medians over rounds
of the frame gaps' p50 / p99 / max (wall: a 16 ms timer's tick-to-tick gaps), the frames over
32 ms, and the GUI thread's CPU time within a frame (p99 / max: what the window itself spent,
which other processes' turns on the cores do not inflate), with the load average before/after.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
ROUND = re.compile(r"round \d+:\s+(\d+) frames\s+p50\s+([\d.]+) ms\s+p99\s+([\d.]+) ms\s+max\s+([\d.]+) ms\s+"
                   r"(\d+) frames dropped.*?CPU per frame p99\s+([\d.]+) ms max\s+([\d.]+) ms")
FIELDS = ("frames", "p50", "p99", "max", "dropped", "cpu_p99", "cpu_max")


def one_round(tree: Path, rate: float) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(tree), QT_QPA_PLATFORM=os.environ.get("QT_QPA_PLATFORM", "offscreen"))
    out = subprocess.run([sys.executable, str(tree / "benchmarks" / "bench_code_stream.py"), "--only", "panes",
                          "--rounds", "1", "--rate", str(rate)], env=env, capture_output=True, text=True,
                         timeout=600).stdout
    m = ROUND.search(out)
    if m is None:
        raise SystemExit(f"no round figures from {tree}:\n{out}")
    return {k: float(v) for k, v in zip(FIELDS, m.groups())}


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, required=True, help="the other tree (its turbospark_app and benchmarks)")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--rate", type=float, default=400.0)
    args = ap.parse_args()
    trees = {"before": args.before.resolve(), "this tree": HERE}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    print(f"load average {load()} (1, 5, 15 min) · {os.cpu_count()} cores")
    for r in range(args.rounds):
        order = list(trees) if r % 2 == 0 else list(trees)[::-1]
        for name in order:
            fig = one_round(trees[name], args.rate)
            runs[name].append(fig)
            print(f"  round {r + 1} {name:>9}: p50 {fig['p50']:5.1f}  p99 {fig['p99']:6.1f}  max {fig['max']:6.1f} ms  "
                  f"{fig['dropped']:3.0f}/{fig['frames']:.0f} over 32 ms  CPU p99 {fig['cpu_p99']:5.1f} "
                  f"max {fig['cpu_max']:6.1f} ms", flush=True)
    print(f"load average {load()}")
    for name, figs in runs.items():
        med = {k: statistics.median(f[k] for f in figs) for k in FIELDS}
        print(f"{name:>9} ({trees[name]}), medians of {len(figs)}: frame gap p50 {med['p50']:.1f} ms, "
              f"p99 {med['p99']:.1f} ms, max {med['max']:.1f} ms, {med['dropped']:.0f} of {med['frames']:.0f} frames "
              f"over 32 ms; GUI-thread CPU per frame p99 {med['cpu_p99']:.1f} ms, max {med['cpu_max']:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
