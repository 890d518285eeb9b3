"""Prompt-lookup speculation vs plain decode, ours and llama-cpp-python's, on one GGUF.

    python benchmarks/bench_speculation.py [--model PATH] [--max-new 200] [--repeats 3]
        [--kinds echo,open] [--peer-python PYTHON (default: this one)] [--no-peer]
        [--num-pred 10] [--json OUT] [--ours-from JSON]

For every prompt of `spec_prompts.PROMPTS` (chat template applied; echo-heavy and open chat),
each repeat runs our greedy decode plain and with `--speculation lookup`, in alternating order
(side by side: other work on the machine hits both alike), each on a fresh KV cache. Decode
tok/s is the engine's own figure (new tokens / decode seconds). The llama-cpp-python column
runs in its own process (the peer venv) on the SAME prompt ids and GGUF: plain `generate`, and
with `draft_model=LlamaPromptLookupDecoding(num_pred_tokens=--num-pred)`, decode tok/s timed
from its first token. Medians over repeats per prompt; per kind, the median of the per-prompt
ratios. "same" says whether our lookup reply's ids equal the plain reply's (greedy identity is
up to numerics: llama.cpp's verify pass of several rows sums in another order than one row).

With `--peer-child`, this file is the llama-cpp-python side (it imports no TurboSpark module).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


# -- the llama-cpp-python side (runs under the peer venv) ----------------------------------------

def peer_child(job_path: str) -> None:
    """Run the job's prompts through llama-cpp-python, plain and with prompt lookup; print JSON."""
    from llama_cpp import Llama
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    job = json.loads(Path(job_path).read_text())
    kw = dict(model_path=job["gguf"], n_ctx=job["n_ctx"], n_threads=job["threads"],
              n_threads_batch=job["threads"], n_batch=512, verbose=False)
    engines = {
        "plain": Llama(**kw),
        "lookup": Llama(**kw, draft_model=LlamaPromptLookupDecoding(num_pred_tokens=job["num_pred"])),
    }
    eos = set(job["stop_ids"])
    out: dict[str, list[dict]] = {"plain": [], "lookup": []}
    for rep in range(job["repeats"]):
        for i, ids in enumerate(job["prompts"]):
            order = ("plain", "lookup") if (rep + i) % 2 == 0 else ("lookup", "plain")
            for mode in order:
                llm = engines[mode]
                llm.reset()
                got: list[int] = []
                first = 0.0
                for tok in llm.generate(ids, temp=0.0, top_k=1, top_p=1.0, min_p=0.0,
                                        repeat_penalty=1.0, reset=True):
                    if not got:
                        first = time.perf_counter()
                    if tok in eos:
                        break
                    got.append(int(tok))
                    if len(got) >= job["max_new"]:
                        break
                dt = time.perf_counter() - first
                out[mode].append({"prompt": i, "rep": rep, "n": len(got),
                                  "tok_s": (len(got) - 1) / dt if len(got) > 1 and dt > 0 else 0.0,
                                  "ids": got})
    print(json.dumps(out))


# -- our side -------------------------------------------------------------------------------------

