"""Per-request generation settings (reference: `config::GenerationConfig`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from .constraint import ConstraintSpec
from .power import MemoryPressure, ThermalLevel

ThermalProbe = Callable[[], ThermalLevel]
MemoryProbe = Callable[[], MemoryPressure]


@dataclass(frozen=True)
class Shaping:
    """How a token is chosen from the logits. temperature 0 means argmax (greedy).

    top_k 0 = off, top_p 1.0 = off, min_p 0.0 = off. Penalties look at the last
    `penalty_last_n` tokens of the history (prompt + generated); repetition_penalty 1.0,
    presence_penalty 0.0 and frequency_penalty 0.0 are off. seed None = fresh entropy.
    `logit_bias`: (token id, bias) pairs added to the logits before anything else (llama.cpp's
    chain order); -100 all but bans a token.
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    penalty_last_n: int = 64
    seed: int | None = None
    logit_bias: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class RateConfig:
    """Decode-rate pacing. Inactive (no pacing work at all) unless a cap or a probe is set.

    `clock` and `sleep` are injectable so tests pace against a fake clock, not wall time.
    """

    max_tokens_per_sec: float | None = None
    thermal_probe: ThermalProbe | None = None
    memory_probe: MemoryProbe | None = None
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep

    def is_active(self) -> bool:
        return (
            self.max_tokens_per_sec is not None
            or self.thermal_probe is not None
            or self.memory_probe is not None
        )


@dataclass(frozen=True)
class GenerationConfig:
    """One request's budget, sampling, stop strings and pacing; `constraint` a grammar the
    reply must follow (`engine.constraint`; None = free text)."""

    max_new_tokens: int = 256
    shaping: Shaping = field(default_factory=Shaping)
    stop_strings: tuple[str, ...] = ()
    rate: RateConfig = field(default_factory=RateConfig)
    constraint: ConstraintSpec | None = None
