"""The Conversation menu's message actions and exports (kept out of main_window.py).

    Regenerate Reply        Ctrl+R              a new reply, the old one kept as an alternative
    Continue Reply          Ctrl+Shift+Enter    resume a stopped / cut-off / interrupted reply
    Edit Last Message…      Ctrl+E              the last user message into the input; Enter resends
    Copy Last Reply         Ctrl+Shift+C        its Markdown source
    Previous / Next Alternative of the last reply   Ctrl+Alt+Left / Right
    Delete Last Message Pair…
    Export as Markdown… / HTML… / JSON…         a file dialog, then the file (HTML: as the window
                                                draws it, colours and formulas included)
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

from PySide6.QtCore import QStandardPaths
from PySide6.QtWidgets import QFileDialog, QMenu, QMessageBox

from ..conversations.export import (
    ExportError,
    conversation_json,
    conversation_markdown,
    to_json_text,
    write_text,
)
from .render.html_export import conversation_html

PaneGetter = Callable[[], Any]

# The Conversation menu's actions that act on the current pane (greyed while they do nothing).
PANE_ACTIONS = frozenset({
    "actionStop", "actionRename", "actionDelete", "actionRegenerate", "actionContinue",
    "actionEditLast", "actionCopyReply", "actionPrevAlternative", "actionNextAlternative",
    "actionDeletePair", "actionExportMarkdown", "actionExportHtml", "actionExportJson",
})


def add_message_actions(window: Any, menu: QMenu, pane: PaneGetter) -> None:
    """Add the message actions to `menu` (window._action makes each QAction)."""

    def on_pane(method: str, *args: Any) -> Callable[[], None]:
        def run() -> None:
            p = pane()
            if p is not None:
                getattr(p, method)(*args)
        return run

    def on_last(method: str, role: str, *args: Any) -> Callable[[], None]:
        def run() -> None:
            p = pane()
            last = None if p is None else next((m for m in reversed(p.tree.path) if m.role == role), None)
            if last is not None:
                getattr(p, method)(last.id, *args)
        return run

    window._action(menu, "&Regenerate Reply", on_pane("regenerate"), "Ctrl+R", "actionRegenerate")
    cont = window._action(menu, "C&ontinue Reply", on_pane("continue_reply"), "Ctrl+Shift+Return", "actionContinue")
    cont.setShortcuts([cont.shortcut(), "Ctrl+Shift+Enter"])
    window._action(menu, "&Edit Last Message…", on_last("begin_edit", "user"), "Ctrl+E", "actionEditLast")
    window._action(menu, "&Copy Last Reply", on_pane("copy_last_reply"), "Ctrl+Shift+C", "actionCopyReply")
    window._action(menu, "Previous &Alternative", on_last("switch_alternative", "assistant", -1),
                   "Ctrl+Alt+Left", "actionPrevAlternative")
    window._action(menu, "Next Alter&native", on_last("switch_alternative", "assistant", 1),
                   "Ctrl+Alt+Right", "actionNextAlternative")
    window._action(menu, "Delete &Last Message Pair…", on_last("delete_pair", "user"), None, "actionDeletePair")
    menu.addSeparator()
    window._action(menu, "Export as &Markdown…", lambda: export_current(window, "md"), None, "actionExportMarkdown")
    window._action(menu, "Export as &HTML…", lambda: export_current(window, "html"), None, "actionExportHtml")
    window._action(menu, "Export as &JSON…", lambda: export_current(window, "json"), None, "actionExportJson")


def validate(menu: QMenu, pane: Any) -> None:
    """As the menu opens: grey the actions that do nothing for `pane` now (no reply to
    regenerate, nothing generating to stop; every pane action without a pane)."""
    state = pane.menu_state() if pane is not None else {}
    for action in menu.actions():
        name = action.objectName()
        if name in PANE_ACTIONS:
            action.setEnabled(state.get(name, pane is not None))  # Rename, Delete: any pane


def enable_all(menu: QMenu) -> None:
    """As the menu closes: every action enabled again, so its shortcut works whatever the pane
    became meanwhile (each action checks its pane itself and does nothing when it does not apply)."""
    for action in menu.actions():
        if action.objectName() in PANE_ACTIONS:
            action.setEnabled(True)


def watch(menu: QMenu, pane: PaneGetter) -> None:
    """Validate `menu` against the current pane each time it opens."""
    menu.aboutToShow.connect(lambda: validate(menu, pane()))
    menu.aboutToHide.connect(lambda: enable_all(menu))


def export_text(window: Any, conversation_id: str, kind: str) -> str:
    """The export of one conversation ("md", "html" or "json")."""
    if kind == "md":
        return conversation_markdown(window.store, conversation_id)
    if kind == "html":
        pane = window.area.current_pane()
        if pane is None or pane.conversation_id != conversation_id:
            raise ExportError(f"conversation {conversation_id} is not on screen")
        return conversation_html(pane.conversation.title, pane.transcript.entries, pane.transcript.palette())
    return to_json_text(conversation_json(window.store, conversation_id, model=window.bridge.model_info))


def export_current(window: Any, kind: str, path: str | None = None) -> str | None:
    """Export the current pane's conversation to `path` (None: ask with a file dialog).
    Returns the path written, or None (cancelled or failed: said in a message box)."""
    pane = window.area.current_pane()
    if pane is None:
        return None
    if path is None:
        stem = re.sub(r"[^\w\- ]+", "", pane.conversation.title).strip() or "conversation"
        label = {"md": "Markdown (*.md)", "html": "HTML (*.html)"}.get(kind, "JSON (*.json)")
        folder = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.DocumentsLocation)
        start = str(Path(folder) / f"{stem}.{kind}") if folder else f"{stem}.{kind}"
        path, _ = QFileDialog.getSaveFileName(window, "Export Conversation", start, label)
        if not path:
            return None
    try:
        write_text(path, export_text(window, pane.conversation_id, kind))
    except (OSError, ExportError) as e:
        box = QMessageBox(QMessageBox.Icon.Warning, "Export", f"The conversation could not be exported: {e}",
                          QMessageBox.StandardButton.Ok, window)
        box.setObjectName("warningBox")
        box.open()
        return None
    window.statusBar().showMessage(f"Exported to {path}", 5000)
    return path
