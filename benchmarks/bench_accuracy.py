"""Compact weights vs the float32 reference on real text: top-1 agreement and |delta logprob|.

    python benchmarks/bench_accuracy.py [GGUF ...] [--min-agreement 0.97]

Feeds the same few hundred tokens of English prose (public-domain: Dickens, Lincoln, Austen)
one token at a time through both weight modes of each GGUF (default: the app's default model)
and reports, over every position: how often the compact model's argmax equals the reference's,
and the mean |logprob_compact - logprob_f32| over the reference's top 10 tokens. Exits 1 when
an agreement is below --min-agreement, so it doubles as a check.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from turbospark_app.model.reference.forward import LlamaModel  # noqa: E402
from turbospark_app.model.text.tokenizer import GGUFTokenizer  # noqa: E402

TEXT = (
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the "
    "age of foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the "
    "season of Light, it was the season of Darkness, it was the spring of hope, it was the winter "
    "of despair, we had everything before us, we had nothing before us, we were all going direct "
    "to Heaven, we were all going direct the other way. "
    "Four score and seven years ago our fathers brought forth on this continent, a new nation, "
    "conceived in Liberty, and dedicated to the proposition that all men are created equal. Now "
    "we are engaged in a great civil war, testing whether that nation, or any nation so "
    "conceived and so dedicated, can long endure. We are met on a great battle-field of that "
    "war. We have come to dedicate a portion of that field, as a final resting place for those "
    "who here gave their lives that that nation might live. "
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, "
    "must be in want of a wife. However little known the feelings or views of such a man may be "
    "on his first entering a neighbourhood, this truth is so well fixed in the minds of the "
    "surrounding families, that he is considered the rightful property of some one or other of "
    "their daughters. The capital of France is Paris, and the capital of Italy is Rome."
)


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max()
    return x - m - np.log(np.exp(x - m).sum())


def per_position_logits(model: LlamaModel, ids: list[int]) -> np.ndarray:
    """(len(ids), vocab) logits after each token, fed one at a time."""
    cache = model.new_cache()
    out = np.empty((len(ids), model.vocab_size), np.float32)
    for i, t in enumerate(ids):
        model.forward([t], cache, True, out[i])
    return out


def compare(path: Path, cache_dir: Path, max_tokens: int) -> dict[str, float]:
    """Agreement figures of one GGUF (see the module docstring)."""
    ids = GGUFTokenizer.from_gguf(path).encode(TEXT)[:max_tokens]
    ref = per_position_logits(LlamaModel.from_gguf(path, cache_dir, weights="f32"), ids)
    compact = LlamaModel.from_gguf(path, cache_dir, weights="compact")
    t0 = time.perf_counter()
    got = per_position_logits(compact, ids)
    seconds = time.perf_counter() - t0
    agree = float(np.mean(ref.argmax(1) == got.argmax(1)))
    deltas = []
    for r, g in zip(ref, got):
        lr, lg = log_softmax(r), log_softmax(g)
        top = np.argsort(-lr)[:10]
        deltas.append(np.abs(lr[top] - lg[top]).mean())
    return {"positions": len(ids), "top1_agreement": agree,
            "mean_abs_dlogprob_top10": float(np.mean(deltas)),
            "max_abs_dlogit": float(np.abs(ref - got).max()), "compact_tok_s": len(ids) / seconds}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gguf", nargs="*", type=Path)
    ap.add_argument("--max-tokens", type=int, default=400)
    ap.add_argument("--min-agreement", type=float, default=0.97)
    args = ap.parse_args(argv)
    paths = args.gguf
    if not paths:
        from turbospark_app.model.fetch import default_model_path

        paths = [default_model_path()]
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for path in paths:
            r = compare(path, Path(tmp), args.max_tokens)
            ok &= r["top1_agreement"] >= args.min_agreement
            print(f"{path.name}: positions {r['positions']}  top-1 agreement {r['top1_agreement']:.4f}  "
                  f"mean |dlogprob| top-10 {r['mean_abs_dlogprob_top10']:.4f}  "
                  f"max |dlogit| {r['max_abs_dlogit']:.3f}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
