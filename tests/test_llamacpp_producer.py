"""LlamaCppProducer: the engine's producer contract over llama.cpp, on tiny random GGUFs the
test writes (token mirror and cursor, prefix reuse, chunks stopped inside, draft rows and trim,
batched decode rows, sliding-window trims, a full KV memory)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tiny_gguf import FAMILY_VARIANTS, write_tiny_gguf

from turbospark_app.engine import ChunkedPrefillRunner, LogitProducer
from turbospark_app.engine.producer import DraftVerifier, InterruptibleChunkRunner
from turbospark_app.engine.errors import ContextOverflow, EngineError
from turbospark_app.model.llamacpp.context import KVCacheFull, LlamaCppContext
from turbospark_app.model.llamacpp.model import LlamaCppModel
from turbospark_app.model.llamacpp.producer import LlamaCppProducer, PositionMismatch, produce_batch

PROMPT = [3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46, 26, 43, 38, 32, 79]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> LlamaCppModel:
    path = tmp_path_factory.mktemp("producer") / "tiny.gguf"
    write_tiny_gguf(path)
    m = LlamaCppModel.open(path)
    yield m
    m.close()


@pytest.fixture
def ctx(model: LlamaCppModel) -> LlamaCppContext:
    c = LlamaCppContext(model, n_ctx=512, n_seq_max=4, n_batch=64, threads=2)
    yield c
    c.close()


def _out(model: LlamaCppModel) -> np.ndarray:
    return np.zeros(model.vocab_size, np.float32)


def _fresh(ctx: LlamaCppContext, ids: list[int], seq: int = 3) -> np.ndarray:
    """The logits after `ids`, fed as one chunk into an empty sequence."""
    p = LlamaCppProducer(ctx, seq)
    out = np.zeros(ctx.n_vocab, np.float32)
    p.produce_chunk(ids, 0, out)
    p.reset()
    return out


def test_implements_the_engine_protocols(ctx: LlamaCppContext) -> None:
    p = LlamaCppProducer(ctx, 0)
    for protocol in (LogitProducer, ChunkedPrefillRunner, InterruptibleChunkRunner, DraftVerifier):
        assert isinstance(p, protocol)
    assert p.session_slot_evicted() is False and p.batchable and p.can_trim


def test_produce_writes_logits_and_mirrors_tokens(model: LlamaCppModel, ctx: LlamaCppContext) -> None:
    p = LlamaCppProducer(ctx, 0)
    out = _out(model)
    for pos, tok in enumerate(PROMPT[:-1]):
        p.produce_prefill(tok, pos, out)
    assert not out.any()  # produce_prefill computed no logits and left the buffer alone
    p.produce(PROMPT[-1], len(PROMPT) - 1, out)
    assert out.any() and np.isfinite(out).all()
    assert p.mirror == tuple(PROMPT) and isinstance(p.mirror, tuple)
    assert ctx.seq_pos_max(0) == len(PROMPT) - 1
    fresh = _fresh(ctx, PROMPT)
    assert int(out.argmax()) == int(fresh.argmax())
    np.testing.assert_allclose(out, fresh, atol=1e-3)


def test_chunks_split_alike_give_the_same_logits(model: LlamaCppModel, ctx: LlamaCppContext) -> None:
    p = LlamaCppProducer(ctx, 0)
    out = _out(model)
    p.produce_chunk(PROMPT[:9], 0, None)
    p.produce_chunk(PROMPT[9:], 9, out)
    q = LlamaCppProducer(ctx, 1)
    again = _out(model)
    q.produce_chunk(PROMPT[:9], 0, None)
    q.produce_chunk(PROMPT[9:], 9, again)
    np.testing.assert_array_equal(out, again)
    assert p.mirror == q.mirror == tuple(PROMPT)
    with pytest.raises(ValueError):
        p.produce_chunk([], len(PROMPT), None)


def test_a_chunk_longer_than_a_batch_goes_in_pieces(model: LlamaCppModel, ctx: LlamaCppContext) -> None:
    ids = [int(t) for t in np.random.default_rng(0).integers(1, model.vocab_size, 150)]
    p = LlamaCppProducer(ctx, 0)
    out = _out(model)
    p.produce_chunk(ids, 0, out)  # 150 tokens through a 64-token batch: 3 decodes
    assert p.kv_position == 150 == ctx.seq_pos_max(0) + 1
    assert int(out.argmax()) == int(_fresh(ctx, ids).argmax())


def test_checks_before_llama_cpp_sees_anything(model: LlamaCppModel, ctx: LlamaCppContext) -> None:
    p = LlamaCppProducer(ctx, 0)
    out = _out(model)
    p.produce_chunk(PROMPT[:4], 0, None)
    with pytest.raises(PositionMismatch, match="position 2.*holds 4"):
        p.produce(9, 2, out)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        p.produce(model.vocab_size, 4, out)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        p.produce_chunk([1, -1], 4, None)
    with pytest.raises(ValueError, match="float32"):
        p.produce(9, 4, np.zeros(model.vocab_size, np.float64))
    with pytest.raises(ValueError, match="shape"):
        p.produce(9, 4, np.zeros(model.vocab_size - 1, np.float32))
    with pytest.raises(ContextOverflow):
        p.produce_chunk([1] * (ctx.n_ctx - 3), 4, None)
    assert p.mirror == tuple(PROMPT[:4]) and ctx.seq_pos_max(0) == 3  # nothing fed


def test_try_reuse_prefix_trims_and_the_continuation_is_exact(model: LlamaCppModel, ctx: LlamaCppContext) -> None:
    p = LlamaCppProducer(ctx, 0)
    p.produce_chunk(PROMPT[:8], 0, None)
    p.produce_chunk(PROMPT[8:], 8, None)
    edited = PROMPT[:8] + [7, 7, 7]
    assert p.try_reuse_prefix(edited) == 8
    assert p.mirror == tuple(PROMPT[:8]) and ctx.seq_pos_max(0) == 7
    out = _out(model)
    p.produce_chunk(edited[8:], 8, out)
    q = LlamaCppProducer(ctx, 1)  # the same splits from scratch
    ref = _out(model)
    q.produce_chunk(edited[:8], 0, None)
    q.produce_chunk(edited[8:], 8, ref)
    np.testing.assert_array_equal(out, ref)
    # capped at len - 1: the last prompt token is always fed again (fresh logits)
    assert p.try_reuse_prefix(edited) == len(edited) - 1
    assert p.try_reuse_prefix([99, 98]) == 0 and p.mirror == ()


def test_reset_and_release_empty_the_sequence(ctx: LlamaCppContext) -> None:
    p = LlamaCppProducer(ctx, 0, kv_bytes_per_token=100)
    p.produce_chunk(PROMPT, 0, None)
    assert p.kv_nbytes == 100 * len(PROMPT)
    p.reset()
    assert p.mirror == () and ctx.seq_pos_max(0) == -1 and p.kv_nbytes == 0
    p.produce_chunk(PROMPT[:3], 0, None)
    p.release()
    assert ctx.seq_pos_max(0) == -1


def test_a_stopped_chunk_commits_nothing(model: LlamaCppModel, ctx: LlamaCppContext) -> None:
    ids = [int(t) for t in np.random.default_rng(1).integers(1, model.vocab_size, 200)]
    p = LlamaCppProducer(ctx, 0)
    p.produce_chunk(ids[:20], 0, None)
    polls = [0]

    def cancel() -> bool:  # polled by llama.cpp between graph nodes: stop after a few
        polls[0] += 1
        return polls[0] > 30

    assert ctx.abort_works
    assert p.produce_chunk_cancellable(ids[20:], 20, None, cancel) is False
    assert polls[0] > 30  # it was asked inside the decode, not only before it
    assert p.mirror == tuple(ids[:20]) and ctx.seq_pos_max(0) == 19
    out = _out(model)  # the sequence goes on as if the stopped chunk had never been
    assert p.produce_chunk_cancellable(ids[20:], 20, out, lambda: False) is True
    ref = _out(model)
    q = LlamaCppProducer(ctx, 1)
    q.produce_chunk(ids[:20], 0, None)
    q.produce_chunk(ids[20:], 20, ref)
    np.testing.assert_array_equal(out, ref)


def test_a_decode_step_carries_no_abort_callback(model: LlamaCppModel, ctx: LlamaCppContext) -> None:
    p = LlamaCppProducer(ctx, 0)
    p.produce_chunk_cancellable(PROMPT, 0, None, lambda: False)
    calls = [0]
    ctx._cancel = lambda: calls.__setitem__(0, calls[0] + 1) or False  # would count polls
    p.produce(5, len(PROMPT), _out(model))
    assert calls[0] == 0  # the callback is uninstalled after the chunk: decode steps pay nothing


def test_rows_and_trim_for_a_draft(model: LlamaCppModel, ctx: LlamaCppContext) -> None:
    p = LlamaCppProducer(ctx, 0)
    p.produce_chunk(PROMPT[:10], 0, None)
    rows = np.zeros((6, model.vocab_size), np.float32)
    p.produce_rows(PROMPT[10:], 10, rows)
    assert p.kv_position == len(PROMPT)
    q = LlamaCppProducer(ctx, 1)  # every row is the distribution after its token
    q.produce_chunk(PROMPT[:10], 0, None)
    last = _out(model)
    q.produce_chunk(PROMPT[10:], 10, last)
    np.testing.assert_array_equal(rows[-1], last)
    for t in range(6):
        ref = _fresh(ctx, PROMPT[: 11 + t], seq=2)
        assert int(rows[t].argmax()) == int(ref.argmax())
    p.trim(12)  # the draft's last 4 rows rejected
    assert p.mirror == tuple(PROMPT[:12]) and ctx.seq_pos_max(0) == 11
    out = _out(model)
    p.produce(PROMPT[12], 12, out)
    assert int(out.argmax()) == int(rows[2].argmax())
    with pytest.raises(ValueError):
        p.trim(20)
    with pytest.raises(ValueError, match="shape"):
        p.produce_rows([1, 2], 13, np.zeros((3, model.vocab_size), np.float32))


def test_batched_decode_rows_go_to_their_own_sequences(model: LlamaCppModel, ctx: LlamaCppContext) -> None:
    producers = [LlamaCppProducer(ctx, s) for s in range(3)]
    prompts = [PROMPT[:5], PROMPT[2:9], PROMPT[4:7]]
    for p, ids in zip(producers, prompts):
        p.produce_chunk(ids, 0, None)
    outs = [_out(model) for _ in producers]
    produce_batch([(p, 40 + i, len(ids), o) for i, (p, ids, o) in enumerate(zip(producers, prompts, outs))])
    for i, (p, ids, o) in enumerate(zip(producers, prompts, outs)):
        assert p.mirror == (*ids, 40 + i) and ctx.seq_pos_max(p.seq) == len(ids)
        alone = _fresh(ctx, [*ids, 40 + i])
        assert int(o.argmax()) == int(alone.argmax())
        np.testing.assert_allclose(o, alone, atol=1e-3)
    with pytest.raises(ValueError, match="same sequence"):
        produce_batch([(producers[0], 1, 6, outs[0]), (producers[0], 2, 7, outs[1])])
    with pytest.raises(PositionMismatch):
        produce_batch([(producers[1], 1, 3, outs[1])])
    assert producers[1].mirror == (*prompts[1], 41)  # a refused batch feeds nothing


def test_a_full_kv_memory_is_an_error_that_loses_nothing(model: LlamaCppModel) -> None:
    ctx = LlamaCppContext(model, n_ctx=256, n_seq_max=2, n_batch=64, threads=2)
    try:
        a, b = LlamaCppProducer(ctx, 0), LlamaCppProducer(ctx, 1)
        a.produce_chunk([5] * 200, 0, None)
        b.produce_chunk([6] * 40, 0, None)
        with pytest.raises(KVCacheFull, match="KV cache is full"):
            b.produce_chunk([7] * 50, 40, None)
        assert b.mirror == (6,) * 40 and ctx.seq_pos_max(1) == 39
        a.reset()  # room again: the same chunk now goes in
        b.produce_chunk([7] * 50, 40, None)
        assert b.kv_position == 90
    finally:
        ctx.close()


@pytest.mark.parametrize("swa_full", [True, False])
def test_sliding_window_trims_are_exact_with_the_full_window_cache(tmp_path: Path, swa_full: bool) -> None:
    """Gemma 3 (window 4): feed 1,200 tokens, cut back to 100 and feed on; a fresh sequence fed
    the same way must agree. With llama.cpp's small SWA ring (swa_full off) the cells the window
    needs at position 100 were overwritten long ago: it cannot, which is why the app keeps the
    full window history, and why a trim checks what the memory still holds (llama-server's
    pos_min rule): there the sequence is cleared and the prompt read again, never a wrong reply."""
    path = tmp_path / "gemma3.gguf"
    write_tiny_gguf(path, **FAMILY_VARIANTS["gemma3"])
    model = LlamaCppModel.open(path)
    ctx = LlamaCppContext(model, n_ctx=2048, n_seq_max=2, n_batch=256, threads=2, swa_full=swa_full)
    try:
        ids = [int(t) for t in np.random.default_rng(2).integers(1, model.vocab_size, 1200)]
        p = LlamaCppProducer(ctx, 0)
        for at in range(0, 1200, 100):
            p.produce_chunk(ids[at: at + 100], at, None)
        q = LlamaCppProducer(ctx, 1)
        ref = _out(model)
        q.produce_chunk(ids[:100], 0, None)
        q.produce_chunk([9, 8, 7], 100, ref)
        if not swa_full:
            with pytest.raises(EngineError, match="no longer holds the first 100 tokens"):
                p.trim(100)
            assert p.mirror == () and ctx.seq_pos_max(0) == -1
            for at in range(0, 1200, 100):
                p.produce_chunk(ids[at: at + 100], at, None)
            assert p.try_reuse_prefix(ids[:100] + [9]) == 0  # read again, not continued wrongly
            return
        p.trim(100)
        out = _out(model)
        p.produce_chunk([9, 8, 7], 100, out)
        np.testing.assert_array_equal(out, ref)
        assert p.try_reuse_prefix(ids[:100] + [9, 8, 7, 6]) == 103
    finally:
        ctx.close()
        model.close()


def test_the_weights_outlive_every_context_whichever_is_freed_first(tmp_path: Path) -> None:
    """The garbage collector finalizes a model and its context in any order when both sit in a
    cycle; llama.cpp reads the model while it frees a context (a fresh-clone run segfaulted in
    llama_free from a context's __del__). The model's free waits for its last context."""
    import gc

    path = tmp_path / "m.gguf"
    write_tiny_gguf(path)
    model = LlamaCppModel.open(path)
    first = LlamaCppContext(model, n_ctx=64, threads=1)
    second = LlamaCppContext(model, n_ctx=64, threads=1)
    model.close()  # as a collector finalizing the model first would
    assert model._handle is not None
    first.close()
    assert model._handle is not None  # one context still reads it
    out = np.zeros(model.vocab_size, np.float32)
    LlamaCppProducer(second, 0).produce_chunk([1, 2, 3], 0, out)  # and it still works
    second.close()
    assert model._handle is None  # freed with the last one

    # The same through the collector: a cycle holding both, in either order of finalizers.
    for _ in range(3):
        model = LlamaCppModel.open(path)
        holder: dict[str, object] = {"model": model, "ctx": LlamaCppContext(model, n_ctx=64, threads=1)}
        holder["self"] = holder
        del model, holder
        gc.collect()
