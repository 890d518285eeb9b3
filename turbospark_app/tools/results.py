"""A tool's result as the text the model reads and the card shows.

Text blocks are joined; structured content without text is given as JSON; an image, audio or
a resource is a short note naming it (the model here reads text); an error result is marked as
one. Past `cap` characters the text is cut with a visible note (Jan's marker), so one tool
cannot overflow the context.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

DEFAULT_CAP = 8000  # characters (~2k tokens): room for an answer in a 4k context


@dataclass(frozen=True)
class ToolOutcome:
    """What a call gave: the text for the model, whether it is an error, how long it took."""

    text: str
    is_error: bool = False
    seconds: float = 0.0
    truncated: bool = False


def cap_text(text: str, cap: int = DEFAULT_CAP) -> tuple[str, bool]:
    """(text cut to `cap` characters with a note saying so, whether it was cut)."""
    if len(text) <= cap:
        return text, False
    note = (f"\n[Tool output truncated: {cap} of {len(text)} characters retained. "
            "Raise \"Max tool output characters\" in Settings to see more.]")
    return text[:cap] + note, True


def _block_text(block: Any) -> str:
    kind = getattr(block, "type", "")
    if kind == "text":
        return str(getattr(block, "text", ""))
    if kind == "image":
        return f"[image: {getattr(block, 'mime_type', 'image')}, not shown to the model]"
    if kind == "audio":
        return f"[audio: {getattr(block, 'mime_type', 'audio')}, not shown to the model]"
    if kind == "resource_link":
        return f"[resource link: {getattr(block, 'name', '')} {getattr(block, 'uri', '')}]".strip()
    if kind == "resource":
        res = getattr(block, "resource", None)
        text = getattr(res, "text", None)
        uri = getattr(res, "uri", "")
        return f"[resource {uri}]\n{text}" if isinstance(text, str) else f"[resource {uri}: binary, not shown]"
    return f"[{kind or 'unknown'} content]"


def outcome_of(result: Any, seconds: float, cap: int = DEFAULT_CAP) -> ToolOutcome:
    """A CallToolResult (the SDK's) as a ToolOutcome."""
    pieces = [_block_text(b) for b in (getattr(result, "content", None) or [])]
    structured = getattr(result, "structured_content", None)
    if not any(p.strip() for p in pieces) and structured is not None:
        pieces = [json.dumps(structured, ensure_ascii=False)]
    text, cut = cap_text("\n".join(pieces) or "(no output)", cap)
    return ToolOutcome(text, bool(getattr(result, "is_error", False)), seconds, cut)


def error_outcome(message: str, seconds: float = 0.0) -> ToolOutcome:
    """A call that did not run or failed outside the tool (denied, server down, cancelled)."""
    return ToolOutcome(message, True, seconds)
