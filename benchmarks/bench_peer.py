"""TurboSpark vs llama.cpp's llama-server, side by side through the same official `openai` client.

    python benchmarks/bench_peer.py --llama-server build/peer/bin/llama-server [--model GGUF]
        [--threads 2] [--ctx 4096] [--rounds 3] [--bursts 3] [--tokens 256] [--prompt-tokens 1500]
        [--turbospark CMD] [--json OUT]
    python benchmarks/bench_peer.py --llama-server PATH --concurrency [N]

Same GGUF, same threads (`-t`; ours: TURBOSPARK_THREADS and a thread flag where `serve` lists
one), same context (`-c`; ours only where `serve` lists a context flag, else the header says so);
medians. Per round both servers are started fresh (the round's first side first, alternating by
round) and warmed up with two short requests; they then take turns, one measurement at a time
(the other idles), the order alternating: this VM's speed drifts by 10-20% within minutes, so
each measurement of one has the other's beside it, and the paired ratios' median is printed too.
Measured:

- decode (`--bursts` times per round and side): `--tokens` greedy tokens of a counting prompt
  (llama-server also gets `ignore_eos`; ours has no such field, the prompt does not end); tok/s
  from the streamed chunks' arrival, first to last, and the tokens actually generated;
- prefill (`--bursts` times per round and side, after the decodes): a fresh `--prompt-tokens`
  prompt each time (a seed-unique first line; llama-server: `cache_prompt: false`), prompt
  tokens over the time to the first streamed token;
- steady RSS of the server and its children, idle after those requests.
Then the warm one-token reply as a whole process: `turbospark chat --prompt Hi --max-new 1`
against a llama-cpp-python script doing the same with `Llama` (same n_ctx and threads), a
warm-up run each, then medians of `--rounds`.

`--concurrency N` instead: `turbospark serve --session-slots N` against `llama-server
--parallel N --cont-batching --kv-unified`: N streams at once, `--bursts` times (aggregate and
per-stream tok/s, the slowest over the others' mean); while N-1 streams decode a `--prompt-tokens` prompt arrives
(the longest gap between two tokens of a running stream); N+2 conversations taking turns through
the N slots (prompt tokens a returning conversation's turn evaluates again, from `timings.prompt_n`,
else usage's cached_tokens; llama-server with `cache_prompt: true` and its default RAM prompt cache).

Prints a Markdown table (ratio = ours / theirs) and, with --json, every round's figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import peers  # noqa: E402
from peers import OURS, THEIRS, Server, ServerSpec  # noqa: E402

_LLAMA_ONE_TOKEN = """\
import sys
from llama_cpp import Llama
model, n_ctx, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
llm = Llama(model_path=model, n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads, verbose=False)
out = llm.create_chat_completion(messages=[{"role": "user", "content": "Hi"}], max_tokens=1, temperature=0)
print(out["choices"][0]["message"]["content"])
"""


def sides(k: int) -> tuple[str, str]:
    """Who goes first in turn `k`: ours, theirs, theirs, ours, ..."""
    return (OURS, THEIRS) if k % 2 == 0 else (THEIRS, OURS)


def paired(ours: list[float], theirs: list[float]) -> list[float]:
    """Ours over theirs, measurement by measurement (each pair taken one after the other)."""
    return [a / b for a, b in zip(ours, theirs) if b and a == a and b == b]


def every(runs: dict[str, list[dict]], side: str, key: str) -> list[Any]:
    """`key` of every round of `side`, a round's list of bursts flattened."""
    return [v for x in runs[side] for v in (x[key] if isinstance(x[key], list) else [x[key]])]


def median(values: list[float]) -> float:
    vals = [v for v in values if v == v]  # NaN: a figure a round could not give
    return statistics.median(vals) if vals else float("nan")


