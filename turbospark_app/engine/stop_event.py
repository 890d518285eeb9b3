"""A cancel flag that reaches a run inside a native call at once, instead of at its next poll.

A run's cancel predicate is polled (between chunks, tokens, layers). A run inside one long native
call (an ONNX Runtime session run: a whole prefill chunk) can only be stopped from outside, by
setting the run's terminate flag, which a watcher thread polling the predicate used to do every
2 ms: one more thread to wake, and on a busy machine to schedule, between Stop and the stop.
With a `StopEvent`'s `is_set` as the predicate, the run registers a listener instead, and the
`set()` that asks for the stop sets the terminate flag itself, on the caller's thread.
"""

from __future__ import annotations

import itertools
import threading
from contextlib import contextmanager
from typing import Callable, Iterator


class StopEvent(threading.Event):
    """A `threading.Event` whose `set` also calls the listeners of the runs under way.

    Pass `stop.is_set` as the cancel predicate. `set` takes no lock of its own (a Python signal
    handler may call it; the Event's own condition is taken only briefly), and a listener must
    be as quick: it only sets a flag.
    """

    def __init__(self) -> None:
        super().__init__()
        self._listeners: dict[int, Callable[[], None]] = {}  # dict operations are atomic
        self._keys = itertools.count()

    def set(self) -> None:
        """Set the flag, then tell every registered listener."""
        super().set()
        for listener in list(self._listeners.values()):
            listener()

    @contextmanager
    def listening(self, on_set: Callable[[], None]) -> Iterator[None]:
        """Call `on_set` when the flag is set while the block runs (at once if it already is)."""
        key = next(self._keys)
        self._listeners[key] = on_set
        try:
            if self.is_set():  # set before the listener was there
                on_set()
            yield
        finally:
            self._listeners.pop(key, None)


def stop_event_of(cancel: Callable[[], bool] | None) -> StopEvent | None:
    """The StopEvent whose `is_set` `cancel` is, or None (a predicate that must be polled)."""
    owner = getattr(cancel, "__self__", None)
    if isinstance(owner, StopEvent) and getattr(cancel, "__func__", None) is threading.Event.is_set:
        return owner
    return None
