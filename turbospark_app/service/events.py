"""What the engine thread takes (TurnRequest) and tells (events, TurnStats). Pure data, no Qt."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..chat.api import ChatMessage, TurnSettings
from ..engine.errors import (
    ContextOverflow,
    EmptyPrompt,
    EngineError,
    ProducerError,
    ZeroBudget,
)
from ..engine.load_progress import measured
from ..engine.progress import RawDecodeResult


@dataclass(frozen=True)
class TurnRequest:
    """One turn to run: the conversation (used as the backend session id), its messages
    ending with the new user message, and the turn's settings. `continue_final`: the messages
    end with an assistant reply to continue instead (the prompt leaves it open; the events
    carry only the continuation). `raw`: raw completion, the messages' texts concatenated as
    one prompt without roles or template (a base model, or a pane switched to raw mode)."""

    conversation_id: str
    messages: tuple[ChatMessage, ...]
    settings: TurnSettings = field(default_factory=TurnSettings)
    continue_final: bool = False
    raw: bool = False


API_SESSION_PREFIX = "api-auto:"  # KV sessions the engine chose for an API request
API_PINNED_PREFIX = "api-conv:"  # KV sessions an API client named (its conversation id)


@dataclass(frozen=True)
class PromptRequest:
    """A turn over prompt ids already built (and checked) with the loaded model's
    `PromptBuilder`: the API server's request kind. The KV slot is chosen when the turn
    starts: the client's `pin` conversation when given, else the API session whose KV shares
    the longest token prefix with the prompt, else a fresh session."""

    prompt_ids: tuple[int, ...]
    settings: TurnSettings
    builder: Any  # the PromptBuilder the ids came from; a model switch since fails the turn
    pin: str | None = None

    @property
    def conversation_id(self) -> str:
        """The session before the start decides it ("" = to be chosen by prefix)."""
        return "" if self.pin is None else API_PINNED_PREFIX + self.pin


AnyRequest = TurnRequest | PromptRequest


@dataclass(frozen=True)
class TurnStats:
    """What the UI shows under a reply. Times are seconds; None = not applicable."""

    prompt_tokens: int
    reused_prefix_tokens: int
    new_tokens: int
    stop_reason: str  # StopReason.value
    started: bool  # False: cancelled while queued, the model was never touched
    queued_seconds: float  # submit -> first step
    time_to_first_token: float | None  # submit -> first token (what the user waited)
    prefill_seconds: float
    decode_seconds: float
    prefill_tokens_per_sec: float
    decode_tokens_per_sec: float
    stop_latency: float | None  # cancel() -> the turn ended; None when not cancelled
    slot_evicted: bool
    # A remote turn (turbospark_app.remote): where it ran and what the server did not say.
    source: str = "local"  # "local" | "remote"
    remote: str = ""  # "<endpoint name> · <model>" for a remote turn
    usage_reported: bool = True  # False: the server sent no usage; counts are client-side
    reuse_source: str = "engine"  # engine | cached_tokens | timings.cache_n | "" (unavailable)
    cap: str = ""  # the tok/s cap: "" none set | "applied" | "applied by server" | "not applied (remote)"
    drafted_tokens: int = 0  # prompt-lookup speculation: draft tokens verified (0: none / off)
    accepted_tokens: int = 0  # of them, kept (each a token without a forward pass of its own)
    # A reply read by its family's format (chat.formats): reasoning vs answer tokens, and the
    # seconds from the first token to the end of the reasoning block (0 / 0 / 0: none)
    reasoning_tokens: int = 0
    answer_tokens: int = 0
    reasoning_seconds: float = 0.0
    restored_tokens: int = 0  # of the reused prefix, from RAM (the slot had been taken)
    image_tokens: int = 0  # the prompt's image cells encoded this turn (0: none, or all reused)
    image_encode_seconds: float = 0.0  # the time their encodes took
    document_tokens: int = 0  # what the user message's attachments put in the prompt (the window's)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (stored with the reply)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "TurnStats":
        """The inverse of `to_json`; unknown keys are ignored, missing ones default."""
        defaults: dict[str, Any] = {
            "prompt_tokens": 0, "reused_prefix_tokens": 0, "new_tokens": 0,
            "stop_reason": "", "started": True, "queued_seconds": 0.0,
            "time_to_first_token": None, "prefill_seconds": 0.0, "decode_seconds": 0.0,
            "prefill_tokens_per_sec": 0.0, "decode_tokens_per_sec": 0.0,
            "stop_latency": None, "slot_evicted": False, "source": "local", "remote": "",
            "usage_reported": True, "reuse_source": "engine", "cap": "",
            "drafted_tokens": 0, "accepted_tokens": 0, "reasoning_tokens": 0, "answer_tokens": 0,
            "reasoning_seconds": 0.0, "restored_tokens": 0, "image_tokens": 0, "image_encode_seconds": 0.0,
            "document_tokens": 0,
        }
        defaults.update({k: v for k, v in data.items() if k in defaults})
        return cls(**defaults)


@dataclass(frozen=True, slots=True)
class BackendLoading:
    """The engine thread started loading the backend (the model)."""


@dataclass(frozen=True, slots=True)
class BackendProgress:
    """How far a long load is: `phase` ("Loading model", "Checking the model file"), `fraction` 0-1."""

    phase: str
    fraction: float

    @property
    def measured(self) -> bool:
        """Whether `fraction` says how far the phase is (else only begun / done)."""
        return measured(self.phase)

    @property
    def label(self) -> str:
        """What to show: "Loading model… 40%", or "Checking the model file…" (no measure)."""
        if not self.measured:
            return f"{self.phase}…"
        return f"{self.phase}… {round(self.fraction * 100)}%"


@dataclass(frozen=True, slots=True)
class BackendReady:
    """The backend is loaded: its model facts and context window."""

    model_info: dict[str, Any]
    max_context: int
    load_seconds: float


@dataclass(frozen=True, slots=True)
class BackendFailed:
    """The backend could not be loaded; every request will fail with kind "backend_unavailable"."""

    message: str
    error_type: str


@dataclass(frozen=True, slots=True)
class Queued:
    """The request is waiting; `position` turns are ahead of it (0 = next to start)."""

    request_id: int
    conversation_id: str
    position: int


@dataclass(frozen=True, slots=True)
class Retrying:
    """A remote server answered busy (429 / 503): the request is sent again in `seconds`."""

    request_id: int
    conversation_id: str
    attempt: int
    seconds: float
    status: int


@dataclass(frozen=True, slots=True)
class Started:
    """The turn was admitted (prompt rendered, it fits the context) and is being stepped."""

    request_id: int
    conversation_id: str
    prompt_tokens: int
    # The prompt's last tokens as text, control tokens by name (chat.formats.prompt_tail): the
    # window's reply reader sees whether the generation prompt opened a reasoning block
    prompt_tail: str = ""


@dataclass(frozen=True, slots=True)
class Prefilling:
    """`done` of `total` prompt tokens are in the KV cache (reused ones included); `reused`
    of them came from the turn's prefix reuse; `seconds` since its prefill began."""

    request_id: int
    conversation_id: str
    done: int
    total: int
    reused: int = 0
    seconds: float = field(default=0.0, compare=False)


