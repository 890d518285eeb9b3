"""Thermal sources: the trip-point mapping, fake sysfs trees, psutil sensors, macOS via a fake
call, and discovery never pretending NOMINAL."""

from __future__ import annotations

import time
from collections import namedtuple
from pathlib import Path

import pytest

from turbospark_app.engine.power import ThermalLevel
from turbospark_app.readings.monitor import PROBE_MAX_AGE_S
from turbospark_app.readings.thermal import (
    MACOS_SOURCE,
    NO_SOURCE,
    PSUTIL_SOURCE,
    SYSFS_SOURCE,
    MacThermalSource,
    PsutilThermalSource,
    SysfsThermalSource,
    ThermalMonitor,
    Thresholds,
    UnavailableThermalSource,
    discover_thermal_source,
)

Shwtemp = namedtuple("Shwtemp", "label current high critical")  # psutil's shape


def make_zone(
    root: Path,
    index: int,
    temp_c: float | None,
    trips: list[tuple[str, float]] = (),  # type: ignore[assignment]
    *,
    kind: str = "acpitz",
    mode: str | None = None,
    temp_text: str | None = None,
) -> Path:
    """A fake /sys/class/thermal/thermal_zoneN in millidegrees, as the kernel writes it."""
    zone = root / f"thermal_zone{index}"
    zone.mkdir(parents=True)
    (zone / "type").write_text(kind + "\n")
    if temp_text is not None:
        (zone / "temp").write_text(temp_text)
    elif temp_c is not None:
        (zone / "temp").write_text(f"{int(temp_c * 1000)}\n")
    if mode is not None:
        (zone / "mode").write_text(mode + "\n")
    for i, (trip_type, trip_c) in enumerate(trips):
        (zone / f"trip_point_{i}_type").write_text(trip_type + "\n")
        (zone / f"trip_point_{i}_temp").write_text(f"{int(trip_c * 1000)}\n")
    return zone


def set_temp(zone: Path, temp_c: float) -> None:
    (zone / "temp").write_text(f"{int(temp_c * 1000)}\n")


# -- the mapping -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("temp", "expected"),
    [
        (20.0, ThermalLevel.NOMINAL),
        (74.9, ThermalLevel.NOMINAL),
        (75.0, ThermalLevel.FAIR),  # passive - 10
        (84.9, ThermalLevel.FAIR),
        (85.0, ThermalLevel.SERIOUS),  # passive: throttling
        (99.9, ThermalLevel.SERIOUS),
        (100.0, ThermalLevel.CRITICAL),  # critical - 5
        (130.0, ThermalLevel.CRITICAL),
    ],
)
def test_passive_and_critical_trips(temp: float, expected: ThermalLevel) -> None:
    thresholds = Thresholds.for_trips(passive=85.0, critical=105.0)
    assert thresholds == Thresholds(fair=75.0, serious=85.0, critical=100.0)
    assert thresholds.level(temp) is expected


def test_hot_trip_is_critical_when_lower_than_critical_margin() -> None:
    thresholds = Thresholds.for_trips(passive=80.0, hot=90.0, critical=110.0)
    assert thresholds.critical == 90.0
    assert thresholds.level(89.9) is ThermalLevel.SERIOUS
    assert thresholds.level(90.0) is ThermalLevel.CRITICAL


def test_without_passive_trip_throttle_is_derived_from_the_ceiling() -> None:
    thresholds = Thresholds.for_trips(critical=100.0)
    assert thresholds == Thresholds(fair=75.0, serious=85.0, critical=95.0)
    only_hot = Thresholds.for_trips(hot=90.0)
    assert only_hot == Thresholds(fair=65.0, serious=75.0, critical=90.0)


def test_passive_only_has_no_critical_level() -> None:
    thresholds = Thresholds.for_trips(passive=70.0)
    assert thresholds.critical is None
    assert thresholds.level(500.0) is ThermalLevel.SERIOUS


