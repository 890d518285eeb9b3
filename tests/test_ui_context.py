"""Context use: the meter's figures, overflow parsing, which turns to drop."""

from __future__ import annotations

from turbospark_app.engine.errors import ContextOverflow
from turbospark_app.conversations.store import StoredMessage
from turbospark_app.ui.pane.context import (
    ContextMeter,
    OverflowChoice,
    estimate_tokens,
    overflow_numbers,
    turns,
    turns_to_drop,
    usage_from_messages,
)


def msg(n: int, role: str, content: str = "x" * 30, ids=None, stats=None) -> StoredMessage:
    return StoredMessage(n, "c", role, content, ids, stats, None, 0.0)


def test_overflow_numbers_read_the_engines_message() -> None:
    # Tied to engine.errors.ContextOverflow's wording: if that changes, this fails.
    assert overflow_numbers(str(ContextOverflow(1900, 512, 2048))) == (1900, 512, 2048)
    assert overflow_numbers("model failed: boom") is None


def test_turns_group_each_user_message_with_its_replies() -> None:
    history = [msg(1, "user"), msg(2, "assistant"), msg(3, "user"), msg(4, "assistant"), msg(5, "user")]
    assert [[m.id for m in t] for t in turns(history)] == [[1, 2], [3, 4], [5]]


def test_turns_to_drop_errs_on_dropping_too_few() -> None:
    mine = {"model_id": "m"}
    history = [msg(1, "user", "a" * 300), msg(2, "assistant", "b" * 999, ids=tuple(range(200)), stats=mine),
               msg(3, "user", "c" * 30), msg(4, "assistant", "d", ids=tuple(range(20)), stats=mine),
               msg(5, "user", "é" * 30), msg(6, "assistant", "f" * 50, ids=tuple(range(20)), stats={"model_id": "x"})]
    # Upper bounds: bytes for text, the ids for this model's replies, plus template markers.
    assert [estimate_tokens(m, "m") for m in history] == [312, 212, 42, 32, 72, 62]
    first = 312 + 212
    assert turns_to_drop(history, 10, "m") == 1
    assert turns_to_drop(history, first, "m") == 1
    assert turns_to_drop(history, first + 1, "m") == 2
    assert turns_to_drop(history, 10**6, "m") == 3  # never more than there is
    assert turns_to_drop([], 50) == 0
    # Another model's ids say nothing about this model's tokens: the text's bytes count.
    assert estimate_tokens(history[1], "other") == 999 + 12


def test_usage_is_the_last_turns_prompt_plus_reply_from_this_model() -> None:
    stats = {"prompt_tokens": 412, "new_tokens": 88, "started": True, "model_id": "/m/a.gguf"}
    history = [msg(1, "user"), msg(2, "assistant", stats=stats)]
    assert usage_from_messages(history, "/m/a.gguf") == 500
    assert usage_from_messages(history, "/m/b.gguf") is None  # another model counts differently
    assert usage_from_messages([], "/m/a.gguf") == 0
    assert usage_from_messages([msg(1, "user")], "/m/a.gguf") is None


def test_meter_shows_use_and_unknown(qtbot) -> None:
    meter = ContextMeter()
    qtbot.addWidget(meter)
    assert meter.label.text() == "context –"
    meter.set_usage(1234, 2048)
    assert meter.label.text() == "1,234 / 2,048 tok" and meter.bar.value() == 1234
    assert "(60%)" in meter.toolTip()
    meter.set_usage(None, 2048)
    assert meter.label.text() == "– / 2,048 tok" and "after the next reply" in meter.toolTip()


def test_overflow_choice_offers_new_conversation_or_drop(qtbot) -> None:
    box = OverflowChoice((1900, 512, 2048), droppable=2)
    qtbot.addWidget(box)
    assert "1,900 tokens" in box.informativeText() and "still in the input box" in box.informativeText()
    with qtbot.waitSignal(box.chosen) as sig:
        box.drop_button.click()
    assert sig.args == ["drop"]
    lonely = OverflowChoice(None, droppable=0)
    qtbot.addWidget(lonely)
    assert not lonely.drop_button.isEnabled()
    with qtbot.waitSignal(lonely.chosen) as sig:
        lonely.new_button.click()
    assert sig.args == ["new"]


# -- in the window -------------------------------------------------------------------------------


def _chat(qtbot, pane, texts) -> None:
    from ui_fakes import send, wait_idle

    for text in texts:
        send(qtbot, pane, text)
        wait_idle(qtbot, pane)


def test_the_meter_follows_each_turn_and_survives_a_restart(ui, qtbot) -> None:
    from qa_fakes import RecordingBackend, issue6_window

    w = issue6_window(ui, RecordingBackend(replies=("a b c",)))
    pane = w.area.current_pane()
    assert pane.context_meter.label.text() == "0 / 4,096 tok"
    _chat(qtbot, pane, ["hello there"])
    stats = pane.messages[-1].stats
    used = stats["prompt_tokens"] + stats["new_tokens"]
    assert pane.context_meter.used == used and pane.context_meter.label.text() == f"{used} / 4,096 tok"
    cid = pane.conversation_id
    ui.close(w)
    again = issue6_window(ui, RecordingBackend())
    restored = next(p for p in again.area.panes() if p.conversation_id == cid)
    assert restored.context_meter.used == used  # same model: the last turn's figure


