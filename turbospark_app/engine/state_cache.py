"""Conversations kept in RAM when their KV slot is taken (llama-server's prompt cache, `--cache-ram`).

When a session slot changes hands, or sits idle as another conversation's turn starts
(`session_pool`'s parking), the state of the conversation that held it (its KV cells,
`llama_state_seq_get_data`, and the token ids they hold) is saved here instead of being dropped;
when that conversation comes back it is restored into whatever slot it gets, and only the
tokens past the saved ones are read again. The store has a byte budget: the least recently saved
state goes first, and a state larger than the whole budget is not kept.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

DEFAULT_BUDGET_MB = 1024


@dataclass(frozen=True)
class SavedState:
    """A conversation's KV state and the token ids it holds."""

    mirror: tuple[int, ...]
    blob: bytes

    @property
    def nbytes(self) -> int:
        return len(self.blob)


class StateCache:
    """Saved states by session id, least recently saved out first past `budget_bytes`."""

    def __init__(self, budget_bytes: int) -> None:
        if budget_bytes < 0:
            raise ValueError(f"the state budget must be >= 0 bytes (got {budget_bytes})")
        self.budget_bytes = int(budget_bytes)
        self._states: OrderedDict[str, SavedState] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()  # describe() is read from the GUI's poll
        self.saved = self.restored = self.dropped = 0

    def put(self, session_id: str, mirror: tuple[int, ...], blob: bytes) -> bool:
        """Keep `session_id`'s state (replacing an older one); False when it does not fit."""
        state = SavedState(tuple(mirror), bytes(blob))
        with self._lock:
            self._pop(session_id)
            if state.nbytes > self.budget_bytes or not state.mirror:
                return False
            while self._bytes + state.nbytes > self.budget_bytes and self._states:
                _, old = self._states.popitem(last=False)
                self._bytes -= old.nbytes
                self.dropped += 1
            self._states[session_id] = state
            self._bytes += state.nbytes
            self.saved += 1
            return True

    def take(self, session_id: str) -> SavedState | None:
        """The saved state of `session_id`, removed from the store (it goes back into a slot)."""
        with self._lock:
            state = self._pop(session_id)
            if state is not None:
                self.restored += 1
            return state

    def peek_mirror(self, session_id: str) -> tuple[int, ...]:
        """The token ids a saved state holds (empty when none): what a returning prompt reuses."""
        with self._lock:
            state = self._states.get(session_id)
            return state.mirror if state is not None else ()

    def sessions(self) -> list[tuple[str, tuple[int, ...]]]:
        """(session id, token ids) of every saved state, most recently saved last."""
        with self._lock:
            return [(sid, s.mirror) for sid, s in self._states.items()]

    def drop(self, session_id: str) -> None:
        """Forget `session_id`'s state (the conversation was deleted)."""
        with self._lock:
            self._pop(session_id)

    def clear(self) -> None:
        with self._lock:
            self._states.clear()
            self._bytes = 0

    def _pop(self, session_id: str) -> SavedState | None:
        state = self._states.pop(session_id, None)
        if state is not None:
            self._bytes -= state.nbytes
        return state

    @property
    def nbytes(self) -> int:
        return self._bytes

    def describe(self) -> dict[str, Any]:
        """For system_info and the status: states kept, their bytes, the budget, the counters."""
        with self._lock:
            return {"states": len(self._states), "bytes": self._bytes, "budget_bytes": self.budget_bytes,
                    "saved": self.saved, "restored": self.restored, "dropped": self.dropped}
