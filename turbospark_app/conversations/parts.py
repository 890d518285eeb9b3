"""A message is a list of typed parts: text, reasoning, tool call, tool result, image, attachment.

How the store keeps them (schema 4): the message's LAST text part is its `content` and
`token_ids` columns (the ones a streaming reply's checkpoints rewrite, as before); every part
before it is the `parts` column, a JSON list (NULL: none). So a row of schema 3, and most
messages, read as one text part, and the columns every other reader uses keep their meaning.

    text         `text`; `token_ids` when the model generated it (an agent step's reply as it
                 was written, its tool-call markup included: the next prompt splices these ids)
    reasoning    `text` (a reply's reasoning kept apart; a local reply keeps it in its text)
    tool_call    `call_id`, `name` (the tool as the model named it), `arguments` (JSON text);
                 meta: server, tool, approval ("once" | "always" | "deny" | "auto")
    tool_result  `call_id`, `name`, `text` (what the model read); meta: is_error, seconds,
                 truncated
    image        `name` (file name as given); meta: sha256 (of the file's bytes: the engine's
                 image id too), mime, size (bytes), width, height (as decoded), file (its
                 content-addressed name in `<data dir>/images`: `media.image_store`)
    attachment   `name` (file name), `text` (its extracted text when it went whole); meta:
                 kind (pdf, markdown, html, code, text), pages, tokens (the whole text's, by
                 the chat model), mode ("whole" | "retrieved"), path (the file attached);
                 retrieved: chunks (of the document), used, sources ([{page, text}]: the
                 passages the prompt got), prompt_tokens (theirs)
    sources      on a reply that used documents: what the prompt was given, so the Sources
                 list under it survives a restart and an export. meta: sources (a list of
                 {n, path, page, text, mode}: n is the [n] the prompt numbered it with, page
                 None outside PDFs, text the passage), retrieved (chunks), ms (retrieval
                 time), added_tokens (the chat model's tokens the sources added), collections
                 (their names). Never rendered into a prompt.

A user message's images and attachments are its parts before its text; they reach the prompt
through `ui.pane.attach_prompt` (images as `ChatMessage.images`, attachments as numbered sources).

An agent turn is ONE assistant message: [text(step 1, ids), tool_call, ..., tool_result, ...,
text(step 2, ids), tool_call, ..., tool_result, ...] + the final answer in `content`; Regenerate,
Edit and branches treat it as one reply. `chat_messages` turns it back into the assistant /
tool messages the chat template renders.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..chat.api import ChatMessage

TEXT, REASONING, TOOL_CALL, TOOL_RESULT, IMAGE, ATTACHMENT, SOURCES = (
    "text", "reasoning", "tool_call", "tool_result", "image", "attachment", "sources")
KINDS = (TEXT, REASONING, TOOL_CALL, TOOL_RESULT, IMAGE, ATTACHMENT, SOURCES)


@dataclass(frozen=True)
class Part:
    """One part of a message (the fields each kind uses: see the module docstring)."""

    kind: str
    text: str = ""
    token_ids: tuple[int, ...] | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown message part kind {self.kind!r}")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        for key in ("text", "call_id", "name", "arguments"):
            value = getattr(self, key)
            if value:
                out[key] = value
        if self.token_ids is not None:
            out["token_ids"] = list(self.token_ids)
        if self.meta:
            out["meta"] = dict(self.meta)
        return out

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> "Part":
        ids = d.get("token_ids")
        return Part(str(d["kind"]), str(d.get("text", "")), None if ids is None else tuple(int(i) for i in ids),
                    d.get("call_id"), d.get("name"), d.get("arguments"), dict(d.get("meta") or {}))


def parts_json(parts: Sequence[Part]) -> str | None:
    """The `parts` column's value (None for no parts)."""
    return json.dumps([p.to_json() for p in parts], ensure_ascii=False) if parts else None


def parts_from_json(text: str | None) -> tuple[Part, ...]:
    """The `parts` column read back (an unknown kind from a newer version is skipped)."""
    if not text:
        return ()
    out = []
    for d in json.loads(text):
        try:
            out.append(Part.from_json(d))
        except (ValueError, KeyError, TypeError):
            continue
    return tuple(out)


def chat_messages(role: str, leading: Sequence[Part], content: str,
                  token_ids: tuple[int, ...] | None) -> list[ChatMessage]:
    """One stored message as the ChatMessages a prompt renders: an agent reply's steps become
    assistant messages (their text as written, calls included, with their ids) and `tool`
    messages (each result); the message's own text comes last. Image and attachment parts
    are not rendered here yet (their packages will say how they reach the prompt)."""
    out: list[ChatMessage] = []
    if role == "assistant":
        for part in leading:
            if part.kind == TEXT:
                out.append(ChatMessage("assistant", part.text, part.token_ids))
            elif part.kind == TOOL_RESULT:
                out.append(ChatMessage("tool", part.text, tool_call_id=part.call_id, name=part.name))
    out.append(ChatMessage(role, content, token_ids))  # type: ignore[arg-type]
    return out
