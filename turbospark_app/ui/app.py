"""Start the desktop app: QApplication, store, engine thread, main window, qasync event loop.

The model loads on the engine thread (the window is up at once and says "Loading model…");
a load failure is an event shown in the window, never a crash.
"""

from __future__ import annotations

import argparse
import asyncio
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
from .bridge import EngineBridge
from .first_run import model_at_startup
from .icon import app_icon
from .kernels_setting import KERNELS_SETTING
from .main_window import MainWindow, ModelFactory
from .power_controls import PowerControls
from .settings import APPLICATION, ORGANIZATION, app_settings
from .settings_dialog import load_session_slots
from .theme import follow_system_scheme
from .speculation_setting import SPECULATION_SETTING
from .weights_setting import current_weights

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
    on_cache_problem: Callable[[str], None] | None = None,
    weights: str | None = None,
    kernels: str | None = None,
    speculation: str = "off",
) -> Callable[[], ChatBackend]:
    """Loads the GGUF (the --model flag, else TURBOSPARK_MODEL, else the default model),
    pacing on `monitors` (thermal, memory); `chat_template="chatml"`: the built-in ChatML;
    `on_cache_problem`: told (any thread) when the weight cache proves corrupt after a warm load;
    `weights`: "compact" | "f32" (None: $TURBOSPARK_WEIGHTS, else compact); `kernels`: the
    compact engine's kernel mode (None: $TURBOSPARK_KERNELS, else exact-prompt); `speculation`:
    the backend's own mode (the API server's turns; the panes' come stamped by the bridge).
    The returned function is called on the engine thread."""

    def load() -> ChatBackend:
        from ..chat.backend import load_backend
        from ..model.fetch import resolve_model_path

        path = resolve_model_path(model)
        if not path.exists():
            raise FileNotFoundError(
                f"no model file at {path} (fetch the default model with `turbospark model fetch`)"
            )
        thermal, memory = monitors if monitors is not None else (None, None)
        return load_backend(path, session_slots=session_slots, max_kv_bytes=max_kv_bytes,
                            thermal=thermal, memory=memory, chat_template=chat_template,
                            on_cache_problem=on_cache_problem, weights=weights, kernels=kernels,
                            speculation=speculation)

    return load


def app_model_factory(
    settings: QSettings,
    monitors: Monitors | None = None,
    max_kv_bytes: int | None = None,
    on_cache_problem: Callable[[str], None] | None = None,
    weights_flag: str | None = None,
    kernels_flag: str | None = None,
    speculation_flag: str | None = None,
) -> ModelFactory:
    """What File › Open Model… and the Weights and Kernels settings switch to: `factory(path,
    chat_template=, weights=, kernels=)`. Session slots and, unless given, the weight and kernel
    modes (--weights / --kernels flag > $TURBOSPARK_WEIGHTS / $TURBOSPARK_KERNELS > the setting)
    are read when the switch is asked for (GUI thread)."""

    def model_factory(path: str | None, chat_template: str | None = None, weights: str | None = None,
                      kernels: str | None = None) -> Callable[[], ChatBackend]:
        mode = weights or current_weights(settings, weights_flag).mode
        kernel_mode = kernels or KERNELS_SETTING.current(settings, kernels_flag).mode
        speculation = SPECULATION_SETTING.current(settings, speculation_flag).mode
        return real_backend_factory(path, load_session_slots(settings), monitors, max_kv_bytes,
                                    chat_template, on_cache_problem, mode, kernel_mode, speculation)

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
    weights_flag: str | None = None,
    kernels_flag: str | None = None,
    speculation_flag: str | None = None,
) -> MainWindow:
    """Store + engine thread (started) + window: everything except the event loop.
    `monitors`: the (thermal, memory) monitors the backend paces on (read live for the
    status bar); `power`: a PowerControls over them (QA overrides), which implies them.
    `model_factory(path)`: what File > Open Model… switches to; `weights_flag`: --weights;
    `kernels_flag`: --kernels."""
    store, notice = open_store(store_path)
    bridge = EngineBridge(
        backend_factory, max_active=max(1, session_slots), monitors=monitors, power=power
    )
    window = MainWindow(store, bridge, settings if settings is not None else app_settings(),
                        model_factory=model_factory, weights_flag=weights_flag, kernels_flag=kernels_flag,
                        speculation_flag=speculation_flag)
    bridge.setParent(window)
    bridge.start()
    if notice:
        window.add_notice("Saved conversations", notice)
    return window


def run_app(args: argparse.Namespace) -> int:
    """The `turbospark` desktop app. Returns the exit code."""
    app = QApplication.instance() or QApplication(sys.argv[:1])
    assert isinstance(app, QApplication)
    configure_application(app)
    follower = follow_system_scheme(app)  # kept alive by this frame for the app's life
    try:
        # Created once, here: the backend paces on these monitors (through every model
        # switch), the status bar reads them live and QA overrides act on them.
        power = PowerControls.from_environment()
    except SimulationError as e:  # a bad TURBOSPARK_SIMULATE_* value: say which, don't start
        print(f"turbospark: {e}", file=sys.stderr)
        QMessageBox.critical(None, "TurboSpark", str(e))
        return 2
    settings = app_settings()
    weights_flag = getattr(args, "weights", None)
    kernels_flag = getattr(args, "kernels", None)
    speculation_flag = getattr(args, "speculation", None)
    try:
        weights = current_weights(settings, weights_flag).mode
        kernels = KERNELS_SETTING.current(settings, kernels_flag).mode
        speculation = SPECULATION_SETTING.current(settings, speculation_flag).mode
    except LoadChoiceError as e:  # a bad TURBOSPARK_WEIGHTS / _KERNELS: say so, don't start
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

    kv_budget = kv_budget_bytes(getattr(args, "kv_budget_mb", None))

    window_ref: list[MainWindow] = []

    def report_cache_problem(message: str) -> None:  # the checking thread; the bridge queues it
        if window_ref:
            window_ref[0].bridge.report_cache_problem(message)

    model_factory = app_model_factory(settings, monitors, kv_budget, report_cache_problem, weights_flag,
                                      kernels_flag, speculation_flag)
    factory = real_backend_factory(model_path, slots, monitors, kv_budget,
                                   on_cache_problem=report_cache_problem, weights=weights, kernels=kernels,
                                   speculation=speculation)
    window = build_window(factory, session_slots=slots, power=power, settings=settings,
                          model_factory=model_factory, weights_flag=weights_flag, kernels_flag=kernels_flag,
                          speculation_flag=speculation_flag)
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
    del follower  # (held until here: it re-palettes the app when the system scheme changes)
    return 0