def test_overflow_drop_oldest_turns_then_resend(ui, qtbot) -> None:
    from qa_fakes import RecordingBackend, issue6_window

    # FakeBackend counts a byte as a token: the fourth message overflows by 70 tokens; the upper
    # bound of the oldest exchange is 74, its real size 67, so one drop is not enough and the
    # resend overflows again (exact numbers) and drops one more.
    backend = RecordingBackend(replies=("ok fine",), max_context=225)
    w = issue6_window(ui, backend)
    pane = w.area.current_pane()
    pane.apply_settings({"max_new_tokens": 20}, None)
    _chat(qtbot, pane, ["first " * 8, "second " * 7, "third " * 8])
    failed: list[str] = []
    w.bridge.engineEvent.connect(lambda e: failed.append(e.kind) if type(e).__name__ == "Failed" else None)
    from ui_fakes import send

    send(qtbot, pane, "fourth " * 8)
    qtbot.waitUntil(lambda: pane.overflow_box is not None, timeout=5000)
    assert pane.input.toPlainText() == "fourth " * 8  # the message stays in the input
    assert "275 tokens, plus up to 20" in pane.overflow_box.informativeText()
    assert pane.overflow_box.drop_button.isEnabled()
    pane.overflow_box.drop_button.click()
    qtbot.waitUntil(lambda: not pane.busy and pane.state == "done", timeout=5000)
    contents = [m.content for m in pane.messages]
    assert contents[-2:] == ["fourth " * 8, "ok fine"] and "first " * 8 not in contents
    stored = [m.content for m in w.store.messages(pane.conversation_id)]
    assert stored == contents  # dropped from the store too
    assert pane.input.toPlainText() == "" and failed == ["context_overflow", "context_overflow"]
    # Only whole exchanges were dropped, oldest first, and no more than needed.
    assert contents == ["third " * 8, "ok fine", "fourth " * 8, "ok fine"]


def test_overflow_new_conversation_takes_the_message(ui, qtbot) -> None:
    from qa_fakes import RecordingBackend, issue6_window
    from ui_fakes import send, wait_idle

    w = issue6_window(ui, RecordingBackend(replies=("ok fine",), max_context=560))
    w.defaults = dict(w.defaults, max_new_tokens=20)
    pane = w.area.current_pane()
    pane.apply_settings({"max_new_tokens": 20}, None)
    _chat(qtbot, pane, ["x" * 250, "y" * 250])
    send(qtbot, pane, "the new question")
    qtbot.waitUntil(lambda: pane.overflow_box is not None, timeout=5000)
    pane.overflow_box.new_button.click()
    new = w.area.current_pane()
    assert new is not pane
    wait_idle(qtbot, new)
    assert [m.content for m in new.messages] == ["the new question", "ok fine"]
    assert pane.input.toPlainText() == "" and len(pane.messages) == 4  # the old conversation is intact


def test_a_message_too_long_on_its_own_is_said_plainly(ui, qtbot) -> None:
    from qa_fakes import RecordingBackend, issue6_window
    from ui_fakes import send

    w = issue6_window(ui, RecordingBackend(max_context=100))
    pane = w.area.current_pane()
    pane.apply_settings({"max_new_tokens": 20}, None)
    send(qtbot, pane, "z" * 200)
    qtbot.waitUntil(lambda: pane.state == "error", timeout=5000)
    assert pane.overflow_box is None and pane.input.toPlainText() == "z" * 200
    assert "Even on its own" in pane.transcript.document().toPlainText()


def test_a_drop_the_store_refuses_does_not_loop(ui, qtbot, monkeypatch) -> None:
    import sqlite3

    from qa_fakes import RecordingBackend, issue6_window
    from ui_fakes import send

    backend = RecordingBackend(replies=("ok fine",), max_context=225)
    w = issue6_window(ui, backend)
    pane = w.area.current_pane()
    pane.apply_settings({"max_new_tokens": 20}, None)
    _chat(qtbot, pane, ["first " * 8, "second " * 7, "third " * 8])
    send(qtbot, pane, "fourth " * 8)
    qtbot.waitUntil(lambda: pane.overflow_box is not None, timeout=5000)

    def refuse(_ids):
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(w.store, "delete_messages", refuse)
    prepared = len(backend.prepared)
    pane.overflow_box.drop_button.click()
    assert not pane.busy and len(backend.prepared) == prepared  # nothing resent
    assert "could not be removed: disk I/O error" in pane.transcript.document().toPlainText()
    assert pane.input.toPlainText() == "fourth " * 8 and len(pane.messages) == 6


def test_the_meter_fills_while_the_reply_streams(ui, qtbot) -> None:
    """From Started it shows the prompt, then prompt + tokens so far (every 8 tokens), and the
    turn's exact figure at the end: not the previous turn's count for the whole reply."""
    from ui_fakes import EngineLoopBackend, send, wait_idle

    w = ui.window(EngineLoopBackend(replies=(" ".join(f"w{i}" for i in range(200)),), step_delay=0.003))
    pane = w.area.current_pane()
    send(qtbot, pane, "hello")
    qtbot.waitUntil(lambda: pane._tokens >= 40, timeout=10_000)
    live = pane.context_meter.used
    assert live is not None and pane._live_prompt > 0
    assert pane._live_prompt < live <= pane._live_prompt + pane._tokens  # grew with the reply
    wait_idle(qtbot, pane)
    stats = pane.messages[-1].stats
    assert pane.context_meter.used == stats["prompt_tokens"] + stats["new_tokens"]
    assert stats["prompt_tokens"] == pane._live_prompt
