"""Reading labels, simulated levels from the environment and from the run-time setter
(including a setter thread racing a polling thread), and probe robustness."""

from __future__ import annotations

import sys
import threading

import pytest

from turbospark_app.engine.config import RateConfig
from turbospark_app.engine.power import MemoryPressure, ThermalLevel, stepped_cap
from turbospark_app.readings import (
    MEMORY_ENV,
    THERMAL_ENV,
    MemoryMonitor,
    MemoryReading,
    SimulationError,
    SimulationSettings,
    ThermalMonitor,
    ThermalReading,
    monitors_from_environment,
    simulation_from_env,
)


class FixedSource:
    """A source that always says the same thing, counting reads."""

    def __init__(self, level, detail: str = "fixed", name: str = "fake source") -> None:
        self.level, self.detail, self.name, self.reads = level, detail, name, 0

    def read(self):
        self.reads += 1
        return self.level, self.detail


# -- readings ----------------------------------------------------------------------------


def test_labels() -> None:
    assert ThermalReading(ThermalLevel.NOMINAL, "s", False, "").label == "nominal"
    serious = ThermalReading(ThermalLevel.SERIOUS, "simulated", True, "")
    assert serious.label == "serious (simulated)"
    assert ThermalReading(None, "none", False, "why").label == "unavailable"
    assert MemoryReading(MemoryPressure.WARNING, "s", False, "").label == "warning"
    critical = MemoryReading(MemoryPressure.CRITICAL, "simulated", True, "")
    assert critical.label == "critical (simulated)"
    assert MemoryReading(None, "none", False, "").label == "unavailable"
    assert not MemoryReading(None, "none", False, "").available
    assert ThermalReading(ThermalLevel.NOMINAL, "s", False, "").available  # NOMINAL is a reading


def test_readings_are_frozen_and_validated() -> None:
    reading = ThermalReading(ThermalLevel.FAIR, "s", False, "")
    with pytest.raises(AttributeError):
        reading.level = ThermalLevel.CRITICAL  # type: ignore[misc]
    with pytest.raises(TypeError):
        ThermalReading(MemoryPressure.WARNING, "s", False, "")  # wrong enum
    with pytest.raises(TypeError):
        MemoryReading(2, "s", False, "")  # a bare int is not a level
    with pytest.raises(ValueError):
        ThermalReading(None, "simulated", True, "")  # simulated needs a level


# -- environment -------------------------------------------------------------------------


def test_env_unset_or_empty_means_real() -> None:
    assert simulation_from_env({}) == SimulationSettings(None, None)
    blank = {THERMAL_ENV: "", MEMORY_ENV: "  "}
    assert simulation_from_env(blank) == SimulationSettings(None, None)


def test_env_values_case_and_space_insensitive() -> None:
    settings = simulation_from_env({THERMAL_ENV: " Serious\n", MEMORY_ENV: "CRITICAL"})
    assert settings == SimulationSettings(ThermalLevel.SERIOUS, MemoryPressure.CRITICAL)


def test_invalid_env_value_is_a_clear_error() -> None:
    with pytest.raises(SimulationError) as info:
        simulation_from_env({THERMAL_ENV: "hot"})
    message = str(info.value)
    assert THERMAL_ENV in message and "'hot'" in message
    assert "nominal, fair, serious, critical" in message
    assert isinstance(info.value, ValueError)


def test_both_invalid_env_values_reported_together() -> None:
    with pytest.raises(SimulationError) as info:
        simulation_from_env({THERMAL_ENV: "warning", MEMORY_ENV: "serious"})
    lines = str(info.value).splitlines()
    assert len(lines) == 2
    assert THERMAL_ENV in lines[0] and MEMORY_ENV in lines[1]
    assert "normal, warning, critical" in lines[1]


def test_invalid_env_fails_at_startup_before_discovery(monkeypatch) -> None:
    monkeypatch.setenv(MEMORY_ENV, "full")
    monkeypatch.delenv(THERMAL_ENV, raising=False)
    with pytest.raises(SimulationError, match=MEMORY_ENV):
        monitors_from_environment()
    # a thermal monitor alone refuses too: the app sees the typo whichever it builds first
    with pytest.raises(SimulationError, match=MEMORY_ENV):
        ThermalMonitor.from_environment(source=FixedSource(None))


def test_env_simulation_marks_readings() -> None:
    env = {THERMAL_ENV: "serious", MEMORY_ENV: "warning"}
    thermal = ThermalMonitor.from_environment(env, source=FixedSource(None, "no sensors", "none"))
    memory = MemoryMonitor.from_environment(env, source=FixedSource(MemoryPressure.NORMAL))
    reading = thermal.read()
    assert reading == ThermalReading(
        ThermalLevel.SERIOUS, "simulated", True, f"forced by {THERMAL_ENV}; real source: none"
    )
    assert reading.label == "serious (simulated)"
    assert memory.read().label == "warning (simulated)"
    assert thermal.probe() is ThermalLevel.SERIOUS and memory.probe() is MemoryPressure.WARNING
    rate = RateConfig(thermal_probe=thermal.probe, memory_probe=memory.probe)
    assert rate.is_active()
    # what the engine computes every THERMAL_POLL_TOKENS tokens: step 2 = 0.5 x 30 tok/s
    assert stepped_cap(None, rate.thermal_probe(), rate.memory_probe()) == 15.0


