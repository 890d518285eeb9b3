"""Loading llama.cpp: llama-cpp-python's low-level C binding (`llama_cpp.llama_cpp`), once.

Only the ctypes binding is loaded, not llama-cpp-python's package: its `__init__` imports the
high-level `Llama` class with its chat formats and server helpers (~0.1 s) and installs a log
callback that prints to stderr. The package is registered as an empty namespace over its own
folder, so `llama_cpp.llama_cpp` and its helper modules import as they would, and nothing else.

`backend()` initialises the backends once (CPU, and Metal where the build has it) and installs
the log capture (`log.py`) before llama.cpp says anything.
"""

from __future__ import annotations

import ctypes
import importlib.util
import re
import sys
import threading
import types
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

_lock = threading.Lock()
_ready = False


class LibraryMissing(RuntimeError):
    """llama-cpp-python is not installed, or its shared library does not load."""


@lru_cache(maxsize=1)
def binding() -> Any:
    """The `llama_cpp.llama_cpp` module (the C API's ctypes declarations)."""
    if "llama_cpp.llama_cpp" in sys.modules:
        return sys.modules["llama_cpp.llama_cpp"]
    spec = importlib.util.find_spec("llama_cpp") if "llama_cpp" not in sys.modules else None
    if "llama_cpp" not in sys.modules:
        if spec is None or not spec.submodule_search_locations:
            raise LibraryMissing("llama-cpp-python is not installed (pip install llama-cpp-python)")
        package = types.ModuleType("llama_cpp")
        package.__path__ = list(spec.submodule_search_locations)
        package.__file__ = spec.origin
        sys.modules["llama_cpp"] = package
    try:
        from llama_cpp import llama_cpp  # type: ignore[import-untyped]
    except (OSError, RuntimeError) as exc:  # the .so / .dylib itself did not load
        raise LibraryMissing(f"llama.cpp's library did not load: {exc}") from exc
    return llama_cpp


def lib_dir() -> Path:
    """The folder of libllama and the ggml libraries."""
    return Path(binding().__file__).resolve().parent / "lib"


def backend() -> Any:
    """The binding, with llama.cpp's backends initialised and its log captured (once)."""
    global _ready
    C = binding()
    if not _ready:
        with _lock:
            if not _ready:
                from .log import install

                install(C)
                C.llama_backend_init()
                _ready = True
    return C


@dataclass(frozen=True)
class Device:
    """A ggml backend device: "CPU", "Metal", ... and whether it is a GPU."""

    name: str
    description: str
    gpu: bool


@lru_cache(maxsize=1)
def _ggml() -> Any:
    """libggml (the device registry), loaded beside libllama."""
    names = {"darwin": ("libggml.dylib", "libggml.0.dylib", "libggml.so")}.get(
        sys.platform, ("libggml.so.0", "libggml.so", "ggml.dll"))
    for name in names:
        path = lib_dir() / name
        if path.exists():
            lib = ctypes.CDLL(str(path))
            lib.ggml_backend_dev_count.restype = ctypes.c_size_t
            lib.ggml_backend_dev_get.restype = ctypes.c_void_p
            lib.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
            for fn in (lib.ggml_backend_dev_name, lib.ggml_backend_dev_description):
                fn.restype = ctypes.c_char_p
                fn.argtypes = [ctypes.c_void_p]
            lib.ggml_backend_dev_type.restype = ctypes.c_int
            lib.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
            return lib
    return None


_GPU_TYPES = (1, 2)  # GGML_BACKEND_DEVICE_TYPE_GPU, _IGPU


def devices() -> tuple[Device, ...]:
    """The devices the build can run on (after `backend()`), CPU last as ggml lists it."""
    backend()
    lib = _ggml()
    if lib is None:
        return (Device("CPU", "CPU", False),)
    found = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        name = (lib.ggml_backend_dev_name(dev) or b"?").decode("utf-8", "replace")
        desc = (lib.ggml_backend_dev_description(dev) or b"").decode("utf-8", "replace")
        found.append(Device(name, desc, lib.ggml_backend_dev_type(dev) in _GPU_TYPES))
    return tuple(found)


def gpu_device() -> Device | None:
    """The first GPU device (Metal on Apple Silicon), or None: the model then runs on the CPU."""
    return next((d for d in devices() if d.gpu), None)


def cpu_features() -> tuple[str, ...]:
    """The CPU backend's SIMD features in this build, e.g. ("AVX2", "FMA", "F16C") or ("NEON",)."""
    text = backend().llama_print_system_info().decode("utf-8", "replace")
    features: list[str] = []
    for part in text.split("|"):
        key, _, value = part.rpartition("=")
        key = key.split(":")[-1].strip()
        if value.strip() == "1" and key:
            features.append(key)
    return tuple(features)


_SIMD_ORDER = ("AVX512", "AVX2", "AVX", "SSE3", "SVE", "NEON")


def cpu_label() -> str:
    """The widest SIMD level the CPU backend was built with: "AVX2", "NEON", ... or ""."""
    features = cpu_features()
    return next((f for f in _SIMD_ORDER if f in features), "")


def build_id() -> str:
    """Which llama.cpp this is, without loading it: libllama's name, size and modification
    time (a rebuilt library is another llama.cpp, whatever its version says). Cheap: no
    import, no package metadata (~20 ms to read)."""
    for folder in _package_folders():
        for name in ("libllama.dylib", "libllama.so", "llama.dll"):
            try:
                st = (Path(folder) / "lib" / name).stat()
            except OSError:
                continue
            return f"{name}:{st.st_size}:{st.st_mtime_ns}"
    return f"llama-cpp-python {version()}"


def _package_folders() -> list[str]:
    """llama_cpp's package folders, without importing it."""
    spec = importlib.util.find_spec("llama_cpp") if "llama_cpp" not in sys.modules else None
    folders = spec.submodule_search_locations if spec is not None else getattr(
        sys.modules.get("llama_cpp"), "__path__", None)
    return list(folders or ())


def version() -> str:
    """llama-cpp-python's version (its llama.cpp is pinned to it): its package's `__version__`
    line, read as text (importlib.metadata costs every start ~50 ms of import and ~20 ms of
    reading), else the installed distribution's metadata."""
    for folder in _package_folders():
        try:
            text = (Path(folder) / "__init__.py").read_text("utf-8")
        except OSError:
            continue
        found = re.search(r"""^__version__\s*=\s*["']([^"']+)["']""", text, re.M)
        if found:
            return found.group(1)
    from importlib.metadata import PackageNotFoundError, version as dist_version

    try:
        return dist_version("llama_cpp_python")
    except PackageNotFoundError:
        return "?"
