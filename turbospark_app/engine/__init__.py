"""The TurboSpark engine: a Python port of turbospark-runtime's raw-completion loop.
May import: nothing of the app (it sees a model only through the LogitProducer protocol).

Layers: a step loop (`stream_raw_completion*`, a generator of progress events) under the
blocking calls that mirror the reference (`run_raw_completion*`).

Importing the package is cheap (the command line's parser and the load-progress reporter import
parts of it before anything needs numpy): each name below is loaded from its module on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "CancelFlag": "raw_completion",
    "ChunkedPrefillRunner": "producer",
    "Commit": "token_sink",
    "ContextOverflow": "errors",
    "DecodeStep": "progress",
    "PrefillStep": "progress",
    "EmptyPrompt": "errors",
    "EngineError": "errors",
    "EngineTokenizer": "tokenizer",
    "GenerationConfig": "config",
    "InvalidRate": "errors",
    "LogitProducer": "producer",
    "LookupSpeculation": "speculation",
    "MemoryPressure": "power",
    "MemoryProbe": "config",
    "NEVER": "raw_completion",
    "PaceWait": "progress",
    "Pacer": "pacing",
    "PrefillProgress": "progress",
    "ProducerError": "errors",
    "RateConfig": "config",
    "RawCompletionStream": "raw_completion",
    "RawDecodeProgress": "progress",
    "RawDecodeResult": "progress",
    "Sampler": "selection",
    "SelectionError": "errors",
    "Shaping": "config",
    "StopReason": "progress",
    "THERMAL_POLL_TOKENS": "pacing",
    "TailProgress": "progress",
    "ThermalLevel": "power",
    "ThermalProbe": "config",
    "TokenProgress": "progress",
    "TokenSink": "token_sink",
    "ZeroBudget": "errors",
    "check_admission": "raw_completion",
    "drive_raw_completion": "raw_completion",
    "make_sampler": "selection",
    "prefill_chunk_spans": "foundation",
    "run_raw_completion": "raw_completion",
    "run_raw_completion_cancellable": "raw_completion",
    "run_raw_completion_chunked": "raw_completion_chunked",
    "run_raw_completion_chunked_cancellable": "raw_completion_chunked",
    "select": "selection",
    "stepped_cap": "power",
    "stream_raw_completion": "raw_completion",
    "stream_raw_completion_chunked": "raw_completion_chunked",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value
