"""What a run reports: stop reasons, progress events and the result (reference: `raw_completion`)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .power import MemoryPressure


class StopReason(enum.Enum):
    """Why generation stopped."""

    END_OF_TURN = "end_of_turn"  # natural end-of-turn token
    TOOL_CALLS = "tool_calls"  # tool-call token
    EOS = "eos"  # end-of-sequence token
    STOP_STRING = "stop_string"  # a configured stop string matched
    MAX_TOKENS = "max_tokens"  # max_new_tokens spent
    # The cancel predicate returned true. The result is otherwise ordinary: the withheld tail
    # was flushed and kv_position / kv_backed_token_ids are honest, so the turn can continue.
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class PrefillProgress:
    """`done` of `total` prompt tokens are in the KV cache (reused ones included);
    `reused` of them were there before the turn (its prefix reuse); `seconds` since the
    prefill began (the clock of the result's prefill_seconds)."""

    done: int
    total: int
    reused: int = 0
    seconds: float = field(default=0.0, compare=False)  # a measurement, not the event's identity


@dataclass(frozen=True, slots=True)
class TokenProgress:
    """One decoded token: its 0-based generation index, id and detokenized text delta."""

    index: int
    id: int
    delta: str


@dataclass(frozen=True, slots=True)
class TailProgress:
    """Text the stop matcher withheld and released when the run ended without a match."""

    text: str


RawDecodeProgress = PrefillProgress | TokenProgress | TailProgress


@dataclass(frozen=True, slots=True)
class PaceWait:
    """Streaming-layer only: the pacer wants the next forward step no earlier than `until`
    (on the rate config's clock). The blocking call sleeps; a scheduler may serve others."""

    until: float


@dataclass(frozen=True, slots=True, eq=False)
class DecodeStep:
    """Streaming-layer only: the decode step's forward pass, offered to the driver before the
    loop runs it — feed `token` at `position`, write the next logits into `logits`. A driver
    that batches streams runs it together with other streams' steps and sends back True; any
    other driver sends nothing (None) and the loop runs the step itself. Yielded only for a
    producer whose `batchable` is true."""

    producer: Any
    token: int
    position: int
    logits: np.ndarray


@dataclass(frozen=True, slots=True, eq=False)
class PrefillStep:
    """Streaming-layer only: a prompt chunk's forward pass offered to the driver, as a
    `DecodeStep` is — feed `tokens` at `position`; when `logits` is given, the last token's
    logits go there. A batching driver runs it inside the round's ONE forward pass beside the
    other streams' decode steps (llama-server's continuous batching: their next tokens come out
    of the same pass) and sends back True; None = the loop feeds the chunk itself. `cancel`:
    the turn's Stop, which may stop that pass inside (then nothing of it is committed)."""

    producer: Any
    tokens: tuple[int, ...]
    position: int
    logits: np.ndarray | None
    cancel: Any = None


@dataclass
class RawDecodeResult:
    """Summary of one run (the reference's ten fields)."""

    prompt_tokens: int  # prompt tokens of this turn (reused ones included)
    new_tokens: int  # tokens generated (a stop token is not counted as text but is counted)
    prefill_seconds: float
    decode_seconds: float  # 0.0 when cancelled during prefill: no rate to divide
    reason: StopReason
    kv_position: int  # KV write cursor at the end; == len(kv_backed_token_ids)
    kv_backed_token_ids: list[int] = field(default_factory=list)
    reused_prefix_tokens: int = 0  # leading prompt tokens continued from the previous turn
    session_slot_evicted: bool = False  # this turn evicted ANOTHER session's usable state
    # Worst pressure seen while decoding; NORMAL when no probe ran (absence of a reading).
    peak_memory_pressure: MemoryPressure = MemoryPressure.NORMAL
    # Prompt-lookup speculation: draft tokens verified, and how many of them were kept (each
    # kept one is a new token that cost no forward pass of its own). 0 / 0 when off.
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    # Of the reused prefix, the tokens whose KV came back from RAM (the session's slot had been
    # taken; engine.state_cache): set by the backend that owns the slots.
    restored_tokens: int = 0
    # Images this turn encoded (not those whose cells were reused): their KV cells and the
    # seconds the encodes took, a stopped one's included (set by a backend that takes images);
    # `image_encode_stopped`: Stop ended an encode part-way (its rows were thrown away).
    image_tokens: int = 0
    image_encode_seconds: float = 0.0
    image_encode_stopped: bool = False

    @property
    def acceptance(self) -> float | None:
        """accepted / drafted; None when nothing was drafted."""
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else None

    @property
    def decode_tokens_per_sec(self) -> float:
        return self.new_tokens / self.decode_seconds if self.decode_seconds > 0 else 0.0

    @property
    def prefill_tokens_per_sec(self) -> float:
        # Cancelled in prefill: only the tokens up to the KV cursor were fed.
        fed = min(self.prompt_tokens, self.kv_position) - self.reused_prefix_tokens
        return fed / self.prefill_seconds if self.prefill_seconds > 0 else 0.0
