"""A chat reply as the OpenAI API shapes it once read (`chat.formats`): `content`,
`reasoning_content` (as llama-server and the DeepSeek API send it), `tool_calls`, and
finish_reason "tool_calls" for a reply that made calls.

Streamed, each token's deltas become one chunk delta: {"content": ...}, {"reasoning_content":
...}, {"tool_calls": [{"index", "id", "type": "function", "function": {"name", "arguments"}}]}
(a call's first delta has its id and name, the next ones its arguments' next piece, as OpenAI
streams them and its clients accumulate them)."""

from __future__ import annotations

from typing import Any

from ..chat.formats import (
    ContentDelta,
    ReasoningDelta,
    ReplyDelta,
    ReplyReader,
    ToolCall,
    ToolCallDelta,
    parser_for,
    prompt_tail,
)
from ..engine.progress import StopReason

def reader_for(admitted: Any) -> ReplyReader | None:
    """The reply's reader (chat only: a completion's text is returned as it is)."""
    p = admitted.params
    if p.kind != "chat":
        return None
    template = getattr(admitted.builder, "template", None)
    source = getattr(template, "source", None)
    plan = admitted.plan
    tail = prompt_tail(getattr(admitted.builder, "tokenizer", None), admitted.prompt_ids)
    parser = parser_for(source, tail, tools=plan.tools, forced=plan.forced)
    if p.continue_final:  # the reply goes on from a message: no reasoning block opens here
        parser.reasoning = None
        parser._state = "content"  # noqa: SLF001 (the parser's documented start states)
    return ReplyReader(parser, getattr(admitted.builder, "tokenizer", None))


def call_json(call: ToolCall) -> dict[str, Any]:
    """A tool call as the API writes it in a message."""
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


def call_deltas_json(deltas: list[ToolCallDelta]) -> list[dict[str, Any]]:
    """One chunk's `tool_calls`: the pieces of each call joined (its id, type and name on its
    first piece only)."""
    out: dict[int, dict[str, Any]] = {}
    for d in deltas:
        entry = out.get(d.index)
        if entry is None:
            entry = out[d.index] = {"index": d.index}
            if d.id is not None:
                entry.update(id=d.id, type="function")
            entry["function"] = {"arguments": d.arguments} if d.name is None else \
                {"name": d.name, "arguments": d.arguments}
        else:
            entry["function"]["arguments"] += d.arguments
    return [out[i] for i in sorted(out)]


def delta_json(deltas: list[ReplyDelta]) -> dict[str, Any]:
    """One chunk's delta for the reader's deltas ({} when they say nothing)."""
    out: dict[str, Any] = {}
    content = "".join(d.text for d in deltas if isinstance(d, ContentDelta))
    reasoning = "".join(d.text for d in deltas if isinstance(d, ReasoningDelta))
    calls = call_deltas_json([d for d in deltas if isinstance(d, ToolCallDelta)])
    if reasoning:
        out["reasoning_content"] = reasoning
    if content:
        out["content"] = content
    if calls:
        out["tool_calls"] = calls
    return out


def message_json(reader: ReplyReader) -> dict[str, Any]:
    """The non-stream `message` of a read reply."""
    reply = reader.reply
    message: dict[str, Any] = {"role": "assistant",
                               "content": reply.content if reply.content or not reply.tool_calls else None,
                               "refusal": None}
    if reply.reasoning:
        message["reasoning_content"] = reply.reasoning
    if reply.tool_calls:
        message["tool_calls"] = [call_json(c) for c in reply.tool_calls]
    return message


def reply_finish(reader: ReplyReader | None, reason: StopReason, finish: str) -> str:
    """finish_reason: "tool_calls" for a reply that ended by itself with calls."""
    if reader is not None and reader.reply.tool_calls and reason is not StopReason.MAX_TOKENS:
        return "tool_calls"
    if reader is not None and not reader.reply.tool_calls and finish == "tool_calls":
        return "stop"  # a tool-call token, but no call could be read: the text is the answer
    return finish
