"""KV cache types in-process, on the default model (or --model): per K/V type pair, the KV bytes
at the same context (allocated, and per token as llama.cpp saves it), prefill and decode tok/s.
Prints medians over --rounds rounds, the pairs in a rotated order each round.

    python benchmarks/bench_kv_cache.py [--model PATH] [--threads N] [--ctx 4096]
                                        [--prompt-tokens 512] [--decode-tokens 64] [--rounds 3]
                                        [--types f16:f16,q8_0:q8_0,q4_0:q4_0]

Prefill: `--prompt-tokens` in 512-token chunks into an empty sequence; decode: one llama_decode
per token after that prompt (the logits copied out), so attention reads a filled cache. KV bytes
are llama.cpp's: the saved state of that sequence per token (less the 12 bytes of each cell's
position and sequence ids), times the context's cells. The prompt is deterministic pseudo-random
token ids (speed does not depend on which ids).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_model import _model_path  # noqa: E402
from turbospark_app.model.choice.kv_cache import KVCacheTypes  # noqa: E402
from turbospark_app.model.llamacpp.context import LlamaCppContext  # noqa: E402
from turbospark_app.model.llamacpp.model import LlamaCppModel  # noqa: E402
from turbospark_app.model.llamacpp.producer import LlamaCppProducer  # noqa: E402

CELL_META = 12  # bytes a saved cell carries besides its K and V: position, sequence count and id


def _one(model: LlamaCppModel, types: KVCacheTypes, a: argparse.Namespace, ids: list[int]) -> dict[str, float]:
    ctx = LlamaCppContext(model, n_ctx=a.ctx, n_seq_max=1, threads=a.threads, cache_types=types)
    try:
        p = LlamaCppProducer(ctx, 0)
        out = np.zeros(ctx.n_vocab, np.float32)
        t = time.perf_counter()
        for at in range(0, len(ids), 512):
            p.produce_chunk(ids[at: at + 512], at, out if at + 512 >= len(ids) else None)
        prefill = len(ids) / (time.perf_counter() - t)
        per_token = len(ctx.state_get(0)) / len(ids) - CELL_META
        pos, token = len(ids), int(np.argmax(out))
        t = time.perf_counter()
        for i in range(a.decode_tokens):
            p.produce(token, pos + i, out)
            token = int(np.argmax(out))
        decode = a.decode_tokens / (time.perf_counter() - t)
        return {"prefill": prefill, "decode": decode, "per_token": per_token, "kv_bytes": per_token * ctx.n_ctx}
    finally:
        ctx.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--types", default="f16:f16,q8_0:q8_0,q4_0:q4_0,q8_0:f16")
    a = ap.parse_args()
    pairs = [KVCacheTypes(*t.split(":")) for t in a.types.split(",")]
    path = _model_path(a.model)
    model = LlamaCppModel.open(path, quiet=True)
    rng = np.random.default_rng(0)
    ids = [int(x) for x in rng.integers(100, min(model.vocab_size, 30_000), a.prompt_tokens)]
    runs: dict[KVCacheTypes, list[dict[str, float]]] = {t: [] for t in pairs}
    for r in range(a.rounds):
        for t in pairs[r % len(pairs):] + pairs[: r % len(pairs)]:
            runs[t].append(_one(model, t, a, ids))
    print(f"# {path.name} · {platform.machine()} · {a.threads} threads · ctx {a.ctx:,} · "
          f"prompt {a.prompt_tokens} · decode {a.decode_tokens} · medians of {a.rounds}")
    base = {k: statistics.median(x[k] for x in runs[pairs[0]]) for k in ("prefill", "decode", "kv_bytes")}
    print(f"{'K/V':<12}{'KV bytes':>14}{'x ' + pairs[0].label:>10}{'B/token':>10}"
          f"{'prefill tok/s':>15}{'x':>7}{'decode tok/s':>14}{'x':>7}")
    for t in pairs:
        m = {k: statistics.median(x[k] for x in runs[t]) for k in ("prefill", "decode", "kv_bytes", "per_token")}
        print(f"{t.k + '/' + t.v:<12}{m['kv_bytes'] / (1 << 20):>11.1f} MiB{m['kv_bytes'] / base['kv_bytes']:>9.2f}x"
              f"{m['per_token']:>10.0f}{m['prefill']:>15.1f}{m['prefill'] / base['prefill']:>6.2f}x"
              f"{m['decode']:>14.1f}{m['decode'] / base['decode']:>6.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
