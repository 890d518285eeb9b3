"""The engine thread's batched round on llama.cpp: the decode steps of the streams and the prompt
chunks riding beside them (`engine.progress.PrefillStep`) as ONE `llama_decode`
(`produce_mixed`), llama-server's continuous batching. Each pass is timed for the chunk budget
(`engine.chunk_budget`), which sizes the next chunks so the streams' gap stays near its target.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

from ..engine.chunk_budget import ChunkBudget
from ..engine.progress import DecodeStep, PrefillStep
from ..model.llamacpp.producer import produce_mixed


def innermost(producer: object) -> object:
    """The producer under any wrappers (a session slot's, a log-probability tap's)."""
    while True:
        inner = getattr(producer, "inner_producer", None)
        if inner is None:
            return producer
        producer = inner


def run_pass(n_batch: int, budget: ChunkBudget, steps: Sequence[DecodeStep | PrefillStep]) -> list[Any]:
    """Run the decode steps and prompt chunks of several turns as ONE llama_decode; each step's
    logits land in its own buffer (lent: the step loops read `logits_now`), a chunk's last ones
    (when asked) in its. Returns the steps that did NOT run (each turn then runs its own): all
    of them when a chunk's Stop stopped the pass inside; a chunk that does not fit the batch
    (`n_batch`) beside the others goes in a pass of its own after."""
    rows = [s for s in steps if isinstance(s, DecodeStep)]
    room = n_batch - len(rows)
    now: list[PrefillStep] = []
    later: list[PrefillStep] = []
    for s in steps:
        if isinstance(s, PrefillStep):
            fits = len(s.tokens) <= room
            (now if fits else later).append(s)
            room -= len(s.tokens) if fits else 0
    start = time.perf_counter()
    if not _mixed(rows, now):
        return list(steps)
    prompt = sum(len(s.tokens) for s in now)
    budget.observe_batch(prompt, len(rows) + prompt, time.perf_counter() - start,
                         max((s.position + len(s.tokens) for s in now), default=0))
    missed: list[Any] = []
    for s in later:
        try:
            ran = _mixed([], [s])
        except Exception:  # the turn meets its error feeding the chunk itself
            ran = False
        if not ran:
            missed.append(s)
    return missed


def _mixed(rows: Sequence[DecodeStep], spans: Sequence[PrefillStep]) -> bool:
    cancels = [s.cancel for s in spans if s.cancel is not None]
    return produce_mixed([(innermost(s.producer), s.token, s.position, s.logits) for s in rows],  # type: ignore[misc]
                         [(innermost(s.producer), s.tokens, s.position, s.logits) for s in spans],  # type: ignore[misc]
                         lend=True,
                         cancel=(lambda: any(c() for c in cancels)) if cancels else None)
