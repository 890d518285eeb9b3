"""Draw TurboSpark's app icon and write it in the formats packaging needs.

    python packaging/make_icons.py                          # (re)write resources/icon.png
    python packaging/make_icons.py --iconset build/icons/TurboSpark.iconset   # for `iconutil`
    python packaging/make_icons.py --icns build/icons/TurboSpark.icns         # Pillow
    python packaging/make_icons.py --ico build/icons/TurboSpark.ico           # Pillow

The drawing (QPainter, so it needs only PySide6) is a lightning spark on a rounded-square
indigo gradient - the same palette and bolt as the in-app icon (`turbospark_app/ui/icon.py`) -
laid out on Apple's macOS icon grid: the square fills 824 of 1024 pixels, leaving room for the
shadow the Dock expects. Every size is drawn from the vector shapes, not scaled down from 1024,
so small sizes stay crisp. `.icns` and `.ico` are written with Pillow (the `package` extra);
`build_macos.sh` prefers Apple's `iconutil` on an `--iconset` folder.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PNG = REPO_ROOT / "resources" / "icon.png"
MASTER_SIZE = 1024

# iconutil's file names: (point size, scale) -> icon_<pt>x<pt>[@2x].png
ICONSET_ENTRIES: tuple[tuple[int, int], ...] = (
    (16, 1), (16, 2), (32, 1), (32, 2), (128, 1), (128, 2), (256, 1), (256, 2), (512, 1), (512, 2),
)
ICO_SIZES: tuple[int, ...] = (16, 24, 32, 48, 64, 128, 256)

# Apple's grid at 1024 px: an 824 px rounded square (radius ~185 px), centred slightly high.
_GRID_BODY = 824 / 1024
_GRID_RADIUS = 185 / 824
_GRID_LIFT = 6 / 1024

# The bolt, in unit coordinates of the body (same outline as the in-app icon).
_BOLT = ((0.58, 0.12), (0.28, 0.55), (0.48, 0.55), (0.40, 0.88), (0.74, 0.42), (0.54, 0.42))


def _ensure_gui_app() -> object:
    """A Qt application (offscreen when there is no display) so QPainter can rasterize.

    A QApplication rather than a bare QGuiApplication, so that code sharing the process later
    (a test session) can still create widgets.
    """
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance()
    if app is None:
        if sys.platform.startswith("linux") and not (
            os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
        ):
            os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
        app = QApplication(["make_icons"])
    return app


def draw_icon_image(size: int) -> "QImage":  # noqa: F821 - PySide6 is imported lazily
    """The icon as a `size` x `size` ARGB32 QImage with a transparent margin."""
    from PySide6.QtCore import QPointF, QRectF, Qt
    from PySide6.QtGui import (
        QBrush,
        QColor,
        QImage,
        QLinearGradient,
        QPainter,
        QPainterPath,
        QPen,
        QRadialGradient,
    )

    if size < 16:
        raise ValueError(f"icon size must be at least 16 px (got {size})")
    _ensure_gui_app()
    s = float(size)
    image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    p = QPainter(image)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    p.setPen(Qt.PenStyle.NoPen)

    body = s * _GRID_BODY
    left = (s - body) / 2
    top = (s - body) / 2 - s * _GRID_LIFT
    rect = QRectF(left, top, body, body)
    radius = body * _GRID_RADIUS

    # A soft drop shadow: a few widening, fading copies of the body below it.
    if size >= 64:
        for i in range(6, 0, -1):
            grow = s * 0.004 * i
            shadow = rect.adjusted(-grow, -grow + s * 0.012, grow, grow + s * 0.012)
            p.setBrush(QColor(0, 0, 0, 10))
            p.drawRoundedRect(shadow, radius + grow, radius + grow)

    # The body: indigo to deep navy, diagonal.
    bg = QLinearGradient(rect.topLeft(), rect.bottomRight())
    bg.setColorAt(0.0, QColor("#3a4d8f"))
    bg.setColorAt(0.55, QColor("#1f2b5a"))
    bg.setColorAt(1.0, QColor("#0c1533"))
    p.setBrush(bg)
    p.drawRoundedRect(rect, radius, radius)

    def pt(x: float, y: float) -> QPointF:
        return QPointF(rect.left() + x * rect.width(), rect.top() + y * rect.height())

    # A warm glow behind the bolt.
    glow = QRadialGradient(pt(0.51, 0.50), body * 0.42)
    glow.setColorAt(0.0, QColor(255, 190, 90, 120))
    glow.setColorAt(0.6, QColor(255, 150, 60, 30))
    glow.setColorAt(1.0, QColor(255, 150, 60, 0))
    clip = QPainterPath()
    clip.addRoundedRect(rect, radius, radius)
    p.setClipPath(clip)
    p.setBrush(glow)
    p.drawRect(rect)

    # A faint top sheen, clipped to the body.
    sheen = QLinearGradient(pt(0.5, 0.0), pt(0.5, 0.5))
    sheen.setColorAt(0.0, QColor(255, 255, 255, 38))
    sheen.setColorAt(1.0, QColor(255, 255, 255, 0))
    p.setBrush(sheen)
    p.drawRect(QRectF(rect.left(), rect.top(), rect.width(), rect.height() * 0.5))
    p.setClipping(False)

    # The bolt: yellow to orange, with a thin darker rim so it reads at 16 px.
    bolt = QPainterPath(pt(*_BOLT[0]))
    for x, y in _BOLT[1:] + _BOLT[:1]:
        bolt.lineTo(pt(x, y))
    fg = QLinearGradient(pt(0.5, 0.12), pt(0.5, 0.88))
    fg.setColorAt(0.0, QColor("#fff1b8"))
    fg.setColorAt(0.45, QColor("#ffd166"))
    fg.setColorAt(1.0, QColor("#ff8c32"))
    p.setBrush(QBrush(fg))
    rim = QPen(QColor(150, 60, 10, 140), max(1.0, s * 0.006))
    rim.setJoinStyle(Qt.PenJoinStyle.RoundJoin)
    p.setPen(rim)
    p.drawPath(bolt)

    # A small four-point sparkle up and to the left of the bolt.
    if size >= 32:
        p.setPen(Qt.PenStyle.NoPen)
        p.setBrush(QColor(255, 244, 214, 235))
        cx, cy, r, w = 0.27, 0.26, 0.085, 0.018
        star = QPainterPath(pt(cx, cy - r))
        for x, y in ((cx + w, cy - w), (cx + r, cy), (cx + w, cy + w), (cx, cy + r),
                     (cx - w, cy + w), (cx - r, cy), (cx - w, cy - w), (cx, cy - r)):
            star.lineTo(pt(x, y))
        p.drawPath(star)
    p.end()
    return image


def write_png(path: Path, size: int = MASTER_SIZE) -> Path:
    """Draw the icon at `size` px and save it as PNG at `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not draw_icon_image(size).save(str(path), "PNG"):
        raise OSError(f"could not write {path}")
    return path


def write_iconset(folder: Path) -> Path:
    """An `.iconset` folder (icon_16x16.png ... icon_512x512@2x.png) for `iconutil -c icns`."""
    folder.mkdir(parents=True, exist_ok=True)
    for points, scale in ICONSET_ENTRIES:
        suffix = "@2x" if scale == 2 else ""
        write_png(folder / f"icon_{points}x{points}{suffix}.png", points * scale)
    return folder


def _pillow_images(sizes: tuple[int, ...]) -> list["Image.Image"]:  # noqa: F821
    """The icon drawn at each size, as Pillow RGBA images (largest first)."""
    import io

    from PIL import Image
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice

    images = []
    for size in sorted(sizes, reverse=True):
        data = QByteArray()
        buffer = QBuffer(data)
        buffer.open(QIODevice.OpenModeFlag.WriteOnly)
        draw_icon_image(size).save(buffer, "PNG")
        buffer.close()
        images.append(Image.open(io.BytesIO(bytes(data))).convert("RGBA"))
    return images


def write_icns(path: Path) -> Path:
    """A macOS `.icns` (16 ... 1024 px, each drawn at its size) written with Pillow."""
    sizes = sorted({points * scale for points, scale in ICONSET_ENTRIES})
    images = _pillow_images(tuple(sizes))
    path.parent.mkdir(parents=True, exist_ok=True)
    images[0].save(path, format="ICNS", append_images=images[1:])
    return path


def write_ico(path: Path) -> Path:
    """A Windows `.ico` (16 ... 256 px) written with Pillow."""
    images = _pillow_images(ICO_SIZES)
    path.parent.mkdir(parents=True, exist_ok=True)
    images[0].save(path, format="ICO", sizes=[(s, s) for s in ICO_SIZES], append_images=images[1:])
    return path


def main(argv: list[str] | None = None) -> int:
    """Write the requested icon files; with no options, (re)write resources/icon.png."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--png", type=Path, help=f"the {MASTER_SIZE} px PNG (default: {DEFAULT_PNG})")
    parser.add_argument("--iconset", type=Path, help="an .iconset folder for iconutil")
    parser.add_argument("--icns", type=Path, help="a .icns file (Pillow)")
    parser.add_argument("--ico", type=Path, help="a .ico file (Pillow)")
    args = parser.parse_args(argv)
    wrote = []
    if args.png or not (args.iconset or args.icns or args.ico):
        wrote.append(write_png(args.png or DEFAULT_PNG))
    if args.iconset:
        wrote.append(write_iconset(args.iconset))
    if args.icns:
        wrote.append(write_icns(args.icns))
    if args.ico:
        wrote.append(write_ico(args.ico))
    for path in wrote:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
