"""`turbospark model fetch|path|info [FILE]`: the console side of `fetch` (progress lines) and the
metadata of any GGUF (`model.gguf.describe`), with whether llama.cpp runs it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..model.fetch import (
    FetchError,
    default_model_path,
    ensure_default_model,
    is_verified,
    resolve_model_path,
)

if TYPE_CHECKING:  # the GGUF reader (numpy) is imported by `model info` only
    from ..model.gguf.describe import GGUFDescription


def model_info(description: GGUFDescription, verified: str | None = None) -> list[str]:
    """`model info`'s stdout: "key: value" lines of the metadata (any architecture), then the
    plain verdict line (llama.cpp runs it, or why not)."""
    from ..model.gguf.describe import description_rows, verdict_line

    lines = [f"{row.key}: {row.text}" for row in description_rows(description)]
    if verified is not None:
        lines.append(f"verified: {verified}")
    return [*lines, verdict_line(description)]


def vision_line(path: Path, description: GGUFDescription, mmproj: str | None) -> str:
    """"yes (mmproj-x.gguf, mlp, width 576)" or "no (why)", from the headers (the projector
    finally decides when the model loads: mtmd checks its real output width)."""
    from ..model.gguf.header import ModelFileError
    from ..model.llamacpp.vision import find_projector, has_mtmd, projector_width

    n_embd = description.arch_fields.get("embedding_length")
    if not isinstance(n_embd, int):
        return "no (the model declares no embedding width)"
    if mmproj == "off":
        return "no (image input is off: --mmproj off)"
    if mmproj:
        chosen = Path(mmproj)
        try:
            width = projector_width(chosen)
        except ModelFileError as e:
            return f"no (--mmproj {chosen.name}: {e.reason})"
        if width is None:
            return f"no ({chosen.name} is not a vision projector)"
        if width != n_embd:
            return f"no ({chosen.name} projects to {width}, the model's width is {n_embd})"
    else:
        choice = find_projector(path, n_embd)
        if choice.path is None:
            return f"no ({choice.reason})"
        chosen = choice.path
    if not has_mtmd():
        return "no (this llama-cpp-python was built without libmtmd; rebuild with -DLLAVA_BUILD=ON)"
    from ..model.gguf.header import read_header

    kind = read_header(chosen).value("clip.projector_type", "?")
    return f"yes (mmproj {chosen}, {kind}, width {n_embd})"


def _info(path: Path, mmproj: str | None = None) -> int:
    """`model info`: 0 when the metadata is printed and llama.cpp runs the file; 1 when the header
    cannot be read (the error alone) or llama.cpp does not run it (the metadata, the verdict,
    then the error on stderr)."""
    from ..model.gguf.describe import describe_gguf
    from ..model.gguf.header import ModelFileError

    if not path.is_file():
        what = "is a directory, not a GGUF file" if path.is_dir() else "does not exist"
        print(f"error: no model file at {path}: it {what}", file=sys.stderr)
        return 1
    try:
        description = describe_gguf(path)
    except ModelFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    verified = None
    if path == default_model_path():
        verified = "sha256 ok" if is_verified(path) else "not verified"
    lines = model_info(description, verified)
    lines.insert(len(lines) - 1, f"vision: {vision_line(path, description, mmproj)}")  # the verdict stays last
    print("\n".join(lines))
    if description.runnable:
        return 0
    # The same words `chat` and Open Model give for this file (ModelFileError's text)
    print(f"error: {ModelFileError(path, str(description.problem))}", file=sys.stderr)
    return 1


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
    """`turbospark model fetch|path|info [FILE]` (args.action, args.file, args.model); returns
    the exit code. FILE wins over --model; without either, the default model."""
    action, chosen = args.action, getattr(args, "file", None) or getattr(args, "model", None)
    if getattr(args, "file", None) and action != "info":
        print(f"error: `model {action}` takes no FILE (only `model info FILE` does)", file=sys.stderr)
        return 2
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
        return _info(path, getattr(args, "mmproj", None))
    print(f"error: unknown model action {action!r}", file=sys.stderr)
    return 2
