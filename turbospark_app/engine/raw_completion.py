"""The raw-completion prefill + decode loop (reference: `raw_completion.rs`).

Two layers. The STEP LOOP, `stream_raw_completion`, is a generator: it yields progress
events and `PaceWait(until)` (instead of sleeping) and returns the `RawDecodeResult` as
`StopIteration.value`. The blocking calls, `run_raw_completion*`, drive it: progress goes
to `on_progress`, waits are slept with the rate config's clock/sleep in short slices.

"Off" prefill feeds the prompt one token at a time; `raw_completion_chunked` feeds whole
chunks. Both run the one loop `stream_prefill_then_decode`, the feeding a `PrefillStrategy`
parameter, so the modes cannot drift.

Invariant: `len(kv_backed_token_ids) == kv_position`. A token is KV-resident only once it
has been fed to the producer, so the last sampled token (emitted, never fed) is not listed;
neither is a stop token, which is never fed at all.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Generator, Iterable, Protocol, Sequence, TypeVar

import numpy as np

from .admission import check_admission, check_rate, check_speculation, prepare_run  # noqa: F401 (callers import them here)
from .config import GenerationConfig, RateConfig
from .errors import EngineError, ProducerError
from .kv_prefix import media_span_end
from .pacing import THERMAL_POLL_TOKENS, Pacer, wait_until
from .power import MemoryPressure, ThermalLevel, stepped_cap
from .producer import LogitProducer, lent_logits
from .progress import (
    DecodeStep,
    PaceWait,
    PrefillProgress,
    PrefillStep,
    RawDecodeProgress,
    RawDecodeResult,
    StopReason,
)
from .selection import Sampler, draft_within
from .speculation import LookupDrafter, LookupSpeculation, Verifying
from .token_sink import TokenSink
from .tokenizer import EngineTokenizer

CancelFlag = Callable[[], bool]
"""The predicate a cancellable run polls; True means stop."""

ProgressCallback = Callable[[RawDecodeProgress], None]

RawCompletionStream = Generator[RawDecodeProgress | PaceWait | DecodeStep | PrefillStep, Any, RawDecodeResult]
"""Yields progress events, PaceWait, DecodeStep and PrefillStep; returns the result (StopIteration.value)."""

_T = TypeVar("_T")


def _never() -> bool:
    return False


# What the non-cancellable entry points pass: always False, so they run the same steps.
NEVER: CancelFlag = _never


def call_producer(method: Callable[..., _T], *args: object) -> _T:
    """Call a producer method, wrapping any non-engine failure as ProducerError (cause kept)."""
    try:
        return method(*args)
    except EngineError:
        raise
    except Exception as e:
        raise ProducerError(e) from e


def reuse_or_reset(producer: LogitProducer, prompt_ids: Sequence[int]) -> int:
    """How many leading prompt tokens to continue from; resets the producer when none.

    Clamped to len - 1: `decode` samples from the logits of the last prompt token, so at
    least that one must be fed, or it would sample from the PREVIOUS turn's logits.
    """
    reused = call_producer(producer.try_reuse_prefix, prompt_ids)
    reused = max(0, min(int(reused), len(prompt_ids) - 1))
    if reused == 0:
        call_producer(producer.reset)
    return reused


def cancelled_during_prefill(
    history: list[int],
    position: int,
    prompt_tokens: int,
    prefill_start: float,
    reused: int,
    session_slot_evicted: bool,
) -> RawDecodeResult:
    """The result of a run cancelled before decoding began (shared by both prefill modes).

    Nothing to flush: the sink does not exist until `decode`. `prefill_start` is a
    `time.perf_counter()` reading.
    """
    return RawDecodeResult(
        prompt_tokens=prompt_tokens,
        new_tokens=0,
        prefill_seconds=time.perf_counter() - prefill_start,
        # Zero rather than unmeasured: a caller dividing tokens by seconds must see no rate.
        decode_seconds=0.0,
        reason=StopReason.CANCELLED,
        kv_position=position,
        kv_backed_token_ids=history,
        reused_prefix_tokens=reused,
        session_slot_evicted=session_slot_evicted,
        peak_memory_pressure=MemoryPressure.NORMAL,  # decoding never started: nothing polled
    )


def _read_probes(rate: RateConfig) -> tuple[ThermalLevel, MemoryPressure]:
    thermal = rate.thermal_probe() if rate.thermal_probe is not None else ThermalLevel.NOMINAL
    memory = rate.memory_probe() if rate.memory_probe is not None else MemoryPressure.NORMAL
    return ThermalLevel(thermal), MemoryPressure(memory)


def forward_step(producer: LogitProducer, token: int, position: int, logits: np.ndarray,
                 lend_row: bool = True) -> Generator[DecodeStep, Any, None]:
    """One decode step's forward pass. A batchable producer's step is first offered to the
    driver (`DecodeStep`): a batching driver that ran it sends back True. `lend_row` False:
    the row is copied into `logits` even where it could be lent."""
    if getattr(producer, "batchable", False):
        if (yield DecodeStep(producer, token, position, logits)):
            return
    # the row lent, not copied (`producer.py`)
    lend = getattr(producer, "produce_lent", None) if lend_row else None
    call_producer(producer.produce if lend is None else lend, token, position, logits)


def decode(
    producer: LogitProducer,
    tokenizer: EngineTokenizer,
    config: GenerationConfig,
    sampler: Sampler,
    logits: np.ndarray,
    history: list[int],
    position: int,
    prompt_tokens: int,
    prefill_seconds: float,
    cancel: CancelFlag,
    speculation: LookupSpeculation | None = None,
) -> RawCompletionStream:
    """The decode loop shared by both prefill modes: sample, commit, pace, produce.

    `logits` holds the last prompt token's logits; `history` / `position` describe the KV.
    Returns a result with reused_prefix_tokens 0 and session_slot_evicted False: the
    prefill loop that knows them patches them.

    `speculation` (prompt lookup): a forward pass may feed the sampled token plus drafts
    (`produce_rows`). Each row is then sampled in order exactly as a plain step's logits would
    be, each token committed, paced and cancel-polled on its own; a sample equal to the next
    draft is already fed, anything else ends the pass and the unconfirmed rows are trimmed.
    Without drafts (no match, not paying, crowded) the step is the plain `forward_step`.
    """
    decode_start = time.perf_counter()
    sink = TokenSink(tokenizer, config, history)
    rate = config.rate
    # The WORST memory pressure seen, so a spike between two looks is still reported.
    peak = MemoryPressure.NORMAL
    pacer: Pacer | None = None
    if rate.is_active():  # inactive: no pacer, no probe, no clock call at all
        thermal, memory = _read_probes(rate)
        peak = max(peak, memory)
        pacer = Pacer(stepped_cap(rate.max_tokens_per_sec, thermal, memory), rate.clock())
    # ONE poll for both probes: they share the ladder, so they must describe the same token.
    watching = rate.thermal_probe is not None or rate.memory_probe is not None
    drafter = speculation.start(sink.history) if speculation is not None else None
    verifying: Verifying | None = None
    held = lent_logits(producer)  # a step's row may be lent, not copied into `logits`

    while True:
        token = sampler(logits if held is None else held(logits), sink.history)
        events, reason = sink.commit(token)
        yield from events
        # Polled after the token's events went out, so a cancel raised while handling
        # them stops on this very token; a run that already ended is not "cancelled".
        if reason is None and cancel():
            reason = StopReason.CANCELLED
            yield from sink.finish(reason)
        if reason is None and _grammar_done(sampler):
            # A complete grammar allows only an end of generation: the run ends here instead of
            # paying one more forward pass to sample it (a forced tool call reaches its server
            # a decode step sooner; the last token is read with the next prompt).
            reason = StopReason.TOOL_CALLS if sink.called else StopReason.END_OF_TURN
            yield from sink.finish(reason)
        if reason is not None:
            break
        # Pace AFTER the decision to continue (the last token never pays a sleep nobody
        # waits through) and BEFORE produce (the idle window falls between forward passes;
        # a verified row's token waits here too, so a multi-token pass keeps the cap).
        if pacer is not None:
            pacer.note_token()
            if watching and sink.generated % THERMAL_POLL_TOKENS == 0:
                thermal, memory = _read_probes(rate)
                peak = max(peak, memory)
                pacer.apply_cap(stepped_cap(rate.max_tokens_per_sec, thermal, memory), rate.clock())
            now = rate.clock()
            wait = pacer.due_in(now)
            if wait is not None:
                yield PaceWait(now + wait)
                # A Stop pressed during the wait ends the run now, not one forward pass later.
                if cancel():
                    yield from sink.finish(StopReason.CANCELLED)
                    reason = StopReason.CANCELLED
                    break
        if verifying is not None:
            if verifying.confirms(token):  # fed with the drafts: its row is already computed
                position += 1
                np.copyto(logits, verifying.row())
                continue
            verifying = _end_pass(producer, drafter, verifying, position, learn=True)
        draft = ()
        if drafter is not None:
            draft = drafter.propose(sink.history, config.max_new_tokens - sink.generated - 1)
            draft = draft_within(sampler, draft)  # never a row the grammar would refuse
        if draft:
            verifying = _verify(producer, drafter, token, draft, position, logits)
        else:
            started = time.perf_counter()
            # Speculating, the row is copied: a run mixing lent steps with verify passes was
            # seen to sample differently from plain decoding (1 run in ~20; cause not found).
            yield from forward_step(producer, token, position, logits, lend_row=drafter is None)
            if drafter is not None:
                drafter.policy.timed_step(time.perf_counter() - started)
        position += 1

    if verifying is not None:  # the run ended inside a pass: drop its unconfirmed rows
        _end_pass(producer, drafter, verifying, position, learn=False)
    # The last committed token was emitted but never fed: it is not KV-resident.
    kv_ids = sink.history[:position]
    return RawDecodeResult(
        prompt_tokens=prompt_tokens,
        new_tokens=sink.generated,
        prefill_seconds=prefill_seconds,
        decode_seconds=time.perf_counter() - decode_start,
        reason=reason,
        kv_position=position,
        kv_backed_token_ids=kv_ids,
        peak_memory_pressure=peak,
        drafted_tokens=drafter.drafted if drafter is not None else 0,
        accepted_tokens=drafter.accepted if drafter is not None else 0,
    )


def _verify(producer: LogitProducer, drafter: LookupDrafter, token: int, draft: Sequence[int],
            position: int, logits: np.ndarray) -> Verifying:
    """Feed `token` + `draft` at `position` in ONE pass; row 0 goes to `logits`."""
    rows = np.empty((1 + len(draft), logits.shape[0]), np.float32)
    started = time.perf_counter()
    call_producer(producer.produce_rows, [token, *draft], position, rows)  # type: ignore[attr-defined]
    drafter.policy.timed_pass(rows.shape[0], time.perf_counter() - started)
    np.copyto(logits, rows[0])
    return Verifying(rows, draft)


def _end_pass(producer: LogitProducer, drafter: LookupDrafter | None, verifying: Verifying,
              position: int, learn: bool) -> None:
    """Settle a verify pass and trim the KV (cache and mirror) back to `position`."""
    assert drafter is not None
    drafter.settle(len(verifying.drafts), verifying.judged, learn=learn)
    if verifying.pending:
        call_producer(producer.trim, position)  # type: ignore[attr-defined]
    return None


def decode_after_prefill(
    producer: LogitProducer,
    tokenizer: EngineTokenizer,
    config: GenerationConfig,
    sampler: Sampler,
    logits: np.ndarray,
    history: list[int],
    position: int,
    total: int,
    prefill_start: float,
    reused: int,
    cancel: CancelFlag,
    speculation: LookupSpeculation | None = None,
) -> RawCompletionStream:
    """Decode after either prefill mode, then patch the two fields `decode` cannot know."""
    prefill_seconds = time.perf_counter() - prefill_start
    result = yield from decode(
        producer, tokenizer, config, sampler, logits, history, position, total,
        prefill_seconds, cancel, speculation,
    )
    result.reused_prefix_tokens = reused
    result.session_slot_evicted = bool(call_producer(producer.session_slot_evicted))
    return result


class PrefillStrategy(Protocol):
    """How the prompt's fresh tokens reach the producer: the spans to feed, and one feed."""

    def spans(self, n_fresh: int) -> Iterable[tuple[int, int]]:
        """[start, end) spans covering range(n_fresh) in order."""
        ...

    def feed(
        self, producer: Any, ids: list[int], position: int, logits: np.ndarray, last: bool,
        cancel: CancelFlag,
    ) -> bool:
        """Feed `ids` at `position` (`last`: fill `logits`). False = stopped, nothing committed."""
        ...

    def offer(
        self, producer: Any, ids: list[int], position: int, logits: np.ndarray, last: bool,
        cancel: CancelFlag,
    ) -> PrefillStep | None:
        """The span as a step for a batching driver to run beside other streams' decode steps
        (`PrefillStep`), or None: `feed` it."""
        ...


