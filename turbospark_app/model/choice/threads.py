"""How many threads llama.cpp computes with, and who chose: `--threads`, else
$TURBOSPARK_THREADS, else the app's setting, else the machine's performance cores.

llama.cpp's kernels meet at a barrier after every graph node, so a thread on a slow core (an
Apple efficiency core, a hyper-thread sibling) holds all of them back: the default is the
physical performance cores, as llama.cpp's own `cpu_get_num_math()` picks them
(`hw.perflevel0.physicalcpu` on macOS; physical cores elsewhere), within the process's CPU
affinity. With the model on a GPU the threads only run what stays on the CPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from .common import ChoiceSpec

THREADS_ENV = "TURBOSPARK_THREADS"
THREADS_FLAG = "--threads"
MAX_THREADS = 256  # what the flag's parser takes; a count past the machine's CPUs is refused


@lru_cache(maxsize=1)
def performance_cores() -> int:
    """The physical performance cores this process may run on (at least 1)."""
    cores = 0
    if sys.platform == "darwin":
        try:
            out = subprocess.run(["sysctl", "-n", "hw.perflevel0.physicalcpu"], capture_output=True,
                                 text=True, timeout=2)
            cores = int(out.stdout.strip() or 0)
        except (OSError, ValueError, subprocess.SubprocessError):
            cores = 0
    try:
        cpus = sorted(os.sched_getaffinity(0))  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        cpus = list(range(os.cpu_count() or 1))
    if cores <= 0 and sys.platform.startswith("linux"):
        cores = _linux_cores(cpus)
    if cores <= 0:
        try:
            import psutil

            cores = int(psutil.cpu_count(logical=False) or 0)
        except Exception:
            cores = 0
    allowed = len(cpus)
    return max(1, min(cores or allowed, allowed))


def _linux_cores(cpus: list[int]) -> int:
    """Physical cores among `cpus`, from sysfs's topology (0 when it cannot say): what psutil
    reads, without importing psutil at start-up."""
    cores = set()
    for cpu in cpus:
        topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            cores.add(((topology / "physical_package_id").read_text().strip(),
                       (topology / "core_id").read_text().strip()))
        except OSError:
            return 0
    return len(cores)


def _modes() -> tuple[str, ...]:
    return ("auto", *(str(n) for n in range(1, max(os.cpu_count() or 1, 1) + 1)))


THREADS = ChoiceSpec(THREADS_FLAG, THREADS_ENV, _modes(), "thread count")


@dataclass(frozen=True)
class ThreadsChoice:
    """The thread count, the mode it came from ("auto" or a number) and its source: the flag,
    the variable's name, "setting" or "default"."""

    count: int
    mode: str
    source: str

    @property
    def overridden(self) -> bool:
        """Chosen outside the app (flag or environment): the app's setting does not apply."""
        return self.source not in ("setting", "default")


def threads_of(mode: str) -> int:
    """The count a mode stands for ("auto": the performance cores)."""
    return performance_cores() if mode == "auto" else int(mode)


def choose_threads(flag: int | str | None = None, setting: Any = None,
                   environ: Mapping[str, str] | None = None) -> ThreadsChoice:
    """flag > environment > setting > auto (the performance cores); a count past this machine's
    CPUs is refused (LoadChoiceError naming where it came from)."""
    choice = THREADS.choose(None if flag in (None, "", 0) else str(flag), setting, environ)
    return ThreadsChoice(threads_of(choice.mode), choice.mode, choice.source)
