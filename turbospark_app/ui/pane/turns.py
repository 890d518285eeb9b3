"""A pane's turn, from a `TurnPlan` to the saved reply (mixed into ConversationPane).

    start     the store gets the user message (send, edit) and an empty reply marked
              "interrupted" in ONE transaction (continue: the reply is marked again); the
              transcript shows them; the request goes to the bridge with `continue_final`
              and `raw` (the pane's raw completion mode, `pane_raw`)
    stream    Token / Tail deltas go to the transcript (O(delta)) and to a ReplyRecorder,
              which checkpoints the reply off the GUI thread at most every second / 32 tokens
    Finished  the final reply (a continued one: old text + new, figures combined) replaces the
              checkpoints, with its stop reason; CANCELLED is a normal end: "stopped"
    Failed    everything the turn added is undone (the alternative shown before comes back),
              an inline error explains why, and a typed message goes back to the input
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from PySide6.QtGui import QTextCursor

from ...chat.formats import ReplyParser, ReplyReader, detect_format, detect_reasoning, thinking_switch
from ...chat.api import reply_token_ids
from ...conversations.actions import (
    ConversationTree,
    TurnPlan,
    combine_stats,
)
from ...conversations.checkpoint import ReplyRecorder
from ...conversations.store import INTERRUPTED, Store, StoredMessage
from ...engine.progress import StopReason
from ...service import (
    Failed,
    Finished,
    Prefilling,
    Queued,
    Retrying,
    Started,
    Tail,
    Token,
    TurnRequest,
)
from ...media.images import ImageError
from .attach_prompt import document_tokens, has_attachments, media_prompt_messages
from ..formatting import rate_label, seconds_label, stats_line
from .transcript import Transcript
from .turn_settings import to_turn_settings

ERRORS = {
    "context_overflow": "This conversation no longer fits the model's context window ({m}). "
    "Start a new conversation, or lower “Max new tokens” in this pane's settings.",
    "empty_prompt": "There is nothing to send ({m}).",
    "zero_budget": "The reply has no token budget ({m}). Raise “Max new tokens”.",
    "model_failure": "The model failed while answering: {m}",
    "backend_unavailable": "No model is loaded: {m}. "
    "Fetch the default model with `turbospark model fetch`, or start with --model FILE.",
}


def turn_reader(model_info: Any, *, continued: bool = False, prompt_tail: str = "") -> ReplyReader:
    """A turn's reply reader (its reasoning / answer figures), by the model's template family;
    a continued reply goes on after its reasoning, so only answer tokens follow. `prompt_tail`
    (the Started event's): a generation prompt that opened the reasoning block starts in it."""
    source = (model_info or {}).get("chat_template")
    markers = detect_reasoning(source)
    opened = not continued and prompt_tail.rstrip().endswith(markers.open)
    parser = ReplyParser(detect_format(source or ""), None if continued else (markers.open, markers.close),
                         thinking=opened)
    return ReplyReader(parser)


def model_identity(model_info: Any) -> str:
    """What identifies the tokenizer an assistant reply's token ids belong to: the model file
    (name and size, so the same file still matches after a move or inside the app bundle)."""
    if model_info.get("file_name") and model_info.get("file_size_bytes"):
        return f"{model_info['file_name']}:{model_info['file_size_bytes']}"
    for key in ("sha256", "file", "path", "name"):
        value = model_info.get(key)
        if value:
            return str(value)
    return ""


class PaneTurns:
    """The turn half of ConversationPane: it provides the widgets, store, bridge and tree."""

    _store: Store
    _bridge: Any
    tree: ConversationTree
    transcript: Transcript
    messages: list[StoredMessage]
    request_id: int | None
    _rate_shown = 0.0  # when the "Generating · N tok · rate" label was last set

    def _start_turn(self, plan: TurnPlan) -> bool:
        """Save, show and submit a planned turn; False when it could not start (said inline)."""
        if self.busy:
            return False
        store, cid = self._store, self.conversation.id
        target = plan.target
        self._turn_model_id = model_identity(self._bridge.model_info)
        try:  # before anything is saved: a stored image gone from disk stops the turn here
            messages = media_prompt_messages(plan.history, self._turn_model_id, self.image_store)
        except ImageError as e:
            self.transcript.append_error(f"This conversation cannot be sent: {e}.")
            return False
        try:
            if target is not None:  # continue: the same row grows
                reply = store.update_reply(target.id, target.content, token_ids=target.token_ids,
                                           stats=target.stats, stop_reason=INTERRUPTED)
                user = None
            else:
                user, reply = store.start_turn(cid, plan.parent_id, plan.user_text, discard=plan.discard,
                                               user_parts=plan.user_parts)
        except sqlite3.Error as e:
            where = " It is still in the input box." if plan.user_text is not None else ""
            self.transcript.append_error(f"Could not save your message: {e}.{where}")
            return False
        if user is not None:
            messages += media_prompt_messages([user], self._turn_model_id, self.image_store)
        # A document's text in the prompt suspends the tools' "always allow" (pane_tools).
        self._untrusted_turn = has_attachments([*plan.history, *([user] if user else [])])
        self._plan, self._reply, self._pending_user = plan, reply, user
        self._show_start(plan, user)
        if plan.user_text is not None:
            self._sent_text = plan.user_text
            self.input.clear()
            self._attachments_sent()  # the tray empties (they come back if the turn fails)
            self._auto_title(plan.user_text)
        prefix_ids = messages[-1].token_ids if target is not None else ()
        self._recorder = ReplyRecorder(
            store.checkpointer(), reply.id, prefix=target.content if target else "",
            prefix_ids=prefix_ids, previous_stats=target.stats if target else None,
            model_id=self._turn_model_id,
        )
        self._prefix_ids = prefix_ids
        settings = to_turn_settings(self._settings, self.conversation.system_prompt,
                                    thinking_switch((self._bridge.model_info or {}).get("chat_template")))
        self._agent_settings = settings
        messages = self._with_documents(messages)  # pane_documents: the turn's sources
        messages, settings = self._with_tools(messages, settings)  # pane_tools: a tool step
        request = TurnRequest(cid, messages, settings, continue_final=plan.continue_final,
                              raw=self.raw_mode)
        self._tokens, self._first_token_at = 0, None
        self._reader = turn_reader(self._bridge.model_info, continued=target is not None)
        self._parts: list[str] = []  # the reply's text as shown: control tokens by name
        self._live_prompt = 0  # the running turn's prompt tokens (Started): the meter fills live
        self.request_id = self._bridge.submit(request, self._on_event)
        self._set_state("queued")
        self._update_actions()
        self.busyChanged.emit(cid, True)
        return True

    def _show_start(self, plan: TurnPlan, user: StoredMessage | None) -> None:
        """The transcript as the turn begins: the prompt's messages, then the streaming reply."""
        t = self.transcript
        self.tree.reload()
        if plan.kind == "send":
            self._mark = t.mark()
        elif plan.kind == "edit":
            self.show_messages(plan.history)
            self._mark = t.mark()
        else:  # regenerate / continue: the reply on screen is taken off (kept in the store)
            last = t.entries[-1] if t.entries else None
            on_screen = last is not None and last.role == "assistant" and last.kind == "message"
            self._mark = t.mark_before_last() if on_screen else t.mark()
            t.truncate(self._mark)
        if user is not None:
            e = self.entry_for(user)
            t.append_message("user", user.content, meta=e)
        t.begin_reply()
        if plan.target is not None:
            t.append_delta(plan.target.content)
        t.scroll_to_end()  # the turn just asked for, even when the view was scrolled up
        self.messages = list(self.tree.path)

    # -- events (GUI thread, via the bridge) ------------------------------------------------

    def _on_event(self, event: Any) -> None:
        if isinstance(event, Token):
            if self._first_token_at is None:
                self._first_token_at = time.monotonic()
                self.prefill_bar.setVisible(False)
            self._tokens += 1
            # The context meter and the Generating label follow the reply at most 10 times a
            # second: each change relays out the pane's bottom row and repaints its buttons.
            now = time.monotonic()
            shown = self.state == "generating" and now - self._rate_shown < 0.1
            if self._live_prompt and not shown:
                self.context_meter.set_usage(self._live_prompt + self._tokens, self._bridge.max_context)
            # A control token by its name ("[TOOL_CALLS]"): the reply's text keeps its markup, so
            # the reply reads (tool cards, reasoning) the same live, stored and restarted.
            text = event.delta or event.special
            self._parts.append(text)
            self.transcript.append_delta(text)
            self._reader.feed_token(event.id, text, event.at)
            if not self._discarded:
                self._recorder.token(text, event.id)
            if self.state != "stopping" and not shown:
                self._set_state("generating")
                self._rate_shown = now
        elif isinstance(event, Tail):
            self._parts.append(event.text)
            self.transcript.append_delta(event.text)
            self._recorder.tail(event.text)
        elif isinstance(event, Prefilling):
            self.prefill_bar.setRange(0, max(1, event.total))
            self.prefill_bar.setValue(event.done)
            if self.state != "stopping":
                self._set_state("prefilling", f"{event.done}/{event.total} tok")
        elif isinstance(event, Started):
            if event.prompt_tail and not self._tokens:  # (before any token: nothing read yet)
                self._reader = turn_reader(self._bridge.model_info, continued=self._plan.target is not None,
                                           prompt_tail=event.prompt_tail)
                if self._reader.parser.state == "reasoning":
                    # The prompt opened the reasoning block (DeepSeek R1): the stored reply
                    # opens it too, so it reads the same when shown again.
                    self._parts.append(self._reader.parser.reasoning[0])
            self._live_prompt = event.prompt_tokens  # 0 from a remote server: the meter waits
            if self._live_prompt:
                self.context_meter.set_usage(self._live_prompt, self._bridge.max_context)
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

    # The composer's tray (attach_pane overrides): nothing here.
    def _attachments_sent(self) -> None:
        pass

    def _attachments_back(self) -> None:
        pass

    # Documents (pane_documents overrides): none here.
    def _with_documents(self, messages: Any) -> Any:
        return messages

    # Tool steps (pane_tools overrides): none here.
    def _with_tools(self, messages: tuple[Any, ...], settings: Any) -> tuple[tuple[Any, ...], Any]:
        return messages, settings

    def _agent_step_done(self, event: Finished) -> bool:
        return False

    def _agent_parts(self) -> Any:
        return None

    def _close_agent(self) -> None:
        pass

    def _agent_failed(self, event: Failed) -> bool:
        return False

    def _finish(self, event: Finished) -> None:
        self._recorder.finish()
        if self._discarded:
            self._end_turn("finished")
            return
        if self._agent_step_done(event):  # the reply made tool calls: the loop goes on
            return
        plan, reply = self._plan, self._reply
        stopped = event.result.reason is StopReason.CANCELLED
        stats = event.stats.to_json()
        stats["model_id"] = self._turn_model_id
        self._reader.finish(time.monotonic())
        figures = self._reader.figures
        stats.update(reasoning_tokens=figures.reasoning_tokens, answer_tokens=figures.answer_tokens,
                     reasoning_seconds=round(figures.reasoning_seconds, 3))
        if self._pending_user is not None:  # what its attachments put in the prompt
            stats["document_tokens"] = document_tokens(self._pending_user.parts)
        # A remote reply has no ids of ours: its text is what the next prompt reads.
        remote = not event.generated_ids and bool(event.text)
        ids = None if remote else reply_token_ids(event.result.reason, event.generated_ids)
        # The engine's text leaves control tokens out (they print nothing): the shown one has
        # them by name, so a stored call still reads as a call.
        text = event.text if remote else "".join(self._parts)
        if plan.target is not None:
            text = plan.target.content + text
            ids = None if ids is None or self._prefix_ids is None else tuple(self._prefix_ids) + ids
            stats = combine_stats(plan.target.stats, stats)
        store = self._store
        try:
            if plan.kind == "regenerate" and not event.stats.started and plan.replaces is not None:
                # Stopped before it began: no empty alternative is left behind.
                store.delete_message(reply.id)
                store.select_message(plan.replaces)
                self.tree.reload()
                self.show_messages(self.tree.path)
            else:
                store.update_reply(reply.id, text, token_ids=ids, stats=stats,
                                   stop_reason=event.result.reason.value, parts=self._agent_parts())
                self.tree.reload()
                saved = next((m for m in self.tree.path if m.id == reply.id), None)
                meta = self.entry_for(saved) if saved is not None else None
                footer = meta.footer if meta is not None else stats_line(event.stats)
                self.transcript.end_reply(text, footer, stopped=stopped, meta=meta)
        except sqlite3.Error as e:
            if self.transcript.is_streaming:
                self.transcript.end_reply(text, stats_line(event.stats), stopped=stopped)
            self.transcript.append_error(f"The reply could not be saved: {e}")
        self.messages = list(self.tree.path)
        self._auto_drop = False
        if event.stats.started:
            self.context_meter.set_usage(event.stats.prompt_tokens + event.stats.new_tokens,
                                         self._bridge.max_context)
        self._close_agent()
        if stopped:
            self._set_state("stopped", f"in {seconds_label(event.stats.stop_latency)}"
                            if event.stats.stop_latency is not None else "")
        else:
            self._set_state("done", rate_label(event.stats.decode_tokens_per_sec))
        self._end_turn("finished")

    def _fail(self, event: Failed) -> None:
        self._recorder.finish()
        if self._discarded:
            self._end_turn("failed")
            return
        if self._agent_failed(event):  # a later tool step: the calls made so far stay
            return
        if getattr(event, "partial", ""):
            self._keep_partial(event)
            return
        self._undo_turn()
        template = ERRORS.get(event.kind, "{m}")
        back = "\nYour message was put back in the input box." if self._plan.user_text is not None else ""
        self.transcript.append_error(template.format(m=event.message) + back)
        if self._plan.user_text is not None:
            typed_since = self.input.toPlainText()
            restored = self._sent_text + ("\n\n" + typed_since if typed_since.strip() else "")
            self.input.setPlainText(restored)
            self.input.moveCursor(QTextCursor.MoveOperation.End)
            self._attachments_back()
        self._set_state("error", event.error_type)
        kind = self._plan.kind
        self._end_turn("failed")
        if event.kind == "context_overflow" and kind == "send":
            self._overflowed(event)
        else:
            self._auto_drop = False

    def _keep_partial(self, event: Failed) -> None:
        """A remote stream broke mid-reply: the message and the reply so far stay (saved, with
        its figures and the error as stop reason); the error is said under it."""
        stats = event.stats.to_json() if event.stats is not None else {}
        stats["model_id"] = self._turn_model_id
        text = (self._plan.target.content if self._plan.target is not None else "") + event.partial
        footer = stats_line(event.stats) if event.stats is not None else ""
        try:
            self._store.update_reply(self._reply.id, text, token_ids=None, stats=stats, stop_reason="error")
            self.tree.reload()
        except sqlite3.Error as e:
            self.transcript.append_error(f"The reply could not be saved: {e}")
        self.messages = list(self.tree.path)
        saved = next((m for m in self.tree.path if m.id == self._reply.id), None)
        self.transcript.end_reply(text, footer, stopped=True, meta=self.entry_for(saved) if saved else None)
        self.transcript.append_error(ERRORS.get(event.kind, "{m}").format(m=event.message))
        self._set_state("error", event.kind)
        self._end_turn("failed")

    def _undo_turn(self) -> None:
        """Take back what the failed turn saved; the branch shown before comes back."""
        store, plan, reply = self._store, self._plan, self._reply
        try:
            if plan.target is not None:
                t = plan.target
                store.update_reply(t.id, t.content, token_ids=t.token_ids, stats=t.stats,
                                   stop_reason=t.stop_reason)
            else:
                store.delete_messages([m.id for m in (self._pending_user, reply) if m is not None])
                if plan.replaces is not None:  # the alternative / version shown before
                    store.select_message(plan.replaces)
        except sqlite3.Error:
            pass  # they stay saved; the text is in the input box either way
        self.tree.reload()
        self.messages = list(self.tree.path)
        if plan.kind == "send":
            self.transcript.truncate(self._mark)
        else:
            self.show_messages(self.tree.path)

    def _end_turn(self, how: str) -> None:
        self.request_id = None
        self._pending_user = None
        self.prefill_bar.setVisible(False)
        self.busyChanged.emit(self.conversation.id, False)
        self.turnEnded.emit(self.conversation.id, how)
        self._update_actions()
        if self._dispose_when_idle:
            self.deleteLater()