@pytest.mark.parametrize("trips", [{}, {"critical": 0.0}, {"passive": -273.0, "hot": 0.0}])
def test_no_usable_trip_point_means_no_thresholds(trips: dict[str, float]) -> None:
    assert Thresholds.for_trips(**trips) is None


# -- sysfs -------------------------------------------------------------------------------


def test_sysfs_zone_levels_follow_temperature(tmp_path: Path) -> None:
    trips = [("passive", 85.0), ("critical", 105.0)]
    zone = make_zone(tmp_path, 0, 40.0, trips, kind="x86_pkg_temp")
    source, why_not = SysfsThermalSource.discover(tmp_path)
    assert source is not None and why_not == ""
    assert source.zone_names == ("thermal_zone0 (x86_pkg_temp)",)
    for temp, expected in [
        (40, ThermalLevel.NOMINAL),
        (80, ThermalLevel.FAIR),
        (90, ThermalLevel.SERIOUS),
        (101, ThermalLevel.CRITICAL),
    ]:
        set_temp(zone, temp)
        level, detail = source.read()
        assert level is expected
        assert f"{temp:.1f}C" in detail and "thermal_zone0 (x86_pkg_temp)" in detail


def test_sysfs_hottest_zone_wins_and_is_named(tmp_path: Path) -> None:
    make_zone(tmp_path, 0, 50.0, [("critical", 105.0)], kind="acpitz")  # nominal
    make_zone(tmp_path, 1, 88.0, [("passive", 85.0)], kind="x86_pkg_temp")  # serious
    make_zone(tmp_path, 2, 70.0, [("passive", 75.0), ("critical", 100.0)], kind="pch")  # fair
    source, _ = SysfsThermalSource.discover(tmp_path)
    level, detail = source.read()
    assert level is ThermalLevel.SERIOUS
    assert detail.startswith("thermal_zone1 (x86_pkg_temp) 88.0C")
    assert "3 zone(s)" in detail


def test_sysfs_lowest_of_several_passive_trips_and_active_ignored(tmp_path: Path) -> None:
    make_zone(
        tmp_path,
        0,
        72.0,
        [("active", 40.0), ("passive", 95.0), ("passive", 80.0), ("critical", 110.0)],
    )
    source, _ = SysfsThermalSource.discover(tmp_path)
    # throttle at 80 (not 95), FAIR from 70; the 40 C active (fan) trip is not a level
    assert source.read()[0] is ThermalLevel.FAIR


def test_sysfs_zones_sorted_numerically(tmp_path: Path) -> None:
    for i in (10, 2, 1):
        make_zone(tmp_path, i, 30.0, [("critical", 100.0)])
    source, _ = SysfsThermalSource.discover(tmp_path)
    names = [n.split()[0] for n in source.zone_names]
    assert names == ["thermal_zone1", "thermal_zone2", "thermal_zone10"]


def test_sysfs_skips_disabled_tripless_and_unreadable_zones(tmp_path: Path) -> None:
    make_zone(tmp_path, 0, 99.0, [("critical", 100.0)], mode="disabled")
    make_zone(tmp_path, 1, 99.0, [("active", 50.0)])  # no passive/hot/critical
    make_zone(tmp_path, 2, None, [("critical", 100.0)])  # no temp file (iwlwifi when down)
    make_zone(tmp_path, 3, 99.0, [("critical", 0.0)])  # firmware placeholder trip
    make_zone(tmp_path, 4, 30.0, [("critical", 100.0)], mode="enabled")
    source, _ = SysfsThermalSource.discover(tmp_path)
    assert source.zone_names == ("thermal_zone4 (acpitz)",)
    assert source.read()[0] is ThermalLevel.NOMINAL


@pytest.mark.parametrize(
    "build",
    [
        lambda root: None,  # empty directory
        lambda root: make_zone(root, 0, 50.0, []),  # zone without trips
        lambda root: make_zone(root, 0, None, [("critical", 100.0)], temp_text="garbage"),
    ],
)
def test_sysfs_discovery_reports_why_not(tmp_path: Path, build) -> None:
    build(tmp_path)
    source, why_not = SysfsThermalSource.discover(tmp_path)
    assert source is None
    assert str(tmp_path) in why_not


