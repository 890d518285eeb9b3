"""The transcript's actions: its links (ts:<action>:<message id>, a code block's Copy
ts:code:<n>, web links to the system browser on click), its context menu, and Copy of a
selection (formulas as their LaTeX). A mixin of `transcript.Transcript`."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QMimeData, QPoint, QUrl
from PySide6.QtGui import QContextMenuEvent, QDesktopServices, QGuiApplication

from ..render.rich_text import formula_at, selection_mime
from ..render.sources_view import handle_source_link

MENU_LABELS = {
    "copy": "Copy Message (Markdown)", "edit": "Edit and Resend…", "delete": "Delete Message Pair…",
    "regenerate": "Regenerate Reply", "continue": "Continue Reply", "prev": "Previous Alternative",
    "next": "Next Alternative",
}


class TranscriptActions:
    """See the module docstring (self: a Transcript)."""

    _rich: Any

    def copy_message(self: Any, message_id: int) -> bool:
        """Put the message's Markdown source on the clipboard."""
        entry = self.entry_for_message(message_id)
        if entry is None:
            return False
        QGuiApplication.clipboard().setText(entry.text)
        return True

    def _anchor_clicked(self: Any, url: QUrl) -> None:
        if url.scheme() != "ts":
            QDesktopServices.openUrl(url)
            return
        action, _, mid = url.path().partition(":")
        if action in ("source", "cite"):  # a reply's source: its file (ui.render.sources_view)
            handle_source_link(self, mid)
            return
        if not mid.isdigit():
            return
        if action == "image":  # a user message's thumbnail: ts:image:<message id>#<n>
            self.imageRequested.emit(int(mid), int(url.fragment()) if url.fragment().isdigit() else 0)
        elif action == "code":  # a code block's Copy link: its exact code
            if int(mid) < len(self._rich.codes):
                QGuiApplication.clipboard().setText(self._rich.codes[int(mid)])
        elif action == "copy":
            self.copy_message(int(mid))
        elif action == "think":  # open / close a reply's reasoning (re-rendered in place)
            entry = self.entry_for_message(int(mid))
            if entry is not None and self._streaming is None:
                entry.reasoning_open = not entry.reasoning_open
                bar = self.verticalScrollBar().value()
                self.set_entries(list(self._entries))
                self.verticalScrollBar().setValue(bar)
        else:
            self.actionRequested.emit(action, int(mid))

    def context_actions(self: Any, pos: QPoint) -> list[tuple[str, object]]:
        """The message actions the context menu offers at viewport `pos`: (label, callback)."""
        position = self.cursorForPosition(pos).position()
        out: list[tuple[str, object]] = []
        code = self.code_block_at(position)
        if code is not None:
            out.append(("Copy Code Block", lambda: QGuiApplication.clipboard().setText(code)))
        formula = formula_at(self.document(), position, self._rich)
        if formula is not None:
            out.append(("Copy Formula (LaTeX)", lambda: QGuiApplication.clipboard().setText(formula)))
        entry = self.entry_at(position)
        if entry is not None and entry.message_id is not None and entry is not self._streaming:
            mid = entry.message_id
            names = ["copy"] + [a for a in entry.actions if a != "copy"]
            names += list(self.live_actions(mid)) if self.live_actions else []
            if entry.variant[1] > 1:
                names += ["prev", "next"]
            for name in names:
                if name == "copy":
                    out.append((MENU_LABELS[name], lambda: self.copy_message(mid)))
                else:
                    out.append((MENU_LABELS.get(name, name), lambda n=name: self.actionRequested.emit(n, mid)))
        return out

    def contextMenuEvent(self: Any, event: QContextMenuEvent) -> None:  # noqa: N802 (Qt override)
        """The standard menu (Copy, Select All) plus the message actions under the pointer."""
        menu = self.createStandardContextMenu(event.pos())
        extra = self.context_actions(event.pos())
        if extra:
            menu.addSeparator()
            for label, callback in extra:
                menu.addAction(label, callback)
        menu.exec(event.globalPos())
        menu.deleteLater()

    def createMimeDataFromSelection(self: Any) -> QMimeData:  # noqa: N802 (Qt override)
        """Copy: the selected text with each formula as its LaTeX source."""
        return selection_mime(self.textCursor(), self._rich)
