"""The app's thermal and memory monitors, and the QA overrides on them.

Why the app owns the monitors (and not each loaded backend): the backend lives on the engine
thread and is replaced when the user opens another model, but a level forced from the QA panel
must keep applying across that switch. So the app creates the two monitors once (with the
TURBOSPARK_SIMULATE_* variables applied) and hands the SAME objects to every backend it loads
(`load_backend(..., thermal=, memory=)`). The GUI thread only ever calls the monitors'
`set_simulated`, which is documented thread-safe (one attribute store of an immutable tuple);
the engine thread reads them through its pacing probes.

`PowerControls` knows nothing about the engine. The engine thread's `system_info` reads these
monitors live (EngineThread(monitors=...)), so the status bar and the QA panel show a forced
level at their next poll, idle or not; `changed` tells the QA panel to poll (and re-sync its
controls) at once.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from ...engine.power import MemoryPressure, ThermalLevel, stepped_cap
from ...readings import MemoryMonitor, ThermalMonitor, monitors_from_environment

QA_ORIGIN = "the QA panel"

# What the QA panel's combo boxes offer, in order; None = the platform's real reading.
THERMAL_CHOICES: tuple[tuple[str, ThermalLevel | None], ...] = (
    ("real", None),
    ("nominal", ThermalLevel.NOMINAL),
    ("fair", ThermalLevel.FAIR),
    ("serious", ThermalLevel.SERIOUS),
    ("critical", ThermalLevel.CRITICAL),
)
MEMORY_CHOICES: tuple[tuple[str, MemoryPressure | None], ...] = (
    ("real", None),
    ("normal", MemoryPressure.NORMAL),
    ("warning", MemoryPressure.WARNING),
    ("critical", MemoryPressure.CRITICAL),
)


def thermal_from_name(name: str | None) -> ThermalLevel | None:
    """"serious" -> ThermalLevel.SERIOUS; None / "" / unknown -> None (no reading)."""
    if not name:
        return None
    return ThermalLevel.__members__.get(str(name).upper())


def memory_from_name(name: str | None) -> MemoryPressure | None:
    """"warning" -> MemoryPressure.WARNING; None / "" / unknown -> None."""
    if not name:
        return None
    return MemoryPressure.__members__.get(str(name).upper())


def active_cap(user_cap: float | None, thermal: ThermalLevel | None, memory: MemoryPressure | None) -> float | None:
    """The ceiling the engine applies for these levels: `stepped_cap` with an unavailable
    reading counted as the pacing probe counts it (NOMINAL / NORMAL)."""
    cap = user_cap if user_cap and user_cap > 0 else None
    return stepped_cap(cap, thermal or ThermalLevel.NOMINAL, memory or MemoryPressure.NORMAL)


class PowerControls(QObject):
    """See the module docstring. Create it in the GUI thread."""

    changed = Signal()  # a level was forced or released

    def __init__(self, thermal: ThermalMonitor, memory: MemoryMonitor, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.thermal = thermal
        self.memory = memory

    @classmethod
    def from_environment(cls, parent: QObject | None = None) -> "PowerControls":
        """Monitors over the platform sources, with TURBOSPARK_SIMULATE_* applied (raises
        readings.SimulationError on a bad value, naming it)."""
        thermal, memory = monitors_from_environment()
        return cls(thermal, memory, parent)

    def force_thermal(self, level: ThermalLevel | None) -> None:
        """Force the thermal level (None = real readings again). Any thread may pace on it."""
        self.thermal.set_simulated(level, origin=QA_ORIGIN)
        self.changed.emit()

    def force_memory(self, level: MemoryPressure | None) -> None:
        """Force the memory pressure (None = real readings again)."""
        self.memory.set_simulated(level, origin=QA_ORIGIN)
        self.changed.emit()

    def forced(self) -> tuple[ThermalLevel | None, MemoryPressure | None]:
        """The forced levels (None where the reading is real)."""
        return self.thermal.simulated, self.memory.simulated