@dataclass(frozen=True, slots=True)
class Token:
    """One generated token: its index in the reply, its id and its text delta."""

    request_id: int
    conversation_id: str
    index: int
    id: int
    delta: str
    logprob: float | None = None  # with TurnSettings.top_logprobs only
    top_logprobs: tuple[tuple[int, float], ...] = ()  # (id, logprob), most likely first
    # time.monotonic() when the engine emitted it: the window and the API receive tokens in
    # batches (service.handover), so cadence is measured from this, not from their arrival
    at: float | None = None
    # A control token's vocabulary text ("[TOOL_CALLS]", "<|START_ACTION|>") where its delta is
    # empty (control tokens print nothing): what the window's reply reader reads it as, since the
    # window has no tokenizer (chat.formats.special_text)
    special: str = ""


@dataclass(frozen=True, slots=True)
class Tail:
    """Withheld text released at the end of the run (no stop string matched)."""

    request_id: int
    conversation_id: str
    text: str


@dataclass(frozen=True, slots=True)
class Finished:
    """The turn ended (any StopReason, CANCELLED included): the reply and its figures."""

    request_id: int
    conversation_id: str
    result: RawDecodeResult
    prompt_ids: tuple[int, ...]
    generated_ids: tuple[int, ...]  # ids of the emitted tokens: the reply's KV-backed ids
    text: str
    stats: TurnStats


@dataclass(frozen=True, slots=True)
class Failed:
    """The turn failed. `kind` is a stable machine label. A local turn keeps nothing; a remote
    stream that broke mid-reply carries its `partial` text and figures, which are kept."""

    request_id: int
    conversation_id: str
    message: str
    kind: str  # context_overflow | empty_prompt | zero_budget | model_failure | engine |
    #            backend_unavailable | internal | remote kinds (remote.errors.RemoteError)
    error_type: str  # the exception's class name, e.g. "ContextOverflow"
    partial: str = ""  # remote: the reply received before the failure
    stats: TurnStats | None = None  # remote: its figures, when `partial` is not empty


EngineEvent = (
    BackendLoading | BackendProgress | BackendReady | BackendFailed | Queued | Retrying | Started | Prefilling | Token
    | Tail | Finished | Failed
)
TERMINAL_EVENTS = (Finished, Failed)


def error_kind(exc: BaseException) -> str:
    """The stable label the UI keys its message on."""
    if isinstance(exc, ContextOverflow):
        return "context_overflow"
    if isinstance(exc, EmptyPrompt):
        return "empty_prompt"
    if isinstance(exc, ZeroBudget):
        return "zero_budget"
    if isinstance(exc, ProducerError):
        return "model_failure"
    if isinstance(exc, EngineError):
        return "engine"
    return "internal"
