"""Screenshot for the README: a local pane and a remote pane side by side.

    python tools/screenshot_remote.py [--out docs/screenshots] [--url URL --model NAME]

Without --url it starts `turbospark serve` (the default model) on a free 127.0.0.1 port and
adds it as the endpoint "TurboSpark server". The real window over the real model, in a
throw-away data folder: the left pane runs on this computer, the right one on the endpoint;
each finishes one reply (figures under it), then both stream a second one (capped at 7 tok/s so
the capture is mid-generation). Writes `local-and-remote.png`. Run it under Xvfb
(`xvfb-run -a -s "-screen 0 1600x1000x24" ...`) or with QT_QPA_PLATFORM=offscreen.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from screenshot import WINDOW_SIZE, settle, wait_until  # noqa: E402

PACE = 7.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/screenshots"))
    parser.add_argument("--url", help="an OpenAI-compatible server (default: start `turbospark serve`)")
    parser.add_argument("--model", default="", help="the model id on it (default: its first)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    from turbospark_app.model.fetch import resolve_model_path

    model = str(resolve_model_path(None))
    proc = None
    if not args.url:
        from bench_remote import free_port, serve  # noqa: E402

        port = free_port()
        proc = serve(port)
        args.url = f"http://127.0.0.1:{port}"
    os.environ["TURBOSPARK_DATA_DIR"] = tempfile.mkdtemp(prefix="turbospark-screenshot-")
    try:
        return capture(args, model)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)


def capture(args: argparse.Namespace, model: str) -> int:
    import qasync
    from PySide6.QtWidgets import QApplication

    from turbospark_app.readings import monitors_from_environment
    from turbospark_app.remote.endpoints import Endpoint
    from turbospark_app.ui.app import build_window, configure_application, real_backend_factory

    app = QApplication.instance() or QApplication(sys.argv[:1])
    configure_application(app)
    loop = qasync.QEventLoop(app, already_running=True)  # the window's HTTP client runs on it
    asyncio.set_event_loop(loop)
    monitors = monitors_from_environment()
    window = build_window(real_backend_factory(model, 4, monitors), monitors=monitors)
    window.resize(*WINDOW_SIZE)
    window.show()
    wait_until(app, lambda: window.bridge.backend_state in ("ready", "failed"), 300, "the model to load")
    (endpoint,) = window.remote.save_endpoints([(Endpoint("TurboSpark server", args.url, args.model), "")])
    left = window.area.current_pane()
    window.split_right()
    right = window.area.current_pane()
    assert left is not None and right is not None and left is not right
    if not args.model:
        right.source_picker.choose(endpoint.id)
        wait_until(app, lambda: right.source_picker.model_combo.count() > 0
                   and right.source_picker.model_combo.itemText(0) != "", 30, "the server's models")
        right.source_picker.choose(endpoint.id, right.source_picker.model_combo.itemText(0))
    else:
        right.source_picker.choose(endpoint.id, args.model)
    for pane, text in ((left, "What is a KV cache? Two sentences."),
                       (right, "What is a KV cache? Two sentences.")):
        pane.settings_form.temperature.setValue(0.0)
        pane.settings_form.max_new.setValue(60)
        pane.input.setPlainText(text)
        pane.send()
    wait_until(app, lambda: not left.busy and not right.busy, 300, "the first replies")
    for pane, text in ((left, "Give me five tips for writing readable Python code, with a short example each."),
                       (right, "Write a short story about a robot who learns to paint.")):
        pane.settings_form.cap.setValue(PACE)
        pane.settings_form.max_new.setValue(240)
        pane.input.setPlainText(text)
        pane.send()
    wait_until(app, lambda: min(left._tokens, right._tokens) >= 24 or not (left.busy and right.busy),  # noqa: SLF001
               300, "both replies to stream")
    settle(app, 0.3)
    out = args.out / "local-and-remote.png"
    window.grab().save(str(out))
    for pane in (left, right):
        pane.stop()
    wait_until(app, lambda: not left.busy and not right.busy, 60, "the stops")
    settle(app, 0.3)
    window.close()
    settle(app, 0.3)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
