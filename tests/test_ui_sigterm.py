"""SIGTERM (a logout, `kill`) closes the window as its Close does: the layout is saved and the
process ends normally, instead of dying with the panes' arrangement lost."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tiny_gguf import write_tiny_gguf

from turbospark_app.conversations.store import STORE_FILENAME
from turbospark_app.ui.settings import SETTINGS_FILENAME


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
        store = tmp_path / "data" / STORE_FILENAME
        while time.monotonic() < deadline and not store.exists():
            time.sleep(0.1)
        time.sleep(1.0)  # the window is up and its event loop runs
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "layout" in settings.read_text(encoding="utf-8")
