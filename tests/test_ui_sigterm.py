"""SIGTERM (a logout, `kill`) closes the window as its Close does: the layout is saved and the
process ends normally, instead of dying with the panes' arrangement lost."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tiny_gguf import write_tiny_gguf

from turbospark_app.ui.prefs.store import SETTINGS_FILENAME


def _catches_sigterm(pid: int) -> bool:
    """Whether process `pid` has a SIGTERM handler yet (Linux: the SigCgt mask)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    return False


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the handler mask from /proc")
def test_sigterm_closes_the_window_and_saves_the_layout(tmp_path: Path) -> None:
    model = tmp_path / "tiny.gguf"
    write_tiny_gguf(model, tokenizer={})
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "TURBOSPARK_MODEL": str(model)}
    for name in ("DATA", "CONFIG", "CACHE"):
        env[f"TURBOSPARK_{name}_DIR"] = str(tmp_path / name.lower())
    settings = tmp_path / "data" / SETTINGS_FILENAME  # the app's QSettings follow TURBOSPARK_DATA_DIR
    proc = subprocess.Popen([sys.executable, "-m", "turbospark_app"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not _catches_sigterm(proc.pid):
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        time.sleep(0.5)  # the handler is set just before the event loop starts
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "layout" in settings.read_text(encoding="utf-8")
