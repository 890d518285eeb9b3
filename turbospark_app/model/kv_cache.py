"""The KV cache: per-layer keys and values with an `offset` cursor, grown in steps.

Two float32 buffers hold every layer:

    keys, TRANSPOSED:  (n_layers, n_kv_heads, head_dim, capacity)
    values:            (n_layers, n_kv_heads, capacity, head_dim)

Per layer, `k_store(l)` is a (n_kv, head_dim, capacity) view and `v_store(l)` a
(n_kv, capacity, head_dim) view. A cache made with `keys_transposed=False` (the compact
model's: ONNX Runtime's attention reads and writes it in place) keeps keys as
(n_layers, n_kv_heads, capacity, head_dim), like the values. Keys are kept transposed because attention reads them as
`q @ K^T`: with K^T rows contiguous along positions, both decode products (q . K and p . V)
are BLAS matrix-vector products that stream memory row by row — measured ~8% faster than a
(n_kv, capacity, head_dim) key layout on the decode step's attention. Slicing the first
`offset` positions is a view either way; appending a token writes head_dim strided floats.

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
        keys_transposed: bool = True,
    ) -> None:
        if step <= 0 or max_context <= 0:
            raise ValueError("step and max_context must be positive")
        self.n_layers = n_layers
        self.n_kv_heads = n_kv_heads
        self.head_dim = head_dim
        self.max_context = max_context
        self.step = step
        self.keys_transposed = keys_transposed
        self.generation = 0  # bumped by every (re)allocation: views and bindings go stale
        self._offset = 0
        self._alloc(0)

    def _alloc(self, capacity: int) -> None:
        v_shape = (self.n_layers, self.n_kv_heads, capacity, self.head_dim)
        if self.keys_transposed:
            self._k = np.empty((self.n_layers, self.n_kv_heads, self.head_dim, capacity), np.float32)
        else:
            self._k = np.empty(v_shape, np.float32)  # (L, n_kv, capacity, head_dim)
        self._v = np.empty(v_shape, np.float32)  # (L, n_kv, capacity, head_dim)
        self.k_layers: list[np.ndarray] = list(self._k)  # per layer (n_kv, hd, cap) or (n_kv, cap, hd)
        self.v_layers: list[np.ndarray] = list(self._v)  # per layer (n_kv, capacity, head_dim)
        self.generation += 1

    # -- size -------------------------------------------------------------------------------

    @property
    def offset(self) -> int:
        """How many positions hold valid K/V (the next token goes at this position)."""
        return self._offset

    @property
    def capacity(self) -> int:
        """Allocated positions (>= offset)."""
        return self._v.shape[2]

    @property
    def nbytes(self) -> int:
        """Bytes allocated (not just used)."""
        return self._k.nbytes + self._v.nbytes

    @property
    def dtype(self) -> np.dtype:
        return self._v.dtype

    def reserve(self, n_tokens: int) -> None:
        """Make room for `n_tokens` positions in total (KVCacheFull beyond max_context)."""
        cap = self.capacity
        if n_tokens <= cap:
            return
        if n_tokens > self.max_context:
            raise KVCacheFull(n_tokens, self.max_context)
        want = max(n_tokens, cap + max(self.step, cap // 4))
        self._realloc(min(-(-want // self.step) * self.step, self.max_context))

    def _realloc(self, new_cap: int) -> None:
        old_k, old_v, n = self._k, self._v, self._offset
        self._alloc(new_cap)
        if n:
            if self.keys_transposed:
                self._k[..., :n] = old_k[..., :n]
            else:
                self._k[:, :, :n] = old_k[:, :, :n]
            self._v[:, :, :n] = old_v[:, :, :n]

    # -- access -----------------------------------------------------------------------------

    def k_store(self, index: int) -> np.ndarray:
        """Layer `index`'s key storage: (n_kv, head_dim, capacity) TRANSPOSED, or
        (n_kv, capacity, head_dim) when made with keys_transposed=False.

        Positions >= offset are junk. Invalidated when `reserve`/`shrink`/`release` reallocate.
        """
        return self.k_layers[index]

    def v_store(self, index: int) -> np.ndarray:
        """Layer `index`'s value storage: (n_kv, capacity, head_dim) (same caveats)."""
        return self.v_layers[index]

    def keys(self, index: int) -> np.ndarray:
        """Valid keys of a layer: (n_kv, offset, head_dim) view."""
        if not self.keys_transposed:
            return self.k_layers[index][:, : self._offset]
        return self.k_layers[index][:, :, : self._offset].transpose(0, 2, 1)

    def values(self, index: int) -> np.ndarray:
        """Valid values of a layer: (n_kv, offset, head_dim) view."""
        return self.v_layers[index][:, : self._offset]

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
        self._alloc(0)

    def __repr__(self) -> str:
        return (
            f"KVCache(offset={self._offset}, capacity={self.capacity}, "
            f"max_context={self.max_context}, nbytes={self.nbytes})"
        )


