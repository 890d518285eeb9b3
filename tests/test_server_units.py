"""The server's parts without a model: parameters, wire format, logprobs, slot choice by
longest common prefix, and the jobs bridge over a fake engine (cancel reasons, queued jobs)."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_session_pool import FakeSlotProducer
from ui_fakes import FakeBackend, fake_factory

from turbospark_app.chat.api import ChatMessage, PreparedTurn, TurnSettings
from turbospark_app.chat.logprobs import LogprobTap, log_softmax, top_logprobs
from turbospark_app.engine.progress import RawDecodeResult, StopReason, TokenProgress
from turbospark_app.engine.session_pool import SessionPool
from api_harness import run_fresh

from turbospark_app.server.errors import ApiError
from turbospark_app.server.jobs import JobBoard
from turbospark_app.server.params import parse_chat, parse_completion
from turbospark_app.server.wire import Envelope, finish_reason, sse, timings, usage
from turbospark_app.service import handover as handover_module
from turbospark_app.service.engine_thread import EngineThread
from turbospark_app.service.events import Failed, Finished, PromptRequest, Started, Token, TurnStats

MSG = [{"role": "user", "content": "hi"}]


class ByteBuilder:
    """A PromptBuilder over bytes (token id = byte)."""

    max_context = 4096

    def chat_ids(self, messages: Sequence[ChatMessage], system_prompt: str | None = None, *,
                 continue_final: bool = False, template_vars: dict | None = None) -> list[int]:
        return list("".join(f"<{m.role}>{m.content}" for m in messages).encode() + b"<assistant>")

    def raw_ids(self, text: str) -> list[int]:
        return list(text.encode())

    def token_bytes(self, token_id: int) -> bytes:
        return b"w"


@dataclass
class ApiFakeBackend(FakeBackend):
    """FakeBackend with what PromptRequests need."""

    def __post_init__(self) -> None:
        self.prompts = ByteBuilder()

    def model_info(self) -> dict[str, Any]:
        return {"file_name": "fake-model.gguf", "max_context": self.max_context}

    def prepare_prompt(self, session_id: str, ids: Sequence[int], settings: TurnSettings) -> PreparedTurn:
        return PreparedTurn(session_id, tuple(ids), settings)

    def pick_session(self, ids: Sequence[int], prefix: str, fallback: str) -> str:
        return fallback


def _bad(body: Any, parse=parse_chat) -> ApiError:
    with pytest.raises(ApiError) as e:
        parse(body)
    assert e.value.status == 400
    return e.value


def test_chat_params_defaults_and_extensions() -> None:
    p = parse_chat({"messages": MSG})
    assert p.shaping.temperature == 1.0 and p.shaping.top_p == 1.0 and p.max_tokens is None
    p = parse_chat({"messages": [{"role": "developer", "content": [{"type": "text", "text": "a"},
                                                                 {"type": "text", "text": "b"}]}, *MSG],
                    "max_completion_tokens": 5, "max_tokens": 9, "stop": "x", "seed": -1,
                    "top_k": 3, "min_p": 0.1, "repeat_penalty": 1.2, "max_tokens_per_sec": 4,
                    "conversation_id": "c1", "stream": True, "stream_options": {"include_usage": True}})
    assert p.messages[0].role == "system" and p.messages[0].content == "ab"
    assert p.max_tokens == 5 and p.max_tokens_param == "max_completion_tokens"
    assert p.stop == ("x",) and p.shaping.seed == 2**64 - 1 and p.shaping.top_k == 3
    assert p.shaping.repetition_penalty == 1.2 and p.rate_cap == 4 and p.pin == "c1"
    assert p.include_usage and parse_chat({"messages": MSG, "top_p": 0}).shaping.top_p > 0


@pytest.mark.parametrize("body, param", [
    ({"messages": MSG, "n": 2}, "n"),
    ({"messages": MSG, "tools": [{"type": "function"}]}, "tools"),
    ({"messages": MSG, "stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"messages": MSG, "max_tokens": 0}, "max_tokens"),
    ({"messages": MSG, "temperature": "hot"}, "temperature"),
    ({"messages": MSG, "top_logprobs": 3}, "top_logprobs"),
    ({"messages": MSG, "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"messages": MSG, "response_format": {"type": "yaml"}}, "response_format"),
    ({"messages": MSG, "response_format": {"type": "json_schema"}}, "response_format"),
    ({"messages": MSG, "tool_choice": "required"}, "tool_choice"),
    ({"messages": MSG, "tools": [{"type": "function", "function": {"name": "f"}}],
      "tool_choice": {"type": "function", "function": {"name": "g"}}}, "tool_choice"),
    ({"messages": MSG, "tools": [{"type": "function", "function": {"name": "f"}}],
      "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0].content[0].image_url"),
    ({"messages": [{"role": "user", "content": [{"type": "audio"}]}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}]}]},
     "messages[0].content[0].image_url"),
    ({"messages": MSG, "stream_options": {"include_usage": True}}, "stream_options"),
    ({"messages": MSG, "seed": 1.5}, "seed"),
])
def test_chat_params_refused_with_the_field_named(body: dict[str, Any], param: str) -> None:
    assert _bad(body).param == param


def test_completion_prompts() -> None:
    assert parse_completion({"prompt": "abc"}).prompt == "abc"
    assert parse_completion({"prompt": ["abc"]}).prompt == "abc"
    assert parse_completion({"prompt": [1, 2, 3]}).prompt == (1, 2, 3)
    assert parse_completion({"prompt": [[4, 5]]}).prompt == (4, 5)
    assert parse_completion({"prompt": "a", "logprobs": 2}).top_logprobs == 2
    for body in ({"prompt": ""}, {"prompt": ["a", "b"]}, {"prompt": 5}, {"prompt": "a", "logprobs": 6},
                 {"prompt": "a", "suffix": "z"}, {"prompt": "a", "best_of": 2}, [1, 2]):
        _bad(body, parse_completion)


def _finished(reason: StopReason = StopReason.MAX_TOKENS, reused: int = 7) -> Finished:
    result = RawDecodeResult(prompt_tokens=20, new_tokens=5, prefill_seconds=0.5, decode_seconds=0.25,
                             reason=reason, kv_position=24, reused_prefix_tokens=reused)
    stats = TurnStats(20, reused, 5, reason.value, True, 0.0, 0.1, 0.5, 0.25, 26.0, 20.0, None, False)
    return Finished(1, "s", result, (), (), "text", stats)


def test_usage_timings_and_finish_reasons() -> None:
    fin = _finished()
    assert usage(fin) == {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25,
                          "prompt_tokens_details": {"cached_tokens": 7}}
    t = timings(fin)
    assert (t["cache_n"], t["prompt_n"], t["predicted_n"]) == (7, 13, 5)
    assert (t["prompt_ms"], t["predicted_ms"]) == (500.0, 250.0)
    assert finish_reason(StopReason.END_OF_TURN, "chat") == "stop"
    assert finish_reason(StopReason.STOP_STRING, "chat") == "stop"
    assert finish_reason(StopReason.MAX_TOKENS, "chat") == "length"
    assert finish_reason(StopReason.TOOL_CALLS, "chat") == "tool_calls"
    assert finish_reason(StopReason.TOOL_CALLS, "completion") == "stop"


def test_chunks_share_id_and_created_and_frame_as_sse() -> None:
    env = Envelope.new("chat", "m", "fp_x")
    first, last = env.chunk({"role": "assistant", "content": ""}), env.usage_chunk(_finished())
    assert first["id"] == last["id"] and first["created"] == last["created"]
    assert first["object"] == last["object"] == "chat.completion.chunk" and last["choices"] == []
    assert env.chunk("x", include_usage=True)["usage"] is None
    assert sse({"a": "é"}) == 'data: {"a":"é"}\n\n'.encode()
    assert Envelope.new("completion", "m", "f").chunk("t")["choices"][0]["text"] == "t"


@given(st.lists(st.floats(-30, 30, width=32), min_size=2, max_size=50), st.integers(0, 8))
def test_logprobs_are_a_distribution_and_top_is_sorted(values: list[float], k: int) -> None:
    lp = log_softmax(np.array(values, dtype=np.float32))
    assert lp.dtype == np.float32 and abs(float(np.exp(lp).sum()) - 1) < 1e-3
    top = top_logprobs(lp, k)
    assert len(top) == min(k, len(values))
    assert [v for _, v in top] == sorted((v for _, v in top), reverse=True)
    if top:
        assert top[0][1] == pytest.approx(float(lp.max()))


def test_logprob_tap_scores_each_token_from_the_logits_it_was_drawn_from() -> None:
    class Producer:
        def produce(self, token: int, position: int, out: np.ndarray) -> None:
            out[:] = 0.0
            out[token + 1] = 5.0  # the next token will be token + 1

        def produce_chunk(self, tokens: list[int], position: int, out: np.ndarray | None) -> None:
            if out is not None:
                self.produce(tokens[-1], position, out)

    tap = LogprobTap(Producer(), 2)
    logits = np.zeros(8, dtype=np.float32)

    def stream():
        tap.produce_chunk([0, 1], 0, logits)  # -> token 2 is likeliest
        for i, token in enumerate((2, 3)):
            yield TokenProgress(i, token, "x")
            tap.produce(token, 2 + i, logits)
        return "done"

    events = []
    scored = tap.scored(stream())
    while True:
        try:
            events.append(next(scored))
        except StopIteration as stop:
            assert stop.value == "done"
            break
    assert [e.top[0][0] for e in events] == [2, 3]
    assert all(e.logprob == pytest.approx(e.top[0][1]) and len(e.top) == 2 for e in events)


def test_slot_chosen_by_longest_common_prefix_among_api_sessions() -> None:
    pool = SessionPool(FakeSlotProducer, slots=3)
    for sid, ids in (("api-auto:1", [1, 2, 3, 4]), ("api-auto:2", [1, 2, 9]), ("pane", [1, 2, 3, 4, 5])):
        p = pool.checkout(sid)
        p.produce_chunk(ids, 0, None)
        p.end_turn()
    assert pool.longest_prefix_session([1, 2, 3, 4, 7], "api-auto:") == ("api-auto:1", 4)
    assert pool.longest_prefix_session([1, 2, 9, 9], "api-auto:") == ("api-auto:2", 3)
    assert pool.longest_prefix_session([5], "api-auto:") == (None, 0)  # the pane's slot is never a candidate
    busy = pool.checkout("api-auto:1")
    assert pool.longest_prefix_session([1, 2, 3, 4, 7], "api-auto:") == ("api-auto:2", 2)  # busy: skipped
    busy.end_turn()


class FakeEngine:
    """Records submits and cancels; events are pushed by the test from another thread."""

    state = "ready"
    facts = ({}, 100, object())

    def __init__(self) -> None:
        self.listeners: dict[int, Any] = {}
        self.cancelled: list[int] = []

    def submit(self, request: Any, listener: Any = None) -> int:
        rid = len(self.listeners) + 1
        self.listeners[rid] = listener
        return rid

    def cancel(self, request_id: int) -> bool:
        self.cancelled.append(request_id)
        return True


def test_job_board_routes_engine_events_to_the_loop_and_records_cancels() -> None:
    async def run() -> None:
        engine = FakeEngine()
        board = JobBoard(engine, asyncio.get_running_loop())
        seen: list[str] = []
        board.subscribe(lambda job: seen.append(job.state))
        job = board.submit(PromptRequest((1, 2), None, None), response_id="x", endpoint="chat", stream=True)
        assert board.queued == 1 and job.request_id == 1
        listener = engine.listeners[1]
        thread = threading.Thread(target=lambda: (listener(Started(1, "s", 2)), listener(Token(1, "s", 0, 5, "a"))))
        thread.start()
        thread.join()
        assert isinstance(await asyncio.wait_for(job.events.get(), 5), Started)
        assert isinstance(await asyncio.wait_for(job.events.get(), 5), Token)
        assert job.state == "decode" and board.active == 1 and job.generated == 1
        board.cancel(job, "client_disconnected")
        board.cancel(job, "write_error")  # the first reason wins
        assert engine.cancelled == [1] and job.cancel_reason == "client_disconnected"
        fin = _finished(StopReason.CANCELLED)
        threading.Thread(target=listener, args=(fin,)).start()
        assert await asyncio.wait_for(job.events.get(), 5) is fin
        assert job.over and board.live == {} and board.recent[-1] is job
        doc = board.describe()
        assert doc["recent"][0]["stop_reason"] == "cancelled" and doc["active"] == doc["queued"] == []
        assert seen[0] == "queued" and seen[-1] == "ended"

    run_fresh(run)


def test_job_board_hands_tokens_to_the_loop_in_batches_and_the_end_at_once() -> None:
    """A streaming reply wakes the loop per batch of tokens (service.handover), not per token;
    every token arrives in order before Finished, which is not held back by a batch timer."""

    async def run() -> None:
        loop = asyncio.get_running_loop()
        engine = FakeEngine()
        board = JobBoard(engine, loop)
        handover_module.COALESCE_S = 1.0  # a batch waits 1 s here: the end must not wait for it
        wakes: list[int] = []
        original = loop.call_soon_threadsafe

        def counting(callback, *args):  # type: ignore[no-untyped-def]
            if getattr(callback, "__self__", None) is board:  # the board's own wake-ups only
                wakes.append(1)
            return original(callback, *args)

        loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
        job = board.submit(PromptRequest((1, 2), None, None), response_id="x", endpoint="chat", stream=True)
        listener = engine.listeners[1]
        sent = time.monotonic()

        def stream() -> None:
            listener(Started(1, "s", 2))
            for i in range(200):
                listener(Token(1, "s", i, i, f"t{i} ", at=sent + i))
                time.sleep(0.0005)

        thread = threading.Thread(target=stream)
        thread.start()
        await loop.run_in_executor(None, thread.join)
        assert 2 <= len(wakes) <= 4  # Started (its drain may take the first tokens), then a batch
        assert job.events.qsize() < 201  # the last batch still waits for its timer
        fin = _finished(StopReason.MAX_TOKENS)
        t0 = time.monotonic()
        threading.Thread(target=listener, args=(fin,)).start()
        got = [await asyncio.wait_for(job.events.get(), 5) for _ in range(202)]
        assert time.monotonic() - t0 < 0.5  # the end took the batch with it, not waiting 1 s
        assert isinstance(got[0], Started) and got[-1] is fin
        assert [e.index for e in got[1:-1]] == list(range(200))
        assert job.first_token_at == sent  # TTFT from the engine's stamp, not the batch's arrival
        loop.call_soon_threadsafe = original  # type: ignore[method-assign]

    saved = handover_module.COALESCE_S
    try:
        run_fresh(run)
    finally:
        handover_module.COALESCE_S = saved


def test_prompt_requests_on_the_engine_thread_listener_slot_and_model_switch() -> None:
    backend = ApiFakeBackend(replies=("a b c",))
    events: list[Any] = []
    engine = EngineThread(fake_factory(backend), lambda e: None, max_active=2)
    engine.start()
    try:
        deadline = time.monotonic() + 5
        while engine.facts is None:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        builder = engine.facts[2]
        assert builder is backend.prompts
        done = threading.Event()

        def listener(event: Any) -> None:
            events.append(event)
            if isinstance(event, (Finished, Failed)):
                done.set()

        rid = engine.submit(PromptRequest((1, 2, 3), TurnSettings(), builder), listener)
        assert done.wait(5)
        fin = events[-1]
        assert isinstance(fin, Finished) and fin.text == "a b c" and fin.request_id == rid
        assert fin.conversation_id == f"api-auto:{rid}"  # the fallback session picked at start
        done.clear()
        engine.submit(PromptRequest((1, 2), TurnSettings(), builder, pin="c9"), listener)
        assert done.wait(5) and events[-1].conversation_id == "api-conv:c9"
        done.clear()
        engine.submit(PromptRequest((1,), TurnSettings(), object()), listener)  # another model's ids
        assert done.wait(5) and isinstance(events[-1], Failed) and "switched" in events[-1].message
    finally:
        assert engine.shutdown(5)
