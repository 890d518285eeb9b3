"""system_info / system_info_json: stable keys, right types, strict JSON, honest readings,
and its cost printed (not asserted)."""

from __future__ import annotations

import enum
import json
import os
import time

import pytest

from turbospark_app.engine.power import MemoryPressure, ThermalLevel
from turbospark_app.readings import MemoryMonitor, ThermalMonitor
from turbospark_app.readings import system_info as system_info_module
from turbospark_app.readings.system_info import (
    PROCESS_KEYS,
    READING_KEYS,
    SCHEMA_VERSION,
    SYSTEM_KEYS,
    TOP_LEVEL_KEYS,
    system_info,
    system_info_json,
)

# Written out on purpose: changing the schema must change this test (and SCHEMA_VERSION).
EXPECTED_TOP = (
    "schema_version", "timestamp", "process", "system", "thermal", "memory_pressure",
    "model", "sessions", "last_turn",
)  # fmt: skip
EXPECTED_PROCESS = ("pid", "rss_bytes", "cpu_percent")
EXPECTED_SYSTEM = ("available_memory_bytes", "total_memory_bytes", "cpu_count")
EXPECTED_READING = ("level", "label", "source", "simulated", "available", "detail")


class FixedSource:
    def __init__(self, level, name: str = "fake", detail: str = "d") -> None:
        self.level, self.name, self.detail = level, name, detail

    def read(self):
        return self.level, self.detail


def monitors(thermal_level=None, memory_level=MemoryPressure.NORMAL):
    return (
        ThermalMonitor(FixedSource(thermal_level, "none", "no thermal zones")),
        MemoryMonitor(FixedSource(memory_level, "PSI /proc/pressure/memory", "some avg10=0.00")),
    )


def snapshot(**overrides):
    thermal, memory = monitors()
    kwargs = dict(model=None, sessions=[], last_turn=None, thermal=thermal, memory=memory)
    kwargs.update(overrides)
    return json.loads(system_info_json(**kwargs))


def test_key_constants_are_the_schema() -> None:
    assert SCHEMA_VERSION == 1
    assert TOP_LEVEL_KEYS == EXPECTED_TOP
    assert PROCESS_KEYS == EXPECTED_PROCESS
    assert SYSTEM_KEYS == EXPECTED_SYSTEM
    assert READING_KEYS == EXPECTED_READING


def test_keys_stable_across_states() -> None:
    model = {"name": "SmolLM2-135M", "path": "/m.gguf", "n_ctx": 2048}
    sessions = [{"slot": 0, "session_id": "a", "kv_bytes": 1024, "lru_rank": 0}]
    last_turn = {"prompt_tokens": 12, "reused_prefix_tokens": 10, "tokens_per_sec": 31.5}
    empty = snapshot()
    full = snapshot(model=model, sessions=sessions, last_turn=last_turn)
    for doc in (empty, full):
        assert tuple(doc) == EXPECTED_TOP  # order too: stable for diffing and eyeballing
        assert tuple(doc["process"]) == EXPECTED_PROCESS
        assert tuple(doc["system"]) == EXPECTED_SYSTEM
        assert tuple(doc["thermal"]) == EXPECTED_READING
        assert tuple(doc["memory_pressure"]) == EXPECTED_READING
    assert full["model"] == model and full["sessions"] == sessions
    assert full["last_turn"] == last_turn
    assert empty["model"] is None and empty["sessions"] == [] and empty["last_turn"] is None


def test_types() -> None:
    doc = snapshot()
    assert doc["schema_version"] == SCHEMA_VERSION
    assert isinstance(doc["timestamp"], float) and abs(doc["timestamp"] - time.time()) < 60
    process = doc["process"]
    assert process["pid"] == os.getpid()
    assert isinstance(process["rss_bytes"], int) and process["rss_bytes"] > 1_000_000
    assert isinstance(process["cpu_percent"], float) and process["cpu_percent"] >= 0.0
    system = doc["system"]
    assert isinstance(system["available_memory_bytes"], int)
    assert 0 < system["available_memory_bytes"] <= system["total_memory_bytes"]
    assert system["cpu_count"] == os.cpu_count()
    for key in ("thermal", "memory_pressure"):
        reading = doc[key]
        assert isinstance(reading["label"], str) and isinstance(reading["source"], str)
        assert isinstance(reading["simulated"], bool) and isinstance(reading["available"], bool)
        assert isinstance(reading["detail"], str)
        assert reading["level"] is None or isinstance(reading["level"], str)


