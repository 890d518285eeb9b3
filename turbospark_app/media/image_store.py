"""Images kept with conversations: content-addressed files in `<data dir>/images`.

A file is named by the sha256 of its bytes (its transcript thumbnail beside it, `.thumb.png`) (the same id `images.decode_image` gives the
engine), so the same picture attached twice is stored once and is the same image to the KV
prefix. The bytes are stored as the user gave them (PNG, JPEG, WebP, GIF); decoding them again
gives the same `ImageInput` the first turn sent. Decoded images are kept in a small cache, so a
conversation's history does not re-decode its pictures on every turn; a prompt carries
`StoredImage`s, decoded where they are used.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from .images import ImageError, ImageInput, decode_image

EXTENSIONS = {"image/png": ".png", "image/jpeg": ".jpg", "image/webp": ".webp", "image/gif": ".gif",
              "image/bmp": ".bmp"}
_SHA = re.compile(r"^[0-9a-f]{64}$")
CACHE_SIZE = 16  # decoded images kept (each up to 2048 x 2048 x 3 bytes)


def default_images_dir() -> Path:
    """`<per-user data folder>/images` (TURBOSPARK_DATA_DIR overrides the data folder)."""
    from ..host.folders import data_dir

    return data_dir() / "images"


class ImageStore:
    """See the module docstring. Thread-safe (the GUI and the attach worker both read)."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = Path(folder) if folder is not None else default_images_dir()
        self._cache: OrderedDict[str, ImageInput] = OrderedDict()
        self._lock = threading.Lock()

    def path_for(self, sha256: str, mime: str) -> Path:
        """Where the image `sha256` of type `mime` is (or goes)."""
        if not _SHA.match(sha256):
            raise ImageError(f"not an image id: {sha256!r}")
        return self.folder / (sha256 + EXTENSIONS.get(mime, ".img"))

    def put(self, data: bytes, mime: str) -> Path:
        """Store `data` (once: an existing file of the same hash is kept); its path."""
        path = self.path_for(hashlib.sha256(data).hexdigest(), mime)
        if path.is_file() and path.stat().st_size == len(data):
            return path
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)  # a crash mid-write never leaves half an image under its name
        return path

    def thumb_path(self, sha256: str) -> Path:
        """Where the image's small copy for the transcript is (`<sha256>.thumb.png`)."""
        if not _SHA.match(sha256):
            raise ImageError(f"not an image id: {sha256!r}")
        return self.folder / f"{sha256}.thumb.png"

    def put_thumb(self, sha256: str, png: bytes) -> Path:
        """Keep the transcript's thumbnail of image `sha256` (once)."""
        path = self.thumb_path(sha256)
        if not path.is_file():
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_bytes(png)
            os.replace(tmp, path)
        return path

    def remember(self, image: ImageInput) -> None:
        """Keep an already decoded image (the one the tray made) for the turns that follow."""
        with self._lock:
            self._cache[image.sha256] = image
            self._cache.move_to_end(image.sha256)
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)

    def has(self, sha256: str, mime: str) -> bool:
        """Whether the image is at hand (decoded, or its file stored)."""
        with self._lock:
            if sha256 in self._cache:
                return True
        return self.path_for(sha256, mime).is_file()

    def load(self, sha256: str, mime: str, name: str = "") -> ImageInput:
        """The decoded image `sha256` (ImageError when its file is gone or changed)."""
        with self._lock:
            hit = self._cache.get(sha256)
            if hit is not None:
                self._cache.move_to_end(sha256)
                return hit
        path = self.path_for(sha256, mime)
        try:
            data = path.read_bytes()
        except OSError as e:
            raise ImageError(f"the image {name or path.name} is no longer stored ({e.strerror or e})") from None
        image = decode_image(data, name=name or path.name)
        if image.sha256 != sha256:
            raise ImageError(f"the stored image {path.name} was changed on disk")
        self.remember(image)
        return image


@dataclass(frozen=True)
class StoredImage:
    """A stored image as a prompt carries it: its id at once, its pixels decoded on first use
    (`ImageInput`'s attributes), i.e. on the engine thread that encodes it, not on the GUI
    thread that builds the prompt (a 12-megapixel JPEG takes ~0.1 s of CPU to decode)."""

    store: ImageStore = field(compare=False, repr=False)
    sha256: str
    mime: str
    name: str = ""

    @property
    def image(self) -> ImageInput:
        return self.store.load(self.sha256, self.mime, self.name)

    @property
    def width(self) -> int:
        return self.image.width

    @property
    def height(self) -> int:
        return self.image.height

    @property
    def rgb(self) -> bytes:
        return self.image.rgb

    @property
    def label(self) -> str:
        return self.image.label

    def to_png(self) -> bytes:
        return self.image.to_png()

    def data_url(self) -> str:
        return self.image.data_url()
