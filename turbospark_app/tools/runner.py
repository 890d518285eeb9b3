"""The agent loop run to its end on a thread that owns the model (the command line's turn
worker, a test), with the MCP servers on an asyncio loop in another thread (`LoopThread`; the
window's loop is qasync's own). See `agent` for the loop's rules.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Coroutine, Sequence

from ..chat.api import ChatMessage, TurnSettings, reply_token_ids
from ..chat.formats import ReplyReader, parser_for, prompt_tail
from ..chat.structured import StructuredPlan, plan_structured, supports_tools
from ..conversations.parts import Part
from ..engine import RawDecodeResult, StopReason, TailProgress, TokenProgress
from ..engine.raw_completion import drive_raw_completion
from .agent import Ask, DEFAULT_STEP_LIMIT, PendingCall, pending_calls, run_calls, step_limit_note, \
    step_messages, step_parts, step_request
from .approval import Approvals
from .hub import OfferedTool, ToolHub


class LoopThread:
    """An asyncio loop on a daemon thread: the MCP servers' home when no GUI loop runs."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="mcp-loop", daemon=True)
        self._thread.start()

    def submit(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, Any], cancel: Callable[[], bool] | None = None,
            poll: float = 0.01) -> Any:
        """Run `coro` on the loop and wait; `cancel()` turning True cancels it (CancelledError)."""
        future = self.submit(coro)
        while True:
            try:
                return future.result(timeout=poll)
            except concurrent.futures.TimeoutError:
                if cancel is not None and cancel():
                    future.cancel()
                    try:
                        future.result(timeout=5)
                    except (concurrent.futures.CancelledError, asyncio.CancelledError):
                        pass
                    raise asyncio.CancelledError() from None

    def close(self, hub: ToolHub | None = None) -> None:
        """Stop the hub's servers (no orphans), then the loop."""
        if hub is not None:
            try:
                self.submit(hub.stop_all()).result(timeout=15)
            except Exception:  # noqa: BLE001 (quitting: nothing left to tell)
                pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)


@dataclass
class StepRecord:
    """One step's figures: the engine's result, when its last token came, its calls."""

    result: RawDecodeResult
    text: str
    last_token_at: float  # time.time() of its last token (a call's last token, when it called)
    ended_at: float = 0.0  # time.time() when the step's run returned (its end-of-turn decoded)
    calls: list[PendingCall] = field(default_factory=list)


@dataclass
class AgentResult:
    """The loop's end: the final answer, every part before it, each step's record."""

    text: str
    token_ids: tuple[int, ...] | None
    parts: list[Part]
    steps: list[StepRecord]
    reason: StopReason
    note: str = ""  # the step limit, a server that failed, a template without tools
    messages: list[ChatMessage] = field(default_factory=list)  # the prompt's messages + the steps


def run_agent_turn(
    backend: Any, messages: Sequence[ChatMessage], settings: TurnSettings, hub: ToolHub,
    loop: LoopThread, ask: Ask, approvals: Approvals, cancel: Callable[[], bool], *,
    choice: str = "auto", step_limit: int = DEFAULT_STEP_LIMIT, session_id: str = "cli",
    on_delta: Callable[[str], None] | None = None,
    on_calls: Callable[[list[PendingCall]], None] | None = None,
    on_update: Callable[[PendingCall], None] | None = None,
    sent: Callable[[], None] | None = None, untrusted_text: bool = False,
) -> AgentResult:
    """One user message's loop on `backend` (a LlamaChatBackend: template, tokenizer, prompts).
    `untrusted_text`: text the user did not write (a document) is in the prompt, so every call
    asks, "always allow" or not. Raises EngineError / StructuredError before the first step runs
    (nothing recorded)."""
    offered, problems = loop.run(hub.offer(), cancel)
    template = backend.template
    template_tools = template is not None and supports_tools(template)
    msgs = list(messages)
    parts: list[Part] = []
    steps: list[StepRecord] = []
    note = "\n".join(problems)
    system_note: str | None = None
    for step in range(step_limit + 1):
        request = step_request(offered, choice, first=step == 0, template_tools=template_tools)
        plan = plan_structured(request, template, backend.tokenizer) if request.active else StructuredPlan()
        if step == 0 and plan.system_note:
            system_note = plan.system_note
        prompt = [ChatMessage("system", system_note), *msgs] if system_note else msgs
        ids = backend.prompts.chat_ids(prompt, settings.system_prompt, template_vars=plan.template_vars or None)
        gen = dataclasses.replace(settings.generation, constraint=plan.constraint)
        turn = backend.prepare_prompt(session_id, ids, dataclasses.replace(settings, generation=gen))
        template_source = getattr(template, "source", None)
        reader = ReplyReader(parser_for(template_source, prompt_tail(backend.tokenizer, ids),
                                        tools=plan.tools, forced=plan.forced), backend.tokenizer)
        out_ids: list[int] = []
        text: list[str] = []
        last = [time.time()]

        def on_progress(event: Any) -> None:
            if isinstance(event, TokenProgress):
                out_ids.append(event.id)
                text.append(event.delta)
                reader.feed_token(event.id, event.delta)
                last[0] = time.time()
            elif isinstance(event, TailProgress):
                text.append(event.text)
                reader.feed_text(event.text)
            if on_delta is not None:
                piece = event.delta if isinstance(event, TokenProgress) else getattr(event, "text", "")
                if piece:
                    on_delta(piece)

        result = drive_raw_completion(backend.stream_turn(turn, cancel), gen.rate, cancel, on_progress)
        reader.finish()
        reply = "".join(text)
        kept_ids = reply_token_ids(result.reason, out_ids)
        record = StepRecord(result, reply, last[0], time.time())
        steps.append(record)
        calls = reader.reply.tool_calls
        if result.reason is StopReason.CANCELLED or not calls or not offered:
            return AgentResult(reply, kept_ids, parts, steps, result.reason, note, [*msgs])
        if step == step_limit:
            return AgentResult(reply, kept_ids, parts, steps, result.reason,
                               "\n".join(filter(None, [note, step_limit_note(step_limit)])), [*msgs])
        pending = pending_calls(calls, hub)
        record.calls = pending
        if on_calls is not None:
            on_calls(pending)
        try:
            loop.run(run_calls(hub, pending, ask, approvals, untrusted_text=untrusted_text,
                               on_update=on_update, sent=sent), cancel)
        except asyncio.CancelledError:
            parts += step_parts(reply, kept_ids, pending)
            return AgentResult("", None, parts, steps, StopReason.CANCELLED, note,
                               [*msgs, *step_messages(reply, kept_ids, pending)])
        parts += step_parts(reply, kept_ids, pending)
        msgs += step_messages(reply, kept_ids, pending)
    raise AssertionError("unreachable")  # the loop returns at step_limit


__all__ = ["AgentResult", "LoopThread", "OfferedTool", "StepRecord", "run_agent_turn"]
