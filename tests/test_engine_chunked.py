"""Chunked prefill: one produce_chunk per span, logits only for the last, cancel per chunk,
and the same results as the off mode."""

from __future__ import annotations

from typing import Any

import pytest
from fakes import ByteTokenizer, ScriptedFailure, ScriptedProducer, drain, timeless
from hypothesis import given, settings
from hypothesis import strategies as st

from turbospark_app.engine import (
    GenerationConfig,
    PrefillProgress,
    ProducerError,
    StopReason,
    TokenProgress,
    run_raw_completion_chunked,
    run_raw_completion_chunked_cancellable,
    stream_raw_completion,
    stream_raw_completion_chunked,
)

TOK = ByteTokenizer()
V = TOK.VOCAB_SIZE
PROMPT = TOK.encode("abcdefghij")  # 10 tokens


def chunked(producer: ScriptedProducer, prompt: list[int], chunk_size: int, cancel: Any = None, **config: Any) -> tuple[Any, list[Any]]:
    events: list[Any] = []
    cfg = GenerationConfig(**{"max_new_tokens": 16, **config})
    if cancel is None:
        result = run_raw_completion_chunked(producer, TOK, prompt, cfg, 256, V, events.append, chunk_size=chunk_size)
    else:
        result = run_raw_completion_chunked_cancellable(producer, TOK, prompt, cfg, 256, V, cancel, events.append, chunk_size=chunk_size)
    return result, events


def chunk_calls(producer: ScriptedProducer) -> list[tuple[tuple[int, ...], int, bool]]:
    return [(c.token, c.position, c.wants_logits) for c in producer.calls if c.method == "produce_chunk"]  # type: ignore[misc]


def test_one_produce_chunk_per_span_and_only_the_last_wants_logits() -> None:
    producer = ScriptedProducer.for_reply(V, 10, TOK.encode("ok") + [TOK.END_OF_TURN])
    result, events = chunked(producer, PROMPT, 4)
    assert chunk_calls(producer) == [
        (tuple(PROMPT[0:4]), 0, False), (tuple(PROMPT[4:8]), 4, False), (tuple(PROMPT[8:10]), 8, True)]
    assert "produce_prefill" not in producer.methods()
    assert [e for e in events if isinstance(e, PrefillProgress)] == [PrefillProgress(4, 10), PrefillProgress(8, 10), PrefillProgress(10, 10)]
    # Decode is the shared loop: single-token produce from position 10.
    assert [(c.method, c.position) for c in producer.calls if c.method == "produce"] == [("produce", 10), ("produce", 11)]
    assert result.reason is StopReason.END_OF_TURN and result.kv_backed_token_ids == producer.kv


def test_reuse_starts_the_chunks_past_the_reused_prefix() -> None:
    producer = ScriptedProducer.for_reply(V, 10, [TOK.EOS], reuse=5)
    result, events = chunked(producer, PROMPT, 3)
    assert [(len(t), pos) for t, pos, _ in chunk_calls(producer)] == [(3, 5), (2, 8)]
    assert [e.done for e in events if isinstance(e, PrefillProgress)] == [8, 10]
    assert producer.resets == 0 and result.reused_prefix_tokens == 5
    assert result.kv_backed_token_ids == PROMPT == producer.kv


def test_full_reuse_is_clamped_to_one_last_chunk() -> None:
    producer = ScriptedProducer.for_reply(V, 10, [TOK.EOS], reuse=10)
    result, _ = chunked(producer, PROMPT, 4)
    assert chunk_calls(producer) == [((PROMPT[-1],), 9, True)]
    assert result.reused_prefix_tokens == 9


def test_no_reuse_resets() -> None:
    producer = ScriptedProducer.for_reply(V, 10, [TOK.EOS])
    chunked(producer, PROMPT, 4)
    assert producer.methods()[:2] == ["try_reuse_prefix", "reset"]


def test_cancel_is_polled_per_chunk_and_the_kv_stays_honest() -> None:
    producer = ScriptedProducer.for_reply(V, 10, TOK.encode("xyz"), evicted=True)
    polls: list[int] = []

    def cancel() -> bool:
        polls.append(len(producer.kv))
        return len(polls) == 2

    result, events = chunked(producer, PROMPT, 4, cancel=cancel)
    assert polls == [4, 8]
    assert result.reason is StopReason.CANCELLED
    assert (result.new_tokens, result.decode_seconds, result.kv_position) == (0, 0.0, 8)
    assert result.kv_backed_token_ids == PROMPT[:8] == producer.kv
    assert result.session_slot_evicted is True
    assert not any(isinstance(e, TokenProgress) for e in events)


def test_a_failing_chunk_is_wrapped() -> None:
    producer = ScriptedProducer.for_reply(V, 10, [TOK.EOS], fail_at=5)
    with pytest.raises(ProducerError) as info:
        chunked(producer, PROMPT, 4)
    assert isinstance(info.value.__cause__, ScriptedFailure)


@pytest.mark.parametrize("size", [0, -2])
def test_a_bad_chunk_size_is_rejected_at_call_time(size: int) -> None:
    producer = ScriptedProducer(V)
    with pytest.raises(ValueError):
        stream_raw_completion_chunked(producer, TOK, PROMPT, GenerationConfig(max_new_tokens=4), 64, V, chunk_size=size)
    assert producer.calls == []


@settings(max_examples=150, deadline=None)
@given(
    prompt_len=st.integers(1, 40),
    chunk_size=st.integers(1, 16),
    reply=st.lists(st.sampled_from(TOK.encode("ab<>/é") + list("é".encode()) + [TOK.EOS]), max_size=20),
    reuse=st.integers(0, 45),
    max_new=st.integers(1, 25),
    stops=st.lists(st.sampled_from(["</", "b", "ab", "<>", "é"]), max_size=2),
)
def test_chunked_and_off_modes_give_the_same_run(
    prompt_len: int, chunk_size: int, reply: list[int], reuse: int, max_new: int, stops: list[str]
) -> None:
    prompt = [97 + i % 26 for i in range(prompt_len)]
    cfg = GenerationConfig(max_new_tokens=max_new, stop_strings=tuple(stops))
    off = ScriptedProducer.for_reply(V, prompt_len, reply, reuse=reuse)
    chk = ScriptedProducer.for_reply(V, prompt_len, reply, reuse=reuse)
    off_items, off_result = drain(stream_raw_completion(off, TOK, prompt, cfg, 128, V))
    chk_items, chk_result = drain(stream_raw_completion_chunked(chk, TOK, prompt, cfg, 128, V, chunk_size=chunk_size))
    assert timeless(off_result) == timeless(chk_result)
    not_prefill = lambda items: [i for i in items if not isinstance(i, PrefillProgress)]  # noqa: E731
    assert not_prefill(off_items) == not_prefill(chk_items)
    assert off.kv == chk.kv == off_result.kv_backed_token_ids
    assert len(off_result.kv_backed_token_ids) == off_result.kv_position
