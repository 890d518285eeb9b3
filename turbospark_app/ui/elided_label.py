"""A one-line label that gives up width gracefully: "Done · 36.6 tok/s · stop max_tok…" with the
whole text in its tooltip, instead of a layout cutting the glyphs off ("Done · 36.6 to").

`text()` stays the full text (tests and callers read it); only the painting is elided.
"""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QPainter, QPaintEvent, QResizeEvent
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget

MIN_CHARS = 8
"""The label never asks for less than about this many characters (so "Generati…" still says it)."""


class ElidedLabel(QLabel):
    """See the module docstring. The tooltip is the full text while it is elided (followed by a
    tooltip set with `setToolTip`, which alone is shown when it is not)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._own_tip = ""
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)

    def setText(self, text: str) -> None:  # noqa: N802 (Qt override)
        super().setText(text)
        self._update_tip()

    def setToolTip(self, tip: str) -> None:  # noqa: N802 (Qt override)
        self._own_tip = tip
        self._update_tip()

    @property
    def elided(self) -> bool:
        """True when the text does not fit and is painted with an ellipsis."""
        return self.fontMetrics().horizontalAdvance(self.text()) > self.contentsRect().width()

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt override)
        hint = super().minimumSizeHint()
        return QSize(min(hint.width(), self.fontMetrics().averageCharWidth() * MIN_CHARS), hint.height())

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt override)
        super().resizeEvent(event)
        self._update_tip()

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 (Qt override)
        if not self.elided:
            super().paintEvent(event)
            return
        rect = self.contentsRect()
        shown = self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, rect.width())
        painter = QPainter(self)
        painter.setPen(self.palette().color(self.foregroundRole()))
        painter.drawText(rect, int(self.alignment() | Qt.AlignmentFlag.AlignVCenter), shown)

    def _update_tip(self) -> None:
        if not self.elided:
            super().setToolTip(self._own_tip)
        elif self._own_tip and self.text() not in self._own_tip:
            super().setToolTip(f"{self.text()}\n\n{self._own_tip}")
        else:
            super().setToolTip(self.text())
