"""Start the desktop app: QApplication, store, engine thread, main window, qasync event loop.

The model loads on the engine thread (the window is up at once and says "Loading model…");
a load failure is an event shown in the window, never a crash.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any, Callable

import qasync
from PySide6.QtCore import QSettings, QTimer
from PySide6.QtWidgets import QApplication, QMessageBox

from ..chat.api import ChatBackend
from ..conversations.store import (
    Store,
    StoreError,
    default_store_path,
    open_store_or_recover,
)
from ..host.bundle import is_frozen
from ..model.choice.common import LoadChoiceError
from ..readings import SimulationError
from ..service.engine_thread import Monitors
from .services.bridge import EngineBridge
from .dialogs.first_run import model_at_startup
from .icon import app_icon
from .main_window import MainWindow, ModelFactory
from .qa.power_controls import PowerControls
from .dialogs.projector import remembered_projector
from .prefs.store import APPLICATION, ORGANIZATION, app_settings
from .prefs.dialog import load_cache_ram, load_session_slots
from .theme import follow_system_scheme
from .prefs.speculation import SPECULATION_SETTING
from .prefs.stream_gap import STREAM_GAP_SETTING, stream_gap_ms
from .services.gc_guard import GuiThreadCollector
from .prefs.kv_cache import current_cache_types
from .prefs.threads import current_threads
from .render.math import warm_up

DEFAULT_SESSION_SLOTS = 4


def configure_application(app: QApplication) -> None:
    """Names (QSettings' organization "TurboSpark"), icon."""
    app.setOrganizationName(ORGANIZATION)
    app.setApplicationName(APPLICATION)
    app.setApplicationDisplayName("TurboSpark")
    app.setDesktopFileName("turbospark")
    if not (sys.platform == "darwin" and is_frozen()):
        # In the .app the bundle's .icns (Apple's icon grid) is the Dock icon; don't replace it.
        app.setWindowIcon(app_icon())


def real_backend_factory(
    model: str | None,
    session_slots: int,
    monitors: Monitors | None = None,
    max_kv_bytes: int | None = None,
    chat_template: str | None = None,
    threads: str | int | None = None,
    speculation: str = "off",
    max_context: int | None = None,
    gpu_layers: int = -1,
    cache_ram_mb: float | None = None,
    cache_types: tuple[str, str] = ("f16", "f16"),
    mmproj: str | None = None,
    max_stream_gap_ms: float | None = None,
) -> Callable[[], ChatBackend]:
    """Loads the GGUF (the --model flag, else TURBOSPARK_MODEL, else the default model),
    pacing on `monitors` (thermal, memory); `chat_template="chatml"`: the built-in ChatML;
    `threads`: llama.cpp's thread count, or "auto" / None for the performance cores;
    `speculation`: the backend's own mode (the API server's turns; the panes' come stamped by
    the bridge); `max_context`: KV cells (None: the model's context, at most 4096);
    `cache_types`: the KV cache's K and V types; `mmproj`: the vision projector ("auto" or None:
    the matching mmproj*.gguf beside the model; "off"; a file); `max_stream_gap_ms`: the
    backend's own longest stream gap (the API server's turns; the panes' come stamped). The
    returned function is called on the engine thread."""

    def load() -> ChatBackend:
        from ..chat.backend import load_backend, state_cache_bytes
        from ..model.choice.kv_cache import KVCacheTypes
        from ..model.choice.threads import threads_of
        from ..model.fetch import resolve_model_path

        path = resolve_model_path(model)
        if not path.exists():
            raise FileNotFoundError(
                f"no model file at {path} (fetch the default model with `turbospark model fetch`)"
            )
        thermal, memory = monitors if monitors is not None else (None, None)
        count = threads_of(str(threads)) if threads not in (None, "") else None
        backend = load_backend(path, session_slots=session_slots, max_kv_bytes=max_kv_bytes,
                               thermal=thermal, memory=memory, chat_template=chat_template,
                               threads=count, speculation=speculation, max_context=max_context,
                               gpu_layers=gpu_layers, state_cache_bytes=state_cache_bytes(cache_ram_mb),
                               cache_types=KVCacheTypes(*cache_types), mmproj=mmproj or "auto")
        if max_stream_gap_ms is not None:
            from ..engine.chunk_budget import target_gap_for

            backend.chunk_budget.target_gap_seconds = target_gap_for(max_stream_gap_ms)
        return backend

    return load


def app_model_factory(
    settings: QSettings,
    monitors: Monitors | None = None,
    max_kv_bytes: int | None = None,
    threads_flag: int | None = None,
    speculation_flag: str | None = None,
    max_context: int | None = None,
    gpu_layers: int = -1,
    cache_ram_flag: float | None = None,
    cache_flags: tuple[str | None, str | None] = (None, None),
) -> ModelFactory:
    """What File › Open Model… and the Threads setting switch to: `factory(path,
    chat_template=, threads=, mmproj=)`. Session slots and, unless given, the thread count (--threads >
    $TURBOSPARK_THREADS > the setting) are read when the switch is asked for (GUI thread)."""

    def model_factory(path: str | None, chat_template: str | None = None, threads: str | None = None,
                      cache_type_k: str | None = None, cache_type_v: str | None = None,
                      mmproj: str | None = None) -> Callable[[], ChatBackend]:
        mode = threads or current_threads(settings, threads_flag).mode
        k, v = current_cache_types(settings, *cache_flags)
        speculation = SPECULATION_SETTING.current(settings, speculation_flag).mode
        ram = cache_ram_flag if cache_ram_flag is not None else load_cache_ram(settings)
        return real_backend_factory(path, load_session_slots(settings), monitors, max_kv_bytes,
                                    chat_template, mode, speculation, max_context, gpu_layers, ram,
                                    (cache_type_k or k.mode, cache_type_v or v.mode), mmproj,
                                    stream_gap_ms(settings))

    return model_factory


def open_store(path: Path | None = None) -> tuple[Store, str | None]:
    """The store, and a notice for the user when it had to be recovered (or kept in memory)."""
    path = path or default_store_path()
    try:
        store, aside = open_store_or_recover(path)
    except (StoreError, OSError) as e:
        return Store(Path(":memory:")), (
            f"The conversation store at {path} cannot be used ({e}). Conversations in this "
            "session will not be saved."
        )
    if aside is not None:
        return store, (
            f"Your saved conversations could not be read, so TurboSpark started a fresh store. "
            f"The unreadable file was kept as:\n{aside}"
        )
    return store, None


def build_window(
    backend_factory: Callable[[], ChatBackend],
    *,
    session_slots: int = DEFAULT_SESSION_SLOTS,
    store_path: Path | None = None,
    settings: QSettings | None = None,
    monitors: Monitors | None = None,
    power: Any = None,
    model_factory: ModelFactory | None = None,
    threads_flag: int | None = None,
    speculation_flag: str | None = None,
) -> MainWindow:
    """Store + engine thread (started) + window: everything except the event loop.
    `monitors`: the (thermal, memory) monitors the backend paces on (read live for the
    status bar); `power`: a PowerControls over them (QA overrides), which implies them.
    `model_factory(path)`: what File > Open Model… switches to; `threads_flag`: --threads."""
    store, notice = open_store(store_path)
    warm_up()  # math font and lexers load on a thread while the model loads
    bridge = EngineBridge(
        backend_factory, max_active=max(1, session_slots), monitors=monitors, power=power
    )
    window = MainWindow(store, bridge, settings if settings is not None else app_settings(),
                        model_factory=model_factory, threads_flag=threads_flag,
                        speculation_flag=speculation_flag)
    bridge.setParent(window)
    bridge.start()
    if notice:
        window.add_notice("Saved conversations", notice)
    return window


def paint_on_the_gui_thread() -> None:
    """Before the QApplication: Qt's raster painter splits a fill taller than ~96 rows (a
    scroll bar's gradient groove) into tasks for a thread pool and waits for them. While the
    engine's threads keep the cores busy, that wait is a frame's stall: a transcript's scroll
    bar, repainted as a streaming reply grows, took 0.6-2.4 ms a repaint that way against
    0.13-0.2 ms on the GUI thread alone (benchmarks/compare_frames.py for the window)."""
    os.environ.setdefault("QT_NO_GUI_THREADPOOL", "1")


def run_app(args: argparse.Namespace) -> int:
    """The `turbospark` desktop app. Returns the exit code."""
    paint_on_the_gui_thread()
    app = QApplication.instance() or QApplication(sys.argv[:1])
    assert isinstance(app, QApplication)
    configure_application(app)
    follower = follow_system_scheme(app)  # kept alive by this frame for the app's life
    GuiThreadCollector(app).start()  # reference cycles collected on this thread only (gc_guard)
    try:
        # Created once, here: the backend paces on these monitors (through every model
        # switch), the status bar reads them live and QA overrides act on them.
        power = PowerControls.from_environment()
    except SimulationError as e:  # a bad TURBOSPARK_SIMULATE_* value: say which, don't start
        print(f"turbospark: {e}", file=sys.stderr)
        QMessageBox.critical(None, "TurboSpark", str(e))
        return 2
    settings = app_settings()
    threads_flag = getattr(args, "threads", None)
    speculation_flag = getattr(args, "speculation", None)
    try:
        threads = current_threads(settings, threads_flag).mode
        speculation = SPECULATION_SETTING.current(settings, speculation_flag).mode
        cache_flags = (getattr(args, "cache_type_k", None), getattr(args, "cache_type_v", None))
        cache_k, cache_v = current_cache_types(settings, *cache_flags)
        gap = float(STREAM_GAP_SETTING.current(settings).mode)
    except LoadChoiceError as e:  # a bad TURBOSPARK_THREADS / _SPECULATION / ...: say so, don't start
        print(f"turbospark: {e}", file=sys.stderr)
        QMessageBox.critical(None, "TurboSpark", str(e))
        return 2
    slots = getattr(args, "session_slots", None) or load_session_slots(settings)
    # No model named, none remembered, the default one absent: the first-run dialog first.
    model_path = str(model_at_startup(getattr(args, "model", None), settings))
    monitors = (power.thermal, power.memory)
    from ..chat.backend import (
        kv_budget_bytes,  # (heavy: imported when the window starts)
    )
    from ..model.legacy import report_once

    kv_budget = kv_budget_bytes(getattr(args, "kv_budget_mb", None))
    max_context = getattr(args, "ctx_size", None)
    gpu_layers = -1 if getattr(args, "gpu_layers", None) is None else args.gpu_layers
    window_ref: list[MainWindow] = []
    cache_ram = getattr(args, "cache_ram", None)
    model_factory = app_model_factory(settings, monitors, kv_budget, threads_flag, speculation_flag,
                                      max_context, gpu_layers, cache_ram, cache_flags)
    factory = real_backend_factory(model_path, slots, monitors, kv_budget, threads=threads,
                                   speculation=speculation, max_context=max_context,
                                   gpu_layers=gpu_layers,
                                   cache_ram_mb=cache_ram if cache_ram is not None else load_cache_ram(settings),
                                   cache_types=(cache_k.mode, cache_v.mode),
                                   mmproj=getattr(args, "mmproj", None) or remembered_projector(settings, model_path),
                                   max_stream_gap_ms=gap)
    window = build_window(factory, session_slots=slots, power=power, settings=settings,
                          model_factory=model_factory, threads_flag=threads_flag,
                          speculation_flag=speculation_flag)
    window.models.cache_flags = cache_flags  # (they win over the KV cache settings)
    leftover = report_once()
    if leftover:
        window.add_notice("Disk space", leftover)
    window_ref.append(window)
    window.show()

    # Ctrl+C in the terminal, or SIGTERM (a logout, `kill`, a service manager), closes the
    # window properly: turns stopped and saved, the pane layout kept. Python only runs signal
    # handlers between bytecodes, so a timer gives it a chance while Qt idles.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: QTimer.singleShot(0, window.close))
    heartbeat = QTimer(window)
    heartbeat.start(250)
    heartbeat.timeout.connect(lambda: None)

    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    closed = asyncio.Event()
    app.aboutToQuit.connect(closed.set)
    with loop:
        loop.run_until_complete(closed.wait())
        from .services.tools_service import stop_tools

        loop.run_until_complete(stop_tools())  # every MCP server stopped: no orphans
    del follower  # (held until here: it re-palettes the app when the system scheme changes)
    return 0
