"""The jobs bridge: API requests as jobs on the engine thread, and the board the status route,
the status bar and the QA panel read.

The engine thread calls each job's listener on ITS thread; the listener only hands the event
to the asyncio loop (`service.handover`: `loop.call_soon_threadsafe` at once, or for tokens one
wake-up per 25 ms batch), never blocks, and never touches a socket: the engine cannot be held
up by a slow client, its events just queue for the handler.
A handler that ends for any reason cancels its job (`cancel`), recording why and when, and
the engine's measured cancel-to-ended latency lands on the record with the Finished event.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from ..service.handover import Handover
from ..service.events import (
    AnyRequest,
    EngineEvent,
    Failed,
    Finished,
    Prefilling,
    Started,
    Token,
)

RECENT_JOBS = 64  # ended jobs kept for the status route


class Engine(Protocol):
    """What the server needs of `service.EngineThread` (thread-safe calls)."""

    @property
    def state(self) -> str: ...

    @property
    def facts(self) -> tuple[dict[str, Any], int, Any] | None: ...

    def submit(self, request: AnyRequest, listener: Callable[[EngineEvent], None] | None = None) -> int: ...

    def cancel(self, request_id: int) -> bool: ...


@dataclass(eq=False)
class ApiJob:
    """One API request's record (mutated on the loop thread only, but for `generated`: the
    engine thread counts its tokens as it sends them, so /status is not a token batch late)."""

    number: int
    response_id: str
    endpoint: str
    stream: bool
    prompt_tokens: int
    submitted_at: float = field(default_factory=time.monotonic)
    request_id: int | None = None
    state: str = "queued"  # queued | prefill | decode | ended | failed
    prefill_done: int = 0
    generated: int = 0
    reused_tokens: int | None = None
    first_token_at: float | None = None
    stop_reason: str | None = None
    cancel_reason: str | None = None  # client_disconnected | write_error | client_stalled | ...
    cancelled_at: float | None = None
    ended_at: float | None = None
    stop_latency: float | None = None  # engine-measured: cancel -> the job ended
    started: bool = False
    error: str | None = None
    finished: Finished | None = None
    events: asyncio.Queue[EngineEvent] = field(default_factory=asyncio.Queue)

    @property
    def over(self) -> bool:
        return self.state in ("ended", "failed")

    def describe(self) -> dict[str, Any]:
        """The status route's row."""
        end = self.ended_at if self.ended_at is not None else time.monotonic()
        fin = self.finished
        decode_s = fin.result.decode_seconds if fin is not None else None
        return {
            "id": self.response_id, "job": self.number, "request_id": self.request_id,
            "endpoint": self.endpoint, "stream": self.stream, "state": self.state,
            "started": self.started, "prompt_tokens": self.prompt_tokens,
            "prefill_done": self.prefill_done, "reused_tokens": self.reused_tokens,
            "new_prompt_tokens": (None if self.reused_tokens is None
                                  else self.prompt_tokens - self.reused_tokens),
            "generated_tokens": self.generated, "stop_reason": self.stop_reason,
            "cancel_reason": self.cancel_reason,
            "disconnect_to_ended_ms": None if self.stop_latency is None else round(self.stop_latency * 1000, 2),
            "ttft_ms": (None if self.first_token_at is None
                        else round((self.first_token_at - self.submitted_at) * 1000, 1)),
            "tokens_per_sec": (round(fin.result.decode_tokens_per_sec, 2)
                               if fin is not None and decode_s else None),
            "prefill_ms": None if fin is None else round(fin.result.prefill_seconds * 1000, 1),
            "decode_ms": None if fin is None else round(fin.result.decode_seconds * 1000, 1),
            "age_s": round(end - self.submitted_at, 3), "error": self.error,
        }


