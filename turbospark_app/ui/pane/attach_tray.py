"""The composer's tray: the images and documents waiting to go with the next message, above the
input, one chip each (a thumbnail or a document mark, its name and figures or its error, a
whole / retrieved switch for a document, a remove button). Hidden while empty."""

from __future__ import annotations

from typing import Iterable

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QPixmap
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QScrollArea, QToolButton, QWidget

from .attach_items import MODES, TrayItem

MODE_LABELS = {"auto": "auto", "whole": "whole", "retrieved": "retrieved"}
MODE_TIPS = {
    "auto": "Whole when every document fits the context with room for the reply, else the passages "
            "retrieved for your question. Click to force whole.",
    "whole": "The whole text goes in the prompt. Click to retrieve passages instead.",
    "retrieved": "Only the passages retrieved for your question go in the prompt (4 chunks). Click for auto.",
}


class AttachChip(QFrame):
    """One tray item (see the module docstring)."""

    removeRequested = Signal(int)
    modeChanged = Signal(int, str)

    def __init__(self, item: TrayItem, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.item = item
        self.resolved = ""  # what "auto" would be now (the pane says, from the context's room)
        self.setObjectName("attachChip")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        row = QHBoxLayout(self)
        row.setContentsMargins(4, 2, 2, 2)
        row.setSpacing(4)
        self.thumb = QLabel(self)
        self.thumb.setObjectName("attachThumb")
        self.label = QLabel(self)
        self.label.setObjectName("attachLabel")
        self.label.setTextFormat(Qt.TextFormat.PlainText)
        self.mode_button = QToolButton(self)
        self.mode_button.setObjectName("attachMode")
        self.mode_button.setAutoRaise(True)
        self.mode_button.clicked.connect(self._next_mode)
        self.remove_button = QToolButton(self)
        self.remove_button.setObjectName("attachRemove")
        self.remove_button.setText("✕")
        self.remove_button.setToolTip("Remove")
        self.remove_button.setAutoRaise(True)
        self.remove_button.clicked.connect(lambda: self.removeRequested.emit(self.item.id))
        for w in (self.thumb, self.label, self.mode_button, self.remove_button):
            row.addWidget(w)
        self.refresh()

    def refresh(self) -> None:
        """Show the item's current state."""
        item = self.item
        self.label.setText(item.label())
        self.label.setToolTip(str(item.path) if item.path else item.name)
        error = item.state == "error"
        self.setProperty("error", error)
        self.label.setStyleSheet("color: palette(bright-text); background: #b03a2e; padding: 1px 4px;"
                                 if error else "")
        if item.thumb is not None:
            self.thumb.setPixmap(QPixmap.fromImage(item.thumb).scaled(
                40, 40, Qt.AspectRatioMode.KeepAspectRatio, Qt.TransformationMode.SmoothTransformation))
            self.thumb.setVisible(True)
        elif item.kind == "document":
            self.thumb.setText("▤")
            self.thumb.setVisible(True)
        else:
            self.thumb.setVisible(False)
        doc_ready = item.kind == "document" and item.state == "ready"
        self.mode_button.setVisible(doc_ready)
        auto_now = f": {self.resolved}" if item.mode == "auto" and self.resolved else ""
        self.mode_button.setText(MODE_LABELS[item.mode] + auto_now)
        self.mode_button.setToolTip(MODE_TIPS[item.mode])

    def show_resolved(self, mode: str) -> None:
        """What "auto" would choose if the message were sent now."""
        if mode != self.resolved:
            self.resolved = mode
            self.refresh()

    def _next_mode(self) -> None:
        self.item.mode = MODES[(MODES.index(self.item.mode) + 1) % len(MODES)]
        self.refresh()
        self.modeChanged.emit(self.item.id, self.item.mode)


class AttachTray(QScrollArea):
    """See the module docstring."""

    changed = Signal()  # an item came, went or changed

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("attachTray")
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setFixedHeight(50)
        inner = QWidget(self)
        self._row = QHBoxLayout(inner)
        self._row.setContentsMargins(0, 0, 0, 0)
        self._row.setSpacing(6)
        self._row.addStretch(1)
        self.setWidget(inner)
        self._chips: dict[int, AttachChip] = {}
        self.setVisible(False)

    def items(self) -> list[TrayItem]:
        """The items, in the order they were added."""
        return [c.item for c in self._chips.values()]

    def chip(self, item_id: int) -> AttachChip | None:
        return self._chips.get(item_id)

    def add(self, item: TrayItem) -> AttachChip:
        chip = AttachChip(item, self.widget())
        chip.removeRequested.connect(self.remove)
        chip.modeChanged.connect(lambda *_: self.changed.emit())
        self._row.insertWidget(self._row.count() - 1, chip)
        self._chips[item.id] = chip
        self.setVisible(True)
        self.changed.emit()
        return chip

    def add_all(self, items: Iterable[TrayItem]) -> None:
        for item in items:
            self.add(item)

    def update(self, item: TrayItem) -> None:
        """The worker's reading of an item (ignored when it was removed meanwhile); the mode
        chosen while it was read is kept."""
        chip = self._chips.get(item.id)
        if chip is not None:
            item.mode = chip.item.mode
            chip.item = item
            chip.refresh()
            self.changed.emit()

    def remove(self, item_id: int) -> None:
        chip = self._chips.pop(item_id, None)
        if chip is not None:
            self._row.removeWidget(chip)
            chip.deleteLater()
        self.setVisible(bool(self._chips))
        self.changed.emit()

    def take_all(self) -> list[TrayItem]:
        """Empty the tray; its items."""
        items = self.items()
        for item_id in list(self._chips):
            self.remove(item_id)
        return items
