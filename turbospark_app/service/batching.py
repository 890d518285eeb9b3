"""Batched decode steps: the engine thread's rounds (llama.cpp server's `update_slots` shape).

A decoding turn's step loop offers each forward pass to its driver as a `DecodeStep` instead of
running it (`engine.raw_completion.forward_step`); a prompt arriving while streams decode offers
each chunk as a `PrefillStep`. The engine thread parks the turn with that step *pending* and goes
on with the other turns; once every runnable turn has had its go — a decoding turn up to its next
step, a prefilling one ONE chunk — the round ends with ONE forward pass for all pending steps
(`backend.decode_batch`: each row at its own position in its own KV slot, a chunk's rows beside
them), and each turn gets True back and samples from its own row. The streams thus get a token
out of every pass a new prompt's chunk goes in: no stream stalls for a whole prefill, and every
stream keeps its own sampler, stop strings, cap, pacing and Stop.

A lone pending step gets None back: the turn runs its step itself, exactly as without batching.
A failing batch also gets None back, so each turn runs (and fails, if it must) on its own.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..engine.progress import PrefillStep
from .jobs import Job

log = logging.getLogger(__name__)


@dataclass
class BatchFigures:
    """What the status bar and the QA panel show of batching (read without the engine lock:
    each field is one value replaced at once)."""

    last_size: int = 0  # rows of the last decode step (1 = a stream decoding alone)
    steps: int = 0  # batched passes run (size >= 2)
    rows: int = 0  # decode rows those passes served
    last_seconds: float = 0.0  # the last batched pass's duration
    sizes: dict[int, int] = field(default_factory=dict)  # batch size -> passes

    def describe(self) -> dict[str, Any]:
        return {
            "last_batch_size": self.last_size,
            "batched_steps": self.steps,
            "batched_rows": self.rows,
            "mean_batch_size": round(self.rows / self.steps, 2) if self.steps else 0.0,
            "last_batch_ms": round(self.last_seconds * 1000, 1),
            "batch_sizes": dict(sorted(self.sizes.items())),
        }


def next_in_round(active: Sequence[Job], round_no: int, now: float) -> tuple[Job | None, list[Job], int]:
    """(the job to step next, in `active`'s round-robin order, or None; the jobs whose step
    waits for the round's batched pass; the round number, moved on when only jobs that already
    ran a prefill chunk this round are left to step). A job parked until later is skipped;
    a decoding job goes before a prefilling one."""
    waiting = [j for j in active if j.pending is not None]
    ready = [j for j in active if j.pending is None and (j.ready_at <= now or j.cancelled)]
    # A turn that ran a prefill chunk this round waits for the round to end (with the batched
    # step of the decoding turns): no stream stalls for a whole prefill.
    fresh = [j for j in ready if j.round_done < round_no]
    if not fresh and not waiting and ready:
        round_no += 1
        fresh = ready
    # A decoding turn first: it emits the token its batched step gave and parks its next step
    # before a prompt chunk goes in, so its gap is one chunk and one step, never two chunks.
    first = next((j for j in fresh if j.first_token_at is not None), fresh[0] if fresh else None)
    return first, waiting, round_no


def stalls_running_streams(me: Job | None, active: Sequence[Job]) -> bool:
    """Would the prompt of `me` (the job whose step runs) stall a stream decoding beside it that
    was decoding already when `me` began? Only then are its chunks cut to the budget
    (`engine.chunk_budget`). Prompts that came together (before any of them had a token) go in
    whole chunks, as llama-server prefills requests arriving at once in one batch: cutting them
    held back all but the first for nothing (4 requests at once on the 1B synthetic: the others'
    36-token prompts went in 8-token chunks between the first one's steps, seconds of start-up
    lost). Outside a step (`me` None or not started): any other active job counts."""
    began = None if me is None else me.started_at
    if began is None:
        return len(active) > 1
    return any(j is not me and j.first_token_at is not None and j.first_token_at < began for j in active)


def run_round(backend: Any, jobs: Sequence[Job], figures: BatchFigures) -> None:
    """Serve the pending steps of `jobs` (decode steps, prompt chunks): one `decode_batch` when
    there are two or more and the backend can batch; each job's `reply` is what its step loop
    gets back (True: its step ran; None: it runs its own). `decode_batch` may return the steps
    it did not run (a pass a chunk's Stop stopped inside)."""
    steps = [job.pending for job in jobs]
    runner = getattr(backend, "decode_batch", None)
    missed: set[int] = {id(s) for s in steps}
    start = time.perf_counter()
    if runner is not None and len(steps) > 1:
        try:
            missed = {id(s) for s in (runner(steps) or ())}
        except Exception:  # each turn then runs its own step and meets its own error
            log.exception("batched decode step of %d rows failed; running them one by one", len(steps))
    batched = len(missed) < len(steps)  # (all missed: none ran, or a Stop stopped the pass inside)
    if batched:
        figures.last_seconds = time.perf_counter() - start
        figures.steps += 1
        figures.rows += len(steps)
        figures.sizes[len(steps)] = figures.sizes.get(len(steps), 0) + 1
    figures.last_size = len(steps) if batched else 1
    for job in jobs:
        ran = id(job.pending) not in missed
        job.chunk_ran = ran and isinstance(job.pending, PrefillStep)
        job.pending = None
        job.reply = True if ran else None
