"""A GGUF opened by llama.cpp: `LlamaCppModel.open(path)` -> the weights (memory-mapped, no
conversion, nothing written to disk), its vocabulary and what llama.cpp says of the model.

The file's header is read by our bounded reader first (`gguf.header.read_header`), so a broken
file gets its precise `ModelFileError` before llama.cpp sees it; then llama.cpp's own load
decides whether it runs: its refusal, captured from its log (`log.py`), is the error's reason.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..gguf.header import ModelFileError, read_header
from . import library
from .log import capturing, refusal
from .log import quiet as log_quiet

ProgressFn = Callable[[float], None]

ALL_LAYERS = -1  # n_gpu_layers: every layer on the GPU when there is one


@dataclass(frozen=True)
class ModelFacts:
    """What llama.cpp reports of a loaded model (the header has the rest)."""

    description: str  # llama_model_desc, e.g. "llama 135M Q4_1"
    n_params: int
    size_bytes: int  # the weights' bytes
    n_ctx_train: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_swa: int  # sliding window (0 = none)
    n_vocab: int
    recurrent: bool  # Mamba, RWKV: no partial trim
    hybrid: bool  # attention + recurrent layers (Granite 4 H, LFM2, ...)
    has_encoder: bool  # T5-like: not a decoder-only chat model
    gpu_layers: int  # layers offloaded (0 = CPU only)


class LlamaCppModel:
    """A loaded llama.cpp model. `close()` frees it (also on garbage collection)."""

    def __init__(self, path: Path, handle: Any, facts: ModelFacts, header: Any) -> None:
        self.path = path
        self._handle = handle
        self.facts = facts
        self.header = header  # the checked GGUFHeader (metadata for Model Info)
        self._vocab = library.binding().llama_model_get_vocab(handle)
        self._lock = threading.Lock()
        self._contexts = 0  # contexts over the model not yet freed
        self._close_asked = False

    @classmethod
    def open(cls, path: str | Path, *, gpu_layers: int = ALL_LAYERS,
             progress: ProgressFn | None = None, header: Any = None,
             vocab_only: bool = False, quiet: bool = False, probed: bool = False) -> "LlamaCppModel":
        """Load `path` (mmap). Raises ModelFileError: from the header check, or llama.cpp's
        refusal in one line. `gpu_layers`: layers to offload where a GPU backend is present;
        `vocab_only`: the vocabulary alone (tokenizing, no weights); `quiet`: llama.cpp's log
        dropped during the load (a file the probe child loaded, `log.quiet`); a load that fails
        so is tried again with the log captured, for its reason. `probed`: the probe child
        loaded this very file (`probe.known_verdict`), so the header is not read first
        (`header` stays None until the caller sets it: `chat.preload`)."""
        path = Path(path)
        if not probed:
            header = header if header is not None else read_header(path)
        C = library.backend()
        params = C.llama_model_default_params()
        gpu = library.gpu_device()
        params.n_gpu_layers = gpu_layers if gpu is not None and not vocab_only else 0
        params.vocab_only = bool(vocab_only)
        keep: list[Any] = []
        if progress is not None:
            def on_progress(fraction: float, _user: Any) -> bool:
                try:
                    progress(float(fraction))
                except Exception:  # a reporter's fault must not abort the load
                    pass
                return True

            callback = C.llama_progress_callback(on_progress)
            keep.append(callback)  # alive for the whole call
            params.progress_callback = callback
        handle = None
        if quiet:
            with log_quiet(C):
                handle = C.llama_model_load_from_file(str(path).encode("utf-8"), params)
        if not handle:
            with capturing() as lines:
                handle = C.llama_model_load_from_file(str(path).encode("utf-8"), params)
        if not handle:
            reason = refusal(lines) or "llama.cpp could not load it (no reason given in its log)"
            raise ModelFileError(path, reason)
        try:
            # A vocabulary alone has no hyper-parameters: llama.cpp asserts (aborts) when asked.
            facts = _vocab_facts(C, handle) if vocab_only else _facts(C, handle, params.n_gpu_layers)
        except Exception:
            C.llama_model_free(handle)
            raise
        if facts.has_encoder:
            C.llama_model_free(handle)
            raise ModelFileError(path, f"{facts.description} is an encoder-decoder model; "
                                 "TurboSpark runs decoder-only (chat and completion) models")
        return cls(path, handle, facts, header)

    @property
    def handle(self) -> Any:
        if self._handle is None:
            raise RuntimeError("the model was closed")
        return self._handle

    @property
    def vocab(self) -> Any:
        """llama.cpp's vocabulary of the model (valid while the model is open)."""
        if self._handle is None:
            raise RuntimeError("the model was closed")
        return self._vocab

    @property
    def vocab_size(self) -> int:
        return self.facts.n_vocab

    def meta(self, key: str) -> str | None:
        """A metadata value as llama.cpp reads it (text), or None."""
        C = library.binding()
        buf = ctypes.create_string_buffer(256)
        n = C.llama_model_meta_val_str(self.handle, key.encode("utf-8"), buf, len(buf))
        if n < 0:
            return None
        if n >= len(buf):
            buf = ctypes.create_string_buffer(n + 1)
            C.llama_model_meta_val_str(self.handle, key.encode("utf-8"), buf, len(buf))
        return buf.value.decode("utf-8", "replace")

    def attach(self) -> None:
        """A context over the model was made (`LlamaCppContext`): the weights stay until it closes."""
        with self._lock:
            self._contexts += 1

    def detach(self) -> None:
        """That context was freed; a close asked for meanwhile happens now, with the last one."""
        with self._lock:
            self._contexts -= 1
            free = self._close_asked and self._contexts == 0
        if free:
            self.close()

    def close(self) -> None:
        """Free the weights, once every context over the model is freed: while one is open the
        free waits for its close (the garbage collector finalizes a model and its context in
        any order, and llama.cpp reads the model while it frees a context)."""
        with self._lock:
            self._close_asked = True
            if self._contexts > 0:
                return
            handle, self._handle = self._handle, None
        if handle is not None:
            library.binding().llama_model_free(handle)

    def __del__(self) -> None:  # pragma: no cover - best effort at interpreter exit
        try:
            self.close()
        except Exception:
            pass


