"""Ctrl-C in `turbospark chat`: the handler runs while a turn is busy (cli/interrupt.py) and its
flag is the turn's cancel predicate, which llama.cpp's abort callback reads; a session ended by Ctrl-C leaves without
waiting for its memory to be freed (host.quick_exit); and a real child process stops inside a
long prefill chunk, prints the summary and exits promptly."""

from __future__ import annotations

import os
import pty
import signal
import subprocess
import sys
import threading
import time
import tty
from pathlib import Path
from typing import Callable

import pytest

from turbospark_app.cli.interrupt import CtrlC
from turbospark_app.engine import EngineError

# Generous: the stop itself takes milliseconds (benchmarks/bench_cli_interrupt.py measures it);
# this only has to survive a noisy 2-core machine. Before the worker thread, Ctrl-C waited for the
# running chunk, which in the child tests below is a whole ~2000-token prompt: several seconds.
EXIT_BOUND_S = 3.0


def _sigint_self() -> None:
    """A process-directed SIGINT, as a terminal's Ctrl-C sends it."""
    os.kill(os.getpid(), signal.SIGINT)


def test_sigint_during_a_turn_sets_the_cancel_flag_the_turn_polls() -> None:
    seen: dict[str, object] = {}

    def turn() -> str:
        seen["on_main_thread"] = threading.current_thread() is threading.main_thread()
        _sigint_self()
        # The engine in a prefill chunk: blocked until something sets the flag it polls. Only
        # the handler can; the timeout merely keeps a broken handler from hanging the test.
        seen["flag_set"] = ctrl_c.cancelled.wait(30)
        return "stopped"

    ctrl_c = CtrlC()
    with ctrl_c:
        assert ctrl_c.run_turn(turn) == "stopped"
    assert seen == {"on_main_thread": False, "flag_set": True}


def test_second_sigint_during_a_turn_quits() -> None:
    finished = threading.Event()

    def turn() -> None:
        _sigint_self()
        assert ctrl_c.cancelled.wait(30)
        _sigint_self()  # the reply is already stopping: this one quits
        time.sleep(0.2)  # the engine winding down; the caller waits for it
        finished.set()

    ctrl_c = CtrlC()
    with ctrl_c, pytest.raises(KeyboardInterrupt):
        ctrl_c.run_turn(turn)
    assert finished.is_set()  # not torn down mid-run


def test_sigint_outside_a_turn_quits_and_the_flag_is_fresh_per_turn() -> None:
    ctrl_c = CtrlC()
    with ctrl_c:
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)  # at the interactive prompt
        ctrl_c.cancelled.set()  # left over from a stopped reply
        assert ctrl_c.run_turn(ctrl_c.cancelled.is_set) is False


def test_a_turn_error_reaches_the_caller_and_the_handler_is_restored() -> None:
    before = signal.getsignal(signal.SIGINT)

    def turn() -> None:
        raise EngineError("the context is full")

    ctrl_c = CtrlC()
    with ctrl_c:
        assert signal.getsignal(signal.SIGINT) == ctrl_c.on_sigint
        with pytest.raises(EngineError, match="context is full"):
            ctrl_c.run_turn(turn)
    assert signal.getsignal(signal.SIGINT) == before


