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
from ...host.heap import release_free_heap
from ..base import ForwardCancelled, LlamaBase
from ..choice.kernels import DEFAULT_KERNELS, KERNEL_MODES, KERNELS_ENV
from ..gguf.file import LlamaConfig
from ..kv_cache import ArenaKVCache, KVArena, KVCache
from .graph import build_model_proto, default_threads, supports
from .graph_cache import cached_proto
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
        # Saved in the entry once per mode: a warm open neither imports onnx nor walks the layers.
        proto, self.graph_cached = cached_proto(
            weights.cache_path, self.kernels, self.has_local_rope,
            lambda: build_model_proto(config, weights.layers, weights.head, weights.output_norm,
                                      weights.external_ref, self.kernels, self.has_local_rope))
        # A first open (the weights prepared just now) peaks highest: its repack goes serial.
        self._session, self.session_origin = cached_session(
            proto, weights.cache_path, self.kernels, self._threads,
            parallel_prepack=weights.origin == "cache")
        release_free_heap()  # what the repack's threads freed (host/heap.py)
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

    def new_kv_arena(self, max_context: int | None = None, step: int = 256) -> KVArena:
        """A KV arena for this model: caches made by it can decode in one batched step."""
        c = self.config
        return KVArena(c.n_layers, c.n_kv_heads, c.head_dim, max_context or c.context_length, step)

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
        bound = self._binding(cache)
        logits = self._run_rows(bound, ids, [p], t_len, 1, ids.size > 1 if prompt is None else prompt,
                                cancel if t_len > 1 else None)
        cache.advance(t_len)
        if not want_logits:
            return None
        if logits_out is None:
            return logits[0].copy()
        np.copyto(logits_out, logits[0])
        return logits_out

    def forward_rows(self, tokens: Sequence[int] | np.ndarray, cache: KVCache,
                     logits_out: np.ndarray) -> np.ndarray:
        """Feed `tokens` like `forward`, with the logits after EVERY one: (T, vocab) into
        `logits_out` (a draft's verification). Decode numerics: the plain kernels, not the
        prompt's exact split, so row t is what a one-token step would give there."""
        ids = self._check_tokens(tokens, cache)
        t_len, p = ids.size, cache.offset
        cache.reserve(p + t_len)
        logits = self._run_rows(self._binding(cache), ids, [p], t_len, t_len, False, None)
        cache.advance(t_len)
        np.copyto(logits_out, logits)
        return logits_out

    def forward_batch(self, tokens: Sequence[int], caches: Sequence[KVCache],
                      logits_out: np.ndarray) -> np.ndarray:
        """One decode step for each (token, cache) pair: row b's logits into logits_out[b].

        Caches of one KVArena run as ONE session run (the weights are read once for all of
        them; rows apart are first moved next to each other, `KVArena.gather`); other caches
        run apart. Same numerics as `forward`'s step.
        """
        self._check_batch(tokens, caches, logits_out)
        for t, cache in zip(tokens, caches):
            self._check_tokens((t,), cache)
            cache.reserve(cache.offset + 1)  # before binding: growing the arena moves every row
        # One run per arena (its caches moved next to each other if apart: an idle conversation
        # between them), in row order; any other cache is a run of its own.
        runs: list[list[int]] = []
        arenas: dict[int, list[int]] = {}
        for b, cache in enumerate(caches):
            if isinstance(cache, ArenaKVCache) and cache.row is not None:
                arenas.setdefault(id(cache.arena), []).append(b)
            else:
                runs.append([b])
        for group in arenas.values():
            members = [caches[b] for b in group]
            members[0].arena.gather(members)  # type: ignore[attr-defined]
            runs.append(sorted(group, key=lambda b: caches[b].row))  # type: ignore[attr-defined]
        for run in runs:
            if len(run) == 1:
                b = run[0]
                self.forward((tokens[b],), caches[b], True, logits_out[b])
                continue
            first = caches[run[0]]
            assert isinstance(first, ArenaKVCache) and first.row is not None
            ids = np.array([tokens[b] for b in run], np.intp)
            offsets = [caches[b].offset for b in run]
            bound = self._arena_binding(first.arena, first.row, len(run))
            logits = self._run_rows(bound, ids, offsets, 1, len(run), False, None)
            for i, b in enumerate(run):
                caches[b].advance(1)
                np.copyto(logits_out[b], logits[i])
        return logits_out

    def _run_rows(self, bound: "_Binding", ids: np.ndarray, offsets: list[int], t_len: int,
                  n_logits: int, prompt: bool, cancel: Callable[[], bool] | None) -> np.ndarray:
        """One session run over len(offsets) sequences of t_len tokens each (B = 1, or T = 1),
        the sequence b starting at offsets[b]; returns the last n_logits rows' logits."""
        io = bound.io
        total = max(offsets) + t_len
        cos, sin = self._rope_inputs(total)
        io.bind_cpu_input("x", embed_rows(self.weights.embd, ids))  # (B*T, dim)
        if self.kernels == "exact-prompt":
            io.bind_cpu_input("exact", np.array(prompt, np.bool_))
        io.bind_cpu_input("seqlens_k", np.array([p + t_len - 1 for p in offsets], np.int32))
        io.bind_cpu_input("total", np.array(total, np.int32))
        io.bind_cpu_input("rows", np.array([-n_logits], np.int64))
        io.bind_cpu_input("cos", cos)
        io.bind_cpu_input("sin", sin)
        if self.has_local_rope:
            cos_local, sin_local = self._rope_inputs(total, local=True)
            io.bind_cpu_input("cos_local", cos_local)
            io.bind_cpu_input("sin_local", sin_local)
        logits = bound.logits(n_logits)
        self._run(io, cancel)
        return logits

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

    def _binding(self, cache: KVCache) -> "_Binding":
        """The cache's IOBinding for this session (KV buffers bound as past AND present);
        rebuilt when the cache reallocated."""
        held = getattr(cache, "_ort_binding", None)
        if held is not None and held[0] is self._session and held[1] == cache.generation:
            return held[2]
        bound = _Binding(self._session, [k[None] for k in cache.k_layers],  # (1, n_kv, cap, hd)
                         [v[None] for v in cache.v_layers], self.config.vocab_size)
        cache._ort_binding = (self._session, cache.generation, bound)  # type: ignore[attr-defined]
        return bound

    def _arena_binding(self, arena: KVArena, r0: int, n: int) -> "_Binding":
        """The binding of arena rows [r0, r0 + n) as one batch; rebuilt when the arena moved."""
        held = getattr(arena, "_ort_bindings", None)
        if held is None or held[0] is not self._session or held[1] != arena.generation:
            held = arena._ort_bindings = (self._session, arena.generation, {})  # type: ignore[attr-defined]
        bound = held[2].get((r0, n))
        if bound is None:
            keys, values = arena.rows(r0, r0 + n)  # (n, n_kv, cap, hd) per layer
            bound = held[2][(r0, n)] = _Binding(self._session, keys, values, self.config.vocab_size)
        return bound

    def _rope_inputs(self, n_positions: int, local: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """cos and sin of the (global or local) RoPE table, (>= n_positions, rope_dims/2) float32 each."""
        rot = self._rope_table(n_positions, local)
        held = self._cos_sin.get(local)
        if held is None or held[0] is not rot:
            held = self._cos_sin[local] = (rot, np.ascontiguousarray(rot.real), np.ascontiguousarray(rot.imag))
        return held[1], held[2]


class _Binding:
    """An IOBinding with the KV buffers bound as past AND present of every layer (ONNX
    Runtime's attention then writes the new positions in place), and the logits buffers."""

    def __init__(self, session: Any, keys: list[np.ndarray], values: list[np.ndarray], vocab: int) -> None:
        import onnxruntime as ort

        self._ort = ort
        self.io = io = session.io_binding()
        self._keep = []
        for i, (k, v) in enumerate(zip(keys, values)):
            for name, buf in ((f"k{i}", k), (f"v{i}", v)):
                value = ort.OrtValue.ortvalue_from_numpy(buf)  # shares the buffer
                io.bind_ortvalue_input(name, value)
                io.bind_ortvalue_output(f"{name}_out", value)
                self._keep.append(value)
        self._vocab = vocab
        self._logits: dict[int, tuple[np.ndarray, Any]] = {}
        self._bound = 0

    def logits(self, n: int) -> np.ndarray:
        """The (n, vocab) buffer the next run writes its logits into (bound when n changes)."""
        held = self._logits.get(n)
        if held is None:
            if len(self._logits) > 4:  # drafts of many lengths: keep the one-row buffer only
                self._logits = {k: v for k, v in self._logits.items() if k == 1}
            buf = np.empty((n, self._vocab), _F32)
            held = self._logits[n] = (buf, self._ort.OrtValue.ortvalue_from_numpy(buf))
        if n != self._bound:
            self.io.bind_ortvalue_output("logits", held[1])
            self._bound = n
        return held[0]


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
