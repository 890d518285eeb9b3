"""A user message's images and attachments in the transcript, and the image viewer.

Inside the message's box, under its text: each image a thumbnail (a link, href
`ts:image:<message id>#<n>`: a click opens `ImageViewer` on it) and each attachment a chip
(`▤ report.pdf · 12 pages · 8,412 tokens · whole` or `… · retrieved: 4 of 212 chunks`).
Thumbnails are the small copies stored beside the images at Send (else the file read with Qt's
scaled decode), cached, so a long conversation opens without decoding its pictures; a stored
image gone from disk is said.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from PySide6.QtCore import QSize, Qt, QUrl
from PySide6.QtGui import QImage, QImageReader, QPixmap, QTextCharFormat, QTextCursor, QTextDocument, QTextImageFormat
from PySide6.QtWidgets import QDialog, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from ...conversations.parts import ATTACHMENT, IMAGE, Part
from ...media.image_store import ImageStore

THUMB_SIDE = 120
_thumbs: dict[tuple[str, int], QImage] = {}


@dataclass(frozen=True)
class MediaItem:
    """One image or attachment of a message, as shown."""

    kind: str  # "image" | "attachment"
    label: str
    path: str = ""  # an image's stored file ("" when it is gone)
    sha256: str = ""
    thumb: str = ""  # its stored thumbnail ("": none, drawn from the file)


def attachment_label(p: Part) -> str:
    """`report.pdf · 12 pages · 8,412 tokens · whole` / `… · retrieved: 4 of 212 chunks`."""
    meta = p.meta
    bits = [p.name or "attachment"]
    if meta.get("pages"):
        bits.append(f"{meta['pages']} pages")
    if meta.get("tokens") is not None:
        bits.append(f"{int(meta['tokens']):,} tokens")
    if meta.get("mode") == "retrieved":
        bits.append(f"retrieved: {meta.get('used', 0)} of {meta.get('chunks', 0)} chunks")
    else:
        bits.append("whole")
    return " · ".join(bits)


def media_items(parts: Sequence[Part], store: ImageStore) -> tuple[MediaItem, ...]:
    """What a message's parts show (images first, in their order, then attachments)."""
    out = []
    for p in parts:
        if p.kind == IMAGE:
            sha, mime = str(p.meta.get("sha256", "")), str(p.meta.get("mime", ""))
            try:
                path = store.path_for(sha, mime)
            except Exception:  # noqa: BLE001 (a damaged part: shown as gone)
                path = None
            w, h = p.meta.get("width"), p.meta.get("height")
            label = f"{p.name or 'image'}" + (f" ({w} x {h})" if w and h else "")
            thumb = store.thumb_path(sha) if path is not None else None
            out.append(MediaItem("image", label, str(path) if path and path.is_file() else "", sha,
                                 str(thumb) if thumb is not None and thumb.is_file() else ""))
    for p in parts:
        if p.kind == ATTACHMENT:
            out.append(MediaItem("attachment", attachment_label(p)))
    return tuple(out)


def thumbnail(path: str, side: int = THUMB_SIDE) -> QImage:
    """A stored image scaled to fit `side` (Qt's reader scales while decoding; cached)."""
    key = (path, side)
    hit = _thumbs.get(key)
    if hit is not None:
        return hit
    reader = QImageReader(path)
    reader.setAutoTransform(True)
    size = reader.size()
    if size.isValid() and max(size.width(), size.height()) > side:
        size.scale(QSize(side, side), Qt.AspectRatioMode.KeepAspectRatio)
        reader.setScaledSize(size)
    image = reader.read()
    _thumbs[key] = image
    return image


def insert_media(doc: QTextDocument, cursor: QTextCursor, entry: Any, small: QTextCharFormat,
                 link_colour: Any) -> None:
    """The message's thumbnails (links) and attachment chips at `cursor` (inside its box)."""
    images = [(i, m) for i, m in enumerate(entry.media) if m.kind == "image"]
    chips = [m for m in entry.media if m.kind == "attachment"]
    if images:
        cursor.insertBlock()
        for n, (_, m) in enumerate(images):
            if n:
                cursor.insertText("  ", small)
            href = f"ts:image:{entry.message_id}#{n}"
            if not m.path:
                gone = QTextCharFormat(small)
                gone.setFontItalic(True)
                cursor.insertText(f"[{m.label}: no longer stored]", gone)
                continue
            image = thumbnail(m.thumb or m.path)
            name = f"tsthumb:{m.sha256}"
            doc.addResource(QTextDocument.ResourceType.ImageResource, QUrl(name), image)
            fmt = QTextImageFormat()
            fmt.setName(name)
            fmt.setWidth(image.width())
            fmt.setHeight(image.height())
            fmt.setAnchor(True)
            fmt.setAnchorHref(href)
            fmt.setToolTip(f"{m.label} — click to view")
            cursor.insertImage(fmt)
    for m in chips:
        cursor.insertBlock()
        fmt = QTextCharFormat(small)
        fmt.setForeground(link_colour)
        fmt.setToolTip(m.label)
        cursor.insertText("▤ " + m.label, fmt)


def thumb_sources(entries: Sequence[Any]) -> dict[str, str]:
    """`tsthumb:<sha256>` -> a data: URI of the thumbnail (an HTML export carries its images)."""
    import base64

    from ..pane.attach_items import png_bytes

    out = {}
    for entry in entries:
        for m in getattr(entry, "media", ()):
            if m.kind == "image" and (m.thumb or m.path):
                data = base64.b64encode(png_bytes(thumbnail(m.thumb or m.path))).decode("ascii")
                out[f"tsthumb:{m.sha256}"] = f"data:image/png;base64,{data}"
    return out


class ImageViewer(QDialog):
    """A message's images at their size (fitted to the screen), ‹ › between them."""

    def __init__(self, items: Sequence[MediaItem], index: int = 0, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("imageViewer")
        self.items = [m for m in items if m.kind == "image"]
        self.index = max(0, min(index, len(self.items) - 1))
        self.picture = QLabel(self)
        self.picture.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.caption = QLabel(self)
        self.prev_button = QPushButton("‹", self)
        self.next_button = QPushButton("›", self)
        self.prev_button.clicked.connect(lambda: self.show_image(self.index - 1))
        self.next_button.clicked.connect(lambda: self.show_image(self.index + 1))
        row = QHBoxLayout()
        row.addWidget(self.prev_button)
        row.addWidget(self.caption, 1)
        row.addWidget(self.next_button)
        layout = QVBoxLayout(self)
        layout.addWidget(self.picture, 1)
        layout.addLayout(row)
        self.show_image(self.index)

    def show_image(self, index: int) -> None:
        if not self.items:
            return
        self.index = index % len(self.items)
        m = self.items[self.index]
        screen = self.screen().availableGeometry() if self.screen() else None
        side = min(screen.width(), screen.height()) - 160 if screen else 900
        pixmap = QPixmap(m.path) if m.path else QPixmap()
        if not pixmap.isNull() and max(pixmap.width(), pixmap.height()) > side:
            pixmap = pixmap.scaled(side, side, Qt.AspectRatioMode.KeepAspectRatio,
                                   Qt.TransformationMode.SmoothTransformation)
        if pixmap.isNull():
            self.picture.setText(f"{m.label}: the stored file is gone")
        else:
            self.picture.setPixmap(pixmap)
        self.caption.setText(f"{m.label}  ·  {self.index + 1} of {len(self.items)}  ·  {Path(m.path).name}")
        self.setWindowTitle(m.label)
        many = len(self.items) > 1
        self.prev_button.setVisible(many)
        self.next_button.setVisible(many)
