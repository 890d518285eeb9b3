"""Session slots (reference: `session_pool`): one KV cache + token mirror per conversation.

Each slot holds a producer with its own KV cache. A session's turn reuses its own slot (prefix
reuse via the slot's mirror); a session without a slot takes a free one, else evicts the least
recently used idle slot. A slot serving a turn is *busy* and never evicted: with fewer slots
than concurrent turns, a turn waits for a slot instead of destroying a live generation.

With a `StateCache` (state_cache.py) an evicted conversation is not lost: its KV state goes to
RAM, and when it comes back it is restored into the slot it gets ("restored"), so only what is
new since is read again. A turn that starts also moves the IDLE slots' conversations there and
frees their cells (`park_idle`, llama-server's `--cache-idle-slots`): in the one unified KV
buffer a turn's rows would otherwise scan them all.

Sessions chosen by token prefix (the API's, `longest_prefix_session`) are found in RAM by token
prefix too, as llama-server's prompt cache is: when a turn takes such a session and its prompt
leaves part of what the session holds (another chat sharing only a system prompt), that state is
first kept in RAM under a fork of the session's id (`fork_prefix`), so the chat it belonged to is
found there by its tokens when it comes back, however little it shares with the others.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from typing import Any, Callable, Generic, Protocol, Sequence, TypeVar

import numpy as np

from .kv_prefix import common_prefix_len
from .state_cache import StateCache

log = logging.getLogger(__name__)

FORK_MIN_TOKENS = 4  # a prompt leaving fewer of a session's tokens (a reply's end) forks nothing
FORK_MARK = "~"  # a forked state's id: the session's id, the mark, a counter


class PooledProducer(Protocol):
    """A LogitProducer that owns a KV cache and a token mirror, and can free its memory."""

    @property
    def mirror(self) -> Sequence[int]: ...

    @property
    def kv_nbytes(self) -> int: ...

    def produce(self, token: int, position: int, logits_out: np.ndarray) -> None: ...

    def produce_prefill(self, token: int, position: int, logits_out: np.ndarray) -> None: ...

    def produce_chunk(
        self, tokens: Sequence[int], position: int, logits_out: np.ndarray | None
    ) -> None: ...

    def reset(self) -> None: ...

    def try_reuse_prefix(self, prompt_ids: Sequence[int]) -> int: ...

    def release(self) -> None:
        """Reset AND give the KV memory back (the slot keeps no allocation)."""
        ...


P = TypeVar("P", bound=PooledProducer)


@dataclass
class Slot(Generic[P]):
    index: int
    producer: P
    session_id: str | None = None
    last_used: int = 0  # pool clock tick of the last checkout
    busy: bool = False
    reserved: int = 0  # KV bytes the running turn may grow to (prompt + reply budget)

    @property
    def held_bytes(self) -> int:
        """What the slot counts against the KV bound: its KV, or its turn's reservation."""
        held = self.producer.kv_nbytes
        return max(held, self.reserved) if self.busy else held


class SlotOutcome:
    HIT = "hit"  # the session's own slot
    MISS = "miss"  # a free slot (nothing usable was lost)
    EVICTED = "evicted"  # another session's usable state was dropped (or moved to RAM)
    RESTORED = "restored"  # the session's state came back from RAM into the slot


