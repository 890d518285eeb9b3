"""Images for vision models: bytes -> `ImageInput` (RGB888 pixels + the sha256 of the bytes).

Decoded with Qt's QImage (QtGui only, no QGuiApplication needed): PNG, JPEG, WebP, BMP and a
GIF's first frame, with no ffmpeg. Every check runs before Qt decodes and before llama.cpp
sees a pixel: an empty body, a body over `MAX_BYTES`, a format Qt does not know, a declared size
over `MAX_PIXELS` (a 30,000 x 30,000 PNG header is refused without allocating 2.7 GB), a
truncated file (Qt's reader fails), an animation (more than one frame: which frame would the
user mean?). Each is an `ImageError` with a sentence a user can act on.

The id is the sha256 of the file's bytes, as llama-server's (`mtmd_helper_bitmap_init_from_buf`):
the same picture sent twice is the same image to the KV prefix and to the store.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from ..engine.errors import EngineError

MAX_BYTES = 20 << 20  # an encoded image larger than this is refused (20 MiB)
MAX_PIXELS = 8192 * 8192  # declared width x height above this is refused before decoding
MAX_SIDE = 2048  # images are scaled down to fit this before encoding (projectors resize anyway)


class ImageError(EngineError):
    """An image that cannot be used: the message says why."""


@dataclass(frozen=True)
class ImageInput:
    """A decoded still image: `rgb` holds width x height x 3 bytes, row-major, no padding."""

    sha256: str
    width: int
    height: int
    rgb: bytes
    mime: str = "image/png"
    name: str = ""

    def __post_init__(self) -> None:
        if len(self.rgb) != self.width * self.height * 3:
            raise ImageError(f"image {self.name or self.sha256[:12]}: {len(self.rgb)} bytes of pixels "
                             f"do not make {self.width} x {self.height} RGB")

    def to_png(self) -> bytes:
        """The pixels as a PNG file (lossless: decoding it gives these pixels back)."""
        from PySide6.QtCore import QBuffer, QIODevice
        from PySide6.QtGui import QImage

        image = QImage(self.rgb, self.width, self.height, self.width * 3, QImage.Format.Format_RGB888)
        buf = QBuffer()
        buf.open(QIODevice.OpenModeFlag.WriteOnly)
        if not image.save(buf, "PNG"):
            raise ImageError(f"image {self.label} could not be written as PNG")
        return bytes(buf.data().data())

    def data_url(self) -> str:
        """`data:image/png;base64,...`: the image as an OpenAI `image_url` part sends it."""
        return "data:image/png;base64," + base64.b64encode(self.to_png()).decode("ascii")

    @property
    def label(self) -> str:
        return f"{self.name or self.sha256[:12]} ({self.width} x {self.height})"


_FORMATS = {b"png": "image/png", b"jpeg": "image/jpeg", b"jpg": "image/jpeg", b"webp": "image/webp",
            b"gif": "image/gif", b"bmp": "image/bmp"}


def decode_image(data: bytes, *, name: str = "", max_side: int = MAX_SIDE) -> ImageInput:
    """Decode `data` (a whole image file) into RGB, scaled to fit `max_side`; ImageError when
    it is not a usable still image."""
    label = name or "the image"
    if not data:
        raise ImageError(f"{label} is empty (0 bytes)")
    if len(data) > MAX_BYTES:
        raise ImageError(f"{label} is {len(data) / (1 << 20):.1f} MiB: images over "
                         f"{MAX_BYTES >> 20} MiB are refused")
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice
    from PySide6.QtGui import QImage, QImageReader

    buf = QBuffer()
    buf.setData(QByteArray(data))
    buf.open(QIODevice.OpenModeFlag.ReadOnly)
    reader = QImageReader(buf)
    reader.setDecideFormatFromContent(True)
    fmt = bytes(reader.format().data()).lower()
    if not reader.canRead() or fmt not in _FORMATS:
        raise ImageError(f"{label} is not an image this app reads (PNG, JPEG, WebP, GIF, BMP)")
    size = reader.size()
    if size.isValid() and size.width() * size.height() > MAX_PIXELS:
        raise ImageError(f"{label} declares {size.width():,} x {size.height():,} pixels: images "
                         f"over {MAX_PIXELS // 1_000_000} megapixels are refused")
    if reader.supportsAnimation() and reader.imageCount() > 1:
        raise ImageError(f"{label} is an animation ({reader.imageCount()} frames): send one "
                         "still frame")
    reader.setAutoTransform(True)
    image = reader.read()
    if image.isNull():
        raise ImageError(f"{label} could not be decoded ({reader.errorString()}): the file is "
                         "damaged or cut short")
    if image.width() * image.height() > MAX_PIXELS:
        raise ImageError(f"{label} is {image.width():,} x {image.height():,} pixels: too large")
    if max(image.width(), image.height()) > max_side:
        from PySide6.QtCore import Qt

        image = image.scaled(max_side, max_side, Qt.AspectRatioMode.KeepAspectRatio,
                             Qt.TransformationMode.SmoothTransformation)
    rgb = image.convertToFormat(QImage.Format.Format_RGB888)
    w, h, stride = rgb.width(), rgb.height(), rgb.bytesPerLine()
    raw = bytes(rgb.constBits())[: stride * h]
    pixels = raw if stride == w * 3 else b"".join(raw[r * stride: r * stride + w * 3] for r in range(h))
    return ImageInput(hashlib.sha256(data).hexdigest(), w, h, pixels, _FORMATS[fmt], name)


def load_image(path: str | Path, *, max_side: int = MAX_SIDE) -> ImageInput:
    """Read and decode an image file (ImageError when it cannot be read or used)."""
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > MAX_BYTES:
            raise ImageError(f"{p.name} is {size / (1 << 20):.1f} MiB: images over "
                             f"{MAX_BYTES >> 20} MiB are refused")
        data = p.read_bytes()
    except OSError as e:
        raise ImageError(f"cannot read the image {p}: {e.strerror or e}") from None
    return decode_image(data, name=p.name, max_side=max_side)


_DATA_URL = re.compile(r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(;[^;,]*)*?);base64,", re.I)


def decode_data_url(url: str, *, max_side: int = MAX_SIDE) -> ImageInput:
    """A `data:image/...;base64,...` URL -> ImageInput (ImageError when it is not one, or its
    body is over the size limit or not an image)."""
    m = _DATA_URL.match(url)
    if m is None:
        raise ImageError("an image URL must be a data: URL with base64 content "
                         "(data:image/png;base64,...)")
    body = url[m.end():]
    if len(body) > (MAX_BYTES * 4) // 3 + 4:
        raise ImageError(f"the image's data is {len(body) / (1 << 20):.1f} MiB of base64: images "
                         f"over {MAX_BYTES >> 20} MiB are refused")
    try:
        data = base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        raise ImageError("the image's data: URL is not valid base64") from None
    return decode_image(data, name="image_url", max_side=max_side)
