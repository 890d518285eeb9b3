"""Remote engine figures: a multi-turn conversation and repeated Stops against an
OpenAI-compatible server, measured by TurboSpark's remote client.

Per turn: time to first token and decode tok/s (client clock), prompt and reused tokens (what
the server reported, and from which field). Per Stop: click-to-closed latency (cancel() ->
the stream closed and the turn ended, client side) and, for a TurboSpark server, the remote
job's cancel latency: click -> its /status route shows the job ended with a cancel reason
(polled every 2 ms), plus the server's own disconnect-to-ended figure. Medians at the end.

    .venv/bin/python benchmarks/bench_remote.py --serve            # starts `turbospark serve`
    .venv/bin/python benchmarks/bench_remote.py --url http://gpu:8000 --model NAME [--api-key KEY]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
from typing import Any

import aiohttp

from turbospark_app.chat.api import ChatMessage, TurnSettings
from turbospark_app.engine import GenerationConfig, Shaping
from turbospark_app.remote import RemoteRunner, Target, list_models
from turbospark_app.service import Failed, Finished, Token, TurnRequest

QUESTIONS = (
    "Hi! I'm planning a trip to Lisbon next spring. Any advice?",
    "What neighbourhoods should I stay in?",
    "How do I get from the airport to the city centre?",
    "What local food should I try?",
)


def settings(max_new: int) -> TurnSettings:
    return TurnSettings(generation=GenerationConfig(max_new_tokens=max_new, shaping=Shaping(temperature=0.0)))


async def turn(runner: RemoteRunner, target: Target, messages: list[ChatMessage], max_new: int,
               stop_after: int | None = None) -> tuple[Any, float | None]:
    """One turn; with `stop_after`, Stop after that many tokens. Returns (end event, click time)."""
    done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    clicked: list[float] = []
    rid = 0

    def listener(event: Any) -> None:
        if isinstance(event, Token) and stop_after is not None and event.index + 1 == stop_after:
            clicked.append(time.monotonic())
            runner.cancel(rid)
        if isinstance(event, (Finished, Failed)) and not done.done():
            done.set_result(event)

    rid = runner.submit(TurnRequest("bench", tuple(messages), settings(max_new)), listener, target)
    return await done, (clicked[0] if clicked else None)


async def cancelled_job_seen(session: aiohttp.ClientSession, status_url: str, after_job: int,
                             timeout: float = 10.0) -> tuple[float, dict[str, Any]] | None:
    """Poll /status until a job numbered > `after_job` has ended with a cancel reason."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        async with session.get(status_url) as r:
            doc = await r.json()
        for row in doc.get("recent", []):
            if row.get("job", 0) > after_job and row.get("cancel_reason") and row.get("state") in ("ended", "failed"):
                return time.monotonic(), row
        await asyncio.sleep(0.002)
    return None


async def last_job(session: aiohttp.ClientSession, status_url: str) -> int | None:
    try:
        async with session.get(status_url) as r:
            if r.status != 200:
                return None
            doc = await r.json()
    except (aiohttp.ClientError, ValueError):
        return None
    rows = [*doc.get("active", []), *doc.get("queued", []), *doc.get("recent", [])]
    return max((row.get("job", 0) for row in rows), default=0)


