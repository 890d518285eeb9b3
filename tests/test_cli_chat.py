"""`turbospark chat`: streams a reply, prints the summary, Ctrl-C cancels (real model)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.real_model


def chat(model: Path, *args: str, **kw: object) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "turbospark_app", "chat", "--model", str(model), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, **kw,  # type: ignore[call-overload]
    )


def test_prompt_streams_reply_and_summary(default_model_path: Path) -> None:
    p = chat(default_model_path, "--prompt", "What is 2+2?", "--max-new", "24")
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    assert "4" in out
    summary = [ln for ln in err.splitlines() if ln.startswith("[prompt ")]
    assert len(summary) == 1
    for field in ("reused 0", "new ", "prefill ", "decode ", "stop end_of_turn"):
        assert field in summary[0]


def test_script_turns_show_reuse(default_model_path: Path, tmp_path: Path) -> None:
    script = tmp_path / "turns.txt"
    script.write_text("My name is Ann.\nWhat is my name?\n", encoding="utf-8")
    p = chat(default_model_path, "--script", str(script), "--max-new", "24")
    _, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    reused = [int(ln.split("reused ")[1].split(" ")[0]) for ln in err.splitlines() if ln.startswith("[prompt")]
    assert reused[0] == 0 and reused[1] > 20


def test_piped_stdin_is_read_like_a_script(default_model_path: Path) -> None:
    """`printf ... | turbospark chat`: one turn per non-blank line (a blank one does not end the
    session), and stdout holds the replies only (no "> " prompt marker)."""
    p = chat(default_model_path, "--max-new", "6", stdin=subprocess.PIPE)
    out, err = p.communicate("My name is Ann.\n\nWhat is my name?\n", timeout=300)
    assert p.returncode == 0, err
    assert sum(ln.startswith("[prompt ") for ln in err.splitlines()) == 2
    assert "> My name is Ann." in err and "> What is my name?" in err
    assert ">" not in out and len(out.strip().splitlines()) == 2


def test_ctrl_c_cancels_the_reply_and_keeps_it(default_model_path: Path) -> None:
    p = chat(default_model_path, "--prompt", "Write a long story about a dragon.", "--max-new", "400",
             "--max-tps", "10")
    assert p.stdout is not None
    first = p.stdout.read(1)  # the reply has started streaming
    assert first
    time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert "stop cancelled" in err
    new = int(err.split("new ")[1].split(" ")[0])
    assert 0 < new < 400 and (first + out).strip()


def test_bad_model_path_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "not-a-model.gguf"
    bad.write_bytes(b"definitely not a gguf")
    p = chat(bad, "--prompt", "hi")
    _, err = p.communicate(timeout=120)
    assert p.returncode == 2
    assert "not-a-model.gguf" in err
