"""A compact decode step against its bare weight kernels, and the bytes those kernels stream.

    python benchmarks/bench_kernels.py [GGUF ...] [--rounds 5] [--steps 48]

For each GGUF (default: the default model) this builds, beside the model's own session, a
second ONNX Runtime session holding ONLY the step's weight matmuls: every matrix of every layer
and the head, as the model's graph calls them (`MatMulNBits` on the same cached blocks, the
minimum corrections where the format has them), fed one row, nothing else. It prints, medians
over `--rounds` alternating rounds in one process:

- the decode step (one token, greedy, after a 38-token prompt) and the bare kernels' run;
- their ratio: how much of a step is anything but weight kernels (graph nodes between them,
  attention, Python);
- the kernels' rate in GB/s of the GGUF's own tensor bytes (what llama.cpp reads per token,
  repacked or not), and as tok/s if a step were nothing but these kernels;
- the private memory the bare session's prepacked weights take per weight (bytes), against the
  GGUF's (Q4_0: 0.5625): the layout each step streams.

With llama.cpp's decode tok/s from `bench_peer.py` on the same file, this says whether a step
could reach it: if the bare kernels alone are slower than the peer's whole step, no change to
the graph around them can.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _rss_anon_mib() -> float:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def bare_session(model):
    """An ONNX Runtime session of the model's weight matmuls only (the head included), one
    input per matmul width: (session, feeds, weights counted)."""
    from onnx import TensorProto

    from turbospark_app.model.compact.graph import _Graph, _model, make_session

    w = model.weights
    g = _Graph(w.external_ref, "int8")
    inputs: dict[int, str] = {}
    outs: list[str] = []
    count = 0

    def run(mats) -> None:
        nonlocal count
        for m in mats:
            n, k = m.shape
            if k not in inputs:
                inputs[k] = g.input(f"x{k}", TensorProto.FLOAT, [1, k])
            outs.append(g._one(inputs[k], m))
            count += n * k

    for layer in w.layers:
        for mats in (layer.qkv, layer.o, layer.gate_up, layer.down):
            run(mats)
    run(w.head)
    for i, o in enumerate(outs):
        g.output(o, f"y{i}", TensorProto.FLOAT, None)
    session = make_session(_model(g), w.cache_path, parallel_prepack=True)
    rng = np.random.default_rng(0)
    feeds = {f"x{k}": rng.standard_normal((1, k)).astype(np.float32) for k in inputs}
    return session, feeds, count


def _gguf_tensor_bytes(path: Path, names: set[str] | None = None) -> int:
    import gguf

    return sum(int(t.n_bytes) for t in gguf.GGUFReader(str(path)).tensors
               if len(t.shape) == 2 and (names is None or t.name in names))


def measure(path: Path, rounds: int, steps: int) -> None:
    from turbospark_app.model.compact.forward import CompactLlamaModel

    model = CompactLlamaModel.load(path, os.environ.get("TURBOSPARK_CACHE_DIR"))
    before = _rss_anon_mib()
    session, feeds, weights = bare_session(model)
    session.run(None, feeds)
    packed_mib = _rss_anon_mib() - before
    prompt = list(range(100, 138))
    step_ms: list[float] = []
    bare_ms: list[float] = []
    for _ in range(rounds):
        cache = model.new_cache()
        x = int(np.argmax(model.forward(prompt, cache)))
        times = []
        for _ in range(steps):
            t = time.perf_counter()
            x = int(np.argmax(model.forward([x], cache)))
            times.append(time.perf_counter() - t)
        step_ms.append(statistics.median(times) * 1e3)
        times = []
        for _ in range(steps):
            t = time.perf_counter()
            session.run(None, feeds)
            times.append(time.perf_counter() - t)
        bare_ms.append(statistics.median(times) * 1e3)
    step, bare = statistics.median(step_ms), statistics.median(bare_ms)
    # The GGUF's matrices a step reads: every 2-D tensor, the tied embedding once (as the head).
    gguf_bytes = _gguf_tensor_bytes(path)
    print(f"\n{path.name}: {weights / 1e9:.2f} B weights in the step's matmuls; "
          f"GGUF 2-D tensors {gguf_bytes / 2**20:.1f} MiB ({gguf_bytes / weights:.3f} bytes per weight)")
    print(f"  decode step                    {step:7.2f} ms  ({1e3 / step:6.1f} tok/s)")
    print(f"  its bare weight kernels        {bare:7.2f} ms  ({1e3 / bare:6.1f} tok/s if a step were only these)")
    print(f"  step / bare kernels            {step / bare:7.2f}x")
    print(f"  bare kernels' rate             {gguf_bytes / (bare / 1e3) / 1e9:7.1f} GB/s of the GGUF's tensor bytes")
    print(f"  prepacked layout in memory     {packed_mib * 2**20 / weights:7.3f} bytes per weight "
          f"({packed_mib:.0f} MiB private for the bare session)")
    print("  rounds (step ms / bare ms): "
          + ", ".join(f"{s:.2f}/{b:.2f}" for s, b in zip(step_ms, bare_ms)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gguf", nargs="*", type=Path)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=48)
    args = ap.parse_args()
    from turbospark_app.model.fetch import default_model_path

    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"load avg {os.getloadavg()[0]:.1f}")
    for path in args.gguf or [default_model_path()]:
        measure(path, args.rounds, args.steps)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
