"""Chunked prefill (reference: `raw_completion_chunked`): the prompt goes to the producer in
whole chunks (`prefill_chunk_spans`), one `produce_chunk` call each, then the shared decode.

Only the last chunk asks for logits (`decode` samples from the last prompt token's), so
every earlier chunk may skip the output head. Cancel is polled after each committed chunk and,
when the producer is an `InterruptibleChunkRunner`, inside the chunk too (between layers): a
chunk stopped midway is not committed, so `kv_position` stays the tokens really committed.
"""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from .config import GenerationConfig
from .foundation import DEFAULT_PREFILL_CHUNK, prefill_chunk_spans
from .producer import ChunkedPrefillRunner
from .progress import PrefillProgress, RawDecodeResult
from .raw_completion import (
    NEVER,
    CancelFlag,
    ProgressCallback,
    RawCompletionStream,
    call_producer,
    cancelled_during_prefill,
    decode_after_prefill,
    drive_raw_completion,
    prepare_run,
    reuse_or_reset,
)
from .selection import Sampler
from .tokenizer import EngineTokenizer


def _stream_chunked(
    producer: ChunkedPrefillRunner,
    tokenizer: EngineTokenizer,
    prompt: list[int],
    config: GenerationConfig,
    vocab_size: int,
    cancel: CancelFlag,
    sampler: Sampler,
    chunk_size: int,
) -> RawCompletionStream:
    reused = reuse_or_reset(producer, prompt)
    logits = np.zeros(vocab_size, dtype=np.float32)  # one buffer for the whole run
    prefill_start = time.perf_counter()
    # Same bookkeeping as the off mode: cursor and history start past the reused ids.
    position = reused
    history = prompt[:reused]
    total = len(prompt)
    fresh = prompt[reused:]  # never empty: reuse is clamped to len - 1
    interruptible = getattr(producer, "produce_chunk_cancellable", None)
    for start, end in prefill_chunk_spans(len(fresh), chunk_size):
        chunk = fresh[start:end]
        out = logits if end == len(fresh) else None
        committed = True
        if interruptible is not None and cancel is not NEVER:
            committed = call_producer(interruptible, chunk, position, out, cancel)
        else:
            call_producer(producer.produce_chunk, chunk, position, out)
        if committed:
            position += len(chunk)
            history.extend(chunk)
            yield PrefillProgress(position, total)
        if not committed or cancel():
            evicted = call_producer(producer.session_slot_evicted)
            return cancelled_during_prefill(
                history, position, total, prefill_start, reused, bool(evicted)
            )
    return (
        yield from decode_after_prefill(
            producer, tokenizer, config, sampler, logits, history, position, total,
            prefill_start, reused, cancel,
        )
    )


def stream_raw_completion_chunked(
    producer: ChunkedPrefillRunner,
    tokenizer: EngineTokenizer,
    prompt_ids: Sequence[int],
    config: GenerationConfig,
    max_context: int,
    vocab_size: int,
    cancel: CancelFlag = NEVER,
    chunk_size: int = DEFAULT_PREFILL_CHUNK,
) -> RawCompletionStream:
    """The chunked-prefill step loop; same contract as `stream_raw_completion`.

    Also checked at call time: chunk_size >= 1 (ValueError) and that the producer has
    `produce_chunk` (TypeError).
    """
    sampler = prepare_run(prompt_ids, config, max_context, vocab_size)
    if chunk_size < 1:
        raise ValueError(f"prefill chunk size must be >= 1 (got {chunk_size})")
    if not callable(getattr(producer, "produce_chunk", None)):
        raise TypeError(f"{type(producer).__name__} has no produce_chunk: it cannot prefill in chunks")
    return _stream_chunked(
        producer, tokenizer, list(prompt_ids), config, vocab_size, cancel, sampler, chunk_size
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
) -> RawDecodeResult:
    """Prefill in chunks of `chunk_size`, then decode. Blocking."""
    return run_raw_completion_chunked_cancellable(
        producer, tokenizer, prompt_ids, config, max_context, vocab_size, NEVER, on_progress,
        chunk_size=chunk_size,
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
) -> RawDecodeResult:
    """`run_raw_completion_chunked`, polling `cancel` per chunk, per decoded token and during
    pacing waits. Cancelling is not an error: the result says CANCELLED."""
    stream = stream_raw_completion_chunked(
        producer, tokenizer, prompt_ids, config, max_context, vocab_size, cancel, chunk_size
    )
    return drive_raw_completion(stream, config.rate, cancel, on_progress)
