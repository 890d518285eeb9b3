"""Python's cyclic garbage collector, run on the GUI thread only (pyqtgraph's GarbageCollector
does the same, for the same reason).

CPython collects reference cycles on whichever thread allocates past the threshold: in this app,
mostly the engine thread. A QObject that Python owns (no Qt parent) and that sits in a cycle is
then deleted on that thread: Qt cannot unregister its timers from there ("QObject::~QObject:
Timers cannot be stopped from another thread"), and the GUI thread's next timer event goes to
freed memory; and a collection that disconnects a signal can deadlock against the GUI thread
(the collecting thread holds Qt's connection lock and waits for the GIL). Both were seen in the
test suite (qasync's loop timer left to the collector; a collector forced onto another thread).
So automatic collection is off while the window runs, and a GUI-thread timer collects each
generation once its count passes the threshold the interpreter would have used. Reference
counting, which frees almost everything, is untouched.
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QObject, QTimer

INTERVAL_MS = 500


class GuiThreadCollector(QObject):
    """Create and `start()` on the GUI thread; `stop()` gives the collector back to Python."""

    def __init__(self, parent: QObject | None = None, interval_ms: int = INTERVAL_MS) -> None:
        super().__init__(parent)
        self._timer = QTimer(self)
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self.check)
        self._was_enabled = False
        self.collections = [0, 0, 0]  # per generation, since start()

    @property
    def active(self) -> bool:
        return self._timer.isActive()

    def start(self) -> None:
        """Automatic collection off; this object's timer collects from now on."""
        if self.active:
            return
        self._was_enabled = gc.isenabled()
        gc.disable()
        self._timer.start()

    def check(self) -> None:
        """Collect the generations whose count passed the interpreter's threshold (as its own
        automatic collection would, here on the GUI thread)."""
        t0, t1, t2 = gc.get_threshold()
        c0, c1, c2 = gc.get_count()
        if c0 <= t0:
            return
        generation = 0
        if c1 > t1:
            generation = 2 if c2 > t2 else 1
        gc.collect(generation)
        self.collections[generation] += 1

    def stop(self) -> None:
        """Automatic collection as it was; what is left is collected now, on this thread."""
        if not self.active:
            return
        self._timer.stop()
        gc.collect()
        if self._was_enabled:
            gc.enable()
