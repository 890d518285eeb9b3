"""`turbospark chat --endpoint URL [--remote-model NAME]`: stream, summary line, Ctrl-C closes
the stream (checked on the server side), failures explained, the server's only model by default."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import remote_fakes as fakes


@pytest.fixture
def server():
    s = fakes.FakeServer(api_key="sk-cli").start()
    yield s
    s.stop()


def chat(tmp_path: Path, url: str, *args: str, model: tuple[str, ...] = ("--remote-model", "fake-7b")
         ) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TURBOSPARK_CONFIG_DIR": str(tmp_path),
           "TURBOSPARK_DATA_DIR": str(tmp_path)}
    return subprocess.Popen(
        [sys.executable, "-m", "turbospark_app", "chat", "--endpoint", url, *model,
         "--api-key", "sk-cli", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )


def test_without_remote_model_the_servers_only_model_is_used(tmp_path: Path) -> None:
    one = fakes.FakeServer(models=("solo-1b",), api_key="sk-cli").start()
    try:
        p = chat(tmp_path, one.url, "--prompt", "Hello", model=())
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        assert out.strip() and one.requests[0]["model"] == "solo-1b"
    finally:
        one.stop()
    two = fakes.FakeServer(api_key="sk-cli").start()  # fake-7b and fake-70b: the user chooses
    try:
        p = chat(tmp_path, two.url, "--prompt", "Hello", model=())
        _, err = p.communicate(timeout=60)
        assert p.returncode == 1 and "offers 2 models: fake-7b, fake-70b" in err and "--remote-model" in err
        assert not two.requests
    finally:
        two.stop()


def test_script_streams_and_prints_the_summary(server, tmp_path: Path) -> None:
    script = tmp_path / "turns.txt"
    script.write_text("Hello\nAnd again\n", encoding="utf-8")
    p = chat(tmp_path, server.url, "--script", str(script))
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert out.count("".join(fakes.WORDS)) == 2
    lines = [ln for ln in err.splitlines() if ln.startswith("[remote ")]
    assert len(lines) == 2
    assert "reused 32 (timings.cache_n)" in lines[0] and "prompt 40 tok" in lines[0]
    assert "stop end_of_turn" in lines[0] and "ttft " in lines[0]
    # The second turn carries the first exchange.
    assert [m["role"] for m in server.requests[1]["messages"]] == ["user", "assistant", "user"]


def test_ctrl_c_closes_the_stream_and_keeps_the_reply(server, tmp_path: Path) -> None:
    server.default = fakes.make_endless(server.state, interval=0.02)
    p = chat(tmp_path, server.url, "--prompt", "Go on forever")
    assert p.stdout is not None
    first = p.stdout.read(6)  # a few tokens arrived
    assert first.startswith(" w0")
    p.send_signal(signal.SIGINT)
    sent_at = time.monotonic()
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    summary = [ln for ln in err.splitlines() if ln.startswith("[remote ")]
    assert summary and "stop cancelled" in summary[0] and "closed in " in summary[0]
    assert "reused unavailable" in summary[0]
    assert "client_gone_at" in server.state and server.state["client_gone_at"] - sent_at < 2


def test_failure_is_explained_with_a_nonzero_status(tmp_path: Path) -> None:
    p = chat(tmp_path, "http://127.0.0.1:9", "--prompt", "Hi")
    _, err = p.communicate(timeout=60)
    assert p.returncode == 1 and "Connection refused" in err
