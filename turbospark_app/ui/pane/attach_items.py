"""What the composer's tray holds (images, documents) and the worker that reads them.

Reading happens off the GUI thread, on one worker thread shared by every pane: an image is
decoded with Qt (`media.images.decode_image`: every hostile-input check) and a thumbnail made;
a document's text is extracted (`documents.extract`: PDFs in a child process with a time limit)
and its tokens counted with the chat model's tokenizer. The result comes back to the GUI thread
as a queued signal; a bad file becomes the error on its chip, nothing else changes.

At Send, `prepare_documents` (on the same thread) decides whole or retrieved the way the CLI's
`chat --attach` does (`documents.sources.Attachments`, its budget rule and retrieval) and gives
the attachment parts the message is stored with: what each document put in the prompt.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from PySide6.QtCore import QBuffer, QIODevice, QObject, Qt, Signal
from PySide6.QtGui import QImage

from ...conversations.parts import ATTACHMENT, IMAGE, Part
from ...documents.extract import Extracted, kind_of
from ...documents.pages import ExtractError
from ...media.images import ImageError, ImageInput, decode_image
from ...media.image_store import ImageStore

THUMB_PX = 72  # the tray's thumbnails
MESSAGE_THUMB_PX = 120  # the transcript's, stored beside the image (a long history opens fast)
PASTE_AS_FILE_CHARS = 2000  # a paste longer than this becomes a text attachment (LM Studio's rule)
IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp"})
MODES = ("auto", "whole", "retrieved")

CountTokens = Callable[[str], int]
_ids = itertools.count(1)


@dataclass(eq=False)
class TrayItem:
    """One pending image or document. `state`: "reading" | "ready" | "error"."""

    kind: str  # "image" | "document"
    name: str
    path: Path | None = None  # a document's file (a pasted text: its saved copy)
    data: bytes = b""  # an image's bytes as given (stored as they are, sha256-named)
    state: str = "reading"
    error: str = ""
    image: ImageInput | None = None
    thumb: QImage | None = None
    message_thumb: bytes = b""  # PNG, MESSAGE_THUMB_PX
    doc: Extracted | None = None
    tokens: int = 0
    estimated: bool = False  # tokens by a rough rule (no chat model loaded yet)
    mode: str = "auto"  # a document's choice: auto, whole, retrieved
    id: int = field(default_factory=lambda: next(_ids))

    @property
    def pages(self) -> int | None:
        return self.doc.n_pages if self.doc is not None else None

    def label(self) -> str:
        """The chip's text: `report.pdf · 12 pages · 8,412 tokens` / the error."""
        if self.state == "reading":
            return f"{self.name} · reading…"
        if self.state == "error":
            return f"{self.name} · {self.error}"
        if self.kind == "image":
            assert self.image is not None
            return f"{self.name} · {self.image.width} x {self.image.height}"
        bits = [self.name]
        if self.pages:
            bits.append(f"{self.pages} pages")
        bits.append(f"{'~' if self.estimated else ''}{self.tokens:,} tokens")
        return " · ".join(bits)


def is_image_name(name: str) -> bool:
    return Path(name).suffix.lower() in IMAGE_SUFFIXES


def sniff_image(data: bytes) -> bool:
    """Whether `data` starts like an image file (a dropped file without a known suffix)."""
    return data[:8] == b"\x89PNG\r\n\x1a\n" or data[:3] == b"\xff\xd8\xff" or data[:6] in (
        b"GIF87a", b"GIF89a") or (data[:4] == b"RIFF" and data[8:12] == b"WEBP") or data[:2] == b"BM"


