"""The main window (pytest-qt, offscreen): two panes at once, restart, status bar, sidebar,
splits, an unreadable store, closing mid-reply."""

from __future__ import annotations

import re

from PySide6.QtWidgets import QMessageBox
from ui_fakes import EngineLoopBackend, FakeBackend, send, wait_idle

from turbospark_app.service import Finished, Prefilling, Started, Token
from turbospark_app.ui.pane.conversation_pane import ConversationPane
from turbospark_app.ui.formatting import rate_label

LONG = " ".join(f"word{i}" for i in range(300))


def test_two_panes_generate_at_once_fairly(ui, qtbot) -> None:
    backend = FakeBackend(replies=(LONG,), step_delay=0.002, chunk_size=64)
    w = ui.window(backend)
    left = w.area.current_pane()
    w.split_right()
    right = w.area.current_pane()
    assert left is not right and len(w.area.groups()) == 2
    assert left.isVisible() and right.isVisible()  # side by side
    order: list[str] = []
    w.bridge.engineEvent.connect(lambda e: order.append(e.conversation_id) if isinstance(e, Token) else None)
    both_generating: list[bool] = []
    w.bridge.engineEvent.connect(
        lambda e: both_generating.append(left.state == right.state == "generating")
    )
    for pane in (left, right):
        pane.settings_form.max_new.setValue(60)
    send(qtbot, left, "left question")
    send(qtbot, right, "right question")
    wait_idle(qtbot, left)
    wait_idle(qtbot, right)
    assert order.count(left.conversation_id) == order.count(right.conversation_id) == 60
    # Fair: once both stream, tokens alternate between the panes.
    first_right = order.index(right.conversation_id)
    overlap = order[first_right - 1:]
    switches = sum(a != b for a, b in zip(overlap, overlap[1:]))
    assert switches >= 100
    assert any(both_generating)
    for pane in (left, right):
        assert pane.state == "done"
        assert w.store.messages(pane.conversation_id)[-1].stop_reason == "max_tokens"


def test_restart_restores_conversations_and_open_panes(ui, qtbot) -> None:
    w = ui.window(FakeBackend(replies=("First **answer**.", LONG), step_delay=0.002))
    a = w.area.current_pane()
    send(qtbot, a, "question one")
    wait_idle(qtbot, a)
    w.split_right()
    b = w.area.current_pane()
    send(qtbot, b, "question two")
    qtbot.waitUntil(lambda: b.state == "generating", timeout=5000)
    b.stop()
    wait_idle(qtbot, b)
    third = w.new_conversation()
    w.rename_conversation(third.conversation_id, "Third thoughts")
    layout = w.area.layout_state()
    ids = {p.conversation_id for p in w.area.panes()}
    ui.close(w)

    w2 = ui.window(FakeBackend())
    assert {p.conversation_id for p in w2.area.panes()} == ids
    assert [g["conversations"] for g in w2.area.layout_state()["groups"]] == [
        g["conversations"] for g in layout["groups"]
    ]
    assert set(w2.sidebar.conversation_ids()) == ids
    assert w2.sidebar.title_of(third.conversation_id) == "Third thoughts"
    a2 = next(p for p in w2.area.panes() if p.conversation_id == a.conversation_id)
    plain = a2.transcript.document().toPlainText()
    assert "question one" in plain and "First answer." in plain and "end of turn" in plain
    b2 = next(p for p in w2.area.panes() if p.conversation_id == b.conversation_id)
    stopped = b2.messages[-1]
    assert stopped.stop_reason == "cancelled" and stopped.token_ids
    assert "■ stopped" in b2.transcript.document().toPlainText()
    # The restored conversation goes on, its stopped reply's ids sent back to the backend.
    send(qtbot, b2, "go on")
    wait_idle(qtbot, b2)
    assert [m.role for m in w2.store.messages(b.conversation_id)] == ["user", "assistant"] * 2


