"""Describe any readable GGUF, whatever its architecture, and say whether TurboSpark runs it.

`describe_gguf(path)` reads the header with the bounded walk (`header.read_header`), so a hostile
file is refused there with the same `ModelFileError` every other path gives. Everything after the
walk only reads what the header holds: the `<arch>.` keys are read generically (a Mamba or Gemma 3
file shows its own sizes). Whether it runs is llama.cpp's own load's answer (`llamacpp.probe`: a
child process the first time a file is seen), never a table of names. `model info` and the
window's Model Info / Open Model share the rows (`description_rows`).
"""

from __future__ import annotations

import collections
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .config import ModelConfig, quantization_name, read_config
from .header import GGUFHeader, LazyStrings, ModelFileError, read_header

# The `<arch>.` keys shown first, in this order, with their labels; any other `<arch>.` key follows.
SHAPE_KEYS: tuple[tuple[str, str], ...] = (
    ("context_length", "Context length"),
    ("block_count", "Layers"),
    ("embedding_length", "Embedding width"),
    ("feed_forward_length", "Feed-forward width"),
    ("attention.head_count", "Attention heads"),
    ("attention.head_count_kv", "KV heads"),
    ("attention.key_length", "Head size (keys)"),
    ("attention.value_length", "Head size (values)"),
    ("expert_count", "Experts"),
    ("expert_used_count", "Experts used"),
)
_SHOWN_ITEMS = 6  # of a per-layer array
_SHOWN_CHARS = 120  # of a string value


class CannotRunError(ModelFileError):
    """A GGUF whose header reads but that TurboSpark cannot run; `description` has its metadata."""

    def __init__(self, description: "GGUFDescription") -> None:
        super().__init__(description.path, description.problem or "cannot run this model")
        self.description = description


@dataclass(frozen=True)
class GGUFDescription:
    """What a GGUF's header says, and TurboSpark's verdict on it."""

    path: Path
    file_size: int
    gguf_version: int
    architecture: str | None  # general.architecture; None when the file has none
    name: str
    parameters: int  # elements of all tensors
    n_tensors: int
    arch_fields: dict[str, Any]  # every `<arch>.` key, without the prefix
    file_type: int | None  # general.file_type (llama.cpp's LlamaFileType)
    quantization: str
    tensor_types: dict[str, int]  # GGML type name -> tensors, the most common first
    vocab_size: int | None
    tokenizer_model: str | None
    tokenizer_pre: str | None
    chat_template_chars: int | None  # None: the file has no chat template
    problem: str | None  # None: llama.cpp runs it; else why not, in plain words
    config: ModelConfig | None = field(default=None, repr=False)
    engine_description: str = ""  # llama.cpp's own name of the model, when it runs

    @property
    def runnable(self) -> bool:
        """llama.cpp loads this file."""
        return self.problem is None


def can_run(header: GGUFHeader) -> tuple[ModelConfig | None, str | None, str]:
    """(config, None, llama.cpp's description) when llama.cpp runs this file, else (config or
    None, the reason, "")."""
    try:
        config = read_config(header)
    except ModelFileError as exc:
        return None, exc.reason, ""
    from ..llamacpp.probe import verdict

    found = verdict(header.path)
    return config, (None if found.runs else found.reason), found.description


