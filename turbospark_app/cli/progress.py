"""A long model load's progress on stderr, for `turbospark chat` and `turbospark serve`."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from ..engine.load_progress import measured


class StderrProgress:
    """A long load's progress on stderr: "turbospark: Loading model… 40%", a line per tenth
    (rewritten in place on a terminal, a line per step in a log); a phase without a measure
    says "Checking the model file…", then "Checking the model file… done (1.4 s)". A load that
    is over within `quiet_for` seconds says nothing: a warm or a tiny model's open is not worth
    a line."""

    def __init__(self, stream: TextIO | None = None, quiet_for: float = 0.5) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self._last: tuple[str, int] | None = None
        self._began: dict[str, float] = {}  # unmeasured phases under way: when each began
        self._timers: dict[str, threading.Timer] = {}
        self._speak_after = time.monotonic() + quiet_for
        self._silent = False

    def silence(self) -> None:
        """Say nothing more, a begun phase's pending line included (the process is leaving)."""
        self._silent = True
        for timer in self._timers.values():
            timer.cancel()

    def __call__(self, phase: str, fraction: float) -> None:
        if self._silent:
            return
        if not measured(phase):
            self._unmeasured(phase, fraction)
            return
        step = (phase, int(fraction * 10))
        if step == self._last or time.monotonic() < self._speak_after:
            return
        self._last = step
        self._say(f"{phase}… {step[1] * 10}%", final=fraction >= 1.0)

    def _unmeasured(self, phase: str, fraction: float) -> None:
        """Begun: said at once, or when the quiet time is over if it still runs then (a timer:
        no report comes meanwhile). Done: with how long it took, unless all was quick."""
        now = time.monotonic()
        if fraction < 1.0:
            if phase in self._began:
                return
            self._began[phase] = now
            delay = self._speak_after - now
            if delay <= 0:
                self._say(f"{phase}…", final=False)
            else:
                timer = threading.Timer(delay, self._say, (f"{phase}…",), {"final": False})
                timer.daemon = True
                self._timers[phase] = timer
                timer.start()
            return
        timer = self._timers.pop(phase, None)
        if timer is not None:
            timer.cancel()
        began = self._began.pop(phase, None)
        if now < self._speak_after:
            return
        took = "" if began is None else f" ({now - began:.1f} s)"
        self._say(f"{phase}… done{took}", final=True)

    def _say(self, text: str, final: bool) -> None:
        if self._silent:  # (a timer that fired as `silence` was called)
            return
        tty = self.stream.isatty()
        end = "\n" if not tty or final else ""
        print(("\r" if tty else "") + f"turbospark: {text}", end=end, file=self.stream, flush=True)
