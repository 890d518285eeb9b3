"""How big a prompt chunk may be while other streams decode (llama-server's continuous batching
keeps running streams going while a prompt goes in; so does this engine, in chunks sized here).

Alone, a prompt goes in whole chunks (llama.cpp's prefill is fastest at its batch size), and so
does one that came together with the others (before any of them had a token:
`service.batching.stalls_running_streams`, what `crowded` says here). With streams decoding
that were decoding already when it began, every chunk is a pause in their token streams.

Where the chunks are fed apart from the streams' steps (a driver that does not batch them), a
chunk is cut to what the measured prefill rate does in `budget_seconds`, so the longest gap
between two of their tokens stays near the budget plus one batched step. The rate is measured
on the chunks themselves (any turn's: one budget per model), so it follows the model and the
machine. Where a batched step itself is slow (a 1B model on two CPU cores: ~110 ms for 3 rows),
a chunk of the full budget plus that step would pass the gap a user notices; the budget then
shrinks to what `target_gap_seconds` leaves after the measured step (never below
`MIN_BUDGET_SECONDS`).

Where the engine thread batches (`limit(batched=True)`), a chunk goes INTO the round's one forward
pass beside the streams' decode rows (`progress.PrefillStep`), as llama-server's continuous
batching does: the streams get their next token out of that same pass, so their gap is the pass
itself, not a chunk plus a step, and the pass may take what `target_gap_seconds` allows. It is
sized from the last such pass's cost per row (decode rows included), less the decode rows and what
other prompts already offered to the same pass (`offered`).

Passes of at least `WIDE_ROWS` rows are costed apart: on a CPU llama.cpp's flash attention runs a
tiled kernel from 64 query rows on (`GGML_FA_TILE_Q`), 1.5x (at 1,500 cells) to 2x (at 3,000)
cheaper per row than the row-by-row one below it (llama-bench, default model, 2 threads). So once
a narrow pass shows that a wide one may fit the target, one is tried, and wide passes go on while
they fit; as the prompt's cells grow, every row costs more and the passes narrow again. A pass at
a lower position than the last (a new prompt) forgets both costs.
"""

from __future__ import annotations

import os
from typing import Callable, Mapping

DEFAULT_BUDGET_SECONDS = 0.15
# A running stream's longest wait, one chunk plus one batched step: issue #30 holds it to 250 ms as
# the client sees it; 40 ms are left for sampling, the server, the pass's estimate and the clock's
# noise (with 30 ms, 1 of 7 rounds through `serve` saw 253 ms, 2026-12-04).
DEFAULT_MAX_GAP_MS = 250  # what `serve --max-stream-gap-ms` promises by default
_GAP_MARGIN = 0.04
TARGET_GAP_SECONDS = DEFAULT_MAX_GAP_MS / 1000 - _GAP_MARGIN  # 0.21
MIN_BUDGET_SECONDS = 0.04
_FIRST_CHUNK = 32  # before any rate is known
_SMALLEST = 8
WIDE_ROWS = 64  # llama.cpp's CPU flash attention tiles this many query rows (GGML_FA_TILE_Q)
_MARGIN = 1.05  # each pass sits deeper in the prompt than the one it is sized from
_NARROW_OVER_WIDE = 1.5  # a narrow row over a wide one where wide passes stop fitting (llama-bench)


STREAM_GAP_ENV = "TURBOSPARK_MAX_STREAM_GAP_MS"


