"""The engine thread: ONE thread owns the chat backend and steps every active turn fairly.

Why one thread: the backend (model, KV slots, tokenizer) is not thread-safe, and a single
owner makes "who touches the model" trivially true. Several turns are still served at once:
each turn is a step generator (`ChatBackend.stream_turn`), and the thread advances the active
ones round-robin, ONE `next()` at a time (one prefill chunk or one token). The decode steps of
the turns decoding at once run as ONE batched forward pass per round (`batching.py`). A turn
that yields `PaceWait(until)` is parked until `until` while the others run; when nothing is
runnable the thread sleeps on a Condition that `submit`, `cancel` and `shutdown` notify.

Stop latency: `cancel()` sets the flag the turn's cancel predicate reads, stamps the time and
wakes the thread (a parked turn is made runnable at once), so the turn ends within one forward
step. The final `Finished` event carries the measured cancel-to-ended latency.

Events are delivered by calling `on_event(event)` ON THE ENGINE THREAD, never under the
scheduler lock (a callback may call `submit`/`cancel`). GUI code must marshal them to its own
thread (see `turbospark_app.ui.services.bridge`).

`system_info()` never waits behind a forward step: it merges the backend's document as last
read between steps (`snapshot.py`, a backend's `engine_info`: no psutil on this thread) with
live readings taken on the caller's thread: memory, CPU, and the thermal and memory levels of
the app's monitors (`monitors=`) or else the backend's own (`monitors`).
"""

from __future__ import annotations

import collections
import itertools
import logging
import threading
import time
from typing import Any, Callable, Sequence

import psutil

from ..chat.api import ChatBackend
from ..chat.formats.reader import prompt_tail, special_text
from ..engine import load_progress
from ..engine.errors import EngineError
from ..engine.progress import (
    DecodeStep,
    PaceWait,
    PrefillProgress,
    PrefillStep,
    TailProgress,
    TokenProgress,
)
from .events import (
    AnyRequest,
    BackendFailed,
    BackendLoading,
    BackendProgress,
    BackendReady,
    EngineEvent,
    Failed,
    Finished,
    Prefilling,
    PromptRequest,
    Queued,
    Started,
    Tail,
    Token,
)
from .batching import BatchFigures, next_in_round, run_round, stalls_running_streams
from .jobs import Job, add_live_readings, api_session
from .snapshot import InfoSnapshot
from .turn_ends import TurnEnds

log = logging.getLogger(__name__)

BackendFactory = Callable[[], ChatBackend]
Clock = Callable[[], float]
Monitors = tuple[Any, Any]  # (readings.ThermalMonitor, readings.MemoryMonitor): read() is thread-safe
Listener = Callable[[EngineEvent], None]


# ---------------------------------------------------------------------------------------------
# The scheduler
# ---------------------------------------------------------------------------------------------