class SessionProducer:
    """The producer one turn sees: delegates to the slot's producer, reports the eviction."""

    def __init__(self, slot: Slot[Any], outcome: str, evicted_other: bool, restored: int = 0) -> None:
        self._slot = slot
        self.outcome = outcome  # SlotOutcome: how this session got its slot
        self._evicted_other = evicted_other
        self.restored = restored  # tokens of this session's state that came back from RAM
        self._inner = slot.producer

    @property
    def slot_index(self) -> int:
        return self._slot.index

    @property
    def batchable(self) -> bool:
        """Whether the slot's producer can join a batched decode step (`inner_producer`)."""
        return bool(getattr(self._inner, "batchable", False))

    @property
    def inner_producer(self) -> Any:
        return self._inner

    def produce(self, token: int, position: int, logits_out: np.ndarray) -> None:
        self._inner.produce(token, position, logits_out)

    def produce_prefill(self, token: int, position: int, logits_out: np.ndarray) -> None:
        self._inner.produce_prefill(token, position, logits_out)

    def produce_lent(self, token: int, position: int, logits_out: np.ndarray) -> None:
        """The slot producer's `produce_lent` (its row lent to the buffer), else `produce`."""
        lend = getattr(self._inner, "produce_lent", None)
        (self._inner.produce if lend is None else lend)(token, position, logits_out)

    def logits_now(self, logits_out: np.ndarray) -> np.ndarray:
        """The array holding `logits_out`'s logits now (the slot producer's lent row, if any)."""
        now = getattr(self._inner, "logits_now", None)
        return logits_out if now is None else now(logits_out)

    def produce_chunk(
        self, tokens: Sequence[int], position: int, logits_out: np.ndarray | None
    ) -> None:
        self._inner.produce_chunk(tokens, position, logits_out)

    def produce_chunk_cancellable(
        self,
        tokens: Sequence[int],
        position: int,
        logits_out: np.ndarray | None,
        cancel: Callable[[], bool],
    ) -> bool:
        """The slot producer's interruptible chunk when it has one, else a whole chunk."""
        inner = getattr(self._inner, "produce_chunk_cancellable", None)
        if inner is None:
            self._inner.produce_chunk(tokens, position, logits_out)
            return True
        return bool(inner(tokens, position, logits_out, cancel))

    def produce_rows(self, tokens: Sequence[int], position: int, rows_out: np.ndarray) -> None:
        """A draft's verification pass (`DraftVerifier`) on the slot's producer."""
        self._inner.produce_rows(tokens, position, rows_out)

    def trim(self, n: int) -> None:
        """Drop the slot's KV rows (and mirror ids) past `n`: a rejected draft's."""
        self._inner.trim(n)

    def reset(self) -> None:
        self._inner.reset()

    def try_reuse_prefix(self, prompt_ids: Sequence[int]) -> int:
        return self._inner.try_reuse_prefix(prompt_ids)

    def session_slot_evicted(self) -> bool:
        return self._evicted_other

    def end_turn(self) -> None:
        """End of the turn: the slot becomes idle (evictable by other sessions); its KV stays."""
        self._slot.busy = False
        self._slot.reserved = 0


