"""An embedding model in llama.cpp: its own model and context (`embeddings` on, pooling as the
GGUF says), texts in, L2-normalised float32 vectors out.

llama.cpp aborts the process (GGML_ASSERT, measured) on a sequence longer than the model's
trained context (BERT's position lookup) and, for an encoder, on a batch of more tokens than
`n_ubatch`. So every text is capped at `max_tokens = min(n_ctx_train, n_ubatch)` tokens and the
sequences are packed into batches of at most `n_ubatch` tokens and `n_seq_max` sequences here,
before anything reaches llama.cpp.

Throughput (benchmarks/bench_embed_peer.py, ~143-token chunks, 2 threads): n_ubatch 2048 with
up to 32 sequences was the fastest measured (1024: 0.75x, 4096/64: 0.93x, 2048/8: 0.78x), and
flash attention (llama.cpp's "auto" = on for the CPU) is worth 2x there: it skips the masked
cross-sequence pairs of a packed ubatch that plain attention computes.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ...engine.errors import EngineError
from ..gguf.header import ModelFileError
from . import library
from .batch import Batch
from .log import capturing, refusal
from .model import LlamaCppModel

POOLING_NAMES = {0: "none", 1: "mean", 2: "cls", 3: "last", 4: "rank"}
DEFAULT_UBATCH = 2048
DEFAULT_SEQS = 32


class EmbeddingError(EngineError):
    """The embedder could not run; the message says why."""


@dataclass(frozen=True)
class EmbedderInfo:
    """What an index records of the embedder that made its vectors."""

    name: str  # the GGUF's file name
    dims: int
    pooling: str
    max_tokens: int  # a text is cut to this many tokens (specials included)


def pack(lengths: Sequence[int], max_tokens: int, max_seqs: int) -> list[list[int]]:
    """Indices of `lengths` grouped in order so each group holds at most `max_seqs` items and
    `max_tokens` tokens (every length must be ≤ max_tokens)."""
    groups: list[list[int]] = []
    current: list[int] = []
    used = 0
    for i, n in enumerate(lengths):
        if n > max_tokens:
            raise ValueError(f"a sequence of {n} tokens exceeds the batch of {max_tokens}")
        if current and (used + n > max_tokens or len(current) >= max_seqs):
            groups.append(current)
            current, used = [], 0
        current.append(i)
        used += n
    if current:
        groups.append(current)
    return groups


class LlamaCppEmbedder:
    """An embedding GGUF and its context. `embed(texts)` is thread-safe (one decode at a time)."""

    def __init__(self, path: str | Path, *, threads: int = 2, n_ubatch: int = DEFAULT_UBATCH,
                 n_seq_max: int = DEFAULT_SEQS, flash_attn: int = -1) -> None:
        self.model = LlamaCppModel.open(path, gpu_layers=0)
        C = library.backend()
        facts = self.model.facts
        params = C.llama_context_default_params()
        n_ubatch = max(8, int(n_ubatch))
        params.n_ctx = n_ubatch
        params.n_batch = params.n_ubatch = n_ubatch
        params.n_seq_max = int(n_seq_max)
        params.n_threads = params.n_threads_batch = int(threads)
        params.embeddings = True
        params.pooling_type = -1  # LLAMA_POOLING_TYPE_UNSPECIFIED: the GGUF's
        params.flash_attn_type = int(flash_attn)  # -1 auto, 0 off, 1 on
        params.kv_unified = True
        params.no_perf = True
        with capturing() as lines:
            handle = C.llama_init_from_model(self.model.handle, params)
        if not handle:
            self.model.close()
            raise EmbeddingError(f"llama.cpp could not create an embedding context for {Path(path).name}: "
                                 f"{refusal(lines) or 'no reason given'}")
        self._C, self._ctx = C, handle
        pooling = int(C.llama_pooling_type(handle))
        if pooling not in (1, 2, 3):
            self.close()
            raise ModelFileError(Path(path), f"its pooling is {POOLING_NAMES.get(pooling, pooling)!r}: "
                                 "an embedding model pools each text into one vector (mean, cls or last)")
        self._mem = C.llama_get_memory(handle)  # NULL for encoders (BERT): nothing to clear
        self.n_ubatch = int(C.llama_n_ubatch(handle))
        self.n_seq_max = int(C.llama_n_seq_max(handle))
        train = facts.n_ctx_train or self.n_ubatch
        self.max_tokens = max(2, min(train, self.n_ubatch))
        self.dims = int(C.llama_model_n_embd_out(self.model.handle)) if hasattr(
            C, "llama_model_n_embd_out") else facts.n_embd
        self.info = EmbedderInfo(Path(path).name, self.dims, POOLING_NAMES[pooling], self.max_tokens)
        self._vocab = self.model.vocab
        self._sep = int(C.llama_vocab_sep(self._vocab))
        self._batch = Batch(self.n_ubatch)
        self._lock = threading.Lock()

    # -- tokens ---------------------------------------------------------------------------------

    def tokenize(self, text: str) -> list[int]:
        """The ids the embedder sees for `text` (its specials added: [CLS] ... [SEP]), uncapped."""
        data = text.encode("utf-8", "replace")
        C = self._C
        room = len(data) + 8
        while True:
            buf = (C.llama_token * room)()
            n = int(C.llama_tokenize(self._vocab, data, len(data), buf, room, True, False))
            if n >= 0:
                return list(buf[:n])
            room = -n

    def count_tokens(self, text: str) -> int:
        return len(self.tokenize(text))

    def capped(self, ids: list[int]) -> list[int]:
        """`ids` cut to `max_tokens`, the closing separator kept (the model was trained so)."""
        if len(ids) <= self.max_tokens:
            return ids
        tail = [ids[-1]] if self._sep >= 0 and ids[-1] == self._sep else []
        return ids[: self.max_tokens - len(tail)] + tail

    # -- vectors --------------------------------------------------------------------------------

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dims) float32, each row L2-normalised. An empty text embeds its specials
        alone; a text past `max_tokens` is cut there."""
        seqs = [self.capped(self.tokenize(t)) or [self._sep if self._sep >= 0 else 0] for t in texts]
        out = np.zeros((len(seqs), self.dims), np.float32)
        with self._lock:
            for group in pack([len(s) for s in seqs], self.n_ubatch, self.n_seq_max):
                self._run(group, seqs, out)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-12)

    def _run(self, group: list[int], seqs: list[list[int]], out: np.ndarray) -> None:
        C, b = self._C, self._batch
        row = 0
        for seq_id, i in enumerate(group):
            ids = seqs[i]
            n = len(ids)
            b.token[row:row + n] = ids
            b.pos[row:row + n] = np.arange(n, dtype=np.int32)
            b.seq[row:row + n] = seq_id
            b.logits[row:row + n] = 1
            row += n
        b.struct.n_tokens = row
        if self._mem:
            C.llama_memory_clear(self._mem, True)  # a decoder embedder keeps KV: start clean
        with capturing() as lines:
            code = int(C.llama_decode(self.handle, b.struct))
        if code != 0:
            said = refusal(lines)
            raise EmbeddingError(f"llama.cpp could not embed (code {code})" + (f": {said}" if said else ""))
        for seq_id, i in enumerate(group):
            ptr = C.llama_get_embeddings_seq(self.handle, seq_id)
            if not ptr:
                raise EmbeddingError(f"llama.cpp returned no pooled vector for sequence {seq_id}")
            addr = ctypes.cast(ptr, ctypes.c_void_p).value
            out[i] = np.frombuffer((ctypes.c_float * self.dims).from_address(addr), np.float32)

    # -- the rest -------------------------------------------------------------------------------

    def set_threads(self, threads: int) -> None:
        """Threads from the next batch on (fewer while a reply streams)."""
        self._C.llama_set_n_threads(self.handle, int(threads), int(threads))

    @property
    def handle(self) -> Any:
        if self._ctx is None:
            raise RuntimeError("the embedder was closed")
        return self._ctx

    def close(self) -> None:
        ctx, self._ctx = getattr(self, "_ctx", None), None
        if ctx is not None:
            self._C.llama_free(ctx)
        self.model.close()

    def __enter__(self) -> "LlamaCppEmbedder":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
