"""Conversations kept in RAM when their slot is taken: the StateCache's budget, the session pool
moving an evicted slot's state there and back, and on llama.cpp a restored conversation that
re-reads only its new tokens and continues exactly as if it had kept its slot."""

from __future__ import annotations


import numpy as np
import pytest
from tiny_gguf import write_tiny_gguf

from turbospark_app.engine.session_pool import SessionPool, SlotOutcome
from turbospark_app.engine.state_cache import StateCache
from turbospark_app.model.llamacpp.context import LlamaCppContext
from turbospark_app.model.llamacpp.model import LlamaCppModel
from turbospark_app.model.llamacpp.producer import LlamaCppProducer


def test_the_budget_keeps_the_most_recent_states() -> None:
    cache = StateCache(budget_bytes=100)
    assert cache.put("a", (1, 2), b"x" * 40) and cache.put("b", (3,), b"y" * 40)
    assert cache.put("c", (4,), b"z" * 40)  # over 100: "a", the least recently saved, goes
    assert [sid for sid, _ in cache.sessions()] == ["b", "c"] and cache.nbytes == 80
    assert not cache.put("huge", (5,), b"w" * 101)  # larger than the whole budget: not kept
    assert not cache.put("empty", (), b"v")  # nothing to restore
    assert cache.peek_mirror("b") == (3,)
    state = cache.take("b")
    assert state is not None and state.mirror == (3,) and cache.take("b") is None  # single use
    cache.drop("c")
    assert cache.describe()["states"] == 0 and cache.describe()["dropped"] == 1
    with pytest.raises(ValueError):
        StateCache(-1)


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> LlamaCppContext:
    path = tmp_path_factory.mktemp("state") / "tiny.gguf"
    write_tiny_gguf(path)
    model = LlamaCppModel.open(path)
    context = LlamaCppContext(model, n_ctx=1024, n_seq_max=3, n_batch=64, threads=2)
    yield context
    context.close()
    model.close()


def _logits(ctx: LlamaCppContext) -> np.ndarray:
    return np.zeros(ctx.n_vocab, np.float32)


def test_a_saved_state_restores_into_another_sequence_exactly(ctx: LlamaCppContext) -> None:
    ids = [int(t) for t in np.random.default_rng(4).integers(1, ctx.n_vocab, 90)]
    a, b, c = (LlamaCppProducer(ctx, s) for s in range(3))
    a.produce_chunk(ids[:80], 0, None)
    blob = a.save_state()
    assert b.restore_state(blob, a.mirror) and b.mirror == a.mirror and ctx.seq_pos_max(1) == 79
    out_a, out_b = _logits(ctx), _logits(ctx)
    a.produce_chunk(ids[80:], 80, out_a)
    b.produce_chunk(ids[80:], 80, out_b)
    np.testing.assert_array_equal(out_a, out_b)  # the restored KV is the KV
    assert not c.restore_state(b"not a state", (1, 2, 3)) and c.mirror == () and ctx.seq_pos_max(2) == -1
    for p in (a, b, c):
        p.reset()


def test_the_pool_moves_an_evicted_conversation_to_ram_and_back(ctx: LlamaCppContext) -> None:
    seqs = iter(range(2))
    pool = SessionPool(lambda: LlamaCppProducer(ctx, next(seqs)), slots=2, saved=StateCache(64 << 20),
                       park_idle=False)
    ids = {name: [int(t) for t in np.random.default_rng(n).integers(1, ctx.n_vocab, 50)]
           for n, name in enumerate("abc")}
    for name in "ab":  # two conversations fill both slots
        p = pool.checkout(name)
        assert p is not None and p.outcome == SlotOutcome.MISS
        p.produce_chunk(ids[name], 0, None)
        p.end_turn()
    third = pool.checkout("c")  # takes "a"'s slot (least recently used): "a" goes to RAM
    assert third is not None and third.outcome == SlotOutcome.EVICTED
    assert not third.session_slot_evicted()  # nothing was lost: it is in RAM
    third.produce_chunk(ids["c"], 0, None)
    third.end_turn()
    assert pool.saved is not None and pool.saved.peek_mirror("a") == tuple(ids["a"])
    assert pool.longest_prefix_session(ids["a"] + [7], "")[0] == "a"  # the API finds it in RAM too
    back = pool.checkout("a")  # takes "b"'s slot; its state comes back from RAM
    assert back is not None and back.outcome == SlotOutcome.RESTORED and back.restored == 50
    assert back.try_reuse_prefix(ids["a"] + [9, 9]) == 50  # only the new tokens are read again
    back.end_turn()
    assert pool.saved.peek_mirror("b") == tuple(ids["b"])  # "b" went to RAM in turn
    pool.drop("b")
    assert pool.saved.peek_mirror("b") == ()
    pool.release_all()


def test_a_turn_parks_the_idle_conversations_in_ram_and_they_come_back(ctx: LlamaCppContext) -> None:
    seqs = iter(range(3))
    pool = SessionPool(lambda: LlamaCppProducer(ctx, next(seqs)), slots=3, saved=StateCache(64 << 20))
    ids = {name: [int(t) for t in np.random.default_rng(10 + n).integers(1, ctx.n_vocab, 40)]
           for n, name in enumerate("ab")}
    first = pool.checkout("a")
    assert first is not None and first.outcome == SlotOutcome.MISS
    first.produce_chunk(ids["a"], 0, None)
    first.end_turn()
    seq_a = first.slot_index
    second = pool.checkout("b")  # "a" is idle: its state goes to RAM and its cells are freed
    assert second is not None and second.outcome == SlotOutcome.MISS and not second.session_slot_evicted()
    assert ctx.seq_pos_max(seq_a) == -1 and pool.slot_of("a") is None and pool.parked == 1
    assert pool.saved is not None and pool.saved.peek_mirror("a") == tuple(ids["a"])
    second.produce_chunk(ids["b"], 0, None)
    second.end_turn()
    back = pool.checkout("a")  # "b" is parked in turn, "a" comes back from RAM
    assert back is not None and back.outcome == SlotOutcome.RESTORED and back.restored == 40
    assert back.try_reuse_prefix(ids["a"] + [5]) == 40 and pool.slot_of("b") is None
    assert pool.evictions == 0 and pool.parked == 2
    during = pool.checkout("b")  # while "a"'s turn runs: a busy slot is never parked
    assert during is not None and during.outcome == SlotOutcome.RESTORED
    assert ctx.seq_pos_max(back.slot_index) == 39 and pool.slot_of("a") is not None
    during.end_turn()
    back.end_turn()
    pool.release_all()


def test_a_state_the_ram_budget_cannot_take_stays_in_its_slot(ctx: LlamaCppContext) -> None:
    seqs = iter(range(2))
    pool = SessionPool(lambda: LlamaCppProducer(ctx, next(seqs)), slots=2, saved=StateCache(1024))
    ids = [int(t) for t in np.random.default_rng(3).integers(1, ctx.n_vocab, 40)]
    first = pool.checkout("a")
    assert first is not None
    first.produce_chunk(ids, 0, None)
    first.end_turn()
    other = pool.checkout("b")  # "a"'s state is larger than the budget: it is kept, not lost
    assert other is not None and not other.session_slot_evicted() and pool.parked == 0
    other.end_turn()
    back = pool.checkout("a")
    assert back is not None and back.outcome == SlotOutcome.HIT and back.try_reuse_prefix(ids + [1]) == 40
    back.end_turn()
    pool.release_all()