def test_sysfs_missing_root(tmp_path: Path) -> None:
    source, why_not = SysfsThermalSource.discover(tmp_path / "nope")
    assert source is None and "no thermal zones" in why_not


def test_sysfs_zone_vanishing_after_discovery_is_unavailable_not_nominal(tmp_path: Path) -> None:
    zone = make_zone(tmp_path, 0, 90.0, [("passive", 85.0)])
    other = make_zone(tmp_path, 1, 30.0, [("passive", 85.0)])
    source, _ = SysfsThermalSource.discover(tmp_path)
    (zone / "temp").unlink()
    level, detail = source.read()
    assert level is ThermalLevel.NOMINAL and "1 unreadable" in detail  # the other zone still reads
    (other / "temp").write_text("not a number\n")
    level, detail = source.read()
    assert level is None
    assert "no zone temperature readable" in detail


def test_sysfs_discovery_is_cached(tmp_path: Path) -> None:
    make_zone(tmp_path, 0, 30.0, [("passive", 85.0)])
    source, _ = SysfsThermalSource.discover(tmp_path)
    make_zone(tmp_path, 1, 99.0, [("passive", 85.0)])  # appears after discovery: not read
    assert source.read()[0] is ThermalLevel.NOMINAL


# -- psutil ------------------------------------------------------------------------------


def test_psutil_sensors_high_and_critical() -> None:
    readings = {
        "coretemp": [
            Shwtemp("Package id 0", 82.0, 80.0, 100.0),  # >= high: serious
            Shwtemp("Core 0", 60.0, 80.0, 100.0),
        ],
        "nvme": [Shwtemp("Composite", 40.0, None, None)],  # no limits: ignored
    }
    source, why_not = PsutilThermalSource.discover(lambda: readings)
    assert source is not None and why_not == ""
    level, detail = source.read()
    assert level is ThermalLevel.SERIOUS
    assert detail.startswith("coretemp/Package id 0 82.0C") and "2 sensor(s)" in detail


@pytest.mark.parametrize(
    ("sensors", "reason"),
    [
        (None, "not available on this platform"),
        (lambda: {}, "no temperature sensors reported"),
        (
            lambda: {"acpi": [Shwtemp("", 40.0, None, None)]},
            "no temperature sensor with a high/critical",
        ),
    ],
)
def test_psutil_discovery_reports_why_not(sensors, reason: str) -> None:
    source, why_not = PsutilThermalSource.discover(sensors)
    assert source is None and reason in why_not


def test_psutil_reads_are_rate_limited() -> None:
    now = [100.0]
    calls = []
    temps = [30.0]

    def sensors():
        calls.append(now[0])
        return {"k10temp": [Shwtemp("Tctl", temps[0], 80.0, 100.0)]}

    source = PsutilThermalSource(sensors, min_interval=1.0, clock=lambda: now[0])
    assert source.read()[0] is ThermalLevel.NOMINAL
    temps[0] = 90.0
    now[0] = 100.5
    assert source.read()[0] is ThermalLevel.NOMINAL  # cached
    now[0] = 101.0
    assert source.read()[0] is ThermalLevel.SERIOUS
    assert calls == [100.0, 101.0]


def test_psutil_sensor_failure_is_unavailable() -> None:
    def broken():
        raise OSError("hwmon gone")

    level, detail = PsutilThermalSource(broken).read()
    assert level is None and "hwmon gone" in detail


# -- macOS via a fake call ---------------------------------------------------------------


@pytest.mark.parametrize("raw", [0, 1, 2, 3])
def test_macos_thermal_state_maps_directly(raw: int) -> None:
    level, detail = MacThermalSource(lambda: raw).read()
    assert level is ThermalLevel(raw) and detail == f"thermalState={raw}"