class ArenaKVCache(KVCache):
    """A KVCache whose storage is one row of a `KVArena` (see there); same contract."""

    def __init__(self, arena: "KVArena") -> None:
        self._arena = arena
        self.row: int | None = None  # the arena row, once this cache holds memory
        super().__init__(arena.n_layers, arena.n_kv_heads, arena.head_dim, arena.max_context,
                         arena.step, keys_transposed=False)

    def _alloc(self, capacity: int) -> None:  # storage is the arena's: no row until reserve()
        self.k_layers, self.v_layers = [], []
        self.generation += 1

    def _attach(self, k: np.ndarray, v: np.ndarray) -> None:
        """Point this cache's layer views at its arena row (the arena reallocated)."""
        assert self.row is not None
        self.k_layers = [k[i, self.row] for i in range(self.n_layers)]  # (n_kv, cap, hd) each
        self.v_layers = [v[i, self.row] for i in range(self.n_layers)]
        self.generation += 1

    @property
    def capacity(self) -> int:
        return self._arena.capacity if self.row is not None else 0

    @property
    def nbytes(self) -> int:
        """This row's share of the arena (the arena's rows all have its capacity)."""
        return self._arena.row_nbytes if self.row is not None else 0

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.float32)

    @property
    def arena(self) -> "KVArena":
        return self._arena

    def reserve(self, n_tokens: int) -> None:
        if self.row is not None and n_tokens <= self.capacity:
            return
        if n_tokens > self.max_context:
            raise KVCacheFull(n_tokens, self.max_context)
        self._arena.make_room(self, n_tokens)

    def shrink(self) -> None:
        self._arena.shrink()

    def release(self) -> None:
        self._offset = 0
        self._arena.leave(self)


