"""A reply read token by token: the parser fed each token's text with control tokens spelled
out (the sink gives them as "", but `[TOOL_CALLS]` or `<|START_ACTION|>` is the format), and the
reply's figures: reasoning tokens, answer tokens, how long the model thought."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .base import ParsedReply, ReplyDelta, ReplyParser

CONTROL = 3  # GGUF token type of a control token


def special_text(tokenizer: Any, token_id: int) -> str | None:
    """A control token's vocabulary text (e.g. "[TOOL_CALLS]"), None for other tokens and for a
    tokenizer without GGUF token types. End-of-generation ids are never fed (the sink stops)."""
    spec = getattr(tokenizer, "spec", None)
    types = getattr(spec, "token_types", None)
    if types is None or not 0 <= token_id < len(types) or types[token_id] != CONTROL:
        return None
    return spec.tokens[token_id]


PROMPT_TAIL_TOKENS = 16


def prompt_tail(tokenizer: Any, ids: Any) -> str:
    """A prompt's last tokens as text, control tokens by name: does the generation prompt open
    a reasoning block (DeepSeek R1's ends with `<think>`)? `parser_for` reads it."""
    if tokenizer is None:
        return ""
    parts = []
    for t in list(ids)[-PROMPT_TAIL_TOKENS:]:
        if t < 0:  # an image's pseudo-id (model.llamacpp.vision): no text
            continue
        parts.append(special_text(tokenizer, t) or tokenizer.token_bytes(t).decode("utf-8", errors="replace"))
    return "".join(parts)


@dataclass
class ReplyFigures:
    """Reasoning vs answer: tokens, and seconds from the first token to the reasoning's end."""

    reasoning_tokens: int = 0
    answer_tokens: int = 0
    reasoning_seconds: float = 0.0


class ReplyReader:
    """`feed_token(id, delta, at)` per streamed token, `feed_text` for a tail, `finish()`."""

    def __init__(self, parser: ReplyParser, tokenizer: Any = None) -> None:
        self.parser = parser
        self.tokenizer = tokenizer
        self.figures = ReplyFigures()
        self._first_at: float | None = None

    @property
    def reply(self) -> ParsedReply:
        return self.parser.reply

    def feed_token(self, token_id: int, delta: str, at: float | None = None) -> list[ReplyDelta]:
        """One token: its text (a control token's name when the delta is empty)."""
        text = delta
        if not delta and self.tokenizer is not None:
            text = special_text(self.tokenizer, token_id) or ""
        if at is not None and self._first_at is None:
            self._first_at = at
        before = self.parser.state
        out = self.parser.feed(text) if text else []
        if "reasoning" in (before, self.parser.state):
            self.figures.reasoning_tokens += 1
            if self.parser.state != "reasoning" and at is not None and self._first_at is not None:
                self.figures.reasoning_seconds = at - self._first_at
        else:
            self.figures.answer_tokens += 1
        return out

    def feed_text(self, text: str) -> list[ReplyDelta]:
        """Text without a token of its own (the sink's released tail)."""
        return self.parser.feed(text) if text else []

    def finish(self, at: float | None = None) -> list[ReplyDelta]:
        """The reply ended (`at`: when, for a reasoning block the reply never closed)."""
        if self.parser.state == "reasoning" and at is not None and self._first_at is not None:
            self.figures.reasoning_seconds = at - self._first_at
        return self.parser.finish()
