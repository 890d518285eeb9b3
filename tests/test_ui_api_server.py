"""pytest-qt: Server › Start/Stop Local API serves the window's own engine on the qasync loop;
the status bar counts its requests; the QA panel lists them with how they ended; settings are
remembered and the server comes back at the next start."""

from __future__ import annotations

import json
import socket
import threading
import urllib.request
from typing import Any

import pytest
from PySide6.QtWidgets import QLabel

from test_ui_remote import loop  # noqa: F401 (the qasync loop fixture)
from test_server_units import ApiFakeBackend
from ui_fakes import FakeBackend

from turbospark_app.server import ServerConfig
from turbospark_app.ui.services.api_server import load_api_config, local_api_keys, save_api_config
from turbospark_app.ui.dialogs.api_widgets import ApiRequestsTable, ApiSettingsDialog


@pytest.fixture(autouse=True)
def _servers_closed(ui, qtbot, loop):  # noqa: F811 (loop: torn down after this)
    """Every window's server fully closed before the qasync loop goes (its timers with it)."""
    yield
    for w in ui.windows:
        if w.api.running:
            w.api.toggle()
        qtbot.waitUntil(lambda: not w.api.running and not w.api._busy, timeout=5000)
        w.api.shutdown()
        if w.api.closing is not None:
            qtbot.waitUntil(w.api.closing.done, timeout=5000)


def _post(url: str, payload: dict[str, Any], out: dict[str, Any]) -> threading.Thread:
    def run() -> None:
        req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(payload).encode(),
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=20) as r:
            out["body"] = json.loads(r.read())
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _start(ui, qtbot, backend: FakeBackend, port: int = 0):
    settings = ui.settings()
    save_api_config(settings, ServerConfig(port=port), local_api_keys())
    settings.sync()
    w = ui.window(backend)
    action = w.findChild(type(w.open_model_action), "actionToggleApi")
    assert action.text() == "Start Local API"
    action.trigger()
    qtbot.waitUntil(lambda: w.api.running, timeout=5000)
    assert action.text() == "Stop Local API"
    return w, action


def test_start_serve_list_and_stop(ui, qtbot, loop) -> None:  # noqa: F811
    backend = ApiFakeBackend(replies=("one two three four",), step_delay=0.01)
    w, action = _start(ui, qtbot, backend)
    label = w.status.findChild(QLabel, "status_api")
    port = w.api.server.port
    assert label.isVisible() and label.text() == f"API :{port} · 0 active"
    out: dict[str, Any] = {}
    thread = _post(w.api.server.url, {"messages": [{"role": "user", "content": "hi"}]}, out)
    qtbot.waitUntil(lambda: "body" in out, timeout=10000)
    thread.join(5)
    assert out["body"]["choices"][0]["message"]["content"] == "one two three four"
    assert out["body"]["model"] == "fake-model"
    api_table = w.qa_panel.findChild(ApiRequestsTable, "qaApiTable")
    qtbot.waitUntil(lambda: api_table.rowCount() == 1 and api_table.item(0, 1).text() == "ended")
    cells = [api_table.item(0, c).text() for c in range(api_table.columnCount())]
    assert cells[0].startswith("chat ") and cells[3] == "4" and cells[5] == "end_of_turn"
    action.trigger()
    qtbot.waitUntil(lambda: not w.api.running, timeout=5000)
    assert not label.isVisible() and action.text() == "Start Local API"


def test_a_gone_api_client_is_listed_with_its_stop_latency(ui, qtbot, loop) -> None:  # noqa: F811
    backend = ApiFakeBackend(replies=(" ".join(f"w{i}" for i in range(400)),), step_delay=0.02)
    w, _ = _start(ui, qtbot, backend)
    sock = socket.create_connection(("127.0.0.1", w.api.server.port))
    body = json.dumps({"messages": [{"role": "user", "content": "go"}], "stream": True}).encode()
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
                 b"application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    label = w.status.findChild(QLabel, "status_api")
    qtbot.waitUntil(lambda: "1 active" in label.text(), timeout=5000)
    sock.close()
    table = w.qa_panel.findChild(ApiRequestsTable, "qaApiTable")
    qtbot.waitUntil(lambda: table.rowCount() == 1 and table.item(0, 1).text() == "ended", timeout=5000)
    # Which side sees the closed socket first is a race: a cancelled handler or a failed write.
    assert table.item(0, 5).text() in {"client_disconnected", "write_error"}
    assert table.item(0, 6).text().endswith(" ms")
    assert "0 active" in label.text()


def test_settings_are_checked_and_remembered_and_the_server_comes_back(ui, qtbot, loop) -> None:  # noqa: F811
    w, _ = _start(ui, qtbot, ApiFakeBackend())
    dialog = ApiSettingsDialog(w.api.config, w)
    dialog.network.setChecked(True)
    dialog.key.setText("")
    dialog._accept()
    assert "API key" in dialog.error.text() and dialog.result() == 0  # refused: no key off-loopback
    dialog.key.setText("sk-test")
    dialog.origins.setText("http://localhost:3000, app://x")
    with socket.socket() as probe:  # a free port (the dialog has no "any port")
        probe.bind(("127.0.0.1", 0))
        dialog.port.setValue(probe.getsockname()[1])
    dialog._accept()
    assert dialog.result() == 1
    w.api.set_config(dialog.config())
    qtbot.waitUntil(lambda: w.api.running and w.api.server.config.api_key == "sk-test", timeout=5000)
    restored = load_api_config(ui.settings(), local_api_keys())
    assert restored.api_key == "sk-test" and restored.host == "0.0.0.0"
    ui.settings().sync()
    settings_file = ui.settings().fileName()
    assert "sk-test" not in open(settings_file, encoding="utf-8").read()  # the key store has it
    assert restored.allowed_origins == ("http://localhost:3000", "app://x")
    ui.close(w)
    qtbot.waitUntil(lambda: not w.api.running, timeout=5000)
    w2 = ui.window(ApiFakeBackend())  # a restart: it was running, so it starts again
    qtbot.waitUntil(lambda: w2.api.running, timeout=5000)
    assert w2.api.server.config.api_key == "sk-test"


def test_the_window_starts_without_the_http_stack() -> None:
    """aiohttp (~0.15 s of imports) loads when a remote engine or the local API is first used."""
    import os
    import subprocess
    import sys

    code = ("import sys; import turbospark_app.ui.app; "
            "print(sorted(m for m in ('aiohttp.client', 'aiohttp.web', 'turbospark_app.server.app') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert out.stdout.split() == ["[]"]


def test_a_lazy_module_loads_on_first_use() -> None:
    import subprocess
    import sys

    code = ("import sys; from turbospark_app.host.lazy_import import lazy_module; m = lazy_module('aiohttp'); "
            "print('aiohttp.client' in sys.modules, m.ClientTimeout.__name__, 'aiohttp.client' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "ClientTimeout", "True"]
