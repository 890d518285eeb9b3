"""The real model: GGUF reading, the families, the two engines, tokenizer and chat template.
May import: engine, host.

    gguf/        reading a GGUF: the bounded header reader, the checked file and its config, quant blocks
    families/    one module per architecture: its hyper-parameters and where it differs
    reference/   the float32 numpy engine (dequantized weights, cached as .npy)
    compact/     the ONNX Runtime engine over the GGUF's own 4/8-bit blocks (one graph per pass)
    text/        tokenizer, chat template, and their consistency with the weights
    choice/      which weights / kernels a load uses, and who chose them
    base.py      what both engines share (RoPE, the KV contract, Stop between layers)
    kv_cache.py  the caller-owned KV cache; producer.py: the engine's LogitProducer over a model
    weight_cache/  the weight cache's keys (by content), usage, leases, budget and eviction
    fetch.py     the embedded default model; cache_integrity.py: weight-cache checksums

Importing this package is cheap on purpose (the first-run dialog and `turbospark model` import
it before anything heavy): the names below are loaded from their submodules on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "DEFAULT_MODEL_FILENAME": "fetch",
    "FetchCancelled": "fetch",
    "FetchError": "fetch",
    "default_model_path": "fetch",
    "ensure_default_model": "fetch",
    "resolve_model_path": "fetch",
    "GGUFTokenizer": "text.tokenizer",
    "TokenizerError": "text.tokenizer",
    "ChatTemplate": "text.chat_template",
    "TemplateError": "text.chat_template",
    "LlamaConfig": "gguf.file",
    "ModelFileError": "gguf.file",
    "open_gguf": "gguf.file",
    "KVCache": "kv_cache",
    "LlamaModel": "reference.forward",
    "LlamaProducer": "producer",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value
