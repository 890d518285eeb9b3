"""Screenshots of a rich reply for the README: Python and shell code, a table and display math,
in the light and the dark palette.

    DISPLAY=:43 .venv/bin/python tools/screenshot_rich.py [--out docs/screenshots] [--dark]

The real window (build_window) over a scripted engine (tests/ui_fakes.py's FakeBackend: the
reply below, streamed token by token through the engine thread and the hand-over like a
model's), in a throw-away data folder. The question is typed with real keys (xdotool) when
the display is a real X server, else set directly. Writes rich-light.png or rich-dark.png
(`import -window root` under X, else the window's own grab).
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

QUESTION = "Fibonacci in Python, how to run it, its cost, and the closed form?"
REPLY = r'''Here is a memoised Fibonacci:

```python
from functools import lru_cache

@lru_cache(maxsize=None)
def fib(n: int) -> int:
    """The n-th Fibonacci number (fib(0) == 0)."""
    return n if n < 2 else fib(n - 1) + fib(n - 2)

print([fib(k) for k in range(10)])  # [0, 1, 1, 2, 3, ...]
```

Run it from a shell:

```bash
python3 fib.py | tee out.txt   # prints the first ten numbers
wc -w out.txt
```

| Version | Time | Memory |
|---|---|---|
| naive recursion | $O(\varphi^n)$ | $O(n)$ stack |
| memoised | $O(n)$ | $O(n)$ |
| fast doubling | $O(\log n)$ | $O(1)$ |

The closed form (Binet's formula), with $\varphi = \frac{1+\sqrt{5}}{2}$:

$$
F_n = \frac{\varphi^n - \psi^n}{\sqrt{5}}, \qquad \psi = 1 - \varphi
$$

> Prices such as $5 and $10 stay text; see [the Wikipedia article](https://en.wikipedia.org/wiki/Fibonacci_sequence).
'''


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    ap.add_argument("--dark", action="store_true")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="turbospark-rich-shot-"))
    os.environ["TURBOSPARK_DATA_DIR"] = str(tmp)

    from PySide6.QtWidgets import QApplication
    from screenshot import ask, capture, open_window, settle
    from ui_fakes import FakeBackend

    from turbospark_app.ui.app import configure_application
    from turbospark_app.ui.theme import dark_palette

    app = QApplication.instance() or QApplication(sys.argv[:1])
    configure_application(app)
    if args.dark:  # what follow_system_scheme applies on a desktop that asks for dark
        app.setPalette(dark_palette(app.palette()))
    backend = FakeBackend(replies=(REPLY,), step_delay=0.002)
    window = open_window(app, lambda: backend, tmp, (1100, 1000))
    pane = window.area.current_pane()
    assert pane is not None
    settle(app, 0.5)
    ask(app, pane, QUESTION)
    deadline = time.monotonic() + 60
    while (pane.busy or not pane.transcript.entries) and time.monotonic() < deadline:
        app.processEvents()
    pane.transcript.finish_colours()
    settle(app, 0.8)
    capture(window, args.out / f"rich-{'dark' if args.dark else 'light'}.png")
    window.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
