"""Tools › MCP Servers…: every server in `mcp.json` with its state (stopped, starting, ready
with N tools, failed: why), an on/off switch per server and per tool, the tools always allowed
(revocable), and the file itself, editable: it is checked before it is saved, a bad file is a
message naming its line, and the old one stays."""

from __future__ import annotations

import asyncio
import json

from typing import Callable

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ...tools.config import ConfigError, set_switch
from ...tools.server import FAILED, READY
from ..services.tools_service import ToolsService


def state_text(server) -> str:  # noqa: ANN001
    """"ready · 2 tools", "failed: ...", "starting", "stopped", "off"."""
    if server.entry.disabled:
        return "off"
    if server.state == READY:
        return f"ready · {len(server.tools)} tools"
    if server.state == FAILED:
        return f"failed: {server.detail}"
    return server.state


class McpServersDialog(QDialog):
    """See the module docstring."""

    def __init__(self, service: ToolsService, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("mcpServersDialog")
        self.setWindowTitle("MCP Servers")
        self.resize(820, 560)
        self.service = service
        self.tree = QTreeWidget(self)
        self.tree.setObjectName("serverTree")
        self.tree.setHeaderLabels(["Server / tool", "State"])
        self.tree.setColumnWidth(0, 260)
        self.tree.itemChanged.connect(self._switched)
        self.start_button = QPushButton("Start all", self)
        self.start_button.setObjectName("startServers")
        self.start_button.clicked.connect(self._start_all)
        self.always = QListWidget(self)
        self.always.setObjectName("alwaysAllowed")
        self.revoke_button = QPushButton("Revoke", self)
        self.revoke_button.setObjectName("revokeAlways")
        self.revoke_button.clicked.connect(self._revoke)
        self.editor = QPlainTextEdit(self)
        self.editor.setObjectName("mcpJson")
        mono = QFont("monospace")
        mono.setStyleHint(QFont.StyleHint.TypeWriter)
        self.editor.setFont(mono)
        self.editor.setPlainText(service.text())
        self.message = QLabel(service.problem, self)
        self.message.setObjectName("mcpJsonMessage")
        self.message.setWordWrap(True)
        self.save_button = QPushButton("Save mcp.json", self)
        self.save_button.setObjectName("saveMcpJson")
        self.save_button.clicked.connect(self.save)
        left = QWidget(self)
        lv = QVBoxLayout(left)
        lv.setContentsMargins(0, 0, 0, 0)
        lv.addWidget(self.tree, 3)
        lv.addWidget(self.start_button)
        lv.addWidget(QLabel("Always allowed (server, tool):", self))
        lv.addWidget(self.always, 1)
        lv.addWidget(self.revoke_button)
        right = QWidget(self)
        rv = QVBoxLayout(right)
        rv.setContentsMargins(0, 0, 0, 0)
        rv.addWidget(QLabel(f"{service.path}  (the peers' format: {{\"mcpServers\": {{name: {{command, args, env}} "
                            "| {url, headers}}}})", self))
        rv.addWidget(self.editor, 1)
        row = QHBoxLayout()
        row.addWidget(self.message, 1)
        row.addWidget(self.save_button)
        rv.addLayout(row)
        split = QSplitter(Qt.Orientation.Horizontal, self)
        split.addWidget(left)
        split.addWidget(right)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(split, 1)
        layout.addWidget(buttons)
        service.changed.connect(self._changed)
        self._refresh()

    def _changed(self, _name: str) -> None:
        QTimer.singleShot(0, self._refresh)

    def _refresh(self, *_: object) -> None:
        self.tree.blockSignals(True)
        self.tree.clear()
        for server in self.service.hub.servers.values():
            item = QTreeWidgetItem([server.name, state_text(server)])
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(0, Qt.CheckState.Unchecked if server.entry.disabled else Qt.CheckState.Checked)
            item.setData(0, Qt.ItemDataRole.UserRole, (server.name, None))
            item.setToolTip(1, state_text(server))
            for tool in server.tools:
                child = QTreeWidgetItem([tool.name, tool.description.split("\n")[0]])
                child.setFlags(child.flags() | Qt.ItemFlag.ItemIsUserCheckable)
                off = tool.name in server.entry.disabled_tools
                child.setCheckState(0, Qt.CheckState.Unchecked if off else Qt.CheckState.Checked)
                child.setData(0, Qt.ItemDataRole.UserRole, (server.name, tool.name))
                item.addChild(child)
            self.tree.addTopLevelItem(item)
            item.setExpanded(True)
        self.tree.blockSignals(False)
        self.always.clear()
        for identity, tool in self.service.approvals.pairs():
            self.always.addItem(f"{identity}  ·  {tool}")
            self.always.item(self.always.count() - 1).setData(Qt.ItemDataRole.UserRole, (identity, tool))

    def _switched(self, item: QTreeWidgetItem, column: int) -> None:
        server, tool = item.data(0, Qt.ItemDataRole.UserRole)
        on = item.checkState(0) == Qt.CheckState.Checked
        try:
            text = self.service.text()
            text = set_switch(text, server, disabled=not on) if tool is None else \
                set_switch(text, server, tool=tool, tool_on=on)
        except (ConfigError, json.JSONDecodeError) as e:
            self.message.setText(str(e))
            return
        self.editor.setPlainText(text)
        # The tree is rebuilt after this signal returns (not under the item that sent it).
        self.save(refresh=lambda: QTimer.singleShot(0, self._refresh))

    def save(self, refresh: "Callable[[], None] | None" = None) -> bool:
        """Check and save the editor's text; a bad file is said (its line) and not saved."""
        try:
            gone = self.service.save(self.editor.toPlainText())
        except ConfigError as e:
            self.message.setText(f"Not saved: {e}. The file on disk is unchanged.")
            self.message.setStyleSheet("color: #c0392b")
            return False
        except OSError as e:
            self.message.setText(f"Not saved: {e}")
            return False
        for server in gone:
            asyncio.ensure_future(server.stop())
        self.message.setText("Saved.")
        self.message.setStyleSheet("")
        (refresh or self._refresh)()
        return True

    def _start_all(self) -> None:
        asyncio.ensure_future(self.service.hub.offer())

    def _revoke(self) -> None:
        item = self.always.currentItem()
        if item is None:
            return
        identity, tool = item.data(Qt.ItemDataRole.UserRole)
        self.service.approvals.revoke(identity, tool)
        self._refresh()
