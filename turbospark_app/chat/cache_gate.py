"""Hold a reply's first token until the weight-cache check has its verdict.

A warm load maps cache files whose checksums are verified on a background thread
(`model.cache_integrity`) while the prompt is read. `verified_stream` passes prefill progress
through but keeps the first decoded token (and everything after it) back until that check is
in: "ok" lets the reply out as it was computed; "mismatch" raises `CacheRejected`, so the backend
rebuilds the weights and runs the turn again: nothing computed from failing bytes is ever shown.
While it waits it yields `PaceWait`s, so the engine thread serves other turns meanwhile.
"""

from __future__ import annotations

from typing import Any, Callable, Generator

from ..engine import EngineError, PaceWait, RawDecodeResult, TailProgress, TokenProgress
from ..model.cache_integrity import CacheCheck

WAIT_SECONDS = 0.01  # how often a held reply looks at the check again


class CacheRejected(EngineError):
    """The weight-cache check failed for the weights this turn ran on (its message says why)."""


class CancelledAtGate(Exception):
    """Stop was pressed while the first token was held: nothing of the turn is kept."""


def _await_verdict(check: CacheCheck, cancel: Callable[[], bool],
                   clock: Callable[[], float]) -> Generator[PaceWait, None, None]:
    while not check.join(0):
        if cancel():
            raise CancelledAtGate()
        yield PaceWait(clock() + WAIT_SECONDS)
    if check.state != "ok":
        raise CacheRejected(check.message or "the weight cache failed its integrity check")


def verified_stream(stream: Generator[Any, None, RawDecodeResult], check: CacheCheck | None,
                    cancel: Callable[[], bool], clock: Callable[[], float]
                    ) -> Generator[Any, None, RawDecodeResult]:
    """`stream`'s events, the first token held until `check` is "ok" (see the module docstring).
    Raises CacheRejected on a mismatch, CancelledAtGate on Stop while holding."""
    verified = check is None or check.state == "ok"
    reply = None  # what the driver sent back for the last event (a batched DecodeStep: True)
    try:
        while True:
            try:
                event = stream.send(reply)
            except StopIteration as stop:
                if not verified:  # a reply with no token still leaves KV and ids behind
                    yield from _await_verdict(check, cancel, clock)  # type: ignore[arg-type]
                return stop.value
            if not verified and isinstance(event, (TokenProgress, TailProgress)):
                yield from _await_verdict(check, cancel, clock)  # type: ignore[arg-type]
                verified = True
            reply = yield event
    finally:
        stream.close()
