"""The Llama forward pass over compact weights: GGUF blocks, one ONNX Runtime graph per pass.

Same contract and RoPE table as the float32 `LlamaModel` (both subclass `llama_base.LlamaBase`).
A forward pass of T tokens (one decode step, or a prefill chunk) is ONE session run
(`ort_graph.build_model_proto`): numpy only looks up the embeddings before it and copies the
logits after it. The KV cache keeps keys untransposed, (n_kv, capacity, head_dim) per layer,
because ONNX Runtime's attention reads and writes those buffers in place (each layer's past and
present are bound to the same memory through an IOBinding kept on the cache).

Stop inside a chunk: the run's terminate flag is set by the `set()` of the `engine.StopEvent`
whose `is_set` is `cancel`, else by a watcher thread polling `cancel` every 2 ms; ONNX Runtime
checks it before every node, so the run ends within one kernel call. The cache's offset does
not move, so the positions the cut-short run wrote stay junk beyond it.
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from ...engine.load_progress import KERNELS, report
from ...engine.stop_event import stop_event_of
from ..base import ForwardCancelled, LlamaBase
from ..choice.kernels import DEFAULT_KERNELS, KERNEL_MODES, KERNELS_ENV
from ..gguf.file import LlamaConfig
from ..kv_cache import KVCache
from .graph import build_model_proto, default_threads, supports
from .session_cache import cached_session
from .weights import CompactWeights, embed_rows, load_compact

_F32 = np.float32
_CANCEL_POLL_S = 0.002  # how often a running chunk asks `cancel`


class CompactUnsupported(ValueError):
    """This model's shape has no compact graph (the float32 path runs it instead)."""