def read_image(item: TrayItem) -> TrayItem:
    """The image item decoded (worker thread; a copy: the GUI's item is not touched), or with
    its error."""
    item = dataclasses.replace(item)
    try:
        if not item.data and item.path is not None:
            from ...media.images import MAX_BYTES

            if item.path.stat().st_size > MAX_BYTES:
                raise ImageError(f"{item.name} is {item.path.stat().st_size / (1 << 20):.1f} MiB: images over "
                                 f"{MAX_BYTES >> 20} MiB are refused")
            item.data = item.path.read_bytes()
        item.image = decode_image(item.data, name=item.name)
        full = QImage(item.image.rgb, item.image.width, item.image.height, item.image.width * 3,
                      QImage.Format.Format_RGB888)
        item.thumb = full.scaled(THUMB_PX, THUMB_PX, Qt.AspectRatioMode.KeepAspectRatio,
                                 Qt.TransformationMode.SmoothTransformation).copy()
        item.message_thumb = png_bytes(full.scaled(MESSAGE_THUMB_PX, MESSAGE_THUMB_PX, Qt.AspectRatioMode.KeepAspectRatio,
                                                   Qt.TransformationMode.SmoothTransformation))
        item.state = "ready"
    except OSError as e:
        item.state, item.error = "error", f"cannot be read: {e.strerror or e}"
    except ImageError as e:
        item.state, item.error = "error", _short(str(e), item.name)
    return item


def read_document(item: TrayItem, count: CountTokens | None, pdf_timeout: float = 60.0) -> TrayItem:
    """The document item with its text extracted and its tokens counted (worker thread; a
    copy), or with its error."""
    from ...documents.extract import extract
    from ...documents.sources import whole_text

    assert item.path is not None
    item = dataclasses.replace(item)
    try:
        item.doc = extract(item.path, pdf_timeout=pdf_timeout)
        text = whole_text(item.doc)
        item.tokens, item.estimated = (count(text), False) if count is not None else (estimate_tokens(text), True)
        item.state = "ready"
    except ExtractError as e:
        item.state, item.error = "error", e.reason
    except Exception as e:  # noqa: BLE001 (a tokenizer's failure on odd text: the chip says it)
        item.state, item.error = "error", f"could not be read: {e}"
    return item


def png_bytes(image: QImage) -> bytes:
    """`image` as a PNG file's bytes."""
    buf = QBuffer()
    buf.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buf, "PNG")
    return bytes(buf.data().data())


def estimate_tokens(text: str) -> int:
    """A rough count (about 4 characters a token) where the chat model's tokenizer is not here."""
    return (len(text) + 3) // 4


def _short(message: str, name: str) -> str:
    """An ImageError's sentence without the file name the chip already shows."""
    for prefix in (f"{name} ", f"image {name}: "):
        if message.startswith(prefix):
            return message[len(prefix):]
    return message


def save_pasted_text(text: str, folder: Path) -> Path:
    """A long pasted text as a file (content-addressed, so pasting it twice keeps one copy)."""
    data = text.encode("utf-8")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"pasted-{hashlib.sha256(data).hexdigest()[:12]}.txt"
    if not path.is_file():
        path.write_bytes(data)
    return path


# -- at Send ------------------------------------------------------------------------------------

@dataclass
class PreparedDocs:
    """The attachment parts of a message about to be sent, or the reason it cannot be."""

    parts: list[Part]
    error: str = ""


def resolve_modes(items: Sequence[TrayItem], budget: int) -> dict[int, str]:
    """Whole or retrieved per document, the CLI's rule: every "auto" one goes whole when all
    the whole ones fit `budget` together, else retrieved; a forced choice stays."""
    forced = sum(i.tokens for i in items if i.mode == "whole")
    auto = sum(i.tokens for i in items if i.mode == "auto")
    auto_mode = "whole" if forced + auto <= budget else "retrieved"
    return {i.id: (auto_mode if i.mode == "auto" else i.mode) for i in items}


