"""The status bar: what the engine is doing, honestly.

    model       loading / name · quantization · llama.cpp · CPU AVX2 · 2 threads / failed to load
    reuse       the prefix reuse of the turn prefilling now ("reused 412/430 tok · prefilling 420/430"),
                known as its prompt goes in; once a turn ends, with its slot outcome ("· slot hit")
    prefill     that turn's prefill rate, live as its prompt goes in (engine-timed), then final
    decode      live decode rate (tokens in the last two seconds, every pane together);
                once no turn runs, the last turn's rate at once (the pane's own figure)
    thermal     the thermal level ("nominal", "serious (simulated)", "unavailable")
    memory      the memory pressure, the same way
    RSS         this process's resident memory

When the current pane runs on a remote endpoint, thermal and memory say "remote: unavailable"
(the server does not report them, and this machine's readings are not the server's); remote
turns' events come from the RemoteHub and feed the same decode / reuse labels.

Thermal, memory and RSS come from `system_info`, polled by a QTimer about every second,
during and between generations. The poll reads a lock-protected snapshot plus live process
readings, so it never waits behind a forward step.
"""

from __future__ import annotations

import collections
import time
from pathlib import Path
from typing import Any

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QLabel, QProgressBar, QStatusBar, QWidget

from ..model.choice.common import engine_label
from ..service import (
    BackendFailed,
    BackendLoading,
    BackendProgress,
    BackendReady,
    Failed,
    Finished,
    Prefilling,
    Started,
    Token,
)
from .services.bridge import EngineBridge
from .elided_label import ElidedLabel
from .formatting import (
    bytes_label,
    live_prefill_label,
    nested,
    prefill_label,
    rate_label,
    reading_label,
    slot_outcome,
)

POLL_MS = 1000
LIVE_WINDOW_S = 2.0


def model_label(info: dict[str, Any]) -> str:
    """A short model name: the file's ("SmolLM2-135M-Instruct · Q4_1"), else the GGUF's, and
    how the engine runs it when known (" · llama.cpp · CPU AVX2 · 2 threads")."""
    file = info.get("file_name") or info.get("file") or info.get("path") or ""
    name = Path(str(file)).stem if file else str(info.get("name") or "model")
    quant = str(info.get("quantization") or "")
    if quant:
        for sep in (".", "-", "_"):
            if name.lower().endswith((sep + quant).lower()):
                name = name[: -len(quant) - 1]
                break
        name = f"{name} · {quant}"
    engine = engine_label(info)
    return f"{name} · {engine}" if engine else name


