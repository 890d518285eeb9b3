"""Attach things to the message being written (mixed into ConversationPane).

Two buttons left of the input, as Jan and LM Studio have them: **Image** (PNG, JPEG, WebP, a
GIF's first frame; greyed, with the reason in its tooltip, when the model has no vision
projector) and **Attach** (PDF, Markdown, text, code, HTML). Files dropped anywhere on the pane
and pasted into the input go by their content: images to images, documents to documents; a
pasted image is one image; a pasted text longer than `PASTE_AS_FILE_CHARS` becomes a text
attachment (LM Studio's rule). Each goes into the tray above the input (`attach_tray`) and is
read on the attach worker (`attach_items`); a bad file is the error on its chip and nothing
else changes.

At Send the tray's items become the user message's parts: images stored content-addressed
(`media.image_store`), documents whole or retrieved as the CLI decides (`attach_items.
prepare_documents`, on the worker). The tray empties when the turn starts and its items come
back if the turn fails, with the typed text.
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any

from PySide6.QtCore import QEvent, QMimeData, QObject
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QToolButton, QVBoxLayout

from ...documents.extract import SUPPORTED
from ...media.image_store import ImageStore
from .attach_items import (
    IMAGE_SUFFIXES,
    PASTE_AS_FILE_CHARS,
    PreparedDocs,
    TrayItem,
    attach_worker,
    document_kind,
    estimate_tokens,
    image_part,
    is_image_name,
    png_bytes,
    prepare_documents,
    read_document,
    read_image,
    resolve_modes,
    save_pasted_text,
    sniff_image,
)
from .attach_tray import AttachTray
from .context import usage_from_messages
from ..render.message_media import ImageViewer, media_items

UNKNOWN_CONTEXT = 8192  # a remote engine that does not say its context: a common size
ROOM = 96  # tokens kept for the template's own text around the sources (as the CLI's)
IMAGE_FILTER = "Images (" + " ".join(f"*{s}" for s in sorted(IMAGE_SUFFIXES)) + ")"
DOC_FILTER = "Documents (" + " ".join(f"*{s}" for s in sorted(SUPPORTED)) + ")"


class PaneAttach:
    """The attachments half of ConversationPane (see the module docstring)."""

    def _build_attach(self, footer: QVBoxLayout, input_row: QHBoxLayout) -> None:
        self.image_store = ImageStore()
        self._sent_items: list[TrayItem] = []
        self._preparing: int | None = None  # the token of a Send waiting for its documents
        self.attach_tray = AttachTray(self)  # type: ignore[arg-type]
        footer.addWidget(self.attach_tray)
        self.attach_tray.changed.connect(self._show_auto_modes)
        self.image_button = QToolButton(self)  # type: ignore[arg-type]
        self.image_button.setObjectName("imageButton")
        self.image_button.setText("Image")
        self.image_button.clicked.connect(self.choose_images)
        self.attach_button = QToolButton(self)  # type: ignore[arg-type]
        self.attach_button.setObjectName("attachButton")
        self.attach_button.setText("Attach")
        self.attach_button.setToolTip("Attach documents: PDF, Markdown, text, code, HTML (or drop them here)")
        self.attach_button.clicked.connect(self.choose_documents)
        buttons = QVBoxLayout()
        buttons.setSpacing(2)
        buttons.addWidget(self.image_button)
        buttons.addWidget(self.attach_button)
        input_row.insertLayout(0, buttons)
        self.input.media_handler = self.take_mime  # type: ignore[attr-defined]
        self.setAcceptDrops(True)  # type: ignore[attr-defined]
        for target in (self.transcript.viewport(), self.input.viewport()):  # type: ignore[attr-defined]
            target.installEventFilter(self)  # type: ignore[arg-type]
        attach_worker().done.connect(self._worker_done)
        self.transcript.imageRequested.connect(self.open_image)  # type: ignore[attr-defined]
        self.viewer: ImageViewer | None = None
        self.update_attach_buttons()

    def open_image(self, message_id: int, index: int) -> None:
        """A thumbnail was clicked: its message's images in the viewer, that one shown."""
        message = next((m for m in self.tree.all if m.id == message_id), None)  # type: ignore[attr-defined]
        if message is None:
            return
        self.viewer = ImageViewer(media_items(message.parts, self.image_store), index, self)  # type: ignore[arg-type]
        self.viewer.open()

    # -- vision -----------------------------------------------------------------------------

    def vision_refusal(self) -> str | None:
        """Why the model cannot take images (None: it can, or a remote server will say)."""
        bridge = self._bridge  # type: ignore[attr-defined]
        if getattr(bridge, "is_remote", False):  # a PaneEngine on a remote source (a property)
            return None
        info = getattr(bridge, "model_info", None) or {}
        if not info:
            return "no model is loaded yet"
        if info.get("vision"):
            return None
        label = str(info.get("vision_label") or "")
        reason = label[3:].strip(" ()") if label.startswith("no") else label
        name = info.get("file_name") or info.get("name") or "this model"
        return f"{name} takes no images: {reason or 'it has no vision projector (mmproj)'}"

    def update_attach_buttons(self, *_: Any) -> None:
        """Grey the Image button (with the reason) when the model has no vision."""
        refusal = self.vision_refusal()
        self.image_button.setEnabled(refusal is None)
        self.image_button.setToolTip(
            "Attach images: PNG, JPEG, WebP, GIF (or drop / paste them here)" if refusal is None
            else f"Images are off: {refusal}. Open a vision model with its mmproj file beside it.")

    # -- adding -----------------------------------------------------------------------------

    def choose_images(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Attach images", "", IMAGE_FILTER)  # type: ignore[arg-type]
        self.add_files([Path(p) for p in paths])

    def choose_documents(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Attach documents", "", DOC_FILTER)  # type: ignore[arg-type]
        self.add_files([Path(p) for p in paths])

    def add_files(self, paths: list[Path]) -> list[TrayItem]:
        """Add files to the tray, each by what it is; the items (read in the background)."""
        added = []
        for path in paths:
            if is_image_name(path.name) or (document_kind(path.name) is None and _looks_like_image(path)):
                added.append(self._add_image(TrayItem("image", path.name, path=path)))
            else:
                added.append(self._add_document(TrayItem("document", path.name, path=path)))
        return added

    def add_image_bytes(self, data: bytes, name: str) -> TrayItem:
        return self._add_image(TrayItem("image", name, data=data))

    def add_text(self, text: str) -> TrayItem:
        """A pasted text as a text attachment (saved beside the conversations)."""
        path = save_pasted_text(text, self.image_store.folder.parent / "pasted")
        return self._add_document(TrayItem("document", path.name, path=path))

    def _add_image(self, item: TrayItem) -> TrayItem:
        refusal = self.vision_refusal()
        if refusal is not None:
            item.state, item.error = "error", refusal
            self.attach_tray.add(item)
            return item
        self.attach_tray.add(item)
        attach_worker().run((self, item.id), read_image, item)
        return item

    def _add_document(self, item: TrayItem) -> TrayItem:
        if document_kind(item.name) is None:
            item.state = "error"
            item.error = (f"{Path(item.name).suffix or 'a file without an extension'} is not a supported type "
                          "(images: PNG, JPEG, WebP, GIF; documents: PDF, Markdown, text, code, HTML)")
            self.attach_tray.add(item)
            return item
        self.attach_tray.add(item)
        attach_worker().run((self, item.id), read_document, item, self._chat_counter())
        return item

    def take_mime(self, mime: QMimeData) -> bool:
        """A paste or drop: files, an image, or a long text go to the tray (True); else False."""
        if mime.hasUrls() and any(u.isLocalFile() for u in mime.urls()):
            self.add_files([Path(u.toLocalFile()) for u in mime.urls() if u.isLocalFile()])
            return True
        if mime.hasImage():
            image = mime.imageData()
            if isinstance(image, QImage) and not image.isNull():
                self.add_image_bytes(png_bytes(image), "pasted image.png")
                return True
        if mime.hasText() and len(mime.text()) > PASTE_AS_FILE_CHARS:
            self.add_text(mime.text())
            return True
        return False

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt override)
        """Files dropped on the transcript or the input go to the tray."""
        kind = event.type()
        if kind in (QEvent.Type.DragEnter, QEvent.Type.DragMove, QEvent.Type.Drop):
            mime = event.mimeData()  # type: ignore[attr-defined]
            if mime is not None and (mime.hasUrls() or mime.hasImage()):
                event.acceptProposedAction()  # type: ignore[attr-defined]
                if kind == QEvent.Type.Drop:
                    self.take_mime(mime)
                return True
        return super().eventFilter(watched, event)  # type: ignore[misc]

    def dragEnterEvent(self, event: Any) -> None:  # noqa: N802 (Qt override)
        if event.mimeData().hasUrls() or event.mimeData().hasImage():
            event.acceptProposedAction()

    def dropEvent(self, event: Any) -> None:  # noqa: N802 (Qt override)
        if self.take_mime(event.mimeData()):
            event.acceptProposedAction()

    # -- the worker's answers ------------------------------------------------------------------

    def _worker_done(self, token: Any, result: Any) -> None:
        if not isinstance(token, tuple) or token[0] is not self:
            return
        if token[1] == "send":
            if token[2] == self._preparing:  # (not a Send stopped meanwhile)
                self._documents_ready(result)
        elif isinstance(result, TrayItem):
            self.attach_tray.update(result)
        else:  # the reader itself failed (a bug, or no memory): the chip says it
            item = next((i for i in self.attach_tray.items() if i.id == token[1]), None)
            if item is not None:
                self.attach_tray.update(dataclasses.replace(item, state="error", error=f"could not be read: {result}"))

    def _chat_counter(self) -> Any:
        builder = self._builder()  # type: ignore[attr-defined]
        tokenizer = getattr(builder, "tokenizer", None)
        if tokenizer is None:
            return None
        return lambda text: len(tokenizer.encode(text))

    # -- Send --------------------------------------------------------------------------------

    @property
    def preparing_attachments(self) -> bool:
        """A Send is waiting for its documents (whole or retrieved) on the worker."""
        return getattr(self, "_preparing", None) is not None

    def _stop_preparing(self) -> bool:
        """Stop during the documents' preparation: nothing is sent, nothing is lost."""
        if self._preparing is None:
            return False
        self._preparing, self._prepared_plan = None, None
        self._set_state("stopped", "before sending")  # type: ignore[attr-defined]
        self._update_actions()  # type: ignore[attr-defined]
        return True

    def attachments_pending(self) -> bool:
        return bool(self.attach_tray.items())

    def send_with_attachments(self, plan: Any) -> bool:
        """Start `plan` with the tray's items as the user message's parts (documents prepared
        on the worker first); False when it cannot go (said in the pane, nothing lost)."""
        if self._preparing is not None:
            return False
        items = self.attach_tray.items()
        if not items:
            return self._start_turn(plan)  # type: ignore[attr-defined]
        problem = self._send_problem(items)
        if problem:
            self._set_state("error", problem)  # type: ignore[attr-defined]
            self.state_label.setToolTip(problem)  # type: ignore[attr-defined]
            return False
        images = [image_part(i, self.image_store) for i in items if i.kind == "image"]
        plan = dataclasses.replace(plan, user_parts=(*plan.user_parts, *images))
        docs = [i for i in items if i.kind == "document"]
        if not docs:
            return self._start_turn(plan)  # type: ignore[attr-defined]
        count = self._chat_counter() or estimate_tokens  # a remote engine's tokenizer is not here
        worker = attach_worker()
        self._preparing = token = next(_sends)
        self._prepared_plan = plan
        self._set_state("queued", "reading the attachments")  # type: ignore[attr-defined]
        self._update_actions()  # type: ignore[attr-defined]
        worker.run((self, "send", token), prepare_documents, plan.user_text or "", docs, count,
                   self._documents_budget(plan, count), worker.embedder)
        return True

    def _show_auto_modes(self) -> None:
        """Each document chip on "auto" says what it would be now: whole or retrieved."""
        docs = [i for i in self.attach_tray.items() if i.kind == "document" and i.state == "ready"]
        if not docs:
            return
        plan = self.tree.plan_send(self.input.toPlainText())  # type: ignore[attr-defined]
        modes = resolve_modes(docs, self._documents_budget(plan, self._chat_counter() or estimate_tokens))
        for item in docs:
            chip = self.attach_tray.chip(item.id)
            if chip is not None:
                chip.show_resolved(modes[item.id])

    def _send_problem(self, items: list[TrayItem]) -> str:
        if any(i.state == "reading" for i in items):
            return "the attachments are still being read"
        bad = [i.name for i in items if i.state == "error"]
        if bad:
            return f"remove what could not be attached ({', '.join(bad)})"
        if any(i.kind == "image" for i in items):
            refusal = self.vision_refusal()
            if refusal is not None:
                return refusal
        return ""

    def _documents_budget(self, plan: Any, count: Any) -> int:
        """The tokens the documents may take: the context less the reply's budget, the
        conversation so far, the question and some room for the template."""
        used = usage_from_messages(list(plan.history), self._turn_model_id_now()) or 0
        max_new = int(self._settings.get("max_new_tokens") or 512)  # type: ignore[attr-defined]
        context = int(self._bridge.max_context or UNKNOWN_CONTEXT)  # type: ignore[attr-defined]
        return max(0, context - max_new - ROOM - used - count(plan.user_text or ""))

    def _turn_model_id_now(self) -> str:
        from .turns import model_identity

        return model_identity(self._bridge.model_info or {})  # type: ignore[attr-defined]

    def _documents_ready(self, result: Any) -> None:
        plan = self._prepared_plan
        self._preparing, self._prepared_plan = None, None
        if isinstance(result, Exception) or not isinstance(result, PreparedDocs) or result.error:
            message = result.error if isinstance(result, PreparedDocs) else f"the documents could not be prepared: {result}"
            self.transcript.append_error(f"Not sent: {message}. Your message and attachments are still here.")  # type: ignore[attr-defined]
            self._set_state("error", "attachments")  # type: ignore[attr-defined]
            self._update_actions()  # type: ignore[attr-defined]
            return
        self._start_turn(dataclasses.replace(plan, user_parts=(*plan.user_parts, *result.parts)))  # type: ignore[attr-defined]

    def _attachments_sent(self) -> None:
        self._sent_items = self.attach_tray.take_all()

    def _attachments_back(self) -> None:
        self.attach_tray.add_all(self._sent_items)
        self._sent_items = []


_sends = itertools.count(1)


def _looks_like_image(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return sniff_image(f.read(16))
    except OSError:
        return False
