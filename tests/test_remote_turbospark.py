"""The remote client against TurboSpark's own server on a real 127.0.0.1 socket, over the real
default model: chat, stream, Stop -> the remote job cancelled (read on its /status route),
prefix reuse across turns, Regenerate, the tok/s cap applied by the server."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from typing import Any

import pytest
from api_harness import api  # noqa: F401 (the fixture)

from turbospark_app.chat.api import ChatMessage, TurnSettings
from turbospark_app.engine import GenerationConfig, RateConfig, Shaping
from turbospark_app.remote import RemoteRunner, Target
from turbospark_app.service import Failed, Finished, Token, TurnRequest

pytestmark = pytest.mark.real_model


def settings(max_new: int = 24, cap: float | None = None) -> TurnSettings:
    return TurnSettings(generation=GenerationConfig(max_new_tokens=max_new, shaping=Shaping(temperature=0.0),
                                                    rate=RateConfig(max_tokens_per_sec=cap)))


def target(api: Any) -> Target:  # noqa: F811
    with urllib.request.urlopen(api.servers[0].url + "/v1/models", timeout=10) as r:
        model = json.loads(r.read())["data"][0]["id"]
    return Target(api.servers[0].url, model, "", "local TurboSpark")


def run(tgt: Target, messages: list[ChatMessage], st: TurnSettings, *, stop_after: int | None = None,
        cid: str = "c", continue_final: bool = False) -> tuple[Any, float | None, list[Token]]:
    """One turn on a fresh loop: (end event, Stop click time, tokens)."""
    tokens: list[Token] = []
    clicked: list[float] = []

    async def main() -> Any:
        runner = RemoteRunner()
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        rid = 0

        def listener(event: Any) -> None:
            if isinstance(event, Token):
                tokens.append(event)
                if stop_after is not None and len(tokens) == stop_after:
                    clicked.append(time.monotonic())
                    runner.cancel(rid)
            if isinstance(event, (Finished, Failed)) and not done.done():
                done.set_result(event)

        rid = runner.submit(TurnRequest(cid, tuple(messages), st, continue_final=continue_final), listener, tgt)
        end = await asyncio.wait_for(done, 300)
        await runner.aclose()
        return end

    end = asyncio.run(main())
    return end, (clicked[0] if clicked else None), tokens


def status(api: Any) -> dict[str, Any]:  # noqa: F811
    with urllib.request.urlopen(api.servers[0].url + "/status", timeout=10) as r:
        return json.loads(r.read())


def test_chat_streams_with_server_figures(api) -> None:  # noqa: F811
    end, _, tokens = run(target(api), [ChatMessage("user", "What is the capital of France?")], settings())
    assert isinstance(end, Finished), end
    assert end.text.strip() and len(tokens) > 1 and end.text.startswith(tokens[0].delta)
    s = end.stats
    assert s.source == "remote" and s.usage_reported and s.reuse_source == "cached_tokens"
    assert s.prompt_tokens > 10 and s.new_tokens == len(tokens) or s.new_tokens >= len(tokens)
    assert s.time_to_first_token is not None and s.decode_tokens_per_sec > 0
    assert s.stop_reason in ("end_of_turn", "max_tokens")


def test_reuse_across_turns_and_regenerate(api) -> None:  # noqa: F811
    tgt = target(api)
    history = [ChatMessage("user", "My name is Ann. Say hello to me.")]
    first, _, _ = run(tgt, history, settings(12), cid="reuse")
    assert isinstance(first, Finished)
    history += [ChatMessage("assistant", first.text), ChatMessage("user", "What is my name?")]
    second, _, _ = run(tgt, history, settings(12), cid="reuse")
    assert isinstance(second, Finished)
    # The server continued the first turn's KV: at least the first prompt came from the cache.
    assert second.stats.reused_prefix_tokens >= first.stats.prompt_tokens - 1
    assert second.stats.prompt_tokens > first.stats.prompt_tokens
    # Regenerate: the same messages again; the whole prompt but the last token or so is reused,
    # and greedy decoding gives the same reply.
    again, _, _ = run(tgt, history, settings(12), cid="reuse")
    assert isinstance(again, Finished) and again.text == second.text
    assert again.stats.reused_prefix_tokens >= second.stats.prompt_tokens - 2


def test_stop_closes_the_stream_and_the_remote_job_is_cancelled(api) -> None:  # noqa: F811
    before = max((row["job"] for key in ("active", "queued", "recent") for row in status(api)[key]), default=0)
    end, clicked, tokens = run(target(api), [ChatMessage("user", "Count from one to two hundred in words.")],
                               settings(max_new=400), stop_after=4)
    assert isinstance(end, Finished) and end.result.reason.value == "cancelled"
    assert clicked is not None and end.stats.stop_latency is not None and end.stats.stop_latency < 0.5
    assert end.text == "".join(t.delta for t in tokens)
    deadline = time.monotonic() + 10
    row = None
    while time.monotonic() < deadline:
        rows = [r for r in status(api)["recent"] if r["job"] > before]
        if rows and rows[0]["state"] in ("ended", "failed"):
            row = rows[0]
            break
        time.sleep(0.01)
    assert row is not None, "the server never ended the job"
    assert row["cancel_reason"] == "client_disconnected" and row["stop_reason"] == "cancelled"
    assert row["generated_tokens"] < 400


def test_cap_is_applied_by_a_turbospark_server(api) -> None:  # noqa: F811
    end, _, tokens = run(target(api), [ChatMessage("user", "Tell me about the sea.")], settings(max_new=12, cap=8.0))
    assert isinstance(end, Finished) and end.stats.cap == "applied by server"
    assert end.stats.decode_tokens_per_sec < 8.0 * 1.25  # paced on the server, measured here


def test_continue_on_a_turbospark_server_extends_the_stopped_reply(api) -> None:  # noqa: F811
    tgt = target(api)
    question = [ChatMessage("user", "Count from one to twenty in words, separated by commas.")]
    stopped, _, _ = run(tgt, question, settings(max_new=200), stop_after=6, cid="cont")
    assert isinstance(stopped, Finished) and stopped.result.reason.value == "cancelled"
    messages = [*question, ChatMessage("assistant", stopped.text)]
    end, _, _ = run(tgt, messages, settings(max_new=8), cid="cont", continue_final=True)
    assert isinstance(end, Finished) and end.text
    # The continuation reads on from the open reply (greedy: what the full reply would say next).
    full, _, _ = run(tgt, question, settings(max_new=6 + 8), cid="cont-full")
    assert (stopped.text + end.text).startswith(full.text[: len(stopped.text) + 4])
    assert end.stats.prompt_tokens > stopped.stats.prompt_tokens  # the open reply was in the prompt
