"""The TurboSpark engine: a Python port of turbospark-runtime's raw-completion loop.
May import: nothing of the app (it sees a model only through the LogitProducer protocol).

Layers: a step loop (`stream_raw_completion*`, a generator of progress events) under the
blocking calls that mirror the reference (`run_raw_completion*`).
"""

from .config import GenerationConfig, MemoryProbe, RateConfig, Shaping, ThermalProbe
from .errors import (
    ContextOverflow,
    EmptyPrompt,
    EngineError,
    InvalidRate,
    ProducerError,
    SelectionError,
    ZeroBudget,
)
from .foundation import prefill_chunk_spans
from .pacing import THERMAL_POLL_TOKENS, Pacer
from .power import MemoryPressure, ThermalLevel, stepped_cap
from .producer import ChunkedPrefillRunner, LogitProducer
from .progress import (
    DecodeStep,
    PaceWait,
    PrefillProgress,
    RawDecodeProgress,
    RawDecodeResult,
    StopReason,
    TailProgress,
    TokenProgress,
)
from .raw_completion import (
    NEVER,
    CancelFlag,
    RawCompletionStream,
    check_admission,
    drive_raw_completion,
    run_raw_completion,
    run_raw_completion_cancellable,
    stream_raw_completion,
)
from .raw_completion_chunked import (
    run_raw_completion_chunked,
    run_raw_completion_chunked_cancellable,
    stream_raw_completion_chunked,
)
from .selection import Sampler, make_sampler, select
from .stop_event import StopEvent, stop_event_of
from .speculation import LookupSpeculation
from .token_sink import Commit, TokenSink
from .tokenizer import EngineTokenizer

__all__ = [
    "CancelFlag",
    "ChunkedPrefillRunner",
    "Commit",
    "ContextOverflow",
    "EmptyPrompt",
    "EngineError",
    "EngineTokenizer",
    "GenerationConfig",
    "InvalidRate",
    "LogitProducer",
    "LookupSpeculation",
    "MemoryPressure",
    "MemoryProbe",
    "NEVER",
    "DecodeStep",
    "PaceWait",
    "Pacer",
    "PrefillProgress",
    "ProducerError",
    "RateConfig",
    "RawCompletionStream",
    "RawDecodeProgress",
    "RawDecodeResult",
    "Sampler",
    "SelectionError",
    "Shaping",
    "StopEvent",
    "StopReason",
    "THERMAL_POLL_TOKENS",
    "TailProgress",
    "ThermalLevel",
    "ThermalProbe",
    "TokenProgress",
    "TokenSink",
    "ZeroBudget",
    "check_admission",
    "drive_raw_completion",
    "make_sampler",
    "prefill_chunk_spans",
    "run_raw_completion",
    "run_raw_completion_cancellable",
    "run_raw_completion_chunked",
    "run_raw_completion_chunked_cancellable",
    "select",
    "stepped_cap",
    "stop_event_of",
    "stream_raw_completion",
    "stream_raw_completion_chunked",
]