class EngineStatusBar(QStatusBar):
    """See the module docstring."""

    def __init__(self, bridge: EngineBridge, parent: QWidget | None = None, *, remote: Any = None) -> None:
        """`remote`: the RemoteHub whose turns' events are shown too."""
        super().__init__(parent)
        self.setObjectName("engineStatusBar")
        self._bridge = bridge
        self._remote_label: str | None = None
        self._token_times: collections.deque[float] = collections.deque()
        self._last_decode_rate = 0.0
        self._batch = 0  # the engine's last decode step's batch size
        self._last_finished: Finished | None = None
        self._running: set[int] = set()  # turns started and not ended (this computer's and remote)
        self._live_reuse: int | None = None  # the running turn whose reuse the label shows
        self.labels: dict[str, QLabel] = {}
        self._tips: dict[str, str] = {}
        for key, tip in (
            ("model", "The model the engine thread runs"),
            ("reuse", "The turn prefilling now, else the last turn: prompt tokens continued from "
                      "the KV cache, and (once it ends) how the conversation got its KV slot "
                      "(hit / miss / evicted another)"),
            ("prefill", "Prefill rate of the turn prefilling now, else the last turn's "
                        "(new prompt tokens per second)"),
            ("decode", "Decode rate: live while generating (all panes), else the last turn's; "
                       "'batch N': N streams' decode steps run as one forward pass"),
            ("thermal", "Thermal level (pacing slows down when hot)"),
            ("memory", "Memory pressure (pacing slows down under pressure)"),
            ("rss", "This process's resident memory"),
        ):
            # The model's name gives up width first (elided, whole in its tooltip): the figures
            # and the API item must stay whole in the default window.
            label = ElidedLabel(self) if key == "model" else QLabel(self)
            label.setObjectName(f"status_{key}")
            label.setToolTip(tip)
            self._tips[key] = tip
            label.setContentsMargins(6, 0, 6, 0)
            self.labels[key] = label
            if key == "model":
                self.addWidget(label)
                # A long load says how far it is: "Loading model… 40%" and a bar.
                self.load_bar = QProgressBar(self)
                self.load_bar.setObjectName("status_load_bar")
                self.load_bar.setRange(0, 100)
                self.load_bar.setTextVisible(False)
                self.load_bar.setMaximumWidth(160)
                self.load_bar.hide()
                self.addWidget(self.load_bar)
                self.addWidget(QWidget(self), 1)  # the rest of the row
            else:
                self.addPermanentWidget(label)
        self.labels["model"].setText("Starting…")
        self._show_turn_figures(None)
        self.labels["decode"].setText("decode – tok/s")
        self._decode_shown = float("-inf")  # when a token last set the decode label
        bridge.engineEvent.connect(self._on_event)
        if remote is not None:
            remote.engineEvent.connect(self._on_event)
        self.timer = QTimer(self)
        self.timer.setInterval(POLL_MS)
        self.timer.timeout.connect(self.poll)
        self.timer.start()
        self.polls = 0
        self.poll()

    def text(self, key: str) -> str:
        """A label's text (tests and screenshots read the figures)."""
        return self.labels[key].text()

    def set_remote(self, label: str | None) -> None:
        """The current pane runs on a remote endpoint (`label`), or on this computer (None)."""
        self._remote_label = label
        self.poll()

    def poll(self) -> None:
        """Refresh the readings from system_info (cheap; never waits on the engine)."""
        self.polls += 1
        info = self._bridge.system_info()
        thermal = info.get("thermal")
        memory = info.get("memory_pressure")
        if self._remote_label is not None:
            for key in ("thermal", "memory"):
                self.labels[key].setText(f"{key} remote: unavailable")
                self.labels[key].setToolTip(f"{self._tips[key]}\n{self._remote_label} does not report its {key} state; "
                                            "this computer's reading would not be the server's")
            thermal = memory = None
        else:
            self.labels["thermal"].setText(f"thermal {reading_label(thermal)}")
            self.labels["memory"].setText(f"memory {reading_label(memory)}")
        for key, reading in (("thermal", thermal), ("memory", memory)):
            if isinstance(reading, dict):
                source = reading.get("source") or "no source"
                detail = reading.get("detail") or ""
                self.labels[key].setToolTip(f"{self._tips[key]}\n"
                                            f"source: {source}" + (f"\n{detail}" if detail else ""))
        rss = nested(info, "process.rss_bytes")
        self.labels["rss"].setText(f"RSS {bytes_label(rss)}")
        self._batch = int(nested(info, "engine.last_batch_size") or 0)
        self._update_decode()
        last = info.get("last_turn")
        if self._last_finished is not None and self._last_finished.stats.source != "remote" \
                and isinstance(last, dict) and self._live_reuse not in self._running:
            self._show_reuse(self._last_finished, last)

    def _on_event(self, event: Any) -> None:
        if isinstance(event, Started):
            self._running.add(event.request_id)
        elif isinstance(event, (Finished, Failed)):
            self._running.discard(event.request_id)
            if not self._running:  # nothing decodes now: the finished turn's rate, not a stale "live"
                self._token_times.clear()
        if isinstance(event, Token):
            now = event.at if event.at is not None else time.monotonic()  # tokens come in batches
            self._token_times.append(now)
            # At most 10 times a second: each change relays out and repaints the whole bar.
            if time.monotonic() - self._decode_shown >= 0.1:
                self._decode_shown = time.monotonic()
                self._update_decode(now)
        elif isinstance(event, Prefilling):  # a long reply no longer shows the previous turn's reuse
            self._live_reuse = event.request_id
            progress = f" · prefilling {event.done}/{event.total}" if event.done < event.total else ""
            self.labels["reuse"].setText(f"reused {event.reused}/{event.total} tok{progress}")
            self.labels["prefill"].setText(live_prefill_label(
                event.done - event.reused, event.seconds, event.done >= event.total))
        elif isinstance(event, Finished):
            self._last_finished = event
            if event.stats.decode_tokens_per_sec:
                self._last_decode_rate = event.stats.decode_tokens_per_sec
            if self._live_reuse not in self._running:  # else another turn's live figures stay
                self._show_turn_figures(event)
            self.poll()  # the engine refreshed its snapshot at the end of the turn
        elif isinstance(event, Failed) and event.request_id == self._live_reuse:
            self._live_reuse = None  # its prompt never finished: the last finished turn's again
            self._show_turn_figures(self._last_finished)
        elif isinstance(event, BackendLoading):
            self.labels["model"].setText("Loading model…")
        elif isinstance(event, BackendProgress):
            self.labels["model"].setText(event.label)
            # A phase without a measure (the kernels' prepack): a busy bar, not one stuck at 0%
            self.load_bar.setRange(0, 100 if event.measured else 0)
            self.load_bar.setValue(round(event.fraction * 100))
            self.load_bar.setVisible(event.fraction < 1.0)
        elif isinstance(event, BackendReady):
            self.load_bar.hide()
            self.labels["model"].setText(model_label(event.model_info))
            self.labels["model"].setToolTip(
                "\n".join(f"{k}: {v}" for k, v in event.model_info.items() if not isinstance(v, (dict, list)))
                + f"\nloaded in {event.load_seconds:.1f} s"
            )
            self.poll()  # the backend's first snapshot: thermal, memory, sessions
        elif isinstance(event, BackendFailed):
            self.load_bar.hide()
            self.labels["model"].setText("Model failed to load")
            self.labels["model"].setToolTip(f"{event.error_type}: {event.message}")

    def _show_turn_figures(self, event: Finished | None) -> None:
        """A finished turn's prefill and reuse figures (None: no turn yet)."""
        if event is None:
            self.labels["reuse"].setText("reused –")
            self.labels["prefill"].setText("prefill – tok/s")
            return
        self.labels["prefill"].setText(prefill_label(event.stats))
        self._show_reuse(event, None)

    def _show_reuse(self, event: Finished, last_turn: dict[str, Any] | None) -> None:
        stats = event.stats
        if not stats.started:
            return
        if stats.source == "remote":
            reused = (f"reused {stats.reused_prefix_tokens}/{stats.prompt_tokens} tok ({stats.reuse_source})"
                      if stats.reuse_source else "reused unavailable")
            self.labels["reuse"].setText(f"{reused} · remote")
            return
        outcome = slot_outcome(stats, last_turn)
        self.labels["reuse"].setText(
            f"reused {stats.reused_prefix_tokens}/{stats.prompt_tokens} tok · slot {outcome}"
        )

    def _update_decode(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        while self._token_times and now - self._token_times[0] > LIVE_WINDOW_S:
            self._token_times.popleft()
        if len(self._token_times) >= 2:
            span = self._token_times[-1] - self._token_times[0]
            rate = (len(self._token_times) - 1) / span if span > 0 else 0.0
            batch = f" · batch {self._batch}" if self._batch > 1 else ""
            self.labels["decode"].setText(f"decode {rate_label(rate)} live{batch}")
        else:
            self.labels["decode"].setText(f"decode {rate_label(self._last_decode_rate)}")
