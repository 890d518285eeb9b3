"""Lower the calling thread's CPU priority (background work that must yield to a reply).

Linux: a thread is a task with its own nice value; `setpriority(PRIO_PROCESS, tid, 19)` sets
it, and the threads the thread creates afterwards (llama.cpp's / OpenMP's compute workers)
inherit it. macOS: `setpriority(PRIO_DARWIN_THREAD, 0, PRIO_DARWIN_BG)` puts the calling
thread in the background band (lower CPU and I/O priority). Elsewhere: nothing.
"""

from __future__ import annotations

import os
import sys
import threading

PRIO_DARWIN_THREAD = getattr(os, "PRIO_DARWIN_THREAD", 3)
PRIO_DARWIN_BG = getattr(os, "PRIO_DARWIN_BG", 0x1000)
BACKGROUND_NICE = 19


def lower_this_thread() -> str:
    """Make the calling thread background priority; returns what was done ("" when nothing)."""
    try:
        if sys.platform.startswith("linux"):
            tid = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, tid, BACKGROUND_NICE)
            return f"nice {os.getpriority(os.PRIO_PROCESS, tid)}"
        if sys.platform == "darwin":
            os.setpriority(PRIO_DARWIN_THREAD, 0, PRIO_DARWIN_BG)
            return "darwin background"
    except (OSError, AttributeError):
        return ""
    return ""


def thread_nice() -> int | None:
    """The calling thread's nice value (Linux), else None."""
    if not sys.platform.startswith("linux"):
        return None
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
