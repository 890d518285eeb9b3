"""`turbospark chat --endpoint URL [--remote-model NAME] [--api-key KEY]`: headless chat with a
remote OpenAI-compatible server, the same turns, stream and per-turn summary line as the local
chat. Without --remote-model the server's only model is used (llama.cpp's server, `turbospark
serve`); a server with several says which. Ctrl-C during a reply closes the stream (the partial
reply is kept); at the prompt it quits.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from typing import Any, Iterable, TextIO

from ..chat.api import ChatMessage, TurnSettings
from ..remote.client import Target, Timeouts
from ..remote.runner import RemoteRunner
from ..service.events import Failed, Finished, Token, TurnRequest, TurnStats
from .arg_types import read_lines
from .remote_args import API_KEY_ENV


def remote_target(args: argparse.Namespace) -> Target:
    """The Target from the flags; a saved endpoint's name brings its URL, key and model."""
    from ..remote.endpoints import EndpointBook

    key = args.api_key if args.api_key is not None else os.environ.get(API_KEY_ENV, "")
    book = EndpointBook()
    saved = next((e for e in book.endpoints() if e.name == args.endpoint), None)
    if saved is not None:
        return saved.target(key or book.keys.get(saved.id), args.remote_model or None)
    model = args.remote_model or _only_model(Target(args.endpoint, "", key, args.endpoint))
    return Target(args.endpoint, model, key, args.endpoint)


def _only_model(target: Target) -> str:
    """The one model the server lists; SystemExit naming them when it lists several or none,
    or saying why the list could not be read."""
    import aiohttp

    from ..remote.client import list_models
    from ..remote.errors import RemoteError

    async def fetch() -> list[str]:
        async with aiohttp.ClientSession() as session:
            return await list_models(session, target)

    try:
        models = asyncio.run(fetch())
    except RemoteError as e:
        raise SystemExit(f"turbospark: cannot list the server's models for --remote-model: {e.message}") from None
    if len(models) == 1:
        return models[0]
    listed = ", ".join(models[:10]) + (", …" if len(models) > 10 else "")
    raise SystemExit(f"turbospark: {target.base_url} offers {len(models)} models"
                     f"{': ' + listed if models else ''} — choose one with --remote-model NAME")


def summary_line(stats: TurnStats) -> str:
    """The per-turn summary of a remote turn, in the local chat's format (what the server did
    not report is said to be unavailable, never made up)."""
    reused = (f"reused {stats.reused_prefix_tokens} ({stats.reuse_source})" if stats.reuse_source
              else "reused unavailable")
    prompt = f"prompt {stats.prompt_tokens} tok" if stats.usage_reported else "prompt unavailable"
    parts = [f"remote {stats.remote}", prompt, reused,
             f"new {stats.new_tokens} tok" + ("" if stats.usage_reported else " (counted as chunks)")]
    if stats.prefill_tokens_per_sec:
        parts.append(f"prefill {stats.prefill_tokens_per_sec:.1f} tok/s (server)")
    parts.append(f"decode {stats.decode_tokens_per_sec:.1f} tok/s")
    if stats.time_to_first_token is not None:
        parts.append(f"ttft {stats.time_to_first_token * 1000:.0f} ms")
    if stats.cap:
        parts.append(f"cap {stats.cap}")
    parts.append(f"stop {stats.stop_reason}")
    if stats.stop_latency is not None:
        parts.append(f"closed in {stats.stop_latency * 1000:.1f} ms")
    return "[" + " | ".join(parts) + "]"


class RemoteChat:
    """A headless conversation with a remote server."""

    def __init__(self, target: Target, settings: TurnSettings, *, timeouts: Timeouts = Timeouts()) -> None:
        self.target = target
        self.settings = settings
        self.runner = RemoteRunner(timeouts=timeouts)
        self.messages: list[ChatMessage] = []
        self.request_id: int | None = None

    async def turn(self, user_text: str, out: TextIO) -> Finished | Failed:
        """Stream one reply into `out`; the exchange is kept unless nothing came back."""
        pending = [*self.messages, ChatMessage("user", user_text)]
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def listener(event: Any) -> None:
            if isinstance(event, Token):
                out.write(event.delta)
                out.flush()
            elif isinstance(event, (Finished, Failed)) and not done.done():
                done.set_result(event)

        self.request_id = self.runner.submit(
            TurnRequest("cli", tuple(pending), self.settings), listener, self.target)
        end = await done
        self.request_id = None
        text = end.text if isinstance(end, Finished) else end.partial
        if text or isinstance(end, Finished):
            self.messages = [*pending, ChatMessage("assistant", text)]
        return end

    def stop(self) -> None:
        """Ctrl-C: close the running reply's stream."""
        if self.request_id is not None:
            self.runner.cancel(self.request_id)


def remote_chat_command(args: argparse.Namespace, settings: TurnSettings, turns: Iterable[str] | None) -> int:
    """`turbospark chat --endpoint ...`; `turns` None = interactive."""
    target = remote_target(args)
    chat = RemoteChat(target, settings, timeouts=Timeouts(read=args.read_timeout))
    loop = asyncio.new_event_loop()
    interactive = turns is None
    if interactive:
        print(f"TurboSpark chat with {target.model} at {target.base_url} — empty line or Ctrl-D quits, "
              "Ctrl-C stops a reply.", file=sys.stderr)
    status = 0
    try:
        for user_text in turns if turns is not None else read_lines():
            if interactive and not user_text.strip():
                break
            if not interactive:
                print(f"> {user_text}", file=sys.stderr)
            loop.add_signal_handler(signal.SIGINT, chat.stop)
            try:
                end = loop.run_until_complete(chat.turn(user_text, sys.stdout))
            finally:
                loop.remove_signal_handler(signal.SIGINT)
            sys.stdout.write("\n")
            if isinstance(end, Failed):
                print(f"turbospark: {end.message}", file=sys.stderr)
                if end.stats is not None and not args.quiet_summary:
                    print(summary_line(end.stats), file=sys.stderr)
                if not interactive:
                    status = 1
                    break
                continue
            if not args.quiet_summary:
                print(summary_line(end.stats), file=sys.stderr)
    except KeyboardInterrupt:
        print("", file=sys.stderr)
    finally:
        loop.run_until_complete(chat.runner.aclose())
        loop.close()
    return status

