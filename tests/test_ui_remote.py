"""pytest-qt: a pane switched to an endpoint streams over the qasync loop, stops, shows honest
figures and keeps the user's text on every failure; a local pane beside it is unaffected."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
import qasync
import shiboken6
import remote_fakes as fakes
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QLabel, QPushButton
from ui_fakes import FakeBackend, send, wait_idle

from turbospark_app.remote.endpoints import Endpoint
from turbospark_app.service import Finished


@pytest.fixture
def loop(qtbot):
    """qasync's loop over the test's QApplication (already running: qtbot's waits drive it).
    Torn down completely, so later tests can start plain asyncio loops of their own."""
    app = QApplication.instance()
    loop = qasync.QEventLoop(app, already_running=True)
    asyncio.set_event_loop(loop)
    yield loop
    # Tests list `loop` before `ui`, so their windows are closed by now: let the HTTP session
    # close (RemoteHub.shutdown schedules it), then drop whatever is left.
    try:
        qtbot.waitUntil(lambda: all(t.done() for t in asyncio.all_tasks(loop)), timeout=15000)
    except Exception:  # noqa: BLE001 - a stuck task is cancelled below
        pass
    for task in asyncio.all_tasks(loop):
        task.cancel()
    app.aboutToQuit.disconnect(loop._after_run_forever)
    asyncio.events._set_running_loop(None)
    loop._after_run_forever()
    loop._QEventLoop__is_running = False
    loop.close()  # also ends its executor threads (aiohttp's getaddrinfo)
    asyncio.set_event_loop(None)
    # qasync's timer object and signaller are QObjects Python owns, in reference cycles with the
    # loop: left to the garbage collector, they are freed on whichever thread collects (an
    # engine thread of a later test), where Qt cannot unregister the timers a closed loop keeps
    # (close() only flags them), and the GUI thread's next timer event goes to freed memory
    # (the suite's rare segfault in QTimerInfoList::activateTimers). Deleted here, on the GUI thread.
    for obj in (loop._timer, loop._QEventLoop__call_soon_signaller):
        if shiboken6.isValid(obj):
            shiboken6.delete(obj)


@pytest.fixture
def server():
    s = fakes.FakeServer(api_key="sk-ui").start()
    yield s
    s.stop()


def remote_window(ui, server, loop, *, url: str | None = None, model: str = "fake-7b", key: str = "sk-ui"):
    w = ui.window(FakeBackend(replies=("Local reply.",)))
    w.remote.runner.timeouts = type(w.remote.runner.timeouts)(connect=2, read=1.0)
    (endpoint,) = w.remote.save_endpoints([(Endpoint("fake box", url or server.url, model), key)])
    pane = w.area.current_pane()
    assert pane.source_picker.choose(endpoint.id)
    return w, pane, endpoint


def test_remote_pane_streams_with_honest_figures_and_remembers_its_source(loop, ui, qtbot, server) -> None:
    w, pane, endpoint = remote_window(ui, server, loop)
    assert pane.source_picker.source_combo.currentText() == "fake box"
    assert w.status.text("thermal") == "thermal remote: unavailable"
    assert w.status.text("memory") == "memory remote: unavailable"
    send(qtbot, pane, "Hello server")
    wait_idle(qtbot, pane)
    assert pane.state == "done"
    reply = pane.messages[-1]
    assert reply.role == "assistant" and reply.content == "".join(fakes.WORDS)
    assert reply.token_ids is None and reply.stats["source"] == "remote"
    footer = pane.transcript.entries[-1].footer
    assert "remote fake box · fake-7b" in footer and "reused 32" in footer
    assert w.status.text("reuse") == "reused 32/40 tok (timings.cache_n) · remote"
    assert server.headers[-1]["Authorization"] == "Bearer sk-ui"
    assert w.store.model_source(pane.conversation_id) == (endpoint.id, "fake-7b")
    # The source is remembered: a restart opens the pane on the endpoint again.
    cid = pane.conversation_id
    ui.close(w)
    w2 = ui.window(FakeBackend())
    pane2 = next(p for p in w2.area.panes() if p.conversation_id == cid)
    assert pane2.engine.source == (endpoint.id, "fake-7b")


def test_local_and_remote_panes_at_once(loop, ui, qtbot, server) -> None:
    server.default = fakes.make_endless(server.state, interval=0.02)
    w, remote_pane, _ = remote_window(ui, server, loop)
    w.split_right()
    local_pane = w.area.current_pane()
    assert local_pane is not remote_pane and not local_pane.engine.is_remote
    assert w.status.text("thermal") != "thermal remote: unavailable"
    send(qtbot, remote_pane, "Go on")
    send(qtbot, local_pane, "Hi local")
    wait_idle(qtbot, local_pane)
    assert local_pane.messages[-1].content == "Local reply."
    assert remote_pane.busy
    remote_pane.stop()
    wait_idle(qtbot, remote_pane)
    assert remote_pane.messages[-1].stop_reason == "cancelled"


def test_stop_closes_the_stream_and_keeps_the_reply(loop, ui, qtbot, server) -> None:
    server.default = fakes.make_endless(server.state, interval=0.02)
    w, pane, _ = remote_window(ui, server, loop)
    finished: list[Finished] = []
    w.remote.engineEvent.connect(lambda e: finished.append(e) if isinstance(e, Finished) else None)
    send(qtbot, pane, "Go on forever")
    qtbot.waitUntil(lambda: pane.state == "generating" and pane._tokens >= 3, timeout=5000)
    clicked = time.monotonic()
    qtbot.mouseClick(pane.send_button, Qt.MouseButton.LeftButton)
    wait_idle(qtbot, pane)
    assert pane.state == "stopped"
    assert finished and finished[-1].stats.stop_latency is not None
    assert finished[-1].stats.stop_latency < time.monotonic() - clicked + 0.001
    assert "in " in pane.state_label.text()
    saved = pane.messages[-1]
    assert saved.stop_reason == "cancelled" and saved.content.startswith(" w0 w1 w2")
    qtbot.waitUntil(lambda: "client_gone_at" in server.state, timeout=3000)
    assert w.qa_panel.data.stops  # the QA panel recorded the remote Stop


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("case", ["refused", "dns", "auth", "model_not_found", "busy", "timeout_headers"])
def test_failures_before_a_reply_put_the_message_back(loop, ui, qtbot, server, case: str) -> None:
    url, model, key = server.url, "fake-7b", "sk-ui"
    if case == "refused":
        url = f"http://127.0.0.1:{free_port()}"
    elif case == "dns":
        url = "http://no-such-host.invalid"
    elif case == "auth":
        key = "wrong"
    elif case == "model_not_found":
        model = "no-such-model"
    elif case == "busy":
        server.default = fakes.busy("0")
    elif case == "timeout_headers":
        async def silent(request, body):  # accepts, then never answers
            await asyncio.sleep(3600)
        server.default = silent
    w, pane, _ = remote_window(ui, server, loop, url=url, model=model, key=key)
    send(qtbot, pane, "Please keep this text")
    wait_idle(qtbot, pane, timeout=15000)
    assert pane.state == "error"
    assert pane.input.toPlainText() == "Please keep this text"
    errors = [e for e in pane.transcript.entries if e.kind == "error"]
    assert errors and "put back in the input box" in errors[-1].text
    expected = {"refused": "Connection refused", "dns": "could not be resolved", "auth": "API key",
                "model_not_found": "no-such-model", "busy": "busy", "timeout_headers": "sent nothing"}[case]
    assert expected in errors[-1].text
    assert [m.role for m in pane.messages] == []  # nothing half-saved


@pytest.mark.parametrize("scenario, expected", [
    ("error_midstream", "CUDA out of memory"),
    ("dropped", "dropped mid-reply"),
    ("hang", "sent nothing"),
])
def test_failures_mid_reply_keep_the_message_and_the_partial_reply(loop, ui, qtbot, server,
                                                                   scenario: str, expected: str) -> None:
    server.default = fakes.make_hang(server.state) if scenario == "hang" else getattr(fakes, scenario)
    w, pane, _ = remote_window(ui, server, loop)
    send(qtbot, pane, "Tell me")
    wait_idle(qtbot, pane, timeout=15000)
    assert pane.state == "error"
    assert [m.role for m in pane.messages] == ["user", "assistant"]
    assert pane.messages[0].content == "Tell me"
    assert pane.messages[1].content.startswith("Hello there")
    assert pane.messages[1].stop_reason == "error"
    assert expected in pane.transcript.entries[-1].text
    # Saved: a restart shows both.
    stored = w.store.messages(pane.conversation_id)
    assert [m.content[:5] for m in stored] == ["Tell ", "Hello"]


def test_a_deleted_endpoint_is_said_and_the_text_kept(loop, ui, qtbot, server) -> None:
    w, pane, _ = remote_window(ui, server, loop)
    w.remote.save_endpoints([])
    assert "deleted endpoint" in pane.source_picker.source_combo.currentText()
    send(qtbot, pane, "Anyone there?")
    wait_idle(qtbot, pane)
    assert pane.state == "error" and pane.input.toPlainText() == "Anyone there?"
    assert "no longer saved" in pane.transcript.entries[-1].text


def test_switching_back_to_this_computer(loop, ui, qtbot, server) -> None:
    w, pane, _ = remote_window(ui, server, loop)
    send(qtbot, pane, "remote first")
    wait_idle(qtbot, pane)
    assert pane.source_picker.choose(None)
    assert w.store.model_source(pane.conversation_id) is None
    assert w.status.text("thermal") != "thermal remote: unavailable"
    send(qtbot, pane, "now local")
    wait_idle(qtbot, pane)
    assert pane.messages[-1].content == "Local reply."
    assert len(server.requests) == 1


def test_endpoints_dialog_tests_the_connection_and_saves(loop, ui, qtbot, server) -> None:
    from turbospark_app.ui.prefs.endpoints import EndpointsDialog

    w = ui.window(FakeBackend())
    w.open_endpoints()
    dialog = w.endpoints_dialog
    assert isinstance(dialog, EndpointsDialog)
    assert "readable by you only" in dialog.findChild(QLabel, "keyLocation").text()
    qtbot.mouseClick(dialog.findChild(QPushButton, "addEndpoint"), Qt.MouseButton.LeftButton)
    dialog.name.clear()
    qtbot.keyClicks(dialog.name, "GPU box")
    dialog.url.clear()
    qtbot.keyClicks(dialog.url, server.url)
    qtbot.keyClicks(dialog.key, "wrong")
    qtbot.mouseClick(dialog.test_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.result.text().startswith("✗"), timeout=5000)
    assert "API key" in dialog.result.text()
    dialog.key.clear()
    qtbot.keyClicks(dialog.key, "sk-ui")
    qtbot.mouseClick(dialog.test_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.result.text().startswith("✓"), timeout=5000)
    assert "2 models: fake-7b, fake-70b" in dialog.result.text()
    assert dialog.model.currentText() == "fake-7b"
    dialog.accept()
    (saved,) = w.remote.endpoints()
    assert (saved.name, saved.base_url, saved.default_model) == ("GPU box", server.url, "fake-7b")
    assert w.remote.book.keys.get(saved.id) == "sk-ui"
    pane = w.area.current_pane()
    assert pane.source_picker.source_combo.findText("GPU box") > 0  # the picker offers it now
    # Reopened: the key is not shown, only said to be saved; OK keeps it.
    w.open_endpoints()
    again = w.endpoints_dialog
    assert again.key.text() == "" and "saved" in again.key.placeholderText()
    again.accept()
    assert w.remote.book.keys.get(saved.id) == "sk-ui"


def test_closing_the_window_mid_remote_reply_saves_it_as_stopped(loop, ui, qtbot, server) -> None:
    server.default = fakes.make_endless(server.state, interval=0.02)
    w, pane, _ = remote_window(ui, server, loop)
    cid = pane.conversation_id
    send(qtbot, pane, "Go on")
    qtbot.waitUntil(lambda: pane._tokens >= 3, timeout=5000)
    ui.close(w)
    from turbospark_app.conversations.store import Store

    store = Store(ui.store_path)
    saved = store.messages(cid)
    store.close()
    assert [m.role for m in saved] == ["user", "assistant"]
    assert saved[1].stop_reason == "cancelled" and saved[1].content.startswith(" w0 w1 w2")
    qtbot.waitUntil(lambda: "client_gone_at" in server.state, timeout=3000)


def test_continue_is_offered_only_where_the_server_can_continue(loop, ui, qtbot, server) -> None:
    w, pane, endpoint = remote_window(ui, server, loop)
    engine = pane.engine
    qtbot.waitUntil(lambda: engine.server_kind is not None, timeout=5000)
    assert engine.server_kind == "fake"
    assert "not available on this server" in engine.continue_unsupported()
    engine.set_server_kind("turbospark")
    assert engine.continue_unsupported() is None
    pane.source_picker.choose(None)
    assert engine.continue_unsupported() is None  # this computer always can


def test_raw_mode_on_a_remote_source_is_refused_and_the_text_kept(loop, ui, qtbot, server) -> None:
    w, pane, _ = remote_window(ui, server, loop)
    assert pane.set_raw_mode(True) and pane.raw_badge.isVisible()
    send(qtbot, pane, "Once upon a time")
    wait_idle(qtbot, pane)
    assert pane.state == "error" and pane.input.toPlainText() == "Once upon a time"
    assert "this computer's model only" in pane.transcript.entries[-1].text
    assert server.requests == [] and w.store.messages(pane.conversation_id) == []