async def run(target: Target, turns: int, stops: int, max_new: int) -> None:
    runner = RemoteRunner()
    session = runner.session()
    print(f"server {target.base_url}, model {target.model}")
    print("models:", ", ".join(await list_models(session, target)))
    messages: list[ChatMessage] = []
    ttfts, rates = [], []
    print("\nturn | prompt | reused (field) | new | TTFT ms | decode tok/s")
    for i, question in enumerate(QUESTIONS[:turns], 1):
        messages.append(ChatMessage("user", question))
        end, _ = await turn(runner, target, messages, max_new)
        if isinstance(end, Failed):
            raise SystemExit(f"turn {i} failed: {end.message}")
        s = end.stats
        messages.append(ChatMessage("assistant", end.text))
        ttfts.append(s.time_to_first_token or 0.0)
        rates.append(s.decode_tokens_per_sec)
        reused = f"{s.reused_prefix_tokens} ({s.reuse_source})" if s.reuse_source else "unavailable"
        print(f"{i:4d} | {s.prompt_tokens:6d} | {reused:>22} | {s.new_tokens:3d} | "
              f"{(s.time_to_first_token or 0) * 1000:7.1f} | {s.decode_tokens_per_sec:6.1f}")
    status_url = target.base_url.rstrip("/").removesuffix("/v1") + "/status"
    has_status = await last_job(session, status_url) is not None
    closed, remote, server_ms = [], [], []
    print(f"\nStops (after 5 tokens of a {4 * max_new}-token reply):")
    for i in range(stops):
        before = await last_job(session, status_url) if has_status else None
        end, clicked = await turn(runner, target, [ChatMessage("user", "Count from one to two hundred in words.")],
                                  4 * max_new, stop_after=5)
        if not isinstance(end, Finished) or clicked is None or end.stats.stop_latency is None:
            print(f"  stop {i + 1}: the reply ended before the Stop ({type(end).__name__})")
            continue
        closed.append(end.stats.stop_latency)
        line = f"  stop {i + 1}: click-to-closed {end.stats.stop_latency * 1000:.2f} ms"
        if has_status and before is not None:
            seen = await cancelled_job_seen(session, status_url, before)
            if seen is not None:
                at, row = seen
                remote.append(at - clicked)
                if row.get("disconnect_to_ended_ms") is not None:
                    server_ms.append(row["disconnect_to_ended_ms"])
                line += (f", remote job ended ({row['cancel_reason']}, {row['stop_reason']}) "
                         f"seen {1000 * (at - clicked):.1f} ms after the click; server's disconnect-to-ended "
                         f"{row.get('disconnect_to_ended_ms')} ms")
        print(line)
    print("\nmedians:")
    print(f"  TTFT {statistics.median(ttfts) * 1000:.1f} ms, decode {statistics.median(rates):.1f} tok/s "
          f"({len(ttfts)} turns)")
    if closed:
        print(f"  Stop click-to-closed {statistics.median(closed) * 1000:.2f} ms ({len(closed)} stops)")
    if remote:
        print(f"  remote job cancelled, seen on /status {statistics.median(remote) * 1000:.1f} ms after the "
              f"click; server disconnect-to-ended {statistics.median(server_ms):.1f} ms")
    await runner.aclose()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(port: int) -> subprocess.Popen[bytes]:
    """`turbospark serve` on 127.0.0.1:`port` with the default model; waits until it answers."""
    proc = subprocess.Popen([sys.executable, "-m", "turbospark_app", "serve", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ})
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"turbospark serve exited: {proc.stderr.read().decode() if proc.stderr else ''}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                pass
            import urllib.request

            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("turbospark serve did not come up")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", help="the server's base URL")
    p.add_argument("--model", help="the model id (default: the first /v1/models lists)")
    p.add_argument("--api-key", default="")
    p.add_argument("--serve", action="store_true", help="start `turbospark serve` (default model) and use it")
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--stops", type=int, default=5)
    p.add_argument("--max-new", type=int, default=48)
    args = p.parse_args()
    proc = None
    if args.serve:
        port = free_port()
        proc = serve(port)
        args.url = f"http://127.0.0.1:{port}"
    if not args.url:
        p.error("--url or --serve")
    try:
        model = args.model
        if not model:
            async def first_model() -> str:
                async with aiohttp.ClientSession() as s:
                    return (await list_models(s, Target(args.url, "", args.api_key)))[0]
            model = asyncio.run(first_model())
        asyncio.run(run(Target(args.url, model, args.api_key, "bench"), args.turns, args.stops, args.max_new))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