class EngineThread(TurnEnds):
    """Owns the backend on one thread; see the module docstring for the contract."""

    def __init__(
        self,
        backend_factory: BackendFactory,
        on_event: Callable[[EngineEvent], None],
        *,
        max_active: int = 4,
        clock: Clock = time.monotonic,
        monitors: Monitors | None = None,
        name: str = "turbospark-engine",
    ) -> None:
        """`max_active` turns are stepped at once (use the backend's session slots: more turns
        than KV slots would only queue inside the backend); the rest wait in FIFO order.
        `clock` must be the clock PaceWait deadlines are on (RateConfig.clock). `monitors`:
        the (thermal, memory) monitors the backend paces on, read live by `system_info`."""
        if max_active < 1:
            raise ValueError(f"max_active must be >= 1 (got {max_active})")
        self._factory = backend_factory
        self._next_factory: BackendFactory | None = None  # a model switch waiting to happen
        self._on_event = on_event
        self._max_active = max_active
        self._clock = clock
        self._monitors = monitors
        self._backend_monitors: Monitors | None = None  # the loaded backend's own (`monitors`)
        self._cond = threading.Condition()
        self._pending: collections.deque[Job] = collections.deque()
        self._active: list[Job] = []
        self._jobs: dict[int, Job] = {}
        self._drops: list[str] = []  # conversations whose KV slot is to be freed
        self._ids = itertools.count(1)
        self._shutdown = False
        self._state = "idle"  # idle -> loading -> ready | failed
        self._load_error: tuple[str, str] | None = None
        self._last_progress: tuple[str, int] | None = None  # the load step last sent (a percent)
        self._backend: ChatBackend | None = None
        self._facts: tuple[dict[str, Any], int, Any] | None = None  # set when ready
        self._listeners: dict[int, Listener] = {}
        self._round = 0  # batched decode rounds (batching.py)
        self._stepping: Job | None = None  # the job whose step runs now (this thread)
        self._batching = False  # the backend runs DecodeSteps batched (set at load)
        self.batch = BatchFigures()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._snapshot = InfoSnapshot(clock)
        self._process = psutil.Process()
        self._process.cpu_percent(None)  # prime: the first call always returns 0.0
        self.engine_thread_ident: int | None = None  # for affinity checks in tests

    # -- caller-side API (any thread) ------------------------------------------------------

    def start(self) -> None:
        """Start the thread; it loads the backend first (BackendLoading, then Ready/Failed)."""
        self._thread.start()

    @property
    def state(self) -> str:
        """"idle", "loading", "ready" or "failed"."""
        return self._state

    @property
    def facts(self) -> tuple[dict[str, Any], int, Any] | None:
        """(model_info, max_context, prompt builder) of the loaded backend; None unless ready.
        The builder (`backend.prompts`, None when the backend has none) is thread-safe."""
        return self._facts if self._state == "ready" else None

    def submit(self, request: AnyRequest, listener: Listener | None = None) -> int:
        """Queue a turn; returns its request id. Events for it follow via `on_event` and, when
        given, `listener(event)` (also called on the engine thread, before `on_event`)."""
        with self._cond:
            if self._shutdown:
                raise RuntimeError("the engine thread is shut down")
            job = Job(next(self._ids), request, self._clock())
            if listener is not None:
                self._listeners[job.request_id] = listener
            self._jobs[job.request_id] = job
            self._pending.append(job)
            self._cond.notify_all()
        return job.request_id

    def cancel(self, request_id: int) -> bool:
        """Ask the turn to stop; it ends within one forward step (or at once when queued or
        parked). Returns False when the request is unknown or already over."""
        with self._cond:
            job = self._jobs.get(request_id)
            if job is None:
                return False
            if not job.cancelled:
                job.cancel_at = self._clock()
                job.cancelled = True
            if job.stream is not None:
                job.ready_at = float("-inf")  # wake a parked (paced) turn now
            self._cond.notify_all()
            return True

    def drop_session(self, conversation_id: str) -> None:
        """Conversation deleted: cancel its turns, then free its KV slot (on the engine thread)."""
        with self._cond:
            for job in self._jobs.values():
                if job.conversation_id == conversation_id and not job.cancelled:
                    job.cancel_at = self._clock()
                    job.cancelled = True
                    if job.stream is not None:
                        job.ready_at = float("-inf")
            self._drops.append(conversation_id)
            self._cond.notify_all()

    def replace_backend(self, backend_factory: BackendFactory, *, max_active: int | None = None) -> None:
        """Switch models: every turn (running or queued) is stopped, then the old backend is
        closed and `backend_factory` is loaded on the engine thread (BackendLoading, then
        BackendReady or BackendFailed). Turns submitted meanwhile wait for the new model.
        `max_active`: a new number of turns stepped at once (the new backend's session slots)."""
        if max_active is not None and max_active < 1:
            raise ValueError(f"max_active must be >= 1 (got {max_active})")
        with self._cond:
            if self._shutdown:
                raise RuntimeError("the engine thread is shut down")
            self._next_factory = backend_factory
            if max_active is not None:
                # Read under the lock by _next_action; in force from the first turn the new
                # backend serves (none is admitted while the switch is pending).
                self._max_active = max_active
            self._cancel_all_locked()

    @property
    def backend_factory(self) -> BackendFactory:
        """What the engine loads (the pending switch's factory while one waits)."""
        with self._cond:
            return self._next_factory or self._factory

    def _cancel_all_locked(self) -> None:
        """Cancel every turn and wake the parked ones (caller holds the lock)."""
        now = self._clock()
        for job in self._jobs.values():
            if not job.cancelled:
                job.cancel_at = now
                job.cancelled = True
            job.ready_at = float("-inf")
        self._cond.notify_all()

    def shutdown(self, timeout: float | None = 5.0) -> bool:
        """Cancel every turn, let each end (Finished events still arrive: partial replies can be
        saved), then stop the thread. Returns True when the thread has ended."""
        with self._cond:
            self._shutdown = True
            self._next_factory = None  # no model switch on the way out
            self._cancel_all_locked()
        if self._thread.is_alive():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def is_alive(self) -> bool:
        """True while the engine thread runs."""
        return self._thread.is_alive()

    def busy_turns(self) -> int:
        """Turns running or waiting (any source: panes, the local API); cheap, any thread."""
        with self._cond:
            return len(self._active) + len(self._pending)

    def system_info(self) -> dict[str, Any]:
        """The backend's last `system_info` document (refreshed between steps) merged with live
        readings taken here on the caller's thread. Never blocks on a step."""
        info, age = self._snapshot.read()
        with self._cond:
            active = len(self._active)
            queued = len(self._pending)
        add_live_readings(info, self._monitors or self._backend_monitors, self._process)
        info["engine"] = {
            "state": self._state,
            "active_turns": active,
            "queued_turns": queued,
            **self.batch.describe(),
            "snapshot_age_seconds": age,
        }
        if self._load_error is not None:
            info["engine"]["error"] = self._load_error[0]
        return info

    # -- engine thread ---------------------------------------------------------------------

    def _emit(self, event: EngineEvent) -> None:
        rid = getattr(event, "request_id", None)
        if rid is not None and rid in self._listeners:
            listener = (self._listeners.pop(rid) if isinstance(event, (Finished, Failed))
                        else self._listeners[rid])
            try:
                listener(event)
            except Exception:
                log.exception("request listener failed on %r", type(event).__name__)
        try:
            self._on_event(event)
        except Exception:  # a broken listener must not take the model thread down
            log.exception("engine event listener failed on %r", type(event).__name__)

    def _emit_all(self, events: Sequence[EngineEvent]) -> None:
        for event in events:
            self._emit(event)

    def _run(self) -> None:
        self.engine_thread_ident = threading.get_ident()
        self._load_backend()
        while True:
            action = self._next_action()
            if action is None:
                break
            action()
        self._close_backend()

    def _switch_backend(self, factory: BackendFactory) -> None:
        self._close_backend()
        self._factory = factory
        self._load_backend()

    def _close_backend(self) -> None:
        backend, self._backend = self._backend, None
        self._facts = None
        self._backend_monitors = None
        self._snapshot.clear()
        close = getattr(backend, "close", None)
        if callable(close):
            try:
                close()
            except Exception:
                log.exception("backend close failed")

    def _report_progress(self, phase: str, fraction: float) -> None:
        """A load's progress as events, one per whole percent (the UI shows a bar)."""
        step = (phase, round(fraction * 100))
        if step != self._last_progress:
            self._last_progress = step
            self._emit(BackendProgress(phase, fraction))

    def _load_backend(self) -> None:
        self._state = "loading"
        self._load_error = None
        self._emit(BackendLoading())
        t0 = time.monotonic()
        try:
            with load_progress.reporting(self._report_progress):
                backend = self._factory()
            model_info = dict(backend.model_info())
            max_context = int(backend.max_context)
        except Exception as e:  # reported, never raised: the app stays up without a model
            if isinstance(e, (EngineError, OSError)):  # a bad or missing file: the event says it all
                log.info("backend load failed: %s", e)
            else:  # unexpected: keep the traceback for the report
                log.exception("backend load failed")
            self._load_error = (str(e) or type(e).__name__, type(e).__name__)
            self._state = "failed"
            self._emit(BackendFailed(self._load_error[0], self._load_error[1]))
            return
        self._backend = backend
        self._batching = callable(getattr(backend, "decode_batch", None))  # else no DecodeStep
        if hasattr(backend, "crowded"):  # speculation pauses while other turns could batch
            backend.crowded = lambda: len(self._active) > 1  # read on this thread, which owns it
        if hasattr(backend, "streams_running"):  # a prompt's chunks are cut for the streams it would stall
            backend.streams_running = lambda: stalls_running_streams(self._stepping, self._active)
        self._facts = (model_info, max_context, getattr(backend, "prompts", None))
        self._backend_monitors = getattr(backend, "monitors", None)
        self._refresh_snapshot(force=True)
        self._state = "ready"
        self._emit(BackendReady(model_info, max_context, time.monotonic() - t0))

    def _next_action(self) -> Callable[[], None] | None:
        """Block until there is something to do; return it (run outside the lock)."""
        with self._cond:
            while True:
                # Queued is announced here, not in submit(): every event comes from this thread.
                announce = [
                    Queued(j.request_id, j.conversation_id, position)
                    for position, j in enumerate(self._pending)
                    if not j.announced
                ]
                if announce:
                    for j in self._pending:
                        j.announced = True
                    return lambda: self._emit_all(announce)
                for i, job in enumerate(self._pending):
                    if job.cancelled:  # never started: end it without touching the model
                        del self._pending[i]
                        return lambda job=job: self._finish_unstarted(job)
                if self._drops:
                    busy = {j.conversation_id for j in self._jobs.values()}
                    ready = [c for c in self._drops if c not in busy]
                    if ready:
                        self._drops = [c for c in self._drops if c in busy]
                        return lambda: self._drop(ready)
                if self._next_factory is not None and not self._active:
                    factory, self._next_factory = self._next_factory, None
                    return lambda: self._switch_backend(factory)
                if self._state == "failed" and self._pending:
                    job = self._pending.popleft()
                    return lambda job=job: self._fail_unavailable(job)
                if (self._state == "ready" and self._next_factory is None and self._pending
                        and len(self._active) < self._max_active):
                    job = self._pending.popleft()
                    self._active.append(job)
                    return lambda job=job: self._start(job)
                now = self._clock()
                job, waiting, self._round = next_in_round(self._active, self._round, now)
                if job is not None:
                    # Round-robin: the served job goes to the back of the line.
                    self._active.remove(job)
                    self._active.append(job)
                    return lambda job=job: self._step(job)
                if waiting:
                    return lambda: self._run_round(waiting)
                if self._shutdown and not self._active and not self._pending:
                    return None
                timeout = None
                if self._active:
                    timeout = max(0.0, min(j.ready_at for j in self._active) - now)
                self._cond.wait(timeout)

    def _start(self, job: Job) -> None:
        assert self._backend is not None
        job.started_at = self._clock()
        job.ready_at = 0.0
        try:
            request = job.request
            if isinstance(request, PromptRequest):
                job.turn = self._prepare_prompt(job, request)
            else:
                raw = {"raw": True} if request.raw else {}  # only when set: not every backend runs raw
                job.turn = self._backend.prepare_turn(job.conversation_id, list(request.messages), request.settings,
                                                      continue_final=request.continue_final, **raw)
            job.stream = self._backend.stream_turn(job.turn, lambda: job.cancelled)
        except Exception as e:
            self._fail(job, e)
            return
        self._emit(Started(job.request_id, job.conversation_id, len(job.turn.prompt_ids),
                           prompt_tail(getattr(self._backend, "tokenizer", None), job.turn.prompt_ids)))

    def _prepare_prompt(self, job: Job, request: PromptRequest) -> Any:
        """A PromptRequest's turn: the model must be the one its ids were built with; its
        KV session is the pinned one, else chosen by longest common prefix."""
        backend: Any = self._backend
        if request.builder is None or request.builder is not getattr(backend, "prompts", None):
            raise EngineError("the model was switched while the request waited; send it again")
        job.session_id = request.conversation_id or api_session(backend, job, request, self._active)
        return backend.prepare_prompt(job.session_id, request.prompt_ids, request.settings)

    def _run_round(self, jobs: list[Job]) -> None:
        """The round's decode steps as one batched pass (batching.py); the next round begins."""
        run_round(self._backend, jobs, self.batch)
        with self._cond:
            self._round += 1

    def _step(self, job: Job) -> None:
        """Advance `job` by one go: to its next decode step (parked for the round's batched pass,
        or run at once when no other turn could join it), a prompt chunk or a wait."""
        assert job.stream is not None
        reply, job.reply = job.reply, None
        while True:
            self._stepping = job
            try:
                event = job.stream.send(reply)
            except StopIteration as stop:
                self._finish(job, stop.value)
                return
            except Exception as e:  # isolate the failure to this turn; the thread goes on
                self._fail(job, e)
                return
            finally:
                self._stepping = None
            reply = None
            if not self._handle(job, event):
                break
        self._refresh_snapshot()

    def _handle(self, job: Job, event: Any) -> bool:
        """Act on one event of `job`'s step loop; True = step it again now. A token's events are
        followed at once by the loop's next decode step when steps batch (what comes between
        is the cancel poll and the pacing, no forward pass), and a decode step no other turn
        could join runs at once: a lone stream costs one scheduler pass a token, not three."""
        rid, cid = job.request_id, job.conversation_id
        if isinstance(event, (DecodeStep, PrefillStep)):
            with self._cond:
                if self._alone_locked(job):
                    self.batch.last_size = 1
                    return True  # (None back: the loop runs its own step)
                job.pending = event
        elif isinstance(event, PaceWait):
            with self._cond:
                if not job.cancelled:
                    job.ready_at = event.until
        elif isinstance(event, TokenProgress):
            if not self._batching:  # its forward pass ran: the turn's go in this round is over
                job.round_done = self._round
            if job.first_token_at is None:
                job.first_token_at = self._clock()
            job.generated_ids.append(event.id)
            job.text_parts.append(event.delta)
            special = "" if event.delta else special_text(getattr(self._backend, "tokenizer", None), event.id)
            self._emit(Token(rid, cid, event.index, event.id, event.delta,
                             getattr(event, "logprob", None), getattr(event, "top", ()),
                             time.monotonic(), special or ""))
            return self._batching
        elif isinstance(event, PrefillProgress):
            self._emit(Prefilling(rid, cid, event.done, event.total, event.reused, event.seconds))
            if job.chunk_ran:  # the chunk went in the round's pass: offer the next to this one
                job.chunk_ran = False
                return True
            job.round_done = self._round
        elif isinstance(event, TailProgress):
            job.text_parts.append(event.text)
            self._emit(Tail(rid, cid, event.text))
        return False

    def _alone_locked(self, job: Job) -> bool:
        """No other turn could join `job`'s decode step this round (caller holds the lock):
        none active or waiting to start, nothing else for the thread to do first."""
        return (len(self._active) == 1 and self._active[0] is job and not self._pending
                and not self._drops and self._next_factory is None and not self._shutdown)

    def _drop(self, conversation_ids: Sequence[str]) -> None:
        if self._backend is None:
            return
        for cid in conversation_ids:
            try:
                self._backend.drop_session(cid)
            except Exception:
                log.exception("drop_session(%s) failed", cid)
        self._refresh_snapshot(force=True)

    def _refresh_snapshot(self, force: bool = False) -> None:
        self._snapshot.refresh(self._backend, force)
