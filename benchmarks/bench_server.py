"""Benchmark the local API over the real default model. Prints figures (medians, p50 / p99).

    python benchmarks/bench_server.py [--rounds 3] [--tokens 48] [--drops 8] [--prefill-chunk 64]

The server runs as `turbospark serve` in a child process (its own GIL, as a user runs it);
clients are the official `openai` package (streaming) and raw sockets (disconnects).

1. Throughput: 1, 2, 4 and 8 concurrent streaming clients (`--clients`; /v1/completions, a
   counting prompt that never ends on its own, `max_tokens` each), rounds interleaved so the
   ratios are side by side: aggregate tok/s (all tokens / wall time) and its ratio to one
   client, the slowest stream's rate over the others' mean, TTFT p50 / p99, and how many
   batched steps the engine ran (the status route).
   Also the event loop's lateness while it serves (the status route's loop_lag_ms): in the
   app the same handlers run on the GUI's loop.
2. Disconnect -> job ended, read from the status route (engine-measured: cancel() -> the job's
   end): in DECODE (a stream closed after 3 tokens) and in PREFILL (a distinct ~2,000-token
   prompt closed 0.3 s after its headers), `--drops` of each.
3. TTFT of a short request sent right after a client dropped a ~2,000-token prompt 0.3 s into
   its prefill.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import openai  # noqa: E402

COUNTING = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,"


def pct(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank; with few samples p99 is the max)."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q / 100 * len(s) + 0.5) - 1))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int, chunk: int, model: str | None, slots: int = 8) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "turbospark_app", "serve", "--port", str(port),
           "--prefill-chunk", str(chunk), "--max-queue", "64", "--session-slots", str(slots)]
    if model:
        cmd += ["--model", model]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                if b" 200 " in s.recv(100):
                    return proc
        except OSError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("the server did not become ready: " + (proc.stderr.read() if proc.stderr else ""))


def status(port: int) -> dict[str, Any]:
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"GET /status HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        data = b""
        while part := s.recv(65536):
            data += part
    return json.loads(data.partition(b"\r\n\r\n")[2])


def ended_row(port: int, job_id: str, timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for row in status(port)["recent"]:
            if row["id"] == job_id:
                return row
        time.sleep(0.05)
    raise RuntimeError(f"job {job_id} never ended")


def stream_client(client: openai.OpenAI, prompt: str, tokens: int, out: list[dict[str, float]]) -> None:
    t0 = time.perf_counter()
    first = None
    n = 0
    for chunk in client.completions.create(model=None, prompt=prompt, max_tokens=tokens,  # type: ignore[arg-type]
                                           temperature=0, stream=True):
        if chunk.choices and chunk.choices[0].text:
            first = first or time.perf_counter()
        if chunk.choices and chunk.choices[0].finish_reason:
            break
        n += 1
    out.append({"ttft": (first or time.perf_counter()) - t0, "tokens": n, "end": time.perf_counter()})


def throughput_round(client: openai.OpenAI, clients: int, tokens: int, round_no: int) -> dict[str, Any]:
    out: list[dict[str, float]] = []
    # Distinct prompts: no client continues another's KV; each gets its own slot.
    threads = [threading.Thread(target=stream_client, args=(
        client, f"Round {round_no} list {i}: {COUNTING}", tokens, out)) for i in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = max(o["end"] for o in out) - t0
    total = sum(o["tokens"] for o in out)
    rates = sorted(o["tokens"] / max(1e-9, o["end"] - t0 - o["ttft"]) for o in out)
    slowest = rates[0] / statistics.mean(rates[1:]) if len(rates) > 1 else 1.0
    return {"tok_s": total / wall, "ttft": [o["ttft"] for o in out], "tokens": total, "slowest": slowest}


def raw_stream(port: int, body: dict[str, Any]) -> socket.socket:
    payload = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload)
    return s


def read_events(s: socket.socket, count: int, needle: bytes) -> bytes:
    data = b""
    while data.count(needle) < count:
        part = s.recv(65536)
        if not part:
            break
        data += part
    return data


def job_id_of(data: bytes) -> str:
    first = data.split(b"data: ", 1)[1].split(b"\n\n", 1)[0]
    return json.loads(first)["id"]


def long_messages(tag: int) -> list[dict[str, str]]:
    words = ", ".join(f"entry {tag}-{i} is {(i * 7919 + tag) % 1000}" for i in range(160))
    return [{"role": "user", "content": f"Request {tag}. Summarize: {words}"}]


def drop_in_decode(port: int, i: int) -> dict[str, Any]:
    s = raw_stream(port, {"messages": [{"role": "user", "content": f"Story {i}: once upon a time"}],
                          "max_tokens": 400, "temperature": 0, "stream": True})
    data = read_events(s, 4, b'"content":')  # the role chunk + 3 tokens
    s.close()
    return ended_row(port, job_id_of(data))


def drop_in_prefill(port: int, i: int, after: float = 0.3) -> tuple[dict[str, Any], float]:
    s = raw_stream(port, {"messages": long_messages(i), "max_tokens": 20, "temperature": 0, "stream": True})
    data = read_events(s, 1, b"data: ")
    time.sleep(after)
    s.close()
    t_closed = time.perf_counter()
    return ended_row(port, job_id_of(data)), t_closed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--drops", type=int, default=8)
    ap.add_argument("--prefill-chunk", type=int, default=64)
    ap.add_argument("--model", default=None)
    ap.add_argument("--clients", type=lambda v: [int(x) for x in v.split(",")], default=[1, 2, 4, 8],
                    help="concurrent streaming clients per throughput round (default 1,2,4,8)")
    ap.add_argument("--session-slots", type=int, default=8)
    args = ap.parse_args()
    port = free_port()
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, load avg "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}; prefill chunk {args.prefill_chunk}")
    proc = start_server(port, args.prefill_chunk, args.model, args.session_slots)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0,
                               timeout=600)
        model = client.models.list().data[0].id
        client.completions.create(model=model, prompt="warm up", max_tokens=2)
        runs: dict[int, list[dict[str, Any]]] = {n: [] for n in args.clients}
        for r in range(args.rounds):
            for n in args.clients:
                runs[n].append(throughput_round(client, n, args.tokens, r))
        agg = {n: statistics.median(x["tok_s"] for x in runs[n]) for n in runs}
        for n in args.clients:
            ttft = [t for x in runs[n] for t in x["ttft"]]
            each = ", ".join(f"{x['tok_s']:.2f}" for x in runs[n])
            slowest = statistics.median(x["slowest"] for x in runs[n])
            print(f"{n} client(s): aggregate {agg[n]:.2f} tok/s = {agg[n] / agg[args.clients[0]]:.2f}x "
                  f"(median of {args.rounds} rounds: {each}); slowest stream / others' mean {slowest:.2f}; "
                  f"TTFT p50 {pct(ttft, 50) * 1000:.0f} ms, p99 {pct(ttft, 99) * 1000:.0f} ms (n={len(ttft)})")
        batch = status(port).get("engine", {})
        print(f"engine batching: {batch.get('batched_steps')} batched steps, sizes {batch.get('batch_sizes')}")
        lag = status(port)["server"]["loop_lag_ms"]
        print(f"event-loop lateness while serving (last minute, sampled every 100 ms; in the app this "
              f"loop is the GUI's): p50 {lag['p50']} ms, p99 {lag['p99']} ms, max {lag['max']} ms")

        decode = [drop_in_decode(port, i) for i in range(args.drops)]
        lat = [row["disconnect_to_ended_ms"] for row in decode]
        step = [row["decode_ms"] / max(1, row["generated_tokens"]) for row in decode]
        print(f"disconnect -> ended in DECODE: p50 {pct(lat, 50):.0f} ms, p99 {pct(lat, 99):.0f} ms, "
              f"max {max(lat):.0f} ms (n={len(lat)}; one decode step here: median {statistics.median(step):.0f} ms); "
              f"reasons {sorted({r['cancel_reason'] for r in decode})}")

        prefill, ttft_after = [], []
        for i in range(args.drops):
            row, _ = drop_in_prefill(port, 1000 + i)
            prefill.append(row)
            if i < max(3, args.drops // 2):  # the next short request's TTFT
                t0 = time.perf_counter()
                for chunk in client.chat.completions.create(model=model, max_tokens=2, stream=True,
                                                            messages=[{"role": "user", "content": f"Hi {i}"}]):
                    if chunk.choices and chunk.choices[0].delta.content:
                        ttft_after.append(time.perf_counter() - t0)
                        break
        lat = [row["disconnect_to_ended_ms"] for row in prefill]
        fed = [row["prefill_done"] - (row["reused_tokens"] or 0) for row in prefill]
        chunk_ms = [row["prefill_ms"] / max(1, -(-f // args.prefill_chunk)) for row, f in zip(prefill, fed)]
        print(f"disconnect -> ended in PREFILL (~{prefill[0]['prompt_tokens']}-token prompts, closed 0.3 s "
              f"after the headers): p50 {pct(lat, 50):.0f} ms, p99 {pct(lat, 99):.0f} ms, max {max(lat):.0f} ms "
              f"(n={len(lat)}; one {args.prefill_chunk}-token chunk here: median {statistics.median(chunk_ms):.0f} ms; "
              f"prefill done at the end: median {statistics.median(r['prefill_done'] for r in prefill):.0f} tokens)")
        print(f"TTFT of a short request right after a dropped ~2,000-token prompt: p50 "
              f"{pct(ttft_after, 50) * 1000:.0f} ms, max {max(ttft_after) * 1000:.0f} ms (n={len(ttft_after)})")
        ok = all(r["stop_reason"] == "cancelled" for r in decode + prefill)
        print(f"every dropped job ended as cancelled: {ok}")
    finally:
        proc.terminate()
        proc.wait(10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
