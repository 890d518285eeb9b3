"""The local API's widgets: its settings dialog and the QA panel's table of API requests."""

from __future__ import annotations

import secrets
from dataclasses import replace

from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QWidget,
)

from ...server import ServerConfig
from ...server.config import is_loopback
from ...server.jobs import ApiJob

MAX_ROWS = 200


class ApiSettingsDialog(QDialog):
    """Port, key, network access and CORS origins of the local API."""

    def __init__(self, config: ServerConfig, parent: QWidget | None = None, *,
                 key_location: str = "") -> None:
        super().__init__(parent)
        self.setObjectName("apiSettingsDialog")
        self.setWindowTitle("Local API Settings")
        self._base = config
        self.port = QSpinBox(objectName="apiPort")
        self.port.setRange(1, 65535)
        self.port.setValue(config.port or 8080)
        self.key = QLineEdit(config.api_key or "", objectName="apiKey")
        self.key.setEchoMode(QLineEdit.EchoMode.PasswordEchoOnEdit)
        self.key.setPlaceholderText("none (only this computer can connect)")
        generate = QPushButton("Generate")
        generate.clicked.connect(lambda: self.key.setText("sk-ts-" + secrets.token_urlsafe(24)))
        key_row = QHBoxLayout()
        key_row.addWidget(self.key, 1)
        key_row.addWidget(generate)
        self.network = QCheckBox("Serve on the local network (0.0.0.0; needs a key)", objectName="apiNetwork")
        self.network.setChecked(not is_loopback(config.host))
        self.origins = QLineEdit(", ".join(config.allowed_origins), objectName="apiOrigins")
        self.origins.setPlaceholderText("none: browsers pages cannot call the API (CORS off)")
        self.error = QLabel(objectName="apiSettingsError")
        self.error.setWordWrap(True)
        self.error.setStyleSheet("color: palette(highlight);")
        form = QFormLayout(self)
        form.addRow("Port", self.port)
        form.addRow("API key", key_row)
        if key_location:
            where = QLabel(f"Kept in {key_location}.", objectName="apiKeyLocation")
            where.setWordWrap(True)
            form.addRow("", where)
        form.addRow("", self.network)
        form.addRow("Allowed origins", self.origins)
        form.addRow(self.error)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(self._accept)
        self.buttons.rejected.connect(self.reject)
        form.addRow(self.buttons)

    def config(self) -> ServerConfig:
        """The settings as entered (not yet checked)."""
        origins = tuple(o.strip() for o in self.origins.text().split(",") if o.strip())
        return replace(self._base, port=self.port.value(), api_key=self.key.text().strip() or None,
                       host="0.0.0.0" if self.network.isChecked() else "127.0.0.1",
                       allowed_origins=origins)

    def _accept(self) -> None:
        try:
            self.config().check()
        except ValueError as e:
            self.error.setText(str(e))
            return
        self.accept()


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f} ms"


class ApiRequestsTable(QTableWidget):
    """One row per API request: state, prompt / reused tokens, tok/s, why it ended, and the
    disconnect-to-ended latency the engine measured."""

    COLUMNS = ["request", "state", "prompt / reused", "tokens", "tok/s", "ended by", "disconnect → ended"]

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(0, len(self.COLUMNS), parent)
        self.setObjectName("qaApiTable")
        self.setHorizontalHeaderLabels(self.COLUMNS)
        self.verticalHeader().setVisible(False)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self._rows: dict[str, int] = {}

    def cells(self, job: ApiJob) -> list[str]:
        """The row's texts (tests read them)."""
        d = job.describe()
        reused = "–" if d["reused_tokens"] is None else str(d["reused_tokens"])
        ended = d["cancel_reason"] or d["stop_reason"] or ("error" if d["error"] else "")
        rate = "–" if d["tokens_per_sec"] is None else f"{d['tokens_per_sec']:.1f}"
        return [f"{d['endpoint']} {d['id'][-8:]}{' (stream)' if d['stream'] else ''}", d["state"],
                f"{d['prompt_tokens']} / {reused}", str(d["generated_tokens"]), rate, ended,
                _ms(d["disconnect_to_ended_ms"])]

    def show_job(self, job: ApiJob) -> None:
        """Add or update the job's row (newest first)."""
        row = self._rows.get(job.response_id)
        if row is None:
            self.insertRow(0)
            self._rows = {k: r + 1 for k, r in self._rows.items()}
            self._rows[job.response_id] = row = 0
            if self.rowCount() > MAX_ROWS:
                self.removeRow(MAX_ROWS)
                self._rows = {k: r for k, r in self._rows.items() if r < MAX_ROWS}
        for col, text in enumerate(self.cells(job)):
            self.setItem(row, col, QTableWidgetItem(text))
