"""Conversation -> prompt token ids, keeping every assistant turn's generated ids.

The chat template is rendered with a marker after each assistant message's text; the text
between replies is tokenized on its own and, where the template wrote the reply as it is (its
text ends right at the marker), the assistant's original token ids are spliced in. Every earlier segment renders to the same text in
every later turn, so turn N+1's prompt starts with exactly the ids turn N's KV holds: prefix
reuse by construction, with no re-tokenization drift (a generated id sequence rarely equals
encode(decode(ids))). A template that rewrites a reply (Qwen3 drops the <think> block of replies
before the last question) gets what it wrote: that text is tokenized, as the model was trained.

`continue_final`: the last message is an assistant reply to be continued (Hugging Face's
`continue_final_message`). The conversation is rendered WITHOUT a generation prompt and cut
right after that reply's end marker, so no end-of-turn follows it: the prompt is the previous
prompt + the reply's ids, exactly what the KV slot holds after the reply stopped.

Raw completion (`raw_conversation_ids`): a base model (no chat template) or a pane switched to
raw mode. No roles, no template: the prompt is the conversation's texts concatenated (user text,
reply, next user text, ...), each message tokenized on its own and every reply's generated ids
spliced in, so turn N+1's prompt again starts with exactly the ids turn N's KV holds. Continue
is the same prompt ending with the reply; Regenerate the same prompt without it.
"""

from __future__ import annotations

import json
from typing import Any, Protocol, Sequence

from ..engine.errors import EngineError
from .api import ChatMessage

# ⟦/ts-assistant-N⟧ after reply N: a marker templates leave untouched. Only an end marker, so
# a template sees the reply's real beginning (Qwen3 looks for <think>, Gemma trims).
_CLOSE = "\u27e6/ts-assistant-{}\u27e7"


class NoChatTemplate(EngineError):
    """The model has no chat template (a base model): it only completes raw text."""

    def __init__(self) -> None:
        super().__init__("this model has no chat template (a base model): it continues raw text "
                         "instead of answering chat messages")


class TemplateLike(Protocol):
    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
               **extra: Any) -> str: ...


def message_dict(m: ChatMessage) -> dict[str, Any]:
    """A message as a template reads it: role and content, and for tool use the assistant's
    tool_calls (arguments as objects, as templates index them), reasoning_content, or a tool
    result's tool_call_id and name."""
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls:
        out["tool_calls"] = [_call_for_template(c) for c in m.tool_calls]
    if m.reasoning:
        out["reasoning_content"] = m.reasoning
    if m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    if m.name is not None:
        out["name"] = m.name
    return out


def _call_for_template(call: dict[str, Any]) -> dict[str, Any]:
    fn = dict(call.get("function") or {})
    args = fn.get("arguments")
    if isinstance(args, str):
        try:
            fn["arguments"] = json.loads(args)
        except json.JSONDecodeError:
            pass  # kept as the text the client sent
    # Both shapes: OpenAI's nested one, and the flat name/arguments some templates read.
    return {**call, "function": fn, "name": fn.get("name"), "arguments": fn.get("arguments")}


class EncoderLike(Protocol):
    def encode(self, text: str) -> list[int]: ...


class VisionLike(Protocol):
    """A model's projector as prompts see it (`model.llamacpp.vision.Projector`)."""

    marker: str

    def image_ids(self, image: Any) -> list[int]: ...


class Images:
    """The images of a conversation in prompt order, and the marker that stands for each in
    the rendered template until the text is tokenized."""

    def __init__(self, vision: VisionLike | None, messages: Sequence[ChatMessage]) -> None:
        self.vision = vision
        self.queue = [img for m in messages for img in m.images]
        if self.queue and vision is None:
            raise EngineError("this model takes no images (it has no vision projector)")
        if vision is not None:
            for m in messages:
                if vision.marker in m.content:
                    raise EngineError("a message contains the media marker text")

    def content(self, m: ChatMessage) -> str:
        """The message's content for the template: a marker per image, then its text."""
        return "".join(self.vision.marker for _ in m.images) + m.content if m.images and self.vision else m.content

    def encode(self, tokenizer: EncoderLike, text: str) -> list[int]:
        """`text` tokenized, each marker in it replaced by the next image's ids."""
        if self.vision is None or self.vision.marker not in text:
            return tokenizer.encode(text)
        ids: list[int] = []
        pieces = text.split(self.vision.marker)
        for k, piece in enumerate(pieces):
            if piece:
                ids.extend(tokenizer.encode(piece))
            if k < len(pieces) - 1:
                if not self.queue:
                    raise EngineError("the chat template repeated an image")
                ids.extend(self.vision.image_ids(self.queue.pop(0)))
        return ids


def raw_prompt_ids(
    tokenizer: EncoderLike, messages: Sequence[ChatMessage], *, continue_final: bool = False,
) -> list[int]:
    """The raw-completion prompt of a conversation: its texts concatenated, no roles (system
    messages are left out: a base model has no place for them). A reply's generated ids are
    spliced in as they are, so the previous turn's KV is a prefix of this prompt. BOS, when the
    model wants one, is the caller's to add."""
    if continue_final and (not messages or messages[-1].role != "assistant"):
        raise EngineError("continue_final needs an assistant message last")
    ids: list[int] = []
    for m in messages:
        if m.role == "system":
            continue
        if m.role == "assistant" and m.token_ids is not None:
            ids.extend(m.token_ids)
        elif m.content:
            # One message at a time (not the joined text): the ids of earlier messages must not
            # change when a later one is added, or the KV prefix would not be reused. Text after
            # the first goes on from it: no SentencePiece space prefix (`encode_continuation`).
            encode = getattr(tokenizer, "encode_continuation", tokenizer.encode) if ids else tokenizer.encode
            ids.extend(encode(m.content))
    return ids


