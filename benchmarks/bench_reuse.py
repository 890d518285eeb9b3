"""Prefix reuse on a 6-turn conversation with the default model (issue: sessions).

Prints, per turn: prompt tokens, reused tokens, the reuse ratio and time to first token; then
turn 6's time to first token with reuse vs the same prompt from scratch (median of 3 each).

    .venv/bin/python benchmarks/bench_reuse.py [--model GGUF] [--max-new N]
"""

from __future__ import annotations

import argparse
import statistics
import time

from turbospark_app.chat.api import ChatMessage, TurnSettings
from turbospark_app.chat.backend import LlamaChatBackend, load_backend
from turbospark_app.engine import GenerationConfig, RawDecodeResult, TokenProgress
from turbospark_app.engine.raw_completion import drive_raw_completion
from turbospark_app.model.fetch import resolve_model_path

QUESTIONS = (
    "Hi! I'm planning a trip to Lisbon next spring. Any advice?",
    "What neighbourhoods should I stay in?",
    "How do I get from the airport to the city centre?",
    "What local food should I try?",
    "Is it easy to take day trips from there?",
    "Summarise your advice in three bullet points.",
)


def timed_turn(
    backend: LlamaChatBackend, session: str, messages: list[ChatMessage], settings: TurnSettings
) -> tuple[ChatMessage, RawDecodeResult, float]:
    """One turn: (the assistant message, the result, time to first token in seconds)."""
    start = time.perf_counter()
    turn = backend.prepare_turn(session, messages, settings)
    ids: list[int] = []
    text: list[str] = []
    first: list[float] = []

    def on_progress(e: object) -> None:
        if isinstance(e, TokenProgress):
            if not first:
                first.append(time.perf_counter() - start)
            ids.append(e.id)
            text.append(e.delta)

    result = drive_raw_completion(
        backend.stream_turn(turn, lambda: False), settings.generation.rate, lambda: False, on_progress
    )
    return ChatMessage("assistant", "".join(text), tuple(ids)), result, first[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model")
    ap.add_argument("--max-new", type=int, default=GenerationConfig().max_new_tokens)
    args = ap.parse_args()
    backend = load_backend(resolve_model_path(args.model), session_slots=8)
    settings = TurnSettings(generation=GenerationConfig(max_new_tokens=args.max_new))
    print(f"model: {backend.model_path.name}  max_new_tokens={args.max_new}")
    print(f"{'turn':>4} {'prompt':>7} {'reused':>7} {'ratio':>6} {'new':>4} {'ttft ms':>8}")
    msgs: list[ChatMessage] = []
    ratios = []
    kv_before_last: list[int] = []
    for i, q in enumerate(QUESTIONS, 1):
        msgs.append(ChatMessage("user", q))
        reply, result, ttft = timed_turn(backend, "bench", msgs, settings)
        if i == len(QUESTIONS) - 1:
            kv_before_last = list(result.kv_backed_token_ids)
        msgs.append(reply)
        ratio = result.reused_prefix_tokens / result.prompt_tokens
        if i > 1:
            ratios.append(ratio)
        print(f"{i:>4} {result.prompt_tokens:>7} {result.reused_prefix_tokens:>7} {ratio:>6.3f} "
              f"{result.new_tokens:>4} {ttft * 1000:>8.1f}")
    print(f"reuse ratio turns 2-6: min {min(ratios):.3f}  mean {statistics.mean(ratios):.3f}")

    last = msgs[:-1]  # turn 6's prompt: everything up to its user message
    reuse_ttft, scratch_ttft = [], []
    for k in range(3):
        # With reuse: put the session's KV back to what it held after turn 5, then run turn 6.
        slot = backend.pool.slot_of("bench")
        assert slot is not None
        slot.producer.try_reuse_prefix(kv_before_last + [-1])
        _, r, t = timed_turn(backend, "bench", last, settings)
        assert r.reused_prefix_tokens > 0
        reuse_ttft.append(t)
        # From scratch: a session that has never been seen (a fresh slot).
        _, r, t = timed_turn(backend, f"scratch-{k}", last, settings)
        assert r.reused_prefix_tokens == 0
        scratch_ttft.append(t)
        backend.drop_session(f"scratch-{k}")
    a, b = statistics.median(reuse_ttft), statistics.median(scratch_ttft)
    print(f"turn 6 time to first token: with reuse {a * 1000:.1f} ms, from scratch {b * 1000:.1f} ms"
          f"  -> {b / a:.1f}x faster (median of 3)")


if __name__ == "__main__":
    main()
