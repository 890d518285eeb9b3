"""Stop during an image's encode: llama.cpp's graph callback (`cb_eval`) on the projector.

libmtmd's `mtmd_encode_chunk` takes no abort callback, and clip's CPU backend is not reachable
for `ggml_backend_cpu_set_abort_callback`. What does reach it is the scheduler's eval callback,
given once in `mtmd_context_params.cb_eval` (clip.cpp sets it on its scheduler). ggml calls it
twice per node (ggml-backend.cpp, `ggml_backend_sched_compute_splits`):

  - `ask=True` before computing: "do you want this node's result?" Saying yes ends the range
    computed in one go at that node;
  - `ask=False` after the range is computed: returning False `break`s out of the split.

So while a cancel predicate is set (`watching`), every `every`-th node is asked for and the
predicate is polled after it; once it says stop, every node is asked for and refused, so each
remaining split costs one node. ggml still reports success and clip still copies out its
(half-computed) embeddings: `watching` tells the caller the encode was stopped and the rows must
be thrown away. With no predicate set the callback asks for nothing: the graph computes in one
piece, as without a callback (a Python call per node is the only cost).

Asking for a node makes the scheduler synchronise after it: cheap on the CPU, where compute is
synchronous anyway; on a GPU it is one wait per `every` nodes (`GPU_EVERY`).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator

from . import library

CPU_EVERY = 1  # nodes between looks on the CPU: a look (one sync) costs little beside a node
GPU_EVERY = 16  # on a GPU backend a look waits for the device: fewer of them


class EncodeGate:
    """The projector's `cb_eval`: lets a cancel predicate stop the graph being computed."""

    def __init__(self, every: int = CPU_EVERY) -> None:
        self.every = max(1, int(every))
        self._cancel: Callable[[], bool] | None = None
        self.stopped = False
        self.nodes = 0  # nodes asked about while watching (the last encode's)
        self.looks = 0  # times the predicate was polled (the last encode's)
        # Kept alive as long as the projector: llama.cpp holds the pointer.
        self.callback = library.binding().ggml_backend_sched_eval_callback(self._eval)

    @property
    def active(self) -> bool:
        """An encode is being watched right now (its predicate can stop it)."""
        return self._cancel is not None

    def _eval(self, tensor: Any, ask: bool, user_data: Any) -> bool:
        # Never raise out of a ctypes callback (ctypes prints and returns 0): any error stops.
        cancel = self._cancel
        if cancel is None:
            return not ask  # nothing to watch: compute everything in one range
        if ask:
            self.nodes += 1
            return self.stopped or self.nodes % self.every == 0
        if not self.stopped:
            self.looks += 1
            try:
                self.stopped = bool(cancel())
            except BaseException:  # noqa: BLE001 (the predicate failing means stop)
                self.stopped = True
        return not self.stopped

    @contextmanager
    def watching(self, cancel: Callable[[], bool] | None) -> Iterator["EncodeGate"]:
        """While inside, `cancel()` can stop the graph; `gate.stopped` says whether it did."""
        self._cancel, self.stopped, self.nodes, self.looks = cancel, False, 0, 0
        try:
            yield self
        finally:
            self._cancel = None
