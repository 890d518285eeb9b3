"""What streaming into the window costs the model: decode tok/s of the same turn in the real
window (engine thread -> bridge -> pane), with the engine's tokens handed over in batches (the
app, `service/handover.py`) and one GUI wake-up per token (as before), side by side with the
same turn run headless on the calling thread (the CLI's path, no consumer at all).

    QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/bench_window_stream.py [--rounds 3]
        [--max-new 384] [--model GGUF]

Each round runs the three modes in a rotating order, each on a fresh conversation (no reuse),
greedy (same reply, same length everywhere), and reads the engine's own decode tok/s from the
reply's saved figures. Prints the medians and the ratios to the headless run. Under Xvfb (a
real X server: `DISPLAY=:7`) the window's painting costs more than offscreen.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

PROMPT = "Write a long story about a dragon who learns to bake bread. Make it at least 400 words."


class PerTokenHandover:
    """The hand-over with every event taken at once: a GUI wake-up per token (the old path)."""

    def __new__(cls, wake, deliver, is_token=None, **kw):  # type: ignore[no-untyped-def]
        from turbospark_app.service.handover import Handover

        return Handover(wake, deliver, lambda item: False, **kw)


def window_rate(app, window, max_new: int) -> tuple[float, int]:
    """Send PROMPT in a new conversation of `window`; the reply's decode tok/s."""
    from PySide6.QtCore import QEventLoop, Qt, QTimer
    from PySide6.QtTest import QTest

    window.new_conversation()
    pane = window.area.current_pane()
    pane.settings_form.max_new.setValue(max_new)  # emits changed: the pane keeps them
    pane.settings_form.temperature.setValue(0.0)
    pane.input.setFocus()
    pane.input.setPlainText(PROMPT)
    loop = QEventLoop()  # the GUI thread idles in Qt's own loop, as in the app (no polling)
    pane.busyChanged.connect(lambda _cid, busy: None if busy else loop.quit())
    QTimer.singleShot(300_000, loop.quit)
    QTest.keyClick(pane.input, Qt.Key.Key_Return)
    if pane.busy:
        loop.exec()
    reply = window.store.messages(pane.conversation_id)[-1]
    return float(reply.stats["decode_tokens_per_sec"]), int(reply.stats["new_tokens"])


def headless_rate(backend, max_new: int, n: int) -> tuple[float, int]:
    """The same turn through the backend on this thread (the CLI's path)."""
    from turbospark_app.chat.api import ChatMessage, TurnSettings
    from turbospark_app.engine import GenerationConfig
    from turbospark_app.engine.raw_completion import drive_raw_completion

    settings = TurnSettings(generation=GenerationConfig(max_new_tokens=max_new))
    turn = backend.prepare_turn(f"headless-{n}", [ChatMessage("user", PROMPT)], settings)
    result = drive_raw_completion(backend.stream_turn(turn, lambda: False), settings.generation.rate,
                                  lambda: False, lambda event: None)
    backend.drop_session(f"headless-{n}")
    return result.decode_tokens_per_sec, result.new_tokens


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-new", type=int, default=384)
    ap.add_argument("--model", default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-window-") as tmp:  # stores and settings: not left behind
        return _run(args, Path(tmp))


def _run(args: argparse.Namespace, tmp: Path) -> int:
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from turbospark_app.chat.backend import load_backend
    from turbospark_app.model.fetch import resolve_model_path
    from turbospark_app.ui.services import bridge as bridge_module
    from turbospark_app.ui.app import build_window, paint_on_the_gui_thread

    paint_on_the_gui_thread()  # as the app does (run_app), before the QApplication
    app = QApplication.instance() or QApplication([])
    path = resolve_model_path(args.model)
    os.environ["TURBOSPARK_DATA_DIR"] = str(tmp / "data")
    real_handover = bridge_module.Handover

    def window(per_token: bool):
        bridge_module.Handover = PerTokenHandover if per_token else real_handover
        try:
            w = build_window(lambda: load_backend(path), session_slots=2, store_path=tmp / f"store-{per_token}.db",
                             settings=QSettings(str(tmp / f"s-{per_token}.ini"), QSettings.Format.IniFormat))
        finally:
            bridge_module.Handover = real_handover
        w.resize(1280, 820)
        w.show()
        while w.bridge.backend_state not in ("ready", "failed"):
            app.processEvents()
            time.sleep(0.01)
        if w.bridge.backend_state == "failed":
            raise SystemExit(f"the model did not load: {w.bridge.backend_error}")
        return w

    windows = {"window, batched hand-over": window(False), "window, a wake-up per token": window(True)}
    backend = load_backend(path)
    rates: dict[str, list[float]] = {name: [] for name in [*windows, "headless (no consumer)"]}
    lengths: dict[str, list[int]] = {name: [] for name in rates}
    names = list(rates)
    for r in range(args.rounds):
        order = names[r % 3:] + names[:r % 3]
        for name in order:
            if name in windows:
                rate, n = window_rate(app, windows[name], args.max_new)
            else:
                rate, n = headless_rate(backend, args.max_new, r)
            rates[name].append(rate)
            lengths[name].append(n)
            print(f"round {r + 1}: {name:<30} {rate:7.1f} tok/s ({n} tokens)", flush=True)
    for w in windows.values():
        w.close()
    base = statistics.median(rates["headless (no consumer)"])
    print(f"\n{path.name} · {platform.processor() or platform.machine()}, {os.cpu_count()} cores · "
          f"QT_QPA_PLATFORM={os.environ.get('QT_QPA_PLATFORM')} · greedy, {args.max_new} new tokens · "
          f"medians of {args.rounds}")
    for name in names:
        med = statistics.median(rates[name])
        print(f"  {name:<30} {med:7.1f} tok/s  {med / base:5.2f}x headless")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
