"""The remote runner against a fake server replaying real servers' streams and failures:
parser tolerance, the events (the same types as the engine thread's), figures, Stop, errors."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import pytest

from turbospark_app.chat.api import ChatMessage, TurnSettings
from turbospark_app.engine import GenerationConfig, RateConfig
from turbospark_app.remote import RemoteRunner, RetryPolicy, Target, Timeouts, api_base, list_models
from turbospark_app.remote.errors import RemoteError
from turbospark_app.service import Failed, Finished, Retrying, Started, Token, TurnRequest

import remote_fakes as fakes

WORDS_TEXT = "".join(fakes.WORDS)


@pytest.fixture
def server():
    s = fakes.FakeServer().start()
    yield s
    s.stop()


def request(text: str = "Hi", cap: float | None = None) -> TurnRequest:
    gen = GenerationConfig(max_new_tokens=32, rate=RateConfig(max_tokens_per_sec=cap))
    return TurnRequest("c1", (ChatMessage("user", text),), TurnSettings(generation=gen, system_prompt="Be brief."))


def run_turn(target: Target, req: TurnRequest | None = None, *, stop_after: int | None = None,
             timeouts: Timeouts = Timeouts(connect=2, read=5), retry: RetryPolicy = RetryPolicy()) -> list[Any]:
    """One turn on a fresh loop; Stop after `stop_after` tokens. Returns its events."""
    events: list[Any] = []

    async def main() -> None:
        runner = RemoteRunner(timeouts=timeouts, retry=retry)
        done = asyncio.Event()
        rid = 0

        def listener(event: Any) -> None:
            events.append(event)
            if isinstance(event, Token) and stop_after is not None and event.index + 1 == stop_after:
                runner.cancel(rid)
            if isinstance(event, (Finished, Failed)):
                done.set()

        rid = runner.submit(req or request(), listener, target)
        await asyncio.wait_for(done.wait(), 20)
        await runner.aclose()

    asyncio.run(main())
    return events


def target(server: fakes.FakeServer, model: str = "fake-7b", **kw: Any) -> Target:
    return Target(server.url, model, name="fake", **kw)


def tokens(events: list[Any]) -> str:
    return "".join(e.delta for e in events if isinstance(e, Token))


def test_api_base_adds_v1_only_to_a_bare_host() -> None:
    assert api_base("http://h:8080") == "http://h:8080/v1"
    assert api_base("http://h:8080/") == "http://h:8080/v1"
    assert api_base("localhost:11434/v1") == "http://localhost:11434/v1"
    assert api_base("https://gw.example/openai/v1/") == "https://gw.example/openai/v1"
    with pytest.raises(RemoteError):
        api_base("   ")


def test_llama_server_stream_done_without_blank_line_and_cache_n(server) -> None:
    events = run_turn(target(server))
    assert isinstance(events[0], Started)
    assert tokens(events) == WORDS_TEXT
    end = events[-1]
    assert isinstance(end, Finished) and end.text == WORDS_TEXT
    assert end.stats.source == "remote" and end.stats.remote == "fake · fake-7b"
    assert end.stats.prompt_tokens == 40 and end.stats.new_tokens == len(fakes.WORDS)
    assert end.stats.reused_prefix_tokens == 32 and end.stats.reuse_source == "timings.cache_n"
    assert end.stats.prefill_tokens_per_sec == pytest.approx(8 / 0.016)  # the server's own timing
    assert end.stats.time_to_first_token is not None and end.stats.time_to_first_token > 0
    assert end.stats.stop_reason == "end_of_turn"
    body = server.requests[0]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}
    assert body["messages"][1] == {"role": "user", "content": "Hi"}
    assert body["model"] == "fake-7b" and body["max_tokens"] == 32


def test_vllm_usage_chunk_with_null_choices_and_cached_tokens(server) -> None:
    server.default = fakes.vllm
    end = run_turn(target(server))[-1]
    assert isinstance(end, Finished) and end.text == WORDS_TEXT
    assert end.stats.reused_prefix_tokens == 48 and end.stats.reuse_source == "cached_tokens"
    assert end.stats.prompt_tokens == 50 and end.result.reason.value == "max_tokens"
    assert end.stats.decode_tokens_per_sec > 0


def test_ollama_pings_split_events_and_no_reuse_figure(server) -> None:
    server.default = fakes.ollama
    events = run_turn(target(server))
    end = events[-1]
    assert isinstance(end, Finished) and end.text == WORDS_TEXT
    assert [e.index for e in events if isinstance(e, Token)] == list(range(len(fakes.WORDS)))
    assert all(e.id == -1 for e in events if isinstance(e, Token))
    assert end.stats.reuse_source == "" and end.stats.reused_prefix_tokens == 0  # shown "unavailable"
    assert end.stats.prompt_tokens == 30 and end.stats.usage_reported


def test_missing_done_after_a_finish_reason_is_a_normal_end(server) -> None:
    server.default = fakes.no_done
    end = run_turn(target(server))[-1]
    assert isinstance(end, Finished) and end.text == "".join(fakes.WORDS[:3])
    assert not end.stats.usage_reported and end.stats.new_tokens == 3  # counted on the client


def test_error_event_mid_stream_fails_and_keeps_the_partial_reply(server) -> None:
    server.default = fakes.error_midstream
    end = run_turn(target(server))[-1]
    assert isinstance(end, Failed) and end.kind == "server"
    assert "CUDA out of memory" in end.message
    assert end.partial == "".join(fakes.WORDS[:3])
    assert end.stats is not None and end.stats.new_tokens == 3


def test_dropped_connection_fails_as_dropped_with_the_partial_reply(server) -> None:
    server.default = fakes.dropped
    end = run_turn(target(server))[-1]
    assert isinstance(end, Failed) and end.kind == "dropped", end
    assert end.partial == "".join(fakes.WORDS[:3])


def test_hanging_stream_times_out_and_closes_the_connection(server) -> None:
    server.default = fakes.make_hang(server.state)
    t0 = time.monotonic()
    end = run_turn(target(server), timeouts=Timeouts(connect=2, read=0.4))[-1]
    assert isinstance(end, Failed) and end.kind == "timeout"
    assert "0.4 s" in end.message and end.partial == "".join(fakes.WORDS[:2])
    assert time.monotonic() - t0 < 3
    deadline = time.monotonic() + 2
    while "hang_closed_at" not in server.state and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "hang_closed_at" in server.state  # the server saw the client go


def test_503_with_retry_after_is_retried_then_streams(server) -> None:
    server.queue = [fakes.busy("1"), fakes.busy("0")]
    t0 = time.monotonic()
    events = run_turn(target(server))
    waits = [e for e in events if isinstance(e, Retrying)]
    assert [(w.attempt, w.seconds, w.status) for w in waits] == [(1, 1.0, 503), (2, 0.0, 503)]
    assert time.monotonic() - t0 >= 1.0
    assert isinstance(events[-1], Finished) and events[-1].text == WORDS_TEXT
    assert len(server.requests) == 3


def test_retries_are_bounded(server) -> None:
    server.default = fakes.busy("0", status=429)
    end = run_turn(target(server), retry=RetryPolicy(attempts=2))[-1]
    assert isinstance(end, Failed) and end.kind == "busy" and end.partial == ""
    assert len(server.requests) == 3  # the first try and two retries
    assert "HTTP 429" in end.message


def test_a_retry_after_beyond_the_bound_is_not_waited_for(server) -> None:
    server.default = fakes.busy("600")
    t0 = time.monotonic()
    end = run_turn(target(server))[-1]
    assert isinstance(end, Failed) and end.kind == "busy" and "600 s" in end.message
    assert time.monotonic() - t0 < 2 and len(server.requests) == 1


@pytest.mark.parametrize("kind, make", [
    ("auth", lambda s: Target(s.url, "fake-7b", api_key="wrong")),
    ("model_not_found", lambda s: Target(s.url, "no-such-model")),
])
def test_http_errors_have_clear_kinds(kind: str, make: Any) -> None:
    server = fakes.FakeServer(api_key="right").start() if kind == "auth" else fakes.FakeServer().start()
    try:
        end = run_turn(make(server))[-1]
    finally:
        server.stop()
    assert isinstance(end, Failed) and end.kind == kind and end.partial == ""
    assert ("API key" in end.message) if kind == "auth" else ("no-such-model" in end.message)


def test_api_key_is_sent_as_bearer() -> None:
    server = fakes.FakeServer(api_key="sk-test").start()
    try:
        end = run_turn(Target(server.url, "fake-7b", api_key="sk-test"))[-1]
    finally:
        server.stop()
    assert isinstance(end, Finished)
    assert server.headers[0]["Authorization"] == "Bearer sk-test"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("url, kind", [
    (f"http://127.0.0.1:{free_port()}", "refused"),
    ("http://no-such-host.invalid:8080", "dns"),
])
def test_connection_failures(url: str, kind: str) -> None:
    end = run_turn(Target(url, "m"))[-1]
    assert isinstance(end, Failed) and end.kind == kind and end.partial == ""


def test_tls_failure_is_named(server) -> None:
    end = run_turn(Target(server.url.replace("http://", "https://"), "fake-7b"))[-1]
    assert isinstance(end, Failed) and end.kind == "tls", end


def test_stop_closes_the_stream_and_the_server_sees_it(server) -> None:
    server.default = fakes.make_endless(server.state)
    events = run_turn(target(server), stop_after=3)
    end = events[-1]
    assert isinstance(end, Finished) and end.result.reason.value == "cancelled"
    assert end.text.startswith(" w0 w1 w2")
    assert end.stats.stop_latency is not None and end.stats.stop_latency < 0.5
    deadline = time.monotonic() + 2
    while "client_gone_at" not in server.state and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "client_gone_at" in server.state  # the socket really closed


def test_stop_during_retry_wait_ends_at_once(server) -> None:
    server.default = fakes.busy("20")
    events: list[Any] = []

    async def main() -> float:
        runner = RemoteRunner(retry=RetryPolicy(max_wait=30))
        done = asyncio.Event()

        def listener(e: Any) -> None:
            events.append(e)
            if isinstance(e, Retrying):
                runner.cancel(rid)
            if isinstance(e, (Finished, Failed)):
                done.set()

        rid = runner.submit(request(), listener, target(server))
        t0 = time.monotonic()
        await asyncio.wait_for(done.wait(), 5)
        await runner.aclose()
        return time.monotonic() - t0

    elapsed = asyncio.run(main())
    end = events[-1]
    assert elapsed < 2 and isinstance(end, Finished) and end.result.reason.value == "cancelled"
    assert not end.stats.started


def test_cap_is_sent_and_reported_not_applied_by_a_foreign_server(server) -> None:
    end = run_turn(target(server), request(cap=5.0))[-1]
    assert server.requests[0]["max_tokens_per_sec"] == 5.0
    assert isinstance(end, Finished) and end.stats.cap == "not applied (remote)"
    end = run_turn(target(server), request())[-1]
    assert end.stats.cap == ""


def test_list_models(server) -> None:
    async def main() -> list[str]:
        import aiohttp

        async with aiohttp.ClientSession() as session:
            return await list_models(session, target(server))

    assert asyncio.run(main()) == ["fake-7b", "fake-70b"]