def stream_gap_from_env(environ: Mapping[str, str] | None = None) -> float | None:
    """$TURBOSPARK_MAX_STREAM_GAP_MS in ms, None when unset or blank; ValueError naming the
    variable for a value that is not a number > 0."""
    raw = (os.environ if environ is None else environ).get(STREAM_GAP_ENV, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0:
        raise ValueError(f"{STREAM_GAP_ENV} must be a number of milliseconds > 0 (got {raw!r})")
    return value


def target_gap_for(max_gap_ms: float) -> float:
    """The target a pass is sized to, for a longest gap of `max_gap_ms` as a client sees it:
    40 ms under it (sampling, the server's writes, the clock's noise), never below the smallest
    budget. ValueError for a gap that is not positive."""
    if not max_gap_ms > 0:
        raise ValueError(f"the longest stream gap must be > 0 ms (got {max_gap_ms})")
    return max(MIN_BUDGET_SECONDS, max_gap_ms / 1000 - _GAP_MARGIN)


class ChunkBudget:
    """`limit()` for `raw_completion_chunked.Chunked`: None while `crowded()` is False."""

    def __init__(self, crowded: Callable[[], bool], budget_seconds: float = DEFAULT_BUDGET_SECONDS,
                 target_gap_seconds: float = TARGET_GAP_SECONDS) -> None:
        if budget_seconds <= 0:
            raise ValueError(f"the chunk budget must be > 0 s (got {budget_seconds})")
        self.crowded = crowded
        self.budget_seconds = budget_seconds
        self.target_gap_seconds = target_gap_seconds
        self.rate = 0.0  # prompt tokens per second, a running mean of the last chunks
        self.step_seconds = 0.0  # a batched decode step, a running mean
        # Seconds a row of the last pass that carried a prompt chunk, narrow / wide (0: none yet).
        self.narrow_row = 0.0
        self.wide_row = 0.0
        self.depth = 0  # the prompt position that pass reached
        self.last_wide = False  # that pass was wide
        self.step_rows = 0  # decode rows of the last batched pass (the next one's, likely)
        self.claimed = 0  # prompt tokens offered to the coming pass so far

    def seconds(self) -> float:
        """The time the next chunk may take: the budget, or less where the batched step leaves
        less of the target gap."""
        if self.step_seconds <= 0:
            return self.budget_seconds
        return max(MIN_BUDGET_SECONDS, min(self.budget_seconds, self.target_gap_seconds - self.step_seconds))

    def limit(self, batched: bool = False) -> int | None:
        """The most tokens the next chunk may take (None: as many as the chunk size); `batched`:
        a chunk that goes into the streams' pass (`offered` counts what is in it already)."""
        if not self.crowded():
            return None
        if not batched:
            if self.rate <= 0:
                return _FIRST_CHUNK
            return max(_SMALLEST, int(self.rate * self.seconds()))
        return max(_SMALLEST, self.pass_rows() - self.step_rows - self.claimed)

    def pass_rows(self) -> int:
        """The rows the next batched pass that carries a chunk may hold (decode rows included)."""
        target = self.target_gap_seconds
        if self.wide_row > 0 and WIDE_ROWS * self.wide_row * _MARGIN <= target:
            return int(target / (self.wide_row * _MARGIN))
        if self.wide_row > 0 and self.last_wide:
            # Wide passes no longer fit; a narrow row costs more than a wide one did there.
            row = max(self.narrow_row, _NARROW_OVER_WIDE * self.wide_row)
        elif self.narrow_row > 0:
            # A wide pass is tried only where it would fit at a narrow one's row cost: at a
            # prompt's start a wide row costs about a narrow one (3.5 against 3.3 ms here), and
            # a looser try that did not fit passed 250 ms as the client saw it.
            if self.wide_row <= 0 and WIDE_ROWS * self.narrow_row * _MARGIN <= target:
                return WIDE_ROWS  # not measured yet: try one
            row = self.narrow_row
        else:
            return _FIRST_CHUNK if self.rate <= 0 else min(WIDE_ROWS - 1, int(self.rate * target))
        return max(1, min(WIDE_ROWS - 1, int(target / (row * _MARGIN))))

    def offered(self, tokens: int) -> None:
        """`tokens` of a prompt were offered to the coming batched pass."""
        self.claimed += max(0, tokens)

    def observe_batch(self, prompt_tokens: int, rows: int, seconds: float, depth: int = 0) -> None:
        """A batched pass of `rows` rows, `prompt_tokens` of them prompt chunks' (reaching prompt
        position `depth`), took `seconds`."""
        self.claimed = 0
        self.step_rows = max(0, rows - prompt_tokens)
        if prompt_tokens <= 0:
            self.observe_step(seconds)
            return
        if seconds <= 0:
            return
        if depth < self.depth:  # a new prompt: its first cells cost less
            self.narrow_row = self.wide_row = 0.0
        self.depth = depth
        self.last_wide = rows >= WIDE_ROWS
        if self.last_wide:
            self.wide_row = seconds / rows
        else:
            self.narrow_row = seconds / rows

    def observe_step(self, seconds: float) -> None:
        """A batched decode step (the streams a chunk delays) took `seconds`."""
        if seconds > 0:
            s = self.step_seconds
            self.step_seconds = seconds if s <= 0 else 0.7 * s + 0.3 * seconds

    def observe(self, tokens: int, seconds: float) -> None:
        """A chunk of `tokens` took `seconds`."""
        self.claimed = 0
        if tokens <= 0 or seconds <= 0:
            return
        rate = tokens / seconds
        self.rate = rate if self.rate <= 0 else 0.7 * self.rate + 0.3 * rate
