"""A pane's message actions (mixed into ConversationPane): Regenerate, Continue, Edit and
resend, the `‹ 2/3 ›` switch between kept alternatives, Delete a message pair, Copy.

The conversation logic (what the prompt is, where the reply goes) is `conversation.TurnPlan`;
here it is only asked for and shown. Every action is refused while the pane's turn runs (the
store's tree must not change under a streaming reply).
"""

from __future__ import annotations

import sqlite3
from typing import Any, Sequence

from PySide6.QtGui import QGuiApplication, QTextCursor
from PySide6.QtWidgets import QMessageBox

from ...conversations.actions import ConversationTree, can_continue
from ...conversations.store import INTERRUPTED, StoredMessage
from ...service import TurnStats
from ..formatting import stats_line
from ..render.message_media import media_items
from ..render.reply_parts import apply_parts, apply_split
from ..render.sources_view import apply_sources
from .transcript import Entry, Transcript


def reply_footer(message: StoredMessage) -> tuple[str, str]:
    """(stats line, badge) under a saved reply. A continued reply's figures are combined
    (see conversation.combine_stats) and say how many runs made it."""
    stats = message.stats or {}
    if message.stop_reason == INTERRUPTED and not message.content:
        return "the app stopped before the first token · Regenerate (Ctrl+R) answers again", "interrupted"
    if message.stop_reason == INTERRUPTED:
        n = int(stats.get("new_tokens") or 0)
        return (f"{n} tok saved before the app stopped · Continue (Ctrl+Shift+Enter) resumes it",
                "interrupted")
    if not stats:
        return "", ""
    badge = "token limit" if message.stop_reason == "max_tokens" else ""
    line = stats_line(TurnStats.from_json(stats), with_reason=not badge)  # the badge opens the line
    runs = stats.get("runs") or []
    if len(runs) > 1:
        line += f" · {len(runs)} runs (continued; figures combined)"
    return line, badge


