"""Decode-rate pacing (reference: `pacing`): spacing tokens to a tokens/sec ceiling.

The `Pacer` only does arithmetic on times it is given; it never reads a clock or sleeps,
so the step loop can yield a `PaceWait` and let its driver (or a scheduler) do the waiting.
"""

from __future__ import annotations

import math
from typing import Callable

# How often (in generated tokens) the thermal and memory probes are read during decode.
THERMAL_POLL_TOKENS = 8
# Longest single sleep of a pacing wait, so a Stop during the wait is seen within ~20 ms.
PACE_SLICE_SECONDS = 0.02


def _check_cap(cap: float | None) -> float | None:
    if cap is not None and (not math.isfinite(cap) or cap <= 0):
        raise ValueError(f"a rate cap must be a finite number > 0 tokens/sec (got {cap!r})")
    return cap


class Pacer:
    """Schedules token k (counted since the anchor) at `anchor + k / cap`.

    A cap of None never waits. Falling behind schedule (a slow forward pass) re-anchors at
    that moment, so a stall earns no burst credit: tokens stay spaced to the cap.
    """

    def __init__(self, cap: float | None, start: float) -> None:
        self._cap = _check_cap(cap)
        self._anchor = start
        self._count = 0

    @property
    def cap(self) -> float | None:
        """The ceiling in force (tokens/sec), None = uncapped."""
        return self._cap

    def note_token(self) -> None:
        """A token was committed; the next forward pass releases it."""
        self._count += 1

    def apply_cap(self, cap: float | None, now: float) -> None:
        """Switch to `cap` at once: the token just noted is spaced by the NEW cap from the
        previous one, instead of the whole run being re-judged against it."""
        cap = _check_cap(cap)
        if cap == self._cap:
            return
        if self._cap is not None and self._count > 0:
            # Re-anchor on the previous token's slot (released on schedule or re-anchored).
            self._anchor += (self._count - 1) / self._cap
            self._count = 1
        else:
            self._anchor, self._count = now, 0
        self._cap = cap

    def due_in(self, now: float) -> float | None:
        """Seconds to wait before releasing the noted token, or None when it may go now."""
        if self._cap is None:
            return None
        due = self._anchor + self._count / self._cap
        if due > now:
            return due - now
        self._anchor, self._count = now, 0
        return None


def wait_until(
    until: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    cancel: Callable[[], bool],
) -> None:
    """Sleep in slices of at most PACE_SLICE_SECONDS until `clock() >= until` or `cancel()`."""
    while not cancel():
        remaining = until - clock()
        if remaining <= 0:
            return
        sleep(min(remaining, PACE_SLICE_SECONDS))
