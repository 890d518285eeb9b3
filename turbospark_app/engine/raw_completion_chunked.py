"""Chunked prefill (reference: `raw_completion_chunked`): the prompt goes to the producer in
whole chunks (`prefill_chunk_spans`), one `produce_chunk` call each, then the shared decode.

Only the last chunk asks for logits (`decode` samples from the last prompt token's), so
every earlier chunk may skip the output head. Cancel is polled after each committed chunk and,
when the producer is an `InterruptibleChunkRunner`, inside the chunk too (between layers): a
chunk stopped midway is not committed, so `kv_position` stays the tokens really committed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Protocol, Sequence

import numpy as np

from .config import GenerationConfig
from .foundation import DEFAULT_PREFILL_CHUNK, prefill_chunk_spans
from .producer import ChunkedPrefillRunner
from .progress import PrefillStep, RawDecodeResult
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


class ChunkLimit(Protocol):
    """How many prompt tokens the next chunk may take (None: no limit beyond the chunk size),
    told how long each chunk took (`chunk_budget.ChunkBudget`). `batched`: the chunk goes into
    the other streams' forward pass (`offered` then says how many tokens it took there)."""

    def limit(self, batched: bool = False) -> int | None: ...

    def observe(self, tokens: int, seconds: float) -> None: ...

    def offered(self, tokens: int) -> None: ...


@dataclass(frozen=True)
class Chunked:
    """Chunked prefill: one `produce_chunk` per span; interruptible inside when the producer
    has `produce_chunk_cancellable` and the run can be cancelled. With a `limit`, each span is
    sized when it is due (other streams decoding meanwhile keep their pace); `batched` (a
    producer whose steps a driver may batch): a span the limit cut is offered to the driver as
    a `PrefillStep`, to go into the other streams' forward pass."""

    chunk_size: int
    limit: ChunkLimit | None = None
    batched: bool = False

    def spans(self, n_fresh: int) -> Iterable[tuple[int, int]]:
        if self.limit is None:
            return prefill_chunk_spans(n_fresh, self.chunk_size)
        return self._sized_spans(n_fresh)

    def _sized_spans(self, n_fresh: int) -> Iterator[tuple[int, int]]:
        assert self.limit is not None
        start = 0
        while start < n_fresh:
            cap = self.limit.limit(batched=True) if self.batched else self.limit.limit()
            size = self.chunk_size if cap is None else max(1, min(self.chunk_size, int(cap)))
            end = min(n_fresh, start + size)
            yield start, end
            start = end

    def offer(
        self, producer: Any, ids: list[int], position: int, logits: np.ndarray, last: bool,
        cancel: CancelFlag,
    ) -> PrefillStep | None:
        # Only a span cut for streams running beside it (the limit says crowded), and text: an
        # image's rows go in by its own encode and embedding pass.
        if not self.batched or self.limit is None or min(ids) < 0:
            return None
        if self.limit.limit(batched=True) is None:
            return None
        self.limit.offered(len(ids))
        return PrefillStep(producer, tuple(ids), position, logits if last else None,
                           None if cancel is NEVER else cancel)

    def feed(
        self, producer: Any, ids: list[int], position: int, logits: np.ndarray, last: bool,
        cancel: CancelFlag,
    ) -> bool:
        out = logits if last else None  # earlier chunks may skip the output head
        began = time.perf_counter()
        interruptible = getattr(producer, "produce_chunk_cancellable", None)
        if interruptible is not None and cancel is not NEVER:
            done = bool(call_producer(interruptible, ids, position, out, cancel))
        else:
            call_producer(producer.produce_chunk, ids, position, out)
            done = True
        if done and self.limit is not None:
            self.limit.observe(len(ids), time.perf_counter() - began)
        return done


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
    chunk_limit: ChunkLimit | None = None,
) -> RawCompletionStream:
    """The chunked-prefill step loop; same contract as `stream_raw_completion`. `chunk_limit`
    sizes each chunk when it is due (e.g. small while other streams decode).

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
        Chunked(chunk_size, chunk_limit, bool(getattr(producer, "batchable", False))), speculation,
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
