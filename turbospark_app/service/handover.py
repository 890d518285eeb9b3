"""Engine events handed to another thread (the window's, the API's event loop), tokens in batches.

The engine thread `put`s each event; the consumer's thread is woken at once for every event but
a token, and for a token only when it opens a batch: the consumer then drains everything that
came meanwhile, in order, `COALESCE_S` after its previous drain (at once when that is longer
ago: a slow or paced stream shows each token when it comes). A streaming reply thus wakes the consumer
~40 times a second instead of once per token. Measured on the 2-core machine
(benchmarks/bench_window_stream.py): under a real X server the batched window decodes 1.13x
faster than with a wake-up per token (each wake-up repainted the transcript, and the painting
took a core from the kernels' spinning threads); offscreen, where painting is nearly free, no
difference. Tokens carry the time the engine sent them (`Token.at`), so cadence figures do not
see the batching.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Callable, Generic, TypeVar

from .events import Token

log = logging.getLogger(__name__)

COALESCE_S = 0.025  # longest a token waits for its consumer (a 60 Hz frame is 17 ms)

Item = TypeVar("Item")


class Handover(Generic[Item]):
    """`put` on the engine thread, `drain` on the consumer's thread (see the module docstring).

    `wake(later)` runs on the engine thread and must only schedule, thread-safely, a `drain` on
    the consumer's thread: after `delay()` seconds when `later` (a token opened a batch), else at
    once. `deliver(item)` is called by `drain` for each item, in `put` order. `is_token(item)`
    says what is batched.
    """

    def __init__(self, wake: Callable[[bool], None], deliver: Callable[[Item], None],
                 is_token: Callable[[Item], bool] = lambda item: isinstance(item, Token),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._wake = wake
        self._deliver = deliver
        self._is_token = is_token
        self._clock = clock
        self._inbox: deque[Item] = deque()
        self._lock = threading.Lock()
        self._batch_open = False  # a token waits for a drain already scheduled
        self._last_drain = float("-inf")  # consumer thread only

    def delay(self) -> float:
        """Consumer thread: seconds until a batch just opened should be drained (0: now)."""
        return max(0.0, self._last_drain + COALESCE_S - self._clock())

    def put(self, item: Item) -> None:
        """Engine thread: queue `item` and wake the consumer (see the class docstring)."""
        with self._lock:
            self._inbox.append(item)
            later = self._is_token(item)
            if later:
                if self._batch_open:
                    return
                self._batch_open = True
        self._wake(later)

    def drain(self) -> None:
        """Consumer thread: deliver every item waiting, oldest first (a no-op when none)."""
        self._last_drain = self._clock()
        while True:
            with self._lock:
                if not self._inbox:
                    self._batch_open = False
                    return
                item = self._inbox.popleft()
            try:
                self._deliver(item)
            except Exception:  # one consumer's bug must not strand the events behind it
                log.exception("delivering %r failed", type(item).__name__)
