"""Stop during an image's encode: how long an encode takes, what watching it costs, and how long
Stop takes to end it (the projector's graph callback, model/llamacpp/encode_stop.py).

    python benchmarks/bench_image_encode_stop.py [--model GGUF] [--image-size 1024]
           [--threads 2] [--repeats 5] [--trials 10]

The projector is the synthetic `mlp` one (benchmarks/synthetic_mmproj.py) at `--image-size`
pixels (16 px patches: 1024 px -> 4,096 image tokens), over the default model. Real projectors
are far heavier (SigLIP-400M: seconds to tens of seconds on a CPU): the figure that carries over
is the stop latency in graph nodes, and the watched/unwatched ratio.

Cost: encode wall and CPU seconds unwatched (no predicate: the graph runs in one piece) against
watched by a predicate that never says stop (polled every `CPU_EVERY` nodes, one sync each),
alternating, medians of `--repeats`.
Latency: a timer thread sets the Stop flag at a random moment 10-80 % into the encode; the figure
is the time from the flag to `Projector.encode` returning None (p50 / max over `--trials`), each
checked: stopped, no rows kept.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from synthetic_mmproj import text_n_embd, write_mmproj  # noqa: E402

from turbospark_app.media.images import decode_image  # noqa: E402
from turbospark_app.model.fetch import ensure_default_model  # noqa: E402
from turbospark_app.model.llamacpp.model import LlamaCppModel  # noqa: E402
from turbospark_app.model.llamacpp.vision import Projector  # noqa: E402
from vision_assets import png  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--image-size", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--trials", type=int, default=10)
    args = ap.parse_args()
    model_path = args.model or ensure_default_model(download=False)
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} (cores: {os.cpu_count()})")
    with tempfile.TemporaryDirectory() as tmp:
        mmproj = write_mmproj(Path(tmp) / "mmproj.gguf", text_n_embd(model_path), "mlp",
                              image_size=args.image_size)
        model = LlamaCppModel.open(model_path)
        projector = Projector.open(model, mmproj, threads=args.threads)
        try:
            run(projector, args)
        finally:
            projector.close()
            model.close()
    print(f"load average after {os.getloadavg()[0]:.2f}")


def run(projector: Projector, args: argparse.Namespace) -> None:
    image = decode_image(png(args.image_size, args.image_size, seed=5), name="bench.png")
    ids = projector.image_ids(image)
    seg = projector.segment(next(i for i in ids if i < 0))
    assert seg is not None

    def encode(cancel):  # never from the kept embeddings
        projector._embd.pop(seg.key, None)
        wall, cpu = time.perf_counter(), time.process_time()
        rows = projector.encode(seg, cancel)
        return rows, time.perf_counter() - wall, time.process_time() - cpu

    encode(None)  # warm-up (the scheduler's buffers)
    plain, watched = [], []
    for _ in range(args.repeats):
        plain.append(encode(None)[1:])
        watched.append(encode(lambda: False)[1:])
    looks = projector.last_encode.looks
    pw, pc = (statistics.median(x) for x in zip(*plain))
    ww, wc = (statistics.median(x) for x in zip(*watched))
    print(f"image: {seg.n_tokens} tokens ({args.image_size} px), {looks} looks at the predicate per encode "
          f"(every {projector.gate.every} graph nodes)")
    print(f"encode unwatched: {pw:.3f} s wall, {pc:.3f} s CPU  (median of {args.repeats})")
    print(f"encode watched:   {ww:.3f} s wall, {wc:.3f} s CPU  -> x{ww / pw:.2f} wall, x{wc / pc:.2f} CPU")

    latencies = []
    for _ in range(args.trials):
        flag = threading.Event()
        set_at: list[float] = []

        def press() -> None:
            set_at.append(time.perf_counter())
            flag.set()

        timer = threading.Timer(pw * random.uniform(0.1, 0.8), press)
        timer.start()
        rows, _, _ = encode(flag.is_set)
        ended = time.perf_counter()
        timer.join()
        if rows is not None:  # the encode finished before the timer fired
            continue
        assert projector.last_encode.stopped and seg.key not in projector._embd
        latencies.append(ended - set_at[0])
    if latencies:
        latencies.sort()
        print(f"stop latency: p50 {statistics.median(latencies) * 1000:.1f} ms, max "
              f"{latencies[-1] * 1000:.1f} ms over {len(latencies)} stopped encodes "
              f"(an unwatched encode takes {pw * 1000:.0f} ms)")
    else:
        print("stop latency: every encode finished before Stop was pressed")


if __name__ == "__main__":
    main()
