"""The window's documents: one `DocumentsService` (collections indexed in the background,
retrieval off the GUI thread) behind queued Qt signals, shared by the Collections dialog, every
pane's Collections button and the QA panel.

The service's threads only emit signals (queued to the GUI thread, where this object lives);
nothing here touches a widget from them. The engine's events say when a local reply generates:
the index thread then yields (`documents.service.YieldGate`).
"""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from typing import Any, Callable, Sequence

from PySide6.QtCore import QObject, Qt, Signal

from ...documents.indexer import IndexProgress
from ...documents.service import DocumentsService
from ...documents.sources import CountTokens, Prepared
from ...documents.store import DocumentStore, default_index_path
from ...service import Failed, Finished, Prefilling, Queued, Started, Token

_HUB: "DocsHub | None" = None


def docs_hub() -> "DocsHub | None":
    """The window's hub (None before the window made one, or in a bare pane under test)."""
    return _HUB


def _default_embedder() -> Any:
    from ...documents.embedder import open_embedder

    return open_embedder(threads=2, download=True)


class DocsHub(QObject):
    """See the module docstring."""

    progress = Signal(str, object)  # collection, IndexProgress (a snapshot)
    finished = Signal(str, object, str)  # collection, IndexProgress or None (removed), error or ""
    collectionsChanged = Signal()
    searched = Signal(object)  # the last turn's Prepared (its ranked chunks: the QA panel)
    _done = Signal(object)  # (callback, future) of a retrieval, to the GUI thread
    _progress = Signal(str, object)
    _finished = Signal(str, object, object)

    def __init__(self, bridge: Any = None, store: DocumentStore | None = None,
                 open_embedder: Callable[[], Any] | None = None, *, yield_mode: str = "pause",
                 lower_priority: bool = True, parent: QObject | None = None) -> None:
        super().__init__(parent)
        global _HUB
        self.store = store if store is not None else DocumentStore(default_index_path())
        q = Qt.ConnectionType.QueuedConnection
        self._done.connect(self._deliver, q)
        self._progress.connect(self._on_progress, q)
        self._finished.connect(self._on_finished, q)
        self.service = DocumentsService(
            self.store, open_embedder or _default_embedder, yield_mode=yield_mode,
            lower_priority=lower_priority,
            on_progress=self._progress.emit,
            on_done=lambda name, p, err: self._finished.emit(name, p, err))
        self._generating: set[int] = set()
        engine = getattr(bridge, "engine", None)
        if hasattr(engine, "busy_turns"):  # the local API's turns count too
            self.service.gate.probe = engine.busy_turns
        self.last: Prepared | None = None
        self._closed = False
        if bridge is not None:
            bridge.engineEvent.connect(self._engine_event)
        _HUB = self

    # -- collections ------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """The window closed it: its store is closed too."""
        return self._closed

    def names(self) -> list[str]:
        """The collections in the index ([] once closed)."""
        return [] if self._closed else [c.name for c in self.store.collections()]

    def taken(self, name: str) -> bool:
        """True when `name` is a collection, or one waiting to be made."""
        return name in self.names() or self.service.busy(name)

    def add(self, name: str, sources: Sequence[Path]) -> None:
        self.service.index(name, list(sources))
        self.collectionsChanged.emit()

    def reindex(self, name: str | None = None) -> None:
        """Look at a collection's files again (None: every collection)."""
        if self._closed:
            return
        if name is None:
            self.service.index_all()
        else:
            self.service.index(name)

    def remove(self, name: str) -> None:
        self.service.remove(name)

    def _on_progress(self, name: str, progress: object) -> None:
        if not self._closed:
            self.progress.emit(name, progress)

    def _on_finished(self, name: str, progress: object, error: object) -> None:
        if self._closed:
            return
        self.finished.emit(name, progress, str(error or ""))
        self.collectionsChanged.emit()

    # -- turns -----------------------------------------------------------------------------------

    def prepare(self, question: str, names: Sequence[str], count_chat: CountTokens, budget: int | None,
                callback: Callable[[Prepared | BaseException], None]) -> None:
        """Retrieve for `question` on the query thread; `callback` runs on the GUI thread with the
        Prepared turn or the exception."""
        future = self.service.prepare(question, names, count_chat, budget)
        future.add_done_callback(lambda f: self._done.emit((callback, f)))

    def _deliver(self, item: tuple[Callable[[Any], None], "Future[Prepared]"]) -> None:
        callback, future = item
        try:
            result: Any = future.result()
        except Exception as exc:  # noqa: BLE001 - handed to the pane, which says it
            result = exc
        if isinstance(result, Prepared):
            self.last = result
            self.searched.emit(result)
        callback(result)

    def _engine_event(self, event: Any) -> None:
        rid = getattr(event, "request_id", None)
        if rid is None:
            return
        before = len(self._generating)
        if isinstance(event, (Queued, Started, Prefilling, Token)):
            self._generating.add(rid)
        elif isinstance(event, (Finished, Failed)):
            self._generating.discard(rid)
        if len(self._generating) != before:
            self.service.set_generating(len(self._generating))

    def close(self) -> None:
        global _HUB
        if self._closed:
            return
        self._closed = True
        self.service.close()
        self.store.close()
        if _HUB is self:
            _HUB = None


def progress_text(p: IndexProgress | None, busy: bool) -> str:
    """`12/40 files · 310 chunks · 0:42 left` / `40 files · 1,204 chunks · 3 errors`."""
    if p is None:
        return "waiting" if busy else ""
    parts = [f"{p.files_done}/{p.files_total} files" if busy else f"{p.files_total} files",
             f"{p.chunks:,} new chunks" if busy else ""]
    if busy and p.seconds_left is not None:
        left = int(p.seconds_left)
        parts.append(f"{left // 60}:{left % 60:02d} left")
    if p.errors:
        parts.append(f"{len(p.errors)} error{'s' if len(p.errors) != 1 else ''}")
    return " · ".join(x for x in parts if x)
