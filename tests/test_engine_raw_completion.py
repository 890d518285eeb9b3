"""The off-prefill loop: admission, produce vs produce_prefill, reuse, cancel, stops, errors."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import pytest
from fakes import ByteTokenizer, ScriptedFailure, ScriptedProducer, drain

from turbospark_app.engine import (
    ContextOverflow,
    EmptyPrompt,
    EngineError,
    GenerationConfig,
    InvalidRate,
    PrefillProgress,
    ProducerError,
    RateConfig,
    RawDecodeResult,
    SelectionError,
    Shaping,
    StopReason,
    TailProgress,
    TokenProgress,
    ZeroBudget,
    run_raw_completion,
    run_raw_completion_cancellable,
    run_raw_completion_chunked,
    stream_raw_completion,
    stream_raw_completion_chunked,
)

TOK = ByteTokenizer()
V = TOK.VOCAB_SIZE


def setup(prompt: str, reply: str, *tail: int, **kw: Any) -> tuple[ScriptedProducer, list[int]]:
    ids = TOK.encode(prompt)
    return ScriptedProducer.for_reply(V, len(ids), TOK.encode(reply) + list(tail), **kw), ids


def run(producer: ScriptedProducer, prompt: Sequence[int], cancel: Callable[[], bool] | None = None,
        max_context: int = 512, **config: Any) -> tuple[RawDecodeResult, list[Any]]:
    events: list[Any] = []
    cfg = GenerationConfig(**{"max_new_tokens": 64, **config})
    if cancel is None:
        result = run_raw_completion(producer, TOK, prompt, cfg, max_context, V, events.append)
    else:
        result = run_raw_completion_cancellable(producer, TOK, prompt, cfg, max_context, V, cancel, events.append)
    return result, events


def text(events: Sequence[Any]) -> str:
    return "".join(e.delta if isinstance(e, TokenProgress) else e.text for e in events if not isinstance(e, PrefillProgress))


def assert_kv_honest(result: RawDecodeResult, producer: ScriptedProducer) -> None:
    assert len(result.kv_backed_token_ids) == result.kv_position
    assert result.kv_backed_token_ids == producer.kv


# -- admission --------------------------------------------------------------------------
ADMISSION_CASES = [
    ([], GenerationConfig(max_new_tokens=4), 64, EmptyPrompt),
    ([1, 2], GenerationConfig(max_new_tokens=0), 64, ZeroBudget),
    ([1, 2], GenerationConfig(max_new_tokens=-1), 64, ZeroBudget),
    ([1, 2, 3], GenerationConfig(max_new_tokens=8), 10, ContextOverflow),
    ([1], GenerationConfig(shaping=Shaping(temperature=-1.0)), 512, SelectionError),
    ([1], GenerationConfig(rate=RateConfig(max_tokens_per_sec=0.0)), 512, InvalidRate),
    ([1], GenerationConfig(rate=RateConfig(max_tokens_per_sec=float("nan"))), 512, InvalidRate),
]


@pytest.mark.parametrize(("prompt", "config", "max_context", "error"), ADMISSION_CASES)
@pytest.mark.parametrize("stream", [stream_raw_completion, stream_raw_completion_chunked])
def test_admission_raises_at_call_time_before_the_producer_is_touched(
    stream: Callable[..., Any], prompt: list[int], config: GenerationConfig, max_context: int, error: type
) -> None:
    producer = ScriptedProducer(V)
    with pytest.raises(error):
        stream(producer, TOK, prompt, config, max_context, V)  # no next(): call time
    assert producer.calls == []


def test_context_overflow_reports_its_numbers_and_an_exact_fit_is_admitted() -> None:
    with pytest.raises(ContextOverflow) as info:
        run(ScriptedProducer(V), [1, 2, 3], max_context=10, max_new_tokens=8)
    assert (info.value.prompt, info.value.max_new, info.value.max_context) == (3, 8, 10)
    result, _ = run(ScriptedProducer(V), [1, 2, 3], max_context=10, max_new_tokens=7)
    assert result.new_tokens == 7


def test_admission_errors_are_engine_errors() -> None:
    assert all(issubclass(c[3], EngineError) for c in ADMISSION_CASES)


# -- prefill --------------------------------------------------------------------------------
def test_only_the_last_prompt_token_goes_through_produce() -> None:
    producer, prompt = setup("abcd", "xy", TOK.END_OF_TURN)
    result, events = run(producer, prompt)
    feeds = producer.feeds()
    assert [(c.method, c.token, c.position) for c in feeds[:4]] == [
        ("produce_prefill", ord("a"), 0), ("produce_prefill", ord("b"), 1),
        ("produce_prefill", ord("c"), 2), ("produce", ord("d"), 3),
    ]
    # Decode feeds every continuing token with produce, at consecutive positions.
    assert [(c.method, c.token, c.position) for c in feeds[4:]] == [("produce", ord("x"), 4), ("produce", ord("y"), 5)]
    assert text(events) == "xy" and result.reason is StopReason.END_OF_TURN
    assert [e for e in events if isinstance(e, PrefillProgress)] == [PrefillProgress(i, 4) for i in range(1, 5)]


def test_a_single_token_prompt_is_fed_with_produce() -> None:
    producer, prompt = setup("a", "b", TOK.EOS)
    run(producer, prompt)
    assert producer.feeds()[0].method == "produce"
    assert "produce_prefill" not in producer.methods()


def test_the_logits_buffer_is_float32_and_allocated_once() -> None:
    seen: list[np.ndarray] = []

    class Recording(ScriptedProducer):
        def produce(self, token: int, position: int, logits_out: np.ndarray) -> None:
            seen.append(logits_out)
            super().produce(token, position, logits_out)

        def produce_prefill(self, token: int, position: int, logits_out: np.ndarray) -> None:
            seen.append(logits_out)
            super().produce_prefill(token, position, logits_out)

    prompt = TOK.encode("abc")
    run(Recording.for_reply(V, 3, TOK.encode("hello")), prompt, max_new_tokens=5)
    assert len(seen) == 3 + 4
    assert all(buf is seen[0] for buf in seen)
    assert seen[0].dtype == np.float32 and seen[0].shape == (V,)


# -- reuse ------------------------------------------------------------------------------
def test_reuse_continues_from_the_reused_prefix_without_reset() -> None:
    producer, prompt = setup("abcdef", "z", TOK.END_OF_TURN, reuse=3)
    result, events = run(producer, prompt)
    assert producer.resets == 0
    assert [(c.method, c.position) for c in producer.feeds()[:3]] == [
        ("produce_prefill", 3), ("produce_prefill", 4), ("produce", 5)]
    assert [e.done for e in events if isinstance(e, PrefillProgress)] == [4, 5, 6]
    assert {e.reused for e in events if isinstance(e, PrefillProgress)} == {3}  # known as it goes in
    seconds = [e.seconds for e in events if isinstance(e, PrefillProgress)]  # the prefill's own clock
    assert 0 < seconds[0] <= seconds[1] <= seconds[2] <= result.prefill_seconds
    assert result.reused_prefix_tokens == 3
    assert result.kv_backed_token_ids[:6] == prompt
    assert_kv_honest(result, producer)


@pytest.mark.parametrize("answer", [6, 99])
def test_reuse_is_clamped_to_leave_the_last_prompt_token(answer: int) -> None:
    producer, prompt = setup("abcdef", "z", TOK.END_OF_TURN, reuse=answer)
    result, _ = run(producer, prompt)
    first = producer.feeds()[0]
    assert (first.method, first.token, first.position) == ("produce", ord("f"), 5)
    assert result.reused_prefix_tokens == 5 and producer.resets == 0
    assert_kv_honest(result, producer)


@pytest.mark.parametrize("answer", [0, -4])
def test_no_reuse_resets_once_and_prefills_from_zero(answer: int) -> None:
    producer, prompt = setup("abc", "z", TOK.END_OF_TURN, reuse=answer)
    result, _ = run(producer, prompt)
    assert producer.methods()[:2] == ["try_reuse_prefix", "reset"] and producer.resets == 1
    assert producer.feeds()[0].position == 0 and result.reused_prefix_tokens == 0


def test_a_second_turn_reuses_what_the_first_left_in_the_kv() -> None:
    producer = ScriptedProducer(V, reuse=None)
    prompt = TOK.encode("hi")
    producer.script = {1 + i: t for i, t in enumerate(TOK.encode("yo!"))}
    first, _ = run(producer, prompt, max_new_tokens=3)
    assert first.kv_backed_token_ids == TOK.encode("hiyo")  # "!" sampled, never fed
    second_prompt = first.kv_backed_token_ids + TOK.encode("! ok")
    producer.script = {len(second_prompt) - 1: TOK.END_OF_TURN}
    second, _ = run(producer, second_prompt)
    assert second.reused_prefix_tokens == 4 and producer.resets == 1
    assert_kv_honest(second, producer)


# -- stops ------------------------------------------------------------------------------
@pytest.mark.parametrize(("special", "reason"), [(TOK.END_OF_TURN, StopReason.END_OF_TURN), (TOK.EOS, StopReason.EOS)])
def test_stop_tokens_end_the_run_unfed_unlisted_unemitted(special: int, reason: StopReason) -> None:
    producer, prompt = setup("q", "ab", special)
    result, events = run(producer, prompt)
    assert result.reason is reason
    assert all(e.id != special for e in events if isinstance(e, TokenProgress))
    assert all(c.token != special for c in producer.feeds())
    assert special not in result.kv_backed_token_ids
    assert result.kv_backed_token_ids == TOK.encode("qab") and result.new_tokens == 3
    assert_kv_honest(result, producer)


@pytest.mark.parametrize("end", [TOK.END_OF_TURN, TOK.EOS])
def test_a_tool_call_token_is_part_of_the_reply_which_then_ends_as_tool_calls(end: int) -> None:
    # `<tool_call>` opens the call the reply writes next (chat.formats parses it): it is fed and
    # kept like text, and the end of generation after it says TOOL_CALLS.
    ids = TOK.encode("q")
    reply = [*TOK.encode("a"), TOK.TOOL_CALL, *TOK.encode("{}"), end]
    producer = ScriptedProducer.for_reply(V, len(ids), reply)
    result, events = run(producer, ids)
    assert result.reason is StopReason.TOOL_CALLS
    assert [e.id for e in events if isinstance(e, TokenProgress)] == reply[:-1]
    assert result.kv_backed_token_ids == [*ids, *reply[:-1]]
    assert_kv_honest(result, producer)


def test_a_reply_without_a_tool_call_token_ends_as_it_did() -> None:
    producer, prompt = setup("q", "ab{}", TOK.END_OF_TURN)
    result, _ = run(producer, prompt)
    assert result.reason is StopReason.END_OF_TURN


def test_max_tokens_emits_the_budget_and_never_feeds_the_last_token() -> None:
    producer, prompt = setup("q", "abcdefgh")
    result, events = run(producer, prompt, max_new_tokens=4)
    assert result.reason is StopReason.MAX_TOKENS and result.new_tokens == 4
    assert [e.index for e in events if isinstance(e, TokenProgress)] == [0, 1, 2, 3]
    assert text(events) == "abcd"
    assert result.kv_backed_token_ids == TOK.encode("qabc") and result.kv_position == 4
    assert_kv_honest(result, producer)


def test_stop_string_across_tokens_ends_the_run_without_emitting_it() -> None:
    producer, prompt = setup("q", "one</s>two")
    result, events = run(producer, prompt, stop_strings=("</s>",))
    assert result.reason is StopReason.STOP_STRING and text(events) == "one"
    assert not any(isinstance(e, TailProgress) for e in events)
    assert_kv_honest(result, producer)


def test_utf8_characters_are_never_broken_through_the_loop() -> None:
    producer, prompt = setup("q", "日本😀é", TOK.END_OF_TURN)
    _, events = run(producer, prompt)
    deltas = [e.delta for e in events if isinstance(e, TokenProgress)]
    assert "".join(deltas) == "日本😀é" and all("\ufffd" not in d for d in deltas)
    assert len(deltas) == len("日本😀é".encode())


# -- cancellation -----------------------------------------------------------------------
def cancel_after(counter: Callable[[], int], n: int) -> Callable[[], bool]:
    return lambda: counter() >= n


def test_cancel_in_prefill_gives_zero_new_tokens_and_an_honest_kv() -> None:
    producer, prompt = setup("abcdef", "xyz", evicted=True)
    fed = lambda: len(producer.feeds())  # noqa: E731
    result, events = run(producer, prompt, cancel=cancel_after(fed, 2))
    assert result.reason is StopReason.CANCELLED
    assert (result.new_tokens, result.decode_seconds, result.prompt_tokens) == (0, 0.0, 6)
    assert result.kv_position == 2 and result.kv_backed_token_ids == prompt[:2]
    assert result.session_slot_evicted is True
    assert len(producer.feeds()) == 2 and not any(isinstance(e, TokenProgress) for e in events)
    assert_kv_honest(result, producer)


def test_cancel_in_prefill_after_reuse_counts_the_reused_ids() -> None:
    producer, prompt = setup("abcdef", "xyz", reuse=2)
    fed = lambda: len(producer.feeds())  # noqa: E731
    result, _ = run(producer, prompt, cancel=cancel_after(fed, 1))
    assert result.kv_position == 3 and result.kv_backed_token_ids == prompt[:3]
    assert result.reused_prefix_tokens == 2
    assert_kv_honest(result, producer)
    # The prefill rate counts the ONE token fed, not the 4 the prompt still had to go.
    assert result.prefill_tokens_per_sec == pytest.approx(1 / result.prefill_seconds)


def test_cancel_in_decode_flushes_the_tail_and_keeps_the_result_ordinary() -> None:
    producer, prompt = setup("q", "ok <end", TOK.END_OF_TURN)
    seen: list[Any] = []
    cfg = GenerationConfig(max_new_tokens=20, stop_strings=("<end>",))
    tokens = lambda: sum(isinstance(e, TokenProgress) for e in seen)  # noqa: E731
    result = run_raw_completion_cancellable(producer, TOK, prompt, cfg, 512, V, lambda: tokens() >= 5, seen.append)
    assert result.reason is StopReason.CANCELLED and result.new_tokens == 5
    assert text(seen) == "ok <e" and seen[-1] == TailProgress("<e")
    # The 5th token was emitted but not fed: the KV holds the prompt and 4 tokens.
    assert result.kv_backed_token_ids == TOK.encode("qok <") and result.decode_seconds > 0.0
    assert_kv_honest(result, producer)


def test_cancel_is_polled_once_per_prefill_token_and_per_decoded_token() -> None:
    producer, prompt = setup("abc", "xy", TOK.END_OF_TURN)
    polls: list[int] = []
    run(producer, prompt, cancel=lambda: bool(polls.append(len(producer.feeds()))))
    # 3 after prefill tokens, then after "x" and "y" (the stop token needs no poll).
    assert polls == [1, 2, 3, 3, 4]


def test_a_cancel_raised_by_a_progress_callback_stops_on_that_token() -> None:
    producer, prompt = setup("q", "abcdef")
    seen: list[Any] = []
    cfg = GenerationConfig(max_new_tokens=20)
    result = run_raw_completion_cancellable(
        producer, TOK, prompt, cfg, 64, V, lambda: any(isinstance(e, TokenProgress) for e in seen), seen.append
    )
    assert result.new_tokens == 1 and text(seen) == "a"


def test_a_spent_budget_wins_over_a_cancel_on_the_last_token() -> None:
    producer, prompt = setup("q", "abc")
    seen: list[Any] = []
    cancel = lambda: any(isinstance(e, TokenProgress) for e in seen)  # noqa: E731
    result = run_raw_completion_cancellable(producer, TOK, prompt, GenerationConfig(max_new_tokens=1), 64, V, cancel, seen.append)
    assert result.reason is StopReason.MAX_TOKENS


@pytest.mark.parametrize(
    ("reply", "config"),
    [
        ("abcdef", {"max_new_tokens": 3}),
        ("ab<x>cd", {"stop_strings": ("<x>",)}),
        ("ab", {}),
    ],
)
def test_kv_backed_ids_always_match_the_kv_position_and_the_producer(reply: str, config: dict[str, Any]) -> None:
    producer, prompt = setup("pr", reply, TOK.END_OF_TURN)
    result, _ = run(producer, prompt, **config)
    assert_kv_honest(result, producer)


# -- errors -----------------------------------------------------------------------------
@pytest.mark.parametrize("where", [0, 2, 4])  # prefill_prefill, last prompt token, decode
def test_producer_failures_are_wrapped_with_their_cause(where: int) -> None:
    producer, prompt = setup("abc", "xyz", fail_at=where)
    with pytest.raises(ProducerError) as info:
        run(producer, prompt)
    assert isinstance(info.value.__cause__, ScriptedFailure)
    assert info.value.cause is info.value.__cause__


def test_engine_errors_from_the_producer_pass_through_unwrapped() -> None:
    producer, prompt = setup("abc", "xyz", fail_at=1, error=ZeroBudget())
    with pytest.raises(ZeroBudget):
        run(producer, prompt)


def test_nan_logits_from_the_model_raise_a_selection_error() -> None:
    producer = ScriptedProducer(V, {0: np.full(V, np.nan, dtype=np.float32)})
    with pytest.raises(SelectionError, match="NaN"):
        run(producer, [1])


# -- the step loop ----------------------------------------------------------------------
def test_the_stream_yields_what_the_run_reports_and_returns_the_result() -> None:
    producer, prompt = setup("hey", "ok", TOK.EOS)
    cfg = GenerationConfig(max_new_tokens=8)
    items, streamed = drain(stream_raw_completion(producer, TOK, prompt, cfg, 64, V))
    again, _ = setup("hey", "ok", TOK.EOS)
    events: list[Any] = []
    ran = run_raw_completion(again, TOK, prompt, cfg, 64, V, events.append)
    assert items == events
    assert (streamed.reason, streamed.new_tokens, streamed.kv_backed_token_ids) == (ran.reason, ran.new_tokens, ran.kv_backed_token_ids)


def test_result_fields() -> None:
    producer, prompt = setup("abc", "hi", TOK.END_OF_TURN, evicted=True)
    result, _ = run(producer, prompt)
    assert result.prompt_tokens == 3 and result.new_tokens == 3
    assert result.prefill_seconds > 0 and result.decode_seconds > 0
    assert result.session_slot_evicted is True and result.reused_prefix_tokens == 0


def test_seeded_sampling_makes_runs_reproducible() -> None:
    def once(seed: int) -> list[int]:
        producer = ScriptedProducer(V, default=np.zeros(V, dtype=np.float32))
        _, events = run(producer, [1], max_new_tokens=30, shaping=Shaping(temperature=1.0, seed=seed))
        return [e.id for e in events if isinstance(e, TokenProgress)]

    assert once(11) == once(11)
    assert once(11) != once(12)


def test_chunked_run_needs_a_chunk_capable_producer() -> None:
    class NoChunks:
        pass

    with pytest.raises(TypeError, match="produce_chunk"):
        run_raw_completion_chunked(NoChunks(), TOK, [1], GenerationConfig(max_new_tokens=4), 64, V)  # type: ignore[arg-type]
