"""Does TurboSpark compute each family as llama.cpp does? Next-token agreement, position by position.

    python benchmarks/check_peer.py [--peer-python PATH] [--positions 96] [--family NAME ...]

Per family, a synthetic GGUF (the test suite's tiny writer: random weights in many GGML types,
the family's own keys, sliding windows shorter than the sequence) is fed `--positions` token ids
ONE AT A TIME (the decode path) by both engines, and every position's next-token distribution is
compared:

- TurboSpark's exact kernels against llama.cpp on the same weights converted to F32 by its own
  quantize API, with an F32 KV cache: top-1 agreement (bar 0.97) and the mean |Δ log-prob| over
  llama.cpp's top-10 tokens (bar 0.15);
- TurboSpark's default kernels (`exact-prompt`: decode steps in int8) against llama.cpp as
  shipped on the quantized file (int8 activations too): top-1 (bar 0.94).

llama.cpp runs in a child process under the peer venv (`make check-peer` builds it, as
`make bench-peer` does); this file is also that child (`--child`), which imports only numpy and
llama_cpp. Prints one table; exits 1 when a family misses a bar.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

BARS = {"exact_top1": 0.97, "exact_dlogp": 0.15, "default_top1": 0.94}


# --- the llama.cpp side (child process, peer venv) ------------------------------------------


def _llama_logits(gguf: str, ids: list[int], f32_kv: bool, n_ctx: int) -> np.ndarray:
    import llama_cpp
    from llama_cpp import Llama

    kv = {"type_k": llama_cpp.GGML_TYPE_F32, "type_v": llama_cpp.GGML_TYPE_F32} if f32_kv else {}
    llm = Llama(model_path=gguf, n_ctx=n_ctx, n_batch=1, n_ubatch=1, n_threads=2,
                n_threads_batch=2, logits_all=False, verbose=False, **kv)
    vocab = llm.n_vocab()
    out = np.empty((len(ids), vocab), np.float32)
    for t, token in enumerate(ids):  # one token per eval: the decode path
        llm.eval([token])
        out[t] = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(vocab,))
    return out


def _to_f32(src: str, dst: str) -> None:
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_ALL_F32
    params.nthread = 2
    params.allow_requantize = True  # dequantizing to F32 counts as re-quantizing to llama.cpp
    if llama_cpp.llama_model_quantize(src.encode(), dst.encode(), params) != 0:
        raise RuntimeError(f"llama.cpp could not convert {src} to F32")


def child_main(args: argparse.Namespace) -> int:
    ids = json.loads(Path(args.ids).read_text())
    np.save(args.out_native, _llama_logits(args.gguf, ids, f32_kv=False, n_ctx=args.n_ctx))
    f32 = str(Path(args.out_f32).with_suffix(".gguf"))
    _to_f32(args.gguf, f32)
    np.save(args.out_f32, _llama_logits(f32, ids, f32_kv=True, n_ctx=args.n_ctx))
    return 0


# --- TurboSpark's side and the comparison -------------------------------------------------


def _turbospark_logits(path: Path, cache: Path, ids: list[int], kernels: str) -> np.ndarray:
    from turbospark_app.model.compact.forward import CompactLlamaModel
    from turbospark_app.model.compact.weights import load_compact

    config, weights = load_compact(path, cache)
    model = CompactLlamaModel(config, weights, kernels)
    kv = model.new_cache()
    return np.stack([model.forward([t], kv, prompt=False).copy() for t in ids])


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def agreement(ours: np.ndarray, peer: np.ndarray) -> tuple[float, float]:
    """(top-1 agreement, mean |Δ log-prob| over the peer's top-10 tokens) over all positions."""
    top1 = float(np.mean(ours.argmax(-1) == peer.argmax(-1)))
    lo, lp = _log_softmax(ours), _log_softmax(peer)
    top10 = np.argsort(-peer, axis=-1)[:, :10]
    dlogp = float(np.mean(np.abs(np.take_along_axis(lo, top10, -1) - np.take_along_axis(lp, top10, -1))))
    return top1, dlogp


def check_family(name: str, options: dict, peer_python: str, positions: int, folder: Path) -> dict:
    sys.path.insert(0, str(ROOT / "tests"))
    from tiny_gguf import write_tiny_gguf

    path = folder / f"{name}.gguf"
    opts = {"tokenizer": {}, "vocab": 300, **options}
    _, cfg = write_tiny_gguf(path, seed=7, **opts)
    ids = [int(t) for t in np.random.default_rng(11).integers(3, opts["vocab"], positions)]
    ids_file = folder / f"{name}.ids.json"
    ids_file.write_text(json.dumps(ids))
    native, f32 = folder / f"{name}.native.npy", folder / f"{name}.f32.npy"
    proc = subprocess.run([peer_python, __file__, "--child", str(path), "--ids", str(ids_file),
                           "--out-native", str(native), "--out-f32", str(f32),
                           # the file's whole context, as TurboSpark's KV cache spans it (Phi-3's
                           # LongRoPE picks its factors by this)
                           "--n-ctx", str(cfg["context"])],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        return {"family": name, "error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    cache = folder / "cache"
    exact = _turbospark_logits(path, cache, ids, "exact")
    default = _turbospark_logits(path, cache, ids, "exact-prompt")
    e_top1, e_dlogp = agreement(exact, np.load(f32))
    d_top1, d_dlogp = agreement(default, np.load(native))
    return {"family": name, "exact_top1": e_top1, "exact_dlogp": e_dlogp,
            "default_top1": d_top1, "default_dlogp": d_dlogp}


def passes(row: dict) -> bool:
    return ("error" not in row and row["exact_top1"] >= BARS["exact_top1"]
            and row["exact_dlogp"] <= BARS["exact_dlogp"] and row["default_top1"] >= BARS["default_top1"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", metavar="GGUF", help=argparse.SUPPRESS)
    ap.add_argument("--ids", help=argparse.SUPPRESS)
    ap.add_argument("--out-native", help=argparse.SUPPRESS)
    ap.add_argument("--out-f32", help=argparse.SUPPRESS)
    ap.add_argument("--n-ctx", type=int, default=1024, help=argparse.SUPPRESS)
    ap.add_argument("--peer-python", default=os.environ.get("PEER_PYTHON", "build/peer-venv/bin/python"))
    ap.add_argument("--positions", type=int, default=96)
    ap.add_argument("--family", action="append", help="only these (default: every family)")
    args = ap.parse_args(argv)
    if args.child:
        args.gguf = args.child
        return child_main(args)

    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "tests"))
    from tiny_gguf import FAMILY_VARIANTS

    variants = {"llama": {}, "qwen2": {"arch": "qwen2", "n_kv": 4}, **FAMILY_VARIANTS}
    names = args.family or list(variants)
    rows = []
    with tempfile.TemporaryDirectory(prefix="check-peer-") as tmp:
        for name in names:
            row = check_family(name, variants[name], args.peer_python, args.positions, Path(tmp))
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    print(f"\n{args.positions} positions fed one at a time; bars: exact top-1 >= {BARS['exact_top1']}, "
          f"mean |dlogp| (llama.cpp's top-10) <= {BARS['exact_dlogp']}, default top-1 >= {BARS['default_top1']}\n")
    print("| family | exact vs llama.cpp F32: top-1 | mean abs dlogp | default vs llama.cpp: top-1 | mean abs dlogp | |")
    print("| --- | --- | --- | --- | --- | --- |")
    for row in rows:
        if "error" in row:
            print(f"| {row['family']} | error: {row['error']} | | | | no |")
            continue
        print(f"| {row['family']} | {row['exact_top1']:.3f} | {row['exact_dlogp']:.4f} | "
              f"{row['default_top1']:.3f} | {row['default_dlogp']:.4f} | {'ok' if passes(row) else 'MISSED'} |")
    return 0 if all(passes(r) for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
