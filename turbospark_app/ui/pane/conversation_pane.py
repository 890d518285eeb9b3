"""One conversation pane: transcript, input, Send/Stop, Regenerate/Continue, prefill progress,
state, settings.

A pane runs at most one turn at a time; each turn comes from a `conversation.TurnPlan`
(send, regenerate, continue, edit) and runs as `pane_turns` describes: the user message and
an empty "interrupted" reply are saved at once, the reply is checkpointed while it streams
(off the GUI thread), and the finished reply replaces it. CANCELLED is a normal end: "stopped".
The message actions (‹ › alternatives, Copy, Edit, Delete) are `message_actions`; raw
completion mode (the "Raw completion" badge and the Raw toggle) is `pane_raw`; the Think
toggle (reasoning on or off, where the template has a switch) is `pane_think`; images and
documents attached to the message being written are `attach_pane`; the Collections button
and a turn answered from document collections are `pane_documents`.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import time
from typing import Any, Mapping

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QKeySequence, QResizeEvent, QShortcut
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QMenu,
    QProgressBar,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
    QWidgetAction,
)

from ...conversations.actions import ConversationTree
from ...conversations.store import DEFAULT_TITLE, Conversation, Store, StoredMessage
from ...service import Failed
from .attach import PaneAttach
from ..services.bridge import EngineBridge
from .chat_input import ChatInput
from .context import (
    ContextMeter,
    OverflowChoice,
    overflow_numbers,
    turns,
    turns_to_drop,
    usage_from_messages,
)
from ..elided_label import ElidedLabel
from ..formatting import rate_label
from .message_actions import MessageActions
from .documents import PaneDocuments
from .raw import PaneRawMode
from .think import PaneThink
from .tools import PaneTools
from .turns import turn_reader, PaneTurns, model_identity
from .transcript import Transcript
from .turn_settings import TurnSettingsForm, merged

__all__ = ["ConversationPane", "model_identity"]

STATUS_SPACING = 10
FOOTER_MARGIN = 12
STATE_TEXT_RESERVE = 230
"""What the state text ("Generating · 120 tok · 45.2 tok/s") is given before the pane puts its
buttons on a row of their own; narrower than that it is elided, the whole text in its tooltip."""


class ConversationPane(PaneAttach, PaneDocuments, PaneTools, PaneTurns, MessageActions, PaneRawMode, PaneThink,
                       QWidget):
    """See the module docstring."""

    titleChanged = Signal(str, str)  # conversation id, title
    busyChanged = Signal(str, bool)  # conversation id, a turn is running
    turnEnded = Signal(str, str)  # conversation id, "finished" | "failed"
    newConversationRequested = Signal(str)  # overflow: send this text in a new conversation

    def __init__(
        self,
        conversation: Conversation,
        store: Store,
        bridge: EngineBridge,
        defaults: Mapping[str, Any] | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("conversationPane")
        self.conversation = conversation
        self._store = store
        self._bridge = bridge
        self._settings = merged(conversation.settings, defaults)
        self.tree = ConversationTree(store, conversation.id)
        self.messages: list[StoredMessage] = list(self.tree.path)  # the branch on screen
        self.request_id: int | None = None
        self.editing: StoredMessage | None = None  # a user message being edited in the input
        self._turn_model_id = ""  # model_identity of the model the current turn went to
        self.state = "idle"
        self._pending_user: StoredMessage | None = None
        self._plan: Any = None  # the running turn's TurnPlan, its reply row and recorder
        self._reply: StoredMessage | None = None
        self._recorder: Any = None
        self._prefix_ids: Any = ()
        self._sent_text = ""
        self._mark: tuple[int, int] = (0, 0)
        self._tokens = 0
        self._reader = turn_reader({})  # the running turn's (PaneTurns._start_turn)
        self._live_prompt = 0
        self._first_token_at: float | None = None
        self._dispose_when_idle = False
        self._discarded = False  # the conversation was deleted: save nothing more
        self._auto_drop = False  # "Drop oldest turns" chosen: drop more on the next overflow
        self.overflow_box: OverflowChoice | None = None
        self._build()
        self.show_messages(self.messages)
        self._set_state("idle")
        self._update_actions()
        self.refresh_context()
        bridge.backendStateChanged.connect(self._backend_state_changed)
        bridge.backendStateChanged.connect(self.update_attach_buttons)
        source_changed = getattr(bridge, "sourceChanged", None)  # a PaneEngine (remote engines)
        if source_changed is not None:
            source_changed.connect(self._update_actions)
            source_changed.connect(self.update_attach_buttons)
            source_changed.connect(self._source_changed)

    # -- construction ----------------------------------------------------------------------

    def _build(self) -> None:
        self.transcript = Transcript(self)
        self.transcript.actionRequested.connect(self._on_transcript_action)
        self.transcript.live_actions = self.live_actions
        self.edit_banner = QLabel(self)
        self.edit_banner.setObjectName("editBanner")
        self.edit_banner.setWordWrap(True)
        self.edit_banner.setVisible(False)
        self.regenerate_button = QToolButton(self)
        self.regenerate_button.setObjectName("regenerateButton")
        self.regenerate_button.setText("Regenerate")
        self.regenerate_button.setToolTip("A new reply to the last message; the old one is kept as an alternative (Ctrl+R)")
        self.regenerate_button.setAutoRaise(True)
        self.regenerate_button.clicked.connect(self.regenerate)
        self.continue_button = QToolButton(self)
        self.continue_button.setObjectName("continueButton")
        self.continue_button.setText("Continue")
        self.continue_button.setToolTip("Resume the last reply where it stopped (Ctrl+Shift+Enter)")
        self.continue_button.setAutoRaise(True)
        self.continue_button.clicked.connect(self.continue_reply)
        self.state_label = ElidedLabel(self)
        self.state_label.setObjectName("stateLabel")
        self.prefill_bar = QProgressBar(self)
        self.prefill_bar.setObjectName("prefillBar")
        self.prefill_bar.setFixedWidth(180)
        self.prefill_bar.setMaximumHeight(14)
        self.prefill_bar.setFormat("prefill %v/%m")
        self.prefill_bar.setVisible(False)
        self.settings_form = TurnSettingsForm()
        self.settings_form.set_values(self._settings, self.conversation.system_prompt)
        self.settings_form.changed.connect(self._save_settings)
        menu = QMenu(self)
        action = QWidgetAction(menu)
        action.setDefaultWidget(self.settings_form)
        menu.addAction(action)
        self.settings_button = QToolButton(self)
        self.settings_button.setObjectName("settingsButton")
        self.settings_button.setText("Settings")
        self.settings_button.setToolTip("Generation settings for this conversation")
        self.settings_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.settings_button.setMenu(menu)
        self.settings_button.setAutoRaise(True)
        self.input = ChatInput(self)
        self.input.submitted.connect(self.send)
        self.input.stopRequested.connect(self.stop)
        self.send_button = QPushButton("Send", self)
        self.send_button.setObjectName("sendButton")
        self.send_button.setMinimumWidth(84)
        self.send_button.clicked.connect(self._send_or_stop)
        QShortcut(QKeySequence(Qt.Key.Key_Escape), self, self._escape,
                  context=Qt.ShortcutContext.WidgetWithChildrenShortcut)

        status_row = QHBoxLayout()
        self.status_row = status_row  # the window adds the model source picker (remote engines)
        status_row.setSpacing(STATUS_SPACING)
        status_row.addWidget(self.state_label, 1)
        status_row.addWidget(self.prefill_bar)
        self.context_meter = ContextMeter(self)
        self.context_meter.model_info = lambda: getattr(self._bridge, "model_info", None) or {}
        # The meter and the buttons share the status row when the pane is wide enough for all of
        # it, and go to a row of their own below it when not (two panes side by side): nothing
        # is squeezed below its size. `_place_actions` decides, on every resize.
        self.actions_row = QHBoxLayout()
        self.actions_row.setSpacing(STATUS_SPACING)
        self.actions_row.addStretch(1)
        self._row_widgets = (self.context_meter, self.regenerate_button, self.continue_button,
                             self.settings_button)
        for widget in self._row_widgets:
            status_row.addWidget(widget)
        self.wrapped = False
        self._build_raw_controls(status_row, badge_at=0)  # the badge stays with the state text
        self._build_think_toggle(status_row)
        # the toggles move with the buttons
        self._row_widgets = (*self._row_widgets, self.raw_toggle, self.think_toggle)
        input_row = QHBoxLayout()
        input_row.setSpacing(8)
        input_row.addWidget(self.input, 1)
        input_row.addWidget(self.send_button, 0, Qt.AlignmentFlag.AlignBottom)
        footer = QVBoxLayout()
        footer.setContentsMargins(FOOTER_MARGIN, 4, FOOTER_MARGIN, 12)
        footer.setSpacing(6)
        footer.addLayout(status_row)
        footer.addLayout(self.actions_row)
        footer.addWidget(self.edit_banner)
        self._build_attach(footer, input_row)  # the tray above the input, its buttons beside it
        footer.addLayout(input_row)
        self._build_tools(status_row, footer)  # the Tools button, the approval cards' place
        # The Collections button (pane_documents) stays in the status row when the buttons wrap
        # to a row of their own: that row is full with two panes side by side.
        self._build_documents(status_row)
        self._row_widgets = (*self._row_widgets, self.tools_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(self.transcript, 1)
        layout.addLayout(footer)
        self.setFocusProxy(self.input)

    def one_row_width(self) -> int:
        """The width the status row needs to hold everything on one line: every widget at its
        size hint, the state text at `STATE_TEXT_RESERVE` (a fixed figure, so the rows do not
        flip while the text changes during a reply) and the prefill bar even while hidden."""
        in_row = [self.status_row.itemAt(i).widget() for i in range(self.status_row.count())]
        widgets = dict.fromkeys(w for w in [*in_row, *self._row_widgets] if w is not None)
        shown = [w for w in widgets if w is not self.state_label
                 and (w.isVisibleTo(self) or w is self.prefill_bar)]
        width = sum(w.sizeHint().width() for w in shown)
        return width + STATE_TEXT_RESERVE + STATUS_SPACING * len(shown) + 2 * FOOTER_MARGIN

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt override)
        super().resizeEvent(event)
        self._place_actions()

    def status_row_changed(self) -> None:
        """Something in the status row came or went (the raw badge): wrap again if needed."""
        if hasattr(self, "think_toggle"):  # raw completion hides it
            self._update_think_toggle()
        if hasattr(self, "wrapped"):  # (not while the widgets are being built)
            QTimer.singleShot(0, self, self._place_actions)

    def _source_changed(self, *_: Any) -> None:
        # A remote source shows the model picker too (once the picker has refreshed): the
        # status row may have to wrap now. Its template is the server's: no Think toggle here.
        if hasattr(self, "think_toggle"):
            self._update_think_toggle()
        QTimer.singleShot(0, self, self._place_actions)

    def _place_actions(self) -> None:
        wrap = self.width() < self.one_row_width()
        if wrap == self.wrapped:
            return
        self.wrapped = wrap
        source, target = (self.status_row, self.actions_row) if wrap else (self.actions_row, self.status_row)
        for widget in self._row_widgets:
            source.removeWidget(widget)
            target.addWidget(widget)

    # -- public ----------------------------------------------------------------------------

    @property
    def conversation_id(self) -> str:
        """The conversation shown (also the backend session id)."""
        return self.conversation.id

    @property
    def engine(self) -> Any:
        """What turns are submitted to: the EngineBridge, or a PaneEngine routing to a remote."""
        return self._bridge

    @property
    def busy(self) -> bool:
        """True while a turn of this pane is queued or running (its tool calls included, its
        attachments being prepared and its collections being searched)."""
        return (self.request_id is not None or self.agent_busy or self._agent_starting
                or self.preparing_attachments or self._docs_pending)

    def set_title(self, title: str) -> None:
        """The conversation was renamed elsewhere (the sidebar)."""
        self.conversation = dataclasses.replace(self.conversation, title=title)

    @property
    def settings_values(self) -> dict[str, Any]:
        """This conversation's generation settings (every key)."""
        return dict(self._settings)

    def apply_settings(self, values: Mapping[str, Any], system_prompt: str | None) -> bool:
        """Store new generation settings and system prompt (the Settings dialog); they apply
        from the next turn. Returns False when the store refused them (said in the pane)."""
        self._settings = merged(values, self._settings)
        self.settings_form.set_values(self._settings, system_prompt)
        return self._store_settings(system_prompt)

    def refresh_context(self) -> None:
        """Show how much of the context the conversation uses (after its last reply)."""
        used = usage_from_messages(self.messages, model_identity(self._bridge.model_info))
        self.context_meter.set_usage(used, self._bridge.max_context)

    def drop_oldest_turns(self, n: int) -> int:
        """Delete the `n` oldest exchanges (user message + replies) from the conversation, in
        one transaction; returns how many messages went."""
        doomed = [m for exchange in turns(self.messages)[:n] for m in exchange]
        if not doomed:
            return 0
        try:
            self._store.delete_messages([m.id for m in doomed])
        except sqlite3.Error as e:
            self.transcript.append_error(f"The oldest turns could not be removed: {e}")
            return 0
        self.tree.reload()
        self._branch_changed()
        return len(doomed)

    def send(self) -> None:
        """Send the input's text (and the tray's attachments) as the next user message, or in
        place of the message being edited (ignored while busy or empty)."""
        text = self.input.toPlainText()
        if self.busy or not (text.strip() or self.attachments_pending()):
            return
        if self.editing is not None:
            self._send_edit(text)
        else:
            self.send_with_attachments(self.tree.plan_send(text))

    def stop(self) -> None:
        """Stop the running turn; the partial reply is kept (ends within one forward step).
        During tool calls: they are cancelled and the loop ends at once."""
        if self._stop_tools() or self._stop_preparing():
            return
        if self.request_id is not None and self.state != "stopping":
            self._bridge.cancel(self.request_id)
            self._set_state("stopping")

    def discard(self) -> None:
        """The conversation is being deleted: stop its turn, save nothing more, go away."""
        self._discarded = True
        self.dispose()

    def dispose(self) -> None:
        """Close the pane: stop its turn first, and delete it once the turn has ended (so a
        stopped reply is still saved)."""
        if self.busy:
            self._dispose_when_idle = True
            self.stop()
        else:
            self.deleteLater()

    # -- helpers ---------------------------------------------------------------------------

    def _escape(self) -> None:
        if not self.cancel_edit():
            self.stop()

    def _send_or_stop(self) -> None:
        if self.busy:
            self.stop()
        else:
            self.send()

    def _auto_title(self, text: str) -> None:
        if self.conversation.title != DEFAULT_TITLE or len([m for m in self.tree.all if m.role == "user"]) != 1:
            return
        first = " ".join(text.split())
        if not first:  # an image or a document sent without a word: the default title stays
            return
        title = first if len(first) <= 48 else first[:47].rstrip() + "…"
        try:
            self._store.rename_conversation(self.conversation.id, title)
        except sqlite3.Error:
            return
        self.set_title(title)
        self.titleChanged.emit(self.conversation.id, title)

    def _overflowed(self, event: Failed) -> None:
        """The message did not fit: drop more turns (when the user already chose that), or
        offer a new conversation / dropping the oldest turns. The text is in the input."""
        numbers = overflow_numbers(event.message)
        droppable = len(turns(self.messages))
        if self._auto_drop and droppable:
            self._drop_to_fit(numbers)
            return
        self._auto_drop = False
        if not droppable:  # the message alone is too long: a new conversation would not help
            self.transcript.append_error("Even on its own, this message plus the reply budget does not fit: "
                                         "shorten it, or lower “Max new tokens”.")
            return
        self.overflow_box = OverflowChoice(numbers, droppable, self)
        self.overflow_box.chosen.connect(lambda choice: self._overflow_chosen(choice, numbers))
        self.overflow_box.open()

    def _overflow_chosen(self, choice: str, numbers: tuple[int, int, int] | None) -> None:
        self.overflow_box = None
        if self.busy:
            return
        if choice == "drop":
            self._auto_drop = True
            self._drop_to_fit(numbers)
        elif choice == "new":
            text = self.input.toPlainText()
            self.input.clear()
            self.newConversationRequested.emit(text)

    def _drop_to_fit(self, numbers: tuple[int, int, int] | None) -> None:
        """Drop the oldest turns that cover the excess, then resend. If the estimate falls
        short, the engine (which counts exactly) overflows again and `_overflowed` drops more."""
        excess = 1 if numbers is None else numbers[0] + numbers[1] - numbers[2]
        model_id = model_identity(self._bridge.model_info)
        if not self.drop_oldest_turns(turns_to_drop(self.messages, excess, model_id)):
            self._auto_drop = False  # nothing could be dropped (said in the pane): no loop
            return
        self.send()

    def _backend_state_changed(self, _state: str) -> None:
        self.refresh_context()
        self._update_raw_mode()  # a base model forces raw; another model may not (and Think)

    def _save_settings(self) -> None:
        self._settings = merged(self.settings_form.values(), self._settings)
        self._store_settings(self.settings_form.system_prompt_text())

    def _store_settings(self, system_prompt: str | None) -> bool:
        try:
            self._store.update_conversation(self.conversation.id, system_prompt=system_prompt,
                                            settings=self._settings)
        except sqlite3.Error as e:
            self.transcript.append_error(f"Settings could not be saved: {e}")
            return False
        self.conversation = dataclasses.replace(
            self.conversation, system_prompt=system_prompt, settings=dict(self._settings)
        )
        return True

    def _set_state(self, state: str, detail: str = "") -> None:
        self.state = state
        text = {
            "idle": "Ready",
            "queued": "Queued",
            "prefilling": "Prefilling",
            "generating": "Generating",
            "tools": "Tool calls",
            "stopping": "Stopping…",
            "stopped": "Stopped",
            "done": "Done",
            "error": "Error",
        }[state]
        if state == "generating" and self._first_token_at is not None:
            elapsed = time.monotonic() - self._first_token_at
            rate = (self._tokens - 1) / elapsed if elapsed > 0 and self._tokens > 1 else 0.0
            detail = f"{self._tokens} tok · {rate_label(rate)}"
        if state == "queued" and self._bridge.backend_state == "loading":
            detail = "waiting for the model to load"
        self.state_label.setText(f"{text} · {detail}" if detail else text)
        busy = state in ("queued", "prefilling", "generating", "tools", "stopping")
        self.send_button.setText("Stop" if busy else "Send")
        self.send_button.setToolTip("Stop generating (Esc)" if busy else "Send (Enter)")
        self.send_button.setEnabled(state != "stopping")