class KVArena:
    """The KV storage of several caches in ONE buffer per layer, one row per cache:

        keys, values: (n_layers, rows, n_kv_heads, capacity, head_dim)

    so that the caches of streams decoding at once can be bound as one (B, n_kv, capacity,
    head_dim) tensor per layer (`rows(r0, r1)`) and stepped by one batched forward pass. A
    cache takes a row when it first reserves memory and gives it back on `release` (the rows
    after it move up); every row has the arena's capacity, grown (like a KVCache) to what the
    longest member needs. Growing, adding or dropping a row reallocates and copies the members'
    valid positions: their views go stale (each member's `generation` moves, as after a KVCache
    reallocation). Memory is rows x capacity: a short conversation beside a long one holds the
    long one's room.
    """

    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int, max_context: int,
                 step: int = 256) -> None:
        if step <= 0 or max_context <= 0:
            raise ValueError("step and max_context must be positive")
        self.n_layers, self.n_kv_heads, self.head_dim = n_layers, n_kv_heads, head_dim
        self.max_context, self.step = max_context, step
        self.generation = 0  # bumped by every reallocation (batched bindings go stale)
        self._members: list[ArenaKVCache] = []  # member i holds row i
        self._layout(0, 0)

    def new_cache(self) -> ArenaKVCache:
        """An empty cache stored in this arena (no memory until it reserves some)."""
        return ArenaKVCache(self)

    @property
    def capacity(self) -> int:
        return self._k.shape[3]

    @property
    def n_rows(self) -> int:
        return self._k.shape[1]

    @property
    def row_nbytes(self) -> int:
        return 2 * self.n_layers * self.n_kv_heads * self.capacity * self.head_dim * 4

    @property
    def nbytes(self) -> int:
        return self._k.nbytes + self._v.nbytes

    def rows(self, r0: int, r1: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Per layer, rows [r0, r1) of the keys and of the values: (r1 - r0, n_kv, cap, hd) each."""
        return ([self._k[i, r0:r1] for i in range(self.n_layers)],
                [self._v[i, r0:r1] for i in range(self.n_layers)])

    def make_room(self, cache: ArenaKVCache, n_tokens: int) -> None:
        """Give `cache` a row (a new last one) and at least `n_tokens` positions."""
        n_rows = self.n_rows
        if cache.row is None:
            self._members.append(cache)
            n_rows += 1
        cap = self.capacity
        if n_tokens > cap:
            want = max(n_tokens, cap + max(self.step, cap // 4))
            cap = min(-(-want // self.step) * self.step, self.max_context)
        self._layout(n_rows, cap)

    def gather(self, caches: "list[ArenaKVCache]") -> None:
        """Put `caches` (members of this arena) on adjacent rows, so one batched call binds
        them: unless they already are, they move to rows 0..k-1 in their row order, each
        swapping places with the member there (a copy of both rows' valid positions, once for
        the many steps a batch lasts). Their views go stale (generation moves)."""
        rows = sorted(c.row for c in caches if c.row is not None)
        if len(rows) != len(caches) or rows == list(range(rows[0], rows[0] + len(rows))):
            return
        for target, cache in enumerate(sorted(caches, key=lambda c: c.row)):  # type: ignore[arg-type, return-value]
            if cache.row != target:
                self._swap(target, cache.row)  # type: ignore[arg-type]
        self.generation += 1

    def _swap(self, r1: int, r2: int) -> None:
        a, b = self._members[r1], self._members[r2]
        for buf in (self._k, self._v):  # (L, rows, n_kv, cap, hd)
            first = buf[:, r1, :, : a.offset].copy()
            buf[:, r1, :, : b.offset] = buf[:, r2, :, : b.offset]
            buf[:, r2, :, : a.offset] = first
        self._members[r1], self._members[r2] = b, a
        a.row, b.row = r2, r1
        a._attach(self._k, self._v)
        b._attach(self._k, self._v)

    def leave(self, cache: ArenaKVCache) -> None:
        """`cache` gives its row back: the rows after it move up one (no holes, so memory is
        rows x capacity of the caches holding memory) and unused capacity is freed."""
        if cache in self._members:
            self._members.remove(cache)
            cache.row = None
            cache._alloc(0)
        self.shrink()

    def shrink(self) -> None:
        """Drop capacity beyond the longest member (rounded to a step) and rows nobody holds."""
        need = max((m.offset for m in self._members), default=0)
        cap = min(-(-need // self.step) * self.step, self.max_context) if self._members else 0
        if (len(self._members), cap) != (self.n_rows, self.capacity) and cap <= self.capacity:
            self._layout(len(self._members), cap)

    def _layout(self, n_rows: int, cap: int) -> None:
        """Reallocate as n_rows x cap; member i moves to row i with its valid positions."""
        shape = (self.n_layers, n_rows, self.n_kv_heads, cap, self.head_dim)
        old_k, old_v = getattr(self, "_k", None), getattr(self, "_v", None)
        self._k, self._v = np.empty(shape, np.float32), np.empty(shape, np.float32)
        for row, m in enumerate(self._members):
            n = m.offset
            if n and old_k is not None and old_v is not None and m.row is not None:
                self._k[:, row, :, :n] = old_k[:, m.row, :, :n]
                self._v[:, row, :, :n] = old_v[:, m.row, :, :n]
            m.row = row
            m._attach(self._k, self._v)
        self.generation += 1

    def __repr__(self) -> str:
        return f"KVArena(rows={self.n_rows}, capacity={self.capacity}, nbytes={self.nbytes})"
