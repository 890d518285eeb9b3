"""`system_info()` / `system_info_json()`: one snapshot of the process, the machine, the
readings, the model and the sessions (the reference's `ts_system_info_json`).

Cheap enough to poll every second, unconditionally (tens of microseconds of psutil plus the two
monitors' reads; measured in tests/test_system_info.py). The key sets are defined once, below,
and every snapshot has exactly them; values that are unknown are null, never missing.

    schema_version  int
    timestamp       float, Unix seconds
    process         pid, rss_bytes, cpu_percent (share of ONE core since the previous call,
                    so up to 100 x cpu_count; 0.0 on the very first call)
    system          available_memory_bytes, total_memory_bytes, cpu_count
    thermal         level ("serious" or null), label, source, simulated, available, detail
    memory_pressure same keys as thermal
    model           the caller's dict, or null
    sessions        the caller's list of dicts (slot, session id, kv_bytes, lru_rank, ...)
    last_turn       the caller's dict, or null
"""

from __future__ import annotations

import enum
import json
import math
import os
import threading
import time
from typing import TYPE_CHECKING, Any


from .memory import MemoryMonitor
from .reading import MemoryReading, ThermalReading
from .thermal import ThermalMonitor

if TYPE_CHECKING:  # psutil is imported by the first snapshot, not at start-up
    import psutil

SCHEMA_VERSION = 1

TOP_LEVEL_KEYS: tuple[str, ...] = (
    "schema_version",
    "timestamp",
    "process",
    "system",
    "thermal",
    "memory_pressure",
    "model",
    "sessions",
    "last_turn",
)
PROCESS_KEYS: tuple[str, ...] = ("pid", "rss_bytes", "cpu_percent")
SYSTEM_KEYS: tuple[str, ...] = ("available_memory_bytes", "total_memory_bytes", "cpu_count")
READING_KEYS: tuple[str, ...] = ("level", "label", "source", "simulated", "available", "detail")


class _ProcessSampler:
    """One cached psutil.Process: cpu_percent(interval=None) measures since the previous call
    on the SAME object, so it must outlive a single snapshot. Re-created after a fork."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # cpu_percent keeps its last sample on the object
        self._process: psutil.Process | None = None

    def sample(self) -> dict[str, Any]:
        import psutil

        with self._lock:
            pid = os.getpid()
            if self._process is None or self._process.pid != pid:
                self._process = psutil.Process(pid)
                self._process.cpu_percent(interval=None)  # prime: the first value is 0.0
            process = self._process
            with process.oneshot():
                rss = process.memory_info().rss
                cpu = process.cpu_percent(interval=None)
        return {"pid": pid, "rss_bytes": int(rss), "cpu_percent": float(cpu)}


_sampler = _ProcessSampler()


def _reading_dict(reading: ThermalReading | MemoryReading) -> dict[str, Any]:
    return {
        "level": None if reading.level is None else reading.level.name.lower(),
        "label": reading.label,
        "source": reading.source,
        "simulated": reading.simulated,
        "available": reading.available,
        "detail": reading.detail,
    }


def _system() -> dict[str, Any]:
    import psutil

    vm = psutil.virtual_memory()
    return {
        "available_memory_bytes": int(vm.available),
        "total_memory_bytes": int(vm.total),
        "cpu_count": os.cpu_count(),
    }


def _jsonable(value: Any) -> Any:
    """Caller data made strict-JSON safe: NaN/inf -> null, tuples -> lists, enums -> lowercase
    names, other unknown objects -> str. Containers are copied, so the caller mutating its
    dicts later does not change a snapshot already taken."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, enum.Enum):  # before int: a ThermalLevel is an IntEnum
        return str(value.name).lower()
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return str(value)


def system_info(
    *,
    model: dict | None,
    sessions: list[dict],
    last_turn: dict | None,
    thermal: ThermalMonitor,
    memory: MemoryMonitor,
) -> dict[str, Any]:
    """One snapshot as a dict with exactly TOP_LEVEL_KEYS (see the module docstring)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "timestamp": time.time(),
        "process": _sampler.sample(),
        "system": _system(),
        "thermal": _reading_dict(thermal.read()),
        "memory_pressure": _reading_dict(memory.read()),
        "model": _jsonable(model),
        "sessions": [_jsonable(session) for session in sessions],
        "last_turn": _jsonable(last_turn),
    }


def system_info_json(
    *,
    model: dict | None,
    sessions: list[dict],
    last_turn: dict | None,
    thermal: ThermalMonitor,
    memory: MemoryMonitor,
) -> str:
    """`system_info()` as one strict JSON document (no NaN / Infinity tokens)."""
    info = system_info(
        model=model, sessions=sessions, last_turn=last_turn, thermal=thermal, memory=memory
    )
    return json.dumps(info, allow_nan=False, separators=(",", ":"))