def test_monitors_from_environment_with_real_discovery() -> None:
    thermal, memory = monitors_from_environment({THERMAL_ENV: "critical"})
    assert thermal.read().label == "critical (simulated)"
    assert not memory.read().simulated


# -- run-time setter ---------------------------------------------------------------------


def test_setter_forces_and_clears() -> None:
    source = FixedSource(MemoryPressure.NORMAL, "some avg10=0.00")
    monitor = MemoryMonitor(source)
    assert monitor.simulated is None and monitor.read().label == "normal"
    monitor.set_simulated(MemoryPressure.CRITICAL)
    assert monitor.simulated is MemoryPressure.CRITICAL
    assert monitor.probe() is MemoryPressure.CRITICAL
    reads_while_forced = source.reads
    reading = monitor.read()
    assert reading.simulated and reading.source == "simulated"
    assert "set at run time" in reading.detail
    assert source.reads == reads_while_forced  # forced: the platform is not polled
    monitor.set_simulated(None)
    real = MemoryReading(MemoryPressure.NORMAL, "fake source", False, "some avg10=0.00")
    assert monitor.read() == real


def test_setter_overrides_env_and_none_returns_to_real() -> None:
    monitor = ThermalMonitor.from_environment(
        {THERMAL_ENV: "fair"}, source=FixedSource(ThermalLevel.NOMINAL)
    )
    monitor.set_simulated(ThermalLevel.CRITICAL, origin="QA panel")
    assert monitor.read().detail.startswith("forced by QA panel")
    monitor.set_simulated(None)
    assert monitor.read().label == "nominal"


def test_setter_rejects_wrong_types() -> None:
    monitor = ThermalMonitor(FixedSource(ThermalLevel.NOMINAL))
    with pytest.raises(TypeError):
        monitor.set_simulated(MemoryPressure.WARNING)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        monitor.set_simulated("serious")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        monitor.set_simulated(2)  # type: ignore[arg-type]


def test_setter_thread_races_polling_thread() -> None:
    """The QA panel (GUI thread) flips levels while the engine thread polls: every observation
    must be a whole, consistent state - level and origin set by the same call."""
    monitor = ThermalMonitor(FixedSource(ThermalLevel.FAIR, "real"))
    states = [
        (ThermalLevel.SERIOUS, "origin-serious"),
        (ThermalLevel.CRITICAL, "origin-critical"),
        (ThermalLevel.NOMINAL, "origin-nominal"),
        (None, ""),
    ]
    stop = threading.Event()
    errors: list[str] = []
    seen: set[str] = set()

    def setter() -> None:
        i = 0
        while not stop.is_set():
            level, origin = states[i % len(states)]
            monitor.set_simulated(level, origin=origin)
            i += 1

    def poller() -> None:
        for _ in range(50000):
            level = monitor.probe()
            reading = monitor.read()
            if not isinstance(level, ThermalLevel):
                errors.append(f"probe returned {level!r}")
            if reading.simulated:
                expected_origin = f"origin-{reading.level.name.lower()}"
                if not reading.detail.startswith(f"forced by {expected_origin};"):
                    errors.append(f"torn state: {reading}")
            elif (reading.level, reading.detail) != (ThermalLevel.FAIR, "real"):
                errors.append(f"real reading wrong: {reading}")
            seen.add(reading.label)

    threads = [threading.Thread(target=setter), threading.Thread(target=poller)]
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible, to expose torn states
    try:
        threads[1].start()
        threads[0].start()
        threads[1].join(timeout=60)
        stop.set()
        threads[0].join(timeout=60)
    finally:
        sys.setswitchinterval(old_interval)
    assert errors == []
    assert len(seen) >= 2  # the poller really saw the setter's changes
    monitor.set_simulated(ThermalLevel.SERIOUS)
    assert monitor.probe() is ThermalLevel.SERIOUS  # settles on the last set


def test_override_is_one_store_and_one_load() -> None:
    """Deterministic half of the race test: the lock-free read path is safe only because
    set_simulated publishes the whole state in ONE store and readers load it ONCE."""
    events: list[tuple[str, object]] = []

    class Recording(ThermalMonitor):
        def __setattr__(self, name, value):
            if name == "_override":
                events.append(("store", value))
            super().__setattr__(name, value)

        def __getattribute__(self, name):
            if name == "_override":
                events.append(("load", None))
            return super().__getattribute__(name)

    monitor = Recording(FixedSource(ThermalLevel.NOMINAL))
    events.clear()
    monitor.set_simulated(ThermalLevel.SERIOUS, origin="QA panel")
    assert events == [("store", (ThermalLevel.SERIOUS, "QA panel"))]
    for call in (monitor.read, monitor.probe):
        events.clear()
        call()
        assert events == [("load", None)], call.__name__
    events.clear()
    monitor.set_simulated(None)
    monitor.read()
    assert events == [("store", None), ("load", None)]


# -- robustness --------------------------------------------------------------------------


class ExplodingSource:
    name = "exploding"

    def read(self):
        raise RuntimeError("driver bug")


def test_a_source_bug_reads_unavailable_and_probe_keeps_pacing() -> None:
    monitor = ThermalMonitor(ExplodingSource())
    reading = monitor.read()
    assert reading.level is None and "driver bug" in reading.detail
    assert monitor.probe() is ThermalLevel.NOMINAL
    assert monitor() is ThermalLevel.NOMINAL  # the monitor itself is a probe callable
