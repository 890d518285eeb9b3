"""Greedy golden comparison: TurboSpark's server against llama.cpp's llama-server, same GGUF.

    python benchmarks/check_peer.py --llama-server build/peer/bin/llama-server [--model GGUF]
        [--tokens 64] [--threads 2] [--ctx 4096] [--turbospark CMD] [--resident] [--json OUT]

Golden prompts, chat and raw completion, are sent greedily (temperature 0, `--tokens` tokens,
top-2 logprobs) to each server in turn through the official `openai` client (one server at a
time; llama-server with `cache_prompt: false`, so every prompt is evaluated whole as ours is).
Each prompt gets a freshly started server on each side, so both evaluate it in an empty KV
buffer: llama.cpp's flash attention on the CPU sums in half precision in the order of the
cells, so the same prompt placed after other conversations' cells can move its logits by a few
tenths. `--resident` keeps one server per side for all prompts instead: both move idle
conversations to RAM when a request starts, so it checks that nothing earlier is left behind.
For each prompt: where the two replies part (token index and character), the two tokens there,
and the top-2 logprob gap at that token as llama-server reports it (a log-prob gap is the logit
gap: softmax keeps differences). The project's rule: two correct engines may part only at a near
tie, top-2 gap < 0.05; a parting at a wider gap is a bug in one of them. Exits 1 on such a
parting (or a prompt rendered to different token counts, where the comparison says nothing).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import peers  # noqa: E402
from peers import OURS, THEIRS  # noqa: E402

NEAR_TIE = 0.05

# (kind, text): "chat" goes to /v1/chat/completions as one user message, "raw" to /v1/completions.
GOLDEN: list[tuple[str, str]] = [
    ("chat", "What is the capital of France?"),
    ("chat", "Write a haiku about the sea."),
    ("chat", "Explain in two sentences why the sky is blue."),
    ("chat", "List three prime numbers greater than 10, then add them up."),
    ("chat", "Translate 'good morning, how are you?' into Spanish and German."),
    ("chat", "Write a Python function that reverses a string."),
    ("raw", "The quick brown fox"),
    ("raw", "def fibonacci(n):\n"),
    ("raw", "Once upon a time, in a small village by the sea,"),
    ("raw", "The three primary colors are"),
    ("raw", "Q: What is 12 times 7?\nA:"),
]


@dataclass
class Reply:
    """One server's greedy reply: its text, tokens (as text) and each token's top logprobs."""

    text: str
    finish: str | None
    prompt_tokens: int
    tokens: list[str] = field(default_factory=list)
    top: list[list[tuple[str, float]]] = field(default_factory=list)


def _piece(entry: dict[str, Any]) -> str:
    """A token's text; from its bytes where given (llama-server cuts a partial UTF-8 character
    from `token`, ours replaces it: both decode alike from the bytes)."""
    data = entry.get("bytes")
    if data:
        return bytes(data).decode("utf-8", errors="replace")
    return entry.get("token") or ""


def parse(body: dict[str, Any]) -> Reply:
    """A chat or completion response body, either logprobs shape (the chat API's `content` list,
    which llama-server also sends for completions, or the legacy completions lists)."""
    choice = body["choices"][0]
    text = choice["message"]["content"] if "message" in choice else choice.get("text", "")
    reply = Reply(text or "", choice.get("finish_reason"), int((body.get("usage") or {}).get("prompt_tokens") or 0))
    lp = choice.get("logprobs") or {}
    if lp.get("content"):
        for e in lp["content"]:
            reply.tokens.append(_piece(e))
            reply.top.append([(_piece(t), float(t["logprob"])) for t in e.get("top_logprobs") or []])
    elif lp.get("tokens"):
        for tok, tops in zip(lp["tokens"], lp.get("top_logprobs") or [{}] * len(lp["tokens"])):
            reply.tokens.append(tok)
            reply.top.append([(t, float(v)) for t, v in (tops or {}).items()])
    for alts in reply.top:
        alts.sort(key=lambda tv: -tv[1])
    # llama-server lists the end-of-turn token that stopped the reply (its text is empty); ours
    # never emits a stop token: the replies are compared without it.
    while reply.finish == "stop" and reply.tokens and reply.tokens[-1] == "":
        reply.tokens.pop()
        reply.top.pop()
    return reply


def ask(server: peers.Server, kind: str, text: str, tokens: int) -> Reply:
    """One golden prompt, greedy, with the top-2 logprobs of each token."""
    extra = server.extra(cache_prompt=False)
    if kind == "chat":
        body = peers.complete(server, messages=[{"role": "user", "content": text}], max_tokens=tokens,
                              extra=extra, logprobs=True, top_logprobs=2)
    else:
        body = peers.complete(server, prompt=text, max_tokens=tokens, extra=extra, logprobs=2)
    return parse(body)


def gap(top: list[tuple[str, float]]) -> float:
    """Top-1 minus top-2 logprob (NaN without two)."""
    return top[0][1] - top[1][1] if len(top) >= 2 else float("nan")


def compare(kind: str, text: str, ours: Reply, theirs: Reply) -> dict[str, Any]:
    """Where the replies part and the top-2 gap there; `ok` by the near-tie rule."""
    row: dict[str, Any] = {"kind": kind, "prompt": text, "ours": ours.text, "theirs": theirs.text,
                           "prompt_tokens": [ours.prompt_tokens, theirs.prompt_tokens]}
    if ours.prompt_tokens != theirs.prompt_tokens:
        row.update(ok=False, verdict=f"prompts differ: ours {ours.prompt_tokens} tokens, theirs "
                                     f"{theirs.prompt_tokens} (template or tokenizer)")
        return row
    if not ours.tokens or not theirs.tokens:  # a server without logprobs: the texts alone
        same = ours.text == theirs.text
        at = next((i for i, (a, b) in enumerate(zip(ours.text, theirs.text)) if a != b),
                  min(len(ours.text), len(theirs.text)))
        row.update(ok=same, verdict="same text (no logprobs)" if same else f"part at char {at} (no logprobs: no gap)")
        return row
    n = min(len(ours.tokens), len(theirs.tokens))
    i = next((k for k in range(n) if ours.tokens[k] != theirs.tokens[k]), n)
    if i == n and len(ours.tokens) == len(theirs.tokens):
        row.update(ok=True, part=None, verdict=f"same {n} tokens")
        return row
    char = len("".join(theirs.tokens[:i]))
    mine = ours.tokens[i] if i < len(ours.tokens) else f"<end: {ours.finish}>"
    yours = theirs.tokens[i] if i < len(theirs.tokens) else f"<end: {theirs.finish}>"
    g = gap(theirs.top[i]) if i < len(theirs.top) else float("nan")
    g_ours = gap(ours.top[i]) if i < len(ours.top) else float("nan")
    ok = g == g and g < NEAR_TIE
    alts = [t for t, _ in theirs.top[i]] if i < len(theirs.top) else []
    how = ("a swap of llama-server's top 2" if alts[1:2] == [mine] else
           "ours is not in llama-server's top 2" if i < len(ours.tokens) else "one reply ended")
    row.update(ok=ok, part=i, char=char, ours_token=mine, theirs_token=yours, gap=g, ours_gap=g_ours,
               verdict=f"part at token {i} (char {char}): ours {mine!r}, theirs {yours!r}; "
                       f"{how}; llama-server's top-2 gap {g:.4f} (ours {g_ours:.4f}) -> "
                       + ("near tie" if ok else "NOT a near tie"))
    return row


def main(argv: list[str] | None = None) -> int:
    from turbospark_app.model.fetch import default_model_path

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None, help="GGUF (default: the app's default model)")
    ap.add_argument("--tokens", type=int, default=64, help="greedy tokens per reply (default 64)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--turbospark", default=None, metavar="CMD",
                    help="our command (default: the `turbospark` next to this Python)")
    ap.add_argument("--llama-server", default=str(ROOT / "build/peer/bin/llama-server"), metavar="PATH")
    ap.add_argument("--resident", action="store_true",
                    help="one server per side for all prompts (earlier conversations go to its RAM cache)")
    ap.add_argument("--json", type=Path, default=None, metavar="OUT")
    args = ap.parse_args(argv)
    model = (args.model or default_model_path()).resolve()
    if not Path(args.llama_server).is_file():
        print(f"no llama-server at {args.llama_server} (`make check-peer` builds one)", file=sys.stderr)
        return 2
    header = peers.machine_line(args.llama_server)
    print(f"machine: {header}", flush=True)
    cmd = peers.turbospark_command(args.turbospark)
    replies: dict[str, list[Reply]] = {}
    specs = {OURS: peers.turbospark_spec(cmd, model, args.threads, args.ctx),
             THEIRS: peers.llama_server_spec(args.llama_server, model, args.threads, args.ctx)}
    groups = [GOLDEN] if args.resident else [[golden] for golden in GOLDEN]  # prompts per server
    with tempfile.TemporaryDirectory(prefix="check-peer-") as tmp:
        for side, spec in specs.items():
            replies[side] = []
            for k, group in enumerate(groups):
                with peers.Server(spec, Path(tmp) / f"{side}-{k}.log") as s:
                    replies[side] += [ask(s, kind, text, args.tokens) for kind, text in group]
    rows = [compare(kind, text, o, t) for (kind, text), o, t in zip(GOLDEN, replies[OURS], replies[THEIRS])]
    where = "one server per side for all prompts" if args.resident else "a fresh server per prompt and side"
    print(f"\n**Greedy golden replies, TurboSpark vs llama-server** — {model.name}, {args.tokens} tokens, "
          f"{where}, rule: part only where llama-server's top-2 logprob gap < {NEAR_TIE}\n")
    print("| # | kind | prompt | verdict | ok |")
    print("| ---: | --- | --- | --- | --- |")
    for k, row in enumerate(rows, 1):
        prompt = row["prompt"].replace("\n", "\\n").replace("|", "\\|")
        verdict = row["verdict"].replace("\n", "\\n").replace("|", "\\|")
        print(f"| {k} | {row['kind']} | {prompt} | {verdict} | {'ok' if row['ok'] else 'NO'} |")
    for side, spec in specs.items():
        print(f"\n- {side}: `{spec.describe()}`", end="")
    print("\n" + "".join(f"- note: {n}\n" for n in specs[OURS].notes))
    same = sum(1 for r in rows if r.get("part") is None and r["ok"])
    bad = [r for r in rows if not r["ok"]]
    print(f"{same}/{len(rows)} identical, {len(rows) - same - len(bad)} part at a near tie, {len(bad)} not")
    if args.json:
        args.json.write_text(json.dumps({"machine": header, "rows": rows}, indent=1, default=str))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