class TokenByToken:
    """"Off" prefill: one `produce_prefill` per token, `produce` for the last (its logits)."""

    def spans(self, n_fresh: int) -> Iterable[tuple[int, int]]:
        return ((i, i + 1) for i in range(n_fresh))

    def feed(
        self, producer: Any, ids: list[int], position: int, logits: np.ndarray, last: bool,
        cancel: CancelFlag,
    ) -> bool:
        if len(ids) > 1:  # an image's pseudo-ids: they go in whole, as one chunk
            call_producer(producer.produce_chunk, ids, position, logits if last else None)
            return True
        # Only the last prompt token's logits are read; the others skip the output head.
        method = producer.produce if last else producer.produce_prefill
        call_producer(method, ids[0], position, logits)
        return True

    def offer(self, *args: Any) -> None:
        return None  # token by token is the reference's exact shape: never batched


def stream_prefill_then_decode(
    producer: LogitProducer,
    tokenizer: EngineTokenizer,
    prompt: list[int],
    config: GenerationConfig,
    vocab_size: int,
    cancel: CancelFlag,
    sampler: Sampler,
    strategy: PrefillStrategy,
    speculation: LookupSpeculation | None = None,
) -> RawCompletionStream:
    """The ONE step loop of both prefill modes: reuse, feed the fresh spans (`strategy`),
    poll cancel after each committed span, then `decode`."""
    reused = reuse_or_reset(producer, prompt)
    logits = np.zeros(vocab_size, dtype=np.float32)  # one buffer for the whole run
    prefill_start = time.perf_counter()
    # The reused positions are already in the producer's KV: the cursor starts past them
    # and the history holds the ids that built them, or kv_position would lie.
    position = reused
    history = prompt[:reused]
    total = len(prompt)
    fresh = prompt[reused:]  # never empty: reuse is clamped to len - 1
    cursor = 0
    for start, end in strategy.spans(len(fresh)):
        if end <= cursor:
            continue  # (covered by a span stretched over an image)
        start, end = cursor, media_span_end(fresh, end)
        cursor = end
        ids, last = fresh[start:end], end == len(fresh)
        offered = strategy.offer(producer, ids, position, logits, last, cancel)
        ran = (yield offered) if offered is not None else None  # True: the driver's batch fed it
        if ran or (offered is not None and cancel()):
            committed = bool(ran)
        else:
            committed = strategy.feed(producer, ids, position, logits, last, cancel)
        if committed:
            position += len(ids)
            history.extend(ids)
            yield PrefillProgress(position, total, reused, time.perf_counter() - prefill_start)
        # Polled AFTER the span is committed: the producer's cursor has already moved.
        if not committed or cancel():
            evicted = call_producer(producer.session_slot_evicted)
            return cancelled_during_prefill(
                history, position, total, prefill_start, reused, bool(evicted)
            )
    return (
        yield from decode_after_prefill(
            producer, tokenizer, config, sampler, logits, history, position, total,
            prefill_start, reused, cancel, speculation,
        )
    )