class MessageActions:
    """The action half of ConversationPane: it provides the tree, transcript, store, input."""

    tree: ConversationTree
    transcript: Transcript
    messages: list[StoredMessage]
    editing: StoredMessage | None

    # -- rendering ---------------------------------------------------------------------------

    def entry_for(self, message: StoredMessage) -> Entry:
        """How a saved message is shown, with its alternatives and its action links."""
        footer, badge = ("", "")
        actions: tuple[str, ...] = ("copy",)
        if message.role == "assistant":
            footer, badge = reply_footer(message)
        elif message.role == "user":
            actions = ("copy", "edit", "delete")
        entry = Entry(message.role, message.content, footer, stopped=message.stop_reason == "cancelled",
                      message_id=message.id, variant=self.tree.variant(message), actions=actions, badge=badge)
        if message.role == "user" and message.parts:
            entry.media = media_items(message.parts, self.image_store)  # type: ignore[attr-defined]
        if message.role == "assistant":
            info = getattr(getattr(self, "_bridge", None), "model_info", None) or {}
            apply_split(entry, info.get("chat_template"), message.stats)
            apply_parts(entry, message.parts, info.get("chat_template"))
            apply_sources(entry, message.parts)
        return entry

    def show_messages(self, messages: Sequence[StoredMessage]) -> None:
        """Render `messages` (a branch) from scratch."""
        self.transcript.set_entries([self.entry_for(m) for m in messages])

    def live_actions(self, message_id: int) -> tuple[str, ...]:
        """Regenerate / Continue for the last reply (the context menu asks as it opens)."""
        last = self.tree.last
        if last is None or last.id != message_id or self.busy:  # type: ignore[attr-defined]
            return ()
        out = ("regenerate",)
        return out + ("continue",) if self._can_continue_now() else out

    def continue_supported(self) -> bool:
        """The local engine continues any reply; a remote one only a server known to honour an
        open final assistant message (PaneEngine.continue_unsupported says why not)."""
        return self._continue_refusal() is None

    def _can_regenerate_now(self) -> bool:
        return not self.busy and self.tree.last is not None  # type: ignore[attr-defined]

    def _can_continue_now(self) -> bool:
        return not self.busy and can_continue(self.tree.last) and self.continue_supported()  # type: ignore[attr-defined]

    def _continue_refusal(self) -> str | None:
        engine = self._bridge  # type: ignore[attr-defined]
        why = getattr(engine, "continue_unsupported", None)
        if callable(why):
            return why()
        return "Continue is not available on this engine." if getattr(engine, "is_remote", False) else None

    def _update_actions(self) -> None:
        """Enable the pane's Regenerate / Continue buttons for what the branch allows."""
        last = self.tree.last
        self.regenerate_button.setEnabled(self._can_regenerate_now())  # type: ignore[attr-defined]
        self.regenerate_button.setText("Answer" if last is not None and last.role == "user" else "Regenerate")  # type: ignore[attr-defined]
        self.continue_button.setEnabled(self._can_continue_now())  # type: ignore[attr-defined]
        refusal = self._continue_refusal()
        self.continue_button.setToolTip(refusal or "Resume the last reply where it stopped (Ctrl+Shift+Enter)")  # type: ignore[attr-defined]

    def menu_state(self) -> dict[str, bool]:
        """Which Conversation-menu actions (by object name) apply to this pane now: the menu
        greys the others as it opens (`conversation_menu.validate`)."""
        idle = not self.busy  # type: ignore[attr-defined]
        path = self.tree.path
        last_user = next((m for m in reversed(path) if m.role == "user"), None)
        last_reply = next((m for m in reversed(path) if m.role == "assistant"), None)

        def has_sibling(step: int) -> bool:
            return idle and last_reply is not None and self.tree.sibling(last_reply.id, step) is not None

        return {
            "actionStop": not idle,
            "actionRegenerate": self._can_regenerate_now(),
            "actionContinue": self._can_continue_now(),
            "actionEditLast": idle and last_user is not None,
            "actionCopyReply": last_reply is not None,
            "actionPrevAlternative": has_sibling(-1),
            "actionNextAlternative": has_sibling(1),
            "actionDeletePair": idle and last_user is not None,
            "actionExportMarkdown": bool(path),
            "actionExportHtml": bool(path),
            "actionExportJson": bool(path),
        }

    # -- actions -----------------------------------------------------------------------------

    def regenerate(self) -> bool:
        """A new reply to the last user message; the old one is kept as an alternative."""
        plan = None if self.busy else self.tree.plan_regenerate()  # type: ignore[attr-defined]
        return plan is not None and self._start_turn(plan)  # type: ignore[attr-defined]

    def continue_reply(self) -> bool:
        """Resume the last reply where it stopped (Stop, token limit, or a crash)."""
        if self.busy or not self.continue_supported():  # type: ignore[attr-defined]
            return False
        plan = self.tree.plan_continue()
        return plan is not None and self._start_turn(plan)  # type: ignore[attr-defined]

    def begin_edit(self, message_id: int) -> bool:
        """Put a user message into the input to be edited; Send resends it (Esc cancels)."""
        message = next((m for m in self.tree.path if m.id == message_id and m.role == "user"), None)
        if message is None or self.busy:  # type: ignore[attr-defined]
            return False
        self.editing = message
        self.input.setPlainText(message.content)  # type: ignore[attr-defined]
        self.input.moveCursor(QTextCursor.MoveOperation.End)  # type: ignore[attr-defined]
        self.input.setFocus()  # type: ignore[attr-defined]
        self.edit_banner.setText("Editing an earlier message: Enter resends it and the turns after it are "  # type: ignore[attr-defined]
                                 "kept as a branch (‹ › on the message). Esc cancels.")
        self.edit_banner.setVisible(True)  # type: ignore[attr-defined]
        return True

    def cancel_edit(self) -> bool:
        """Leave edit mode (the input is cleared); False when not editing."""
        if self.editing is None:
            return False
        self.editing = None
        self.edit_banner.setVisible(False)  # type: ignore[attr-defined]
        self.input.clear()  # type: ignore[attr-defined]
        return True

    def _send_edit(self, text: str) -> bool:
        assert self.editing is not None
        plan = self.tree.plan_edit(self.editing.id, text)
        if plan is None:
            self.cancel_edit()
            return False
        self.editing = None
        self.edit_banner.setVisible(False)  # type: ignore[attr-defined]
        return self.send_with_attachments(plan)  # type: ignore[attr-defined]

    def switch_alternative(self, message_id: int, step: int) -> bool:
        """Show the previous (-1) / next (+1) alternative of a message (saved at once)."""
        if self.busy:  # type: ignore[attr-defined]
            return False
        try:
            changed = self.tree.switch(message_id, step)
        except sqlite3.Error as e:
            self.transcript.append_error(f"Could not switch: {e}")
            return False
        if changed:
            self._branch_changed()
        return changed

    def delete_pair(self, message_id: int, *, confirm: bool = True) -> bool:
        """Delete a user message and its reply (the turns after them stay)."""
        message = next((m for m in self.tree.path if m.id == message_id), None)
        if message is not None and message.role == "assistant":
            message = next((m for m in self.tree.path if m.id == message.parent_id), None)
        if message is None or message.role != "user" or self.busy:  # type: ignore[attr-defined]
            return False
        if confirm:
            box = QMessageBox(QMessageBox.Icon.Question, "Delete message pair",
                              "Delete this message and its reply (with any alternatives of that reply)? "
                              "The turns after them stay.",
                              QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel, self)  # type: ignore[arg-type]
            box.setObjectName("deletePairBox")
            box.accepted.connect(lambda: self.delete_pair(message.id, confirm=False))
            box.open()
            self.delete_box = box
            return False
        try:
            self._store.delete_exchange(message.id)  # type: ignore[attr-defined]
        except sqlite3.Error as e:
            self.transcript.append_error(f"Could not delete the messages: {e}")
            return False
        self.tree.reload()
        self._branch_changed()
        return True

    def copy_last_reply(self) -> bool:
        """Put the last reply's Markdown source on the clipboard."""
        last = next((m for m in reversed(self.tree.path) if m.role == "assistant"), None)
        if last is None:
            return False
        QGuiApplication.clipboard().setText(last.content)
        return True

    def _branch_changed(self) -> None:
        self.messages = list(self.tree.path)
        self.show_messages(self.tree.path)
        self.refresh_context()  # type: ignore[attr-defined]
        self._update_actions()

    def _on_transcript_action(self, action: str, message_id: int) -> None:
        handlers: dict[str, Any] = {
            "prev": lambda: self.switch_alternative(message_id, -1),
            "next": lambda: self.switch_alternative(message_id, +1),
            "edit": lambda: self.begin_edit(message_id),
            "delete": lambda: self.delete_pair(message_id),
            "regenerate": lambda: self.tree.last is not None and self.tree.last.id == message_id and self.regenerate(),
            "continue": lambda: self.tree.last is not None and self.tree.last.id == message_id and self.continue_reply(),
        }
        handler = handlers.get(action)
        if handler is not None:
            handler()
