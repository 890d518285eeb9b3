"""How big a prompt chunk may be while other streams decode (llama-server's continuous batching
keeps running streams going while a prompt goes in; here the prompt goes in chunks between their
batched steps, each chunk sized to take about `budget_seconds`).

Alone, a prompt goes in whole chunks (llama.cpp's prefill is fastest at its batch size). With
other streams decoding, every chunk is a pause in their token streams: the chunk is cut to what
the measured prefill rate does in `budget_seconds`, so the longest gap between two of their
tokens stays near the budget plus one batched step. The rate is measured on the chunks
themselves (any turn's: one budget per model), so it follows the model and the machine.
"""

from __future__ import annotations

from typing import Callable

DEFAULT_BUDGET_SECONDS = 0.15
_FIRST_CHUNK = 32  # before any rate is known
_SMALLEST = 8


class ChunkBudget:
    """`limit()` for `raw_completion_chunked.Chunked`: None while `crowded()` is False."""

    def __init__(self, crowded: Callable[[], bool], budget_seconds: float = DEFAULT_BUDGET_SECONDS) -> None:
        if budget_seconds <= 0:
            raise ValueError(f"the chunk budget must be > 0 s (got {budget_seconds})")
        self.crowded = crowded
        self.budget_seconds = budget_seconds
        self.rate = 0.0  # prompt tokens per second, a running mean of the last chunks

    def limit(self) -> int | None:
        """The most tokens the next chunk may take (None: as many as the chunk size)."""
        if not self.crowded():
            return None
        if self.rate <= 0:
            return _FIRST_CHUNK
        return max(_SMALLEST, int(self.rate * self.budget_seconds))

    def observe(self, tokens: int, seconds: float) -> None:
        """A chunk of `tokens` took `seconds`."""
        if tokens <= 0 or seconds <= 0:
            return
        rate = tokens / seconds
        self.rate = rate if self.rate <= 0 else 0.7 * self.rate + 0.3 * rate
