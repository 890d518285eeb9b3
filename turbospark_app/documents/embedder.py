"""The embedder the documents index uses: any object with `embed`, `count_tokens` and `info`
(tests give a stand-in); the app's is llama.cpp's over the default all-MiniLM-L6-v2 GGUF or the
GGUF the user picked (`TURBOSPARK_EMBEDDER`, `--embedder`)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, Sequence

import numpy as np


class EmbedderLike(Protocol):
    max_tokens: int

    @property
    def info(self) -> object: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...

    def count_tokens(self, text: str) -> int: ...


def embedder_id(embedder: EmbedderLike) -> tuple[str, int]:
    """(name, dims) an index records: vectors of another pair are not comparable."""
    info = embedder.info
    return f"{getattr(info, 'name', 'embedder')}:{getattr(info, 'pooling', '')}", int(getattr(info, "dims", 0))


def open_embedder(path: str | Path | None = None, *, threads: int = 2, download: bool = True) -> object:
    """llama.cpp's embedder over `path`, else `TURBOSPARK_EMBEDDER`, else the default model
    (fetched and converted first when missing and `download`)."""
    from ..model.embedder_fetch import default_embedder_path, ensure_embedder, resolve_embedder_path
    from ..model.llamacpp.embedding import LlamaCppEmbedder

    chosen = resolve_embedder_path(str(path) if path else None)
    if chosen == default_embedder_path():
        chosen = ensure_embedder(download=download)
    return LlamaCppEmbedder(chosen, threads=threads)
