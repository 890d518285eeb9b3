"""What a start no longer does before the first token: read package metadata for llama-cpp-python's
version (importlib.metadata: ~50 ms of import and ~20 ms of reading on every start), import
psutil where the platform's own readings serve (the Mac's, Linux's thermal zones and PSI)."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version as dist_version
from pathlib import Path

from tiny_gguf import write_tiny_gguf

from turbospark_app.model.llamacpp import library


def test_the_version_read_from_the_package_is_the_distributions() -> None:
    assert library.version() == dist_version("llama_cpp_python")


def test_a_chat_backend_loads_without_importlib_metadata(tmp_path: Path) -> None:
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path)
    code = ("import sys\n"
            "from turbospark_app.chat.backend import load_backend\n"
            f"b = load_backend({str(path)!r}, chat_template='chatml')\n"
            "assert b.model_info()['llama_cpp_python']\n"
            "print('importlib.metadata' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={"TURBOSPARK_CACHE_DIR": str(tmp_path / "c"), "TURBOSPARK_DATA_DIR": str(tmp_path / "d"),
                              "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_the_monitors_import_psutil_only_when_they_fall_back_to_it(tmp_path: Path) -> None:
    from test_readings_memory import write_psi
    from test_readings_thermal import make_zone

    make_zone(tmp_path, 0, 40.0, [("passive", 85.0), ("critical", 105.0)])
    psi = write_psi(tmp_path, 0.0)
    code = ("import sys\n"
            "from pathlib import Path\n"
            "from turbospark_app.readings import MemoryMonitor, ThermalMonitor\n"
            "from turbospark_app.readings.memory import discover_memory_source\n"
            "from turbospark_app.readings.thermal import discover_thermal_source\n"
            f"t = ThermalMonitor(discover_thermal_source(platform='linux', sysfs_root=Path({str(tmp_path)!r})))\n"
            f"m = MemoryMonitor(discover_memory_source(platform='linux', psi_path=Path({str(psi)!r})))\n"
            "print(t.probe().name, m.probe().name, 'psutil' in sys.modules)\n"
            "t2 = ThermalMonitor(discover_thermal_source(platform='linux', sysfs_root=Path('/nonexistent')))\n"
            "print('psutil' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[:2] == ["NOMINAL NORMAL False", "True"]


def test_physical_cores_from_sysfs_are_psutils() -> None:
    import os

    import psutil
    import pytest

    from turbospark_app.model.choice.threads import _linux_cores

    cpus = sorted(getattr(os, "sched_getaffinity", lambda _: set())(0))
    if not sys.platform.startswith("linux") or len(cpus) != os.cpu_count():
        pytest.skip("Linux with every CPU allowed")
    assert _linux_cores(cpus) == psutil.cpu_count(logical=False)
