"""Temperature against trip points: Linux thermal zones (sysfs) and psutil sensors.

Mapping a temperature to a level (`Thresholds.for_trips`), per zone or sensor, in degrees C:

    throttle  = lowest `passive` trip (psutil: `high`)  - the kernel starts throttling there;
                without one, 15 C below the ceiling
    ceiling   = lowest of the `hot` and `critical` trips - the platform shuts down or
                hibernates there

    CRITICAL  temp >= hot trip, or temp >= critical trip - 5   (emergency is imminent)
    SERIOUS   temp >= throttle                                  (being throttled now)
    FAIR      temp >= throttle - 10                             (approaching throttling)
    NOMINAL   below all of that

`active` trips (fan steps) are ignored: they say a fan turns, not that the machine is hot.
Trip temperatures <= 0 C are firmware placeholders and ignored; a zone with no usable trip
point cannot be judged and is skipped. Disabled zones (`mode` = disabled) are skipped.
With several zones (or sensors), the hottest level wins and `detail` names that one.

Trip points are read once at discovery (they are firmware limits); only `temp` is read per
probe: one small sysfs read per zone, a few microseconds each.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from turbospark_app.engine.power import ThermalLevel

from ._files import read_small

SYSFS_THERMAL_ROOT = Path("/sys/class/thermal")
FAIR_MARGIN_C = 10.0
CRITICAL_MARGIN_C = 5.0
NO_PASSIVE_THROTTLE_MARGIN_C = 15.0
PSUTIL_MIN_INTERVAL_S = 1.0

SYSFS_SOURCE = "sysfs thermal zones"
PSUTIL_SOURCE = "psutil sensors"


def _usable(trip_c: float | None) -> float | None:
    """A trip temperature, or None for a missing one or a firmware placeholder (<= 0 C)."""
    return trip_c if trip_c is not None and trip_c > 0 else None


@dataclass(frozen=True)
class Thresholds:
    """Temperatures (C) at which a zone becomes FAIR / SERIOUS / CRITICAL.

    `critical` is None for a zone with only a passive trip: nothing says where danger starts.
    """

    fair: float
    serious: float
    critical: float | None

    @classmethod
    def for_trips(
        cls,
        *,
        passive: float | None = None,
        hot: float | None = None,
        critical: float | None = None,
    ) -> Thresholds | None:
        """The module docstring's mapping; None when no trip point is usable (all <= 0)."""
        passive, hot, critical = (_usable(t) for t in (passive, hot, critical))
        ceilings = [t for t in (hot, critical) if t is not None]
        if passive is None and not ceilings:
            return None
        critical_candidates = []
        if hot is not None:
            critical_candidates.append(hot)
        if critical is not None:
            critical_candidates.append(critical - CRITICAL_MARGIN_C)
        critical_at = min(critical_candidates) if critical_candidates else None
        throttle = passive if passive is not None else min(ceilings) - NO_PASSIVE_THROTTLE_MARGIN_C
        return cls(fair=throttle - FAIR_MARGIN_C, serious=throttle, critical=critical_at)

    def level(self, temp_c: float) -> ThermalLevel:
        """The level for `temp_c`."""
        if self.critical is not None and temp_c >= self.critical:
            return ThermalLevel.CRITICAL
        if temp_c >= self.serious:
            return ThermalLevel.SERIOUS
        if temp_c >= self.fair:
            return ThermalLevel.FAIR
        return ThermalLevel.NOMINAL

    def describe(self) -> str:
        """E.g. "fair at 75.0C, serious at 85.0C, critical at 100.0C", for the detail."""
        parts = [
            f"{name} at {value:.1f}C"
            for name, value in (
                ("fair", self.fair),
                ("serious", self.serious),
                ("critical", self.critical),
            )
            if value is not None
        ]
        return ", ".join(parts)


@dataclass(frozen=True)
class _Zone:
    name: str  # "thermal_zone0 (x86_pkg_temp)"
    temp_path: str  # str, not Path: skips an fspath() per probe
    thresholds: Thresholds


def _read_text(path: Path) -> str:
    return read_small(path).decode("ascii", errors="replace").strip()


def _read_millidegrees(path: str | Path) -> float:
    return int(read_small(path)) / 1000.0  # int() accepts b"45000\n"


