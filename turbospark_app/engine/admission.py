"""A run's call-time checks, before the producer is touched (reference: `raw_completion`'s
admission): the prompt, the budget and the context, the rate cap, the sampler's shaping and
constraint, and what speculation needs of the producer."""

from __future__ import annotations

import math
from typing import Sequence

from .config import GenerationConfig, RateConfig
from .errors import ContextOverflow, EmptyPrompt, InvalidRate, ZeroBudget
from .selection import Sampler, constrained, make_sampler
from .speculation import LookupSpeculation


def check_admission(prompt_ids: Sequence[int], config: GenerationConfig, max_context: int) -> None:
    """Raise EmptyPrompt, ZeroBudget or ContextOverflow; called before the producer is touched."""
    if len(prompt_ids) == 0:
        raise EmptyPrompt()
    if config.max_new_tokens <= 0:
        raise ZeroBudget()
    if len(prompt_ids) + config.max_new_tokens > max_context:
        raise ContextOverflow(len(prompt_ids), config.max_new_tokens, max_context)


def check_rate(rate: RateConfig) -> None:
    """Raise InvalidRate for a cap that is not a finite number > 0 (None = uncapped)."""
    cap = rate.max_tokens_per_sec
    if cap is not None and (isinstance(cap, bool) or not math.isfinite(cap) or cap <= 0):
        raise InvalidRate(cap)


def prepare_run(
    prompt_ids: Sequence[int], config: GenerationConfig, max_context: int, vocab_size: int
) -> Sampler:
    """Every call-time check of a run (admission, rate, shaping); returns the sampler (masked by
    a fresh run of the config's constraint, when it has one)."""
    check_admission(prompt_ids, config, max_context)
    check_rate(config.rate)
    if vocab_size < 1:
        raise ValueError(f"vocab_size must be >= 1 (got {vocab_size})")
    # SelectionError on invalid shaping, up front
    return constrained(make_sampler(config.shaping), config.constraint)


def check_speculation(producer: object, speculation: LookupSpeculation | None) -> None:
    """TypeError when speculation is asked of a producer that cannot verify drafts."""
    if speculation is not None and not (callable(getattr(producer, "produce_rows", None))
                                        and callable(getattr(producer, "trim", None))):
        raise TypeError(f"{type(producer).__name__} has no produce_rows/trim: it cannot speculate")