def test_status_bar_figures_change_after_a_turn(ui, qtbot) -> None:
    backend = EngineLoopBackend(replies=("x" * 120, "y" * 400), step_delay=0.004)
    w = ui.window(backend)
    status = w.status
    assert status.text("reuse") == "reused –" and status.text("prefill") == "prefill – tok/s"
    assert status.text("thermal") == "thermal fair (simulated)"
    assert status.text("memory") == "memory normal"
    assert re.fullmatch(r"RSS (\d+ MB|\d+\.\d GB)", status.text("rss"))  # the test process's own
    assert status.text("model") == "scripted"  # the file name, not the GGUF's general.name
    pane = w.area.current_pane()
    polls = status.polls
    send(qtbot, pane, "hello")
    qtbot.waitUntil(lambda: "live" in status.text("decode"), timeout=5000)
    wait_idle(qtbot, pane)
    assert status.polls > polls  # the timer kept polling during the generation
    first = status.text("reuse")
    assert re.fullmatch(r"reused 0/\d+ tok · slot miss", first)
    assert re.fullmatch(r"prefill [\d.]+ tok/s", status.text("prefill"))
    send(qtbot, pane, "again")
    # As soon as its prompt is in, the running turn's own reuse (not the last turn's), and the
    # once-a-second poll leaves it while the turn runs.
    live = r"reused (\d+)/(\d+) tok"
    qtbot.waitUntil(lambda: re.fullmatch(live, status.text("reuse")) is not None, timeout=5000)
    status.poll()
    assert re.fullmatch(live, status.text("reuse")) or not pane.busy
    wait_idle(qtbot, pane)
    second = status.text("reuse")
    m = re.fullmatch(r"reused (\d+)/(\d+) tok · slot hit", second)
    assert m and 0 < int(m.group(1)) < int(m.group(2))
    # Once nothing decodes, the bar shows the finished turn's rate at once (not "live" for 2 s more).
    rate = status._last_decode_rate
    assert rate > 0 and status.text("decode") == f"decode {rate_label(rate)}"
    status.poll()
    assert status.text("decode") == f"decode {rate_label(rate)}"


def test_status_bar_prefill_and_reuse_are_the_running_turns(ui, qtbot) -> None:
    """Fed the engine's events: the reuse and prefill figures follow the turn whose prompt goes
    in (its engine-timed rate; a short prefill as tokens and time once all are in)."""
    w = ui.window(FakeBackend())
    status = w.status
    status._on_event(Started(7, "c", 50))
    status._on_event(Prefilling(7, "c", 20, 50, 0, 0.5))
    assert status.text("reuse") == "reused 0/50 tok · prefilling 20/50"
    assert status.text("prefill") == f"prefill {rate_label(40.0)}"
    status._on_event(Prefilling(7, "c", 50, 50, 0, 1.0))
    assert (status.text("reuse"), status.text("prefill")) == ("reused 0/50 tok", f"prefill {rate_label(50.0)}")
    status._on_event(Started(8, "d", 42))
    status._on_event(Prefilling(8, "d", 42, 42, 40, 0.021))
    assert (status.text("reuse"), status.text("prefill")) == ("reused 40/42 tok", "prefill 2 tok in 21 ms")
    status._on_event(Started(9, "e", 30))
    status._on_event(Prefilling(9, "e", 25, 30, 20, 0.001))
    assert status.text("prefill") == "prefill …"  # not all in: a short prefill has no figure yet


def test_sidebar_new_rename_filter_delete(ui, qtbot, monkeypatch) -> None:
    backend = FakeBackend()
    w = ui.window(backend)
    first = w.area.current_pane()
    qtbot.mouseClick(w.sidebar.new_button, __import__("PySide6.QtCore", fromlist=["Qt"]).Qt.MouseButton.LeftButton)
    second = w.area.current_pane()
    assert second is not first and len(w.sidebar.conversation_ids()) == 2
    # Inline rename through the model, as the editor does.
    item = w.sidebar._item(second.conversation_id)
    item.setText("Recipes  for   soup")
    assert w.store.conversation(second.conversation_id).title == "Recipes for soup"
    group, index = w.area.find(second.conversation_id)
    assert group.tabText(index) == "Recipes for soup" and "Recipes for soup" in w.windowTitle()
    w.sidebar.filter.setText("SOUP")
    assert w.sidebar.conversation_ids() == [second.conversation_id]
    w.sidebar.filter.clear()
    # Delete asks first; Cancel keeps it.
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Cancel)
    w.delete_conversation(second.conversation_id)
    assert w.store.conversation(second.conversation_id) is not None
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Yes)
    w.delete_conversation(second.conversation_id)
    assert w.store.conversation(second.conversation_id) is None
    assert w.sidebar.conversation_ids() == [first.conversation_id]
    assert [p.conversation_id for p in w.area.panes()] == [first.conversation_id]
    qtbot.waitUntil(lambda: second.conversation_id in backend.dropped, timeout=5000)