class SysfsThermalSource:
    """Linux thermal zones under `root` (default /sys/class/thermal); see the module docstring.

    Immutable after discovery (a tuple of zones), so concurrent reads are safe.
    """

    name = SYSFS_SOURCE

    def __init__(self, zones: Sequence[_Zone]) -> None:
        self._zones = tuple(zones)

    @property
    def zone_names(self) -> tuple[str, ...]:
        return tuple(zone.name for zone in self._zones)

    @classmethod
    def discover(cls, root: Path = SYSFS_THERMAL_ROOT) -> tuple[SysfsThermalSource | None, str]:
        """(source, "") when `root` has at least one zone with a usable trip point and a
        readable temp, else (None, why not)."""
        root = Path(root)
        try:
            dirs = sorted(root.glob("thermal_zone*"), key=_zone_sort_key)
        except OSError as exc:
            return None, f"{root}: {exc}"
        if not dirs:
            return None, f"no thermal zones in {root}"
        zones: list[_Zone] = []
        skipped: list[str] = []
        for zone_dir in dirs:
            zone, why_not = _discover_zone(zone_dir)
            if zone is None:
                skipped.append(f"{zone_dir.name}: {why_not}")
            else:
                zones.append(zone)
        if not zones:
            return None, f"no usable thermal zone in {root} ({'; '.join(skipped)})"
        return cls(zones), ""

    def read(self) -> tuple[ThermalLevel | None, str]:
        worst: tuple[ThermalLevel, _Zone, float] | None = None
        failures: list[str] = []
        for zone in self._zones:
            try:
                temp = _read_millidegrees(zone.temp_path)
            except (OSError, ValueError) as exc:
                failures.append(f"{zone.name}: {exc}")
                continue
            level = zone.thresholds.level(temp)
            if worst is None or level > worst[0]:
                worst = (level, zone, temp)
        if worst is None:
            return None, f"no zone temperature readable ({'; '.join(failures)})"
        level, zone, temp = worst
        detail = (
            f"{zone.name} {temp:.1f}C ({zone.thresholds.describe()}); "
            f"{len(self._zones)} zone(s)"
        )
        if failures:
            detail += f", {len(failures)} unreadable"
        return level, detail


def _zone_sort_key(path: Path) -> tuple[int, str]:
    suffix = path.name.removeprefix("thermal_zone")
    return (int(suffix), "") if suffix.isdigit() else (1 << 30, path.name)


def _discover_zone(zone_dir: Path) -> tuple[_Zone | None, str]:
    """One zone's cached trip thresholds, or (None, why it cannot be used)."""
    try:
        if _read_text(zone_dir / "mode") == "disabled":
            return None, "disabled"
    except OSError:
        pass  # no mode file: enabled
    try:
        kind = _read_text(zone_dir / "type")
    except OSError:
        kind = "?"
    trips: dict[str, float] = {}
    for type_path in zone_dir.glob("trip_point_*_type"):
        temp_path = type_path.with_name(type_path.name.removesuffix("_type") + "_temp")
        try:
            trip_type = _read_text(type_path)
            trip_temp = _read_millidegrees(temp_path)
        except (OSError, ValueError):
            continue
        if trip_type in ("passive", "hot", "critical") and trip_temp > 0:
            trips[trip_type] = min(trip_temp, trips.get(trip_type, trip_temp))
    thresholds = Thresholds.for_trips(**trips)
    if thresholds is None:
        return None, "no passive/hot/critical trip point"
    temp_path = zone_dir / "temp"
    try:
        _read_millidegrees(temp_path)
    except (OSError, ValueError) as exc:
        return None, f"temp unreadable: {exc}"
    return _Zone(f"{zone_dir.name} ({kind})", str(temp_path), thresholds), ""


SensorsFn = Callable[[], Mapping[str, Sequence[Any]]]


class PsutilThermalSource:
    """psutil.sensors_temperatures(): each sensor's `current` against its `high` (as the
    throttle point) and `critical`, with the same mapping as the sysfs zones.

    psutil walks every hwmon file per call (milliseconds), so the result is reused for
    `min_interval` seconds; the cache is one (time, result) tuple swapped atomically.
    """

    name = PSUTIL_SOURCE

    def __init__(
        self,
        sensors: SensorsFn,
        *,
        min_interval: float = PSUTIL_MIN_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sensors = sensors
        self._min_interval = min_interval
        self._clock = clock
        self._cache: tuple[float, tuple[ThermalLevel | None, str]] | None = None

    @classmethod
    def discover(
        cls, sensors: SensorsFn | None, **kwargs: Any
    ) -> tuple[PsutilThermalSource | None, str]:
        """(source, "") when some sensor has a usable high/critical limit, else (None, why)."""
        if sensors is None:
            return None, "psutil.sensors_temperatures is not available on this platform"
        source = cls(sensors, **kwargs)
        level, detail = source._read_now()
        if level is None:
            return None, f"psutil sensors: {detail}"
        return source, ""

    def read(self) -> tuple[ThermalLevel | None, str]:
        now = self._clock()
        cache = self._cache
        if cache is not None and now - cache[0] < self._min_interval:
            return cache[1]
        result = self._read_now()
        self._cache = (now, result)
        return result

    def _read_now(self) -> tuple[ThermalLevel | None, str]:
        try:
            groups = self._sensors()
        except (OSError, RuntimeError) as exc:
            return None, f"sensors_temperatures() failed: {exc}"
        if not groups:
            return None, "no temperature sensors reported"
        worst: tuple[ThermalLevel, str, float, Thresholds] | None = None
        count = 0
        for chip, entries in groups.items():
            for entry in entries:
                thresholds = Thresholds.for_trips(passive=entry.high, critical=entry.critical)
                if thresholds is None or entry.current is None:
                    continue
                count += 1
                level = thresholds.level(entry.current)
                if worst is None or level > worst[0]:
                    name = f"{chip}/{entry.label}" if entry.label else chip
                    worst = (level, name, entry.current, thresholds)
        if worst is None:
            return None, "no temperature sensor with a high/critical limit"
        level, name, temp, thresholds = worst
        return level, f"{name} {temp:.1f}C ({thresholds.describe()}); {count} sensor(s)"
