"""A child process for the crash test: the real window (offscreen) over a slow fake engine,
streaming a long reply into a real store until the test kills it with SIGKILL.

Usage: python crash_child.py DATA_DIR   (prints "streaming" once the turn is submitted)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).parent))

from PySide6.QtCore import QSettings, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402
from ui_fakes import FakeBackend, fake_factory  # noqa: E402

from turbospark_app.conversations.store import STORE_FILENAME  # noqa: E402
from turbospark_app.ui.app import build_window  # noqa: E402

LONG = " ".join(f"word{i}" for i in range(2000))


def main() -> None:
    data = Path(sys.argv[1])
    app = QApplication(sys.argv[:1])
    backend = FakeBackend(replies=(LONG,), step_delay=0.01)
    settings = QSettings(str(data / "settings.ini"), QSettings.Format.IniFormat)
    window = build_window(fake_factory(backend), store_path=data / STORE_FILENAME, settings=settings)
    window.show()

    def send() -> None:
        if window.bridge.backend_state != "ready":
            QTimer.singleShot(20, send)
            return
        pane = window.area.current_pane()
        pane.input.setPlainText("tell me everything")
        pane.send()
        print("streaming", flush=True)

    QTimer.singleShot(0, send)
    app.exec()


if __name__ == "__main__":
    main()
