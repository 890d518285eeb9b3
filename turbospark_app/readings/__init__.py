"""Honest platform readings: thermal level and memory pressure (real, simulated for QA, or
"unavailable" - never a pretended NOMINAL), and the `system_info_json()` snapshot.
May import: engine.

Typical wiring (at startup, so a bad TURBOSPARK_SIMULATE_* value stops the app with a clear
message instead of failing mid-reply):

    thermal, memory = monitors_from_environment()          # may raise SimulationError
    rate = RateConfig(thermal_probe=thermal.probe, memory_probe=memory.probe)
    status_bar.show(thermal.read().label, memory.read().label)
    qa_panel.on_force(lambda level: thermal.set_simulated(level))   # any thread
"""

from __future__ import annotations

from typing import Mapping

from .memory import (
    MemoryMonitor,
    PsiMemorySource,
    PsutilMemorySource,
    discover_memory_source,
)
from .reading import MemoryReading, ThermalReading
from .simulation import (
    MEMORY_ENV,
    THERMAL_ENV,
    SimulationError,
    SimulationSettings,
    parse_memory_pressure,
    parse_thermal_level,
    simulation_from_env,
)
# Only system_info_json is re-exported: a re-exported `system_info` function would shadow the
# `system_info` submodule (`from turbospark_app.readings.system_info import system_info`).
from .system_info import SCHEMA_VERSION, system_info_json
from .thermal import (
    PsutilThermalSource,
    SysfsThermalSource,
    ThermalMonitor,
    Thresholds,
    discover_thermal_source,
)


def monitors_from_environment(
    environ: Mapping[str, str] | None = None,
) -> tuple[ThermalMonitor, MemoryMonitor]:
    """Both monitors with the simulation variables applied and the platform sources
    discovered (once). Raises SimulationError naming every invalid variable."""
    simulation_from_env(environ)  # validate both before discovering anything
    return ThermalMonitor.from_environment(environ), MemoryMonitor.from_environment(environ)


__all__ = [
    "MEMORY_ENV",
    "MemoryMonitor",
    "MemoryReading",
    "PsiMemorySource",
    "PsutilMemorySource",
    "PsutilThermalSource",
    "SCHEMA_VERSION",
    "SimulationError",
    "SimulationSettings",
    "SysfsThermalSource",
    "THERMAL_ENV",
    "ThermalMonitor",
    "ThermalReading",
    "Thresholds",
    "discover_memory_source",
    "discover_thermal_source",
    "monitors_from_environment",
    "parse_memory_pressure",
    "parse_thermal_level",
    "simulation_from_env",
    "system_info_json",
]
