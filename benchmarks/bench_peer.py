"""TurboSpark vs llama.cpp (llama-cpp-python), side by side in one run. Prints medians and ratios.

    python benchmarks/bench_peer.py [--peer-python PATH] [--rounds 3] [--skip-1b] [--model GGUF]
    python benchmarks/bench_peer.py --families [qwen3,gemma3,...] [--rounds 2]

Each figure comes from a fresh child process per engine (`peer_child.py`), the two engines
alternating, `--rounds` times; the table shows medians and TurboSpark / llama.cpp ratios:
decode tok/s (after a 38-token prompt), chunked prefill tok/s (500 tokens; TurboSpark in
128-token chunks, llama.cpp in one 512 batch), load time (TurboSpark: warm weight cache), warm
open (the engine's imports + that load, a fresh process), first open (a whole process:
`turbospark chat` with empty cache/config/data folders, one token, in the app's default kernel
mode; llama.cpp: load and a 6-token prompt) with its peak RSS, steady RSS (after decode, the
model alive) and peak RSS. Both use 2 threads. Models: the default GGUF, then synthetic
Llama-3.2-1B-shaped GGUFs with random Q4_0, Q4_K and Q4_K_M-mix weights (`synthetic_gguf.py`,
written to a temp folder).
TurboSpark runs once per kernel mode in `--kernels` (default: exact-prompt, the app's default,
and int8, llama.cpp's numerics; see `ort_graph.KERNEL_MODES`), each its own column.
Also printed: TurboSpark's weights in memory (RSS growth of a warm load over a process that
has only imported the engine) against the GGUF's tensor bytes, and where a decode step's time
goes (`breakdown.py`). `--families` runs instead one ~0.5-1B synthetic GGUF per model family
(`synthetic_gguf.write_family_synthetic`, Q4_0): decode after 38 tokens and 256-token chunked prefill.

`make bench-peer` builds llama-cpp-python into its own venv first (see tools/peer_venv.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import shutil
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

_RSS_CHILD = """
import sys, resource
sys.path.insert(0, {root!r})
def rss():
    out = {{}}
    for line in open('/proc/self/status'):
        if line.startswith(('RssAnon', 'RssFile')):
            key, value = line.split(':')
            out[key] = int(value.split()[0]) * 1024
    return out
from turbospark_app.model.reference.forward import LlamaModel
from turbospark_app.model.compact import graph as ort_graph
import onnx, onnxruntime
base = rss()
m = LlamaModel.from_gguf({path!r}, {cache!r}, weights='compact')
m.forward([1, 2, 3], m.new_cache())
now = rss()
print(now['RssAnon'] - base['RssAnon'], now['RssFile'] - base['RssFile'])
"""


def _env(**extra: str) -> dict[str, str]:
    """The children's environment: as a user's, Python's bytecode is kept. With
    PYTHONDONTWRITEBYTECODE set (as on some CI machines) every import of both engines compiled
    its sources again, ~0.08 s of each measured open."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(extra)
    return env


def child(python: str, engine: str, gguf: Path, cache: Path, extra: list[str],
          kernels: str | None = None) -> dict:
    cmd = [python, str(HERE / "peer_child.py"), engine, str(gguf), "--cache", str(cache), *extra]
    env = _env()
    if kernels:
        env["TURBOSPARK_KERNELS"] = kernels
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{engine} on {gguf.name} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


_PEER_OPEN = """
from llama_cpp import Llama
llm = Llama(model_path={path!r}, n_ctx=2048, n_threads=2, n_threads_batch=2, n_batch=512, verbose=False)
llm.eval([1, 2, 3, 4, 5, 6])
"""


