"""What a start no longer does before the first token: read package metadata for llama-cpp-python's
version (importlib.metadata: ~50 ms of import and ~20 ms of reading on every start)."""

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
