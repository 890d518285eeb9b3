"""The producer interface: whatever turns tokens into logits (reference: `producer::LogitProducer`).

`logits_out` is a caller-owned float32 array of shape (vocab_size,), written in place. A
producer may also offer `produce_lent`, which LENDS a decode step's logits to the buffer instead
of copying them, and `logits_now(logits_out)`, the array holding them now: the step loop then
reads that (`LlamaCppProducer`: llama.cpp's own row, copied into the buffer only if the
context decodes something else first; `lent_logits`).
Positions are absolute KV positions; a producer must reject a position that is not its cursor.
"""

from __future__ import annotations

from typing import Callable, Protocol, Sequence, runtime_checkable

import numpy as np


@runtime_checkable
class LogitProducer(Protocol):
    def produce(self, token: int, position: int, logits_out: np.ndarray) -> None:
        """Feed `token` at `position` and write the next-token logits into `logits_out`."""
        ...

    def produce_prefill(self, token: int, position: int, logits_out: np.ndarray) -> None:
        """Feed a prompt token whose logits nobody reads: the producer may skip its output head."""
        ...

    def reset(self) -> None:
        """Forget all state: the next token is fed at position 0."""
        ...

    def try_reuse_prefix(self, prompt_ids: Sequence[int]) -> int:
        """How many leading ids of `prompt_ids` the producer's state already holds.

        The producer trims its state to that length; 0 = no reuse (the caller then resets).
        """
        ...

    def session_slot_evicted(self) -> bool:
        """True when serving this turn evicted a DIFFERENT session's still-usable state."""
        ...


@runtime_checkable
class ChunkedPrefillRunner(LogitProducer, Protocol):
    def produce_chunk(
        self, tokens: Sequence[int], position: int, logits_out: np.ndarray | None
    ) -> None:
        """Feed `tokens` at positions [position, position + len(tokens)) in one call.

        When `logits_out` is not None, write the logits after the chunk's LAST token into it;
        when None, the producer may skip its output head.
        """
        ...


@runtime_checkable
class InterruptibleChunkRunner(ChunkedPrefillRunner, Protocol):
    def produce_chunk_cancellable(
        self,
        tokens: Sequence[int],
        position: int,
        logits_out: np.ndarray | None,
        cancel: Callable[[], bool],
    ) -> bool:
        """`produce_chunk`, polling `cancel` inside the chunk (e.g. between layers).

        Returns True when the chunk was committed, False when `cancel` stopped it first: then
        NOTHING of the chunk is committed (the KV cursor stays at `position`).
        """
        ...


@runtime_checkable
class DraftVerifier(LogitProducer, Protocol):
    """A producer that can verify a speculative draft (prompt lookup, `engine.speculation`)."""

    def produce_rows(self, tokens: Sequence[int], position: int, rows_out: np.ndarray) -> None:
        """Feed `tokens` at [position, position + T) in ONE pass; write the logits after EVERY
        token into `rows_out` (T, vocab_size): row t is the distribution of the token after t."""
        ...

    def trim(self, n: int) -> None:
        """Keep only the first `n` fed tokens (KV rows and token mirror); n <= the cursor."""
        ...


def lent_logits(producer: object) -> Callable[[np.ndarray], np.ndarray] | None:
    """The producer's `logits_now` (the array holding a buffer's logits now), None when it
    always writes its buffers (no `produce_lent`)."""
    now = getattr(producer, "logits_now", None)
    return now if callable(now) and callable(getattr(producer, "produce_lent", None)) else None