class SessionPool(Generic[P]):
    """`slots` KV slots shared by any number of sessions, LRU-evicted, KV bytes bounded."""

    def __init__(
        self,
        make_producer: Callable[[], P],
        slots: int = 4,
        max_kv_bytes: int | None = None,
        saved: StateCache | None = None,
        park_idle: bool = True,
    ) -> None:
        if slots < 1:
            raise ValueError(f"session slots must be >= 1 (got {slots})")
        self._slots = [Slot(i, make_producer()) for i in range(slots)]
        self.max_kv_bytes = max_kv_bytes
        self.saved = saved  # where an evicted session's state goes (None: it is dropped)
        self._tick = itertools.count(1)
        self.evictions = 0
        self.park_idle = park_idle  # idle conversations go to `saved` when a turn starts
        self.parked = 0
        # Sessions whose id starts with this are shared by token prefix: a turn that would cut
        # one's state keeps it in RAM first (set by whoever picks sessions by prefix).
        self.fork_prefix: str | None = None
        self.forked = 0

    @property
    def slots(self) -> Sequence[Slot[P]]:
        return tuple(self._slots)

    def slot_of(self, session_id: str) -> Slot[P] | None:
        return next((s for s in self._slots if s.session_id == session_id), None)

    def longest_prefix_session(
        self, prompt_ids: Sequence[int], prefix: str
    ) -> tuple[str | None, int]:
        """The idle session whose id starts with `prefix` and whose KV mirror shares the longest
        token prefix with `prompt_ids` (None when no such session shares a token), and that length.
        Sessions so named are forked rather than cut (`fork_prefix`)."""
        self.fork_prefix = prefix
        ids = list(prompt_ids)
        best: tuple[str | None, int] = (None, 0)
        candidates = [(s.session_id, s.producer.mirror) for s in self._slots
                      if not s.busy and s.session_id is not None]
        if self.saved is not None:
            candidates += self.saved.sessions()
        for session_id, mirror in candidates:
            if session_id is None or not session_id.startswith(prefix):
                continue
            shared = common_prefix_len(list(mirror), ids)
            if shared > best[1]:
                best = (session_id, shared)
        return best

    def checkout(self, session_id: str, need_bytes: int = 0,
                 prompt_ids: Sequence[int] | None = None) -> SessionProducer | None:
        """The producer for one turn of `session_id`, or None when every slot is busy, or when
        the turns running now have reserved the KV room this one needs (`need_bytes`: its
        prompt + reply budget; the KV memory is one pool that every slot draws from).
        `prompt_ids`: the turn's prompt; when it would cut a prefix-shared session's state, that
        state is kept in RAM under a fork first."""
        slot = self.slot_of(session_id)
        if slot is not None:
            if slot.busy:
                return None  # the same session already has a turn in flight
            outcome = SlotOutcome.HIT
        else:
            idle = [s for s in self._slots if not s.busy]
            if not idle:
                return None
            # Prefer a slot nobody holds, then one whose session holds nothing (no usable state
            # lost either way), then the least recently used: a real eviction.
            slot = min(
                idle,
                key=lambda s: (s.session_id is not None, bool(s.producer.mirror), s.last_used),
            )
            outcome = SlotOutcome.EVICTED if slot.producer.mirror else SlotOutcome.MISS
        if not self._room_for(slot, need_bytes):
            return None  # wait for a running turn to end: it holds the room
        lost = False
        restored = 0
        if outcome != SlotOutcome.HIT:
            if outcome == SlotOutcome.EVICTED:
                self.evictions += 1
                lost = not self._save(slot)
            # A slot changing hands starts empty, so no prefix of another session is reused.
            slot.producer.reset()
            slot.session_id = session_id
        if self.park_idle:
            self._park_idle(keep=slot)  # first: a state restored next lands in the freed cells
        if outcome != SlotOutcome.HIT:
            restored = self._restore(slot, session_id, prompt_ids)
            if restored:
                outcome = SlotOutcome.RESTORED
        elif prompt_ids is not None and self._forks(session_id, slot.producer.mirror, prompt_ids):
            self._save(slot, self._fork_id(session_id))
        slot.busy = True
        slot.reserved = max(0, int(need_bytes))
        slot.last_used = next(self._tick)
        # The KV bound is enforced when a turn starts, so the eviction it causes is this turn's.
        freed = self._enforce_kv_bound(keep=slot)
        return SessionProducer(slot, outcome, lost or freed, restored)

    def _forks(self, session_id: str, mirror: Sequence[int], prompt_ids: Sequence[int]) -> bool:
        """Whether a turn of `prompt_ids` on a state holding `mirror` should keep it in RAM first:
        a prefix-shared session whose state the prompt leaves FORK_MIN_TOKENS or more of."""
        if self.saved is None or self.fork_prefix is None or not session_id.startswith(self.fork_prefix):
            return False
        return len(mirror) - common_prefix_len(list(mirror), list(prompt_ids)) >= FORK_MIN_TOKENS

    def _fork_id(self, session_id: str) -> str:
        self.forked += 1
        return f"{session_id.split(FORK_MARK)[0]}{FORK_MARK}{self.forked}"

    def _save(self, slot: Slot[P], as_id: str | None = None) -> bool:
        """Move the slot's state to RAM (under its session, or `as_id`) before it changes hands;
        False when it is lost."""
        save = getattr(slot.producer, "save_state", None)
        if self.saved is None or save is None or slot.session_id is None or not slot.producer.mirror:
            return False
        try:
            return self.saved.put(as_id or slot.session_id, tuple(slot.producer.mirror), save())
        except Exception:  # a state that cannot be read is a plain eviction, never a failed turn
            log.exception("saving the state of session %s failed", slot.session_id)
            return False

    def _park_idle(self, keep: Slot[P]) -> None:
        """Move every idle slot's conversation (not `keep`'s) to RAM and free its cells, as
        llama-server does for idle slots when a task starts (`--cache-idle-slots`, on by default).

        In one unified KV buffer every row a turn evaluates scans the cells of the conversations
        kept beside it (the attention mask spans all of them): measured on Gemma 3 270M, 2,000
        idle cells made a 1,500-token prefill 7% and each decode step 4% dearer, while saving
        and later restoring them cost ~7 us a cell, paid back within ~20 reply tokens. A state
        the RAM budget cannot take stays in its slot (nothing is lost by parking)."""
        for other in self._slots:
            if other is not keep and not other.busy and self._save(other):  # (_save: False if empty)
                other.producer.release()
                other.session_id = None
                self.parked += 1

    def _restore(self, slot: Slot[P], session_id: str, prompt_ids: Sequence[int] | None = None) -> int:
        """Put `session_id`'s saved state into the (empty) slot; the tokens it holds, or 0. When
        `prompt_ids` would cut it (`_forks`), the state also stays in RAM, as a fork."""
        restore = getattr(slot.producer, "restore_state", None)
        state = self.saved.take(session_id) if self.saved is not None and restore is not None else None
        if state is None:
            return 0
        if prompt_ids is not None and self._forks(session_id, state.mirror, prompt_ids):
            assert self.saved is not None
            self.saved.put(self._fork_id(session_id), state.mirror, state.blob)  # (no copy made)
        try:
            return len(state.mirror) if restore(state.blob, state.mirror) else 0
        except Exception:
            log.exception("restoring the state of session %s failed", session_id)
            slot.producer.reset()
            return 0

    def _room_for(self, slot: Slot[P], need_bytes: int) -> bool:
        """Whether the busy slots' reservations leave `need_bytes` (idle slots can be freed).
        A turn alone always gets its go: its admission already bounded it by the context."""
        if self.max_kv_bytes is None or need_bytes <= 0:
            return True
        busy = [s for s in self._slots if s.busy and s is not slot]
        return not busy or sum(s.held_bytes for s in busy) + need_bytes <= self.max_kv_bytes

    def _enforce_kv_bound(self, keep: Slot[P]) -> bool:
        """Free least recently used idle slots (never `keep`) until the KV total, the busy
        slots counted at their reservations, fits.

        Returns True when another session's usable state was dropped.
        """
        if self.max_kv_bytes is None:
            return False
        dropped = False
        for slot in sorted(self._slots, key=lambda s: s.last_used):
            if self.total_kv_bytes <= self.max_kv_bytes:
                break
            if slot is keep or slot.busy or slot.producer.kv_nbytes == 0:
                continue
            dropped = (not self._save(slot)) or dropped
            slot.producer.release()
            slot.session_id = None
            self.evictions += 1
        return dropped

    def drop(self, session_id: str) -> None:
        """Forget a session (conversation deleted): its slot is freed for others."""
        slot = self.slot_of(session_id)
        if slot is not None and not slot.busy:
            slot.producer.release()
            slot.session_id = None
        if self.saved is not None:
            self.saved.drop(session_id)

    def release_all(self) -> None:
        """Free every idle slot and every saved state (model switch, memory pressure)."""
        for slot in self._slots:
            if not slot.busy:
                slot.producer.release()
                slot.session_id = None
        if self.saved is not None:
            self.saved.clear()

    @property
    def total_kv_bytes(self) -> int:
        """KV bytes held, a busy slot counted at least at its turn's reservation."""
        return sum(s.held_bytes for s in self._slots)

    def describe(self) -> list[dict[str, Any]]:
        """Per-slot facts for system_info: slot, session, KV bytes, tokens held, LRU rank."""
        order = sorted(self._slots, key=lambda s: s.last_used, reverse=True)
        rank = {s.index: r for r, s in enumerate(order)}
        return [
            {
                "slot": s.index,
                "session_id": s.session_id,
                "kv_bytes": s.producer.kv_nbytes,
                "kv_tokens": len(s.producer.mirror),
                "lru_rank": rank[s.index],
                "busy": s.busy,
            }
            for s in self._slots
        ]
