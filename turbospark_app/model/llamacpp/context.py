"""A llama.cpp context over a model: the KV memory of every session slot (one llama.cpp
sequence each, in ONE unified buffer: `kv_unified`, so a cell is any slot's), `llama_decode`
with its return codes made errors, the logits rows, Stop inside a decode, and per-sequence state.

Sliding-window models keep the whole window history (`swa_full`): trimming a sequence and
feeding it again is then exact, which prefix reuse, Regenerate and speculation rely on.

The KV cache's element types (f16, q8_0, q4_0: `choice.kv_cache`) are checked against the
model's head sizes before llama.cpp is asked, and a quantized V turns flash attention on (llama.cpp
keeps one only with it); f16 leaves flash attention to llama.cpp (`auto`).

A decode step's logits are LENT, not copied (`lend`): the caller's buffer is named the row's
owner and `current(buffer)` gives the row itself (128k floats a step not copied, then read from
a cold copy) until the next `decode`, which first copies every row still lent into its buffer
(the row's memory is llama.cpp's output buffer: the next decode rewrites or reallocates it),
unless that decode refills the buffer itself (`refills`: the same turn's next step).

Stop inside a decode: on the CPU llama.cpp polls an abort callback after every graph node, so
a prefill chunk stops within one node. The callback is a Python function (it takes the GIL per
node), so it is installed only around a cancellable chunk, never for a decode step. On a GPU
backend (Metal) the callback does not reach the device: `abort_works` is False and the
producer cuts its chunks small instead (`producer.py`).
"""

from __future__ import annotations

import ctypes
import threading
import time
from typing import Any, Callable

import numpy as np

from ...engine.errors import EngineError
from ...engine.host_gauge import HostGauge
from ..choice.kv_cache import KVCacheTypes
from . import library
from .batch import Batch
from .log import capturing, refusal
from .model import LlamaCppModel

Cancel = Callable[[], bool]

DEFAULT_BATCH = 512  # tokens per llama_decode (n_batch = n_ubatch): llama-server's n_ubatch
MAX_VIEWS = 256  # logits rows' arrays kept: a decode step's rows come back at the same addresses


def ggml_type(C: Any, name: str) -> int:
    """ggml's enum value of a cache type name ("q8_0" -> GGML_TYPE_Q8_0)."""
    return int(getattr(C, f"GGML_TYPE_{name.upper()}"))


def head_dims(model: LlamaCppModel) -> tuple[int, int]:
    """(key, value) numbers per KV head: the header's, else llama.cpp's width / heads."""
    if model.header is not None:
        from ..gguf.config import read_config

        c = read_config(model.header)
        if c.head_dim:
            return c.head_dim, c.value_dim or c.head_dim
    f = model.facts
    dim = f.n_embd // f.n_head if f.n_head else 0
    return dim, dim


class DecodeError(EngineError):
    """llama_decode failed; the message says why (llama.cpp's own line when it gave one)."""


class KVCacheFull(DecodeError):
    """No room left in the KV memory for the batch (llama_decode returned 1)."""


