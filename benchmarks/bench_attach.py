"""What attachments cost the GUI thread (the window must not stall while files are read).

    QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/bench_attach.py [--images 10]

A real window over a scripted engine (tests/attach_fakes.py's VisionFake) in a throw-away data
folder. Figures, CPU time of the GUI thread (time.thread_time) unless said:
  add        adding a 12-megapixel JPEG and a 40-page PDF to the tray (the GUI's share), and
             the attach worker's wall time to read them (decode + thumbnail; PDFium's child)
  prompt     building a turn's prompt messages over a history of N image messages after a
             restart (StoredImage: ids only; pixels are decoded on the engine thread)
  render     showing that conversation (thumbnails read with Qt's scaled decode): cold, warm
  decode     for scale: decoding the JPEG itself (what the GUI would pay without StoredImage)
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


def big_jpeg(path: Path, seed: int = 0) -> Path:
    from PySide6.QtGui import QColor, QImage, QPainter

    image = QImage(4000, 3000, QImage.Format.Format_RGB32)
    image.fill(QColor("#336699"))
    p = QPainter(image)
    for i in range(0, 4000, 37):
        p.fillRect(i, (i * 7 + seed * 101) % 3000, 200, 300, QColor((i * 3 + seed) % 255, (i * 5) % 255, (i * 11) % 255))
    p.end()
    image.save(str(path), "JPEG", 90)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=10, help="image messages in the history (default 10)")
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="turbospark-bench-attach-"))
    os.environ["TURBOSPARK_DATA_DIR"] = str(tmp / "data")

    from attach_fakes import VisionFake
    from docs_corpus import write_pdf
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from turbospark_app.media.images import decode_image
    from turbospark_app.ui.render import message_media
    from turbospark_app.ui.app import build_window
    from turbospark_app.ui.pane.attach_prompt import media_prompt_messages

    app = QApplication.instance() or QApplication(sys.argv[:1])

    def window():  # type: ignore[no-untyped-def]
        w = build_window(lambda: VisionFake(replies=("Seen.",)), store_path=tmp / "store.db",
                         settings=QSettings(str(tmp / "s.ini"), QSettings.Format.IniFormat))
        w.resize(1100, 900)
        w.show()
        while w.bridge.backend_state not in ("ready", "failed"):
            app.processEvents()
        return w

    def until(predicate) -> None:  # type: ignore[no-untyped-def]
        while not predicate():
            app.processEvents()
            time.sleep(0.001)

    jpegs = [big_jpeg(tmp / f"photo{i}.jpg", i) for i in range(args.images)]
    pdf = write_pdf(tmp / "report.pdf", [f"Page {i}: " + "words of the report " * 60 for i in range(40)])
    w = window()
    pane = w.area.current_pane()
    t0, c0 = time.perf_counter(), time.thread_time()
    pane.add_files([jpegs[0], pdf])
    gui_add = time.thread_time() - c0
    until(lambda: all(i.state != "reading" for i in pane.attach_tray.items()))
    worker_wall = time.perf_counter() - t0
    pane.attach_tray.remove(pane.attach_tray.items()[1].id)  # the PDF: the turns below send images
    for i, path in enumerate(jpegs):
        if i:
            pane.add_files([path])
            until(lambda: all(i.state != "reading" for i in pane.attach_tray.items()))
        pane.input.setPlainText(f"photo {i}?")
        pane.send()
        until(lambda: not pane.busy)
    cid = pane.conversation_id
    w.close()

    w2 = window()
    pane2 = w2.area.open(cid)
    message_media._thumbs.clear()
    c0 = time.thread_time()
    pane2.show_messages(pane2.tree.path)
    render_cold = time.thread_time() - c0
    c0 = time.thread_time()
    pane2.show_messages(pane2.tree.path)
    render_warm = time.thread_time() - c0
    c0 = time.thread_time()
    media_prompt_messages(pane2.tree.path, "", pane2.image_store)
    prompt = time.thread_time() - c0
    data = jpegs[0].read_bytes()
    c0 = time.thread_time()
    decode_image(data)
    decode = time.thread_time() - c0
    w2.close()
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (2 cores)")
    print(f"add        GUI {gui_add * 1000:.1f} ms CPU for a 12 MP JPEG + a 40-page PDF; "
          f"the worker read both in {worker_wall * 1000:.0f} ms wall")
    print(f"prompt     GUI {prompt * 1000:.2f} ms CPU for {args.images} image messages (after a restart)")
    print(f"render     GUI {render_cold * 1000:.1f} ms CPU cold, {render_warm * 1000:.1f} ms warm "
          f"({args.images} messages with a thumbnail)")
    print(f"decode     {decode * 1000:.1f} ms CPU to decode one 12 MP JPEG (kept off the GUI thread)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
