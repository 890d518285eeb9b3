"""`turbospark serve` and `chat` with a model they cannot load. serve: the reason on one line and
exit status 1, no traceback, instead of a server that answers 503 forever (it has no way to load
another). chat without the default model: how to fetch it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tiny_gguf import write_tiny_gguf


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TURBOSPARK_MODEL"}
    env["PYTHONUNBUFFERED"] = "1"
    for name in ("DATA", "CONFIG", "CACHE"):
        env[f"TURBOSPARK_{name}_DIR"] = str(tmp_path / name.lower())
    return subprocess.run([sys.executable, "-m", "turbospark_app", *args],
                          capture_output=True, text=True, env=env, timeout=60)


def _serve(model: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return _run(tmp_path, "serve", "--model", str(model), "--port", "0")


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


def test_chat_without_the_default_model_says_how_to_fetch_it(tmp_path: Path) -> None:
    done = _run(tmp_path, "chat", "--prompt", "hi")  # an empty data folder: no default model
    assert done.returncode == 2 and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert "file not found" in lines[0]
    assert lines[-1] == "turbospark: the default model is not here yet: run `turbospark model fetch`"
    other = _run(tmp_path, "chat", "--model", str(tmp_path / "mine.gguf"), "--prompt", "hi")
    assert other.returncode == 2 and "model fetch" not in other.stderr  # a file of the user's own


def test_a_port_in_use_is_said_once_and_the_load_is_not_reported_after_it(tmp_path: Path) -> None:
    import socket

    model = tmp_path / "model.gguf"
    write_tiny_gguf(model, tokenizer={})
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _run(tmp_path, "serve", "--model", str(model), "--port", str(port))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    # The last word: a load still under way when the bind failed is not reported after it.
    assert lines[-1].startswith(f"turbospark: cannot listen on 127.0.0.1:{port}: "), done.stderr