def _vocab_facts(C: Any, m: Any) -> ModelFacts:
    return ModelFacts(description="vocabulary", n_params=0, size_bytes=0, n_ctx_train=0, n_embd=0,
                      n_layer=0, n_head=0, n_head_kv=0, n_swa=0,
                      n_vocab=int(C.llama_vocab_n_tokens(C.llama_model_get_vocab(m))),
                      recurrent=False, hybrid=False, has_encoder=False, gpu_layers=0)


def _facts(C: Any, m: Any, gpu_layers: int) -> ModelFacts:
    buf = ctypes.create_string_buffer(256)
    C.llama_model_desc(m, buf, len(buf))
    n_layer = int(C.llama_model_n_layer(m))
    return ModelFacts(
        description=buf.value.decode("utf-8", "replace"),
        n_params=int(C.llama_model_n_params(m)),
        size_bytes=int(C.llama_model_size(m)),
        n_ctx_train=int(C.llama_model_n_ctx_train(m)),
        n_embd=int(C.llama_model_n_embd(m)),
        n_layer=n_layer,
        n_head=int(C.llama_model_n_head(m)),
        n_head_kv=int(C.llama_model_n_head_kv(m)),
        n_swa=int(C.llama_model_n_swa(m)),
        n_vocab=int(C.llama_vocab_n_tokens(C.llama_model_get_vocab(m))),
        recurrent=bool(C.llama_model_is_recurrent(m)),
        hybrid=bool(C.llama_model_is_hybrid(m)),
        has_encoder=bool(C.llama_model_has_encoder(m)),
        gpu_layers=(n_layer + 1 if gpu_layers < 0 else min(gpu_layers, n_layer + 1)) if gpu_layers else 0,
    )
