"""The contract between the engine thread / UI and the chat backend.

The backend owns the model, tokenizer, chat template and session pool. It is NOT thread-safe:
only the engine thread calls it (one thread owns the model).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Generator, Literal, Protocol, Sequence

from ..engine import GenerationConfig, PaceWait, RawDecodeProgress, RawDecodeResult, StopReason
from ..engine.foundation import DEFAULT_PREFILL_CHUNK

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True)
class ChatMessage:
    """One message. An assistant message keeps the token ids it was generated with, so the next
    prompt shares the whole previous turn as its KV prefix (no re-tokenization drift).

    Tool use (the API's): an assistant message may carry `tool_calls` (OpenAI's dicts: id, type,
    function {name, arguments}) and `reasoning` (its reasoning_content); a "tool" message is a
    call's result, `tool_call_id` naming the call and `name` the function. The template renders
    them (`prompt.build_prompt_ids`)."""

    role: Role
    content: str
    token_ids: tuple[int, ...] | None = None
    tool_calls: tuple[dict[str, Any], ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    reasoning: str | None = None
    # Images with a user message (`media.images.ImageInput`), shown to the model before its
    # text; only a backend whose model has a vision projector takes them.
    images: tuple[Any, ...] = ()


def reply_token_ids(reason: StopReason, generated_ids: Sequence[int]) -> tuple[int, ...] | None:
    """The ids to keep with a finished reply for the next prompt, or None to re-tokenize its text.

    A STOP_STRING reply's ids spell the stop string, which its text leaves out: splicing them
    would show the model text the user never saw, so that reply is re-tokenized instead.
    """
    return None if reason is StopReason.STOP_STRING else tuple(generated_ids)


@dataclass(frozen=True)
class TurnSettings:
    """Per-turn settings. `generation.rate` carries the user's cap; the backend adds the probes."""

    generation: GenerationConfig = field(default_factory=GenerationConfig)
    system_prompt: str | None = None  # None = the model template's default
    chunked_prefill: bool = True
    chunk_size: int = DEFAULT_PREFILL_CHUNK
    # Log-probabilities with every token (the API's `logprobs`): None = off, else how many
    # top alternatives to report (0 = the chosen token's only).
    top_logprobs: int | None = None
    # Prompt-lookup speculation while the stream decodes alone: "lookup" or "off"; None = the
    # backend's own (`load_backend(speculation=)`: flag > environment > setting > default).
    speculation: str | None = None
    # The longest pause a prompt arriving beside running streams may put in their tokens, in ms
    # (`engine.chunk_budget`): None = the backend's own (250 ms unless `serve
    # --max-stream-gap-ms` / $TURBOSPARK_MAX_STREAM_GAP_MS said otherwise). Backend-wide: the
    # last turn started that carries one sets it.
    max_stream_gap_ms: float | None = None
    # Extra chat-template variables (e.g. {"enable_thinking": False}: a conversation's Think
    # toggle, the API's chat_template_kwargs), as (name, value) pairs.
    template_vars: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class PreparedTurn:
    """A validated turn: its prompt ids fit the context (admission already checked)."""

    session_id: str
    prompt_ids: tuple[int, ...]
    settings: TurnSettings


TurnStream = Generator[RawDecodeProgress | PaceWait, None, RawDecodeResult]


class ChatBackend(Protocol):
    max_context: int

    def prepare_turn(
        self, session_id: str, messages: Sequence[ChatMessage], settings: TurnSettings,
        *, continue_final: bool = False, raw: bool = False,
    ) -> PreparedTurn:
        """Render + tokenize the conversation (last message = the new user message; with
        `continue_final`, an assistant reply left open so the turn continues it). `raw`: raw
        completion, the texts concatenated with no roles (a backend that never runs raw may
        leave the keyword out: the engine thread passes it only when True).

        Raises an `EngineError` (EmptyPrompt, ContextOverflow, ...) before touching the model.
        """
        ...

    def stream_turn(self, turn: PreparedTurn, cancel: Callable[[], bool]) -> TurnStream:
        """The turn's step generator on the session's KV slot; returns the RawDecodeResult."""
        ...

    def drop_session(self, session_id: str) -> None:
        """Free the session's KV slot (conversation deleted)."""
        ...

    def system_info(self) -> dict[str, Any]:
        """The `system_info_json` document as a dict; cheap enough to poll every second."""
        ...

    def model_info(self) -> dict[str, Any]:
        """Architecture, parameters, quantization, context length, file, chat template."""
        ...
