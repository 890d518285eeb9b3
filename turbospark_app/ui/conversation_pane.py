"""One conversation pane: transcript, input, Send/Stop, prefill progress, state, settings.

A pane runs at most one turn at a time. Its life cycle:

    send      the user message is saved (one transaction), shown, and submitted; the input
              is cleared; the assistant header appears with the state "queued".
    events    Queued / Started / Prefilling update the state label and the prefill bar;
              Token / Tail deltas are appended to the transcript (O(delta)).
    Finished  the reply is saved with its token ids, stats and stop reason, and re-rendered
              once as Markdown with a stats line. CANCELLED is a normal end: "stopped".
    Failed    the turn is undone: the user message is deleted from the store and the
              transcript, an inline error explains why, and the text goes back to the input.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import time
from typing import Any, Mapping

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeySequence, QShortcut, QTextCursor
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QMenu,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
    QWidgetAction,
)

from ..chat.api import ChatMessage, reply_token_ids
from ..engine.progress import StopReason
from ..service import Failed, Finished, Prefilling, Queued, Retrying, Started, Tail, Token, TurnRequest, TurnStats
from ..store import DEFAULT_TITLE, Conversation, Store, StoredMessage
from .bridge import EngineBridge
from .chat_input import ChatInput
from .context import ContextMeter, OverflowChoice, overflow_numbers, turns, turns_to_drop, usage_from_messages
from .formatting import rate_label, seconds_label, stats_line
from .transcript import Entry, Transcript
from .turn_settings import TurnSettingsForm, merged, to_turn_settings

_ERRORS = {
    "context_overflow": "This conversation no longer fits the model's context window ({m}). "
    "Start a new conversation, or lower “Max new tokens” in this pane's settings.",
    "empty_prompt": "There is nothing to send ({m}).",
    "zero_budget": "The reply has no token budget ({m}). Raise “Max new tokens”.",
    "model_failure": "The model failed while answering: {m}",
    "backend_unavailable": "No model is loaded: {m}. "
    "Fetch the default model with `turbospark model fetch`, or start with --model FILE.",
}


def model_identity(model_info: Mapping[str, Any]) -> str:
    """What identifies the tokenizer an assistant reply's token ids belong to: the model file
    (name and size, so the same file still matches after a move or inside the app bundle)."""
    if model_info.get("file_name") and model_info.get("file_size_bytes"):
        return f"{model_info['file_name']}:{model_info['file_size_bytes']}"
    for key in ("sha256", "file", "path", "name"):
        value = model_info.get(key)
        if value:
            return str(value)
    return ""


def entry_for(message: StoredMessage) -> Entry:
    """How a saved message is shown."""
    footer = ""
    if message.role == "assistant" and message.stats:
        footer = stats_line(TurnStats.from_json(message.stats))
    return Entry(message.role, message.content, footer, stopped=message.stop_reason == "cancelled")


class ConversationPane(QWidget):
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
        self.messages: list[StoredMessage] = store.messages(conversation.id)
        self.request_id: int | None = None
        self._turn_model_id = ""  # model_identity of the model the current turn went to
        self.state = "idle"
        self._pending_user: StoredMessage | None = None
        self._sent_text = ""
        self._mark: tuple[int, int] = (0, 0)
        self._tokens = 0
        self._first_token_at: float | None = None
        self._dispose_when_idle = False
        self._discarded = False  # the conversation was deleted: save nothing more
        self._auto_drop = False  # "Drop oldest turns" chosen: drop more on the next overflow
        self.overflow_box: OverflowChoice | None = None
        self._build()
        self.transcript.set_entries([entry_for(m) for m in self.messages])
        self._set_state("idle")
        self.refresh_context()
        bridge.backendStateChanged.connect(self._backend_state_changed)

    # -- construction ----------------------------------------------------------------------

    def _build(self) -> None:
        self.transcript = Transcript(self)
        self.state_label = QLabel(self)
        self.state_label.setObjectName("stateLabel")
        self.state_label.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
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
        QShortcut(QKeySequence(Qt.Key.Key_Escape), self, self.stop,
                  context=Qt.ShortcutContext.WidgetWithChildrenShortcut)

        status_row = QHBoxLayout()
        self.status_row = status_row  # the window adds the model source picker (remote engines)
        status_row.setSpacing(10)
        status_row.addWidget(self.state_label, 1)
        status_row.addWidget(self.prefill_bar)
        self.context_meter = ContextMeter(self)
        status_row.addWidget(self.context_meter)
        status_row.addWidget(self.settings_button)
        input_row = QHBoxLayout()
        input_row.setSpacing(8)
        input_row.addWidget(self.input, 1)
        input_row.addWidget(self.send_button, 0, Qt.AlignmentFlag.AlignBottom)
        footer = QVBoxLayout()
        footer.setContentsMargins(12, 4, 12, 12)
        footer.setSpacing(6)
        footer.addLayout(status_row)
        footer.addLayout(input_row)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(self.transcript, 1)
        layout.addLayout(footer)
        self.setFocusProxy(self.input)

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
        """True while a turn of this pane is queued or running."""
        return self.request_id is not None

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
        gone = {m.id for m in doomed}
        self.messages = [m for m in self.messages if m.id not in gone]
        self.transcript.set_entries([entry_for(m) for m in self.messages])
        self.refresh_context()
        return len(doomed)

    def send(self) -> None:
        """Send the input's text as the next user message (ignored while busy or empty)."""
        text = self.input.toPlainText()
        if self.busy or not text.strip():
            return
        cid = self.conversation.id
        try:
            user = self._store.add_message(cid, "user", text)
        except sqlite3.Error as e:
            self.transcript.append_error(f"Could not save your message: {e}. It is still in the input box.")
            return
        self._pending_user, self._sent_text = user, text
        self._mark = self.transcript.mark()
        self.input.clear()
        self.messages.append(user)
        self.transcript.append_message("user", text)
        self.transcript.begin_reply()
        self._auto_title(text)
        # The model this turn is sent to: its reply's ids belong to that vocabulary, even if a
        # model switch is asked for before the reply ends.
        self._turn_model_id = model_identity(self._bridge.model_info)
        request = TurnRequest(cid, self._history(), to_turn_settings(self._settings, self.conversation.system_prompt))
        self._tokens, self._first_token_at = 0, None
        self.request_id = self._bridge.submit(request, self._on_event)
        self._set_state("queued")
        self.busyChanged.emit(cid, True)

    def stop(self) -> None:
        """Stop the running turn; the partial reply is kept (ends within one forward step)."""
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

    # -- turn events (GUI thread, via the bridge) -------------------------------------------

    def _on_event(self, event: Any) -> None:
        if isinstance(event, Token):
            if self._first_token_at is None:
                self._first_token_at = time.monotonic()
                self.prefill_bar.setVisible(False)
            self._tokens += 1
            self.transcript.append_delta(event.delta)
            if self.state != "stopping":
                self._set_state("generating")
        elif isinstance(event, Tail):
            self.transcript.append_delta(event.text)
        elif isinstance(event, Prefilling):
            self.prefill_bar.setRange(0, max(1, event.total))
            self.prefill_bar.setValue(event.done)
            if self.state != "stopping":
                self._set_state("prefilling", f"{event.done}/{event.total} tok")
        elif isinstance(event, Started):
            self.prefill_bar.setRange(0, max(1, event.prompt_tokens))
            self.prefill_bar.setValue(0)
            self.prefill_bar.setVisible(event.prompt_tokens > 0)  # a remote server does not say
            if self.state != "stopping":
                self._set_state("prefilling")
        elif isinstance(event, Retrying):
            if self.state != "stopping":
                self._set_state("queued", f"server busy (HTTP {event.status}), retry {event.attempt} "
                                f"in {seconds_label(event.seconds)}")
        elif isinstance(event, Queued):
            if self.state != "stopping":
                self._set_state("queued", f"{event.position} ahead" if event.position else "")
        elif isinstance(event, Finished):
            self._finish(event)
        elif isinstance(event, Failed):
            self._fail(event)

    def _finish(self, event: Finished) -> None:
        if self._discarded:
            self._end_turn("finished")
            return
        stopped = event.result.reason is StopReason.CANCELLED
        stats = event.stats.to_json()
        stats["model_id"] = self._turn_model_id
        footer = stats_line(event.stats)
        self.transcript.end_reply(event.text, footer, stopped=stopped)
        try:
            reply = self._store.add_message(
                self.conversation.id, "assistant", event.text,
                # A remote reply has no ids of ours: its text is what the next prompt reads.
                token_ids=reply_token_ids(event.result.reason, event.generated_ids) if event.generated_ids
                or not event.text else None,
                stats=stats, stop_reason=event.result.reason.value,
            )
            self.messages.append(reply)
        except sqlite3.Error as e:
            self.transcript.append_error(f"The reply could not be saved: {e}")
        self._auto_drop = False
        if event.stats.started:
            self.context_meter.set_usage(event.stats.prompt_tokens + event.stats.new_tokens,
                                         self._bridge.max_context)
        if stopped:
            self._set_state("stopped", f"in {seconds_label(event.stats.stop_latency)}"
                            if event.stats.stop_latency is not None else "")
        else:
            self._set_state("done", rate_label(event.stats.decode_tokens_per_sec))
        self._end_turn("finished")

    def _fail(self, event: Failed) -> None:
        if self._discarded:
            self._end_turn("failed")
            return
        if event.partial:
            self._keep_partial(event)
            return
        self.transcript.truncate(self._mark)
        template = _ERRORS.get(event.kind, "{m}")
        self.transcript.append_error(
            template.format(m=event.message) + "\nYour message was put back in the input box."
        )
        if self._pending_user is not None:
            try:
                self._store.delete_message(self._pending_user.id)
            except sqlite3.Error:
                pass  # it stays saved; the text is in the input box either way
            if self._pending_user in self.messages:
                self.messages.remove(self._pending_user)
        typed_since = self.input.toPlainText()
        restored = self._sent_text + ("\n\n" + typed_since if typed_since.strip() else "")
        self.input.setPlainText(restored)
        self.input.moveCursor(QTextCursor.MoveOperation.End)
        self._set_state("error", event.error_type)
        self._end_turn("failed")
        if event.kind == "context_overflow":
            self._overflowed(event)
        else:
            self._auto_drop = False

    def _keep_partial(self, event: Failed) -> None:
        """A remote stream broke mid-reply: the message and the reply so far stay (saved, with
        its figures and the error as stop reason); the error is said under it."""
        stats = event.stats.to_json() if event.stats is not None else {}
        stats["model_id"] = self._turn_model_id
        footer = stats_line(event.stats) if event.stats is not None else ""
        self.transcript.end_reply(event.partial, footer, stopped=True)
        try:
            reply = self._store.add_message(self.conversation.id, "assistant", event.partial,
                                            stats=stats, stop_reason="error")
            self.messages.append(reply)
        except sqlite3.Error as e:
            self.transcript.append_error(f"The reply could not be saved: {e}")
        self.transcript.append_error(_ERRORS.get(event.kind, "{m}").format(m=event.message))
        self._set_state("error", event.kind)
        self._end_turn("failed")

    def _end_turn(self, how: str) -> None:
        self.request_id = None
        self._pending_user = None
        self.prefill_bar.setVisible(False)
        self.busyChanged.emit(self.conversation.id, False)
        self.turnEnded.emit(self.conversation.id, how)
        if self._dispose_when_idle:
            self.deleteLater()

    # -- helpers ---------------------------------------------------------------------------

    def _send_or_stop(self) -> None:
        if self.busy:
            self.stop()
        else:
            self.send()

    def _history(self) -> tuple[ChatMessage, ...]:
        """The messages for the prompt. Token ids are only passed when they came from the
        model loaded now (another model's ids would be another vocabulary)."""
        current = model_identity(self._bridge.model_info)
        out = []
        for m in self.messages:
            ids = m.token_ids
            # No model loaded yet (a switch in progress): no ids at all.
            if ids is not None and (not current or (m.stats or {}).get("model_id", current) != current):
                ids = None
            out.append(ChatMessage(m.role, m.content, ids))  # type: ignore[arg-type]
        return tuple(out)

    def _auto_title(self, text: str) -> None:
        if self.conversation.title != DEFAULT_TITLE or len(self.messages) != 1:
            return
        first = " ".join(text.split())
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
        busy = state in ("queued", "prefilling", "generating", "stopping")
        self.send_button.setText("Stop" if busy else "Send")
        self.send_button.setToolTip("Stop generating (Esc)" if busy else "Send (Enter)")
        self.send_button.setEnabled(state != "stopping")
