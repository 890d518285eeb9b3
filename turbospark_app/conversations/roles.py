"""What each role is called where people read a conversation (the transcript, a Markdown
export): a raw completion has no roles, only the text given and its continuation."""

from __future__ import annotations

ROLE_NAMES = {"user": "You", "assistant": "Assistant", "system": "System"}
RAW_ROLE_NAMES = {"user": "Text", "assistant": "Continuation", "system": "System"}


def role_names(raw: bool) -> dict[str, str]:
    """The names of the roles in chat mode, or in raw completion when `raw`."""
    return RAW_ROLE_NAMES if raw else ROLE_NAMES