def test_deleting_a_generating_conversation_stops_it_and_saves_nothing(ui, qtbot, monkeypatch) -> None:
    backend = FakeBackend(replies=(LONG,), step_delay=0.005)
    w = ui.window(backend)
    keep = w.area.current_pane()
    doomed = w.new_conversation()
    send(qtbot, doomed, "long one")
    qtbot.waitUntil(lambda: doomed.state == "generating", timeout=5000)
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Yes)
    writes: list[tuple] = []
    original = w.store.add_message
    monkeypatch.setattr(w.store, "add_message", lambda *a, **k: (writes.append(a), original(*a, **k))[1])
    rid = doomed.request_id
    w.delete_conversation(doomed.conversation_id)
    qtbot.waitUntil(lambda: doomed.conversation_id in backend.dropped, timeout=5000)
    qtbot.waitUntil(lambda: w.bridge.turn_request(rid) is None, timeout=5000)  # Finished dispatched
    assert writes == []  # the stopped reply of a deleted conversation is not even attempted
    assert w.store.messages(doomed.conversation_id) == []
    assert w.store.conversation(doomed.conversation_id) is None
    assert [p.conversation_id for p in w.area.panes()] == [keep.conversation_id]


def test_a_pane_moved_mid_reply_keeps_streaming(ui, qtbot) -> None:
    backend = FakeBackend(replies=(LONG,), step_delay=0.003)
    w = ui.window(backend)
    a = w.area.current_pane()
    b = w.new_conversation()  # two tabs in one group
    assert len(w.area.groups()) == 1
    send(qtbot, b, "stream while I move")
    qtbot.waitUntil(lambda: b.state == "generating", timeout=5000)
    w.area.move_current_to_next_group()  # one group: splits, moving b to the right
    assert len(w.area.groups()) == 2 and w.area.find(b.conversation_id)[0] is w.area.groups()[1]
    w.area.move_current_to_next_group()  # back to the first group; the empty one goes away
    assert len(w.area.groups()) == 1 and w.area.find(a.conversation_id) is not None
    wait_idle(qtbot, b)
    assert b.state == "done" and w.store.messages(b.conversation_id)[-1].content == LONG
    w.split_right()
    assert len(w.area.groups()) == 2
    w.area.unsplit()
    assert len(w.area.groups()) == 1 and len(w.area.panes()) == 2


def test_closing_the_window_mid_reply_saves_it_as_stopped(ui, qtbot) -> None:
    w = ui.window(FakeBackend(replies=(LONG,), step_delay=0.005))
    pane = w.area.current_pane()
    cid = pane.conversation_id
    send(qtbot, pane, "keep talking")
    qtbot.waitUntil(lambda: len(pane.transcript.streamed_text()) > 30, timeout=5000)
    ui.close(w)
    assert not w.bridge.engine.is_alive()
    from turbospark_app.conversations.store import Store

    store = Store(ui.store_path)
    try:
        reply = store.messages(cid)[-1]
        assert reply.role == "assistant" and reply.stop_reason == "cancelled"
        assert reply.content.startswith("word0 word1") and reply.stats["stop_latency"] is not None
    finally:
        store.close()


def test_closing_a_pane_mid_reply_still_saves_the_reply(ui, qtbot) -> None:
    w = ui.window(FakeBackend(replies=(LONG,), step_delay=0.005))
    pane = w.area.current_pane()
    cid = pane.conversation_id
    w.new_conversation()
    w.area.open(cid)
    send(qtbot, pane, "talk")
    qtbot.waitUntil(lambda: pane.state == "generating", timeout=5000)
    w.close_current_pane()
    assert w.area.find(cid) is None
    # The reply row exists from the start ("interrupted" until its turn ends).
    qtbot.waitUntil(lambda: w.store.messages(cid)[-1].stop_reason != "interrupted", timeout=5000)
    assert w.store.messages(cid)[-1].stop_reason == "cancelled"
    w.area.open(cid)  # reopened: the saved partial reply is there
    reopened = w.area.current_pane()
    assert isinstance(reopened, ConversationPane) and reopened is not pane
    assert "■ stopped" in reopened.transcript.document().toPlainText()


