"""A pane's tools (mixed into ConversationPane): the Tools button, and the agent loop of a turn
(`tools.agent` has the rules).

    Tools button  which MCP servers this conversation may use (none by default), whether the
                  first step must call a tool, and Tools › MCP Servers…; kept in the
                  conversation's settings ("tools": {"servers": [...], "choice": ...})
    a turn        the servers start (together, on the app's qasync loop), their tools go to the
                  model through its template's `tools` variable (a forced call is constrained to
                  its JSON: it works on a template without tools); a template that renders no
                  tools, with the model left to choose, is said in the pane
    a step        a reply that made calls: one approval card per call under the transcript
                  (Allow once · Always allow this tool · Deny), the allowed ones run together,
                  each card shows its running time then its result; the results go back as
                  `tool` messages and the next step runs on the same KV session
    the store     the reply row grows: each step's text, calls and results become its parts
                  (saved after every step), the final answer its text
    Stop          ends the loop at once (a call in flight is cancelled), keeping everything
"""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtWidgets import QMenu, QToolButton, QVBoxLayout, QWidget

from ...chat.api import ChatMessage, reply_token_ids
from ...chat.formats import parser_for
from ...chat.structured import StructuredError, StructuredPlan, plan_structured, supports_tools
from ...conversations.checkpoint import ReplyRecorder
from ...conversations.parts import Part
from ...conversations.reply_stats import INTERRUPTED
from ...engine.errors import EngineError
from ...engine.progress import StopReason
from ...service import TurnRequest
from ...tools.agent import (
    DEFAULT_STEP_LIMIT,
    PendingCall,
    pending_calls,
    run_calls,
    step_limit_note,
    step_messages,
    step_parts,
    step_request,
)
from ...tools.hub import OfferedTool
from .tool_approval import ApprovalCard
from .transcript import Entry
from ..services.tools_service import tools_service

NO_TEMPLATE_TOOLS = ("The model's chat template does not support tools (it never renders a "
                     "`tools` list), so it cannot be offered them. Choose Tools › “Require a tool "
                     "call” to force one (the call is constrained to its JSON), or another model.")


@dataclass
class AgentState:
    """The running loop of one user message."""

    offered: list[OfferedTool]
    choice: str
    template_tools: bool
    limit: int = DEFAULT_STEP_LIMIT
    step: int = 0
    base: tuple[ChatMessage, ...] = ()
    added: list[ChatMessage] = field(default_factory=list)
    parts: list[Part] = field(default_factory=list)
    system_note: str | None = None
    plan: StructuredPlan = field(default_factory=StructuredPlan)
    task: "asyncio.Task[None] | None" = None
    cards: list[ApprovalCard] = field(default_factory=list)


