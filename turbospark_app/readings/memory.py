"""Memory pressure: macOS kern.memorystatus_vm_pressure_level, Linux PSI, psutil fallback.

Discovery (`discover_memory_source`) runs once and picks the first source that works:

1. macOS: sysctl `kern.memorystatus_vm_pressure_level`: 1 NORMAL, 2 WARNING, 4 CRITICAL
   (the kernel's own judgement; any other value is reported unavailable).
2. Linux: PSI, `/proc/pressure/memory` (the share of the last 10 s that tasks were stalled
   waiting for memory; "some" = at least one task, "full" = all non-idle tasks at once):

       CRITICAL  full avg10 >= 10  or  some avg10 >= 40
       WARNING   some avg10 >= 10
       NORMAL    otherwise

   10% of wall time lost to memory stalls is already felt as lag; "full" stalls mean the
   whole machine is stalled, so a smaller share of those is critical.
3. psutil.virtual_memory() (any platform; also Linux without PSI, e.g. psi=0 kernels):

       CRITICAL  available < 5% of total
       WARNING   available < 15% of total
       NORMAL    otherwise

4. Otherwise "unavailable" (psutil failing), never NORMAL by default.

PSI is preferred over available memory: stalls measure the pressure itself, while a low
available figure may be harmless cache or, on macOS, compressed memory.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable


from turbospark_app.engine.power import MemoryPressure

from ._files import read_small
from .macos import SysctlInt
from .monitor import LevelMonitor
from .reading import MemoryReading
from .simulation import MEMORY_ENV

PSI_MEMORY_PATH = Path("/proc/pressure/memory")
MACOS_PRESSURE_SYSCTL = "kern.memorystatus_vm_pressure_level"

PSI_SOME_WARNING = 10.0
PSI_SOME_CRITICAL = 40.0
PSI_FULL_CRITICAL = 10.0
AVAILABLE_WARNING_PERCENT = 15.0
AVAILABLE_CRITICAL_PERCENT = 5.0

# kern.memorystatus_vm_pressure_level values (kVMPressure{Normal,Warning,Critical}).
_MACOS_LEVELS = {1: MemoryPressure.NORMAL, 2: MemoryPressure.WARNING, 4: MemoryPressure.CRITICAL}

MACOS_SOURCE = MACOS_PRESSURE_SYSCTL
PSI_SOURCE = "PSI /proc/pressure/memory"
PSUTIL_SOURCE = "psutil available memory"
NO_SOURCE = "none"

_GIB = 1024**3


class UnavailableMemorySource:
    """No memory-pressure reading on this machine; `reason` says what was tried."""

    name = NO_SOURCE

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def read(self) -> tuple[MemoryPressure | None, str]:
        return None, self.reason


class MacMemorySource:
    """The macOS sysctl through `sysctl` (a `SysctlInt`, or a fake in tests)."""

    name = MACOS_SOURCE

    def __init__(self, sysctl: Callable[[], int]) -> None:
        self._sysctl = sysctl

    def read(self) -> tuple[MemoryPressure | None, str]:
        try:
            raw = self._sysctl()
        except OSError as exc:
            return None, f"sysctl failed: {exc}"
        level = _MACOS_LEVELS.get(raw)
        if level is None:
            return None, f"{MACOS_PRESSURE_SYSCTL} returned unknown value {raw}"
        return level, f"{MACOS_PRESSURE_SYSCTL}={raw}"


def parse_psi(text: str) -> dict[str, float]:
    """{"some": avg10, "full": avg10} from a PSI file; "full" is 0.0 when the kernel omits it.

    Raises ValueError when there is no parsable "some avg10=" line.
    """
    result: dict[str, float] = {}
    for line in text.splitlines():
        kind, _, fields = line.partition(" ")
        if kind not in ("some", "full"):
            continue
        for field in fields.split():
            key, _, value = field.partition("=")
            if key == "avg10":
                result[kind] = float(value)
                break
    if "some" not in result:
        raise ValueError(f"no 'some avg10=' in PSI text {text[:80]!r}")
    result.setdefault("full", 0.0)
    return result


def psi_level(some_avg10: float, full_avg10: float) -> MemoryPressure:
    """The PSI thresholds of the module docstring."""
    if full_avg10 >= PSI_FULL_CRITICAL or some_avg10 >= PSI_SOME_CRITICAL:
        return MemoryPressure.CRITICAL
    if some_avg10 >= PSI_SOME_WARNING:
        return MemoryPressure.WARNING
    return MemoryPressure.NORMAL


class PsiMemorySource:
    """Linux PSI at `path`; one small read per probe, no state kept."""

    name = PSI_SOURCE

    def __init__(self, path: Path = PSI_MEMORY_PATH) -> None:
        self.path = Path(path)
        self._path_str = str(self.path)

    @classmethod
    def discover(cls, path: Path = PSI_MEMORY_PATH) -> tuple[PsiMemorySource | None, str]:
        """(source, "") when `path` reads and parses now, else (None, why not).

        A kernel booted with psi=0 keeps the file but fails reads (EOPNOTSUPP): caught here.
        """
        source = cls(path)
        level, detail = source.read()
        if level is None:
            return None, detail
        return source, ""

    def read(self) -> tuple[MemoryPressure | None, str]:
        try:
            psi = parse_psi(read_small(self._path_str).decode("ascii", errors="replace"))
        except (OSError, ValueError) as exc:
            return None, f"PSI unreadable: {exc}"
        some, full = psi["some"], psi["full"]
        return psi_level(some, full), f"some avg10={some:.2f} full avg10={full:.2f}"


def available_level(available_bytes: int, total_bytes: int) -> MemoryPressure:
    """The available-memory thresholds of the module docstring."""
    percent = 100.0 * available_bytes / total_bytes
    if percent < AVAILABLE_CRITICAL_PERCENT:
        return MemoryPressure.CRITICAL
    if percent < AVAILABLE_WARNING_PERCENT:
        return MemoryPressure.WARNING
    return MemoryPressure.NORMAL


def _psutil_virtual_memory() -> Any:
    """psutil's virtual_memory(), psutil imported on first use (not at start-up: PSI and the
    macOS sysctl need none of it)."""
    import psutil

    return psutil.virtual_memory()


class PsutilMemorySource:
    """Available memory as a share of total, from `virtual_memory` (psutil's by default).

    `note` (e.g. why PSI was not used) is appended to every detail.
    """

    name = PSUTIL_SOURCE

    def __init__(
        self, virtual_memory: Callable[[], Any] | None = None, note: str = ""
    ) -> None:
        self._virtual_memory = virtual_memory or _psutil_virtual_memory
        self._note = note

    def read(self) -> tuple[MemoryPressure | None, str]:
        try:
            vm = self._virtual_memory()
        except (OSError, RuntimeError) as exc:
            return None, f"virtual_memory() failed: {exc}"
        if not vm.total:
            return None, "virtual_memory() reported a total of 0 bytes"
        detail = (
            f"available {vm.available / _GIB:.1f} GiB of {vm.total / _GIB:.1f} GiB "
            f"({100.0 * vm.available / vm.total:.1f}%)"
        )
        if self._note:
            detail += f"; {self._note}"
        return available_level(vm.available, vm.total), detail


def discover_memory_source(
    *,
    platform: str | None = None,
    psi_path: Path = PSI_MEMORY_PATH,
    virtual_memory: Callable[[], Any] | None = None,
    sysctl: Callable[[str], Callable[[], int]] = SysctlInt,
) -> MacMemorySource | PsiMemorySource | PsutilMemorySource | UnavailableMemorySource:
    """The first working memory-pressure source for `platform` (default: this one).

    `sysctl` builds the macOS call from the sysctl name (tests pass a fake).
    """
    platform = sys.platform if platform is None else platform
    tried: list[str] = []
    if platform == "darwin":
        try:
            call = sysctl(MACOS_PRESSURE_SYSCTL)
            source = MacMemorySource(call)
            level, detail = source.read()  # one real call now: report a broken sysctl here
        except OSError as exc:
            level, detail = None, f"sysctl unreachable: {exc}"
        if level is not None:
            return source
        tried.append(f"{MACOS_PRESSURE_SYSCTL}: {detail}")
    elif platform.startswith("linux"):
        psi, why_not = PsiMemorySource.discover(psi_path)
        if psi is not None:
            return psi
        tried.append(why_not)
    fallback = PsutilMemorySource(virtual_memory, note="; ".join(tried))
    level, detail = fallback.read()
    if level is not None:
        return fallback
    tried.append(detail)
    return UnavailableMemorySource("; ".join(tried))


class MemoryMonitor(LevelMonitor[MemoryPressure, MemoryReading]):
    """Memory-pressure readings for the status bar and `probe()` for RateConfig.memory_probe."""

    _level_type = MemoryPressure
    _reading_type = MemoryReading
    _pacing_default = MemoryPressure.NORMAL
    _env_name = MEMORY_ENV
    _settings_field = "memory"
    _discover = staticmethod(discover_memory_source)
