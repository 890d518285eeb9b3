"""Thermal level, memory pressure and the stepped rate ceiling they impose (reference: `power`).

The ladder (`stepped_cap`): each reading maps to a *step*; thermal and memory share the same
steps, so the more restrictive of the two decides.

    step  thermal    memory     ceiling
    0     NOMINAL    NORMAL     the user's cap, unchanged (None = uncapped)
    1     FAIR       -          0.75 x base
    2     SERIOUS    WARNING    0.50 x base
    3     CRITICAL   CRITICAL   0.25 x base

`base` is the user's cap, or `UNCAPPED_BASE_TOKENS_PER_SEC` when the user set none, so a hot
machine is slowed down even when no cap was asked for.
"""

from __future__ import annotations

import enum

UNCAPPED_BASE_TOKENS_PER_SEC = 30.0
STEP_FRACTIONS: tuple[float, ...] = (1.0, 0.75, 0.5, 0.25)


class ThermalLevel(enum.IntEnum):
    """Ordered like macOS `NSProcessInfo.thermalState`: higher is hotter."""

    NOMINAL = 0
    FAIR = 1
    SERIOUS = 2
    CRITICAL = 3

    @property
    def step(self) -> int:
        return int(self)


class MemoryPressure(enum.IntEnum):
    """Ordered like macOS `kern.memorystatus_vm_pressure_level`: higher is worse."""

    NORMAL = 0
    WARNING = 1
    CRITICAL = 2

    @property
    def step(self) -> int:
        return (0, 2, 3)[int(self)]


def stepped_cap(
    cap: float | None, thermal: ThermalLevel, memory: MemoryPressure
) -> float | None:
    """The tokens/sec ceiling for this reading: the most restrictive of thermal and memory.

    Returns None only when nothing applies (no user cap and both readings at step 0).
    """
    step = max(thermal.step, memory.step)
    if step == 0:
        return cap
    base = cap if cap is not None else UNCAPPED_BASE_TOKENS_PER_SEC
    return base * STEP_FRACTIONS[step]
