"""Which cache folders a running model maps: those are never evicted or cleared.

A lease is a shared `flock` on the folder itself, held while the model that maps it lives (the
lease is released when the last of the objects it is tied to is garbage collected), so another
TurboSpark process (`turbospark model cache clear` beside a running window) sees it too: it
asks for an exclusive lock without waiting, and a refusal means "in use". Where there is no
`fcntl` (Windows) only this process's own leases are known.
"""

from __future__ import annotations

import os
import threading
import weakref
from pathlib import Path
from typing import Any, Iterable

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

_local: dict[str, int] = {}  # folder -> leases held by this process
# Re-entrant, and nothing that allocates runs under it (keys are made first): a lease is released
# by a weakref finalizer, which the garbage collector may run in ANY thread at any allocation,
# the one holding this lock included (a model load hung so inside `in_use`).
_lock = threading.RLock()


class Lease:
    """A hold on one folder; `release()` (or the garbage collection of what it is tied to)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self._fd: int | None = None
        self._released = False
        if fcntl is not None:
            try:
                self._fd = os.open(self.folder, os.O_RDONLY)
                fcntl.flock(self._fd, fcntl.LOCK_SH)
            except OSError:
                self._close()
        key = str(self.folder)
        with _lock:
            _local[key] = _local.get(key, 0) + 1

    def _close(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)  # closing the descriptor drops its flock
            except OSError:
                pass
            self._fd = None

    def release(self) -> None:
        """Let the folder go (idempotent)."""
        if self._released:
            return
        self._released = True
        self._close()
        key = str(self.folder)
        with _lock:
            left = _local.get(key, 1) - 1
            if left > 0:
                _local[key] = left
            else:
                _local.pop(key, None)

    def tie_to(self, objects: Iterable[Any]) -> "Lease":
        """Release when every one of `objects` has been garbage collected."""
        objs = [o for o in objects if o is not None]
        if not objs:
            return self
        left = [len(objs)]

        def gone() -> None:
            left[0] -= 1
            if left[0] == 0:
                self.release()

        for obj in objs:
            weakref.finalize(obj, gone)
        return self


def hold(folder: Path) -> Lease:
    """Lease `folder` (it stays until released)."""
    return Lease(folder)


def in_use(folder: Path) -> bool:
    """Is `folder` leased, by this process or (with fcntl) another one?"""
    key = str(Path(folder))
    with _lock:
        if _local.get(key, 0) > 0:
            return True
    if fcntl is None:
        return False
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)
