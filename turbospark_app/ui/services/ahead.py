"""Work done ahead on a worker thread: each key once, while the GUI thread keeps painting (the
streaming reply's formulas and code blocks, pure-Python work whose results go in a cache)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Hashable


class AheadWorker:
    """One worker thread, started on first use; `submit` skips a key already done or queued."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._pending: set[Hashable] = set()
        self._pool: ThreadPoolExecutor | None = None

    def submit(self, key: Hashable, done: Callable[[], bool], job: Callable[[], None]) -> None:
        """Run `job` on the worker unless `done()` or `key` is already queued."""
        with self._lock:
            if key in self._pending or done():
                return
            self._pending.add(key)
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self.name)
        self._pool.submit(self._run, key, job)

    def _run(self, key: Hashable, job: Callable[[], None]) -> None:
        try:
            job()
        finally:
            with self._lock:
                self._pending.discard(key)
