"""Small shared helpers of the engine (reference: `foundation`)."""

from __future__ import annotations

DEFAULT_PREFILL_CHUNK = 512  # llama.cpp's n_ubatch: Stop reaches inside a chunk on the CPU


def prefill_chunk_spans(n_tokens: int, chunk_size: int) -> list[tuple[int, int]]:
    """Split [0, n_tokens) into half-open spans of at most `chunk_size` tokens.

    The spans cover every index exactly once, in order; only the last may be shorter.
    `n_tokens == 0` gives no spans. Raises ValueError when chunk_size < 1 or n_tokens < 0.
    """
    if chunk_size < 1:
        raise ValueError(f"prefill chunk size must be >= 1 (got {chunk_size})")
    if n_tokens < 0:
        raise ValueError(f"token count must be >= 0 (got {n_tokens})")
    return [(start, min(start + chunk_size, n_tokens)) for start in range(0, n_tokens, chunk_size)]
