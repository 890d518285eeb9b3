"""Soak: a long session through the engine thread stays flat (memory, KV, speed, stop latency).

200 turns over 5 conversations that share 2 session slots, through the real `EngineThread` and
the default model (headless). Turns run two at a time (both slots busy); each round keeps the
same pair of conversations most of the time (KV prefix reuse) and sometimes switches one (slot
eviction). Replies are short; every 5th turn is stopped after its 3rd token. A conversation is
started afresh every 10 of its turns (as a user opens a new chat), so the KV slots reach a steady
size after warm-up and any growth of the process after that is the app's, not the prompts'.

Prints a line every 20 turns (RSS, KV bytes, evictions, reuse, decode tok/s, stop latencies) and
a summary: RSS growth after warm-up (target <= 5 %), failed turns (target 0), and every stop's
latency against the median forward step and the tokens that arrived after it was asked for
(target: within one forward step, at most one token).

    .venv/bin/python benchmarks/soak.py [--model GGUF] [--turns 200] [--max-new 12]
"""

from __future__ import annotations

import argparse
import queue
import random
import statistics
import threading
import time
from dataclasses import dataclass, field

import psutil

from turbospark_app.chat.api import ChatMessage, TurnSettings
from turbospark_app.chat.backend import load_backend
from turbospark_app.engine import GenerationConfig, Shaping
from turbospark_app.model.fetch import resolve_model_path
from turbospark_app.service import EngineThread
from turbospark_app.service.events import Failed, Finished, Token, TurnRequest

QUESTIONS = ("Name a fruit.", "Say hello.", "What is two plus two?", "Name a colour.",
             "Give me a short word.", "What day comes after Monday?", "Name an animal.",
             "Say something kind.", "Name a city.", "What is the sky's colour?")
CONVERSATIONS = 5
SLOTS = 2
FRESH_EVERY = 10  # a conversation restarts after this many of its turns
STOP_EVERY = 5  # every 5th turn is stopped
STOP_AFTER_TOKENS = 3
WARMUP_TURNS = 40


@dataclass
class Conversation:
    index: int
    generation: int = 0
    turns: int = 0
    messages: list[ChatMessage] = field(default_factory=list)

    @property
    def cid(self) -> str:
        return f"conv{self.index}-{self.generation}"


