"""Forced levels for QA: from environment variables at startup, or from a setting / the QA panel.

    TURBOSPARK_SIMULATE_THERMAL = nominal | fair | serious | critical
    TURBOSPARK_SIMULATE_MEMORY  = normal | warning | critical

Values are case-insensitive; an empty value counts as unset. An invalid value raises
`SimulationError` (a ValueError) naming the variable, the bad value and the accepted ones, so
the app can refuse to start with a clear message instead of failing mid-reply.
Call `simulation_from_env()` (or the monitors' `from_environment()`) once at startup.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, TypeVar

from turbospark_app.engine.power import MemoryPressure, ThermalLevel

THERMAL_ENV = "TURBOSPARK_SIMULATE_THERMAL"
MEMORY_ENV = "TURBOSPARK_SIMULATE_MEMORY"

L = TypeVar("L", ThermalLevel, MemoryPressure)


class SimulationError(ValueError):
    """A simulated level that is not one of the accepted names."""


def _choices(level_type: type[L]) -> str:
    return ", ".join(member.name.lower() for member in level_type)


def parse_level(text: str, level_type: type[L], *, origin: str) -> L:
    """`text` ("Serious", " critical ") as a member of `level_type`; `origin` names it in errors."""
    name = text.strip().upper()
    try:
        return level_type[name]
    except KeyError:
        raise SimulationError(
            f"{origin}={text!r} is not a valid {_kind(level_type)}; "
            f"use one of: {_choices(level_type)} (or leave it unset for real readings)"
        ) from None


def parse_thermal_level(text: str, *, origin: str = THERMAL_ENV) -> ThermalLevel:
    """A thermal level name as a ThermalLevel; SimulationError if it is not one."""
    return parse_level(text, ThermalLevel, origin=origin)


def parse_memory_pressure(text: str, *, origin: str = MEMORY_ENV) -> MemoryPressure:
    """A memory-pressure name as a MemoryPressure; SimulationError if it is not one."""
    return parse_level(text, MemoryPressure, origin=origin)


def _kind(level_type: type) -> str:
    return "thermal level" if level_type is ThermalLevel else "memory pressure level"


@dataclass(frozen=True)
class SimulationSettings:
    """The levels forced at startup; None = real readings."""

    thermal: ThermalLevel | None = None
    memory: MemoryPressure | None = None


def simulation_from_env(environ: Mapping[str, str] | None = None) -> SimulationSettings:
    """Both simulation variables, validated together.

    Raises SimulationError listing every invalid variable (one per line), so a QA run with two
    typos learns about both at once.
    """
    env = os.environ if environ is None else environ
    errors: list[str] = []
    thermal: ThermalLevel | None = None
    memory: MemoryPressure | None = None
    raw_thermal = env.get(THERMAL_ENV, "")
    if raw_thermal.strip():
        try:
            thermal = parse_thermal_level(raw_thermal)
        except SimulationError as exc:
            errors.append(str(exc))
    raw_memory = env.get(MEMORY_ENV, "")
    if raw_memory.strip():
        try:
            memory = parse_memory_pressure(raw_memory)
        except SimulationError as exc:
            errors.append(str(exc))
    if errors:
        raise SimulationError("\n".join(errors))
    return SimulationSettings(thermal=thermal, memory=memory)
