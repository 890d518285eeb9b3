"""Cost of checkpointing a streaming reply (crash safety), measured while it streams.

A reply of N tokens (~6 characters each) is streamed into a real store at a paced rate, through
the same ReplyRecorder the pane uses (first token, then every 32 tokens or 1 s), twice side by
side: with checkpoints, and with a policy that never fires (the baseline). Prints

    writer thread   per checkpoint: the one short SQLite transaction (UPDATE + COMMIT), median,
                    p95 and max ms, and how the time grows with the reply's length
    GUI thread      per token: median / p99 µs of ReplyRecorder.token(), and per checkpoint
                    token (the hand-over: join the text, build the snapshot, queue it)
    overhead        GUI-thread µs per token with checkpoints / without (ratio)

    .venv/bin/python benchmarks/bench_checkpoint.py [--tokens 2000] [--rate 200]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time
from pathlib import Path

import psutil

from turbospark_app.conversations.checkpoint import CheckpointPolicy, ReplyRecorder
from turbospark_app.conversations.store import STORE_FILENAME, Store

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa".split()


def stream(store: Store, cid: str, tokens: int, rate: float, policy: CheckpointPolicy) -> tuple[list[float], list[float]]:
    """Stream one reply; returns (µs per token() call, µs of the calls that checkpointed)."""
    _, reply = store.start_turn(cid, None, "benchmark")
    recorder = ReplyRecorder(store.checkpointer(), reply.id, model_id="bench", policy=policy)
    per_token, per_checkpoint = [], []
    start = time.perf_counter()
    for i in range(tokens):
        due = start + i / rate
        while (now := time.perf_counter()) < due:  # paced like a decode loop (sleep, no spin)
            time.sleep(min(0.002, due - now))
        t0 = time.perf_counter()
        saved = recorder.token(" " + WORDS[i % len(WORDS)], 1000 + i)
        us = (time.perf_counter() - t0) * 1e6
        per_token.append(us)
        if saved:
            per_checkpoint.append(us)
    recorder.finish()
    store.update_reply(reply.id, "done", token_ids=None, stats={}, stop_reason="end_of_turn")
    return per_token, per_checkpoint


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=200.0, help="tokens per second")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / STORE_FILENAME)
        cid = store.create_conversation().id
        never = CheckpointPolicy(seconds=float("inf"), tokens=10**9)
        never.due()  # the first-token save is spent: this one never fires
        stream(store, cid, 200, args.rate, CheckpointPolicy())  # warm-up (thread, connection, pages)
        writer = store.checkpointer()
        writer.counters.seconds.clear()
        base_token, _ = stream(store, cid, args.tokens, args.rate, never)
        ck_token, ck_saves = stream(store, cid, args.tokens, args.rate, CheckpointPolicy())
        writer.flush()
        writes = [s * 1000 for s in writer.counters.seconds]
        store.close()
    print(f"machine: {platform.machine()} {psutil.cpu_count()} cores, {platform.system()}, "
          f"Python {platform.python_version()}; reply {args.tokens} tokens at {args.rate:g} tok/s, "
          f"journal WAL, synchronous NORMAL")
    print(f"writer thread, per checkpoint ({len(writes)} writes, 1 UPDATE + COMMIT each): "
          f"median {statistics.median(writes):.3f} ms · p95 {pct(writes, 0.95):.3f} ms · max {max(writes):.3f} ms")
    third = max(1, len(writes) // 3)
    print(f"  first third of the reply {statistics.median(writes[:third]):.3f} ms · "
          f"last third {statistics.median(writes[-third:]):.3f} ms (the text grows to ~{args.tokens * 6 // 1000} KB)")
    print(f"GUI thread, per token: with checkpoints median {statistics.median(ck_token):.2f} µs · "
          f"p99 {pct(ck_token, 0.99):.2f} µs; without median {statistics.median(base_token):.2f} µs · "
          f"p99 {pct(base_token, 0.99):.2f} µs")
    print(f"GUI thread, per checkpoint token (hand-over to the writer): median "
          f"{statistics.median(ck_saves):.1f} µs · max {max(ck_saves):.1f} µs ({len(ck_saves)} checkpoints)")
    mean_ck, mean_base = statistics.fmean(ck_token), statistics.fmean(base_token)
    print(f"overhead: mean GUI-thread µs per token {mean_ck:.2f} vs {mean_base:.2f} "
          f"(ratio {mean_ck / mean_base:.2f})")


if __name__ == "__main__":
    main()
