"""Server › Start/Stop Local API: the OpenAI-compatible API over the window's own engine.

The server (turbospark_app.server) runs on the app's qasync loop, i.e. the GUI thread's
event loop, and its jobs go to the same engine thread as the panes, stepped fairly with
them. Its settings (port, network access, allowed origins) live in QSettings under "api/…", as
does whether it was running, so it comes back at the next start; its key is in the system
keychain (or a user-only file where there is none: turbospark_app.host.keystore), moved there
from QSettings, where earlier versions kept it, at the first start.

`install_api_server(window)` adds the Server menu, the status-bar item ("API :8080 · 2
active") and the QA panel's "API requests" table; the window only calls it and `shutdown()`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from keyring.errors import KeyringError
from PySide6.QtCore import QObject, QSettings, QTimer, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QLabel, QMenu

from ...host.keystore import KeyStore, default_folder
from ...server import ServerConfig
from ...server.jobs import ApiJob
from ..dialogs.api_widgets import ApiRequestsTable, ApiSettingsDialog
from ..prefs.store import read_json, write_json

if TYPE_CHECKING:
    from ...server import ApiServer

log = logging.getLogger(__name__)

LOCAL_API_KEY_NAME = "local-api"
LOCAL_API_KEYS_FILE = "local-api-key.json"


def local_api_keys(folder: Path | None = None, *, use_keyring: bool = True) -> KeyStore:
    """Where the local API's key is kept: the keychain entry "local-api", else
    `local-api-key.json` (user-only) in the config folder."""
    return KeyStore(default_folder() if folder is None else folder, LOCAL_API_KEYS_FILE,
                    use_keyring=use_keyring)


def _stored_key(settings: QSettings, saved: dict[str, Any], keys: KeyStore) -> str | None:
    """The key from the key store, after moving a plain-text one out of QSettings (versions
    before the keychain kept it there). A key the store refuses stays where it was: nothing is
    lost, and the next start tries again."""
    legacy = str(saved.get("api_key") or "")
    if "api_key" in saved:
        try:
            if legacy:
                keys.set(LOCAL_API_KEY_NAME, legacy)
        except (KeyringError, OSError) as e:
            log.warning("the local API key stays in the settings: %s could not store it: %s",
                        keys.location, e)
            return legacy
        write_json(settings, "api/config", {k: v for k, v in saved.items() if k != "api_key"})
    try:
        return keys.get(LOCAL_API_KEY_NAME) or None
    except KeyringError as e:
        log.warning("the local API key could not be read from %s: %s", keys.location, e)
        return None


def load_api_config(settings: QSettings, keys: KeyStore) -> ServerConfig:
    """The remembered server settings (defaults: 127.0.0.1:8080, no key, no CORS); the key comes
    from `keys` (see `local_api_keys`)."""
    saved = read_json(settings, "api/config", {})
    base = ServerConfig()
    if not isinstance(saved, dict):
        return base
    try:
        config = replace(
            base,
            host=str(saved.get("host") or base.host),
            port=int(saved.get("port", base.port)),
            api_key=_stored_key(settings, saved, keys),
            allowed_origins=tuple(str(o) for o in saved.get("allowed_origins") or ()),
        )
        config.check()
        return config
    except (TypeError, ValueError):
        return base


def save_api_config(settings: QSettings, config: ServerConfig, keys: KeyStore) -> None:
    """Remember the server settings; the key goes to `keys`, never to QSettings. Raises
    KeyringError or OSError (settings unchanged) when the key cannot be stored."""
    keys.set(LOCAL_API_KEY_NAME, config.api_key or "")
    write_json(settings, "api/config", {
        "host": config.host, "port": config.port,
        "allowed_origins": list(config.allowed_origins),
    })


class ApiServerController(QObject):
    """Starts and stops the ApiServer on the running (qasync) loop; tells the widgets."""

    changed = Signal()  # started, stopped, a job changed
    jobChanged = Signal(object)  # ApiJob
    failed = Signal(str)  # could not start (port taken, unsafe settings)

    def __init__(self, engine: Any, settings: QSettings, parent: QObject | None = None,
                 keys: KeyStore | None = None) -> None:
        super().__init__(parent)
        self.engine = engine
        self.settings = settings
        self.keys = local_api_keys() if keys is None else keys
        self.config = load_api_config(settings, self.keys)
        self.server: ApiServer | None = None
        self._busy = False
        self.closing: asyncio.Task[None] | None = None  # the listener closing after shutdown()

    @property
    def running(self) -> bool:
        return self.server is not None and self.server.running

    def status_text(self) -> str:
        """The status-bar text ("" while stopped)."""
        if not self.running or self.server is None or self.server.board is None:
            return ""
        board = self.server.board
        text = f"API :{self.server.port} · {board.active} active"
        return text + (f" · {board.queued} queued" if board.queued else "")

    def set_config(self, config: ServerConfig) -> None:
        """New settings (checked); a running server restarts with them."""
        config.check()
        save_api_config(self.settings, config, self.keys)
        self.config = config
        if self.running:
            self._run(self._stop, self._start)

    def toggle(self) -> None:
        """Start when stopped, stop when running (Server › Start/Stop Local API)."""
        self._run(self._stop if self.running else self._start)

    def _run(self, *steps: Any) -> None:
        if self._busy:
            return
        self._busy = True

        async def run() -> None:
            try:
                for step in steps:
                    await step()
            finally:
                self._busy = False
                self.changed.emit()

        asyncio.get_event_loop().create_task(run())

    async def _start(self) -> None:
        from ...server import ApiServer  # aiohttp's server: imported when the API first starts

        try:
            server = ApiServer(self.engine, self.config)
            await server.start()
        except (OSError, ValueError) as e:
            self.failed.emit(f"The local API could not start on {self.config.host}:{self.config.port}: {e}")
            self.server = None
            return
        self.server = server
        assert server.board is not None
        server.board.subscribe(self._job_changed)
        write_json(self.settings, "api/running", True)

    async def _stop(self) -> None:
        server, self.server = self.server, None
        write_json(self.settings, "api/running", False)
        if server is not None:
            await server.stop()

    def _job_changed(self, job: ApiJob) -> None:
        self.jobChanged.emit(job)
        self.changed.emit()

    def resume(self) -> None:
        """Start at launch when it was running when the app last quit."""
        if read_json(self.settings, "api/running", False) is True and not self.running:
            self.toggle()

    def shutdown(self) -> None:
        """Window closing: cancel every API job now, close the listener when the loop next runs."""
        server, self.server = self.server, None
        if server is None:
            return
        server.halt()
        try:
            self.closing = asyncio.get_event_loop().create_task(server.stop())
        except RuntimeError:  # no loop left: the process takes the socket with it
            pass


def install_api_server(window: Any) -> ApiServerController:
    """The Server menu, the status-bar item and the QA panel table for `window` (MainWindow)."""
    api = ApiServerController(window.bridge.engine, window.settings, window)
    bar = window.menuBar()
    menu = QMenu("&Server", bar)
    help_action = next((a for a in bar.actions() if a.text().replace("&", "") == "Help"), None)
    if help_action is not None:
        bar.insertMenu(help_action, menu)  # Help stays last
    else:
        bar.addMenu(menu)
    toggle = QAction("Start Local API", window)
    toggle.setObjectName("actionToggleApi")
    toggle.triggered.connect(api.toggle)
    menu.addAction(toggle)
    configure = QAction("Local API Settings…", window)
    configure.setObjectName("actionApiSettings")
    menu.addAction(configure)

    def open_settings() -> None:
        dialog = ApiSettingsDialog(api.config, window, key_location=api.keys.location)
        dialog.accepted.connect(lambda: _apply(dialog))
        dialog.open()

    def _apply(dialog: ApiSettingsDialog) -> None:
        try:
            api.set_config(dialog.config())
        except (ValueError, OSError, KeyringError) as e:
            window._warn("Local API settings", str(e))

    configure.triggered.connect(open_settings)
    label = QLabel(window.status)
    label.setObjectName("status_api")
    label.setToolTip("The local OpenAI-compatible API (Server menu): port and requests being served")
    label.setContentsMargins(6, 0, 6, 0)
    window.status.addPermanentWidget(label)
    table = ApiRequestsTable()
    window.qa_panel.add_section("API requests", table)

    def refresh() -> None:
        toggle.setText("Stop Local API" if api.running else "Start Local API")
        label.setText(api.status_text())
        label.setVisible(api.running)

    api.changed.connect(refresh)
    api.jobChanged.connect(table.show_job)
    api.failed.connect(lambda text: window._warn("Local API", text))
    refresh()
    QTimer.singleShot(0, api.resume)
    return api
