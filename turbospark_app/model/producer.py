"""`LlamaProducer`: the engine's LogitProducer / ChunkedPrefillRunner over a LlamaModel.

It owns (or is given) a KVCache and keeps a TOKEN MIRROR beside it: the ids whose K/V the
cache holds, in order, so `len(mirror) == cache.offset` always. A token must be fed at the
cursor (`position == cache.offset`), anything else is a `PositionMismatch`.

`try_reuse_prefix(prompt)` trims cache + mirror to the longest common prefix with the new
prompt — at most len(prompt) - 1 tokens, because the engine must feed the last prompt token to
get fresh logits (it clamps the answer the same way and then feeds from that position) — and
returns that length; the engine then feeds only the rest.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from turbospark_app.engine.errors import EngineError
from turbospark_app.engine.kv_prefix import common_prefix_len

from .kv_cache import KVCache
from .reference.forward import ForwardCancelled, LlamaModel


class PositionMismatch(EngineError):
    """A token was fed at a position other than the KV cursor."""

    def __init__(self, position: int, expected: int) -> None:
        self.position = position
        self.expected = expected
        super().__init__(
            f"token fed at position {position}, but the KV cache holds {expected} tokens "
            f"(the next position must be {expected}; reset() or try_reuse_prefix() first)"
        )


class LlamaProducer:
    """LogitProducer + ChunkedPrefillRunner (+ the session pool's PooledProducer) for a model."""

    def __init__(self, model: LlamaModel, cache: KVCache | None = None) -> None:
        self.model = model
        self._cache = cache if cache is not None else model.new_cache()
        if self._cache.offset:
            raise ValueError("LlamaProducer needs an empty KV cache (its token mirror starts empty)")
        self._mirror: list[int] = []
        self._vocab = model.config.vocab_size

    # -- state --------------------------------------------------------------------------------

    @property
    def cache(self) -> KVCache:
        return self._cache

    @property
    def mirror(self) -> tuple[int, ...]:
        """The token ids whose K/V the cache holds (a read-only copy)."""
        return tuple(self._mirror)

    @property
    def kv_nbytes(self) -> int:
        """Bytes allocated by the KV cache."""
        return self._cache.nbytes

    @property
    def max_context(self) -> int:
        return self._cache.max_context

    def _check(self, position: int, n: int) -> None:
        expected = self._cache.offset
        if position != expected:
            raise PositionMismatch(position, expected)
        if len(self._mirror) != expected:  # only after an external trim of the cache
            raise EngineError(
                f"token mirror ({len(self._mirror)} ids) and KV cache ({expected}) disagree"
            )

    def _check_logits(self, logits_out: np.ndarray) -> None:
        if (
            logits_out.dtype != np.float32
            or logits_out.shape != (self._vocab,)
            or not logits_out.flags.c_contiguous
            or not logits_out.flags.writeable
        ):
            raise ValueError(
                f"logits_out must be a writable contiguous float32 array of shape ({self._vocab},), "
                f"got {logits_out.dtype} {logits_out.shape}"
            )

    # -- LogitProducer ------------------------------------------------------------------------

    def produce(self, token: int, position: int, logits_out: np.ndarray) -> None:
        """Feed `token` at `position`; write the next-token logits into `logits_out`."""
        self._check(position, 1)
        self._check_logits(logits_out)
        self.model.forward((token,), self._cache, True, logits_out)
        self._mirror.append(int(token))

    @property
    def batchable(self) -> bool:
        """Decode steps of several producers can run as one pass (`produce_batch`)."""
        return True

    def produce_prefill(self, token: int, position: int, logits_out: np.ndarray) -> None:
        """Feed a prompt token; the output head is skipped (`logits_out` is left untouched)."""
        self._check(position, 1)
        self.model.forward((token,), self._cache, False, prompt=True)
        self._mirror.append(int(token))

    def produce_chunk(
        self, tokens: Sequence[int], position: int, logits_out: np.ndarray | None
    ) -> None:
        """Feed `tokens` at [position, position+len); logits of the LAST one when asked."""
        self.produce_chunk_cancellable(tokens, position, logits_out, None)

    def produce_chunk_cancellable(
        self,
        tokens: Sequence[int],
        position: int,
        logits_out: np.ndarray | None,
        cancel: Callable[[], bool] | None,
    ) -> bool:
        """`produce_chunk`, polling `cancel` between layers. False = stopped, nothing committed
        (cache and mirror keep the tokens before `position`)."""
        ids = [int(t) for t in tokens]
        if not ids:
            raise ValueError("produce_chunk needs at least one token")
        self._check(position, len(ids))
        if logits_out is not None:
            self._check_logits(logits_out)
        try:
            self.model.forward(ids, self._cache, logits_out is not None, logits_out, cancel, prompt=True)
        except ForwardCancelled:
            return False
        self._mirror.extend(ids)
        return True

    def produce_rows(self, tokens: Sequence[int], position: int, rows_out: np.ndarray) -> None:
        """Feed `tokens` at [position, position+T) in one pass (a draft's verification); the
        logits after EVERY token into `rows_out` (T, vocab). See `LlamaBase.forward_rows`."""
        ids = [int(t) for t in tokens]
        if not ids:
            raise ValueError("produce_rows needs at least one token")
        self._check(position, len(ids))
        if (rows_out.dtype != np.float32 or rows_out.shape != (len(ids), self._vocab)
                or not rows_out.flags.c_contiguous or not rows_out.flags.writeable):
            raise ValueError(
                f"rows_out must be a writable contiguous float32 array of shape ({len(ids)}, "
                f"{self._vocab}), got {rows_out.dtype} {rows_out.shape}")
        self.model.forward_rows(ids, self._cache, rows_out)
        self._mirror.extend(ids)

    def trim(self, n: int) -> None:
        """Keep the first `n` tokens (cache and mirror): the rows of a rejected draft go."""
        if not 0 <= n <= len(self._mirror):
            raise ValueError(f"cannot trim to {n}: the producer holds {len(self._mirror)} tokens")
        self._cache.trim(n)
        del self._mirror[n:]

    def reset(self) -> None:
        """Forget every token (the memory is kept for the next prompt; see `release`)."""
        self._cache.trim(0)
        self._mirror.clear()

    def try_reuse_prefix(self, prompt_ids: Sequence[int]) -> int:
        """Trim cache + mirror to their longest common prefix with `prompt_ids`; return it.

        Capped at len(prompt_ids) - 1: the last prompt token is always fed again so that its
        logits (the first reply token's distribution) are fresh.
        """
        mirror = self._mirror
        i = common_prefix_len(mirror, [int(t) for t in prompt_ids[: len(prompt_ids) - 1]])
        self._cache.trim(i)
        del mirror[i:]
        return i

    def session_slot_evicted(self) -> bool:
        """Always False: this producer is one slot; the session pool reports evictions."""
        return False

    # -- PooledProducer -----------------------------------------------------------------------

    def release(self) -> None:
        """Reset AND give the KV memory back."""
        self._mirror.clear()
        self._cache.release()


def innermost(producer: object) -> object:
    """The producer under any wrappers (a session slot's, a log-probability tap's)."""
    while True:
        inner = getattr(producer, "inner_producer", None)
        if inner is None:
            return producer
        producer = inner


def produce_batch(steps: Sequence[tuple[LlamaProducer, int, int, np.ndarray]]) -> None:
    """One decode step for each (producer, token, position, logits_out): the producers of one
    model run as ONE `forward_batch` (their caches' rows adjacent in one KV arena), each
    exactly as its own `produce` would."""
    groups: dict[int, list[tuple[LlamaProducer, int, int, np.ndarray]]] = {}
    for step in steps:
        producer, token, position, logits_out = step
        producer._check(position, 1)
        producer._check_logits(logits_out)
        groups.setdefault(id(producer.model), []).append(step)
    for group in groups.values():
        model = group[0][0].model
        logits = np.empty((len(group), model.config.vocab_size), np.float32)  # (B, vocab)
        model.forward_batch([t for _, t, _, _ in group], [p.cache for p, _, _, _ in group], logits)
        for row, (producer, token, _, logits_out) in zip(logits, group):
            np.copyto(logits_out, row)
            producer._mirror.append(int(token))