class LlamaCppContext:
    """One context: `n_ctx` KV cells shared by `n_seq_max` sequences (the session slots)."""

    def __init__(self, model: LlamaCppModel, *, n_ctx: int, n_seq_max: int = 1,
                 n_batch: int = DEFAULT_BATCH, threads: int = 4, threads_batch: int | None = None,
                 swa_full: bool = True, cache_types: KVCacheTypes = KVCacheTypes()) -> None:
        """`cache_types`: the K and V element types (CacheTypeError, before llama.cpp, for one
        the model's head size does not fit)."""
        cache_types.check(*head_dims(model))
        C = library.backend()
        self.model = model
        self.cache_types = cache_types
        params = C.llama_context_default_params()
        params.n_ctx = int(n_ctx)
        params.n_batch = params.n_ubatch = int(n_batch)
        params.n_seq_max = int(n_seq_max)
        params.n_threads = int(threads)
        params.n_threads_batch = int(threads_batch or threads)
        params.kv_unified = True
        params.swa_full = bool(swa_full)
        params.no_perf = True
        params.type_k = ggml_type(C, cache_types.k)
        params.type_v = ggml_type(C, cache_types.v)
        if cache_types.flash_attention:
            params.flash_attn_type = C.LLAMA_FLASH_ATTN_TYPE_ENABLED
        with capturing() as lines:
            handle = C.llama_init_from_model(model.handle, params)
        if not handle:
            kv = "" if cache_types == KVCacheTypes() else f" with a {cache_types.label} KV cache"
            raise DecodeError(f"llama.cpp could not create a context of {n_ctx:,} tokens{kv}: "
                              f"{refusal(lines) or 'no reason given'}")
        self._C = C
        self._handle = handle
        self._mem = C.llama_get_memory(handle)
        self.n_ctx = int(C.llama_n_ctx(handle))
        self.n_seq_max = int(C.llama_n_seq_max(handle))
        self.n_batch = int(C.llama_n_batch(handle))
        self.n_vocab = model.vocab_size
        self.threads = int(threads)
        self.threads_batch = int(threads_batch or threads)
        self.abort_works = model.facts.gpu_layers == 0
        self.batch = Batch(self.n_batch)
        self._cancel: Cancel | None = None
        self._abort = C.ggml_abort_callback(self._poll_cancel)  # kept alive with the context
        self._no_abort = C.ggml_abort_callback()  # NULL
        self._lock = threading.Lock()
        self.host = HostGauge()  # the wall time between decode steps' llama_decode calls
        self._views: dict[int, np.ndarray] = {}  # logits row address -> its array (logits())
        self._lent: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # id(buffer) -> (buffer, row)
        model.attach()  # (the model's weights outlive this context, whatever is freed first)

    # -- decode ---------------------------------------------------------------------------------

    def _poll_cancel(self, _data: Any) -> bool:
        cancel = self._cancel
        if cancel is None:
            return False
        try:
            return bool(cancel())
        except Exception:  # a failing predicate stops the chunk rather than being ignored
            return True

    def decode(self, batch: Batch, cancel: Cancel | None = None,
               refills: tuple[np.ndarray, ...] = ()) -> bool:
        """Run `batch`. True = done; False = `cancel` stopped it inside (CPU only: what llama.cpp
        kept of it is for the caller to trim). Raises KVCacheFull / DecodeError. Rows lent
        before are first copied into their buffers, except those of `refills` (buffers this
        decode's rows are for: their old logits are read no more)."""
        if self._lent:
            self._settle(refills)
        C = self._C
        polled = cancel is not None and self.abort_works
        if polled:
            self._cancel = cancel
            C.llama_set_abort_callback(self.handle, self._abort, None)
        try:
            with capturing() as lines:
                start = time.perf_counter()
                code = int(C.llama_decode(self.handle, batch.struct))
                self.host.observe(batch.step_rows if code == 0 else 0, start, time.perf_counter())
        finally:
            if polled:
                C.llama_set_abort_callback(self.handle, self._no_abort, None)
                self._cancel = None
        if code == 0:
            return True
        if code == 2:
            return False
        said = refusal(lines)
        if code == 1:
            raise KVCacheFull(
                f"the KV cache is full: its {self.n_ctx:,} tokens are held by the conversations "
                "in memory and the replies being generated" + (f" ({said})" if said else ""))
        raise DecodeError(f"llama_decode failed (code {code})" + (f": {said}" if said else ""))

    def decode_embd(self, batch: Any, cancel: Cancel | None = None, *, causal: bool = True) -> bool:
        """Run an embedding batch (an image's rows, `batch.EmbdBatch`), as `decode`. `causal`
        False: the rows attend to each other both ways (Gemma 3's images); the caller has
        checked they fit one ubatch (llama.cpp asserts, killing the process, otherwise)."""
        if not causal and batch.n_tokens > self.n_batch:
            raise DecodeError(f"a non-causal image of {batch.n_tokens} rows does not fit one "
                              f"batch of {self.n_batch}")
        if not causal:
            self._C.llama_set_causal_attn(self.handle, False)
        try:
            return self.decode(batch, cancel)
        finally:
            if not causal:
                self._C.llama_set_causal_attn(self.handle, True)

    def logits(self, i: int) -> np.ndarray:
        """The logits of output row `i` of the last decode (batch index; -1 = last): a view,
        valid until the next decode."""
        ptr = self._C.llama_get_logits_ith(self.handle, int(i))
        if not ptr:
            raise DecodeError(f"llama.cpp has no logits for batch row {i}")
        addr = ctypes.cast(ptr, ctypes.c_void_p).value
        view = self._views.get(addr)
        if view is None:  # (a view of an address is the same array whenever it is made)
            if len(self._views) >= MAX_VIEWS:
                self._views.clear()
            view = self._views[addr] = np.frombuffer(
                (ctypes.c_float * self.n_vocab).from_address(addr), np.float32)
        return view

    def lend(self, i: int, out: np.ndarray) -> None:
        """Make output row `i` of the last decode `out`'s logits without copying it: read them
        through `current(out)`; the next decode copies the row into `out` unless it refills
        `out`. The owner must not write `out` while it is lent."""
        self._lent[id(out)] = (out, self.logits(i))

    def current(self, out: np.ndarray) -> np.ndarray:
        """The array holding `out`'s logits now: the lent row itself, else `out`."""
        lent = self._lent.get(id(out))
        return out if lent is None else lent[1]

    def _settle(self, refills: tuple[np.ndarray, ...] = ()) -> None:
        skip = {id(b) for b in refills}
        lent, self._lent = self._lent, {}
        for key, (out, row) in lent.items():
            if key not in skip:
                np.copyto(out, row)

    # -- memory ---------------------------------------------------------------------------------

    @property
    def _memory(self) -> Any:
        if self._mem is None:  # a freed context's memory handle would crash llama.cpp
            raise RuntimeError("the llama.cpp context was closed")
        return self._mem

    def _seq(self, seq: int) -> int:
        if not 0 <= seq < self.n_seq_max:  # llama.cpp asserts (aborts) on an unknown sequence
            raise ValueError(f"sequence {seq} is not one of the context's {self.n_seq_max}")
        return int(seq)

    def seq_rm(self, seq: int, p0: int, p1: int = -1) -> bool:
        """Remove positions [p0, p1) of `seq` (p1 < 0: to the end); False when the memory cannot
        drop part of a sequence (recurrent models)."""
        return bool(self._C.llama_memory_seq_rm(self._memory, self._seq(seq), int(p0), int(p1)))

    def clear_seq(self, seq: int) -> None:
        """Drop every position of `seq` (never fails)."""
        self._C.llama_memory_seq_rm(self._memory, self._seq(seq), -1, -1)

    def seq_pos_max(self, seq: int) -> int:
        """The last position `seq` holds, -1 when empty."""
        return int(self._C.llama_memory_seq_pos_max(self._memory, self._seq(seq)))

    def seq_pos_min(self, seq: int) -> int:
        """The first position `seq` still holds (> 0 only when a window dropped the rest)."""
        return int(self._C.llama_memory_seq_pos_min(self._memory, self._seq(seq)))

    def state_get(self, seq: int) -> bytes:
        """`seq`'s KV state (llama_state_seq_get_data): restorable into any sequence of a context
        of the same model and shape."""
        C = self._C
        seq = self._seq(seq)
        size = int(C.llama_state_seq_get_size(self.handle, seq))
        buf = (ctypes.c_uint8 * size)()
        written = int(C.llama_state_seq_get_data(self.handle, buf, size, seq))
        if written <= 0:
            raise DecodeError(f"llama.cpp could not save the state of sequence {seq}")
        return bytes(memoryview(buf)[:written])

    def state_set(self, seq: int, data: bytes) -> bool:
        """Restore a state saved by `state_get` into `seq` (replacing what it held); False when
        llama.cpp refused it (no room, or another model's)."""
        C = self._C
        seq = self._seq(seq)
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        with capturing():
            read = int(C.llama_state_seq_set_data(self.handle, buf, len(data), seq))
        return read > 0

    # -- the rest -------------------------------------------------------------------------------

    def set_threads(self, threads: int, threads_batch: int | None = None) -> None:
        """Threads for decode steps and for prompt batches, from the next decode on."""
        self.threads, self.threads_batch = int(threads), int(threads_batch or threads)
        self._C.llama_set_n_threads(self.handle, self.threads, self.threads_batch)

    @property
    def handle(self) -> Any:
        if self._handle is None:
            raise RuntimeError("the llama.cpp context was closed")
        return self._handle

    def close(self) -> None:
        """Free the context (its KV memory); the model stays."""
        with self._lock:
            if self._lent and self._handle is not None:
                self._settle()  # (the rows die with the context: their buffers keep them)
            handle, self._handle = self._handle, None
            self._mem = None
            self._views = {}
        if handle is not None:
            self._C.llama_free(handle)
            self.model.detach()

    def __del__(self) -> None:  # pragma: no cover - best effort at interpreter exit
        try:
            self.close()
        except Exception:
            pass
