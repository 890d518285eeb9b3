"""A long model load's progress on stderr, for `turbospark chat` and `turbospark serve`."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class StderrProgress:
    """A long load's progress on stderr: "turbospark: Preparing model… 40%", a line per tenth
    (rewritten in place on a terminal, a line per step in a log). A load that is over within
    `quiet_for` seconds says nothing: a warm or a tiny model's open is not worth a line."""

    def __init__(self, stream: TextIO | None = None, quiet_for: float = 0.5) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self._last: tuple[str, int] | None = None
        self._speak_after = time.monotonic() + quiet_for

    def __call__(self, phase: str, fraction: float) -> None:
        step = (phase, int(fraction * 10))
        if step == self._last or time.monotonic() < self._speak_after:
            return
        self._last = step
        text = f"turbospark: {phase}… {step[1] * 10}%"
        tty = self.stream.isatty()
        end = "\n" if not tty or fraction >= 1.0 else ""
        print(("\r" if tty else "") + text, end=end, file=self.stream, flush=True)