def first_open(engine: str, python: str, gguf: Path, tmp: Path) -> dict:
    """A whole first-open process: TurboSpark's `turbospark chat` with empty cache, config and
    data folders (weight cache built, tokenizer read, session made, one token), or llama.cpp
    loading the GGUF and evaluating a 6-token prompt. Wall time and the process's peak RSS."""
    env = _env(TURBOSPARK_THREADS="2")
    if engine == "llama.cpp":
        cmd = [python, "-c", _PEER_OPEN.format(path=str(gguf))]
    else:
        fresh = Path(tempfile.mkdtemp(prefix="first-open-", dir=tmp))
        for name in ("cache", "config", "data"):
            env[f"TURBOSPARK_{name.upper()}_DIR"] = str(fresh / name)
        env.pop("TURBOSPARK_KERNELS", None)
        cmd = [python, "-m", "turbospark_app", "chat", "--model", str(gguf), "--raw",
               "--prompt", "hello there", "--max-new", "1"]
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{engine} first open of {gguf.name} failed:\n{err[-2000:]}")
    if engine != "llama.cpp":
        shutil.rmtree(fresh, ignore_errors=True)
    return {"first_open_s": wall, "first_open_peak_mib": usage.ru_maxrss / 1024}


def tensor_bytes(gguf_path: Path) -> int:
    import gguf

    return sum(int(t.n_bytes) for t in gguf.GGUFReader(str(gguf_path)).tensors)


def weights_in_memory(gguf_path: Path, cache: Path) -> tuple[int, int] | None:
    """RSS growth (bytes: private, file-backed) of a warm compact load and one forward pass
    (Linux /proc; None elsewhere)."""
    if not Path("/proc/self/status").exists():
        return None
    code = _RSS_CHILD.format(root=str(ROOT), path=str(gguf_path), cache=str(cache))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    anon, mapped = out.stdout.strip().splitlines()[-1].split()
    return int(anon), int(mapped)


def compare(label: str, gguf_path: Path, peer: str, rounds: int, cache: Path, extra: list[str],
            kernels: list[str]) -> None:
    ours_py = sys.executable
    subprocess.run([ours_py, "-c", f"import sys; sys.path.insert(0, {str(ROOT)!r});"
                    "from turbospark_app.model.reference.forward import LlamaModel\n"
                    f"for k in {kernels!r}:\n"
                    f"    LlamaModel.from_gguf({str(gguf_path)!r}, {str(cache)!r}, weights='compact', kernels=k)"],
                   check=True, env=_env())  # the weight cache and each mode's graph, outside the measured processes
    engines = [f"TurboSpark {k}" for k in kernels] + ["llama.cpp"]
    runs: dict[str, list[dict]] = {e: [] for e in engines}
    for r in range(rounds):
        order = engines if r % 2 == 0 else engines[::-1]
        for engine in order:
            if engine == "llama.cpp":
                res = child(peer, "llama.cpp", gguf_path, cache, extra)
                res.update(first_open("llama.cpp", peer, gguf_path, cache.parent))
            else:
                res = child(ours_py, "turbospark", gguf_path, cache, extra, engine.split()[1])
                # the app's default kernels: a first open is one column's, the same for all
                first = [x for e in engines[:-1] for x in runs[e] if "first_open_s" in x]
                if len(first) < r + 1:
                    res.update(first_open("turbospark", ours_py, gguf_path, cache.parent))
            runs[engine].append(res)
            print(f"  [{label}] round {r + 1} {engine}: " + ", ".join(
                f"{k} {v:.3g}" for k, v in runs[engine][-1].items()), flush=True)
    keys = ("decode_tok_s", "prefill_tok_s", "load_s", "open_s", "first_open_s",
            "first_open_peak_mib", "steady_rss_mib", "peak_rss_mib")
    med = {e: {k: statistics.median(vals) if (vals := [x[k] for x in rs if k in x]) else float("nan")
               for k in keys} for e, rs in runs.items()}
    ours_first = [x for e in engines[:-1] for x in runs[e] if "first_open_s" in x]
    for k in ("first_open_s", "first_open_peak_mib"):  # one first open per round, any column
        for e in engines[:-1]:
            med[e][k] = statistics.median(x[k] for x in ours_first)
    peer_m = med["llama.cpp"]
    size = tensor_bytes(gguf_path)
    mem = weights_in_memory(gguf_path, cache)
    print(f"\n{label}: {gguf_path.name}, GGUF tensor bytes {size / 2**20:.1f} MiB; medians of {rounds}")
    print(f"  {'figure':<26}" + "".join(f"{e:>24}" for e in engines))
    for key, name, fmt in (("decode_tok_s", "decode tok/s", "{:.1f}"),
                           ("prefill_tok_s", "chunked prefill tok/s", "{:.1f}"),
                           ("load_s", "load s (ours: warm)", "{:.2f}"),
                           ("open_s", "warm open s (+imports)", "{:.2f}"),
                           ("first_open_s", "first open s (process)", "{:.2f}"),
                           ("first_open_peak_mib", "first open peak RSS MiB", "{:.0f}"),
                           ("steady_rss_mib", "steady RSS MiB", "{:.0f}"),
                           ("peak_rss_mib", "peak RSS MiB", "{:.0f}")):
        cells = []
        for e in engines:
            a, b = med[e][key], peer_m[key]
            cells.append(fmt.format(a) if e == "llama.cpp" else f"{fmt.format(a)} ({a / b:.2f}x)")
        print(f"  {name:<26}" + "".join(f"{c:>24}" for c in cells))
    if mem is not None:
        anon, mapped = mem
        print(f"  weights in memory (RSS growth of a warm load + one pass): {(anon + mapped) / 2**20:.0f} MiB "
              f"= {(anon + mapped) / size:.2f}x the GGUF tensor bytes; of it private {anon / 2**20:.0f} MiB "
              f"({anon / size:.2f}x), file-backed from the cache {mapped / 2**20:.0f} MiB")
    print(flush=True)


