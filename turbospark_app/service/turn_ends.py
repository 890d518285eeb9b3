"""How a turn leaves the engine thread: finished, failed, ended before it started (the engine
thread's part that removes it from the scheduler and sends its last event)."""

from __future__ import annotations

import collections
import logging
import threading
from typing import Any, Callable

from ..engine.errors import EngineError
from ..engine.progress import RawDecodeResult, StopReason
from .events import EngineEvent, Failed, Finished, error_kind
from .jobs import Job, turn_stats

log = logging.getLogger("turbospark_app.service.engine_thread")


class TurnEnds:
    """`EngineThread`'s turn endings (a base class: the attributes are the engine thread's)."""

    _cond: threading.Condition
    _jobs: dict[int, Job]
    _active: list[Job]
    _pending: collections.deque[Job]
    _clock: Callable[[], float]
    _load_error: tuple[str, str] | None

    def _emit(self, event: EngineEvent) -> None:
        raise NotImplementedError

    def _refresh_snapshot(self, force: bool = False) -> None:
        raise NotImplementedError

    def _remove(self, job: Job) -> None:
        with self._cond:
            self._jobs.pop(job.request_id, None)
            if job in self._active:
                self._active.remove(job)
            if job in self._pending:
                self._pending.remove(job)

    def _finish(self, job: Job, result: RawDecodeResult) -> None:
        self._remove(job)
        now = self._clock()
        stats = turn_stats(job, result, now)
        assert job.turn is not None
        self._refresh_snapshot(force=True)
        self._emit(Finished(job.request_id, job.conversation_id, result,
                            tuple(job.turn.prompt_ids), tuple(job.generated_ids),
                            "".join(job.text_parts), stats))

    def _finish_unstarted(self, job: Job) -> None:
        self._remove(job)
        now = self._clock()
        result = RawDecodeResult(prompt_tokens=0, new_tokens=0, prefill_seconds=0.0,
                                 decode_seconds=0.0, reason=StopReason.CANCELLED, kv_position=0)
        stats = turn_stats(job, result, now)
        self._emit(Finished(job.request_id, job.conversation_id, result, (), (), "", stats))

    def _fail(self, job: Job, exc: BaseException) -> None:
        if not isinstance(exc, EngineError):
            log.exception("turn %s failed", job.request_id, exc_info=exc)
        self._close_stream(job)
        self._remove(job)
        self._refresh_snapshot(force=True)
        self._emit(Failed(job.request_id, job.conversation_id, str(exc) or type(exc).__name__,
                          error_kind(exc), type(exc).__name__))

    def _fail_unavailable(self, job: Job) -> None:
        self._remove(job)
        message, error_type = self._load_error or ("the model is not loaded", "RuntimeError")
        self._emit(Failed(job.request_id, job.conversation_id,
                          f"the model could not be loaded: {message}",
                          "backend_unavailable", error_type))

    def _close_stream(self, job: Job) -> None:
        if job.stream is not None:
            try:
                job.stream.close()  # runs the generator's finally: releases its KV slot
            except Exception:
                log.exception("closing turn %s failed", job.request_id)