def test_an_unreadable_store_is_reported_and_set_aside(ui, qtbot) -> None:
    ui.data_dir.mkdir(parents=True, exist_ok=True)
    ui.store_path.write_bytes(b"definitely not sqlite " * 500)
    w = ui.window(FakeBackend())
    qtbot.waitUntil(lambda: any(b.isVisible() for b in w.findChildren(QMessageBox)), timeout=5000)
    box = next(b for b in w.findChildren(QMessageBox) if b.isVisible())
    assert "could not be read" in box.text()
    aside = [p for p in ui.data_dir.iterdir() if ".unreadable-" in p.name]
    assert len(aside) == 1 and aside[0].read_bytes().startswith(b"definitely not sqlite")
    box.close()
    pane = w.area.current_pane()
    send(qtbot, pane, "still works?")
    wait_idle(qtbot, pane)
    assert pane.state == "done" and len(w.store.messages(pane.conversation_id)) == 2


def test_finished_events_carry_what_the_stats_line_shows(ui, qtbot) -> None:
    w = ui.window(FakeBackend(replies=("abc def",)))
    pane = w.area.current_pane()
    got: list[Finished] = []
    w.bridge.engineEvent.connect(lambda e: got.append(e) if isinstance(e, Finished) else None)
    send(qtbot, pane, "q")
    wait_idle(qtbot, pane)
    footer = next(line for line in pane.transcript.document().toPlainText().splitlines()
                  if line.startswith("prompt"))  # the line under it holds the message's links
    stats = got[0].stats
    assert f"prompt {stats.prompt_tokens} tok" in footer and f"new {stats.new_tokens} tok" in footer
    assert f"reused {stats.reused_prefix_tokens}" in footer


def test_switching_models_stops_replies_and_serves_from_the_new_one(ui, qtbot) -> None:
    from ui_fakes import fake_factory

    w = ui.window(FakeBackend(replies=(LONG,), step_delay=0.005))
    pane = w.area.current_pane()
    send(qtbot, pane, "long please")
    qtbot.waitUntil(lambda: pane.state == "generating", timeout=5000)
    rid = pane.request_id
    assert w.bridge.turn_request(rid).conversation_id == pane.conversation_id
    new = FakeBackend(replies=("new model here",))
    new.model_info = lambda: {"name": "other", "file_name": "other-7B.Q8_0.gguf", "quantization": "Q8_0"}
    states: list[str] = []
    w.bridge.backendStateChanged.connect(states.append)
    w.bridge.switch_backend(fake_factory(new))
    wait_idle(qtbot, pane)
    assert pane.state == "stopped" and w.bridge.turn_request(rid) is None
    qtbot.waitUntil(lambda: w.bridge.backend_state == "ready" and states[-2:] == ["loading", "ready"],
                    timeout=5000)
    assert w.status.text("model") == "other-7B · Q8_0"
    send(qtbot, pane, "and now?")
    wait_idle(qtbot, pane)
    assert w.store.messages(pane.conversation_id)[-1].content == "new model here"


def test_power_controls_force_levels_that_the_status_bar_shows(ui, qtbot) -> None:
    from ui_fakes import fake_factory

    from turbospark_app.engine.power import MemoryPressure, ThermalLevel
    from turbospark_app.readings import MemoryMonitor, ThermalMonitor
    from turbospark_app.ui.app import build_window
    from turbospark_app.ui.qa.power_controls import PowerControls

    class Fixed:
        name = "fixed"

        def __init__(self, level):
            self.level = level

        def read(self):
            return self.level, "for the test"

    power = PowerControls(ThermalMonitor(Fixed(ThermalLevel.NOMINAL)), MemoryMonitor(Fixed(None)))
    w = build_window(fake_factory(FakeBackend()), store_path=ui.store_path, settings=ui.settings(), power=power)
    qtbot.addWidget(w)
    ui.windows.append(w)
    w.show()
    qtbot.waitUntil(lambda: w.bridge.backend_state == "ready", timeout=5000)
    assert w.status.text("thermal") == "thermal nominal" and w.status.text("memory") == "memory unavailable"
    w.bridge.force_thermal(ThermalLevel.CRITICAL)
    w.bridge.force_memory(MemoryPressure.WARNING)
    w.status.poll()
    assert w.status.text("thermal") == "thermal critical (simulated)"
    assert w.status.text("memory") == "memory warning (simulated)"


def test_the_window_opens_with_the_message_input_focused(ui, qtbot) -> None:
    w = ui.window(FakeBackend(replies=("ok",)))
    w.activateWindow()
    # Typing right after launch goes to the message, not to the sidebar's filter box.
    qtbot.waitUntil(lambda: w.focusWidget() is w.area.current_pane().input, timeout=2000)
