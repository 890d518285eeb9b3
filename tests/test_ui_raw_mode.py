"""Raw completion in the window (issue #18, part 4): a base model's panes run raw and say so;
the pane's Raw toggle is remembered per conversation; Send, Stop, Continue and Regenerate in
raw mode reuse the KV prefix as in chat mode (pytest-qt, engine step loop and a tiny GGUF)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from tiny_gguf import write_tiny_gguf
from ui_fakes import EngineLoopBackend, send, wait_idle

from turbospark_app.service import Finished

LEFT = Qt.MouseButton.LeftButton
LONG = " ".join(f"word{i}" for i in range(300))


def finished_events(w) -> list[Finished]:
    got: list[Finished] = []
    w.bridge.engineEvent.connect(lambda e: got.append(e) if isinstance(e, Finished) else None)
    return got


def test_a_base_model_opens_and_its_pane_streams_a_raw_continuation(ui, qtbot, tmp_path: Path,
                                                                     isolated_dirs) -> None:
    from turbospark_app.chat.backend import load_backend

    path = tmp_path / "base.gguf"
    write_tiny_gguf(path, tokenizer={"template": None})  # no tokenizer.chat_template
    w = ui.window(factory=lambda: load_backend(path, session_slots=2))
    assert w.bridge.backend_state == "ready" and w.bridge.model_info["has_chat_template"] is False
    pane = w.area.current_pane()
    done = finished_events(w)
    # The badge says so; the toggle shows raw and cannot be turned off for this model.
    assert pane.raw_badge.isVisible() and pane.raw_badge.text() == "Raw completion"
    assert pane.raw_toggle.isChecked() and not pane.raw_toggle.isEnabled()
    assert "no chat template" in pane.raw_toggle.toolTip()
    assert "to continue" in pane.input.placeholderText()  # says so from the start
    assert pane.apply_settings({"max_new_tokens": 8}, None)  # two turns fit the tiny context
    send(qtbot, pane, "the cat")
    wait_idle(qtbot, pane, timeout=60000)
    first = done[-1]
    from turbospark_app.model.text.tokenizer import GGUFTokenizer

    enc = GGUFTokenizer.from_gguf(path).encode
    assert list(first.prompt_ids) == enc("the cat")  # the text alone: no roles, no template
    assert first.generated_ids and pane.state == "done"
    reply = w.store.messages(pane.conversation_id)[-1]
    assert reply.role == "assistant" and reply.token_ids == first.generated_ids
    assert reply.content == first.text and first.text in pane.transcript.document().toPlainText()
    shown = pane.transcript.document().toPlainText()  # no roles in raw completion
    assert "Continuation" in shown and "Assistant" not in shown and "You" not in shown
    send(qtbot, pane, " he")
    wait_idle(qtbot, pane, timeout=60000)
    second = done[-1]
    assert list(second.prompt_ids) == [*enc("the cat"), *first.generated_ids, *enc(" he")]
    assert second.stats.reused_prefix_tokens >= len(first.prompt_ids) + len(first.generated_ids) - 1
    # Stored as chat-mode off: the base model forced raw, the conversation did not choose it.
    assert not w.store.conversation(pane.conversation_id).raw


def test_the_raw_toggle_is_remembered_per_conversation(ui, qtbot) -> None:
    w = ui.window(EngineLoopBackend(replies=(" sat on the mat.", " ran.")))
    pane = w.area.current_pane()
    done = finished_events(w)
    assert not pane.raw_badge.isVisible() and pane.raw_toggle.isEnabled() and not pane.raw_mode
    qtbot.mouseClick(pane.raw_toggle, LEFT)
    assert pane.raw_toggle.isChecked() and pane.raw_badge.isVisible() and pane.raw_mode
    assert "to continue" in pane.input.placeholderText()
    assert w.store.conversation(pane.conversation_id).raw
    send(qtbot, pane, "The cat")
    wait_idle(qtbot, pane)
    assert bytes(done[-1].prompt_ids) == b"The cat"  # no <|im_start|>user: no template
    cid = pane.conversation_id
    ui.close(w)
    w2 = ui.window(EngineLoopBackend(replies=(" ran.",)))  # a restart: the store reopened
    pane2 = w2.area.current_pane()
    assert pane2.conversation_id == cid and pane2.raw_mode
    assert pane2.raw_toggle.isChecked() and pane2.raw_badge.isVisible()
    done2 = finished_events(w2)
    send(qtbot, pane2, " Then it")
    wait_idle(qtbot, pane2)
    assert bytes(done2[-1].prompt_ids) == b"The cat sat on the mat. Then it"
    assert "Continuation" in pane2.transcript.document().toPlainText()
    qtbot.mouseClick(pane2.raw_toggle, LEFT)  # back to chat mode
    assert not pane2.raw_badge.isVisible() and not w2.store.conversation(cid).raw
    shown = pane2.transcript.document().toPlainText()  # the same entries, headed by roles again
    assert "Assistant" in shown and "Continuation" not in shown
    assert pane2.input.placeholderText().startswith("Message the model")
    send(qtbot, pane2, "and?")
    wait_idle(qtbot, pane2)
    assert b"<|im_start|>user" in bytes(done2[-1].prompt_ids)


def test_stop_continue_and_regenerate_in_raw_mode(ui, qtbot) -> None:
    backend = EngineLoopBackend(replies=(LONG, " THE END.", " Another take."), step_delay=0.003,
                                chat_template=False)
    w = ui.window(backend)
    pane = w.area.current_pane()
    done = finished_events(w)
    assert pane.raw_mode and pane.raw_badge.isVisible()
    send(qtbot, pane, "Once upon a time")
    qtbot.waitUntil(lambda: len(pane.transcript.streamed_text()) > 30, timeout=5000)
    pane.stop()
    wait_idle(qtbot, pane)
    stopped = done[-1]
    assert bytes(stopped.prompt_ids) == b"Once upon a time" and pane.state == "stopped"
    partial = w.store.messages(pane.conversation_id)[-1]
    assert partial.stop_reason == "cancelled" and partial.content and pane.continue_button.isEnabled()
    # Continue: the same text + the partial reply, left open; all the KV held is reused.
    qtbot.mouseClick(pane.continue_button, LEFT)
    wait_idle(qtbot, pane)
    resumed = done[-1]
    assert resumed.prompt_ids == stopped.prompt_ids + stopped.generated_ids
    assert resumed.stats.reused_prefix_tokens == len(resumed.prompt_ids) - 1
    reply = w.store.messages(pane.conversation_id)[-1]
    assert reply.id == partial.id and reply.content == partial.content + " THE END."
    # Regenerate: the last reply again from the same prompt (the old one kept as an alternative).
    qtbot.mouseClick(pane.regenerate_button, LEFT)
    wait_idle(qtbot, pane)
    again = done[-1]
    assert again.prompt_ids == stopped.prompt_ids and again.text == " Another take."
    assert again.stats.reused_prefix_tokens == len(again.prompt_ids) - 1
    user, last = w.store.messages(pane.conversation_id)
    assert user.content == "Once upon a time" and last.content == " Another take."
    assert "‹ 2/2 ›" in pane.transcript.document().toPlainText()