def test_unavailable_and_real_and_simulated_readings() -> None:
    thermal, memory = monitors(thermal_level=None, memory_level=MemoryPressure.WARNING)
    doc = snapshot(thermal=thermal, memory=memory)
    assert doc["thermal"] == {
        "level": None, "label": "unavailable", "source": "none",
        "simulated": False, "available": False, "detail": "no thermal zones",
    }  # fmt: skip
    assert doc["memory_pressure"]["level"] == "warning"
    assert doc["memory_pressure"]["source"] == "PSI /proc/pressure/memory"
    thermal.set_simulated(ThermalLevel.CRITICAL, origin="QA panel")
    doc = snapshot(thermal=thermal, memory=memory)
    assert doc["thermal"]["level"] == "critical"
    assert doc["thermal"]["label"] == "critical (simulated)"
    assert doc["thermal"]["simulated"] is True and doc["thermal"]["source"] == "simulated"
    assert doc["thermal"]["detail"] == "forced by QA panel; real source: none"


class Color(enum.Enum):
    RED = "r"


class PathLike:
    def __str__(self) -> str:
        return "/x"


def test_caller_data_made_strict_json() -> None:
    last_turn = {
        "ttft_s": float("nan"),
        "tokens_per_sec": float("inf"),
        "stop": Color.RED,
        "thermal_at_end": ThermalLevel.FAIR,
        "token_ids": (1, 2, 3),
        "path": PathLike(),
    }
    thermal, memory = monitors()
    text = system_info_json(
        model=None, sessions=[], last_turn=last_turn, thermal=thermal, memory=memory
    )
    for token in ("NaN", "Infinity"):
        assert token not in text
    doc = json.loads(text)["last_turn"]
    assert doc == {
        "ttft_s": None, "tokens_per_sec": None, "stop": "red",
        "thermal_at_end": "fair", "token_ids": [1, 2, 3], "path": "/x",
    }  # fmt: skip


def test_snapshot_does_not_alias_caller_data() -> None:
    sessions = [{"slot": 0, "kv_bytes": 10}]
    thermal, memory = monitors()
    info = system_info(
        model=None, sessions=sessions, last_turn=None, thermal=thermal, memory=memory
    )
    sessions[0]["kv_bytes"] = 99
    sessions.append({"slot": 1})
    assert info["sessions"] == [{"slot": 0, "kv_bytes": 10}]


def test_cpu_percent_measures_between_calls() -> None:
    thermal, memory = monitors()
    system_info(model=None, sessions=[], last_turn=None, thermal=thermal, memory=memory)
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:  # burn CPU so the next sample is non-zero
        pass
    info = system_info(model=None, sessions=[], last_turn=None, thermal=thermal, memory=memory)
    assert info["process"]["cpu_percent"] > 0.0


def test_process_sampler_is_cached() -> None:
    thermal, memory = monitors()
    system_info(model=None, sessions=[], last_turn=None, thermal=thermal, memory=memory)
    first = system_info_module._sampler._process
    system_info(model=None, sessions=[], last_turn=None, thermal=thermal, memory=memory)
    assert system_info_module._sampler._process is first is not None


@pytest.mark.parametrize("real", [False, True])
def test_cost_report(real: bool) -> None:
    """Benchmark-like print (not a timed assertion): the GUI polls this every second."""
    if real:
        thermal, memory = ThermalMonitor(), MemoryMonitor()
    else:
        thermal, memory = monitors(ThermalLevel.NOMINAL)
    sessions = [
        {"slot": i, "session_id": f"s{i}", "kv_bytes": 1 << 20, "lru_rank": i} for i in range(4)
    ]
    kwargs = dict(
        model={"name": "m"},
        sessions=sessions,
        last_turn={"tokens": 10},
        thermal=thermal,
        memory=memory,
    )
    system_info_json(**kwargs)
    n = 500
    start = time.perf_counter()
    for _ in range(n):
        text = system_info_json(**kwargs)
    per_call_us = (time.perf_counter() - start) / n * 1e6
    print(
        f"\nsystem_info_json ({'this machine' if real else 'fixed sources'}): "
        f"{per_call_us:.0f} us/call, "
        f"{len(text)} bytes; thermal={json.loads(text)['thermal']['label']} "
        f"memory={json.loads(text)['memory_pressure']['label']}"
    )
    assert tuple(json.loads(text)) == EXPECTED_TOP
