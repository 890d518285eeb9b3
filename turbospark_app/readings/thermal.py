"""Thermal level: macOS NSProcessInfo.thermalState, Linux thermal zones, psutil sensors.

Discovery (`discover_thermal_source`) runs once and picks the first source that works:

1. macOS: `[[NSProcessInfo processInfo] thermalState]` (0..3 are NOMINAL..CRITICAL as-is).
2. Linux: `/sys/class/thermal/thermal_zone*/` - `temp` against the zone's trip points.
3. psutil.sensors_temperatures(): `current` against each sensor's `high` / `critical`.
4. Otherwise "unavailable", with what was tried in `detail`. Never NOMINAL by default.

How a temperature maps to a level against trip points: see `thermal_trips`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable


from turbospark_app.engine.power import ThermalLevel

from .macos import ObjCThermalState
from .monitor import LevelMonitor
from .reading import ThermalReading
from .simulation import THERMAL_ENV
from .thermal_trips import (
    PSUTIL_SOURCE,
    SYSFS_SOURCE,
    SYSFS_THERMAL_ROOT,
    PsutilThermalSource,
    SensorsFn,
    SysfsThermalSource,
    Thresholds,
)

MACOS_SOURCE = "NSProcessInfo.thermalState"
NO_SOURCE = "none"

__all__ = [
    "MACOS_SOURCE",
    "NO_SOURCE",
    "PSUTIL_SOURCE",
    "SYSFS_SOURCE",
    "MacThermalSource",
    "PsutilThermalSource",
    "SysfsThermalSource",
    "ThermalMonitor",
    "Thresholds",
    "UnavailableThermalSource",
    "discover_thermal_source",
]


class UnavailableThermalSource:
    """No thermal reading on this machine; `reason` says what was tried."""

    name = NO_SOURCE

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def read(self) -> tuple[ThermalLevel | None, str]:
        return None, self.reason


class MacThermalSource:
    """NSProcessInfo.thermalState through `state` (an `ObjCThermalState`, or a fake in tests)."""

    name = MACOS_SOURCE

    def __init__(self, state: Callable[[], int]) -> None:
        self._state = state

    def read(self) -> tuple[ThermalLevel | None, str]:
        try:
            raw = self._state()
        except OSError as exc:
            return None, f"thermalState call failed: {exc}"
        try:
            level = ThermalLevel(raw)
        except ValueError:
            return None, f"thermalState returned unknown value {raw}"
        return level, f"thermalState={raw}"


def discover_thermal_source(
    *,
    platform: str | None = None,
    sysfs_root: Path = SYSFS_THERMAL_ROOT,
    sensors: SensorsFn | None | str = "psutil",
    objc_state: Callable[[], Callable[[], int]] = ObjCThermalState,
) -> MacThermalSource | SysfsThermalSource | PsutilThermalSource | UnavailableThermalSource:
    """The first working thermal source for `platform` (default: this one); see module doc.

    `sensors` defaults to psutil's own ("psutil": imported only when no other source is found;
    None where psutil has none); `objc_state` builds the macOS call (tests pass fakes for both).
    """
    platform = sys.platform if platform is None else platform
    if platform == "darwin":
        try:
            state = objc_state()
            state()  # one real call now, so a broken runtime is reported at discovery
        except OSError as exc:
            return UnavailableThermalSource(f"NSProcessInfo.thermalState unreachable: {exc}")
        return MacThermalSource(state)
    tried: list[str] = []
    if platform.startswith("linux"):
        sysfs, why_not = SysfsThermalSource.discover(sysfs_root)
        if sysfs is not None:
            return sysfs
        tried.append(why_not)
    if sensors == "psutil":
        import psutil

        sensors = getattr(psutil, "sensors_temperatures", None)
    psutil_source, why_not = PsutilThermalSource.discover(sensors)  # type: ignore[arg-type]
    if psutil_source is not None:
        return psutil_source
    tried.append(why_not)
    return UnavailableThermalSource("; ".join(tried))


class ThermalMonitor(LevelMonitor[ThermalLevel, ThermalReading]):
    """Thermal readings for the status bar and `probe()` for RateConfig.thermal_probe."""

    _level_type = ThermalLevel
    _reading_type = ThermalReading
    _pacing_default = ThermalLevel.NOMINAL
    _env_name = THERMAL_ENV
    _settings_field = "thermal"
    _discover = staticmethod(discover_thermal_source)
