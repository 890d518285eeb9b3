"""One conversation pane end to end (pytest-qt, offscreen): send, stream, finish, Stop, errors."""

from __future__ import annotations

import threading

from PySide6.QtCore import QThread, Qt
from PySide6.QtWidgets import QApplication, QMessageBox
from ui_fakes import EngineLoopBackend, FakeBackend, StepGate, failing_factory, send, wait_idle

from turbospark_app.service import Finished, Token
from turbospark_app.ui.pane.conversation_pane import ConversationPane

LONG = " ".join(f"word{i}" for i in range(400))


def record_states(pane: ConversationPane) -> list[str]:
    """Every state the pane goes through, in order (wraps its state setter)."""
    states: list[str] = []
    original = pane._set_state

    def spy(state: str, detail: str = "") -> None:
        if not states or states[-1] != state:
            states.append(state)
        original(state, detail)

    pane._set_state = spy  # type: ignore[method-assign]
    return states


def test_send_streams_and_finishes(ui, qtbot) -> None:
    backend = FakeBackend(replies=("Hello **there**.\n\n- one\n- two",), step_delay=0.002)
    w = ui.window(backend)
    pane = w.area.current_pane()
    states = record_states(pane)
    finished: list[Finished] = []
    w.bridge.engineEvent.connect(lambda e: finished.append(e) if isinstance(e, Finished) else None)
    send(qtbot, pane, "say hello")
    assert pane.input.toPlainText() == "" and pane.send_button.text() == "Stop"
    wait_idle(qtbot, pane)
    assert states[:1] == ["queued"] and "prefilling" in states and "generating" in states
    assert states[-1] == "done" and pane.send_button.text() == "Send"
    plain = pane.transcript.document().toPlainText()
    assert "say hello" in plain and "Hello there." in plain and "**" not in plain
    assert "prompt" in plain and "TTFT" in plain and "end of turn" in plain
    user, reply = w.store.messages(pane.conversation_id)
    assert (user.role, user.content) == ("user", "say hello")
    assert reply.role == "assistant" and reply.content == "Hello **there**.\n\n- one\n- two"
    assert reply.token_ids == finished[0].generated_ids and len(reply.token_ids) == reply.stats["new_tokens"]
    assert reply.stop_reason == "end_of_turn" and reply.stats["time_to_first_token"] > 0
    assert w.store.conversation(pane.conversation_id).title == "say hello"  # auto-title
    assert w.sidebar.title_of(pane.conversation_id) == "say hello"


