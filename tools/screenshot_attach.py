"""Screenshot of attachments in the window for the README: a sent message with an image
thumbnail and a PDF chip, its reply, and the composer's tray holding the next ones.

    Xvfb :46 -screen 0 1600x1000x24 & DISPLAY=:46 .venv/bin/python tools/screenshot_attach.py [--out docs/screenshots]

The real window (build_window) over a scripted engine with vision (tests/attach_fakes.py's
VisionFake: the reply below, streamed through the engine thread), in a throw-away data folder;
the picture is drawn with Qt and the PDF written with QPdfWriter, both read by the app's own
readers (the attach worker, PDFium's child process). Writes attachments.png (`import -window
root` under X, else the window's own grab).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tools"))

QUESTION = "What does the chart show, and does the report agree?"
REPLY = ("The chart shows three bars rising from left to right, the last about twice the first.\n\n"
         "The report agrees: on page 2 it says sales **doubled** between the first and the third quarter [1].")


def draw_chart(path: Path) -> None:
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QColor, QImage, QPainter

    image = QImage(480, 320, QImage.Format.Format_RGB32)
    image.fill(QColor("#fdfdf8"))
    p = QPainter(image)
    p.setPen(Qt.PenStyle.NoPen)
    for i, (h, colour) in enumerate(((100, "#268bd2"), (150, "#2aa198"), (205, "#859900"))):
        p.setBrush(QColor(colour))
        p.drawRect(70 + i * 130, 280 - h, 90, h)
    p.setPen(QColor("#555"))
    p.drawLine(40, 280, 450, 280)
    p.drawText(40, 30, "Sales by quarter")
    p.end()
    image.save(str(path), "PNG")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="turbospark-attach-shot-"))
    os.environ["TURBOSPARK_DATA_DIR"] = str(tmp / "data")

    from attach_fakes import VisionFake
    from docs_corpus import write_pdf
    from PySide6.QtWidgets import QApplication
    from screenshot import capture, open_window, settle

    from turbospark_app.ui.app import configure_application

    app = QApplication.instance() or QApplication(sys.argv[:1])
    configure_application(app)
    draw_chart(tmp / "chart.png")
    write_pdf(tmp / "q3-report.pdf", ["Quarterly report. Summary of the year so far.",
                                       "Sales doubled between the first and the third quarter.",
                                       "Outlook: steady."])
    (tmp / "notes.md").write_text("# Notes\n\nAsk about the chart's colours next.\n")
    backend = VisionFake(replies=(REPLY,), step_delay=0.01)
    window = open_window(app, lambda: backend, tmp, (1100, 820))
    pane = window.area.current_pane()
    assert pane is not None

    def wait_read() -> None:
        while any(i.state == "reading" for i in pane.attach_tray.items()):
            app.processEvents()

    pane.add_files([tmp / "chart.png", tmp / "q3-report.pdf"])
    wait_read()
    pane.input.setPlainText(QUESTION)
    pane.send()
    deadline = time.monotonic() + 60
    while (pane.busy or len(pane.transcript.entries) < 2) and time.monotonic() < deadline:
        app.processEvents()
    pane.add_files([tmp / "chart.png", tmp / "notes.md"])  # the next message's, in the tray
    wait_read()
    pane.input.setPlainText("And the colours?")
    settle(app, 0.8)
    capture(window, args.out / "attachments.png", crop="1100x820+0+0")
    window.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
