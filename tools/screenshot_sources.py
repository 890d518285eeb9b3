"""Screenshot of a reply answered from a collection, with its Sources, for the README.

    DISPLAY=:42 .venv/bin/python tools/screenshot_sources.py [--out docs/screenshots] [--model]

The real window (build_window) in a throw-away data folder; a folder of Markdown and PDF files
(written here) is linked as the collection "Handbook" through the hub, indexed by the real
embedder (all-MiniLM-L6-v2), and chosen in the pane's Collections menu; the question is typed
with real keys (xdotool) under a real X server. The reply is scripted (tests/ui_fakes.py's
FakeBackend, streamed through the engine thread like a model's) so that it cites [n], which the
default 135M model seldom does; `--model` answers with the default chat model instead. The
retrieval, the prompt's sources, the Sources list, its figures and the QA panel's ranked chunks
are the app's own. Writes sources.png.
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

from screenshot import ask, capture, open_window, settle  # noqa: E402

QUESTION = "How do I reset the router, and how long does the battery last?"
REPLY = ("Hold the **red button** on the back for ten seconds until the light blinks amber [1]; "
         "the router then restarts with its factory settings. A full charge of the battery lasts "
         "about **nine hours** of normal use [2].")


def write_handbook(folder: Path) -> None:
    from docs_corpus import write_pdf

    folder.mkdir(parents=True, exist_ok=True)
    write_pdf(folder / "router-manual.pdf", [
        "Router X2 manual. Chapter 1: Setup. Plug the power cable in and wait for the green light.",
        "Chapter 2: Wireless. The network name and password are printed on the label underneath.",
        "Chapter 3: Reset. Hold the red button on the back for ten seconds to reset the router."])
    (folder / "battery.md").write_text(
        "# Battery\n\nA full charge lasts about nine hours of normal use, or three days on standby.\n\n"
        "## Charging\n\nUse the supplied USB-C adapter; a full charge takes two hours.\n", encoding="utf-8")
    (folder / "warranty.md").write_text(
        "# Warranty\n\nThe warranty covers two years from the date of purchase.\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    ap.add_argument("--model", action="store_true", help="answer with the default chat model")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    from turbospark_app.model.embedder_fetch import ensure_embedder
    from turbospark_app.model.fetch import resolve_model_path

    model_path = resolve_model_path(None)
    os.environ.setdefault("TURBOSPARK_EMBEDDER", str(ensure_embedder(download=True)))
    tmp = Path(tempfile.mkdtemp(prefix="turbospark-sources-shot-"))
    os.environ["TURBOSPARK_DATA_DIR"] = str(tmp)

    from PySide6.QtWidgets import QApplication
    from ui_fakes import FakeBackend

    from turbospark_app.ui.app import configure_application

    app = QApplication.instance() or QApplication(sys.argv[:1])
    configure_application(app)
    if args.model:
        from turbospark_app.chat.backend import load_backend

        factory = lambda: load_backend(model_path)  # noqa: E731
    else:
        backend = FakeBackend(replies=(REPLY,), step_delay=0.01)
        factory = lambda: backend  # noqa: E731
    window = open_window(app, factory, tmp, (1560, 980))
    handbook = tmp / "Handbook"
    write_handbook(handbook)
    hub = window.documents
    hub.add("Handbook", [handbook])
    while hub.store.collection("Handbook") is None or hub.service.busy("Handbook"):
        app.processEvents()
        time.sleep(0.02)
    pane = window.area.current_pane()
    pane.set_collections(["Handbook"])
    window.qa_panel.show()
    settle(app, 0.5)
    ask(app, pane, QUESTION)
    settle(app, 0.3)
    deadline = time.monotonic() + 120
    while pane.busy and time.monotonic() < deadline:
        app.processEvents()
    settle(app, 1.0)
    capture(window, args.out / "sources.png")
    window.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
