"""Session slots: LRU eviction, busy slots, KV bound — a hypothesis state machine vs a model."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from turbospark_app.engine.session_pool import SessionPool, SlotOutcome

BYTES_PER_TOKEN = 100


class FakeSlotProducer:
    """Holds a token mirror; KV bytes proportional to it (allocation kept until release)."""

    def __init__(self) -> None:
        self._mirror: list[int] = []
        self.allocated_tokens = 0
        self.resets = 0

    @property
    def mirror(self) -> Sequence[int]:
        return tuple(self._mirror)

    @property
    def kv_nbytes(self) -> int:
        return self.allocated_tokens * BYTES_PER_TOKEN

    def produce(self, token: int, position: int, logits_out: np.ndarray) -> None:
        assert position == len(self._mirror)
        self._mirror.append(token)
        self.allocated_tokens = max(self.allocated_tokens, len(self._mirror))

    produce_prefill = produce

    def produce_chunk(self, tokens: Sequence[int], position: int, logits_out: np.ndarray | None) -> None:
        for i, t in enumerate(tokens):
            self.produce(t, position + i, logits_out)  # type: ignore[arg-type]

    def reset(self) -> None:
        self._mirror.clear()
        self.resets += 1

    def try_reuse_prefix(self, prompt_ids: Sequence[int]) -> int:
        n = 0
        while n < min(len(prompt_ids), len(self._mirror)) and prompt_ids[n] == self._mirror[n]:
            n += 1
        del self._mirror[n:]
        return n

    def release(self) -> None:
        self.reset()
        self.allocated_tokens = 0


def test_hit_miss_evict_sequence() -> None:
    pool = SessionPool(FakeSlotProducer, slots=2)
    a = pool.checkout("a")
    assert a is not None and a.outcome == SlotOutcome.MISS and not a.session_slot_evicted()
    a.produce_chunk([1, 2, 3], 0, None)
    a.end_turn()
    b = pool.checkout("b")
    assert b is not None and b.outcome == SlotOutcome.MISS
    b.produce_chunk([4, 5], 0, None)
    b.end_turn()
    a2 = pool.checkout("a")
    assert a2 is not None and a2.outcome == SlotOutcome.HIT and not a2.session_slot_evicted()
    assert a2.try_reuse_prefix([1, 2, 3, 9]) == 3
    a2.end_turn()
    c = pool.checkout("c")  # evicts b, the least recently used
    assert c is not None and c.outcome == SlotOutcome.EVICTED and c.session_slot_evicted()
    assert pool.slot_of("b") is None and pool.slot_of("a") is not None
    assert c.try_reuse_prefix([4, 5, 6]) == 0  # b's state is gone, not leaked into c
    c.end_turn()


def test_busy_slots_are_never_evicted() -> None:
    pool = SessionPool(FakeSlotProducer, slots=1)
    a = pool.checkout("a")
    assert a is not None
    assert pool.checkout("b") is None  # waits instead of destroying a live generation
    assert pool.checkout("a") is None  # one turn per session at a time
    a.end_turn()
    assert pool.checkout("b") is not None


def test_evicting_an_empty_slot_is_not_an_eviction() -> None:
    pool = SessionPool(FakeSlotProducer, slots=1)
    a = pool.checkout("a")
    assert a is not None
    a.end_turn()  # a's turn fed nothing
    b = pool.checkout("b")
    assert b is not None and b.outcome == SlotOutcome.MISS and not b.session_slot_evicted()


def test_kv_bound_frees_lru_idle_slots_and_reports_it() -> None:
    pool = SessionPool(FakeSlotProducer, slots=3, max_kv_bytes=5 * BYTES_PER_TOKEN)
    for sid, n in (("a", 3), ("b", 3)):
        p = pool.checkout(sid)
        assert p is not None
        p.produce_chunk(list(range(n)), 0, None)
        p.end_turn()
    assert pool.total_kv_bytes == 6 * BYTES_PER_TOKEN
    c = pool.checkout("c")  # a free slot, but the bound forces a's (LRU) state out
    assert c is not None and c.outcome == SlotOutcome.MISS and c.session_slot_evicted()
    assert pool.slot_of("a") is None and pool.slot_of("b") is not None
    assert pool.total_kv_bytes <= 5 * BYTES_PER_TOKEN


def test_describe_reports_lru_order_and_bytes() -> None:
    pool = SessionPool(FakeSlotProducer, slots=2)
    for sid in ("a", "b"):
        p = pool.checkout(sid)
        assert p is not None
        p.produce_chunk([1, 2], 0, None)
        p.end_turn()
    rows = {r["session_id"]: r for r in pool.describe()}
    assert rows["b"]["lru_rank"] == 0 and rows["a"]["lru_rank"] == 1
    assert rows["a"]["kv_bytes"] == 2 * BYTES_PER_TOKEN and rows["a"]["kv_tokens"] == 2


def test_zero_slots_rejected() -> None:
    with pytest.raises(ValueError, match="session slots"):
        SessionPool(FakeSlotProducer, slots=0)


class PoolMachine(RuleBasedStateMachine):
    """Against a plain model: which session holds which slot, by recency."""

    SLOTS = 3

    def __init__(self) -> None:
        super().__init__()
        self.pool = SessionPool(FakeSlotProducer, slots=self.SLOTS)
        self.holders: dict[str, int] = {}  # session -> last-use tick (model of the pool)
        self.tokens: dict[str, int] = {}
        self.tick = 0
        self.active: dict[str, object] = {}

    @rule(sid=st.sampled_from("abcdef"), n=st.integers(0, 4))
    def turn(self, sid: str, n: int) -> None:
        had = sid in self.holders
        p = self.pool.checkout(sid)
        assert p is not None
        self.tick += 1
        if had:
            assert p.outcome == SlotOutcome.HIT
        elif len(self.holders) < self.SLOTS:
            assert p.outcome == SlotOutcome.MISS and not p.session_slot_evicted()
        else:
            # An empty session's slot is taken before a real eviction (no usable state lost).
            victim = min(
                self.holders, key=lambda s: (self.tokens.get(s, 0) > 0, self.holders[s])
            )
            expect_evicted = self.tokens.get(victim, 0) > 0
            assert p.session_slot_evicted() == expect_evicted
            del self.holders[victim]
            self.tokens.pop(victim, None)
            if not had and not expect_evicted:
                assert p.outcome == SlotOutcome.MISS
        self.holders[sid] = self.tick
        start = p.try_reuse_prefix([7] * self.tokens.get(sid, 0))
        assert start == self.tokens.get(sid, 0)
        p.produce_chunk([7] * n, start, None)
        self.tokens[sid] = start + n
        p.end_turn()

    @precondition(lambda self: bool(self.holders))
    @rule(data=st.data())
    def drop(self, data: st.DataObject) -> None:
        sid = data.draw(st.sampled_from(sorted(self.holders)))
        self.pool.drop(sid)
        del self.holders[sid]
        self.tokens.pop(sid, None)

    @invariant()
    def pool_matches_model(self) -> None:
        held = {s.session_id for s in self.pool.slots if s.session_id is not None}
        assert held == set(self.holders)
        assert len(held) <= self.SLOTS
        for sid, n in self.tokens.items():
            slot = self.pool.slot_of(sid)
            assert slot is not None and len(slot.producer.mirror) == n


TestPoolMachine = PoolMachine.TestCase
TestPoolMachine.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)


# --- prefix-shared sessions kept in RAM when a prompt would cut them (llama-server's prompt cache) ---

class SavingProducer(FakeSlotProducer):
    """A fake slot whose state is its mirror (what `LlamaCppProducer.save_state` stands for)."""

    def save_state(self) -> bytes:
        return bytes(self._mirror)

    def restore_state(self, blob: bytes, mirror: Sequence[int]) -> bool:
        assert list(blob) == list(mirror)
        self._mirror = list(mirror)
        self.allocated_tokens = len(self._mirror)
        return True


def _turn(pool: SessionPool, session: str, prompt: list[int]) -> int:
    """Run one turn of `prompt` on `session` (prefix reuse, then the rest): the tokens re-read."""
    producer = pool.checkout(session, prompt_ids=prompt)
    assert producer is not None
    reused = producer.try_reuse_prefix(prompt)
    producer.produce_chunk(prompt[reused:], reused, None)
    producer.end_turn()
    return len(prompt) - reused


def _pool(slots: int = 1) -> SessionPool:
    from turbospark_app.engine.state_cache import StateCache

    return SessionPool(SavingProducer, slots=slots, saved=StateCache(1 << 20))


def test_a_chat_sharing_only_a_system_prompt_forks_the_session_it_takes() -> None:
    pool = _pool()
    system = [1, 2, 3]
    chat_a = system + list(range(10, 30))
    assert _turn(pool, "api:a", chat_a) == 23
    chat_b = system + [50, 51]
    session, shared = pool.longest_prefix_session(chat_b, "api:")
    assert (session, shared) == ("api:a", 3)
    assert _turn(pool, session, chat_b) == 2  # the system prompt is reused...
    # ...and chat a's whole state was kept in RAM first, found again by its tokens.
    back = chat_a + [31, 32]
    fork, shared = pool.longest_prefix_session(back, "api:")
    assert fork == "api:a~1" and shared == len(chat_a)
    producer = pool.checkout(fork, prompt_ids=back)
    assert producer is not None and producer.outcome == SlotOutcome.RESTORED
    assert producer.try_reuse_prefix(back) == len(chat_a)


def test_no_fork_for_a_continuation_or_a_session_not_shared_by_prefix() -> None:
    pool = _pool()
    chat = list(range(1, 20))
    _turn(pool, "api:a", chat)
    pool.longest_prefix_session(chat, "api:")  # (sets the prefix, as the API's pick does)
    assert _turn(pool, "api:a", chat[:-2] + [7, 8, 9]) == 3  # loses 2 < FORK_MIN_TOKENS: no fork
    assert pool.saved is not None and pool.saved.sessions() == []
    _turn(pool, "window-conversation", chat)
    _turn(pool, "window-conversation", [1, 2, 99])  # an edit in a window's conversation: cut
    assert [sid for sid, _ in pool.saved.sessions()] == ["api:a"]  # (parked when the slot changed hands)


def test_a_restored_state_a_prompt_cuts_stays_in_ram_as_a_fork() -> None:
    pool = _pool(slots=2)
    chat_a = [1, 2, 3] + list(range(10, 30))
    _turn(pool, "api:a", chat_a)
    _turn(pool, "api:x", [90, 91, 92])  # parks a's state in RAM
    assert "api:a" in dict(pool.saved.sessions())
    pool.longest_prefix_session([1, 2, 3, 60], "api:")
    _turn(pool, "api:a", [1, 2, 3, 60])  # restored, then cut: the saved blob is kept as a fork
    assert dict(pool.saved.sessions()).get("api:a~1") == tuple(chat_a)
