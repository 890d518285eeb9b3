"""What the engine needs of a tokenizer (reference: `tokenizer::MfTokenizer`)."""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable


@runtime_checkable
class EngineTokenizer(Protocol):
    """Token ids to bytes, plus the special ids that end a turn.

    `token_bytes` returns the exact UTF-8 bytes a token contributes to the text (a byte-fallback
    token may be a fragment of a character); control tokens return b"".
    `eog_ids` is every id that ends generation (a model may have several: Gemma's <eos> and
    <end_of_turn>, Phi-3's <|end|> and <|endoftext|>); `eos_ids` and `end_of_turn_ids` sort
    them by stop reason, and an id of `eog_ids` in neither ends the turn too.
    """

    end_of_turn_ids: frozenset[int]
    tool_call_ids: frozenset[int]
    eos_ids: frozenset[int]
    eog_ids: frozenset[int]

    def token_bytes(self, token_id: int) -> bytes: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...
