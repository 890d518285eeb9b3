"""Where a pane's turns go: this computer's engine or a remote endpoint.

`RemoteHub` (one per window) owns the RemoteRunner (aiohttp on the qasync loop, GUI thread)
and the saved endpoints; its `engineEvent` re-emits every remote event for the status bar and
the QA panel, like EngineBridge's. `PaneEngine` (one per pane) looks like an EngineBridge to the
pane — submit / cancel / model_info / max_context / backend_state / backendStateChanged — and
routes each turn to the local bridge or to the hub by the conversation's model source, so the
pane has one code path for both.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from PySide6.QtCore import QObject, QTimer, Signal

from ...remote.client import Target, Timeouts
from ...remote.endpoints import Endpoint, EndpointBook
from ...remote.runner import RemoteRunner
from ...service import Failed, TurnRequest
from ..services.bridge import EngineBridge

Listener = Callable[[Any], None]
Source = tuple[str, str]  # (endpoint id, model id); None = this computer
# Servers (by /v1/models `owned_by`) that continue a final assistant message when asked:
# TurboSpark and vLLM read `continue_final_message`; llama-server prefills a last assistant
# message by default. Others (Ollama, LM Studio, unknown) have no documented way.
CONTINUING_SERVERS = {"turbospark": "TurboSpark", "vllm": "vLLM", "llamacpp": "llama-server"}


class RemoteHub(QObject):
    """See the module docstring. `book`: the saved endpoints (the per-user config folder)."""

    engineEvent = Signal(object)  # every remote turn's events, on the GUI thread
    endpointsChanged = Signal()

    def __init__(self, book: EndpointBook | None = None, *, timeouts: Timeouts = Timeouts(),
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.book = book if book is not None else EndpointBook()
        self.runner = RemoteRunner(timeouts=timeouts, observer=self.engineEvent.emit)
        self._requests: dict[int, TurnRequest] = {}
        self.engineEvent.connect(self._forget)

    def endpoints(self) -> list[Endpoint]:
        return self.book.endpoints()

    def save_endpoints(self, entries: list[tuple[Endpoint, str | None]]) -> list[Endpoint]:
        """Save the list (Settings › Endpoints) and tell every pane."""
        saved = self.book.save(entries)
        self.endpointsChanged.emit()
        return saved

    def submit(self, request: TurnRequest, listener: Listener, target: Target) -> int:
        rid = self.runner.submit(request, listener, target)
        self._requests[rid] = request
        return rid

    def cancel(self, request_id: int) -> bool:
        return self.runner.cancel(request_id)

    def turn_request(self, request_id: int) -> TurnRequest | None:
        """The request of a remote turn still running (the QA panel reads its cap)."""
        return self._requests.get(request_id)

    def shutdown(self) -> None:
        """Stop every remote turn now (their responses are closed; stopped replies are saved
        as the events arrive) and close the HTTP session when the loop next runs."""
        self.runner.stop_all_now()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop runs any more: the process is ending and takes the sockets with it
        loop.create_task(self.runner.aclose())

    def _forget(self, event: Any) -> None:
        if type(event).__name__ in ("Finished", "Failed"):
            self._requests.pop(getattr(event, "request_id", 0), None)


def remote_identity(source: Source) -> str:
    """The model identity of a remote source (never equal to a local model's)."""
    return f"remote:{source[0]}:{source[1]}"


class PaneEngine(QObject):
    """See the module docstring. The source is read when a turn is submitted: a turn already
    running keeps going where it was sent."""

    backendStateChanged = Signal(str)
    sourceChanged = Signal()

    def __init__(self, bridge: EngineBridge, hub: RemoteHub, source: Source | None = None,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self.hub = hub
        self.source = source
        self.server_kind: str | None = None  # /v1/models owned_by, once listed
        self._remote_ids: set[int] = set()
        bridge.backendStateChanged.connect(self._local_state_changed)

    # -- the source ------------------------------------------------------------------------

    @property
    def is_remote(self) -> bool:
        return self.source is not None

    def set_source(self, source: Source | None) -> None:
        if source != self.source:
            if source is None or self.source is None or source[0] != self.source[0]:
                self.server_kind = None
            self.source = source
            self.sourceChanged.emit()
            self.backendStateChanged.emit(self.backend_state)

    def set_server_kind(self, kind: str) -> None:
        """What the server's model list said it is (decides Continue)."""
        if kind != self.server_kind:
            self.server_kind = kind
            self.sourceChanged.emit()

    def continue_unsupported(self) -> str | None:
        """Why Continue cannot be offered on this source (None: it can)."""
        if self.source is None or (self.server_kind or "") in CONTINUING_SERVERS:
            return None
        if self.server_kind is None:
            return "Continue: the server's kind is not known yet (its model list was not read)."
        known = ", ".join(CONTINUING_SERVERS.values())
        return (f"Continue is not available on this server (“{self.server_kind or 'unknown'}”): the OpenAI "
                f"API has no standard way to continue a reply; {known} support it.")

    def endpoint(self) -> Endpoint | None:
        return None if self.source is None else self.hub.book.get(self.source[0])

    def label(self) -> str:
        """"This computer", or "<endpoint> · <model>"."""
        if self.source is None:
            return "This computer"
        endpoint = self.endpoint()
        return f"{endpoint.name if endpoint else 'missing endpoint'} · {self.source[1]}"

    # -- what the pane reads of a bridge ---------------------------------------------------

    @property
    def model_info(self) -> dict[str, Any]:
        if self.source is None:
            return self.bridge.model_info
        return {"name": remote_identity(self.source), "remote": self.label()}

    @property
    def max_context(self) -> int:
        return self.bridge.max_context if self.source is None else 0  # the server does not say

    @property
    def backend_state(self) -> str:
        return self.bridge.backend_state if self.source is None else "ready"

    def submit(self, request: TurnRequest, listener: Listener) -> int:
        if self.source is None:
            return self.bridge.submit(request, listener)
        endpoint_id, model = self.source
        target = self.hub.book.target(endpoint_id, model)
        if request.raw:  # remote turns go to /v1/chat/completions: roles and the server's template
            return self._refuse(request, listener, "raw_remote", "Raw completion runs on this "
                                "computer's model only. Turn “Raw” off, or pick “This computer” "
                                "as this pane's source.")
        if target is None:
            return self._refuse(request, listener, "endpoint_missing",
                                "The endpoint this conversation uses is no longer saved. Pick another "
                                "source in the pane, or add the endpoint again in Settings › Endpoints.")
        rid = self.hub.submit(request, listener, target)
        self._remote_ids.add(rid)
        return rid

    def _refuse(self, request: TurnRequest, listener: Listener, kind: str, message: str) -> int:
        """A turn that cannot be sent: it fails like any other (the text goes back to the input)."""
        rid = -(10**9) - len(self._remote_ids)
        # After submit returns (the pane records the id first), like any other failure.
        QTimer.singleShot(0, lambda: listener(Failed(rid, request.conversation_id, message,
                                                     kind, "RemoteError")))
        return rid

    def cancel(self, request_id: int) -> bool:
        if request_id in self._remote_ids:
            return self.hub.cancel(request_id)
        return self.bridge.cancel(request_id)

    def __getattr__(self, name: str) -> Any:
        if name == "bridge":  # not set yet (construction): no recursion
            raise AttributeError(name)
        # Everything else (system_info, drop_session, engine, ...) is the local bridge's.
        return getattr(self.bridge, name)

    def _local_state_changed(self, state: str) -> None:
        if self.source is None:
            self.backendStateChanged.emit(state)
