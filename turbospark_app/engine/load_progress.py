"""Progress of a long model load, from the code doing the work to whoever asked for the load.

A first open builds the weight cache (every tensor of the GGUF rewritten, layer by layer) and the
kernel library prepacks the weights: seconds to tens of seconds for a 1-8B model. The layers
that do it (`model.reference.weights`, `model.compact`) call `report(phase, fraction)`; the one
that started the load (the engine thread, `turbospark chat`) wraps it in `reporting(callback)`.
A context variable carries the callback, so no signature between the two has to change, and a
load on another thread reports to nobody.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Iterator

ProgressCallback = Callable[[str, float], None]
"""callback(phase, fraction): phase e.g. "Preparing model", fraction in [0, 1]."""

PREPARING = "Preparing model"  # the weight cache being built (first open of a file)
KERNELS = "Preparing kernels"  # ONNX Runtime making the session (prepacking the weights)
# Phases reported only as begun (0) and done (1): ONNX Runtime's prepack has no finer grain, so
# their fraction is no measure and shows as a busy bar, not "0%" for seconds.
UNMEASURED = frozenset({KERNELS})


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