class PaneTools:
    """The tools half of ConversationPane (see the module docstring)."""

    _agent: AgentState | None = None
    _agent_starting = False

    # -- the Tools button ---------------------------------------------------------------------

    def _build_tools(self, row: Any, footer: QVBoxLayout) -> None:
        self.tools_button = QToolButton(self)  # type: ignore[arg-type]
        self.tools_button.setObjectName("toolsButton")
        self.tools_button.setText("Tools")
        self.tools_button.setToolTip("MCP servers the model may call in this conversation")
        self.tools_button.setAutoRaise(True)
        self.tools_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.tools_menu = QMenu(self.tools_button)
        self.tools_menu.aboutToShow.connect(self._fill_tools_menu)
        self.tools_button.setMenu(self.tools_menu)
        row.addWidget(self.tools_button)
        self.cards_box = QWidget(self)  # type: ignore[arg-type]
        self.cards_box.setObjectName("toolCards")
        self.cards_layout = QVBoxLayout(self.cards_box)
        self.cards_layout.setContentsMargins(0, 0, 0, 0)
        self.cards_box.setVisible(False)
        footer.insertWidget(0, self.cards_box)
        self._update_tools_label()

    def tool_settings(self) -> dict[str, Any]:
        """{"servers": [...], "choice": "auto" | "required"} (generation_settings.parse_tools)."""
        value = self._settings.get("tools")  # type: ignore[attr-defined]
        return dict(value) if isinstance(value, dict) else {}

    def tool_servers(self) -> list[str]:
        """The servers this conversation may use that are configured and switched on."""
        on = set(self.tool_settings().get("servers") or ())
        return [s.name for s in tools_service().hub.enabled() if s.name in on]

    def set_tool_servers(self, servers: list[str], choice: str | None = None) -> None:
        value = {**self.tool_settings(), "servers": sorted(servers)}
        if choice is not None:
            value["choice"] = choice
        self._settings = {**self._settings, "tools": value}  # type: ignore[attr-defined]
        self._store_settings(self.conversation.system_prompt)  # type: ignore[attr-defined]
        self._update_tools_label()

    def _update_tools_label(self) -> None:
        n = len(self.tool_servers())
        self.tools_button.setText(f"Tools ({n})" if n else "Tools")

    def _fill_tools_menu(self) -> None:
        menu = self.tools_menu
        menu.clear()
        service = tools_service()
        on = set(self.tool_settings().get("servers") or ())
        if service.problem:
            menu.addAction(f"mcp.json: {service.problem}").setEnabled(False)
        if not service.hub.servers:
            menu.addAction("No MCP servers configured").setEnabled(False)
        for server in service.hub.servers.values():
            label = server.name + ("" if not server.entry.disabled else " (off in MCP Servers)")
            action = menu.addAction(label)
            action.setCheckable(True)
            action.setChecked(server.name in on)
            action.setEnabled(not server.entry.disabled)
            action.toggled.connect(lambda checked, n=server.name: self._toggle_server(n, checked))
        menu.addSeparator()
        required = menu.addAction("Require a tool call (first step)")
        required.setCheckable(True)
        required.setChecked(self.tool_settings().get("choice") == "required")
        required.toggled.connect(lambda checked: self.set_tool_servers(
            list(self.tool_settings().get("servers") or ()), "required" if checked else "auto"))
        menu.addSeparator()
        menu.addAction("MCP Servers…", self._open_servers_dialog)

    def _toggle_server(self, name: str, checked: bool) -> None:
        on = set(self.tool_settings().get("servers") or ())
        on = on | {name} if checked else on - {name}
        self.set_tool_servers(sorted(on))

    def _open_servers_dialog(self) -> None:
        from ..dialogs.mcp import McpServersDialog

        McpServersDialog(tools_service(), self).exec()  # type: ignore[arg-type]
        self._update_tools_label()

    # -- the loop -----------------------------------------------------------------------------

    def _start_turn(self, plan: Any) -> bool:  # wraps PaneTurns._start_turn
        self._agent = None
        servers = self.tool_servers()
        if (not servers or plan.continue_final or self.raw_mode  # type: ignore[attr-defined]
                or self.busy or self._agent_starting):  # type: ignore[attr-defined]
            if self._agent_starting:
                return False
            return super()._start_turn(plan)  # type: ignore[misc]
        self._agent_starting = True
        self._set_state("queued", "starting tools…")  # type: ignore[attr-defined]
        asyncio.ensure_future(self._offer_then_start(plan, servers))
        return True

    async def _offer_then_start(self, plan: Any, servers: list[str]) -> None:
        try:
            offered, problems = await tools_service().hub.offer(servers)
        finally:
            self._agent_starting = False
        for problem in problems:
            self.transcript.append_error(problem)  # type: ignore[attr-defined]
        builder = self._builder()
        template = getattr(builder, "template", None)
        choice = str(self.tool_settings().get("choice") or "auto")
        template_tools = template is not None and supports_tools(template)
        if offered and builder is not None and not (choice == "auto" and not template_tools):
            limit = int(self._settings.get("tool_step_limit") or DEFAULT_STEP_LIMIT)  # type: ignore[attr-defined]
            self._agent = AgentState(offered, choice, template_tools, limit)
        elif offered and choice == "auto" and not template_tools:
            self.transcript.append_error(NO_TEMPLATE_TOOLS)  # type: ignore[attr-defined]
        if not super()._start_turn(plan):  # type: ignore[misc]
            self._agent = None

    def _builder(self) -> Any:
        """The local model's prompt builder (template, tokenizer; thread-safe), None for a
        remote engine or no model."""
        bridge = self._bridge  # type: ignore[attr-defined]
        remote = getattr(bridge, "is_remote", False)
        if callable(remote):
            remote = remote()
        if remote:
            return None
        facts = getattr(getattr(bridge, "engine", None), "facts", None)
        return facts[2] if facts else None

    def _with_tools(self, messages: tuple[ChatMessage, ...], settings: Any) -> tuple[tuple[ChatMessage, ...], Any]:
        """The step's messages and settings: the tools in the template variables, a forced
        call's grammar, the results so far (PaneTurns calls it for every request)."""
        a = self._agent
        if a is None:
            return messages, settings
        if a.step == 0:
            a.base = tuple(messages)
        builder = self._builder()
        request = step_request(a.offered, a.choice, first=a.step == 0, template_tools=a.template_tools)
        try:
            a.plan = plan_structured(request, builder.template, builder.tokenizer)
        except (StructuredError, EngineError) as e:
            self.transcript.append_error(f"The tools could not be offered: {e}")  # type: ignore[attr-defined]
            self._agent = None
            return messages, settings
        if a.step == 0 and a.plan.system_note:
            a.system_note = a.plan.system_note
        msgs = (*a.base, *a.added)
        if a.system_note:
            msgs = (ChatMessage("system", a.system_note), *msgs)
        variables = (*settings.template_vars, *a.plan.template_vars.items())
        gen = dataclasses.replace(settings.generation, constraint=a.plan.constraint)
        return msgs, dataclasses.replace(settings, template_vars=variables, generation=gen)

    def _agent_step_done(self, event: Any) -> bool:
        """A step ended: True when its calls go on (the turn continues), False when this was
        the last step (PaneTurns saves it as the reply, with `_agent_parts`)."""
        a = self._agent
        if a is None or event.result.reason is StopReason.CANCELLED:
            return False
        text = "".join(self._parts)  # type: ignore[attr-defined]
        source = (self._bridge.model_info or {}).get("chat_template")  # type: ignore[attr-defined]
        parser = parser_for(source, "", tools=a.plan.tools, forced=a.plan.forced)
        parser.feed(text)
        parser.finish()
        calls = parser.reply.tool_calls
        if not calls:
            return False
        if a.step >= a.limit:
            self.transcript.append_error(step_limit_note(a.limit))  # type: ignore[attr-defined]
            return False
        ids = reply_token_ids(event.result.reason, event.generated_ids)
        pending = pending_calls(calls, tools_service().hub)
        # The step as a card per call (its text spells them in the model's markup): the
        # cards under the transcript ask, and the whole reply is shown again when it ends.
        step = Entry("assistant", text, answer=parser.reply.content, reasoning=parser.reply.reasoning,
                     reasoning_label="Thought" if parser.reply.reasoning else "",
                     tool_calls=tuple((c.name, c.arguments) for c in calls))
        self.transcript.end_reply(text, f"step {a.step + 1} · {len(pending)} tool call"  # type: ignore[attr-defined]
                                  + ("s" if len(pending) != 1 else ""), meta=step)
        self.request_id = None  # the engine's turn ended; the loop goes on (busy: `_agent`)
        self._set_state("tools")  # type: ignore[attr-defined]
        a.task = asyncio.ensure_future(self._run_step(a, text, ids, pending))
        return True

    def _agent_parts(self) -> list[Part] | None:
        return list(self._agent.parts) if self._agent is not None else None

    @property
    def agent_busy(self) -> bool:
        return self._agent is not None and self._agent.task is not None and not self._agent.task.done()

    async def _ask(self, call: PendingCall) -> str:
        card = self._card_for(call)
        self._set_state("tools", "waiting for your approval")  # type: ignore[attr-defined]
        return await card.ask()

    def _card_for(self, call: PendingCall) -> ApprovalCard:
        a = self._agent
        for card in a.cards if a else []:
            if card.call is call:
                return card
        card = ApprovalCard(call, parent=self.cards_box)
        self.cards_layout.addWidget(card)
        self.cards_box.setVisible(True)
        if a is not None:
            a.cards.append(card)
        return card

    def _on_call_update(self, call: PendingCall) -> None:
        if call.problem is not None:
            return
        card = self._card_for(call)
        if call.outcome is None:
            card.show_decision(call.decision)
            self._set_state("tools", f"running {call.call.name}")  # type: ignore[attr-defined]
        else:
            card.show_outcome()

    async def _run_step(self, a: AgentState, text: str, ids: Any, pending: list[PendingCall]) -> None:
        service = tools_service()
        try:
            # A document's text in the prompt: every call asks, "always allow" is suspended.
            await run_calls(service.hub, pending, self._ask, service.approvals, on_update=self._on_call_update,
                            untrusted_text=getattr(self, "_untrusted_turn", False))
        except asyncio.CancelledError:
            a.parts += step_parts(text, ids, pending)
            self._end_agent(StopReason.CANCELLED)
            return
        a.parts += step_parts(text, ids, pending)
        a.added += step_messages(text, ids, pending)
        a.step += 1
        try:  # every step is saved: a crash keeps the calls made and their results
            self._store.update_reply(self._reply.id, "", token_ids=None, stats=None,  # type: ignore[attr-defined]
                                     stop_reason=INTERRUPTED, parts=a.parts)
        except sqlite3.Error as e:
            self.transcript.append_error(f"The tool results could not be saved: {e}")  # type: ignore[attr-defined]
        self._submit_next_step()

    def _submit_next_step(self) -> None:
        """The next step on the same reply row and KV session."""
        a = self._agent
        assert a is not None
        self._recorder = ReplyRecorder(self._store.checkpointer(), self._reply.id,  # type: ignore[attr-defined]
                                       prefix="", prefix_ids=(), previous_stats=None,
                                       model_id=self._turn_model_id)  # type: ignore[attr-defined]
        self.transcript.begin_reply()  # type: ignore[attr-defined]
        messages, settings = self._with_tools(a.base, self._agent_settings)
        self._tokens, self._first_token_at = 0, None  # type: ignore[attr-defined]
        self._parts = []  # type: ignore[attr-defined]
        self.request_id = self._bridge.submit(  # type: ignore[attr-defined]
            TurnRequest(self.conversation.id, messages, settings), self._on_event)  # type: ignore[attr-defined]
        self._set_state("queued")  # type: ignore[attr-defined]

    def _agent_failed(self, event: Any) -> bool:
        """A step after tool calls failed (the context overflowed with a result, the model
        failed): the reply keeps its calls and results, and the error is said under it."""
        a = self._agent
        if a is None or a.step == 0:
            return False
        try:
            self._store.update_reply(self._reply.id, "", token_ids=None,  # type: ignore[attr-defined]
                                     stats={"model_id": self._turn_model_id},  # type: ignore[attr-defined]
                                     stop_reason="error", parts=a.parts)
        except sqlite3.Error:
            pass  # the parts saved after the last step stay
        self._close_agent()
        self.transcript.append_error(f"The model could not go on after the tool results: {event.message}")  # type: ignore[attr-defined]
        self._set_state("error", getattr(event, "error_type", ""))  # type: ignore[attr-defined]
        self._end_turn("failed")  # type: ignore[attr-defined]
        return True

    def _stop_tools(self) -> bool:
        """Stop pressed while calls run: cancel them (True when there were some)."""
        a = self._agent
        if a is not None and a.task is not None and not a.task.done():
            a.task.cancel()
            return True
        return False

    def _end_agent(self, reason: StopReason) -> None:
        """The loop ended between steps (Stop while a tool ran): the reply keeps its parts."""
        a = self._agent
        try:
            self._store.update_reply(self._reply.id, "", token_ids=None, stats={"model_id": self._turn_model_id},  # type: ignore[attr-defined]
                                     stop_reason=reason.value, parts=a.parts if a else None)
        except sqlite3.Error as e:
            self.transcript.append_error(f"The reply could not be saved: {e}")  # type: ignore[attr-defined]
        self._set_state("stopped")  # type: ignore[attr-defined]
        self._close_agent()
        self._end_turn("finished")  # type: ignore[attr-defined]

    def _close_agent(self) -> None:
        """The loop is over: the cards go (the transcript shows each call and its result)."""
        a, self._agent = self._agent, None
        for card in a.cards if a else []:
            card.deleteLater()
        self.cards_box.setVisible(False)
        if a is None:  # no tools: the reply's own rendering (end_reply) is what the store holds
            return
        self.tree.reload()  # type: ignore[attr-defined]
        self.messages = list(self.tree.path)  # type: ignore[attr-defined]
        self.show_messages(self.messages)  # type: ignore[attr-defined]
