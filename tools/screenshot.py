"""Screenshots of the main window for the README: two panes generating side by side, then Stop.

    python tools/screenshot.py [--out docs/screenshots] [--model GGUF]

Runs the real app window over the real model (the default one unless --model /
TURBOSPARK_MODEL says otherwise) in a throw-away data folder, so the user's conversations and
settings are never touched. Replies are paced (a rate cap) so the capture is mid-generation.
Writes:

    main-window.png   two conversation panes streaming at once, status bar figures live
    stopped.png       the right pane stopped by the user (stats line with the stop latency)

`make screenshot` runs it under Xvfb when `xvfb-run` is installed, else with the offscreen
platform plugin; both render real fonts (check the PNGs).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

WINDOW_SIZE = (1360, 840)
PACE_TOKENS_PER_SEC = 7.0


def wait_until(app, predicate: Callable[[], bool], timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    """Process Qt events until `predicate()` or fail with `what`."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"screenshot: timed out waiting for {what}")
        app.processEvents()
        time.sleep(0.01)


def settle(app, seconds: float) -> None:  # type: ignore[no-untyped-def]
    """Let the window repaint for a moment."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        app.processEvents()
        time.sleep(0.01)


def real_x() -> bool:
    """A real X server to type into and grab from (xdotool and ImageMagick's import present)."""
    return (os.environ.get("QT_QPA_PLATFORM", "xcb") == "xcb" and bool(os.environ.get("DISPLAY"))
            and bool(shutil.which("xdotool")) and bool(shutil.which("import")))


def open_window(app, factory: Callable[[], object], tmp: Path, size: tuple[int, int]):  # type: ignore[no-untyped-def]
    """The real window (build_window) over `factory`'s backend, its store and settings in `tmp`,
    shown at `size` once the backend is ready (or failed)."""
    from PySide6.QtCore import QSettings

    from turbospark_app.ui.app import build_window

    window = build_window(factory, store_path=tmp / "store.db",
                          settings=QSettings(str(tmp / "s.ini"), QSettings.Format.IniFormat))
    window.resize(*size)
    window.show()
    window.raise_()
    window.activateWindow()
    while window.bridge.backend_state not in ("ready", "failed"):
        app.processEvents()
    return window


def ask(app, pane, text: str) -> None:  # type: ignore[no-untyped-def]
    """Send `text` from `pane`: typed with real keys (xdotool) under a real X server, else set."""
    pane.input.setFocus()
    if real_x():
        typer = subprocess.Popen(["xdotool", "type", "--delay", "8", text])
        while typer.poll() is None:
            app.processEvents()
        settle(app, 0.3)
        subprocess.run(["xdotool", "key", "Return"], check=True)
    else:
        pane.input.setPlainText(text)
        pane.send()


def capture(window, out: Path, crop: str | None = None) -> None:  # type: ignore[no-untyped-def]
    """Write `out`: the X root window (`import`, cut to `crop` as WxH+X+Y) under a real X server,
    else the window's own grab."""
    if real_x():
        subprocess.run(["import", "-window", "root", *(["-crop", crop] if crop else []), str(out)], check=True)
    else:
        window.grab().save(str(out))
    print(f"wrote {out}")


def main(argv: list[str] | None = None) -> int:
    """Write the screenshots; returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/screenshots"))
    parser.add_argument("--model", default=None, help="a GGUF (default: TURBOSPARK_MODEL, else the default model)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    from turbospark_app.model.fetch import resolve_model_path

    # Resolved first: the default model lives in the real data folder...
    model = str(resolve_model_path(args.model))
    # ...while the store and settings.ini go to a throw-away one (turbospark_app.ui.prefs.store).
    os.environ["TURBOSPARK_DATA_DIR"] = tempfile.mkdtemp(prefix="turbospark-screenshot-")

    from PySide6.QtWidgets import QApplication

    from turbospark_app.readings import monitors_from_environment
    from turbospark_app.ui.app import build_window, configure_application, real_backend_factory

    app = QApplication.instance() or QApplication(sys.argv[:1])
    configure_application(app)
    monitors = monitors_from_environment()
    window = build_window(real_backend_factory(model, 4, monitors), monitors=monitors)
    window.resize(*WINDOW_SIZE)
    window.show()
    wait_until(app, lambda: window.bridge.backend_state in ("ready", "failed"), 300, "the model to load")
    if window.bridge.backend_state == "failed":
        print(f"screenshot: the model could not be loaded: {window.bridge.backend_error}", file=sys.stderr)
        return 1

    left = window.area.current_pane()
    assert left is not None
    left.settings_form.temperature.setValue(0.0)  # greedy: the same picture every run
    left.settings_form.max_new.setValue(160)
    left.input.setPlainText("What is a KV cache? Two sentences.")
    left.send()
    wait_until(app, lambda: not left.busy, 300, "the first reply")

    left.settings_form.cap.setValue(PACE_TOKENS_PER_SEC)
    left.settings_form.max_new.setValue(240)
    left.input.setPlainText("Give me five tips for writing readable Python code, with a short example each.")
    left.send()
    window.split_right()
    right = window.area.current_pane()
    assert right is not None and right is not left
    right.settings_form.temperature.setValue(0.0)
    right.settings_form.cap.setValue(PACE_TOKENS_PER_SEC)
    right.settings_form.max_new.setValue(240)
    right.input.setPlainText("Write a short story about a robot who learns to paint.")
    right.send()

    def tokens(pane) -> int:  # type: ignore[no-untyped-def]
        return pane._tokens  # noqa: SLF001 (a screenshot script may peek)

    wait_until(app, lambda: min(tokens(left), tokens(right)) >= 28 or not (left.busy and right.busy),
               300, "both replies to stream")
    if not (left.busy and right.busy):
        print("screenshot: a reply ended before the capture; pick longer prompts", file=sys.stderr)
        return 1
    settle(app, 0.3)
    first = args.out / "main-window.png"
    window.grab().save(str(first))

    right.stop()
    wait_until(app, lambda: not right.busy, 60, "the stop")
    settle(app, 1.2)
    second = args.out / "stopped.png"
    window.grab().save(str(second))
    left.stop()
    wait_until(app, lambda: not left.busy, 60, "the left pane to stop")
    window.close()
    print(f"wrote {first} and {second}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