def test_enter_sends_and_shift_enter_breaks_the_line(ui, qtbot) -> None:
    w = ui.window(FakeBackend())
    pane = w.area.current_pane()
    pane.input.setFocus()
    qtbot.keyClicks(pane.input, "first line")
    qtbot.keyClick(pane.input, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(pane.input, "second line")
    assert pane.input.toPlainText() == "first line\nsecond line" and not pane.busy
    qtbot.keyClick(pane.input, Qt.Key.Key_Return)
    wait_idle(qtbot, pane)
    assert w.store.messages(pane.conversation_id)[0].content == "first line\nsecond line"


def test_stop_mid_decode_keeps_the_partial_reply(ui, qtbot) -> None:
    backend = FakeBackend(replies=(LONG,), step_delay=0.01)
    w = ui.window(backend)
    pane = w.area.current_pane()
    tokens: list[Token] = []
    w.bridge.engineEvent.connect(lambda e: tokens.append(e) if isinstance(e, Token) else None)
    send(qtbot, pane, "talk a lot")
    qtbot.waitUntil(lambda: len(tokens) >= 5, timeout=5000)
    qtbot.mouseClick(pane.send_button, Qt.MouseButton.LeftButton)  # Send became Stop
    assert pane.state == "stopping"
    wait_idle(qtbot, pane)
    assert pane.state == "stopped" and pane.state_label.text().startswith("Stopped · in ")
    reply = w.store.messages(pane.conversation_id)[-1]
    assert reply.stop_reason == "cancelled"
    assert reply.content == "".join(t.delta for t in tokens) and 5 <= len(reply.token_ids) < 400
    assert 0 <= reply.stats["stop_latency"] < 0.5
    plain = pane.transcript.document().toPlainText()
    assert "■ stopped" in plain and "stopped in" in plain


def test_stop_mid_prefill_with_esc(ui, qtbot) -> None:
    gate = StepGate()
    backend = FakeBackend(chunk_size=8, gate=gate)
    w = ui.window(backend)
    pane = w.area.current_pane()
    send(qtbot, pane, "p" * 400)
    gate.allow(3)
    qtbot.waitUntil(lambda: pane.prefill_bar.value() == 24 and gate.waiting == 1, timeout=5000)
    assert pane.state == "prefilling" and pane.prefill_bar.isVisible()
    assert pane.prefill_bar.maximum() > 400
    qtbot.keyClick(pane.input, Qt.Key.Key_Escape)
    gate.allow(1)  # the step in flight finishes; the next check of the predicate ends the turn
    wait_idle(qtbot, pane)
    assert gate.passed == 4  # no forward step after the one in flight
    reply = w.store.messages(pane.conversation_id)[-1]
    assert reply.stop_reason == "cancelled" and reply.content == "" and reply.stats["new_tokens"] == 0
    plain = pane.transcript.document().toPlainText()
    assert "stopped before any text" in plain and "(during prefill)" in plain
    assert not pane.prefill_bar.isVisible()


def test_the_conversation_continues_from_a_stopped_reply_with_its_kv(ui, qtbot) -> None:
    backend = EngineLoopBackend(replies=(LONG, "Short."), step_delay=0.003)
    w = ui.window(backend)
    pane = w.area.current_pane()
    finished: list[Finished] = []
    w.bridge.engineEvent.connect(lambda e: finished.append(e) if isinstance(e, Finished) else None)
    send(qtbot, pane, "go on and on")
    qtbot.waitUntil(lambda: len(pane.transcript.streamed_text()) > 20, timeout=5000)
    pane.stop()
    wait_idle(qtbot, pane)
    first = finished[-1]
    assert first.result.reason.value == "cancelled" and first.generated_ids
    send(qtbot, pane, "and now?")
    wait_idle(qtbot, pane)
    second = finished[-1]
    assert second.result.reason.value == "end_of_turn" and second.text == "Short."
    # Everything the stopped turn left in the KV (its prompt and the partial reply up to the
    # last token fed) was continued, not recomputed.
    kv = first.result.kv_backed_token_ids
    assert len(kv) >= len(first.prompt_ids) + len(first.generated_ids) - 1
    assert second.stats.reused_prefix_tokens == len(kv)
    roles = [m.role for m in w.store.messages(pane.conversation_id)]
    assert roles == ["user", "assistant", "user", "assistant"]


def test_context_overflow_puts_the_text_back(ui, qtbot) -> None:
    w = ui.window(FakeBackend(max_context=600))
    pane = w.area.current_pane()
    text = "a very long message " * 10
    send(qtbot, pane, text)
    wait_idle(qtbot, pane)
    assert pane.input.toPlainText() == text
    assert pane.state == "error" and "ContextOverflow" in pane.state_label.text()
    plain = pane.transcript.document().toPlainText()
    assert "context window" in plain and "put back in the input box" in plain
    assert w.store.messages(pane.conversation_id) == []  # the failed turn left nothing
    assert pane.messages == []


def test_model_failure_mid_reply_puts_the_text_back(ui, qtbot) -> None:
    backend = FakeBackend(replies=(LONG,), fail_on_step=6, chunk_size=64)
    w = ui.window(backend)
    pane = w.area.current_pane()
    send(qtbot, pane, "first")
    qtbot.waitUntil(lambda: pane.state == "error", timeout=5000)
    assert pane.input.toPlainText() == "first"
    plain = pane.transcript.document().toPlainText()
    assert "model failed while answering" in plain and "word0" not in plain  # partial gone
    assert w.store.messages(pane.conversation_id) == []


def test_text_typed_while_waiting_is_kept_on_failure(ui, qtbot) -> None:
    gate = StepGate()
    backend = FakeBackend(fail_on_step=0, gate=gate)
    w = ui.window(backend)
    pane = w.area.current_pane()
    send(qtbot, pane, "question")
    qtbot.keyClicks(pane.input, "draft of the next one")
    gate.open()
    qtbot.waitUntil(lambda: pane.state == "error", timeout=5000)
    assert pane.input.toPlainText() == "question\n\ndraft of the next one"


def test_backend_load_failure_is_shown_and_the_app_keeps_running(ui, qtbot) -> None:
    w = ui.window(factory=failing_factory("model.gguf: no such file"))
    qtbot.waitUntil(lambda: any(b.isVisible() for b in w.findChildren(QMessageBox)), timeout=5000)
    box = next(b for b in w.findChildren(QMessageBox) if b.isVisible())
    assert "could not be loaded" in box.text() and "no such file" in box.text()
    box.close()
    assert w.status.text("model") == "Model failed to load"
    pane = w.area.current_pane()
    send(qtbot, pane, "anyone there?")
    wait_idle(qtbot, pane)
    assert pane.input.toPlainText() == "anyone there?"
    assert "No model is loaded" in pane.transcript.document().toPlainText()


def test_engine_events_reach_widgets_only_on_the_gui_thread(ui, qtbot) -> None:
    backend = FakeBackend(replies=(LONG,), step_delay=0.001)
    w = ui.window(backend)
    pane = w.area.current_pane()
    gui = QApplication.instance().thread()
    seen: list[tuple[object, int]] = []
    w.bridge.engineEvent.connect(lambda e: seen.append((QThread.currentThread(), threading.get_ident())))
    appended: list[object] = []
    original = pane.transcript.append_delta

    def spy(delta: str) -> None:
        appended.append(QThread.currentThread())
        original(delta)

    pane.transcript.append_delta = spy  # type: ignore[method-assign]
    send(qtbot, pane, "hi")
    wait_idle(qtbot, pane)
    assert len(seen) > 100 and len(appended) >= 100
    assert {t for t, _ in seen} == {gui} and set(appended) == {gui}
    assert {i for _, i in seen} == {threading.get_ident()}
    # ... while the backend was only ever called on the engine thread, a different one.
    engine_ident = w.bridge.engine.engine_thread_ident
    assert engine_ident != threading.get_ident()
    assert {tid for _, tid in backend.calls} == {engine_ident}


def test_tokens_reach_the_widgets_in_batches_in_order_with_their_engine_times(ui, qtbot) -> None:
    """A streaming reply wakes the GUI thread per batch of tokens, not per token (each wake-up
    took a core from the kernels); every token still arrives, in order, before Finished, with
    the time the engine sent it; and a Stop still ends the turn at once."""
    from turbospark_app.service import handover as handover_module

    backend = FakeBackend(replies=(LONG,), step_delay=0.0005)
    w = ui.window(backend)
    pane = w.area.current_pane()
    drains: list[int] = []
    original = w.bridge._drain

    def counting() -> None:
        drains.append(1)
        original()

    for signal in (w.bridge._timer.timeout, w.bridge._wake_now):  # every way the inbox is taken
        signal.disconnect()
        signal.connect(counting, Qt.ConnectionType.QueuedConnection)
    events: list[object] = []
    w.bridge.engineEvent.connect(lambda e: events.append(e) if isinstance(e, (Token, Finished)) else None)
    send(qtbot, pane, "talk a lot")
    wait_idle(qtbot, pane)
    tokens = [e for e in events if isinstance(e, Token)]
    assert isinstance(events[-1], Finished) and len(tokens) == events[-1].result.new_tokens > 300
    assert [t.index for t in tokens] == list(range(len(tokens)))
    assert "".join(t.delta for t in tokens) == w.store.messages(pane.conversation_id)[-1].content
    assert all(t.at is not None for t in tokens) and [t.at for t in tokens] == sorted(t.at for t in tokens)
    assert len(drains) < len(tokens) / 4  # batches, not a wake-up per token
    assert handover_module.COALESCE_S <= 0.04  # a token waits at most a frame or two

    # Stop mid-reply: the turn ends without waiting for a batch timer.
    slow = FakeBackend(replies=(LONG,), step_delay=0.01)
    w2 = ui.window(slow)
    pane2 = w2.area.current_pane()
    send(qtbot, pane2, "talk a lot")
    qtbot.waitUntil(lambda: pane2.state == "generating", timeout=5000)
    qtbot.mouseClick(pane2.send_button, Qt.MouseButton.LeftButton)
    wait_idle(qtbot, pane2)
    assert pane2.state == "stopped"


def test_a_new_turn_scrolls_to_it_even_when_the_view_was_scrolled_up(ui, qtbot) -> None:
    """Send shows the user's message and the reply streaming below it (found under Xvfb: after
    a split narrowed the pane, its view stayed at the top and the new turn was out of sight)."""
    backend = FakeBackend(replies=(LONG,), step_delay=0.0)
    w = ui.window(backend)
    pane = w.area.current_pane()
    w.resize(900, 500)
    send(qtbot, pane, "first")
    wait_idle(qtbot, pane)
    bar = pane.transcript.verticalScrollBar()
    assert bar.maximum() > 0  # the long reply overflows the view
    bar.setValue(0)  # the user reads from the top
    gate = StepGate()
    backend.gate = gate  # the new turn holds at its first step: nothing streams yet
    send(qtbot, pane, "second")
    qtbot.waitUntil(lambda: pane.busy, timeout=5000)
    assert bar.value() == bar.maximum() > 0
    assert "second" in pane.transcript.document().toPlainText()
    gate.open()
    wait_idle(qtbot, pane)
