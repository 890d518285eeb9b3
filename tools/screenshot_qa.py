"""Screenshots of the Settings dialog and of the pacing QA panel mid-generation; an end-to-end
check of the QA flow (and, with --open-model, of opening another GGUF) over the real model.

    python tools/screenshot_qa.py [--out docs/screenshots] [--model GGUF] [--open-model GGUF]

What it does, as a tester would, in the real window over the real model (throw-away data
folder, so the user's conversations and settings are never touched):

 1. Conversation > Settings…: tokens/sec cap 5, seed 1            -> settings.png
 2. a first reply, stopped after two seconds (a Stop latency row)
 3. a second reply at 5 tok/s; after ~5 s the QA panel forces thermal "serious": the engine's
    cap steps to 2.5 tok/s within THERMAL_POLL_TOKENS tokens       -> qa_panel.png
 4. Stop; prints the measured cadence before / after and the Stop latencies
 5. with --open-model: File > Open Model… on that file (checked, then switched), a reply from
    it, and the Model Info dialog                                  -> model-switch.png

Exits non-zero when a step does not happen (the model did not load, a reply ended early, the
cadence did not step down, the switch failed). `make screenshot` runs it under Xvfb.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from screenshot import settle, wait_until  # the same event-loop helpers as tools/screenshot.py

WINDOW_SIZE = (1360, 940)
CAP = 5.0
STORY = "Write a long story about a lighthouse keeper who befriends a storm. Use many details."


def rate(times: list[float]) -> float:
    """Tokens per second over arrival times."""
    return (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 and times[-1] > times[0] else 0.0


def main(argv: list[str] | None = None) -> int:
    """Run the steps; returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/screenshots"))
    parser.add_argument("--model", default=None, help="a GGUF (default: TURBOSPARK_MODEL, else the default model)")
    parser.add_argument("--open-model", default=None, help="another GGUF to open with File > Open Model…")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    from turbospark_app.model.fetch import resolve_model_path

    model = str(resolve_model_path(args.model))
    data = tempfile.mkdtemp(prefix="turbospark-screenshot-qa-")
    os.environ["TURBOSPARK_DATA_DIR"] = data

    from PySide6.QtCore import QSettings, Qt
    from PySide6.QtWidgets import QApplication

    from turbospark_app.engine.pacing import THERMAL_POLL_TOKENS
    from turbospark_app.service import Token
    from turbospark_app.ui.app import build_window, configure_application, real_backend_factory
    from turbospark_app.ui.dialogs.models import ModelInfoDialog
    from turbospark_app.ui.qa.power_controls import PowerControls

    app = QApplication.instance() or QApplication(sys.argv[:1])
    configure_application(app)
    power = PowerControls.from_environment()
    monitors = (power.thermal, power.memory)
    settings = QSettings(str(Path(data) / "settings.ini"), QSettings.Format.IniFormat)
    window = build_window(real_backend_factory(model, 4, monitors), power=power, settings=settings,
                          model_factory=lambda path: real_backend_factory(path, 4, monitors))
    window.resize(*WINDOW_SIZE)
    window.show()
    window.qa_panel.show()
    window.resizeDocks([window.qa_panel], [380], Qt.Orientation.Vertical)
    wait_until(app, lambda: window.bridge.backend_state in ("ready", "failed"), 300, "the model to load")
    if window.bridge.backend_state == "failed":
        print(f"screenshot_qa: the model could not be loaded: {window.bridge.backend_error}", file=sys.stderr)
        return 1
    pane = window.area.current_pane()
    assert pane is not None

    # 1. Settings: the cap a tester sets.
    window.open_settings()
    dialog = window.settings_dialog
    assert dialog is not None
    dialog._fields["max_tokens_per_sec"].setText(f"{CAP:g}")  # noqa: SLF001 (a script may peek)
    dialog._fields["seed"].setText("1")  # noqa: SLF001 (the same picture every run)
    dialog._fields["max_new_tokens"].setText("400")  # noqa: SLF001
    settle(app, 0.3)
    dialog.grab().save(str(args.out / "settings.png"))
    dialog.ok_button.click()

    arrivals: list[float] = []
    window.bridge.engineEvent.connect(lambda e: arrivals.append(time.monotonic()) if isinstance(e, Token) else None)

    # 2. A stopped reply: the Stop latency list gets a row.
    pane.input.setPlainText("Tell me about lighthouses.")
    pane.send()
    wait_until(app, lambda: len(arrivals) >= 6 or not pane.busy, 120, "the first reply to stream")
    pane.stop()
    wait_until(app, lambda: not pane.busy, 30, "the first stop")

    # 3. The paced reply; force "serious" mid-reply.
    arrivals.clear()
    pane.input.setPlainText(STORY)
    pane.send()
    wait_until(app, lambda: len(arrivals) >= 25 or not pane.busy, 120, "25 tokens at the cap")
    if not pane.busy:
        print("screenshot_qa: the reply ended before the level was forced; pick a longer prompt", file=sys.stderr)
        return 1
    combo = window.qa_panel.thermal_combo
    combo.setCurrentIndex(combo.findText("serious"))
    combo.activated.emit(combo.currentIndex())
    forced_at = len(arrivals)
    wait_until(app, lambda: len(arrivals) >= forced_at + THERMAL_POLL_TOKENS + 12 or not pane.busy, 120,
               "tokens after the forced level")
    if not pane.busy:
        print("screenshot_qa: the reply ended too early", file=sys.stderr)
        return 1
    settle(app, 0.6)
    window.qa_panel.flush()
    window.grab().save(str(args.out / "qa_panel.png"))

    # 4. Stop, then the figures.
    pane.stop()
    wait_until(app, lambda: not pane.busy, 30, "the second stop")
    settle(app, 0.5)
    before = rate(arrivals[3:forced_at])
    after = rate(arrivals[forced_at + THERMAL_POLL_TOKENS + 1:])
    latencies = [s.latency for s in window.qa_panel.data.stops if s.latency is not None]
    print(f"cadence before the forced level: {before:.2f} tok/s (cap {CAP:g}); after: {after:.2f} tok/s "
          f"(cap {CAP / 2:g}); stop latencies: {', '.join(f'{x * 1000:.0f} ms' for x in latencies)}")
    ok = abs(before - CAP) < 0.75 and abs(after - CAP / 2) < 0.5 and len(latencies) == 2
    combo.setCurrentIndex(combo.findText("real"))
    combo.activated.emit(combo.currentIndex())

    # 5. Open another GGUF from disk.
    if args.open_model:
        opened = []
        window.model_opener.checked.connect(lambda path, usable: opened.append(usable))
        window.model_opener.open_path(args.open_model)
        wait_until(app, lambda: bool(opened), 120, "the file check")
        if not opened[0]:
            print(f"screenshot_qa: {args.open_model} was refused: {window.model_opener.last_error}", file=sys.stderr)
            return 1
        wait_until(app, lambda: window.bridge.backend_state in ("ready", "failed")
                   and window.bridge.model_info.get("path") == args.open_model, 300, "the new model")
        pane.apply_settings({"max_tokens_per_sec": 0}, None)
        pane.input.setPlainText("Say hello in one short sentence.")
        pane.send()
        wait_until(app, lambda: not pane.busy, 300, "a reply from the new model")
        reply = pane.messages[-1]
        print(f"opened {window.bridge.model_info.get('file_name')} "
              f"({window.bridge.model_info.get('quantization')}): {reply.content!r}")
        info = ModelInfoDialog(window.bridge.model_info, window)
        info.show()
        settle(app, 0.5)
        window.grab().save(str(args.out / "model-switch.png"))
        info.grab().save(str(args.out / "model-info.png"))
        info.close()
        ok = ok and reply.role == "assistant" and bool(reply.content.strip())
    window.close()
    print(f"wrote {args.out}/settings.png and {args.out}/qa_panel.png" + (" (checks passed)" if ok else ""))
    if not ok:
        print("screenshot_qa: a check failed (see the figures above)", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