class CompactLlamaModel(LlamaBase):
    """A LlamaModel whose weights stay the GGUF's blocks (see the module docstring)."""

    weights_kind = "compact"
    keys_transposed = False

    def __init__(self, config: LlamaConfig, weights: CompactWeights, kernels: str | None = None) -> None:
        why = supports(config)
        if why is not None:
            raise CompactUnsupported(why)
        self.weights = weights  # type: ignore[assignment]
        self._init_common(config, weights.rope_freq_factors)
        self.kernels = kernel_mode(kernels)
        t0 = time.perf_counter()
        report(KERNELS, 0.0)  # prepacking has no finer grain: the phase is said, then done
        self._threads = default_threads()
        proto = build_model_proto(config, weights.layers, weights.head, weights.output_norm,
                                  weights.external_ref, self.kernels, self.has_local_rope)
        self._session, self.session_origin = cached_session(
            proto, weights.cache_path, self.kernels, self._threads)
        self.session_seconds = time.perf_counter() - t0
        report(KERNELS, 1.0)
        self._cos_sin: dict[bool, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # local? -> (rot, cos, sin)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        cache_dir: str | os.PathLike[str] | None = None,
        kernels: str | None = None,
    ) -> "CompactLlamaModel":
        """Load a GGUF's compact weights through the weight cache and build the session."""
        config, weights = load_compact(path, cache_dir)
        return cls(config, weights, kernels)

    def forward(
        self,
        tokens: Sequence[int] | np.ndarray,
        cache: KVCache,
        want_logits: bool = True,
        logits_out: np.ndarray | None = None,
        cancel: Callable[[], bool] | None = None,
        prompt: bool | None = None,
    ) -> np.ndarray | None:
        """See `LlamaBase.forward`; one session run (the head runs even when unwanted)."""
        ids = self._check_tokens(tokens, cache)
        t_len, p = ids.size, cache.offset
        cache.reserve(p + t_len)
        io, logits = self._binding(cache)
        cos, sin = self._rope_inputs(p + t_len)
        x = embed_rows(self.weights.embd, ids)  # (T, dim)
        seqlens = np.array([p + t_len - 1], np.int32)
        total = np.array(p + t_len, np.int32)
        io.bind_cpu_input("x", x)
        if self.kernels == "exact-prompt":
            exact = np.array(ids.size > 1 if prompt is None else prompt, np.bool_)
            io.bind_cpu_input("exact", exact)
        io.bind_cpu_input("seqlens_k", seqlens)
        io.bind_cpu_input("total", total)
        io.bind_cpu_input("cos", cos)
        io.bind_cpu_input("sin", sin)
        if self.has_local_rope:
            cos_local, sin_local = self._rope_inputs(p + t_len, local=True)
            io.bind_cpu_input("cos_local", cos_local)
            io.bind_cpu_input("sin_local", sin_local)
        self._run(io, cancel if t_len > 1 else None)
        cache.advance(t_len)
        if not want_logits:
            return None
        if logits_out is None:
            return logits[0].copy()
        np.copyto(logits_out, logits[0])
        return logits_out

    def _run(self, io: Any, cancel: Callable[[], bool] | None) -> None:
        if cancel is None:
            self._session.run_with_iobinding(io)
            return
        if cancel():
            raise ForwardCancelled()
        import onnxruntime as ort

        options = ort.RunOptions()
        options.log_severity_level = 4  # a terminated run is our Stop, not an error to log
        with _terminate_on(cancel, options):
            try:
                self._session.run_with_iobinding(io, options)
            except Exception as exc:
                if options.terminate:
                    raise ForwardCancelled() from exc
                raise

    def _binding(self, cache: KVCache) -> tuple[Any, np.ndarray]:
        """The cache's IOBinding for this session (KV buffers bound as past AND present) and the
        logits buffer it writes; rebuilt when the cache reallocated."""
        import onnxruntime as ort

        held = getattr(cache, "_ort_binding", None)
        if held is not None and held[0] is self._session and held[1] == cache.generation:
            return held[2], held[3]
        io = self._session.io_binding()
        keep = []
        for i in range(self.config.n_layers):
            for name, buf in ((f"k{i}", cache.k_layers[i]), (f"v{i}", cache.v_layers[i])):
                value = ort.OrtValue.ortvalue_from_numpy(buf[None])  # (1, n_kv, cap, hd), shared
                io.bind_ortvalue_input(name, value)
                io.bind_ortvalue_output(f"{name}_out", value)
                keep.append(value)
        logits = np.empty((1, self.config.vocab_size), _F32)
        io.bind_ortvalue_output("logits", ort.OrtValue.ortvalue_from_numpy(logits))
        cache._ort_binding = (self._session, cache.generation, io, logits, keep)  # type: ignore[attr-defined]
        return io, logits

    def _rope_inputs(self, n_positions: int, local: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """cos and sin of the (global or local) RoPE table, (>= n_positions, rope_dims/2) float32 each."""
        rot = self._rope_table(n_positions, local)
        held = self._cos_sin.get(local)
        if held is None or held[0] is not rot:
            held = self._cos_sin[local] = (rot, np.ascontiguousarray(rot.real), np.ascontiguousarray(rot.imag))
        return held[1], held[2]


@contextmanager
def _terminate_on(cancel: Callable[[], bool], options: Any) -> Iterator[None]:
    """Set the run's terminate flag once `cancel` says stop, while the block runs: from the
    StopEvent's own `set` when `cancel` is one's `is_set`, else from a thread polling it."""
    stop = stop_event_of(cancel)
    if stop is not None:
        with stop.listening(lambda: setattr(options, "terminate", True)):
            yield
        return
    done = threading.Event()

    def watch() -> None:
        while not done.wait(_CANCEL_POLL_S):
            if cancel():
                options.terminate = True
                return

    watcher = threading.Thread(target=watch, name="turbospark-stop-watch", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()


def kernel_mode(explicit: str | None = None) -> str:
    """`explicit`, else $TURBOSPARK_KERNELS, else "exact-prompt" (`kernels_choice.KERNEL_MODES`)."""
    where = "kernel mode" if explicit else KERNELS_ENV
    mode = (explicit or os.environ.get(KERNELS_ENV, "")).strip().lower() or DEFAULT_KERNELS
    if mode not in KERNEL_MODES:
        raise ValueError(f"unknown {where} {mode!r} (choose one of {', '.join(KERNEL_MODES)})")
    return mode
