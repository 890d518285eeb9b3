"""Constrained decode (a JSON-schema grammar masking every token, llguidance) vs unconstrained
decode on one GGUF, side by side in one run.

    python benchmarks/bench_constrained.py [--model PATH] [--max-new 160] [--repeats 5]

Each repeat runs the same chat prompt twice on a fresh session, in alternating order (other work
on the machine hits both alike): free text, and JSON under a schema that leaves room for the
whole budget (a list of at least 40 strings: a grammar that may close does close, whatever bans
the end ids). Both at temperature 0.7, seeded, with the `min_tokens`-style end ban (the
end-of-generation ids biased out) so both decode exactly --max-new tokens. Decode
tok/s is the engine's own figure (new tokens / decode seconds); the mask's cost per token is the
difference of the per-token times. Prints the medians and their ratio (target >= 0.9x).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SCHEMA = {"type": "object", "properties": {"notes": {"type": "array", "items": {"type": "string", "maxLength": 60},
                                                     "minItems": 40, "maxItems": 200}},
          "required": ["notes"], "additionalProperties": False}


def main() -> int:
    from turbospark_app.chat.api import ChatMessage, TurnSettings
    from turbospark_app.chat.backend import load_backend
    from turbospark_app.chat.grammar import compile_json_schema
    from turbospark_app.engine import GenerationConfig, Shaping
    from turbospark_app.model.fetch import default_model_path

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--max-new", type=int, default=160)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    backend = load_backend(args.model or default_model_path(), session_slots=2)
    tok = backend.tokenizer
    spec = compile_json_schema(SCHEMA, tok)
    ban = tuple((t, -100.0) for t in sorted(tok.eog_ids))  # both runs decode the whole budget
    base = GenerationConfig(max_new_tokens=args.max_new, shaping=Shaping(temperature=0.7, seed=7, logit_bias=ban))
    messages = [ChatMessage("user", "Write many short notes about the history of Paris.")]
    rates: dict[str, list[float]] = {"unconstrained": [], "constrained": []}
    for r in range(args.repeats):
        order = ["unconstrained", "constrained"] if r % 2 == 0 else ["constrained", "unconstrained"]
        for kind in order:
            config = dataclasses.replace(base, constraint=spec if kind == "constrained" else None)
            session = f"bench-{kind}-{r}"
            turn = backend.prepare_turn(session, messages, TurnSettings(generation=config))
            stream = backend.stream_turn(turn, lambda: False)
            while True:
                try:
                    next(stream)
                except StopIteration as done:
                    result = done.value
                    break
            backend.drop_session(session)
            rates[kind].append(result.decode_tokens_per_sec)
            print(f"  repeat {r + 1} {kind:>13}: {result.new_tokens} tok, {result.decode_tokens_per_sec:.1f} tok/s",
                  file=sys.stderr)
    free, bound = (statistics.median(rates[k]) for k in ("unconstrained", "constrained"))
    print(f"model: {Path(backend.model_path).name}   max_new {args.max_new}   repeats {args.repeats}")
    print(f"unconstrained decode: {free:.1f} tok/s (median)")
    print(f"constrained decode:   {bound:.1f} tok/s (median)")
    print(f"ratio: {bound / free:.3f}x   mask cost: {(1 / bound - 1 / free) * 1000:.2f} ms/token")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
