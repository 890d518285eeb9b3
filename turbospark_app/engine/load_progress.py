"""Progress of a model load, from the code doing the work to whoever asked for the load.

llama.cpp reports how far its load is (its progress callback: the tensors mapped or read,
fractions 0 to 1); a 7-8B file on a cold disk takes seconds. The first open of a file is
checked in a child process first (`model.llamacpp.probe`), which only says when it is done. The layer that loads
(`chat.backend.load_backend`) calls `report(phase, fraction)`; the one that started the load
(the engine thread, `turbospark chat`) wraps it in `reporting(callback)`. A context variable
carries the callback, so no signature between the two has to change, and a load on another
thread reports to nobody.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Iterator

ProgressCallback = Callable[[str, float], None]
"""callback(phase, fraction): phase e.g. "Loading model", fraction in [0, 1]."""

LOADING = "Loading model"  # llama.cpp mapping the GGUF's tensors
CHECKING = "Checking the model file"  # its first open: llama.cpp loads it in a child process
# Phases reported only as begun (0) and done (1): the child says nothing until it is done, so
# its fraction is no measure and shows as a busy bar, not "0%" for seconds.
UNMEASURED = frozenset({CHECKING})


def measured(phase: str) -> bool:
    """Whether `phase`'s fractions in between say how far it is (see UNMEASURED)."""
    return phase not in UNMEASURED


_reporter: ContextVar[ProgressCallback | None] = ContextVar("turbospark_load_progress", default=None)


@contextmanager
def reporting(callback: ProgressCallback) -> Iterator[None]:
    """Send the `report` calls made inside this block (on this thread) to `callback`."""
    token = _reporter.set(callback)
    try:
        yield
    finally:
        _reporter.reset(token)


def report(phase: str, fraction: float) -> None:
    """Tell whoever asked for the load how far `phase` is (no-op when nobody asked)."""
    callback = _reporter.get()
    if callback is not None:
        callback(phase, min(1.0, max(0.0, float(fraction))))
