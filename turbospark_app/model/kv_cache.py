"""The KV cache: per-layer keys and values with an `offset` cursor, grown in steps.

One float32 buffer of shape (n_layers, 2, n_kv_heads, capacity, head_dim) holds every layer's
K (index 0) and V (index 1). Per layer, `layer(l)` is a (2, n_kv, capacity, head_dim) view, so
writing a token's K and V is one assignment and `[:, :, :offset]` is a cheap strided view.

Capacity starts at 0 and grows on demand (`reserve`) in multiples of `step` tokens — by at least
`step` or a quarter of the current capacity — never beyond `max_context`. The cache is
caller-owned and mutated in place; the model writes positions [offset, offset+T) of every layer
and then calls `advance(T)`.
"""

from __future__ import annotations

import numpy as np

from turbospark_app.engine.errors import EngineError


class KVCacheFull(EngineError):
    """The context window is full: no room for the requested tokens."""

    def __init__(self, needed: int, max_context: int) -> None:
        self.needed = needed
        self.max_context = max_context
        super().__init__(
            f"the KV cache is full: {needed} tokens needed, the context holds {max_context}"
        )


class KVCache:
    """Keys and values of every layer for the tokens fed so far (`offset` of them)."""

    def __init__(
        self,
        n_layers: int,
        n_kv_heads: int,
        head_dim: int,
        max_context: int,
        step: int = 256,
    ) -> None:
        if step <= 0 or max_context <= 0:
            raise ValueError("step and max_context must be positive")
        self.n_layers = n_layers
        self.n_kv_heads = n_kv_heads
        self.head_dim = head_dim
        self.max_context = max_context
        self.step = step
        self._offset = 0
        self._buf = np.empty((n_layers, 2, n_kv_heads, 0, head_dim), np.float32)
        self._layers: list[np.ndarray] = list(self._buf)

    # -- size -------------------------------------------------------------------------------

    @property
    def offset(self) -> int:
        """How many positions hold valid K/V (the next token goes at this position)."""
        return self._offset

    @property
    def capacity(self) -> int:
        """Allocated positions (>= offset)."""
        return self._buf.shape[3]

    @property
    def nbytes(self) -> int:
        """Bytes allocated (not just used)."""
        return self._buf.nbytes

    @property
    def dtype(self) -> np.dtype:
        return self._buf.dtype

    def reserve(self, n_tokens: int) -> None:
        """Make room for `n_tokens` positions in total (KVCacheFull beyond max_context)."""
        cap = self.capacity
        if n_tokens <= cap:
            return
        if n_tokens > self.max_context:
            raise KVCacheFull(n_tokens, self.max_context)
        want = max(n_tokens, cap + max(self.step, cap // 4))
        new_cap = min(-(-want // self.step) * self.step, self.max_context)
        self._realloc(new_cap)

    def _realloc(self, new_cap: int) -> None:
        new = np.empty(
            (self.n_layers, 2, self.n_kv_heads, new_cap, self.head_dim), np.float32
        )  # (L, 2, n_kv, capacity, head_dim)
        n = self._offset
        if n:
            new[:, :, :, :n] = self._buf[:, :, :, :n]
        self._buf = new
        self._layers = list(new)

    # -- access -----------------------------------------------------------------------------

    def layer(self, index: int) -> np.ndarray:
        """Layer `index`'s K/V storage, (2, n_kv, capacity, head_dim); positions >= offset are junk.

        The view is invalidated by `reserve`/`shrink`/`release` when they reallocate.
        """
        return self._layers[index]

    def keys(self, index: int) -> np.ndarray:
        """Valid keys of a layer: (n_kv, offset, head_dim) view."""
        return self._layers[index][0, :, : self._offset]

    def values(self, index: int) -> np.ndarray:
        """Valid values of a layer: (n_kv, offset, head_dim) view."""
        return self._layers[index][1, :, : self._offset]

    # -- cursor -----------------------------------------------------------------------------

    def advance(self, n: int) -> None:
        """Mark `n` more positions (already written in every layer) as valid."""
        if n < 0 or self._offset + n > self.capacity:
            raise ValueError(f"cannot advance by {n}: offset {self._offset}, capacity {self.capacity}")
        self._offset += n

    def trim(self, n: int) -> None:
        """Keep only the first `n` positions (0 <= n <= offset). Memory is kept for reuse."""
        if not 0 <= n <= self._offset:
            raise ValueError(f"cannot trim to {n}: the cache holds {self._offset} positions")
        self._offset = n

    def shrink(self) -> None:
        """Give back memory beyond the valid positions (rounded up to a step)."""
        new_cap = min(-(-self._offset // self.step) * self.step, self.max_context)
        if new_cap < self.capacity:
            self._realloc(new_cap)

    def release(self) -> None:
        """Trim to 0 and free every allocation."""
        self._offset = 0
        self._realloc(0)

    def __repr__(self) -> str:
        return (
            f"KVCache(offset={self._offset}, capacity={self.capacity}, "
            f"max_context={self.max_context}, nbytes={self.nbytes})"
        )
