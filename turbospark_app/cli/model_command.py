"""`turbospark model fetch|path|info`: the console side of `fetch` (progress lines, metadata)."""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path
from typing import Any

from ..model.fetch import (
    FetchError,
    default_model_path,
    ensure_default_model,
    is_verified,
    resolve_model_path,
)


def model_info(path: Path) -> dict[str, Any]:
    """Metadata of a GGUF: architecture, parameters, quantization, context, size, template.

    The header goes through the same bounded walk and checks as `chat` and Open Model, so a
    file they would refuse is a ModelFileError naming what is wrong."""
    from ..model.gguf.file import quantization_name, validate_header
    from ..model.gguf.header import read_header

    header = read_header(path)
    validate_header(header)
    value = header.value
    arch = str(value("general.architecture", "unknown"))
    file_type = value("general.file_type", None)
    tensor_types = collections.Counter(t.type_name for t in header.tensors)
    template = value("tokenizer.chat_template", None)
    tokens = header.fields.get("tokenizer.ggml.tokens")
    return {
        "file": str(path),
        "file_size": header.file_size,
        "name": value("general.name", ""),
        "architecture": arch,
        "parameters": sum(t.n_elements for t in header.tensors),
        "quantization": quantization_name(file_type, header.tensors),
        "tensor_types": dict(tensor_types.most_common()),
        "context_length": value(f"{arch}.context_length", None),
        "embedding_length": value(f"{arch}.embedding_length", None),
        "block_count": value(f"{arch}.block_count", None),
        "head_count": value(f"{arch}.attention.head_count", None),
        "head_count_kv": value(f"{arch}.attention.head_count_kv", None),
        "vocab_size": len(tokens) if isinstance(tokens, list) else 0,
        "tokenizer": f"{value('tokenizer.ggml.model', '?')}"
        f" (pre: {value('tokenizer.ggml.pre', 'default')})",
        "chat_template": f"present ({len(template)} chars)" if isinstance(template, str) and template
        else "absent (a base model: raw completion)",
    }


class _ConsoleProgress:
    """Progress on stderr: a live line on a terminal, a line per quarter otherwise."""

    def __init__(self) -> None:
        self._tty = sys.stderr.isatty()
        self._last: tuple[str, int] | None = None

    def __call__(self, phase: str, done: int, total: int) -> None:
        pct = int(100 * done / total) if total else -1
        step = pct if self._tty else pct // 25 * 25
        if self._last == (phase, step):
            return
        if self._last and self._last[0] != phase and self._tty:
            sys.stderr.write("\n")
        self._last = (phase, step)
        amount = f"{done / 1e6:.1f}/{total / 1e6:.1f} MB ({pct}%)" if total else f"{done / 1e6:.1f} MB"
        line = f"{phase}: {amount}"
        sys.stderr.write("\r" + line if self._tty else line + "\n")
        sys.stderr.flush()

    def finish(self) -> None:
        """End the live line (terminal only)."""
        if self._tty and self._last is not None:
            sys.stderr.write("\n")


def run_model_command(args: argparse.Namespace) -> int:
    """`turbospark model fetch|path|info` (args.action, args.model); returns the exit code."""
    action, chosen = args.action, getattr(args, "model", None)
    if action == "fetch":
        if chosen:
            print("error: `model fetch` fetches the default model; --model names a file you have",
                  file=sys.stderr)
            return 2
        progress = _ConsoleProgress()
        try:
            path = ensure_default_model(on_progress=progress)
        except KeyboardInterrupt:
            print("\nfetch cancelled", file=sys.stderr)
            return 130
        except FetchError as exc:
            print(f"\nerror: {exc}", file=sys.stderr)
            return 1
        progress.finish()
        print(path)
        return 0
    path = resolve_model_path(chosen)
    if action == "path":
        print(path)
        if not path.is_file():
            print("(no file there yet: run `turbospark model fetch`)", file=sys.stderr)
            return 1
        return 0
    if action == "info":
        if not path.is_file():
            print(f"error: no model file at {path}", file=sys.stderr)
            return 1
        from ..model.gguf.header import ModelFileError

        try:
            info = model_info(path)
        except ModelFileError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        if path == default_model_path():
            info["verified"] = "sha256 ok" if is_verified(path) else "not verified"
        info["file_size"] = f"{info['file_size']} bytes ({info['file_size'] / 2**20:.1f} MiB)"
        info["parameters"] = f"{info['parameters']:,}"
        info["tensor_types"] = ", ".join(f"{k} x{v}" for k, v in info["tensor_types"].items())
        for key, value in info.items():
            print(f"{key}: {value}")
        return 0
    print(f"error: unknown model action {action!r}", file=sys.stderr)
    return 2
