"""The Qt adapter over the engine thread: engine events become GUI-thread calls.

The EngineThread calls `on_event` on ITS thread. Here that callback puts the event in an inbox
and emits a wake-up signal, connected with an explicit QueuedConnection to the bridge in the GUI
thread, which then takes the inbox's events in order and `_dispatch`es each there. The worker
never touches a widget: the append and the emit are all the engine thread does here.

Tokens are delivered in batches (`service.handover`: at most one GUI wake-up per 25 ms while a
reply streams; every other event, Finished and Failed included, at once, after the tokens
before it).

`_dispatch` hands each event to the listener registered for its request (a pane) and then
re-emits it on `engineEvent` (the status bar). Backend load events update `backend_state`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from PySide6.QtCore import QCoreApplication, QEvent, QObject, Qt, QTimer, Signal, Slot

from ...service import (
    BackendFailed,
    BackendLoading,
    BackendReady,
    EngineEvent,
    EngineThread,
    Failed,
    Finished,
    TurnRequest,
)
from ...service.engine_thread import BackendFactory, Monitors
from ...service.handover import Handover

Listener = Callable[[Any], None]


class EngineBridge(QObject):
    """Owns the EngineThread; see the module docstring. Create it in the GUI thread."""

    engineEvent = Signal(object)  # every engine event, on the GUI thread
    backendStateChanged = Signal(str)  # "loading" | "ready" | "failed"
    _wake = Signal()  # engine thread: a batch of tokens began (queued to _arm: drain within 25 ms)
    _wake_now = Signal()  # engine thread: another event (queued to _drain)

    def __init__(
        self,
        backend_factory: BackendFactory,
        *,
        max_active: int = 4,
        monitors: Monitors | None = None,
        power: Any = None,
        parent: QObject | None = None,
    ) -> None:
        """`monitors`: the (thermal, memory) monitors the backend paces on, so `system_info`
        reads the levels live (see EngineThread). `power`: a PowerControls over those same
        monitors, for `force_thermal` / `force_memory` (its monitors are used when `monitors`
        is not given)."""
        super().__init__(parent)
        if monitors is None and power is not None:
            monitors = (power.thermal, power.memory)
        self.power = power
        self._handover: Handover[EngineEvent] = Handover(
            lambda later: (self._wake if later else self._wake_now).emit(), self._dispatch)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self._drain)
        self._wake.connect(self._arm, Qt.ConnectionType.QueuedConnection)
        self._wake_now.connect(self._drain, Qt.ConnectionType.QueuedConnection)
        self._engine = EngineThread(
            backend_factory, self._handover.put, max_active=max_active, monitors=monitors
        )
        self._listeners: dict[int, Listener] = {}
        self._requests: dict[int, TurnRequest] = {}
        self._shut_down = False
        # The window's speculation mode ("lookup" | "off"), stamped on every pane's turn that
        # leaves it unset; None: the backend's own (ui.prefs.speculation).
        self.speculation: str | None = None
        # The window's longest stream gap in ms (ui.prefs.stream_gap), stamped likewise.
        self.max_stream_gap_ms: float | None = None
        self.backend_state = "idle"
        self.backend_error: str | None = None
        self.model_info: dict[str, Any] = {}
        self.max_context = 0

    @property
    def engine(self) -> EngineThread:
        """The underlying engine thread (tests inspect it)."""
        return self._engine

    def start(self) -> None:
        """Start the engine thread (it loads the model off the GUI thread)."""
        self._engine.start()

    def submit(self, request: TurnRequest, listener: Listener) -> int:
        """Queue a turn; `listener(event)` is called on the GUI thread for each of its events,
        the last one being Finished or Failed."""
        if self.speculation is not None and request.settings.speculation is None:
            request = dataclasses.replace(request, settings=dataclasses.replace(
                request.settings, speculation=self.speculation))
        if self.max_stream_gap_ms is not None and request.settings.max_stream_gap_ms is None:
            request = dataclasses.replace(request, settings=dataclasses.replace(
                request.settings, max_stream_gap_ms=self.max_stream_gap_ms))
        rid = self._engine.submit(request)
        # Registered before control returns to the event loop, so no event can be missed.
        self._listeners[rid] = listener
        self._requests[rid] = request
        return rid

    def turn_request(self, request_id: int) -> TurnRequest | None:
        """The request of a turn still running (or whose last event is being dispatched)."""
        return self._requests.get(request_id)

    def cancel(self, request_id: int) -> bool:
        """Stop the turn (it ends within one forward step)."""
        return self._engine.cancel(request_id)

    def drop_session(self, conversation_id: str) -> None:
        """The conversation is gone: free its KV slot."""
        if not self._shut_down:
            self._engine.drop_session(conversation_id)

    def system_info(self) -> dict[str, Any]:
        """The system_info document; never blocks behind a forward step."""
        return self._engine.system_info()

    def switch_backend(self, backend_factory: BackendFactory, *, max_active: int | None = None) -> None:
        """Load another model: every turn is stopped (replies saved as stopped), then the
        engine thread loads `backend_factory` (backendStateChanged: loading, ready/failed).
        `max_active`: turns stepped at once from then on (the new backend's session slots)."""
        self._engine.replace_backend(backend_factory, max_active=max_active)
        # From now on no turn may carry the old model's token ids: a turn submitted before the
        # engine thread gets to BackendLoading would otherwise run on the NEW model with them
        # (panes pass ids only when their stats' model_id is model_identity(model_info)).
        self.model_info, self.max_context = {}, 0
        self._set_state("loading")

    def force_thermal(self, level: Any) -> None:
        """Force the thermal level (None = the real reading); needs `power`."""
        if self.power is None:
            raise RuntimeError("no PowerControls: the bridge was built without `power`")
        self.power.force_thermal(level)

    def force_memory(self, level: Any) -> None:
        """Force the memory pressure (None = the real reading); needs `power`."""
        if self.power is None:
            raise RuntimeError("no PowerControls: the bridge was built without `power`")
        self.power.force_memory(level)

    def shutdown(self, timeout: float = 5.0) -> None:
        """Cancel every turn, stop the thread, and deliver the events still in flight (so
        stopped replies get saved) before returning."""
        if self._shut_down:
            return
        self._shut_down = True
        self._engine.shutdown(timeout)
        QCoreApplication.sendPostedEvents(self, QEvent.Type.MetaCall)
        self._drain()  # tokens still waiting for the timer

    @Slot()
    def _arm(self) -> None:
        if self._timer.isActive():
            return
        wait = self._handover.delay()
        if wait <= 0:
            self._drain()
        else:
            self._timer.start(max(1, round(wait * 1000)))

    @Slot()
    def _drain(self) -> None:
        """Dispatch every event waiting, in the order the engine sent them."""
        self._timer.stop()
        self._handover.drain()

    def _dispatch(self, event: EngineEvent) -> None:
        if isinstance(event, BackendLoading):
            self.model_info, self.max_context, self.backend_error = {}, 0, None
            self._set_state("loading")
        elif isinstance(event, BackendReady):
            self.model_info = dict(event.model_info)
            self.max_context = event.max_context
            self._set_state("ready")
        elif isinstance(event, BackendFailed):
            self.backend_error = event.message
            self._set_state("failed")
        rid = getattr(event, "request_id", None)
        terminal = rid is not None and isinstance(event, (Finished, Failed))
        if rid is not None:
            listener = self._listeners.pop(rid, None) if terminal else self._listeners.get(rid)
            if listener is not None:
                listener(event)
        self.engineEvent.emit(event)
        if terminal:
            self._requests.pop(rid, None)  # after engineEvent: observers may still ask

    def _set_state(self, state: str) -> None:
        self.backend_state = state
        self.backendStateChanged.emit(state)
