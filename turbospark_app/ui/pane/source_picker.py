"""The pane's model source picker: "This computer" or a saved endpoint, and the model to use
on it (the endpoint's default, the models its /v1/models lists, or any id typed in)."""

from __future__ import annotations

import asyncio
import sqlite3

import shiboken6
from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QWidget

from ...conversations.store import Store
from ...remote.client import model_entries
from ...remote.errors import RemoteError
from .remote_source import PaneEngine

LOCAL = "This computer"
MANAGE = "__manage__"


class SourcePicker(QWidget):
    """See the module docstring. Choosing saves the source in the store at once; a running turn
    keeps going where it was sent."""

    manageRequested = Signal()  # "Endpoints…" chosen: open Settings › Endpoints

    def __init__(self, engine: PaneEngine, store: Store, conversation_id: str,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("sourcePicker")
        self.engine = engine
        self._store = store
        self._cid = conversation_id
        self._filling = False
        self.models_error: str | None = None
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        self.source_combo = QComboBox(self)
        self.source_combo.setObjectName("sourceCombo")
        self.source_combo.setToolTip("Where this conversation's replies come from: this computer's "
                                     "model or a server (Settings › Endpoints)")
        self.model_combo = QComboBox(self)
        self.model_combo.setObjectName("modelCombo")
        self.model_combo.setEditable(True)
        self.model_combo.setMinimumContentsLength(18)
        self.model_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.model_combo.setToolTip("The model on that server")
        layout.addWidget(self.source_combo)
        layout.addWidget(self.model_combo)
        self.refresh()
        if engine.source is not None:
            self._fetch_models()  # the server's kind (Continue) and its model list
        self.source_combo.activated.connect(self._source_chosen)
        self.model_combo.activated.connect(lambda _i: self._model_chosen())
        self.model_combo.lineEdit().editingFinished.connect(self._model_chosen)
        engine.hub.endpointsChanged.connect(self.refresh)

    def refresh(self) -> None:
        """Re-read the saved endpoints (Settings changed them) and show the current source."""
        self._filling = True
        self.source_combo.clear()
        self.source_combo.addItem(LOCAL, None)
        for endpoint in self.engine.hub.endpoints():
            self.source_combo.addItem(endpoint.name, endpoint.id)
        self.source_combo.insertSeparator(self.source_combo.count())
        self.source_combo.addItem("Endpoints…", MANAGE)
        source = self.engine.source
        index = 0 if source is None else self.source_combo.findData(source[0])
        if index < 0:  # its endpoint was deleted: say so, keep the choice visible
            self.source_combo.addItem(f"{source[0][:8]}… (deleted endpoint)", source[0])
            index = self.source_combo.count() - 1
        self.source_combo.setCurrentIndex(index)
        self._fill_models([] if source is None else [source[1]])
        self.model_combo.setVisible(source is not None)
        self._filling = False

    def set_busy(self, busy: bool) -> None:
        """Disabled while the pane's turn runs (it keeps the source it was sent to)."""
        self.setEnabled(not busy)

    def choose(self, endpoint_id: str | None, model: str | None = None) -> bool:
        """Switch the source (what the combos do); False when the store refused it."""
        if endpoint_id is None:
            source = None
        else:
            endpoint = self.engine.hub.book.get(endpoint_id)
            current = self.engine.source
            fallback = current[1] if current and current[0] == endpoint_id else ""
            model = model or fallback or (endpoint.default_model if endpoint else "")
            source = (endpoint_id, model)
        try:
            self._store.set_model_source(self._cid, source)
        except sqlite3.Error:
            return False
        self.engine.set_source(source)
        self.refresh()
        if endpoint_id is not None:
            self._fetch_models()
        return True

    def _source_chosen(self, index: int) -> None:
        if self._filling:
            return
        data = self.source_combo.itemData(index)
        if data == MANAGE:
            self.refresh()  # back to the current source
            self.manageRequested.emit()
            return
        self.choose(data)

    def _model_chosen(self) -> None:
        source = self.engine.source
        model = self.model_combo.currentText().strip()
        if self._filling or source is None or not model or model == source[1]:
            return
        self.choose(source[0], model)

    def _fill_models(self, models: list[str]) -> None:
        current = self.engine.source[1] if self.engine.source else ""
        self.model_combo.clear()
        for m in dict.fromkeys([current, *models]):
            if m:
                self.model_combo.addItem(m)
        self.model_combo.setCurrentText(current)

    def _fetch_models(self) -> None:
        """Fill the model list from the server's /v1/models, off the GUI's way (async)."""
        source = self.engine.source
        target = None if source is None else self.engine.hub.book.target(source[0], source[1])
        if target is None:
            return
        try:
            loop = asyncio.get_event_loop()
        except RuntimeError:
            return
        loop.create_task(self._list(target, source))

    async def _list(self, target, source) -> None:  # type: ignore[no-untyped-def]
        self.models_error = None
        try:
            entries = await model_entries(self.engine.hub.runner.session(), target)
        except RemoteError as e:
            entries, self.models_error = [], str(e)
        models = [m["id"] for m in entries]
        if not shiboken6.isValid(self):
            return  # the pane was closed meanwhile
        if self.models_error is not None and not models:
            self.model_combo.setToolTip(f"The server's models could not be listed: {self.models_error}")
            return
        if self.engine.source == source:
            kinds = [m["owned_by"] for m in entries if m["id"] == source[1]] or [m["owned_by"] for m in entries]
            self.engine.set_server_kind(kinds[0] if kinds else "")
            self.models_error = None
            self._filling = True
            self._fill_models(models)
            self._filling = False