class Soak:
    """Submits turns to the engine thread and collects their outcomes."""

    def __init__(self, engine_factory, max_new: int) -> None:
        self.events: queue.Queue = queue.Queue()
        self.stop_asked: dict[int, int] = {}  # request id -> tokens seen when cancel was asked
        self.to_stop: set[int] = set()
        self.tokens: dict[int, int] = {}
        self.lock = threading.Lock()
        self.engine = EngineThread(engine_factory, self.on_event, max_active=SLOTS)
        self.settings = TurnSettings(generation=GenerationConfig(
            max_new_tokens=max_new, shaping=Shaping(temperature=0.0, repetition_penalty=1.1)))

    def on_event(self, event: object) -> None:  # on the engine thread
        if isinstance(event, Token):
            with self.lock:
                n = self.tokens[event.request_id] = self.tokens.get(event.request_id, 0) + 1
                stop = event.request_id in self.to_stop and event.request_id not in self.stop_asked
                if stop and n >= STOP_AFTER_TOKENS:
                    self.stop_asked[event.request_id] = n
            if stop and n >= STOP_AFTER_TOKENS:
                self.engine.cancel(event.request_id)  # allowed from a callback
        elif isinstance(event, (Finished, Failed)):
            self.events.put(event)

    def submit(self, conv: Conversation, question: str, stop: bool) -> int:
        messages = (*conv.messages, ChatMessage("user", question))
        with self.lock:
            rid = self.engine.submit(TurnRequest(conv.cid, messages, self.settings))
            if stop:
                self.to_stop.add(rid)
        return rid


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model")
    ap.add_argument("--turns", type=int, default=200)
    ap.add_argument("--max-new", type=int, default=12)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    process = psutil.Process()
    t0 = time.perf_counter()
    backend = load_backend(resolve_model_path(args.model), session_slots=SLOTS)
    print(f"loaded in {time.perf_counter() - t0:.1f} s (weights: {backend.model.weights.origin}); "
          f"RSS {process.memory_info().rss / 2**20:.0f} MiB")
    soak = Soak(lambda: backend, args.max_new)
    soak.engine.start()
    convs = [Conversation(i) for i in range(CONVERSATIONS)]
    pair = [0, 1]
    done = failed = evictions = 0
    prompt_total = reused_total = 0
    decode_rates: list[float] = []
    stops: list[tuple[float, float, int]] = []  # (latency, step seconds then, tokens after ask)
    rss_at: dict[int, float] = {}
    window: list[Finished] = []
    start = time.perf_counter()
    print(f"{'turns':>5} {'RSS MiB':>8} {'KV MiB':>7} {'evict':>5} {'reuse%':>6} {'tok/s':>6} "
          f"{'stops':>5} {'stop ms (max)':>13} {'elapsed s':>9}")
    while done < args.turns:
        if rng.random() < 0.3:  # switch one conversation of the pair: a slot changes hands
            out = rng.randrange(2)
            pair[out] = rng.choice([c for c in range(CONVERSATIONS) if c not in pair])
        batch = {}
        for c in pair:
            conv = convs[c]
            turn_no = done + len(batch) + 1
            question = rng.choice(QUESTIONS)
            rid = soak.submit(conv, question, stop=turn_no % STOP_EVERY == 0)
            batch[rid] = (conv, question)
        while batch:
            event = soak.events.get(timeout=600)
            conv, question = batch.pop(event.request_id)
            done += 1
            if isinstance(event, Failed):
                failed += 1
                print(f"  turn {done} FAILED: {event.kind}: {event.message}")
                continue
            s = event.stats
            conv.messages += [ChatMessage("user", question),
                              ChatMessage("assistant", event.text, event.generated_ids)]
            conv.turns += 1
            if conv.turns % FRESH_EVERY == 0:  # a new chat in this pane
                soak.engine.drop_session(conv.cid)
                conv.generation += 1
                conv.messages = []
            evictions += s.slot_evicted
            prompt_total += s.prompt_tokens
            reused_total += s.reused_prefix_tokens
            if s.decode_tokens_per_sec > 0 and s.stop_reason != "cancelled":
                decode_rates.append(s.decode_tokens_per_sec)
            if event.request_id in soak.stop_asked:
                step = 1.0 / statistics.median(decode_rates[-20:]) if decode_rates else float("nan")
                after = soak.tokens.get(event.request_id, 0) - soak.stop_asked[event.request_id]
                stops.append((s.stop_latency or 0.0, step, after))
            window.append(event)
            if done % 20 == 0:
                info = soak.engine.system_info()
                kv = sum(r.get("kv_bytes", 0) for r in info.get("sessions", []))
                rss = process.memory_info().rss / 2**20
                rss_at[done] = rss
                recent = [st[0] * 1000 for st in stops[-4:]]
                rate = statistics.median(decode_rates[-20:]) if decode_rates else 0.0
                print(f"{done:>5} {rss:>8.0f} {kv / 2**20:>7.1f} {evictions:>5} "
                      f"{100 * reused_total / max(prompt_total, 1):>6.1f} {rate:>6.1f} {len(stops):>5} "
                      f"{max(recent, default=0):>13.1f} {time.perf_counter() - start:>9.0f}", flush=True)
    soak.engine.shutdown()
    warm = [v for k, v in sorted(rss_at.items()) if k >= min(WARMUP_TURNS, done)] or [float("nan")]
    growth = 100 * (warm[-1] - warm[0]) / warm[0] if len(warm) > 1 else float("nan")
    within = sum(1 for lat, step, after in stops if lat <= step and after <= 1)
    print()
    print(f"turns {done}, failed {failed}, slot evictions {evictions}, "
          f"reuse {100 * reused_total / max(prompt_total, 1):.1f}% of prompt tokens")
    print(f"RSS after warm-up ({WARMUP_TURNS} turns) {warm[0]:.0f} MiB -> end {warm[-1]:.0f} MiB: "
          f"growth {growth:+.1f}% (target <= 5%); peak {max(rss_at.values()):.0f} MiB")
    print(f"decode tok/s: first 20 turns median {statistics.median(decode_rates[:20]):.1f}, "
          f"last 20 median {statistics.median(decode_rates[-20:]):.1f}")
    lat = sorted(lat * 1000 for lat, _, _ in stops)
    print(f"stops {len(stops)}: latency median {statistics.median(lat):.1f} ms, max {lat[-1]:.1f} ms; "
          f"median forward step {1000 / statistics.median(decode_rates):.1f} ms; "
          f"{within}/{len(stops)} within one step with <= 1 token after the ask; "
          f"tokens after the ask: max {max(a for _, _, a in stops)}")


if __name__ == "__main__":
    main()