class JobBoard:
    """Submits jobs, routes their events to the loop, and keeps the records."""

    def __init__(self, engine: Engine, loop: asyncio.AbstractEventLoop) -> None:
        self.engine = engine
        self._loop = loop
        self._numbers = itertools.count(1)
        self.live: dict[int, ApiJob] = {}
        self.recent: collections.deque[ApiJob] = collections.deque(maxlen=RECENT_JOBS)
        self._observers: list[Callable[[ApiJob], None]] = []
        self._handover: Handover[tuple[ApiJob, EngineEvent]] = Handover(
            self._wake, lambda item: self._on_event(*item), lambda item: isinstance(item[1], Token))
        self._timer: asyncio.TimerHandle | None = None

    def _wake(self, later: bool) -> None:
        """Engine thread: have the loop drain the hand-over, now or after a token batch."""
        try:
            self._loop.call_soon_threadsafe(self._arm if later else self._drain)
        except RuntimeError:  # the loop is closed: nobody is left to tell
            pass

    def _arm(self) -> None:
        if self._timer is not None:
            return
        wait = self._handover.delay()
        if wait <= 0:
            self._drain()
        else:
            self._timer = self._loop.call_later(wait, self._drain)

    def _drain(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._handover.drain()

    def subscribe(self, observer: Callable[[ApiJob], None]) -> None:
        """`observer(job)` on the loop thread whenever a job changes state or ends."""
        self._observers.append(observer)

    def _notify(self, job: ApiJob) -> None:
        for observer in list(self._observers):
            observer(job)

    @property
    def queued(self) -> int:
        return sum(1 for j in self.live.values() if j.state == "queued")

    @property
    def active(self) -> int:
        return sum(1 for j in self.live.values() if j.state in ("prefill", "decode"))

    def submit(self, request: AnyRequest, *, response_id: str, endpoint: str, stream: bool) -> ApiJob:
        """Queue `request` on the engine thread; its events arrive on `job.events`."""
        job = ApiJob(next(self._numbers), response_id, endpoint, stream, len(getattr(request, "prompt_ids", ())))
        self.live[job.number] = job

        def listener(event: EngineEvent) -> None:  # engine thread: count, hand over, nothing else
            if isinstance(event, Token):  # counted as produced, not as the loop takes the batch
                job.generated += 1
            self._handover.put((job, event))

        job.request_id = self.engine.submit(request, listener)
        self._notify(job)
        return job

    def cancel(self, job: ApiJob, reason: str) -> None:
        """Stop the job (first reason wins); a queued one never starts."""
        if job.over or job.cancel_reason is not None:
            return
        job.cancel_reason = reason
        job.cancelled_at = time.monotonic()
        if job.request_id is not None:
            self.engine.cancel(job.request_id)
        self._notify(job)

    def _on_event(self, job: ApiJob, event: EngineEvent) -> None:
        changed = False
        if isinstance(event, Started):
            job.state, job.started, changed = "prefill", True, True
        elif isinstance(event, Prefilling):
            job.prefill_done = event.done
        elif isinstance(event, Token):
            if job.state != "decode":
                job.state, changed = "decode", True
                job.first_token_at = event.at if event.at is not None else time.monotonic()
        elif isinstance(event, Finished):
            job.finished = event
            job.state, job.stop_reason = "ended", event.result.reason.value
            job.reused_tokens = event.stats.reused_prefix_tokens
            job.stop_latency = event.stats.stop_latency
            job.prompt_tokens = event.stats.prompt_tokens or job.prompt_tokens
            changed = True
        elif isinstance(event, Failed):
            job.state, job.error, changed = "failed", event.message, True
        if job.over:
            job.ended_at = time.monotonic()
            self.live.pop(job.number, None)
            self.recent.append(job)
        job.events.put_nowait(event)
        if changed:
            self._notify(job)

    def describe(self) -> dict[str, Any]:
        """The status route's document (minus engine facts)."""
        jobs = sorted(self.live.values(), key=lambda j: j.number)
        return {
            "active": [j.describe() for j in jobs if j.state in ("prefill", "decode")],
            "queued": [j.describe() for j in jobs if j.state == "queued"],
            "recent": [j.describe() for j in reversed(self.recent)],
        }
