"""What a probe says right now: a level, where it came from, and whether it was forced for QA.

`level is None` means the platform gave no reading. That is shown as "unavailable" and is
never turned into NOMINAL / NORMAL here: only the engine's pacing probe does that (it cannot
step on an unknown), and the reading shown to the user still says "unavailable".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from turbospark_app.engine.power import MemoryPressure, ThermalLevel

UNAVAILABLE_LABEL = "unavailable"
SIMULATED_SOURCE = "simulated"


class _ReadingLabels:
    """Shared `label` / `available` / validation for the two frozen reading dataclasses."""

    _level_type: ClassVar[type]
    level: ThermalLevel | MemoryPressure | None
    simulated: bool

    def __post_init__(self) -> None:
        if self.level is not None and not isinstance(self.level, self._level_type):
            raise TypeError(
                f"{type(self).__name__}.level must be a {self._level_type.__name__} or None, "
                f"not {self.level!r}"
            )
        # A forced reading always has a level: "simulated unavailable" would be meaningless.
        if self.simulated and self.level is None:
            raise ValueError(f"a simulated {type(self).__name__} needs a level")

    @property
    def available(self) -> bool:
        """True when the platform (or the simulation) gave a level."""
        return self.level is not None

    @property
    def label(self) -> str:
        """What the status bar shows: "nominal", "serious (simulated)", "unavailable"."""
        if self.level is None:
            return UNAVAILABLE_LABEL
        name = self.level.name.lower()
        return f"{name} (simulated)" if self.simulated else name


@dataclass(frozen=True)
class ThermalReading(_ReadingLabels):
    """One thermal reading. `source` names the probe (e.g. "sysfs thermal zones")."""

    _level_type: ClassVar[type] = ThermalLevel

    level: ThermalLevel | None
    source: str
    simulated: bool
    detail: str


@dataclass(frozen=True)
class MemoryReading(_ReadingLabels):
    """One memory-pressure reading. `source` names the probe (e.g. "PSI /proc/pressure/memory")."""

    _level_type: ClassVar[type] = MemoryPressure

    level: MemoryPressure | None
    source: str
    simulated: bool
    detail: str
