"""Chunked prefill (reference: `raw_completion_chunked`): the prompt goes to the producer in
whole chunks (`prefill_chunk_spans`), one `produce_chunk` call each, then the shared decode.

Only the last chunk asks for logits (`decode` samples from the last prompt token's), so
every earlier chunk may skip the output head. Cancel is polled after each committed chunk and,
when the producer is an `InterruptibleChunkRunner`, inside the chunk too (between layers): a
chunk stopped midway is not committed, so `kv_position` stays the tokens really committed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from .config import GenerationConfig
from .foundation import DEFAULT_PREFILL_CHUNK, prefill_chunk_spans
from .producer import ChunkedPrefillRunner
from .progress import RawDecodeResult
from .raw_completion import (
    NEVER,
    CancelFlag,
    ProgressCallback,
    RawCompletionStream,
    call_producer,
    check_speculation,
    drive_raw_completion,
    prepare_run,
    stream_prefill_then_decode,
)
from .speculation import LookupSpeculation
from .tokenizer import EngineTokenizer


@dataclass(frozen=True)
class Chunked:
    """Chunked prefill: one `produce_chunk` per span; interruptible between layers when the
    producer has `produce_chunk_cancellable` and the run can be cancelled."""

    chunk_size: int

    def spans(self, n_fresh: int) -> Iterable[tuple[int, int]]:
        return prefill_chunk_spans(n_fresh, self.chunk_size)

    def feed(
        self, producer: Any, ids: list[int], position: int, logits: np.ndarray, last: bool,
        cancel: CancelFlag,
    ) -> bool:
        out = logits if last else None  # earlier chunks may skip the output head
        interruptible = getattr(producer, "produce_chunk_cancellable", None)
        if interruptible is not None and cancel is not NEVER:
            return bool(call_producer(interruptible, ids, position, out, cancel))
        call_producer(producer.produce_chunk, ids, position, out)
        return True


def stream_raw_completion_chunked(
    producer: ChunkedPrefillRunner,
    tokenizer: EngineTokenizer,
    prompt_ids: Sequence[int],
    config: GenerationConfig,
    max_context: int,
    vocab_size: int,
    cancel: CancelFlag = NEVER,
    chunk_size: int = DEFAULT_PREFILL_CHUNK,
    speculation: LookupSpeculation | None = None,
) -> RawCompletionStream:
    """The chunked-prefill step loop; same contract as `stream_raw_completion`.

    Also checked at call time: chunk_size >= 1 (ValueError) and that the producer has
    `produce_chunk` (TypeError), and `produce_rows` + `trim` when speculating (TypeError).
    """
    sampler = prepare_run(prompt_ids, config, max_context, vocab_size)
    check_speculation(producer, speculation)
    if chunk_size < 1:
        raise ValueError(f"prefill chunk size must be >= 1 (got {chunk_size})")
    if not callable(getattr(producer, "produce_chunk", None)):
        raise TypeError(f"{type(producer).__name__} has no produce_chunk: it cannot prefill in chunks")
    return stream_prefill_then_decode(
        producer, tokenizer, list(prompt_ids), config, vocab_size, cancel, sampler,
        Chunked(chunk_size), speculation,
    )


def run_raw_completion_chunked(
    producer: ChunkedPrefillRunner,
    tokenizer: EngineTokenizer,
    prompt_ids: Sequence[int],
    config: GenerationConfig,
    max_context: int,
    vocab_size: int,
    on_progress: ProgressCallback | None = None,
    *,
    chunk_size: int = DEFAULT_PREFILL_CHUNK,
    speculation: LookupSpeculation | None = None,
) -> RawDecodeResult:
    """Prefill in chunks of `chunk_size`, then decode. Blocking."""
    return run_raw_completion_chunked_cancellable(
        producer, tokenizer, prompt_ids, config, max_context, vocab_size, NEVER, on_progress,
        chunk_size=chunk_size, speculation=speculation,
    )


def run_raw_completion_chunked_cancellable(
    producer: ChunkedPrefillRunner,
    tokenizer: EngineTokenizer,
    prompt_ids: Sequence[int],
    config: GenerationConfig,
    max_context: int,
    vocab_size: int,
    cancel: CancelFlag,
    on_progress: ProgressCallback | None = None,
    *,
    chunk_size: int = DEFAULT_PREFILL_CHUNK,
    speculation: LookupSpeculation | None = None,
) -> RawDecodeResult:
    """`run_raw_completion_chunked`, polling `cancel` per chunk, per decoded token and during
    pacing waits. Cancelling is not an error: the result says CANCELLED."""
    stream = stream_raw_completion_chunked(
        producer, tokenizer, prompt_ids, config, max_context, vocab_size, cancel, chunk_size,
        speculation,
    )
    return drive_raw_completion(stream, config.rate, cancel, on_progress)
