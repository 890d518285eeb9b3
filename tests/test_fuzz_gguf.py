"""Fuzzing: mutated tiny GGUFs load or are refused plainly, within a memory and time bound.

The examples run in a child process (fuzz_gguf_child.py) whose address space is capped, so an
allocation driven by a lying count fails the test instead of the machine; the child checks each
example's time itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hostile import MEMORY_CAP

CHILD = Path(__file__).resolve().parent / "fuzz_gguf_child.py"


def test_mutated_ggufs_load_or_are_refused_within_bounds(tmp_path: Path) -> None:
    env = dict(os.environ, TURBOSPARK_CACHE_DIR=str(tmp_path / "cache"),
               TURBOSPARK_DATA_DIR=str(tmp_path / "data"))
    proc = subprocess.run([sys.executable, str(CHILD), str(tmp_path), "150", str(MEMORY_CAP)],
                          capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert "150 mutants" in proc.stdout or "mutants" in proc.stdout
