"""The app icon, drawn with QPainter: a rounded square with a soft gradient and a spark.

Drawn at run time (crisp at any size, no file to ship); `packaging/make_icons.py` draws the
same bolt and palette on Apple's icon grid for the bundle (`resources/icon.png`, .icns, .ico).
"""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QIcon, QLinearGradient, QPainter, QPainterPath, QPixmap


def draw_icon(size: int) -> QPixmap:
    """The icon as a `size` x `size` pixmap with a transparent margin."""
    pix = QPixmap(size, size)
    pix.fill(Qt.GlobalColor.transparent)
    p = QPainter(pix)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    s = float(size)
    margin = s * 0.06
    rect = QRectF(margin, margin, s - 2 * margin, s - 2 * margin)
    bg = QLinearGradient(rect.topLeft(), rect.bottomRight())
    bg.setColorAt(0.0, QColor("#2b3a67"))
    bg.setColorAt(1.0, QColor("#0f1b3d"))
    p.setPen(Qt.PenStyle.NoPen)
    p.setBrush(bg)
    p.drawRoundedRect(rect, s * 0.22, s * 0.22)

    # A lightning spark, slightly off-centre, warm gradient.
    def pt(x: float, y: float) -> QPointF:
        return QPointF(rect.left() + x * rect.width(), rect.top() + y * rect.height())

    bolt = QPainterPath(pt(0.58, 0.12))
    for x, y in ((0.28, 0.55), (0.48, 0.55), (0.40, 0.88), (0.74, 0.42), (0.54, 0.42), (0.58, 0.12)):
        bolt.lineTo(pt(x, y))
    fg = QLinearGradient(pt(0.5, 0.1), pt(0.5, 0.9))
    fg.setColorAt(0.0, QColor("#ffe08a"))
    fg.setColorAt(1.0, QColor("#ff9f43"))
    p.setBrush(fg)
    p.drawPath(bolt)
    p.end()
    return pix


def app_icon() -> QIcon:
    """The icon at the sizes a desktop asks for."""
    icon = QIcon()
    for size in (16, 32, 64, 128, 256, 512):
        icon.addPixmap(draw_icon(size))
    return icon
