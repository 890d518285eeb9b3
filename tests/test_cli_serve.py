"""`turbospark serve` with a model it cannot load: the reason on one line and exit status 1,
no traceback, instead of a server that answers 503 forever (it has no way to load another)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tiny_gguf import write_tiny_gguf


def _serve(model: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for name in ("DATA", "CONFIG", "CACHE"):
        env[f"TURBOSPARK_{name}_DIR"] = str(tmp_path / name.lower())
    return subprocess.run([sys.executable, "-m", "turbospark_app", "serve", "--model", str(model), "--port", "0"],
                          capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.parametrize("damage", ["truncated", "missing"])
def test_a_model_that_cannot_load_stops_the_server(damage: str, tmp_path: Path) -> None:
    model = tmp_path / "model.gguf"
    if damage == "truncated":
        write_tiny_gguf(model, tokenizer={})
        data = model.read_bytes()
        model.write_bytes(data[: len(data) // 3])
    t = time.monotonic()
    done = _serve(model, tmp_path)
    assert time.monotonic() - t < 30
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr, done.stderr
    reason = next(ln for ln in lines if ln.startswith("turbospark: the model could not be loaded: "))
    assert str(model) in reason
    assert ("truncated" in reason) if damage == "truncated" else ("no model file" in reason)
    assert lines[-1] == "turbospark: stopped: no model to serve"
