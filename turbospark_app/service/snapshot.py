"""The backend's `system_info` document as last read by the engine thread, for any thread.

`system_info()` must never wait behind a forward step: the engine thread re-reads the backend's
document between steps (at most every `SNAPSHOT_REFRESH_SECONDS` while turns run, at once after
a turn), and callers on other threads get a copy of the last one with its age.
"""

from __future__ import annotations

import copy
import logging
import threading
from typing import Any, Callable

log = logging.getLogger(__name__)

# The backend's system_info is re-read at most this often while turns are being stepped.
SNAPSHOT_REFRESH_SECONDS = 0.5


class InfoSnapshot:
    """A lock-protected copy of the backend's system_info and the clock reading it was taken at."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._info: dict[str, Any] = {}
        self._at = float("-inf")

    def refresh(self, backend: Any, force: bool = False) -> None:
        """Re-read `backend.engine_info()` or else `backend.system_info()` (engine thread only:
        the backend is its own)."""
        now = self._clock()
        if backend is None or (not force and now - self._at < SNAPSHOT_REFRESH_SECONDS):
            return
        # A backend that splits its document (`engine_info`) hands over only what needs the
        # engine thread: the process's and the monitors' readings are the reader's to take.
        read = getattr(backend, "engine_info", None) or backend.system_info
        try:
            info = dict(read())
        except Exception as e:
            log.exception("backend system_info failed")
            info = {"error": f"system_info failed: {e}"}
        with self._lock:
            self._info, self._at = info, now

    def clear(self) -> None:
        with self._lock:
            self._info, self._at = {}, float("-inf")

    def read(self) -> tuple[dict[str, Any], float | None]:
        """A deep copy of the last document and its age in seconds (None: never read)."""
        with self._lock:
            info, at = copy.deepcopy(self._info), self._at
        return info, None if at == float("-inf") else max(0.0, self._clock() - at)