def test_leave_now_flushes_the_output_and_skips_the_teardown() -> None:
    code = ("import atexit, sys\n"
            "from turbospark_app.cli.interrupt import leave_now\n"
            "atexit.register(print, 'teardown ran', file=sys.stderr)\n"
            "print('reply', end='')\n"
            "sys.stderr.write('[summary]')\n"
            "leave_now(3)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (3, "reply", "[summary]")


LEAVE_WITH_MEMORY = """
import sys
import numpy as np
from turbospark_app.cli.interrupt import leave_now
from turbospark_app.host import quick_exit

held = np.ones(200 * 2**20 // 8)  # 200 MB, as a loaded model holds (more) on the way out
quick_exit.HELPER_SLEEP_SECONDS = 120  # so the test surely sees the helper
start_helper = quick_exit.defer_teardown

def reporting_start() -> int | None:
    pid = start_helper()
    sys.stderr.write(f" helper {pid}")
    return pid

quick_exit.defer_teardown = reporting_start
print("reply", end="")
sys.stderr.write("[summary]")
leave_now(3)
"""


def _glibc_linux() -> bool:
    try:
        return sys.platform.startswith("linux") and os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")
    except (ValueError, OSError, AttributeError):
        return False


@pytest.mark.skipif(not _glibc_linux(), reason="the helper is for Linux with glibc")
def test_leave_now_leaves_the_memory_to_a_helper_and_its_pipes_end_at_exit() -> None:
    # communicate() returns at our end of file on both pipes and our exit: the helper, sharing
    # the file table, does not keep them open, though it outlives the child by two minutes.
    done = subprocess.run([sys.executable, "-c", LEAVE_WITH_MEMORY], capture_output=True,
                          text=True, timeout=60)
    assert (done.returncode, done.stdout) == (3, "reply"), done.stderr
    summary, _, pid = done.stderr.partition(" helper ")
    assert summary == "[summary]" and pid.isdigit(), done.stderr
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fields = dict(line.split(":", 1) for line in status.splitlines())
        # The child is gone and its 200 MB are still mapped: the helper holds them (it frees
        # them when its sleep ends), so the child's exit did not wait for the freeing.
        assert int(fields["VmRSS"].split()[0]) > 200 * 1024
        assert fields["SigBlk"].strip().strip("0") != ""  # it never runs a Python handler
        assert os.listdir(f"/proc/{pid}/fd") == []  # the shared file table was emptied
    finally:
        os.kill(int(pid), signal.SIGKILL)


# ---- a real child process over the default model ----

def _long_prompt() -> str:
    """~2000 tokens: with --chunk-size 2048 its prefill is ONE session run of several seconds."""
    return " ".join(f"Item {i}: a red kite flies above the old mill near river {i % 9}." for i in range(110))


def _spawn(model: Path, *args: str, terminal: bool = False) -> subprocess.Popen[str]:
    """The chat child; `terminal`: its stdin is a terminal (a pty in raw mode: no echo, no line
    length limit), which makes it interactive; write to it with `_type`."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if not terminal:
        return subprocess.Popen(
            [sys.executable, "-m", "turbospark_app", "chat", "--model", str(model), *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    master, slave = pty.openpty()
    tty.setraw(slave)
    try:
        child = subprocess.Popen(
            [sys.executable, "-m", "turbospark_app", "chat", "--model", str(model), *args],
            stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    finally:
        os.close(slave)
    child.terminal = master  # type: ignore[attr-defined]
    return child


def _type(child: subprocess.Popen[str], text: str) -> None:
    data = text.encode()
    while data:
        data = data[os.write(child.terminal, data):]  # type: ignore[attr-defined]


class _Lines:
    """A child's stderr read line by line on a thread, so the test can wait for one line."""

    def __init__(self, child: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._child = child
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self._child.stderr is not None
        for line in self._child.stderr:
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()

    def wait_for(self, match: Callable[[str], bool], count: int = 1, timeout: float = 300) -> list[str]:
        """The first `count` lines that match, once they have arrived."""
        with self._cond:
            self._cond.wait_for(lambda: sum(map(match, self.lines)) >= count, timeout)
            hits = [ln for ln in self.lines if match(ln)]
        assert len(hits) >= count, "".join(self.lines)
        return hits[:count]


def _is_summary(line: str) -> bool:
    return line.startswith("[prompt ")


@pytest.mark.real_model
def test_ctrl_c_inside_a_long_prefill_chunk_stops_and_exits(default_model_path: Path) -> None:
    child = _spawn(default_model_path, "--prompt", _long_prompt(), "--max-new", "16",
                   "--chunk-size", "2048")
    err = _Lines(child)
    try:
        err.wait_for(lambda ln: ln.startswith("> "))  # loaded; the prefill starts now
        time.sleep(0.3)
        assert child.poll() is None
        child.send_signal(signal.SIGINT)
        sent = time.monotonic()
        child.wait(60)
        took = time.monotonic() - sent
    finally:
        if child.poll() is None:
            child.kill()
    summary = err.wait_for(_is_summary, timeout=10)[0]
    assert "stop cancelled" in summary and "| new 0 tok |" in summary
    assert int(summary.split("prompt ")[1].split(" ")[0]) > 1900
    assert child.returncode == 0, "".join(err.lines)
    assert took < EXIT_BOUND_S, f"exited {took:.2f} s after SIGINT"


@pytest.mark.real_model
def test_interactive_ctrl_c_stops_the_reply_then_quits_at_the_prompt(default_model_path: Path) -> None:
    child = _spawn(default_model_path, "--max-new", "8", "--chunk-size", "2048", terminal=True)
    assert child.stdout is not None
    err = _Lines(child)
    try:
        assert child.stdout.read(2) == "> "  # loaded, at the prompt
        _type(child, _long_prompt() + "\n")
        time.sleep(1.0)  # the line was read and the prefill (seconds long) is under way
        child.send_signal(signal.SIGINT)
        summary = err.wait_for(_is_summary)[0]
        assert "stop cancelled" in summary
        # The stopped reply ends with a newline, then the prompt asks for the next message.
        assert child.stdout.read(3) == "\n> "
        child.send_signal(signal.SIGINT)  # at the prompt: quits
        child.wait(60)
    finally:
        if child.poll() is None:
            child.kill()
        os.close(child.terminal)  # type: ignore[attr-defined]
    assert child.returncode == 0, "".join(err.lines)
    assert "Traceback" not in "".join(err.lines)


@pytest.mark.real_model
def test_interactive_ctrl_c_at_the_first_prompt_quits(default_model_path: Path) -> None:
    child = _spawn(default_model_path, terminal=True)
    assert child.stdout is not None
    err = _Lines(child)
    try:
        assert child.stdout.read(2) == "> "  # no reply yet: nothing to stop, so Ctrl-C quits
        child.send_signal(signal.SIGINT)
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        os.close(child.terminal)  # type: ignore[attr-defined]
    assert child.returncode == 0, "".join(err.lines)
