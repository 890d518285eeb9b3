"""Memory-pressure sources: PSI parsing and thresholds on fake files, psutil fallback with a
mocked virtual_memory, macOS via a fake sysctl, and discovery order."""

from __future__ import annotations

import time
from collections import namedtuple
from pathlib import Path

import pytest

from turbospark_app.engine.power import MemoryPressure
from turbospark_app.readings.monitor import PROBE_MAX_AGE_S
from turbospark_app.readings.memory import (
    MACOS_SOURCE,
    NO_SOURCE,
    PSI_SOURCE,
    PSUTIL_SOURCE,
    MacMemorySource,
    MemoryMonitor,
    PsiMemorySource,
    PsutilMemorySource,
    available_level,
    discover_memory_source,
    parse_psi,
    psi_level,
)

Svmem = namedtuple("Svmem", "total available")
GIB = 1024**3


def psi_text(some: float, full: float | None = 0.0) -> str:
    """A /proc/pressure/memory as the kernel writes it."""
    text = f"some avg10={some:.2f} avg60=1.50 avg300=0.75 total=123456\n"
    if full is not None:
        text += f"full avg10={full:.2f} avg60=0.30 avg300=0.10 total=4567\n"
    return text


def write_psi(tmp_path: Path, some: float, full: float | None = 0.0) -> Path:
    path = tmp_path / "memory"
    path.write_text(psi_text(some, full))
    return path


def test_parse_psi_reads_avg10_of_both_lines() -> None:
    assert parse_psi(psi_text(12.34, 5.67)) == {"some": 12.34, "full": 5.67}


def test_parse_psi_without_full_line() -> None:
    assert parse_psi(psi_text(3.0, None)) == {"some": 3.0, "full": 0.0}


@pytest.mark.parametrize(
    "text", ["", "garbage\n", "full avg10=1.00 avg60=0 avg300=0 total=0\n", "some avg10=x\n"]
)
def test_parse_psi_rejects_malformed(text: str) -> None:
    with pytest.raises(ValueError):
        parse_psi(text)


@pytest.mark.parametrize(
    ("some", "full", "expected"),
    [
        (0.0, 0.0, MemoryPressure.NORMAL),
        (9.99, 9.99, MemoryPressure.NORMAL),
        (10.0, 0.0, MemoryPressure.WARNING),
        (39.99, 9.99, MemoryPressure.WARNING),
        (40.0, 0.0, MemoryPressure.CRITICAL),
        (10.0, 10.0, MemoryPressure.CRITICAL),
        (0.0, 10.0, MemoryPressure.CRITICAL),  # full without some cannot happen, still critical
    ],
)
def test_psi_thresholds(some: float, full: float, expected: MemoryPressure) -> None:
    assert psi_level(some, full) is expected


def test_psi_source_rereads_file_each_probe(tmp_path: Path) -> None:
    path = write_psi(tmp_path, 0.5, 0.0)
    source, why_not = PsiMemorySource.discover(path)
    assert source is not None and why_not == ""
    assert source.read() == (MemoryPressure.NORMAL, "some avg10=0.50 full avg10=0.00")
    path.write_text(psi_text(25.0, 2.0))
    assert source.read()[0] is MemoryPressure.WARNING
    path.write_text(psi_text(55.0, 20.0))
    assert source.read()[0] is MemoryPressure.CRITICAL


def test_psi_file_disappearing_is_unavailable(tmp_path: Path) -> None:
    path = write_psi(tmp_path, 0.0)
    source, _ = PsiMemorySource.discover(path)
    path.unlink()
    level, detail = source.read()
    assert level is None and "PSI unreadable" in detail


@pytest.mark.parametrize(
    ("available_percent", "expected"),
    [
        (100.0, MemoryPressure.NORMAL),
        (15.0, MemoryPressure.NORMAL),
        (14.99, MemoryPressure.WARNING),
        (5.0, MemoryPressure.WARNING),
        (4.99, MemoryPressure.CRITICAL),
        (0.0, MemoryPressure.CRITICAL),
    ],
)
def test_available_memory_thresholds(available_percent: float, expected: MemoryPressure) -> None:
    total = 100 * GIB  # so available_percent GiB is exactly that percent
    available = int(available_percent * GIB)
    assert available_level(available, total) is expected
    level, detail = PsutilMemorySource(lambda: Svmem(total, available)).read()
    assert level is expected and f"of 100.0 GiB ({available_percent:.1f}%)" in detail


def test_psutil_source_failures_are_unavailable() -> None:
    def broken():
        raise OSError("no /proc/meminfo")

    assert PsutilMemorySource(broken).read()[0] is None
    assert PsutilMemorySource(lambda: Svmem(0, 0)).read()[0] is None


