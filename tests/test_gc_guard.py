"""gc_guard: while the window runs, reference cycles are collected on the GUI thread only, so a
QObject Python owns is never deleted on the engine thread (where Qt cannot stop its timers)."""

from __future__ import annotations

import gc
import threading
import weakref

import shiboken6
from PySide6.QtCore import QTimer

from turbospark_app.ui.services.gc_guard import GuiThreadCollector


class _Holder:
    """A reference cycle, holding a running QTimer Python owns when `timer`."""

    def __init__(self, timer: bool) -> None:
        self.me = self
        if timer:
            self.timer = QTimer()
            self.timer.start(60_000)


def _cycle_freed_on(qtbot, collector: GuiThreadCollector | None) -> int:  # type: ignore[no-untyped-def]
    """The thread that frees a cycle while another thread allocates; with the collector, the
    cycle holds a live timer (without it, a timer freed there would crash a later test: the
    hazard itself, which the second test shows with a plain cycle)."""
    gc.collect()
    freed: list[int] = []
    holder = _Holder(timer=collector is not None)
    weakref.finalize(holder, lambda: freed.append(threading.get_ident()))
    del holder

    kept: list[list[int]] = []

    def churn() -> None:  # containers well past gen 0's threshold, kept (the count is net)
        kept.extend([i] for i in range(5000))

    worker = threading.Thread(target=churn)
    worker.start()
    worker.join()
    if collector is not None:
        qtbot.waitUntil(lambda: bool(freed), timeout=5000)
    del kept
    return freed[0]


def test_cycles_are_freed_on_the_gui_thread_and_the_collector_gives_gc_back(qtbot) -> None:
    assert gc.isenabled()
    collector = GuiThreadCollector(interval_ms=20)
    collector.start()
    try:
        assert not gc.isenabled()
        assert _cycle_freed_on(qtbot, collector) == threading.main_thread().ident
        assert collector.collections[0] + collector.collections[1] + collector.collections[2] > 0
    finally:
        collector.stop()
        shiboken6.delete(collector)
    assert gc.isenabled()


def test_without_it_a_cycle_goes_on_the_thread_that_allocates(qtbot) -> None:
    """What the collector is for (the interpreter collects where the threshold is passed)."""
    assert gc.isenabled()
    gc.freeze()  # (a small heap to walk: the worker's own allocations trigger the collection)
    try:
        assert _cycle_freed_on(qtbot, None) != threading.main_thread().ident
    finally:
        gc.unfreeze()
