"""A stored conversation as the prompt's messages, with its images and attachments.

`conversations.prompt_messages` renders text, agent steps and tool results; here a user
message's image parts become its `ChatMessage.images` (decoded from the content-addressed
store, cached) and its attachment parts the numbered sources before its question, rendered by
`documents.sources.prompt_with_sources` as the CLI's turns are. The rendering depends only on
the stored parts, so every later turn renders the message exactly as it was first sent and the
KV prefix is reused (an image's cells included).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from ...chat.api import ChatMessage
from ...conversations.actions import prompt_messages
from ...conversations.parts import ATTACHMENT, IMAGE, Part
from ...conversations.store import StoredMessage
from ...documents.sources import Source, prompt_with_sources
from ...media.image_store import ImageStore, StoredImage
from ...media.images import ImageError


def attachment_sources(parts: Sequence[Part]) -> list[Source]:
    """The numbered sources a message's attachment parts put in its prompt (whole ones as
    they were, retrieved ones chunk by chunk with their pages), in the order of the parts."""
    out: list[Source] = []
    for p in parts:
        if p.kind != ATTACHMENT:
            continue
        name = p.name or "attachment"
        if p.meta.get("mode") == "retrieved":
            for chunk in p.meta.get("sources") or ():
                out.append(Source(len(out) + 1, name, chunk.get("page"), str(chunk.get("text", "")), "retrieved"))
        else:
            out.append(Source(len(out) + 1, name, None, p.text, "whole", p.meta.get("pages")))
    return out


def user_prompt_text(question: str, parts: Sequence[Part]) -> str:
    """What a user message with attachments says to the model."""
    return prompt_with_sources(question, attachment_sources(parts))


def document_tokens(parts: Sequence[Part]) -> int:
    """The chat model's tokens a message's attachments put in its prompt (as counted when it
    was sent: a whole text's, or its retrieved passages')."""
    return sum(int(p.meta.get("prompt_tokens", p.meta.get("tokens", 0)) or 0) for p in parts if p.kind == ATTACHMENT)


def has_attachments(messages: Sequence[StoredMessage]) -> bool:
    """Whether any message carries a document's text (tools' "always allow" is suspended)."""
    return any(p.kind == ATTACHMENT for m in messages for p in m.parts)


def stored_image(images: ImageStore, part: Part) -> StoredImage:
    """An image part as the prompt carries it (decoded on the engine thread when it is
    encoded); ImageError at once when its file is gone."""
    sha, mime = str(part.meta.get("sha256", "")), str(part.meta.get("mime", ""))
    if not images.has(sha, mime):
        raise ImageError(f"the image {part.name or sha[:12]} is no longer stored (its file "
                         f"{images.path_for(sha, mime).name} was removed)")
    return StoredImage(images, sha, mime, part.name or "")


def media_prompt_messages(history: Sequence[StoredMessage], model_id: str,
                          images: ImageStore) -> tuple[ChatMessage, ...]:
    """`prompt_messages` with each user message's images (`StoredImage`s) and attachments
    (ImageError when a stored image is gone)."""
    out: list[ChatMessage] = []
    for m in history:
        rendered = prompt_messages([m], model_id)
        media = [p for p in m.parts if p.kind in (IMAGE, ATTACHMENT)]
        if m.role == "user" and media:
            last = rendered[-1]
            pictures = tuple(stored_image(images, p) for p in media if p.kind == IMAGE)
            rendered = (*rendered[:-1], dataclasses.replace(
                last, content=user_prompt_text(last.content, media), images=pictures))
        out.extend(rendered)
    return tuple(out)