def test_macos_unknown_state_or_failure_is_unavailable() -> None:
    assert MacThermalSource(lambda: 7).read()[0] is None

    def fail() -> int:
        raise OSError("no runtime")

    level, detail = MacThermalSource(fail).read()
    assert level is None and "no runtime" in detail


# -- discovery ---------------------------------------------------------------------------


def test_discover_darwin_uses_objc(tmp_path: Path) -> None:
    source = discover_thermal_source(platform="darwin", objc_state=lambda: (lambda: 2))
    assert source.name == MACOS_SOURCE
    monitor = ThermalMonitor(source)
    assert monitor.read().level is ThermalLevel.SERIOUS and monitor.read().label == "serious"


def test_discover_darwin_runtime_missing_is_unavailable() -> None:
    def no_runtime():
        raise OSError("library 'objc' not found")

    source = discover_thermal_source(platform="darwin", objc_state=no_runtime)
    assert isinstance(source, UnavailableThermalSource)
    assert "objc" in source.read()[1]


def test_discover_linux_prefers_sysfs_then_psutil(tmp_path: Path) -> None:
    sensors = lambda: {"coretemp": [Shwtemp("Core 0", 50.0, 80.0, 100.0)]}  # noqa: E731
    make_zone(tmp_path / "thermal", 0, 30.0, [("critical", 100.0)])
    with_zones = discover_thermal_source(
        platform="linux", sysfs_root=tmp_path / "thermal", sensors=sensors
    )
    assert with_zones.name == SYSFS_SOURCE
    without = discover_thermal_source(
        platform="linux", sysfs_root=tmp_path / "empty", sensors=sensors
    )
    assert without.name == PSUTIL_SOURCE


def test_discover_nothing_is_unavailable_never_nominal(tmp_path: Path) -> None:
    source = discover_thermal_source(platform="linux", sysfs_root=tmp_path, sensors=lambda: {})
    assert source.name == NO_SOURCE
    monitor = ThermalMonitor(source)
    reading = monitor.read()
    assert reading.level is None and not reading.available
    assert reading.label == "unavailable" and reading.source == NO_SOURCE
    assert "no thermal zones" in reading.detail and "no temperature sensors" in reading.detail
    # pacing cannot step on an unknown, but only the probe says NOMINAL
    assert monitor.probe() is ThermalLevel.NOMINAL


def test_monitor_through_fake_sysfs_as_engine_probe(tmp_path: Path) -> None:
    zone = make_zone(tmp_path, 0, 30.0, [("passive", 85.0), ("critical", 105.0)])
    monitor = ThermalMonitor(
        discover_thermal_source(platform="linux", sysfs_root=tmp_path, sensors=None)
    )
    probe = monitor.probe  # what RateConfig.thermal_probe receives
    assert probe() is ThermalLevel.NOMINAL
    set_temp(zone, 102.0)
    assert monitor.read().label == "critical"  # what is shown is read now
    assert probe() is ThermalLevel.NOMINAL  # pacing: a level read within PROBE_MAX_AGE_S
    time.sleep(PROBE_MAX_AGE_S + 0.01)
    assert probe() is ThermalLevel.CRITICAL


# -- cost --------------------------------------------------------------------------------


def _per_call_us(fn, n: int = 5000) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def test_probe_cost_report(tmp_path: Path) -> None:
    """Benchmark-like print (not a timed assertion): probe() is polled every 8 decode tokens."""
    for i in range(8):
        make_zone(tmp_path, i, 40.0 + i, [("passive", 85.0), ("critical", 105.0)])
    fake = ThermalMonitor(
        discover_thermal_source(platform="linux", sysfs_root=tmp_path, sensors=None)
    )
    real = ThermalMonitor()
    print(
        f"\nthermal probe: fake sysfs 8 zones {_per_call_us(fake.probe):.1f} us/call; "
        f"this machine ({real.read().source}: {real.read().label}) "
        f"{_per_call_us(real.probe):.2f} us/call"
    )
    assert fake.probe() is ThermalLevel.NOMINAL  # 47 C < 75 C
