"""The model: GGUF reading, the tokenizer and chat template, and the llama.cpp engine.
May import: engine, host.

    gguf/        reading a GGUF before llama.cpp does: the bounded header reader, the model's
                 figures, the description `model info` shows
    text/        tokenizer, chat template, and their consistency with the model
    llamacpp/    the llama.cpp binding (the only code that calls llama.cpp): model, context,
                 batch, producer, log capture, the child-process probe, llama.cpp's tokenizer
    choice/      options chosen by flag > environment > setting > default: threads (the
                 performance cores by default), speculation
    legacy.py    the weight cache an earlier version left on disk, reported once
    fetch.py     the embedded default model
    embedder_fetch.py  the default embedding model (all-MiniLM-L6-v2), fetched from its PyPI
                 wheel and converted once to a GGUF by bert_gguf.py

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
    "ModelConfig": "gguf.config",
    "ModelFileError": "gguf.header",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value