def test_discover_linux_prefers_psi(tmp_path: Path) -> None:
    path = write_psi(tmp_path, 12.0)
    source = discover_memory_source(
        platform="linux", psi_path=path, virtual_memory=lambda: Svmem(GIB, GIB)
    )
    assert source.name == PSI_SOURCE
    assert source.read()[0] is MemoryPressure.WARNING


def test_discover_linux_without_psi_falls_back_to_psutil_and_says_why(tmp_path: Path) -> None:
    (tmp_path / "memory").write_text("")  # like a psi=0 kernel: present but unreadable as PSI
    for psi_path in (tmp_path / "missing", tmp_path / "memory"):
        source = discover_memory_source(
            platform="linux", psi_path=psi_path, virtual_memory=lambda: Svmem(10 * GIB, GIB)
        )
        assert source.name == PSUTIL_SOURCE
        level, detail = source.read()
        assert level is MemoryPressure.WARNING  # 10% available
        assert "PSI unreadable" in detail


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(1, MemoryPressure.NORMAL), (2, MemoryPressure.WARNING), (4, MemoryPressure.CRITICAL)],
)
def test_macos_sysctl_levels(raw: int, expected: MemoryPressure) -> None:
    names = []

    def sysctl(name: str):
        names.append(name)
        return lambda: raw

    source = discover_memory_source(platform="darwin", sysctl=sysctl)
    assert names == ["kern.memorystatus_vm_pressure_level"]
    assert source.name == MACOS_SOURCE
    assert source.read() == (expected, f"kern.memorystatus_vm_pressure_level={raw}")


def test_macos_unknown_value_is_unavailable() -> None:
    assert MacMemorySource(lambda: 3).read()[0] is None


@pytest.mark.parametrize("failure", ["construct", "call", "value"])
def test_macos_sysctl_failure_falls_back_to_psutil(failure: str) -> None:
    def call() -> int:
        if failure == "call":
            raise OSError(1, "EPERM")
        return 0 if failure == "value" else 1

    def sysctl(name: str):
        if failure == "construct":
            raise OSError("sysctlbyname not exported")
        return call

    source = discover_memory_source(
        platform="darwin", sysctl=sysctl, virtual_memory=lambda: Svmem(10 * GIB, 5 * GIB)
    )
    assert source.name == PSUTIL_SOURCE
    level, detail = source.read()
    assert level is MemoryPressure.NORMAL and "kern.memorystatus_vm_pressure_level" in detail


def test_nothing_works_is_unavailable_never_normal(tmp_path: Path) -> None:
    def broken():
        raise OSError("boom")

    source = discover_memory_source(
        platform="linux", psi_path=tmp_path / "x", virtual_memory=broken
    )
    assert source.name == NO_SOURCE
    monitor = MemoryMonitor(source)
    reading = monitor.read()
    assert reading.level is None and reading.label == "unavailable"
    assert "PSI unreadable" in reading.detail and "boom" in reading.detail
    assert monitor.probe() is MemoryPressure.NORMAL  # pacing only


def test_monitor_with_fake_psi_as_engine_probe(tmp_path: Path) -> None:
    path = write_psi(tmp_path, 0.0)
    monitor = MemoryMonitor(discover_memory_source(platform="linux", psi_path=path))
    probe = monitor.probe  # what RateConfig.memory_probe receives
    assert probe() is MemoryPressure.NORMAL
    path.write_text(psi_text(50.0, 12.0))
    assert monitor.read().label == "critical"  # what is shown is read now
    # pacing reuses a level read less than PROBE_MAX_AGE_S ago (each stream polls every 8 tokens)
    assert probe() is MemoryPressure.NORMAL
    time.sleep(PROBE_MAX_AGE_S + 0.01)
    assert probe() is MemoryPressure.CRITICAL


def _per_call_us(fn, n: int = 5000) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def test_probe_cost_report(tmp_path: Path) -> None:
    """Benchmark-like print (not a timed assertion): probe() is polled every 8 decode tokens."""
    psi = MemoryMonitor(PsiMemorySource(write_psi(tmp_path, 1.0)))
    vm = MemoryMonitor(PsutilMemorySource())
    real = MemoryMonitor()
    print(
        f"\nmemory probe: fake PSI {_per_call_us(psi.probe):.1f} us/call; "
        f"psutil virtual_memory {_per_call_us(vm.probe):.1f} us/call; "
        f"this machine ({real.read().source}: {real.read().label}) "
        f"{_per_call_us(real.probe):.1f} us/call"
    )
    assert psi.probe() is MemoryPressure.NORMAL