def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import numpy
    import onnxruntime

    return (f"{model}, {os.cpu_count()} CPUs, Python {platform.python_version()}, numpy "
            f"{numpy.__version__}, onnxruntime {onnxruntime.__version__}, load avg "
            f"{os.getloadavg()[0]:.1f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peer-python", default=os.environ.get("PEER_PYTHON", "build/peer-venv/bin/python"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--skip-1b", action="store_true")
    ap.add_argument("--only-1b", action="store_true", help="skip the default model")
    ap.add_argument("--decode", type=int, default=64)
    ap.add_argument("--families", nargs="?", const="qwen3,gemma3,gemma2,phi3,granite,smollm3,olmo2",
                    default=None, help="one synthetic GGUF per family instead (comma-separated)")
    ap.add_argument("--kernels", default="exact-prompt,int8",
                    help="TurboSpark kernel modes to run, comma-separated (TURBOSPARK_KERNELS)")
    args = ap.parse_args()
    kernels = [k for k in args.kernels.split(",") if k]
    if not Path(args.peer_python).exists():
        print(f"no llama-cpp-python interpreter at {args.peer_python} (run `make bench-peer`)",
              file=sys.stderr)
        return 2
    from turbospark_app.model.fetch import default_model_path

    print(f"machine: {machine()}\n", flush=True)
    extra = ["--decode", str(args.decode)]
    with tempfile.TemporaryDirectory(prefix="turbospark-peer-") as tmp:
        cache = Path(tmp) / "cache"
        if args.families:
            from synthetic_gguf import write_family_synthetic

            for arch in args.families.split(","):
                path = write_family_synthetic(Path(tmp) / f"synthetic-{arch}.gguf", arch)
                compare(f"synthetic {arch}", path, args.peer_python, args.rounds, cache,
                        ["--decode", "32", "--prefill", "256"], kernels)
                path.unlink()
            return 0
        if not args.only_1b:
            compare("default model", args.model or default_model_path(), args.peer_python,
                    args.rounds, cache, extra, kernels)
        if not args.skip_1b:
            from synthetic_gguf import write_synthetic

            for qtype in ("Q4_0", "Q4_K", "Q4_K_M"):
                path = write_synthetic(Path(tmp) / f"synthetic-1b-{qtype}.gguf", qtype)
                compare(f"synthetic 1B {qtype}", path, args.peer_python, args.rounds, cache,
                        ["--decode", "32", "--prefill", "256"], kernels)
                path.unlink()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
