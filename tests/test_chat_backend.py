"""The real backend on the default model: reuse by construction, reuse == reset, slots."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from turbospark_app.chat.api import ChatMessage, TurnSettings
from turbospark_app.chat.backend import LlamaChatBackend, load_backend
from turbospark_app.engine import (
    ContextOverflow,
    EmptyPrompt,
    GenerationConfig,
    InvalidRate,
    RateConfig,
    SelectionError,
    Shaping,
    StopReason,
    TokenProgress,
)
from turbospark_app.engine.raw_completion import drive_raw_completion

pytestmark = pytest.mark.real_model

SHORT = TurnSettings(generation=GenerationConfig(max_new_tokens=12))


@pytest.fixture(scope="module")
def backend(default_model_path: Path) -> LlamaChatBackend:
    return load_backend(default_model_path, session_slots=2)


def run_turn(backend: LlamaChatBackend, session: str, messages: list[ChatMessage],
             settings: TurnSettings = SHORT) -> tuple[list[ChatMessage], object]:
    turn = backend.prepare_turn(session, messages, settings)
    ids: list[int] = []
    text: list[str] = []

    def on_progress(e: object) -> None:
        if isinstance(e, TokenProgress):
            ids.append(e.id)
            text.append(e.delta)

    result = drive_raw_completion(backend.stream_turn(turn, lambda: False), settings.generation.rate,
                                  lambda: False, on_progress)
    return [*messages, ChatMessage("assistant", "".join(text), tuple(ids))], result


def test_multi_turn_reuses_the_whole_previous_turn(backend: LlamaChatBackend) -> None:
    msgs: list[ChatMessage] = []
    ratios = []
    for q in ("Hi, I am Ann.", "What is 2+2?", "Name a colour.", "Thanks!"):
        msgs, result = run_turn(backend, "reuse", [*msgs, ChatMessage("user", q)])
        ratios.append(result.reused_prefix_tokens / result.prompt_tokens)
        assert len(result.kv_backed_token_ids) == result.kv_position
    assert ratios[0] == 0.0
    assert min(ratios[1:]) >= 0.6, ratios  # short turns: the new user text is a big share
    info = json.loads(json.dumps(backend.system_info()))
    assert info["last_turn"]["reused_prefix_tokens"] > 0
    assert any(s["session_id"] == "reuse" for s in info["sessions"])


def test_reply_after_reuse_equals_reply_after_reset(default_model_path: Path) -> None:
    a = load_backend(default_model_path, session_slots=1)
    msgs, first = run_turn(a, "s", [ChatMessage("user", "Write one word.")])
    follow = [*msgs, ChatMessage("user", "Another word, please.")]
    reused_msgs, reused = run_turn(a, "s", follow)
    assert reused.reused_prefix_tokens > 0
    b = load_backend(default_model_path, session_slots=1)
    fresh_msgs, fresh = run_turn(b, "s", follow)
    assert fresh.reused_prefix_tokens == 0
    assert reused_msgs[-1].token_ids == fresh_msgs[-1].token_ids
    assert reused.kv_backed_token_ids == fresh.kv_backed_token_ids


def test_logits_after_reuse_match_fresh(backend: LlamaChatBackend) -> None:
    """A slot trimmed back to a shared prefix and fed the rest gives what a fresh slot fed the
    same chunks gives, bit for bit (trimming is exact; only another batch split would round
    differently)."""
    from turbospark_app.model.llamacpp.producer import LlamaCppProducer

    ctx = backend.context
    ids = backend.tokenizer.encode("The quick brown fox jumps over the lazy dog. " * 3)
    p = LlamaCppProducer(ctx, 0)
    out = np.empty(backend.vocab_size, np.float32)
    p.produce_chunk(ids[:20] + [7, 8, 9], 0, out)  # a diverging tail to be trimmed away
    n = p.try_reuse_prefix(ids)
    assert n == 20
    p.produce_chunk(ids[n:], n, out)
    q = LlamaCppProducer(ctx, 1)
    ref = np.empty(backend.vocab_size, np.float32)
    q.produce_chunk(ids[:20], 0, None)
    q.produce_chunk(ids[20:], 20, ref)
    np.testing.assert_array_equal(out, ref)
    p.reset()
    q.reset()


def test_two_sessions_on_one_slot_report_eviction(default_model_path: Path) -> None:
    one = load_backend(default_model_path, session_slots=1, state_cache_bytes=0)  # no RAM for states
    _, r1 = run_turn(one, "a", [ChatMessage("user", "Hello")])
    assert not r1.session_slot_evicted
    _, r2 = run_turn(one, "b", [ChatMessage("user", "Hello")])
    assert r2.session_slot_evicted
    _, r3 = run_turn(one, "b", [ChatMessage("user", "Hello again")])
    assert not r3.session_slot_evicted
    one.close()
    # With RAM for states, the slot changing hands loses nothing: a's state comes back.
    kept = load_backend(default_model_path, session_slots=1)
    run_turn(kept, "a", [ChatMessage("user", "Hello")])
    _, r2 = run_turn(kept, "b", [ChatMessage("user", "Hello")])
    assert not r2.session_slot_evicted
    _, r3 = run_turn(kept, "a", [ChatMessage("user", "Hello")])
    assert r3.restored_tokens > 0 and not r3.session_slot_evicted
    kept.close()


def test_admission_errors_before_the_model(backend: LlamaChatBackend) -> None:
    with pytest.raises(EmptyPrompt):
        backend.prepare_turn("x", [ChatMessage("user", "   ")], SHORT)
    for bad in (GenerationConfig(shaping=Shaping(top_p=0.0)),
                GenerationConfig(rate=RateConfig(max_tokens_per_sec=-1.0))):
        with pytest.raises((SelectionError, InvalidRate)):
            backend.prepare_turn("x", [ChatMessage("user", "hi")], TurnSettings(generation=bad))
    huge = TurnSettings(generation=GenerationConfig(max_new_tokens=backend.max_context))
    with pytest.raises(ContextOverflow) as err:
        backend.prepare_turn("x", [ChatMessage("user", "hi")], huge)
    assert err.value.max_context == backend.max_context


def test_cancel_mid_decode_keeps_a_continuable_turn(backend: LlamaChatBackend) -> None:
    turn = backend.prepare_turn("c", [ChatMessage("user", "Count from one to twenty.")],
                                TurnSettings(generation=GenerationConfig(max_new_tokens=64)))
    seen = []
    cancel = lambda: len(seen) >= 3  # noqa: E731
    result = drive_raw_completion(backend.stream_turn(turn, cancel), turn.settings.generation.rate,
                                  cancel, lambda e: seen.append(e) if isinstance(e, TokenProgress) else None)
    assert result.reason == StopReason.CANCELLED and result.new_tokens == 3
    assert result.kv_position == len(turn.prompt_ids) + 2  # the last emitted token was never fed