def build_prompt_ids(
    template: TemplateLike,
    tokenizer: EncoderLike,
    messages: Sequence[ChatMessage],
    system_prompt: str | None = None,
    *,
    continue_final: bool = False,
    template_vars: dict[str, Any] | None = None,
    vision: VisionLike | None = None,
) -> list[int]:
    """The prompt ids for `messages` (ending with the new user message) + a generation prompt,
    or, with `continue_final`, ending inside the final assistant message (left open).
    `template_vars`: extra template variables (`tools`, `enable_thinking`).

    An assistant message without token ids (imported text) is tokenized from its text like
    any other segment. BOS, when the model wants one, is the caller's to add.
    """
    if continue_final and (not messages or messages[-1].role != "assistant"):
        raise EngineError("continue_final needs an assistant message last")
    rendered: list[dict[str, Any]] = []
    if system_prompt:
        rendered.append({"role": "system", "content": system_prompt})
    images = Images(vision, messages)
    spliced: dict[int, tuple[str, Sequence[int] | None]] = {}
    for i, m in enumerate(messages):
        if m.role == "system" and system_prompt:
            continue  # the per-conversation system prompt wins
        open_reply = continue_final and i == len(messages) - 1
        if m.role == "assistant" and (m.token_ids is not None or open_reply):
            spliced[i] = (m.content, m.token_ids)
            rendered.append({**message_dict(m), "content": m.content + _CLOSE.format(i)})
        else:
            rendered.append({**message_dict(m), "content": images.content(m)})
    extra = template_vars or {}
    text = template.render(rendered, add_generation_prompt=not continue_final, **extra)
    if continue_final:
        last = _CLOSE.format(len(messages) - 1)
        if last not in text:
            raise EngineError("the chat template left out the reply to continue")
        text = text[: text.index(last) + len(last)]  # the reply stays open: no end-of-turn

    ids: list[int] = []
    pending = ""  # text not yet tokenized: it runs up to the next reply spliced as ids
    rest = text
    for i, (content, token_ids) in spliced.items():
        before, sep, after = rest.partition(_CLOSE.format(i))
        if not sep:
            continue  # the template left this message out (some drop old turns)
        if not before.endswith(content):  # rewritten (Qwen3 drops old reasoning): its text
            pending += before
            rest = after
            continue
        pending += before[: len(before) - len(content)]
        if pending:
            ids.extend(images.encode(tokenizer, pending))
            pending = ""
        ids.extend(token_ids if token_ids is not None else tokenizer.encode(content))
        rest = after
    pending += rest
    if pending:
        ids.extend(images.encode(tokenizer, pending))
    if images.queue:
        raise EngineError("the chat template left out a message with an image")
    return ids


class PromptTokenizer(EncoderLike, Protocol):
    bos_id: int | None
    add_bos: bool

    def token_bytes(self, token_id: int) -> bytes: ...


class PromptBuilder:
    """Turns a conversation or a raw text into prompt ids for one loaded model.

    Immutable after construction (template, tokenizer and context size never change), so
    any thread may call it: the API server checks a request's context BEFORE it queues it.
    """

    def __init__(self, template: TemplateLike | None, tokenizer: PromptTokenizer, max_context: int,
                 vision: VisionLike | None = None) -> None:
        """`template` None: the model has none (a base model); only raw prompts can be built.
        `vision`: the model's projector (None: it takes no images)."""
        self.vision = vision
        self.template = template
        self.tokenizer = tokenizer
        self.max_context = max_context

    def _with_bos(self, ids: list[int]) -> list[int]:
        bos = self.tokenizer.bos_id
        if self.tokenizer.add_bos and bos is not None and ids[:1] != [bos]:
            ids.insert(0, bos)
        return ids

    def chat_ids(self, messages: Sequence[ChatMessage], system_prompt: str | None = None,
                 *, continue_final: bool = False, template_vars: dict[str, Any] | None = None) -> list[int]:
        """The chat prompt ids (template + generation prompt, or the final reply left open
        with `continue_final`), BOS first when the model wants it. NoChatTemplate when the
        model has no template. `template_vars`: extra template variables (tools, thinking)."""
        if self.template is None:
            raise NoChatTemplate()
        return self._with_bos(build_prompt_ids(self.template, self.tokenizer, messages, system_prompt,
                                               continue_final=continue_final, template_vars=template_vars,
                                               vision=self.vision))

    def open_assistant_ids(self, messages: Sequence[ChatMessage]) -> list[int]:
        """Ids that leave the LAST message (an assistant's) open, so the reply continues it
        (vLLM's `continue_final_message`): the template's text up to where that message's
        content goes, then the content itself. ValueError when the last message is not an
        assistant's or the template drops it."""
        try:
            return self.chat_ids(messages, continue_final=True)  # one implementation (build_prompt_ids)
        except EngineError as e:
            raise ValueError(str(e)) from None

    @property
    def has_chat_template(self) -> bool:
        """False for a base model: only raw completion (`raw_ids`, `raw_conversation_ids`)."""
        return self.template is not None

    def raw_conversation_ids(self, messages: Sequence[ChatMessage], *,
                             continue_final: bool = False) -> list[int]:
        """A conversation as one raw-completion prompt (`raw_prompt_ids`), BOS first when the
        model wants it."""
        return self._with_bos(raw_prompt_ids(self.tokenizer, messages, continue_final=continue_final))

    def raw_ids(self, text: str) -> list[int]:
        """A raw completion prompt: the text as is (no template), BOS first when the model wants it."""
        return self._with_bos(self.tokenizer.encode(text))

    def token_bytes(self, token_id: int) -> bytes:
        """The exact bytes one token adds to the text."""
        return self.tokenizer.token_bytes(token_id)
