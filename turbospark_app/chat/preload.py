"""A model's load started before the rest of the app has imported (`turbospark chat`'s start).

The command line knows which file it will open as soon as its arguments are parsed; the chat
backend's modules (the engine, numpy, jinja2) take a tenth of a second more to
import. llama.cpp's load runs without the GIL, so it goes on a thread of its own meanwhile, and
`load_backend` takes the loaded model instead of loading it again.

Only a file the probe child has loaded (`probe.verdict`: same path, size, modification time
and llama.cpp) is preloaded, and without our header check first: that child was the check, and
the main thread still reads the header as usual. A file seen for the first time waits here for
its child's verdict (`probe.verdict`, on this thread): the child and the imports run side by
side (a bigger file's verdict is looked for early too: `probe.verdict_soon`). Only files small enough that their load shows no progress (a bar
would have no reporter yet): the ones whose start-up is all overhead. This module imports
nothing heavy itself: it runs before the rest has imported.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

PRELOAD_BYTES = 256 << 20


class Preload:
    """The llama.cpp model of `path`, loading on a thread from construction."""

    def __init__(self, path: Path, gpu_layers: int) -> None:
        self.path = Path(path)
        self.gpu_layers = gpu_layers
        self._model: Any = None
        self._thread = threading.Thread(target=self._load, name="model-preload", daemon=True)
        self._thread.start()

    def _load(self) -> None:
        from ..host.switching import fast_switching

        with fast_switching():  # its ctypes calls beside the main thread's imports
            try:
                from ..model.llamacpp.probe import verdict

                if not verdict(self.path).runs:  # (a first open: the child `verdict_soon` started)
                    return  # the normal load says why not
                from ..model.llamacpp.model import LlamaCppModel

                self._model = LlamaCppModel.open(self.path, gpu_layers=self.gpu_layers, quiet=True,
                                                 probed=True)
            except Exception:  # the normal load path meets the same problem and says it
                self._model = None

    def take(self, path: Path, gpu_layers: int) -> Any:
        """The loaded model (waits for the load) when this preload is of `path` with
        `gpu_layers` and it worked; None else (the caller loads as usual). A model of another
        file or layer count is freed."""
        self._thread.join()
        model, self._model = self._model, None
        if model is not None and (Path(path) != self.path or gpu_layers != self.gpu_layers):
            model.close()
            return None
        return model

    def close(self) -> None:
        """Free a model nobody took (the command ended before its load)."""
        self._thread.join()
        model, self._model = self._model, None
        if model is not None:
            model.close()


def start_preload(path: Path, gpu_layers: int) -> Preload | None:
    """A Preload of `path`, or None for a file too big (or not there) to preload."""
    try:
        size = os.path.getsize(path)
    except OSError:
        return None
    return Preload(path, gpu_layers) if size <= PRELOAD_BYTES else None