class Bench:
    """One run's settings and the two servers' specs."""

    def __init__(self, args: argparse.Namespace, logs: Path) -> None:
        self.args, self.logs = args, logs
        self.cmd = peers.turbospark_command(args.turbospark)
        self.count = peers.TokenCounter(args.model)
        self.notes: list[str] = []
        self._n = 0

    def spec(self, side: str, slots: int | None = None) -> ServerSpec:
        a = self.args
        if side == OURS:
            return peers.turbospark_spec(self.cmd, a.model, a.threads, a.ctx, slots)
        return peers.llama_server_spec(a.llama_server, a.model, a.threads, a.ctx, slots)

    def server(self, side: str, slots: int | None = None) -> Server:
        self._n += 1
        spec = self.spec(side, slots)
        for note in spec.notes:
            if note not in self.notes:
                self.notes.append(note)
        return Server(spec, self.logs / f"{self._n:02d}-{side}.log")

    @contextlib.contextmanager
    def pair(self, r: int, slots: int | None = None) -> Iterator[dict[str, Server]]:
        """Both servers up for round `r`, fresh and warmed up, in the round's order."""
        with contextlib.ExitStack() as stack:
            servers = {side: stack.enter_context(self.server(side, slots)) for side in sides(r)}
            for s in servers.values():
                self.warm_up(s)
            yield servers

    def warm_up(self, s: Server) -> None:
        """Two short requests (a decode, a prompt of 1/8 the measured length), unmeasured: the
        first request's one-off costs (allocations, the kernels' first runs) stay out."""
        peers.stream(s, prompt=peers.counting_prompt(7), max_tokens=16, extra=s.extra(ignore_eos=True))
        text = peers.filler(self.count, max(16, self.args.prompt_tokens // 8), seed=999_999)
        peers.stream(s, prompt=text, max_tokens=2, extra=s.extra(cache_prompt=False))


# --- single stream ------------------------------------------------------------------------


def single_round(b: Bench, r: int) -> dict[str, dict[str, Any]]:
    """Both servers fresh: decodes taking turns, then prefill each, then each one's steady RSS."""
    a = b.args
    with b.pair(r) as servers:
        out: dict[str, dict[str, Any]] = {side: {"decode_tok_s": [], "decode_tokens": [], "decode_finish": []}
                                          for side in servers}
        for k in range(a.bursts):
            for side in sides(r + k):
                s = servers[side]
                dec = peers.stream(s, prompt=peers.counting_prompt(1 + 1000 * r + 100 * k), max_tokens=a.tokens,
                                   extra=s.extra(ignore_eos=True))
                out[side]["decode_tok_s"].append(dec.decode_tok_s)
                out[side]["decode_tokens"].append(dec.tokens)
                out[side]["decode_finish"].append(dec.finish)
        for side in servers:
            out[side] |= {"prefill_tok_s": [], "prefill_ttft_s": [], "prefill_prompt_tokens": [],
                          "prefill_cached_tokens": []}
        for k in range(a.bursts):
            text = peers.filler(b.count, a.prompt_tokens, seed=r if k == 0 else 1000 * (r + 1) + k)
            for side in sides(r + k):
                s = servers[side]
                pre = peers.stream(s, prompt=text, max_tokens=2, extra=s.extra(cache_prompt=False))
                for key, v in (("prefill_tok_s", pre.prompt_tokens / pre.ttft if pre.times else float("nan")),
                               ("prefill_ttft_s", pre.ttft), ("prefill_prompt_tokens", pre.prompt_tokens),
                               ("prefill_cached_tokens", pre.cached_tokens)):
                    out[side][key].append(v)
        time.sleep(1.0)  # idle: what each server holds between requests
        for side, s in servers.items():
            out[side] |= {"ready_s": s.ready_s, "n_ctx": s.n_ctx(), "rss_mib": s.rss_mib(),
                          "command": s.spec.describe()}
        return out


def one_token_process(b: Bench, side: str) -> float:
    """Wall seconds of a whole process that loads the model and answers 'Hi' with one token."""
    a = b.args
    if side == OURS:
        extra, env, notes = peers.ours_engine_args(b.cmd, "chat", a.threads, a.ctx)
        b.notes += [n for n in notes if n not in b.notes]
        argv = [*b.cmd, "chat", "--prompt", "Hi", "--max-new", "1", "--model", str(a.model), *extra]
    else:
        argv = [a.llama_python, "-c", _LLAMA_ONE_TOKEN, str(a.model), str(a.ctx), str(a.threads)]
        env = {}
    t0 = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, env=peers.child_env(env),
                         stdin=subprocess.DEVNULL, timeout=1800)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise RuntimeError(f"{side} one-token process failed ({out.returncode}):\n{out.stderr[-2000:]}")
    return wall


def run_single(b: Bench) -> dict[str, Any]:
    a = b.args
    runs: dict[str, list[dict]] = {OURS: [], THEIRS: []}
    for r in range(a.rounds):
        res = single_round(b, r)
        for side in (OURS, THEIRS):
            x = res[side]
            runs[side].append(x)
            print(f"  round {r + 1} {side}: decode " + ", ".join(f"{v:.1f}" for v in x["decode_tok_s"])
                  + f" tok/s ({x['decode_tokens'][-1]} tok), prefill "
                  + ", ".join(f"{v:.0f}" for v in x["prefill_tok_s"])
                  + f" tok/s ({x['prefill_prompt_tokens'][-1]} tok, {x['prefill_ttft_s'][-1]:.2f} s), RSS {x['rss_mib']:.0f} MiB, "
                  f"ready {x['ready_s']:.1f} s", file=sys.stderr, flush=True)
    for side in (OURS, THEIRS):
        one_token_process(b, side)  # warm-up: the probe's verdict, the OS file cache
    walls: dict[str, list[float]] = {OURS: [], THEIRS: []}
    for r in range(a.rounds):
        for side in (OURS, THEIRS):
            walls[side].append(one_token_process(b, side))
        print(f"  one-token process round {r + 1}: ours {walls[OURS][-1]:.2f} s, theirs {walls[THEIRS][-1]:.2f} s",
              file=sys.stderr, flush=True)
    med = {side: {k: median(every(runs, side, k)) for k in
                  ("decode_tok_s", "decode_tokens", "prefill_tok_s", "prefill_ttft_s",
                   "prefill_prompt_tokens", "rss_mib", "ready_s")} | {"one_token_s": median(walls[side])}
           for side, rs in runs.items()}
    for side in (OURS, THEIRS):
        med[side]["n_ctx"] = runs[side][-1]["n_ctx"]
    rows = [
        (f"decode tok/s ({a.tokens} greedy tokens asked; generated: ours {med[OURS]['decode_tokens']:.0f}, "
         f"theirs {med[THEIRS]['decode_tokens']:.0f})", "decode_tok_s", "{:.1f}"),
        (f"prefill tok/s (~{a.prompt_tokens}-token fresh prompt, to first token)", "prefill_tok_s", "{:.0f}"),
        ("time to first token s (that prompt)", "prefill_ttft_s", "{:.2f}"),
        ("steady RSS MiB (server + children, idle after warm-up)", "rss_mib", "{:.0f}"),
        ("warm one-token reply, whole process s", "one_token_s", "{:.2f}"),
        ("server start to /health ok s", "ready_s", "{:.2f}"),
    ]
    return {"rounds": runs, "one_token_walls": walls, "medians": med, "rows": rows,
            "paired": {name: paired(every(runs, OURS, key), every(runs, THEIRS, key))
                       for name, key in (("decode tok/s", "decode_tok_s"), ("prefill tok/s", "prefill_tok_s"))},
            "commands": {s: runs[s][-1]["command"] for s in runs}}


# --- concurrency --------------------------------------------------------------------------


def parallel_streams(b: Bench, s: Server, n: int, r: int) -> dict[str, Any]:
    """N counting streams sent at once."""
    go = threading.Barrier(n)

    def one(i: int) -> Callable[[], peers.Stream]:
        def run() -> peers.Stream:
            client = s.client()
            go.wait()
            return peers.stream(s, prompt=peers.counting_prompt(1 + 100_000 * i + 1000 * r),
                                max_tokens=b.args.tokens, extra=s.extra(ignore_eos=True), client=client)
        return run

    streams = peers.run_threads([one(i) for i in range(n)])
    rates = [x.decode_tok_s for x in streams]
    first = min(x.times[0] for x in streams if x.times)
    last = max(x.times[-1] for x in streams if x.times)
    others = [v for v in rates if v == v]  # a stream of one token has no rate
    slowest = min(others, default=float("nan"))
    if others:
        others.remove(slowest)
    return {"aggregate_tok_s": sum(x.tokens for x in streams) / (last - first),
            "stream_tok_s": rates, "stream_tokens": [x.tokens for x in streams],
            "slowest_over_others": slowest / statistics.mean(others) if others else 1.0}


def prompt_beside_streams(b: Bench, s: Server, n_running: int, r: int) -> dict[str, Any]:
    """N-1 streams decoding; once each has a few tokens, a fresh long prompt arrives. The longest
    gap between two tokens of a running stream from then on, and whether they still ran when
    that prompt's first token came (else the gap says less: raise --tokens)."""
    a = b.args
    started = threading.Semaphore(0)
    warm = min(8, max(2, a.tokens // 8))

    def one(i: int) -> Callable[[], peers.Stream]:
        def run() -> peers.Stream:
            said = False

            def seen(x: peers.Stream) -> None:
                nonlocal said
                if not said and len(x.times) >= warm:
                    said = True
                    started.release()
            try:
                return peers.stream(s, prompt=peers.counting_prompt(500 + 10_000 * i + 1000 * r),
                                    max_tokens=a.tokens, extra=s.extra(ignore_eos=True), on_chunk=seen)
            finally:
                if not said:
                    started.release()
        return run

    text = peers.filler(b.count, a.prompt_tokens, seed=50_000 + r)
    box: dict[str, Any] = {}

    def arrive() -> None:
        for _ in range(n_running):
            started.acquire()
        box["long"] = peers.stream(s, prompt=text, max_tokens=2, extra=s.extra(cache_prompt=False))

    results = peers.run_threads([one(i) for i in range(n_running)] + [arrive])
    streams, long = results[:n_running], box["long"]
    first = long.times[0] if long.times else float("inf")
    gaps = [x.max_gap(after=long.sent) for x in streams]
    typical = median([b2 - a2 for x in streams for a2, b2 in zip(x.times, x.times[1:]) if b2 < long.sent])
    return {"longest_gap_ms": 1000 * max(g for g in gaps if g == g) if any(g == g for g in gaps) else float("nan"),
            "typical_gap_ms": 1000 * typical, "prompt_ttft_s": long.ttft,
            "prompt_tokens": long.prompt_tokens,
            "streams_outlived_prompt": all(x.times and x.times[-1] >= first for x in streams)}


def conversations(b: Bench, s: Server, n_convs: int, turns: int, r: int) -> dict[str, Any]:
    """`n_convs` chats (each a seed-unique ~300-token system prompt) taking turns round robin; per
    returning turn, how many of its prompt tokens the server evaluated, and how many of those were
    its history (past the previous turn's prompt and reply: what a kept or restored state saves)."""
    a = b.args
    reply = min(a.tokens, 32)
    chats = [[{"role": "system", "content": peers.filler(b.count, 300, seed=70_000 + 100 * r + c)}]
             for c in range(n_convs)]
    returning: list[tuple[int, int]] = []
    history: list[int] = []
    seen = [0] * n_convs  # each chat's previous prompt + reply tokens
    for turn in range(turns):
        for c, chat in enumerate(chats):
            chat.append({"role": "user", "content": f"Question {turn + 1} of chat {c + 1}: what comes next?"})
            body = peers.complete(s, messages=chat, max_tokens=reply, extra=s.extra(cache_prompt=True))
            chat.append({"role": "assistant", "content": body["choices"][0]["message"]["content"] or ""})
            prompt, evaluated = peers.reread_tokens(body)
            if turn:
                returning.append((prompt, evaluated))
                history.append(max(0, evaluated - (prompt - seen[c])))  # beyond the new message
            seen[c] = prompt + int((body.get("usage") or {}).get("completion_tokens") or 0)
    total = sum(p for p, _ in returning)
    again = sum(e for _, e in returning)
    return {"returning_turns": len(returning), "mean_prompt_tokens": total / len(returning),
            "mean_reread_tokens": again / len(returning), "reread_share": again / total if total else float("nan"),
            "mean_history_reread": statistics.mean(history), "max_history_reread": max(history),
            "per_turn": returning}


def run_concurrency(b: Bench) -> dict[str, Any]:
    a = b.args
    n = a.concurrency
    runs: dict[str, list[dict]] = {OURS: [], THEIRS: []}
    for r in range(a.rounds):
        with b.pair(r, slots=n) as servers:
            res: dict[str, dict[str, Any]] = {side: {"streams": []} for side in servers}
            for k in range(a.bursts):
                for side in sides(r + k):
                    res[side]["streams"].append(parallel_streams(b, servers[side], n, r * a.bursts + k))
            for side in sides(r):
                res[side]["interference"] = prompt_beside_streams(b, servers[side], n - 1, r)
            for side in sides(r + 1):
                res[side]["conversations"] = conversations(b, servers[side], n + 2, 3, r)
            for side, s in servers.items():
                res[side] |= {"rss_mib": s.rss_mib(), "n_ctx": s.n_ctx(), "command": s.spec.describe()}
        for side in (OURS, THEIRS):
            runs[side].append(res[side])
            print(f"  round {r + 1} {side}: " + json.dumps({k: v for k, v in res[side].items() if k != "command"},
                                                           default=float), file=sys.stderr, flush=True)

    def med(side: str, part: str, key: str) -> float:
        return median([x[part][key] if part else x[key] for x in runs[side]])

    def bursts(side: str, key: str) -> list[Any]:
        return [y[key] for x in runs[side] for y in x["streams"]]

    meds = {side: {"aggregate_tok_s": median(bursts(side, "aggregate_tok_s")),
                   "mean_stream_tok_s": median([statistics.mean(v) for v in bursts(side, "stream_tok_s")]),
                   "slowest_over_others": median(bursts(side, "slowest_over_others")),
                   "longest_gap_ms": med(side, "interference", "longest_gap_ms"),
                   "typical_gap_ms": med(side, "interference", "typical_gap_ms"),
                   "prompt_ttft_s": med(side, "interference", "prompt_ttft_s"),
                   "mean_reread_tokens": med(side, "conversations", "mean_reread_tokens"),
                   "mean_prompt_tokens": med(side, "conversations", "mean_prompt_tokens"),
                   "reread_share": med(side, "conversations", "reread_share"),
                   "max_history_reread": med(side, "conversations", "max_history_reread"),
                   "rss_mib": med(side, "", "rss_mib"), "n_ctx": runs[side][-1]["n_ctx"]} for side in runs}
    for side in runs:
        if not all(x["interference"]["streams_outlived_prompt"] for x in runs[side]):
            b.notes.append(f"{side}: a running stream ended before the long prompt's first token "
                           "(the gap figure covers less than the whole prefill; raise --tokens)")
    rows = [
        (f"aggregate tok/s, {n} streams at once ({a.bursts} per round)", "aggregate_tok_s", "{:.1f}"),
        ("per-stream tok/s (mean)", "mean_stream_tok_s", "{:.1f}"),
        ("slowest stream / the others' mean", "slowest_over_others", "{:.2f}"),
        (f"longest gap ms of {n - 1} running streams as a ~{a.prompt_tokens}-token prompt arrives",
         "longest_gap_ms", "{:.0f}"),
        ("their typical gap ms before it", "typical_gap_ms", "{:.0f}"),
        ("that prompt's time to first token s", "prompt_ttft_s", "{:.2f}"),
        (f"{n + 2} chats through {n} slots: prompt tokens a returning turn re-reads", "mean_reread_tokens", "{:.0f}"),
        ("of its prompt tokens (mean)", "mean_prompt_tokens", "{:.0f}"),
        ("share re-read", "reread_share", "{:.2f}"),
        ("of its history (past its last prompt and reply), the most in a turn", "max_history_reread", "{:.0f}"),
        ("RSS MiB after it all", "rss_mib", "{:.0f}"),
    ]
    return {"rounds": runs, "medians": meds, "rows": rows,
            "paired": {"aggregate tok/s": paired(bursts(OURS, "aggregate_tok_s"), bursts(THEIRS, "aggregate_tok_s"))},
            "commands": {s: runs[s][-1]["command"] for s in runs}}


# --- report -------------------------------------------------------------------------------


def table(result: dict[str, Any]) -> str:
    """The Markdown table: each figure as ours / theirs / ratio (ours over theirs)."""
    med = result["medians"]
    lines = [f"| figure | {OURS} | {THEIRS} | ratio |", "| --- | ---: | ---: | ---: |"]
    for name, key, fmt in result["rows"]:
        a, b = med[OURS][key], med[THEIRS][key]
        ratio = f"{a / b:.2f}x" if b and a == a and b == b else "–"
        lines.append(f"| {name} | {fmt.format(a)} | {fmt.format(b)} | {ratio} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from turbospark_app.model.fetch import default_model_path

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None, help="GGUF (default: the app's default model)")
    ap.add_argument("--threads", type=int, default=2, help="threads of both servers (default 2)")
    ap.add_argument("--ctx", type=int, default=4096, help="context of both servers (default 4096)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per side, medians (default 3)")
    ap.add_argument("--bursts", type=int, default=3,
                    help="decodes (or N-stream bursts) per round and side, taking turns (default 3)")
    ap.add_argument("--tokens", type=int, default=256, help="greedy tokens per decode (default 256)")
    ap.add_argument("--prompt-tokens", type=int, default=1500, help="prefill prompt length (default 1500)")
    ap.add_argument("--turbospark", default=None, metavar="CMD",
                    help="our command (default: the `turbospark` next to this Python)")
    ap.add_argument("--llama-server", default=str(ROOT / "build/peer/bin/llama-server"), metavar="PATH")
    ap.add_argument("--llama-python", default=sys.executable, metavar="PYTHON",
                    help="a Python with llama-cpp-python, for the one-token process (default: this one)")
    ap.add_argument("--concurrency", type=int, nargs="?", const=4, default=None, metavar="N",
                    help="the concurrency figures instead, N streams / slots (default 4)")
    ap.add_argument("--json", type=Path, default=None, metavar="OUT", help="write every figure here")
    args = ap.parse_args(argv)
    args.model = (args.model or default_model_path()).resolve()
    if not Path(args.llama_server).is_file():
        print(f"no llama-server at {args.llama_server} (`make bench-peer` builds one)", file=sys.stderr)
        return 2
    if not args.model.is_file():
        print(f"no model at {args.model} (`turbospark model fetch`)", file=sys.stderr)
        return 2
    if args.bursts < 1:
        ap.error("--bursts needs at least 1")
    if args.concurrency is not None and args.concurrency < 2:
        ap.error("--concurrency needs at least 2 streams")
    busy = peers.busy_note()
    header = peers.machine_line(args.llama_server)
    print(f"machine: {header}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-peer-") as tmp:
        b = Bench(args, Path(tmp))
        try:
            result = run_concurrency(b) if args.concurrency else run_single(b)
        except Exception:
            for log in sorted(Path(tmp).glob("*.log"))[-1:]:
                print(f"--- {log.name} (last lines)\n" + "\n".join(log.read_text(errors="replace").splitlines()[-20:]),
                      file=sys.stderr)
            raise
    mode = f"{args.concurrency} concurrent streams" if args.concurrency else "single stream"
    print(f"\n**TurboSpark vs llama-server, {mode}** — {args.model.name}, {args.threads} threads, "
          f"context {args.ctx} (served: ours {result['medians'][OURS].get('n_ctx') or '?'}, theirs "
          f"{result['medians'][THEIRS].get('n_ctx') or '?'}), medians of {args.rounds} round(s) × {args.bursts} burst(s) where said; {header}\n")
    print(table(result))
    print()
    for name, ratios in result["paired"].items():
        if ratios:
            print(f"- paired ratios, {name} (each of ours against theirs measured beside it): median "
                  f"{median(ratios):.2f}x, range {min(ratios):.2f}-{max(ratios):.2f}x over {len(ratios)}")
    for side, cmd in result["commands"].items():
        print(f"- {side}: `{cmd}`")
    if busy:
        b.notes.append(busy)
    for note in b.notes:
        print(f"- note: {note}")
    if args.json:
        args.json.write_text(json.dumps({"machine": header, "args": {k: str(v) for k, v in vars(args).items()},
                                         "notes": b.notes, **{k: v for k, v in result.items() if k != "rows"}},
                                        indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
