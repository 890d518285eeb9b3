"""Settings › Endpoints: the saved remote servers (name, base URL, API key, default model),
with "Test connection" (GET /v1/models, listing the models the server offers).

Edits stay in the dialog until OK. A saved key is never shown: the key field is empty with a
placeholder, and only a typed key replaces it (an empty typed key forgets it). The dialog says
where keys are kept (the system keychain, or a user-only file when there is none).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace

from keyring.errors import KeyringError
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from ...remote.client import Target, api_base, list_models
from ...remote.endpoints import Endpoint
from ...remote.errors import RemoteError
from ..pane.remote_source import RemoteHub


@dataclass
class _Row:
    endpoint: Endpoint
    key: str | None = None  # None: keep the saved key


class EndpointsDialog(QDialog):
    """See the module docstring."""

    def __init__(self, hub: RemoteHub, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("endpointsDialog")
        self.setWindowTitle("Endpoints")
        self.hub = hub
        self.rows = [_Row(e) for e in hub.endpoints()]
        self._loading = False
        self.list = QListWidget(self)
        self.list.setObjectName("endpointList")
        add = QPushButton("Add", self)
        add.setObjectName("addEndpoint")
        self.remove_button = QPushButton("Remove", self)
        self.remove_button.setObjectName("removeEndpoint")
        self.name = QLineEdit(self)
        self.name.setObjectName("endpointName")
        self.url = QLineEdit(self)
        self.url.setObjectName("endpointUrl")
        self.url.setPlaceholderText("http://gpu-box:8000 (vLLM), http://localhost:8080 (llama-server), "
                                    "http://localhost:11434 (Ollama)")
        self.key = QLineEdit(self)
        self.key.setObjectName("endpointKey")
        self.key.setEchoMode(QLineEdit.EchoMode.Password)
        self.model = QComboBox(self)
        self.model.setObjectName("endpointModel")
        self.model.setEditable(True)
        self.test_button = QPushButton("Test connection", self)
        self.test_button.setObjectName("testConnection")
        self.result = QLabel(self)
        self.result.setObjectName("testResult")
        self.result.setWordWrap(True)
        self.result.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        where = QLabel(f"API keys are kept in {hub.book.keys.location}.", self)
        where.setObjectName("keyLocation")
        where.setWordWrap(True)

        form = QFormLayout()
        form.addRow("Name", self.name)
        form.addRow("Base URL", self.url)
        form.addRow("API key", self.key)
        form.addRow("Default model", self.model)
        test_row = QHBoxLayout()
        test_row.addWidget(self.test_button)
        test_row.addStretch(1)
        form.addRow("", test_row)
        form.addRow("", self.result)
        self.editor = QWidget(self)
        self.editor.setLayout(form)
        left = QVBoxLayout()
        left.addWidget(self.list, 1)
        buttons_row = QHBoxLayout()
        buttons_row.addWidget(add)
        buttons_row.addWidget(self.remove_button)
        left.addLayout(buttons_row)
        body = QHBoxLayout()
        body.addLayout(left, 1)
        body.addWidget(self.editor, 2)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok
                                        | QDialogButtonBox.StandardButton.Cancel, self)
        layout = QVBoxLayout(self)
        layout.addLayout(body, 1)
        layout.addWidget(where)
        layout.addWidget(self.buttons)
        self.resize(760, 380)

        add.clicked.connect(self.add_endpoint)
        self.remove_button.clicked.connect(self.remove_current)
        self.list.currentRowChanged.connect(self._show_row)
        for field in (self.name, self.url):
            field.textEdited.connect(self._edited)
        self.model.editTextChanged.connect(lambda _t: self._edited())
        self.key.textEdited.connect(self._key_edited)
        self.test_button.clicked.connect(self.test_connection)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        self._refresh_list()

    # -- list ------------------------------------------------------------------------------

    def add_endpoint(self) -> None:
        self.rows.append(_Row(Endpoint("New endpoint", "http://localhost:8080")))
        self._refresh_list(len(self.rows) - 1)
        self.name.setFocus()
        self.name.selectAll()

    def remove_current(self) -> None:
        index = self.list.currentRow()
        if 0 <= index < len(self.rows):
            del self.rows[index]
            self._refresh_list(min(index, len(self.rows) - 1))

    def _refresh_list(self, select: int = 0) -> None:
        self.list.clear()
        for row in self.rows:
            self.list.addItem(row.endpoint.name)
        has = bool(self.rows)
        self.editor.setEnabled(has)
        self.remove_button.setEnabled(has)
        if has:
            self.list.setCurrentRow(max(0, select))
        else:
            self._show_row(-1)

    def _show_row(self, index: int) -> None:
        self._loading = True
        row = self.rows[index] if 0 <= index < len(self.rows) else None
        e = row.endpoint if row else Endpoint("", "")
        self.name.setText(e.name)
        self.url.setText(e.base_url)
        self.key.clear()
        saved = bool(row and e.id and self.hub.book.keys.get(e.id))
        self.key.setPlaceholderText("saved — type to replace, or leave as is" if saved and row.key is None
                                    else "none (leave empty when the server needs no key)")
        if row is not None and row.key:
            self.key.setText(row.key)
        self.model.clear()
        if e.default_model:
            self.model.addItem(e.default_model)
        self.model.setCurrentText(e.default_model)
        self.result.clear()
        self._loading = False

    def _current(self) -> _Row | None:
        index = self.list.currentRow()
        return self.rows[index] if 0 <= index < len(self.rows) else None

    def _edited(self) -> None:
        row = self._current()
        if row is None or self._loading:
            return
        row.endpoint = replace(row.endpoint, name=self.name.text().strip() or self.url.text().strip(),
                               base_url=self.url.text().strip(),
                               default_model=self.model.currentText().strip())
        item = self.list.currentItem()
        if item is not None:
            item.setText(row.endpoint.name)

    def _key_edited(self, text: str) -> None:
        row = self._current()
        if row is not None and not self._loading:
            row.key = text

    # -- test ------------------------------------------------------------------------------

    def current_target(self) -> Target | None:
        row = self._current()
        if row is None:
            return None
        key = row.key if row.key is not None else (self.hub.book.keys.get(row.endpoint.id) if row.endpoint.id else "")
        return Target(row.endpoint.base_url, row.endpoint.default_model, key or "", row.endpoint.name)

    def test_connection(self) -> None:
        """GET /v1/models with the form's URL and key; the result (or the reason) shows below."""
        target = self.current_target()
        if target is None:
            return
        try:
            url = api_base(target.base_url) + "/models"
        except RemoteError as e:
            self.result.setText(str(e))
            return
        self.result.setText(f"Connecting to {url}…")
        self.test_button.setEnabled(False)
        asyncio.get_event_loop().create_task(self._test(target))

    async def _test(self, target: Target) -> None:
        try:
            models = await list_models(self.hub.runner.session(), target)
        except RemoteError as e:
            self._tested(f"✗ {e}", [])
        else:
            shown = ", ".join(models[:12]) + (f" and {len(models) - 12} more" if len(models) > 12 else "")
            self._tested(f"✓ Connected: {len(models)} model{'s' if len(models) != 1 else ''}: {shown}", models)

    def _tested(self, text: str, models: list[str]) -> None:
        try:
            self.test_button.setEnabled(True)
        except RuntimeError:
            return  # the dialog was closed meanwhile
        self.result.setText(text)
        if models:
            current = self.model.currentText().strip()
            self.model.clear()
            self.model.addItems(models)
            self.model.setCurrentText(current or models[0])
            self._edited()

    # -- result ----------------------------------------------------------------------------

    def entries(self) -> list[tuple[Endpoint, str | None]]:
        """What OK saves: (endpoint, key or None to keep the saved one)."""
        return [(row.endpoint, row.key) for row in self.rows if row.endpoint.base_url]

    def accept(self) -> None:
        try:
            self.hub.save_endpoints(self.entries())
        except (OSError, RemoteError, KeyringError) as e:
            self.result.setText(f"The endpoints could not be saved: {e}")
            return
        super().accept()