def _grammar_done(sampler: Sampler) -> bool:
    """The sampler's grammar (a ConstrainedSampler's) is complete."""
    constraint = getattr(sampler, "constraint", None)
    return constraint is not None and bool(constraint.finished)


def stream_raw_completion(
    producer: LogitProducer,
    tokenizer: EngineTokenizer,
    prompt_ids: Sequence[int],
    config: GenerationConfig,
    max_context: int,
    vocab_size: int,
    cancel: CancelFlag = NEVER,
    speculation: LookupSpeculation | None = None,
) -> RawCompletionStream:
    """The "off"-prefill step loop: a generator of progress events and PaceWait.

    Admission (EmptyPrompt, ZeroBudget, ContextOverflow), the rate cap (InvalidRate) and
    the shaping (SelectionError) are checked HERE, at call time, before the producer is
    touched. The generator returns the RawDecodeResult. After a PaceWait it polls `cancel`
    and ends with CANCELLED rather than producing. `speculation`: see `decode`.
    """
    sampler = prepare_run(prompt_ids, config, max_context, vocab_size)
    check_speculation(producer, speculation)
    return stream_prefill_then_decode(
        producer, tokenizer, list(prompt_ids), config, vocab_size, cancel, sampler, TokenByToken(),
        speculation,
    )


