"""Context use: the meter's figures, overflow parsing, which turns to drop."""

from __future__ import annotations

from turbospark_app.engine.errors import ContextOverflow
from turbospark_app.store import StoredMessage
from turbospark_app.ui.context import (
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


def test_turns_to_drop_covers_the_excess() -> None:
    history = [msg(1, "user", "a" * 300), msg(2, "assistant", "b", ids=tuple(range(200))),
               msg(3, "user", "c" * 30), msg(4, "assistant", "d", ids=tuple(range(20))),
               msg(5, "user", "e" * 30), msg(6, "assistant", "f", ids=tuple(range(20)))]
    first = estimate_tokens(history[0]) + estimate_tokens(history[1])
    assert first == 100 + 5 + 200 + 5
    assert turns_to_drop(history, 10) == 1
    assert turns_to_drop(history, first) == 1
    assert turns_to_drop(history, first + 1) == 2
    assert turns_to_drop(history, 10**6) == 3  # never more than there is
    assert turns_to_drop([], 50) == 0


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
