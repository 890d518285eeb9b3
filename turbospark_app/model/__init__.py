"""The real model: the default GGUF (fetch), its tokenizer and chat template, the two engines.
May import: engine, host.

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
    "GGUFTokenizer": "tokenizer",
    "TokenizerError": "tokenizer",
    "ChatTemplate": "chat_template",
    "TemplateError": "chat_template",
    "LlamaConfig": "gguf_file",
    "ModelFileError": "gguf_file",
    "open_gguf": "gguf_file",
    "KVCache": "kv_cache",
    "LlamaModel": "llama",
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
