"""The agent loop's pieces, shared by the window and the command line.

A user message starts a loop: the model replies (one step on the engine); a reply that made
tool calls has each call approved (`approval`) and run, all of a reply's calls together; the
results go back as `tool` messages through the model's own chat template, and the model
continues from the KV it holds (the prompt of step N+1 is step N's prompt + its generated ids +
the template's text around the results: only that is read again). It ends with a reply that
makes no call, at the step limit (said so), or at Stop (everything so far kept).

A forced call (`tool_choice` required or a named tool) forces the FIRST step only, constrained
to the call's JSON (it works on a template without tool support, the default model's); the
steps after it are `auto` when the template renders tools, else `none` (the model answers from
the results). What is offered stays the same through the loop, so the prefix does too.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Sequence

from ..chat.api import ChatMessage
from ..chat.formats import ToolCall
from ..chat.structured import StructuredRequest
from ..conversations.parts import TEXT, TOOL_CALL, TOOL_RESULT, Part
from .approval import ALLOW_ONCE, ALWAYS, DENY, Approvals
from .hub import OfferedTool, ToolHub, parse_arguments
from .results import ToolOutcome, error_outcome

DEFAULT_STEP_LIMIT = 10
DENIED = "The user denied this call."
STOPPED = "Stopped by the user before the tool answered."


def step_request(offered: Sequence[OfferedTool], choice: str = "auto", *, first: bool,
                 template_tools: bool) -> StructuredRequest:
    """The structured request of one step (see the module docstring). `choice`: "auto",
    "none", "required" or a tool's model name; `template_tools`: the template renders tools."""
    tools = tuple(t.openai() for t in offered)
    if not tools:
        return StructuredRequest()
    if first and choice == "required":
        return StructuredRequest(tools=tools, tool_choice="required", parallel=True)
    if first and choice not in ("auto", "none", "required"):
        return StructuredRequest(tools=tools, tool_choice="function", forced_name=choice)
    if choice == "none" or not template_tools:
        return StructuredRequest(tools=tools, tool_choice="none")
    return StructuredRequest(tools=tools, tool_choice="auto")


@dataclass
class PendingCall:
    """A call the model made, matched to an offered tool (or the reason it cannot run)."""

    call: ToolCall
    tool: OfferedTool | None
    arguments: dict[str, Any] = field(default_factory=dict)
    problem: str | None = None
    decision: str | None = None  # ALLOW_ONCE | ALWAYS | DENY | "auto" (remembered "always")
    outcome: ToolOutcome | None = None

    def label(self) -> str:
        """`add({"a": 2, "b": 3})` as the approval prompt shows it."""
        return f"{self.call.name}({json.dumps(self.arguments, ensure_ascii=False)})"


def pending_calls(calls: Sequence[ToolCall], hub: ToolHub) -> list[PendingCall]:
    """The reply's calls matched to the hub's tools; a call naming no offered tool, or with
    arguments that are not a JSON object, gets a problem (sent back to the model as an error)."""
    out = []
    for call in calls:
        tool = hub.find(call.name)
        try:
            args = parse_arguments(call.arguments)
            problem = None if tool is not None else f"there is no tool named {call.name!r}"
        except ValueError as e:
            args, problem = {}, str(e)
        out.append(PendingCall(call, tool, args, problem))
    return out


Ask = Callable[[PendingCall], Awaitable[str]]  # -> ALLOW_ONCE | ALWAYS | DENY


async def run_calls(hub: ToolHub, calls: Sequence[PendingCall], ask: Ask, approvals: Approvals, *,
                    untrusted_text: bool = False, timeout: float | None = None,
                    on_update: Callable[[PendingCall], None] | None = None,
                    sent: Callable[[], None] | None = None) -> None:
    """Approve and run a reply's calls, all together; each gets its `outcome`. Cancelling the
    awaiting task (Stop) cancels the calls in flight; their outcomes say so."""

    async def one(p: PendingCall) -> None:
        if p.problem is not None or p.tool is None:
            p.outcome = error_outcome(p.problem or "unknown tool")
        else:
            identity = hub.identity(p.tool)
            if approvals.allowed(identity, p.tool.tool, untrusted_text=untrusted_text):
                p.decision = "auto"
            else:
                p.decision = await ask(p)
                if p.decision == ALWAYS:
                    approvals.remember(identity, p.tool.tool)
            if on_update is not None:
                on_update(p)
            if p.decision == DENY:
                p.outcome = error_outcome(DENIED)
            else:
                start = time.perf_counter()
                try:
                    p.outcome = await hub.call(p.tool, p.arguments, timeout=timeout, sent=sent)
                except asyncio.CancelledError:
                    p.outcome = error_outcome(STOPPED, time.perf_counter() - start)
                    raise
        if on_update is not None:
            on_update(p)

    await asyncio.gather(*(one(p) for p in calls))


def step_parts(text: str, token_ids: Sequence[int] | None, calls: Sequence[PendingCall]) -> list[Part]:
    """The parts one step adds to the reply: its text (with the ids it was generated with),
    then each call and each result."""
    parts = [Part(TEXT, text, None if token_ids is None else tuple(token_ids))]
    for p in calls:
        meta: dict[str, Any] = {"approval": p.decision or ("error" if p.problem else "")}
        if p.tool is not None:
            meta.update(server=p.tool.server, tool=p.tool.tool)
        parts.append(Part(TOOL_CALL, call_id=p.call.id, name=p.call.name, arguments=p.call.arguments,
                          meta=meta))
    for p in calls:
        o = p.outcome or error_outcome(STOPPED)
        parts.append(Part(TOOL_RESULT, o.text, call_id=p.call.id, name=p.call.name,
                          meta={"is_error": o.is_error, "seconds": round(o.seconds, 4),
                                "truncated": o.truncated}))
    return parts


def step_messages(text: str, token_ids: Sequence[int] | None,
                  calls: Sequence[PendingCall]) -> list[ChatMessage]:
    """The messages one step adds to the prompt: the reply as written (its calls in the
    model's own markup, its ids spliced) and a `tool` message per result."""
    out = [ChatMessage("assistant", text, None if token_ids is None else tuple(token_ids))]
    for p in calls:
        o = p.outcome or error_outcome(STOPPED)
        body = f"Error: {o.text}" if o.is_error else o.text
        out.append(ChatMessage("tool", body, tool_call_id=p.call.id, name=p.call.name))
    return out


def step_limit_note(limit: int) -> str:
    return (f"Stopped after {limit} tool steps (the step limit in Settings): the model kept "
            "calling tools without answering.")


__all__ = ["ALLOW_ONCE", "ALWAYS", "DENY", "DEFAULT_STEP_LIMIT", "PendingCall", "pending_calls",
           "run_calls", "step_limit_note", "step_messages", "step_parts", "step_request"]
