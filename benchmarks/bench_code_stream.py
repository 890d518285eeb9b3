"""What rich rendering costs the window: GUI frame times while two panes stream code-heavy
replies at full speed, and how long a 2,000-line code block takes to appear.

    QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/bench_code_stream.py [--rounds 3]
    DISPLAY=:43 .venv/bin/python benchmarks/bench_code_stream.py     (a real X server)

1. Two panes of the real window (build_window) each get a scripted reply (tests/ui_fakes.py's
   FakeBackend at --rate tokens/s, default 400: faster than the default model decodes here;
   0: unpaced) of ~2,400 tokens: prose, Python, shell, JSON, a table and formulas. A 16 ms
   precise QTimer stands for a 60 Hz animation; the gaps between its ticks are the frames the
   user sees (16-17 ms when the GUI keeps up, longer when a turn of the event loop stalls it).
   Printed: p50 / p99 / max of the gaps while either pane streams and renders its reply
   (end-of-reply Markdown, colours and math included), per round, and the p99 / max of the
   GUI thread's CPU time within a frame (what the window itself spent: on a loaded machine the
   gaps also count other processes' turns on the cores).
2. One 2,000-line Python block rendered by `Transcript.end_reply`: the time until it is drawn
   on screen (a synchronous repaint), the time until every token is coloured (slices of
   code_blocks.SLICE_SECONDS per event-loop turn), the longest event-loop turn meanwhile, and
   the same block drawn again (its tokens cached: a palette change, a reopened conversation).
   The GUI thread's CPU time is printed beside the wall time: on a shared, loaded machine
   the wall time also counts the time other processes held the cores.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

PY = '''```python
def moving_average(values: list[float], window: int = 3) -> list[float]:
    """The mean of each run of `window` values."""
    if window <= 0:
        raise ValueError("window must be positive")
    out = []
    for i in range(len(values) - window + 1):
        out.append(sum(values[i:i + window]) / window)  # O(n * window)
    return out
```
'''
SH = '''```bash
python3 -m venv .venv && . .venv/bin/activate
pip install numpy  # then run:
python3 -c 'import numpy; print(numpy.__version__)'
```
'''
JSON = '''```json
{"name": "demo", "values": [1, 2, 3], "nested": {"ok": true, "ratio": 0.5}}
```
'''
PROSE = ("The function walks the list once per window position; for long inputs a running sum "
         "makes it linear, and the cost per element is $O(1)$.\n\n")
TABLE = "| n | naive | running sum |\n|---|---|---|\n| 10^3 | 2 ms | 0.3 ms |\n| 10^6 | 2 s | 0.3 s |\n\n"
MATH = "$$\n\\bar{x}_k = \\frac{1}{w}\\sum_{i=k}^{k+w-1} x_i\n$$\n\n"


def code_reply(parts: int = 6) -> str:
    """A code-heavy reply (~400 tokens a part)."""
    return "".join(PROSE + PY + SH + TABLE + JSON + MATH for _ in range(parts))


FRAME_MS = 16  # the probe: a 60 Hz timer; its tick-to-tick gaps are the frames a user would see


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] if ordered else 0.0


class FrameProbe:
    """A 60 Hz timer on the GUI thread: each tick's wall gap (`gaps`) and the GUI thread's CPU
    time since the previous tick (`cpu`), in ms, between `start` and `stop`."""

    def __init__(self) -> None:
        from PySide6.QtCore import Qt, QTimer

        self.gaps: list[float] = []
        self.cpu: list[float] = []
        self._last = (time.perf_counter(), time.thread_time())
        self.timer = QTimer()
        self.timer.setTimerType(Qt.TimerType.PreciseTimer)
        self.timer.setInterval(FRAME_MS)
        self.timer.timeout.connect(self._tick)

    def _tick(self) -> None:
        now, used = time.perf_counter(), time.thread_time()
        self.gaps.append((now - self._last[0]) * 1000)
        self.cpu.append((used - self._last[1]) * 1000)
        self._last = (now, used)

    def start(self) -> None:
        self.timer.start()
        self._last = (time.perf_counter(), time.thread_time())

    def stop(self) -> None:
        self.timer.stop()


def stream_round(app, window, prompt: str) -> tuple[list[float], list[float], int]:  # type: ignore[no-untyped-def]
    """Both panes send `prompt`; frame gaps and the GUI thread's CPU time in each (ms) until
    both replies are rendered."""
    from PySide6.QtCore import QEventLoop, QTimer

    panes = window.area.panes()
    probe = FrameProbe()
    for pane in panes:
        pane.input.setPlainText(prompt)
    probe.start()
    loop = QEventLoop()  # the GUI thread runs Qt's own loop, as in the app

    def check() -> None:
        if not any(p.busy for p in panes):
            QTimer.singleShot(200, loop.quit)  # the last reply's rendering, its colour slices

    slot = lambda _cid, _busy: check()  # noqa: E731
    for pane in panes:
        pane.busyChanged.connect(slot)
        pane.send()
    QTimer.singleShot(300_000, loop.quit)
    loop.exec()
    probe.stop()
    for pane in panes:
        pane.busyChanged.disconnect(slot)
    return probe.gaps, probe.cpu, sum(len(p.transcript.document().toPlainText()) for p in panes)


def two_panes(args: argparse.Namespace, tmp: Path) -> None:
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication
    from ui_fakes import FakeBackend

    from turbospark_app.ui.app import build_window, paint_on_the_gui_thread

    paint_on_the_gui_thread()  # as the app does (run_app), before the QApplication
    app = QApplication.instance() or QApplication([])
    os.environ["TURBOSPARK_DATA_DIR"] = str(tmp / "data")
    reply = code_reply()
    backend = FakeBackend(replies=(reply,), max_context=1 << 20,
                          step_delay=1.0 / args.rate if args.rate else 0.0)
    window = build_window(lambda: backend, session_slots=2, store_path=tmp / "store.db",
                          settings=QSettings(str(tmp / "s.ini"), QSettings.Format.IniFormat))
    window.resize(1400, 900)
    window.show()
    while window.bridge.backend_state not in ("ready", "failed"):
        app.processEvents()
    window.area.split_right(window.create_conversation if hasattr(window, "create_conversation") else None)
    if len(window.area.panes()) < 2:
        window.new_conversation()
        window.area.split_right()
    panes = window.area.panes()
    for pane in panes:
        pane.settings_form.max_new.setValue(8000)
    print(f"two panes at {args.rate:g} tok/s each: {len(panes)} panes, reply {len(reply):,} chars "
          f"({reply.count('```') // 2} code blocks, {reply.count('$$') // 2} display formulas)")
    p99s: list[float] = []
    cpu99s: list[float] = []
    for r in range(args.rounds):
        for pane in panes:  # a fresh conversation each round: no transcript growth between rounds
            pane.transcript.set_entries([])
        gaps, cpu, chars = stream_round(app, window, f"Explain moving averages, round {r}")
        p99s.append(percentile(gaps, 0.99))
        cpu99s.append(percentile(cpu, 0.99))
        late = [g for g in gaps if g > 2 * FRAME_MS]
        print(f"  round {r + 1}: {len(gaps):5d} frames  p50 {percentile(gaps, 0.5):5.1f} ms  "
              f"p99 {percentile(gaps, 0.99):5.1f} ms  max {max(gaps):6.1f} ms  "
              f"{len(late)} frames dropped (gap > {2 * FRAME_MS} ms)  GUI-thread CPU per frame p99 "
              f"{percentile(cpu, 0.99):5.1f} ms max {max(cpu):6.1f} ms  ({chars:,} chars on screen)")
    print(f"  GUI p99 frame time, median of rounds: {statistics.median(p99s):.1f} ms "
          f"(target <= 16 ms past the probe's own {FRAME_MS} ms); GUI-thread CPU per frame p99 "
          f"{statistics.median(cpu99s):.1f} ms")
    window.close()


def big_block(run: int = 0) -> None:
    from PySide6.QtWidgets import QApplication

    from turbospark_app.ui.app import paint_on_the_gui_thread
    from turbospark_app.ui.render.math import warm_up
    from turbospark_app.ui.pane.transcript import Transcript

    paint_on_the_gui_thread()
    app = QApplication.instance() or QApplication([])
    warm_up().join()
    source = (ROOT / "turbospark_app" / "ui" / "pane" / "transcript.py").read_text().split("\n")
    lines = (source * (2000 // len(source) + 1))[:2000]
    code = f"# run {run}: code no earlier run lexed\n" + "\n".join(lines[1:])
    text = f"Here it is:\n\n```python\n{code}\n```\n"
    for label in ("first time (lexed)", "again (tokens cached)"):
        view = Transcript()
        view.resize(1000, 800)
        view.show()
        view.begin_reply()
        app.processEvents()
        t0, c0 = time.perf_counter(), time.thread_time()
        view.end_reply(text, "new 20000 tok")
        view.viewport().repaint()
        drawn, cpu = time.perf_counter() - t0, time.thread_time() - c0
        worst = worst_cpu = 0.0
        colours = view._rich.colours  # noqa: SLF001 (a benchmark may peek)
        while colours.jobs:
            t, c = time.perf_counter(), time.thread_time()
            app.processEvents()
            worst = max(worst, time.perf_counter() - t)
            worst_cpu = max(worst_cpu, time.thread_time() - c)
        done = time.perf_counter() - t0
        print(f"2,000-line block, {label}: on screen in {drawn * 1000:5.1f} ms (GUI thread's CPU "
              f"{cpu * 1000:5.1f} ms; target <= 100 ms), "
              f"coloured in {done * 1000:6.0f} ms over {colours.slices} slices, longest turn {worst * 1000:4.1f} ms "
              f"(CPU {worst_cpu * 1000:4.1f} ms)")
        view.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", choices=("panes", "block"), default=None, help="run one of the two parts")
    ap.add_argument("--rate", type=float, default=400.0,
                    help="tokens/s of each pane's scripted engine (0: unpaced, the whole reply in one hand-over)")
    args = ap.parse_args()
    print(f"QT_QPA_PLATFORM={os.environ.get('QT_QPA_PLATFORM')} DISPLAY={os.environ.get('DISPLAY', '')} "
          f"· {os.cpu_count()} cores")
    if args.only != "block":
        with tempfile.TemporaryDirectory(prefix="bench-code-") as tmp:
            two_panes(args, Path(tmp))
    if args.only != "panes":
        for run in range(args.rounds if args.only == "block" else 1):
            big_block(run)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
