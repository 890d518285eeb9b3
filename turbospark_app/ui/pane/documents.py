"""A pane's collections (mixed into ConversationPane): the Collections button, and a turn that
answers from them.

    Collections button  ("Docs") which collections this conversation uses (none by default), and
                        Documents › Collections…; kept in the conversation's settings
                        ("collections": [names])
    a turn              send / regenerate / edit with collections chosen: the question is
                        retrieved for on the hub's query thread (`sources.prepare_turn`, as the
                        CLI's `chat --collection` does), then the turn starts with the prompt's
                        last user message holding the numbered sources and the question (the
                        stored user message stays the question alone); the sources' tokens are
                        capped to what the context leaves after the history and the reply
    the reply           gets a `sources` part (conversations.parts): the Sources list under it,
                        its figures and its [n] chips (`sources_view`), after a restart too;
                        Continue gives the prompt the same sources again
    with attachments    a message that also carries attached documents (`attach_pane`): its
                        attachments stay sources 1..k as `attach_prompt` numbers them, the
                        collections' passages follow from k+1, all in one user message, and their
                        tokens count against the sources' budget
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from PySide6.QtWidgets import QMenu, QToolButton

from ...chat.api import ChatMessage
from ...conversations.parts import Part
from ...documents.sources import Prepared, Source, prompt_with_sources
from .attach_prompt import attachment_sources, document_tokens
from .context import usage_from_messages
from ..services.docs_hub import docs_hub
from ..render.sources_view import sources_meta, sources_part

ROOM = 96  # tokens kept for the template's own text around the sources (as the CLI)


class PaneDocuments:
    """The documents half of ConversationPane (see the module docstring)."""

    _docs_pending = False
    _docs_turn: Prepared | None = None
    _docs_names: list[str] = []
    _docs_prompt: str | None = None
    _docs_ticket = 0  # the retrieval whose result is awaited (Stop, or a newer one, voids it)

    # -- the Collections button ------------------------------------------------------------------

    def _build_documents(self, row: Any) -> None:
        self.collections_button = QToolButton(self)  # type: ignore[arg-type]
        self.collections_button.setObjectName("collectionsButton")
        self.collections_button.setToolTip("Collections: the document collections this conversation "
                                           "answers from (Documents › Collections… makes them)")
        self.collections_button.setAutoRaise(True)
        self.collections_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.collections_menu = QMenu(self.collections_button)
        self.collections_menu.aboutToShow.connect(self._fill_collections_menu)
        self.collections_button.setMenu(self.collections_menu)
        row.addWidget(self.collections_button)
        self._update_collections_label()

    def chosen_collections(self) -> list[str]:
        """The collections this conversation uses that exist (in the hub's index)."""
        chosen = self._settings.get("collections")  # type: ignore[attr-defined]
        names = [str(n) for n in chosen] if isinstance(chosen, list) else []
        hub = docs_hub()
        if hub is None:
            return []
        known = set(hub.names())
        return [n for n in names if n in known]

    def set_collections(self, names: Sequence[str]) -> None:
        """Remember which collections the conversation uses (from the next turn)."""
        self._settings = {**self._settings, "collections": sorted(set(names))}  # type: ignore[attr-defined]
        self._store_settings(self.conversation.system_prompt)  # type: ignore[attr-defined]
        self._update_collections_label()

    def _update_collections_label(self) -> None:
        n = len(self.chosen_collections())
        # Short: a full-width pane keeps its buttons on one row (tests/test_ui_fit.py)
        self.collections_button.setText(f"Docs ({n})" if n else "Docs")

    def _fill_collections_menu(self) -> None:
        menu = self.collections_menu
        menu.clear()
        hub = docs_hub()
        names = hub.names() if hub is not None else []
        on = set(self.chosen_collections())
        if not names:
            menu.addAction("No collections yet").setEnabled(False)
        for name in names:
            action = menu.addAction(name)
            action.setCheckable(True)
            action.setChecked(name in on)
            action.toggled.connect(lambda checked, n=name: self._toggle_collection(n, checked))
        menu.addSeparator()
        menu.addAction("Collections…", self._open_collections_dialog).setEnabled(hub is not None)

    def _toggle_collection(self, name: str, checked: bool) -> None:
        on = set(self.chosen_collections())
        self.set_collections(sorted(on | {name} if checked else on - {name}))

    def _open_collections_dialog(self) -> None:
        from ..dialogs.collections import CollectionsDialog

        hub = docs_hub()
        if hub is not None:
            CollectionsDialog(hub, self).exec()  # type: ignore[arg-type]
            self._update_collections_label()

    # -- the turn --------------------------------------------------------------------------------

    def _start_turn(self, plan: Any) -> bool:  # wraps PaneTools._start_turn
        if self._docs_pending:
            return False
        self._docs_turn, self._docs_prompt = None, None
        names = self.chosen_collections()
        hub = docs_hub()
        question = _question(plan)
        if plan.continue_final:
            self._docs_prompt = _stored_prompt(plan, question)
        if (not names or hub is None or plan.continue_final or question is None
                or self.raw_mode or self.busy):  # type: ignore[attr-defined]
            return super()._start_turn(plan)  # type: ignore[misc]
        self._docs_pending = True
        self._docs_ticket += 1
        ticket = self._docs_ticket
        self._set_state("queued", "searching the collections…")  # type: ignore[attr-defined]
        self._update_actions()  # type: ignore[attr-defined]
        hub.prepare(question, names, self._count_chat, self._docs_budget(plan, question),
                    lambda result: self._docs_ready(plan, names, result, ticket))
        return True

    def _stop_tools(self) -> bool:  # wraps PaneTools._stop_tools: Stop while retrieving
        if self._docs_pending:
            self._docs_pending = False
            self._docs_ticket += 1  # its result is dropped; the message stays in the input
            self._set_state("stopped", "before the model ran")  # type: ignore[attr-defined]
            self._update_actions()  # type: ignore[attr-defined]
            if getattr(self, "_dispose_when_idle", False):  # the pane was closing
                self.deleteLater()  # type: ignore[attr-defined]
            return True
        return super()._stop_tools()  # type: ignore[misc]

    def _docs_ready(self, plan: Any, names: list[str], result: Any, ticket: int) -> None:
        if ticket != self._docs_ticket:
            return  # stopped meanwhile
        self._docs_pending = False
        if getattr(self, "_discarded", False):
            return
        if isinstance(result, Prepared):
            attached = attachment_sources(_user_parts(plan))
            result.sources = [dataclasses.replace(s, n=len(attached) + i + 1) for i, s in enumerate(result.sources)]
            self._docs_turn, self._docs_names = result, names
            question = _question(plan) or ""
            self._docs_prompt = prompt_with_sources(question, attached + result.sources) if result.sources else None
        else:
            self.transcript.append_error(  # type: ignore[attr-defined]
                f"The collections could not be searched ({result}); the question goes without sources.")
        if not super()._start_turn(plan):  # type: ignore[misc]
            self._docs_turn = self._docs_prompt = None
            self._set_state("idle")  # type: ignore[attr-defined]

    def _with_documents(self, messages: Sequence[ChatMessage]) -> Sequence[ChatMessage]:
        """The prompt with its last user message holding the turn's sources (PaneTurns calls
        it for every request)."""
        if not self._docs_prompt:
            return messages
        out = list(messages)
        for i in range(len(out) - 1, -1, -1):
            if out[i].role == "user":
                out[i] = dataclasses.replace(out[i], content=self._docs_prompt, token_ids=None)
                break
        return tuple(out)

    def _agent_parts(self) -> list[Part] | None:
        parts = super()._agent_parts()  # type: ignore[misc]
        turn = self._docs_turn
        if turn is None or not turn.sources:
            return parts
        return [*(parts or []), sources_part(turn, self._docs_names)]

    # -- helpers ---------------------------------------------------------------------------------

    def _count_chat(self, text: str) -> int:
        """The chat model's tokens of `text` (a remote model: about 4 characters a token)."""
        builder = self._builder()  # type: ignore[attr-defined]
        tokenizer = getattr(builder, "tokenizer", None)
        if tokenizer is None:
            return max(1, len(text) // 4)
        return len(tokenizer.encode(text))

    def _docs_budget(self, plan: Any, question: str) -> int:
        """The chat tokens the sources may take: the context less the history, the reply's
        budget, the question and some room for the template."""
        from .turns import model_identity

        context = int(getattr(self._bridge, "max_context", 0) or 0)  # type: ignore[attr-defined]
        if context <= 0:
            return 2048
        history = usage_from_messages(list(plan.history), model_identity(self._bridge.model_info)) or 0  # type: ignore[attr-defined]
        max_new = int(self._settings.get("max_new_tokens") or 256)  # type: ignore[attr-defined]
        attached = document_tokens(plan.user_parts) if plan.user_text is not None else 0
        return max(0, context - history - max_new - ROOM - self._count_chat(question) - attached)


def _question(plan: Any) -> str | None:
    """The question a turn answers: the new user message, else the last one of the history."""
    if plan.user_text is not None:
        return str(plan.user_text)
    last = next((m for m in reversed(plan.history) if m.role == "user"), None)
    return last.content if last is not None else None


def _user_parts(plan: Any) -> Sequence[Part]:
    """The parts (images, attachments) of the user message a turn answers."""
    if plan.user_text is not None:
        return tuple(plan.user_parts)
    last = next((m for m in reversed(plan.history) if m.role == "user"), None)
    return last.parts if last is not None else ()


def _stored_prompt(plan: Any, question: str | None) -> str | None:
    """Continue: the prompt text the reply was given, rebuilt from its sources part."""
    meta = sources_meta(plan.target.parts) if plan.target is not None else None
    if meta is None or question is None:
        return None
    sources = [Source(int(s.get("n", i + 1)), str(s.get("path", "")), s.get("page"), str(s.get("text", "")),
                      str(s.get("mode", "retrieved"))) for i, s in enumerate(meta.get("sources") or [])]
    return prompt_with_sources(question, attachment_sources(_user_parts(plan)) + sources) if sources else None
