"""The engine service: one thread owns the chat backend; requests are stepped fairly.
May import: engine, readings, chat (no Qt).

Pure Python (no Qt): the UI adapts it with `turbospark_app.ui.services.bridge`.
"""

from .engine_thread import EngineThread
from .events import (
    BackendFailed,
    BackendLoading,
    BackendProgress,
    BackendReady,
    EngineEvent,
    Failed,
    Finished,
    Prefilling,
    Queued,
    Retrying,
    Started,
    Tail,
    Token,
    TurnRequest,
    TurnStats,
)

__all__ = [
    "BackendFailed",
    "BackendLoading",
    "BackendProgress",
    "BackendReady",
    "EngineEvent",
    "EngineThread",
    "Failed",
    "Finished",
    "Prefilling",
    "Queued",
    "Retrying",
    "Started",
    "Tail",
    "Token",
    "TurnRequest",
    "TurnStats",
]
