"""The message input: Enter sends, Shift+Enter inserts a new line, Esc asks to stop.

It grows with its text from two to eight lines, then scrolls. A paste or drop is offered to
`media_handler` first (the pane's attachments: an image, files, a long text), which returns
True when it took it.
"""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QMimeData, QSize, Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QPlainTextEdit, QSizePolicy, QWidget


MIN_LINES = 2
MAX_LINES = 8


class ChatInput(QPlainTextEdit):
    """See the module docstring."""

    submitted = Signal()
    stopRequested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("chatInput")
        self.setTabChangesFocus(True)
        self.setPlaceholderText("Message the model — Enter to send, Shift+Enter for a new line")
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.document().setDocumentMargin(6)
        self.textChanged.connect(self._fit_height)
        self.media_handler: Callable[[QMimeData], bool] | None = None
        self._fit_height()

    def canInsertFromMimeData(self, source: QMimeData) -> bool:  # noqa: N802 (Qt override)
        """Images and files too (the pane's tray takes them)."""
        return source.hasImage() or source.hasUrls() or super().canInsertFromMimeData(source)

    def insertFromMimeData(self, source: QMimeData) -> None:  # noqa: N802 (Qt override)
        """Paste / drop: the pane's attachments first, else plain text."""
        if self.media_handler is not None and self.media_handler(source):
            return
        super().insertFromMimeData(source)

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 (Qt override)
        """Enter sends; Shift+Enter is a new line; Esc stops."""
        key = event.key()
        if key in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            if event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
                self.insertPlainText("\n")  # a real newline, not a U+2028 line separator
            else:
                self.submitted.emit()
            event.accept()
            return
        if key == Qt.Key.Key_Escape:
            self.stopRequested.emit()
            event.accept()
            return
        super().keyPressEvent(event)

    def _lines_height(self, lines: int) -> int:
        line = self.fontMetrics().lineSpacing()
        margins = self.contentsMargins()
        doc_margin = int(self.document().documentMargin())
        return lines * line + 2 * doc_margin + margins.top() + margins.bottom() + 4

    def _fit_height(self) -> None:
        # Visual lines (wrapped ones too): the layout's line counts, block by block.
        lines = 0
        block = self.document().firstBlock()
        while block.isValid():
            lines += max(1, block.layout().lineCount() if block.layout() else 1)
            block = block.next()
        self.setFixedHeight(self._lines_height(max(MIN_LINES, min(MAX_LINES, lines))))

    def resizeEvent(self, event) -> None:  # type: ignore[no-untyped-def]  # noqa: N802
        """Re-fit: a width change re-wraps the text."""
        super().resizeEvent(event)
        self._fit_height()

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt override)
        """Two lines tall by default."""
        return QSize(super().sizeHint().width(), self._lines_height(MIN_LINES))
