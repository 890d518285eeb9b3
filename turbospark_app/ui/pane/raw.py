"""A pane's raw completion mode (mixed into ConversationPane).

In raw mode a turn's prompt is the conversation's texts concatenated, with no roles and no
template (`chat.prompt.raw_prompt_ids`): the user's text is continued, not answered. Send,
Stop, Continue and Regenerate work as in chat mode (the engine splices every reply's ids, so the
KV prefix is reused turn after turn). Two ways in:
- the model has no chat template (a base model, `model_info["has_chat_template"] is False`):
  raw is the only way it runs, so the toggle shows checked and cannot be turned off;
- the "Raw" toggle in the pane's toolbar, remembered per conversation in the store
  (`Store.set_raw_mode`); a base model does not change what was remembered, so the
  conversation is back in chat mode when an instruct model is loaded again.
The "Raw completion" badge says which mode the next turn runs in.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from typing import Any

from PySide6.QtWidgets import QHBoxLayout, QLabel, QToolButton

from ...conversations.store import Conversation, Store

TOGGLE_TIP = ("Raw completion: your text is continued as it is, with no roles and no chat "
              "template (the system prompt is not used). Remembered for this conversation.")
BASE_MODEL_TIP = ("This model has no chat template (a base model): it only continues text, so "
                  "its conversations run as raw completion.")
RAW_PLACEHOLDER = "Text for the model to continue — Enter to send, Shift+Enter for a new line"
BADGE_STYLE = ("QLabel#rawBadge { border: 1px solid palette(highlight); border-radius: 4px; "
               "padding: 0px 6px; color: palette(highlight); font-weight: 600; }")


class PaneRawMode:
    """The raw-mode half of ConversationPane: it provides the store, bridge and conversation."""

    conversation: Conversation
    _store: Store
    _bridge: Any

    def status_row_changed(self) -> None:
        """The badge came or went: the pane may have to re-lay its status row (ConversationPane)."""

    def _build_raw_controls(self, row: QHBoxLayout, badge_at: int) -> None:
        """The badge (inserted at `badge_at` in `row`) and the toggle (appended to `row`)."""
        self.raw_badge = QLabel("Raw completion", self)  # type: ignore[arg-type]
        self.raw_badge.setObjectName("rawBadge")
        self.raw_badge.setStyleSheet(BADGE_STYLE)
        self.raw_toggle = QToolButton(self)  # type: ignore[arg-type]
        self.raw_toggle.setObjectName("rawToggle")
        self.raw_toggle.setText("Raw")
        self.raw_toggle.setCheckable(True)
        self.raw_toggle.setAutoRaise(True)
        self.raw_toggle.toggled.connect(self.set_raw_mode)
        row.insertWidget(badge_at, self.raw_badge)
        row.addWidget(self.raw_toggle)
        self._chat_placeholder = self.input.placeholderText()  # type: ignore[attr-defined]
        self._update_raw_mode()

    @property
    def model_has_chat_template(self) -> bool:
        """False when the loaded model has no chat template (unknown while none is loaded)."""
        return self._bridge.model_info.get("has_chat_template") is not False

    @property
    def raw_mode(self) -> bool:
        """The next turn runs as raw completion (the toggle, or a model without a template)."""
        return self.conversation.raw or not self.model_has_chat_template

    def set_raw_mode(self, raw: bool) -> bool:
        """Turn raw mode on or off for this conversation (saved at once; from the next turn).
        False when the store refused it (said in the pane) or a base model forces raw."""
        if not raw and not self.model_has_chat_template:
            self._update_raw_mode()
            return False
        if raw == self.conversation.raw:
            self._update_raw_mode()
            return True
        try:
            self._store.set_raw_mode(self.conversation.id, raw)
        except sqlite3.Error as e:
            self.transcript.append_error(f"Raw mode could not be saved: {e}")  # type: ignore[attr-defined]
            self._update_raw_mode()
            return False
        self.conversation = dataclasses.replace(self.conversation, raw=raw)
        self._update_raw_mode()
        return True

    def _update_raw_mode(self) -> None:
        """Badge and toggle as the conversation and the loaded model say."""
        forced = not self.model_has_chat_template
        raw = self.raw_mode
        self.raw_badge.setVisible(raw)
        self.raw_badge.setToolTip(BASE_MODEL_TIP if forced else TOGGLE_TIP)
        blocked = self.raw_toggle.blockSignals(True)  # showing the state is not a user's toggle
        self.raw_toggle.setChecked(raw)
        self.raw_toggle.blockSignals(blocked)
        self.raw_toggle.setEnabled(not forced)
        self.raw_toggle.setToolTip(BASE_MODEL_TIP if forced else TOGGLE_TIP)
        # The input says what the text is for: continued as is, not answered.
        self.input.setPlaceholderText(RAW_PLACEHOLDER if raw else self._chat_placeholder)  # type: ignore[attr-defined]
        self.input.viewport().update()  # type: ignore[attr-defined]  # an empty input repaints its placeholder
        self.transcript.set_raw_labels(raw)  # type: ignore[attr-defined]  # no roles: Text / Continuation
        self.status_row_changed()