def drive_raw_completion(
    stream: RawCompletionStream,
    rate: RateConfig,
    cancel: CancelFlag,
    on_progress: ProgressCallback | None,
) -> RawDecodeResult:
    """Run a step loop to its end: progress to `on_progress`, PaceWait slept with
    `rate.sleep` in slices of at most 20 ms, cut short by `cancel()`."""
    try:
        while True:
            try:
                event = next(stream)
            except StopIteration as done:
                return done.value
            if isinstance(event, PaceWait):
                wait_until(event.until, rate.clock, rate.sleep, cancel)
            elif isinstance(event, (DecodeStep, PrefillStep)):
                continue  # alone: the loop runs its own step (next() sends None)
            elif on_progress is not None:
                on_progress(event)
    finally:
        stream.close()


def run_raw_completion(
    producer: LogitProducer,
    tokenizer: EngineTokenizer,
    prompt_ids: Sequence[int],
    config: GenerationConfig,
    max_context: int,
    vocab_size: int,
    on_progress: ProgressCallback | None = None,
    *,
    speculation: LookupSpeculation | None = None,
) -> RawDecodeResult:
    """Feed every prompt token one at a time ("off" prefill), then decode. Blocking."""
    return run_raw_completion_cancellable(
        producer, tokenizer, prompt_ids, config, max_context, vocab_size, NEVER, on_progress,
        speculation=speculation,
    )


def run_raw_completion_cancellable(
    producer: LogitProducer,
    tokenizer: EngineTokenizer,
    prompt_ids: Sequence[int],
    config: GenerationConfig,
    max_context: int,
    vocab_size: int,
    cancel: CancelFlag,
    on_progress: ProgressCallback | None = None,
    *,
    speculation: LookupSpeculation | None = None,
) -> RawDecodeResult:
    """`run_raw_completion`, polling `cancel` per prefill token, per decoded token and
    during pacing waits.

    Cancelling is not an error: the result is ordinary, with reason CANCELLED. Cancelled in
    prefill: zero new tokens and decode_seconds 0.0; in decode: the withheld tail flushed.
    """
    stream = stream_raw_completion(
        producer, tokenizer, prompt_ids, config, max_context, vocab_size, cancel, speculation
    )
    return drive_raw_completion(stream, config.rate, cancel, on_progress)
