"""One engine's figures on one GGUF, in its own process (run by bench_peer.py; prints JSON).

    python peer_child.py turbospark|llama.cpp GGUF [--weights compact|f32] [--cache DIR]
           [--threads 2] [--prompt 38] [--decode 64] [--prefill 500] [--chunk 128]

Measures, in this order: the engine's import and load time, the first load of a fresh process
(TurboSpark: warm, bench_peer.py builds the weight cache beforehand; llama.cpp: the GGUF
memory-mapped), chunked prefill of `--prefill` pseudo-random
token ids (TurboSpark in `--chunk`-token chunks, llama.cpp in one n_batch=512 batch), greedy
decode of `--decode` tokens after a `--prompt`-token prompt, the RSS then (steady, the model
alive) and the process's peak RSS.
This file runs under either venv: it imports only numpy and the engine it measures.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np


def _peak_rss_mib() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1 << 20) if sys.platform == "darwin" else peak / 1024


def _rss_mib() -> dict[str, float]:
    """The process's current RSS (VmRSS), private (RssAnon) and file-backed (RssFile) MiB (Linux;
    {} elsewhere): the steady figure after load and decode, besides the peak."""
    out: dict[str, float] = {}
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "RssAnon", "RssFile"):
                    out[key] = int(value.split()[0]) / 1024
    except OSError:
        pass
    return out


def _steady() -> dict[str, float]:
    """RSS after load, prefill and decode, the model still alive: VmRSS and its private part."""
    now = _rss_mib()
    return {"steady_rss_mib": now["VmRSS"], "steady_anon_mib": now["RssAnon"]} if now else {}


def _ids(n: int, vocab: int, seed: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(100, min(vocab, 30000), n)]


def run_turbospark(args: argparse.Namespace) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    os.environ["TURBOSPARK_THREADS"] = str(args.threads)
    t = time.perf_counter()
    from turbospark_app.model.reference.forward import LlamaModel

    imports = time.perf_counter() - t
    t = time.perf_counter()  # the first load of the process (warm: bench_peer built the cache)
    model = LlamaModel.from_gguf(args.gguf, args.cache, weights=args.weights)
    load = time.perf_counter() - t
    c = model.config
    logits = np.empty(c.vocab_size, np.float32)

    ids = _ids(args.prefill, c.vocab_size, 1)
    model.forward(ids[:16], model.new_cache())  # first-call warm-up
    cache = model.new_cache()
    t = time.perf_counter()
    for start in range(0, len(ids), args.chunk):
        last = start + args.chunk >= len(ids)
        model.forward(ids[start : start + args.chunk], cache, last, logits if last else None)
    prefill = len(ids) / (time.perf_counter() - t)

    cache = model.new_cache()
    model.forward(_ids(args.prompt, c.vocab_size, 2), cache, True, logits)
    t = time.perf_counter()
    for _ in range(args.decode):
        model.forward([int(np.argmax(logits))], cache, True, logits)
    decode = args.decode / (time.perf_counter() - t)
    return {"load_s": load, "open_s": imports + load, "prefill_tok_s": prefill,
            "decode_tok_s": decode, "weights_bytes": _weights_bytes(model), **_steady()}


def _weights_bytes(model) -> int:
    return int(model.weights.nbytes)


def run_llama_cpp(args: argparse.Namespace) -> dict:
    t = time.perf_counter()
    from llama_cpp import Llama

    imports = time.perf_counter() - t
    t = time.perf_counter()
    llm = Llama(model_path=str(args.gguf), n_ctx=2048, n_threads=args.threads,
                n_threads_batch=args.threads, n_batch=512, verbose=False)
    load = time.perf_counter() - t
    vocab = llm.n_vocab()
    ids = _ids(args.prefill, vocab, 1)
    llm.eval(ids[:16])  # first-call warm-up
    llm.reset()
    t = time.perf_counter()
    llm.eval(ids)
    prefill = len(ids) / (time.perf_counter() - t)

    llm.reset()
    llm.eval(_ids(args.prompt, vocab, 2))
    t = time.perf_counter()
    for _ in range(args.decode):
        # Without logits_all the binding keeps no logits of its own: read the context's row.
        last = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(vocab,))
        llm.eval([int(np.argmax(last))])
    decode = args.decode / (time.perf_counter() - t)
    return {"load_s": load, "open_s": imports + load, "prefill_tok_s": prefill,
            "decode_tok_s": decode, **_steady()}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("engine", choices=["turbospark", "llama.cpp"])
    ap.add_argument("gguf", type=Path)
    ap.add_argument("--weights", default="compact")
    ap.add_argument("--cache", type=Path, default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=38)
    ap.add_argument("--decode", type=int, default=64)
    ap.add_argument("--prefill", type=int, default=500)
    ap.add_argument("--chunk", type=int, default=128)
    args = ap.parse_args()
    result = run_turbospark(args) if args.engine == "turbospark" else run_llama_cpp(args)
    result["peak_rss_mib"] = _peak_rss_mib()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