def prepare_documents(question: str, items: Sequence[TrayItem], count: CountTokens, budget: int,
                      embedder: Callable[[], Any]) -> PreparedDocs:
    """The attachment parts (worker thread): a whole document's text, or the chunks retrieved
    for `question` (the embedder is opened only then)."""
    from ...documents.sources import Attachments, prepare_turn, whole_text

    modes = resolve_modes(items, budget)
    parts: dict[int, Part] = {}
    retrieved = [i for i in items if modes[i.id] == "retrieved"]
    for i in items:
        if modes[i.id] == "whole":
            assert i.doc is not None
            parts[i.id] = Part(ATTACHMENT, whole_text(i.doc), name=i.name, meta=_doc_meta(i, "whole"))
    if retrieved:
        try:
            emb = embedder()
        except Exception as e:  # noqa: BLE001 (no embedder: said, the message stays)
            return PreparedDocs([], f"{retrieved[0].name} is too long to go whole and the embedding model "
                                    f"for retrieval could not be opened: {e}")
        whole_budget = max(0, budget - sum(i.tokens for i in items if modes[i.id] == "whole"))
        att = Attachments([i.path for i in retrieved if i.path is not None], emb, count, whole_budget,
                          modes={str(i.path): "retrieved" for i in retrieved},
                          docs={str(i.path): i.doc for i in retrieved if i.path is not None and i.doc is not None})
        # The CLI's turn: the last retrieved passages dropped while they do not fit.
        prepared = prepare_turn(question, att, None, (), count, budget=whole_budget)
        for i, a in zip(retrieved, att.items):
            chunks = [{"page": s.page, "text": s.text} for s in prepared.sources
                      if s.mode == "retrieved" and Path(s.path).resolve() == a.path.resolve()]
            meta = _doc_meta(i, "retrieved") | {"chunks": a.chunks, "used": len(chunks), "sources": chunks,
                                                "prompt_tokens": sum(count(c["text"]) for c in chunks)}
            if a.error:
                return PreparedDocs([], f"{i.name}: {a.error}")
            parts[i.id] = Part(ATTACHMENT, "", name=i.name, meta=meta)
    return PreparedDocs([parts[i.id] for i in items])


def _doc_meta(item: TrayItem, mode: str) -> dict[str, Any]:
    kind = item.doc.kind if item.doc is not None else "text"
    meta: dict[str, Any] = {"kind": kind, "tokens": item.tokens, "mode": mode}
    if item.pages:
        meta["pages"] = item.pages
    if item.path is not None:
        meta["path"] = str(item.path)
    return meta


def image_part(item: TrayItem, store: ImageStore) -> Part:
    """An image item stored (content-addressed) and as the message's part."""
    assert item.image is not None
    path = store.put(item.data, item.image.mime)
    if item.message_thumb:
        store.put_thumb(item.image.sha256, item.message_thumb)
    store.remember(item.image)
    return Part(IMAGE, name=item.name, meta={
        "sha256": item.image.sha256, "mime": item.image.mime, "size": len(item.data),
        "width": item.image.width, "height": item.image.height, "file": path.name})


# -- the worker ---------------------------------------------------------------------------------

class AttachWorker(QObject):
    """One thread for every pane's reading and preparing (PDFium's child process is per call);
    `done(token, result)` is emitted on the GUI thread. Create it in the GUI thread."""

    done = Signal(object, object)

    def __init__(self) -> None:
        super().__init__()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="attach")
        self._embedder: Any = None
        self._lock = threading.Lock()

    def run(self, token: Any, fn: Callable[..., Any], *args: Any) -> Future:
        """Run `fn(*args)` on the worker; `done(token, result)` follows on the GUI thread."""
        future = self._pool.submit(fn, *args)
        future.add_done_callback(lambda f: self.done.emit(token, _outcome(f)))
        return future

    def embedder(self) -> Any:
        """The embedding model (opened once, on the worker thread, at the first retrieval)."""
        with self._lock:
            if self._embedder is None:
                from ...documents.embedder import open_embedder

                self._embedder = open_embedder(None, threads=2)  # fetched first if missing, as the CLI does
            return self._embedder

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _outcome(future: Future) -> Any:
    if future.cancelled():
        return None
    exc = future.exception()
    return exc if exc is not None else future.result()


_worker: AttachWorker | None = None


def attach_worker() -> AttachWorker:
    """The process's AttachWorker (made on first use, in the GUI thread)."""
    global _worker
    if _worker is None:
        _worker = AttachWorker()
    return _worker


def document_kind(name: str) -> str | None:
    """The document kind of a file name (None: not a document this app reads)."""
    return kind_of(Path(name))