def _model_path(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    from turbospark_app.model.fetch import default_model_path

    return default_model_path()


def _shaping(sampling: str, seed: int):
    """greedy, or the app's default sampler (ui/generation_settings.DEFAULTS) seeded with `seed`
    (the same seed for plain and lookup: their replies then differ only where numerics do)."""
    from turbospark_app.engine.config import Shaping

    if sampling == "greedy":
        return Shaping()
    from turbospark_app.ui.prefs.generation import DEFAULTS as D

    return Shaping(temperature=D["temperature"], top_k=D["top_k"], top_p=D["top_p"],
                   min_p=D["min_p"], repetition_penalty=D["repetition_penalty"], seed=seed)


def run_ours(backend, prompts: list[list[int]], max_new: int, repeats: int,
             sampling: str = "greedy") -> dict[str, list[dict]]:
    """Each prompt plain and with lookup, alternating, `repeats` times."""
    from turbospark_app.engine import GenerationConfig, LookupSpeculation, run_raw_completion_chunked
    from turbospark_app.model.llamacpp.producer import LlamaCppProducer

    tok, vocab = backend.tokenizer, backend.vocab_size
    # As in the app: one verify cost per backend, learnt across the runs (the warm-up's first).
    modes = {"plain": None, "lookup": LookupSpeculation(cost=backend.verify_cost)}
    out: dict[str, list[dict]] = {"plain": [], "lookup": []}
    producer = LlamaCppProducer(backend.context, 0)
    # Warm-up: the first passes of a shape cost more.
    run_raw_completion_chunked(producer, tok, prompts[0], GenerationConfig(max_new_tokens=8),
                               backend.max_context, vocab, speculation=modes["lookup"])
    for rep in range(repeats):
        for i, ids in enumerate(prompts):
            order = ("plain", "lookup") if (rep + i) % 2 == 0 else ("lookup", "plain")
            cfg = GenerationConfig(max_new_tokens=max_new, shaping=_shaping(sampling, 1000 * rep + i))
            for mode in order:
                producer.reset()
                r = run_raw_completion_chunked(producer, tok, ids, cfg, backend.max_context,
                                               vocab, speculation=modes[mode])
                reply = r.kv_backed_token_ids[len(ids):] if r.kv_position > len(ids) else []
                out[mode].append({"prompt": i, "rep": rep, "n": r.new_tokens,
                                  "tok_s": r.decode_tokens_per_sec, "drafted": r.drafted_tokens,
                                  "accepted": r.accepted_tokens, "ids": reply})
    return out


def _median(rows: list[dict], i: int, key: str = "tok_s") -> float:
    vals = [r[key] for r in rows if r["prompt"] == i]
    return statistics.median(vals) if vals else float("nan")


def _first(rows: list[dict], i: int) -> dict:
    return next(r for r in rows if r["prompt"] == i and r["rep"] == 0)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peer-child", help=argparse.SUPPRESS)
    ap.add_argument("--model")
    ap.add_argument("--max-new", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--kinds", default="echo,open")
    ap.add_argument("--peer-python", default=os.environ.get("PEER_PYTHON", sys.executable))
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--num-pred", type=int, default=10)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--sampling", choices=("greedy", "app"), default="greedy",
                    help="app: the window's default sampler (temperature 0.7, top-k/p, min-p, "
                         "repetition penalty 1.1), seeded per prompt and repeat")
    ap.add_argument("--ours-from", type=Path, help="our figures from an earlier --json (runs only the peer)")
    args = ap.parse_args()
    if args.peer_child:
        peer_child(args.peer_child)
        return 0

    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(HERE))
    from spec_prompts import PROMPTS
    from turbospark_app.chat.api import ChatMessage
    from turbospark_app.chat.backend import load_backend

    path = _model_path(args.model)
    kinds = set(args.kinds.split(","))
    chosen = [p for p in PROMPTS if p[0] in kinds]
    backend = load_backend(path, max_context=2048)
    if backend.template is not None:
        prompts = [backend.prompts.chat_ids([ChatMessage("user", text)]) for _, _, text in chosen]
    else:
        prompts = [backend.prompts.raw_conversation_ids([ChatMessage("user", text)]) for _, _, text in chosen]
    print(f"# {path.name} · {machine()} · max_new {args.max_new} · repeats {args.repeats} · "
          f"sampling {args.sampling}", flush=True)
    if args.ours_from:
        ours = json.loads(args.ours_from.read_text())["ours"]
    else:
        ours = run_ours(backend, prompts, args.max_new, args.repeats, args.sampling)

    peer = None
    if not args.no_peer and not Path(args.peer_python).exists():
        print(f"# no llama-cpp-python column: {args.peer_python} does not exist (--peer-python)")
    if not args.no_peer and Path(args.peer_python).exists():
        tok = backend.tokenizer
        stop_ids = sorted(set(tok.eog_ids) | set(tok.eos_ids) | set(tok.end_of_turn_ids))
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump({"gguf": str(path), "n_ctx": 2048, "threads": args.threads,
                       "num_pred": args.num_pred, "repeats": args.repeats, "max_new": args.max_new,
                       "prompts": prompts, "stop_ids": stop_ids}, f)
        done = subprocess.run([args.peer_python, __file__, "--peer-child", f.name],
                              capture_output=True, text=True, timeout=7200)
        os.unlink(f.name)
        if done.returncode == 0:
            peer = json.loads(done.stdout.strip().splitlines()[-1])
        else:
            print("# llama-cpp-python failed:", done.stderr[-2000:])

    head = (f"{'prompt':<16} {'kind':<5} {'new':>4} {'plain':>7} {'lookup':>7} {'x':>5} "
            f"{'acc':>9} {'same':>4}")
    if peer:
        head += f" | {'lcp plain':>9} {'lcp look':>8} {'x':>5} {'ours/lcp':>8}"
    print(head)
    ratios: dict[str, list[float]] = {"echo": [], "open": []}
    vs_peer: dict[str, list[float]] = {"echo": [], "open": []}
    diverged = 0
    for i, (kind, name, _) in enumerate(chosen):
        plain, look = _median(ours["plain"], i), _median(ours["lookup"], i)
        first_p, first_l = _first(ours["plain"], i), _first(ours["lookup"], i)
        drafted = sum(r["drafted"] for r in ours["lookup"] if r["prompt"] == i)
        accepted = sum(r["accepted"] for r in ours["lookup"] if r["prompt"] == i)
        same = first_p["ids"] == first_l["ids"]
        diverged += not same
        ratios[kind].append(look / plain)
        acc = f"{accepted / drafted:.2f}/{drafted // args.repeats}" if drafted else "-"
        line = (f"{name:<16} {kind:<5} {first_p['n']:>4} {plain:>7.1f} {look:>7.1f} "
                f"{look / plain:>5.2f} {acc:>9} {'yes' if same else 'NO':>4}")
        if peer:
            pp, pl = _median(peer["plain"], i), _median(peer["lookup"], i)
            vs_peer[kind].append(look / pl)
            line += f" | {pp:>9.1f} {pl:>8.1f} {pl / pp:>5.2f} {look / pl:>8.2f}"
        print(line, flush=True)
    for kind in ("echo", "open"):
        if ratios[kind]:
            msg = f"# {kind}: lookup/plain median {statistics.median(ratios[kind]):.2f}x (min {min(ratios[kind]):.2f}x)"
            if vs_peer[kind]:
                msg += f"; ours lookup / llama-cpp-python lookup median {statistics.median(vs_peer[kind]):.2f}x"
            print(msg)
    print(f"# greedy replies differing from plain (first repeat): {diverged}/{len(chosen)}")
    if not args.ours_from:
        cost = backend.verify_cost
        sizes = ", ".join(f"{k}+ rows {v:.2f}" for k, v in sorted(cost.by_size.items()))
        print(f"# measured verify cost, one more row in a pass (in one-token steps of "
              f"{1000 * (cost.step_seconds or 0):.1f} ms): {sizes or 'no pass'}; {cost.passes} passes")
    if args.json:
        args.json.write_text(json.dumps({"ours": ours, "peer": peer, "prompts": [c[:2] for c in chosen]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