def _int(value: Any) -> int | None:
    """An integer metadata value; None for anything else (a hostile file may hold any type)."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return int(value)
    return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _vocab_size(header: GGUFHeader, arch: str | None) -> int | None:
    tokens = header.fields.get("tokenizer.ggml.tokens")
    if isinstance(tokens, (list, LazyStrings)):
        return len(tokens)
    declared = _int(header.fields.get(f"{arch}.vocab_size"))
    if declared is not None:
        return declared
    embd = next((t for t in header.tensors if t.name == "token_embd.weight"), None)
    return int(embd.dims[1]) if embd is not None and len(embd.dims) == 2 else None


def describe_header(header: GGUFHeader) -> GGUFDescription:
    """The description of a header `read_header` accepted (reads no tensor data)."""
    fields = header.fields
    arch = _text(fields.get("general.architecture"))  # another type: can_run names the problem
    prefix = f"{arch}."
    arch_fields = {k[len(prefix):]: v for k, v in fields.items() if arch is not None and k.startswith(prefix)}
    file_type = _int(fields.get("general.file_type"))
    types = collections.Counter(t.type_name for t in header.tensors)
    template = _text(fields.get("tokenizer.chat_template"))
    config, problem, engine = can_run(header)
    return GGUFDescription(
        path=header.path,
        file_size=header.file_size,
        gguf_version=header.version,
        architecture=arch,
        name=_text(fields.get("general.name")) or header.path.stem,
        parameters=sum(t.n_elements for t in header.tensors),
        n_tensors=len(header.tensors),
        arch_fields=arch_fields,
        file_type=file_type,
        quantization=quantization_name(file_type, header.tensors),
        tensor_types=dict(types.most_common()),
        vocab_size=_vocab_size(header, arch),
        tokenizer_model=_text(fields.get("tokenizer.ggml.model")),
        tokenizer_pre=_text(fields.get("tokenizer.ggml.pre")),
        chat_template_chars=len(template) if template else None,
        problem=problem,
        config=config,
        engine_description=engine,
    )


def describe_gguf(path: str | os.PathLike[str]) -> GGUFDescription:
    """Describe the GGUF at `path`; a ModelFileError only when its header cannot be read."""
    return describe_header(read_header(path))


def show_value(value: Any) -> str:
    """A metadata value in a line: per-layer arrays shortened, long strings cut."""
    if isinstance(value, np.ndarray):
        items, n = value[:_SHOWN_ITEMS].tolist(), len(value)
        uniform = n > 0 and bool((value == value[0]).all())
    elif isinstance(value, list):
        items, n = value[:_SHOWN_ITEMS], len(value)
        uniform = n > 0 and all(v == value[0] for v in value)
    elif isinstance(value, float):
        return f"{value:.6g}"  # float32 metadata: 1e-05, not 9.999999747378752e-06
    else:
        text = str(value)
        return text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS] + f"… ({len(text):,} chars)"
    if uniform and n > 1:
        return f"{show_value(items[0])} (all {n:,})"
    shown = ", ".join(show_value(v) for v in items)
    return f"[{shown}]" if n <= _SHOWN_ITEMS else f"[{shown}, …] ({n:,} values)"


@dataclass(frozen=True)
class Row:
    """One line of a description: `key` for `model info` (key: text), `label` for the window."""

    key: str
    label: str
    text: str


def description_rows(d: GGUFDescription) -> list[Row]:
    """The metadata as rows (the verdict is `verdict_line`)."""
    rows = [
        Row("file", "File", str(d.path)),
        Row("file_size", "File size", f"{d.file_size} bytes ({d.file_size / 2**20:.1f} MiB)"),
        Row("gguf_version", "GGUF version", str(d.gguf_version)),
        Row("name", "Name", show_value(d.name)),
        Row("architecture", "Architecture", "–" if d.architecture is None else show_value(d.architecture)),
        Row("parameters", "Parameters", f"{d.parameters:,}"),
        Row("tensors", "Tensors", f"{d.n_tensors:,}"),
        Row("quantization", "Quantization", d.quantization),
        Row("tensor_types", "Tensor types", ", ".join(f"{k} x{v}" for k, v in d.tensor_types.items()) or "–"),
    ]
    for key, label in SHAPE_KEYS:
        if key in d.arch_fields:
            rows.append(Row(key.rsplit(".", 1)[-1], label, show_value(d.arch_fields[key])))
    rows.append(Row("vocab_size", "Vocabulary", "–" if d.vocab_size is None else str(d.vocab_size)))
    rows.append(Row("tokenizer", "Tokenizer", f"{show_value(d.tokenizer_model or '–')} (pre: {show_value(d.tokenizer_pre or 'default')})"))
    no_template = "absent (a base model: raw completion)"
    rows.append(Row("chat_template", "Chat template", no_template if d.chat_template_chars is None
                    else f"present ({d.chat_template_chars:,} chars)"))
    shape_keys = {key for key, _ in SHAPE_KEYS}
    for key, value in d.arch_fields.items():  # the rest of the architecture's own keys
        if key not in shape_keys:
            rows.append(Row(f"{d.architecture}.{key}", f"{d.architecture}.{key}", show_value(value)))
    return rows


def verdict_line(d: GGUFDescription) -> str:
    """One plain line: it runs (as llama.cpp names it), or llama.cpp's reason why not."""
    if d.runnable:
        return f"Runs with llama.cpp ({d.engine_description})." if d.engine_description else "Runs with llama.cpp."
    return f"llama.cpp cannot run this file: {d.problem}"
