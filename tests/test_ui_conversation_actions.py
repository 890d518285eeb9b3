"""Regenerate, Continue, Edit and resend, the ‹ › alternatives, Copy, Delete and Export on the
real widgets (pytest-qt), over the engine's own step loop (true KV prefix reuse)."""

from __future__ import annotations

import json
from pathlib import Path

from PySide6.QtCore import QPoint, Qt, QUrl
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QFileDialog
from ui_fakes import EngineLoopBackend, send, wait_idle

from turbospark_app.service import Finished
from turbospark_app.ui.conversation_menu import export_current

LONG = " ".join(f"word{i}" for i in range(300))


def finished_events(w) -> list[Finished]:
    got: list[Finished] = []
    w.bridge.engineEvent.connect(lambda e: got.append(e) if isinstance(e, Finished) else None)
    return got


def click_link(pane, action: str, message_id: int) -> None:
    """What a click on a `ts:` link in the transcript does."""
    pane.transcript.anchorClicked.emit(QUrl(f"ts:{action}:{message_id}"))


def key(qtbot, w, sequence: str) -> None:
    from PySide6.QtGui import QKeySequence

    combo = QKeySequence(sequence)[0]
    qtbot.keyClick(w.area.current_pane().input, combo.key(), combo.keyboardModifiers())


def test_regenerate_keeps_alternatives_switchable_and_persisted(ui, qtbot) -> None:
    backend = EngineLoopBackend(replies=("First answer.", "Second answer.", "After second."))
    w = ui.window(backend)
    pane = w.area.current_pane()
    done = finished_events(w)
    send(qtbot, pane, "question")
    wait_idle(qtbot, pane)
    first = done[-1]
    key(qtbot, w, "Ctrl+R")  # Regenerate
    wait_idle(qtbot, pane)
    second = done[-1]
    assert second.text == "Second answer."
    # The prompt was reused from the KV, minus the old reply: all of it but the last token,
    # which is fed again for its logits. Checked against the ids the first turn fed.
    assert second.prompt_ids == first.prompt_ids
    fed_before = first.result.kv_backed_token_ids
    assert fed_before[: len(first.prompt_ids)] == list(first.prompt_ids)
    assert second.stats.reused_prefix_tokens == len(first.prompt_ids) - 1
    user, reply = w.store.messages(pane.conversation_id)
    assert reply.content == "Second answer."
    plain = pane.transcript.document().toPlainText()
    assert "‹ 2/2 ›" in plain and "First answer." not in plain
    click_link(pane, "prev", reply.id)
    plain = pane.transcript.document().toPlainText()
    assert "‹ 1/2 ›" in plain and "First answer." in plain and "Second answer." not in plain
    # The next turn continues from the alternative on screen.
    send(qtbot, pane, "and then?")
    wait_idle(qtbot, pane)
    contents = [m.content for m in w.store.messages(pane.conversation_id)]
    assert contents == ["question", "First answer.", "and then?", "After second."]
    ui.close(w)
    w2 = ui.window(EngineLoopBackend())  # restart: the choice and the alternatives survive
    pane2 = w2.area.current_pane()
    assert "‹ 1/2 ›" in pane2.transcript.document().toPlainText()
    first_reply = w2.store.messages(pane2.conversation_id)[1]
    click_link(pane2, "next", first_reply.id)
    assert [m.content for m in w2.store.messages(pane2.conversation_id)] == ["question", "Second answer."]


def test_continue_resumes_a_stopped_reply_inside_the_same_message(ui, qtbot) -> None:
    backend = EngineLoopBackend(replies=(LONG, " THE END."), step_delay=0.003)
    w = ui.window(backend)
    pane = w.area.current_pane()
    done = finished_events(w)
    send(qtbot, pane, "talk")
    qtbot.waitUntil(lambda: len(pane.transcript.streamed_text()) > 30, timeout=5000)
    pane.stop()
    wait_idle(qtbot, pane)
    stopped = done[-1]
    partial = w.store.messages(pane.conversation_id)[-1]
    assert partial.stop_reason == "cancelled" and pane.continue_button.isEnabled()
    key(qtbot, w, "Ctrl+Shift+Return")  # Continue
    wait_idle(qtbot, pane)
    resumed = done[-1]
    # The prompt is the previous prompt + the partial reply, left open (no end-of-turn).
    assert resumed.prompt_ids == stopped.prompt_ids + stopped.generated_ids
    # Reuse: everything the stopped turn fed (its prompt and the reply up to the last token,
    # which was sampled but never fed) = the whole new prompt but its last token.
    fed = stopped.result.kv_backed_token_ids
    assert fed == list(resumed.prompt_ids[:-1])
    assert resumed.stats.reused_prefix_tokens == len(fed) == len(resumed.prompt_ids) - 1
    messages = w.store.messages(pane.conversation_id)
    assert len(messages) == 2 and messages[-1].id == partial.id
    reply = messages[-1]
    assert reply.content == partial.content + " THE END." and reply.stop_reason == "end_of_turn"
    assert reply.token_ids == stopped.generated_ids + resumed.generated_ids
    assert reply.stats["new_tokens"] == stopped.stats.new_tokens + resumed.stats.new_tokens
    assert len(reply.stats["runs"]) == 2
    plain = pane.transcript.document().toPlainText()
    assert "2 runs (continued" in plain and f"reused {len(fed)}" in plain
    assert not pane.continue_button.isEnabled()  # it ended on its own now


def test_edit_and_resend_keeps_the_later_turns_as_a_branch(ui, qtbot) -> None:
    backend = EngineLoopBackend(replies=("One.", "Two.", "Edited reply."))
    w = ui.window(backend)
    pane = w.area.current_pane()
    done = finished_events(w)
    send(qtbot, pane, "first question")
    wait_idle(qtbot, pane)
    send(qtbot, pane, "second question")
    wait_idle(qtbot, pane)
    before = done[-1]
    u1, a1, u2, a2 = w.store.messages(pane.conversation_id)
    click_link(pane, "edit", u2.id)
    assert pane.input.toPlainText() == "second question" and pane.edit_banner.isVisible()
    pane.input.setPlainText("second question, edited")
    qtbot.keyClick(pane.input, Qt.Key.Key_Return)
    wait_idle(qtbot, pane)
    edited = done[-1]
    # KV reused up to the first changed token: the common prefix with what the KV held.
    held = before.result.kv_backed_token_ids
    common = next(i for i, (a, b) in enumerate(zip(held, edited.prompt_ids)) if a != b)
    assert edited.stats.reused_prefix_tokens == common
    assert f"reused {common}" in pane.transcript.document().toPlainText()
    path = w.store.messages(pane.conversation_id)
    assert [m.content for m in path] == ["first question", "One.", "second question, edited", "Edited reply."]
    assert "‹ 2/2 ›" in pane.transcript.document().toPlainText()
    click_link(pane, "prev", path[2].id)  # the old branch, with its reply, is still there
    assert [m.id for m in w.store.messages(pane.conversation_id)] == [u1.id, a1.id, u2.id, a2.id]
    # Esc leaves edit mode without sending.
    click_link(pane, "edit", u1.id)
    qtbot.keyClick(pane.input, Qt.Key.Key_Escape)
    assert not pane.edit_banner.isVisible() and pane.input.toPlainText() == "" and not pane.busy


def test_copy_a_message_and_a_code_block(ui, qtbot) -> None:
    reply = "Here:\n\n```python\nprint('hi')\nx = 1\n```\n\nDone **now**."
    w = ui.window(EngineLoopBackend(replies=(reply,)))
    pane = w.area.current_pane()
    send(qtbot, pane, "code please")
    wait_idle(qtbot, pane)
    message = w.store.messages(pane.conversation_id)[-1]
    click_link(pane, "copy", message.id)
    assert QGuiApplication.clipboard().text() == reply  # the Markdown source
    view = pane.transcript
    cursor = view.document().find("x = 1")
    point = view.cursorRect(cursor).center()
    labels = dict(view.context_actions(QPoint(point.x() - 4, point.y())))
    assert "Copy Code Block" in labels and "Regenerate Reply" in labels
    labels["Copy Code Block"]()
    assert QGuiApplication.clipboard().text() == "print('hi')\nx = 1"
    QGuiApplication.clipboard().clear()
    w.findChild(type(w.findChild(object, "actionCopyReply")), "actionCopyReply").trigger()
    assert QGuiApplication.clipboard().text() == reply


def test_delete_a_message_pair(ui, qtbot) -> None:
    w = ui.window(EngineLoopBackend(replies=("A.", "B.", "C.")))
    pane = w.area.current_pane()
    for q in ("one", "two", "three"):
        send(qtbot, pane, q)
        wait_idle(qtbot, pane)
    two = w.store.messages(pane.conversation_id)[2]
    click_link(pane, "delete", two.id)
    pane.delete_box.accept()
    assert [m.content for m in w.store.messages(pane.conversation_id)] == ["one", "A.", "three", "C."]
    assert "two" not in pane.transcript.document().toPlainText()


def test_export_markdown_and_json_from_the_conversation_menu(ui, qtbot, tmp_path: Path, monkeypatch) -> None:
    w = ui.window(EngineLoopBackend(replies=("Plain **answer**.", "Other.")))
    pane = w.area.current_pane()
    send(qtbot, pane, "hello")
    wait_idle(qtbot, pane)
    pane.regenerate()
    wait_idle(qtbot, pane)
    target = tmp_path / "out.md"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(target), ""))
    from PySide6.QtGui import QAction

    w.findChild(QAction, "actionExportMarkdown").trigger()
    md = target.read_text()
    assert md.startswith("# hello") and "## You" in md and "## Assistant (alternative 2 of 2)" in md
    assert "Other." in md and "Plain **answer**." not in md and "new " in md
    path = export_current(w, "json", str(tmp_path / "out.json"))
    doc = json.loads(Path(path).read_text())
    assert doc["format"] == "turbospark-conversation" and doc["conversation"]["settings"]
    assert len(doc["messages"]) == 3 and len(doc["branch_on_screen"]) == 2
    replies = [m for m in doc["messages"] if m["role"] == "assistant"]
    assert {m["content"] for m in replies} == {"Plain **answer**.", "Other."}
    assert all(m["figures"]["new_tokens"] > 0 for m in replies)
    assert [m["on_screen"] for m in replies] == [False, True]


def test_qa_evidence_export_from_the_file_menu(ui, qtbot, tmp_path: Path, monkeypatch) -> None:
    import csv

    from PySide6.QtGui import QAction, QImage

    backend = EngineLoopBackend(replies=(LONG, "Short one."), step_delay=0.002)
    w = ui.window(backend)
    pane = w.area.current_pane()
    done = finished_events(w)
    send(qtbot, pane, "talk")
    qtbot.waitUntil(lambda: len(pane.transcript.streamed_text()) > 20, timeout=5000)
    assert not pane.regenerate_button.isEnabled() and not pane.continue_button.isEnabled()  # busy
    pane.stop()
    wait_idle(qtbot, pane)
    send(qtbot, pane, "and?")
    wait_idle(qtbot, pane)
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(tmp_path / "evidence.png"), ""))
    w.findChild(QAction, "actionExportQA").trigger()
    png, csv_path, json_path = (tmp_path / f"evidence.{ext}" for ext in ("png", "csv", "json"))
    assert not QImage(str(png)).isNull() and w.qa_panel.isVisible()
    rows = list(csv.DictReader(csv_path.open()))
    tokens = [r for r in rows if r["kind"] == "token"]
    assert len(tokens) == sum(len(e.generated_ids) for e in done)
    times = [float(r["t_s"]) for r in tokens]
    assert times == sorted(times) and {r["memory"] for r in tokens} <= {"normal", "warning", "critical", "unavailable"}
    turns = [r for r in rows if r["kind"] == "turn"]
    assert [int(r["reused_prefix_tokens"]) for r in turns] == [e.stats.reused_prefix_tokens for e in done]
    stops = [r for r in rows if r["kind"] == "stop"]
    assert len(stops) == 1 and float(stops[0]["stop_latency_ms"]) >= 0 and stops[0]["phase"] == "decode"
    doc = json.loads(json_path.read_text())
    assert len(doc["tokens"]) == len(tokens) and len(doc["turns"]) == 2 and doc["stops"][0]["latency"] is not None
    assert doc["totals"]["evictions"] == 0 and "cadence_tok_s" in doc["series"]


def test_the_conversation_menu_greys_what_does_nothing(ui, qtbot) -> None:
    """As the menu opens, actions that would do nothing for the current pane are greyed (the
    pane's own buttons do the same); as it closes, all are enabled again so shortcuts work."""
    from PySide6.QtGui import QAction

    backend = EngineLoopBackend(replies=("First answer.", "Second answer.", LONG), step_delay=0.002)
    w = ui.window(backend)
    pane = w.area.current_pane()
    menu = w.findChild(QAction, "actionRegenerate").associatedObjects()[0]

    def enabled() -> set[str]:
        menu.aboutToShow.emit()
        return {a.objectName() for a in menu.actions() if a.isEnabled() and a.objectName()}

    empty = enabled()
    assert {"actionRename", "actionDelete", "actionSettings", "actionEndpoints"} <= empty
    assert not empty & {"actionStop", "actionRegenerate", "actionContinue", "actionEditLast", "actionCopyReply",
                        "actionPrevAlternative", "actionNextAlternative", "actionDeletePair", "actionExportMarkdown"}
    menu.aboutToHide.emit()
    assert w.findChild(QAction, "actionRegenerate").isEnabled()  # its shortcut works again
    send(qtbot, pane, "question")
    wait_idle(qtbot, pane)
    after = enabled()
    assert {"actionRegenerate", "actionEditLast", "actionCopyReply", "actionDeletePair",
            "actionExportMarkdown"} <= after
    assert not after & {"actionStop", "actionPrevAlternative", "actionNextAlternative"}
    menu.aboutToHide.emit()
    key(qtbot, w, "Ctrl+R")
    wait_idle(qtbot, pane)
    assert "actionPrevAlternative" in enabled() and "actionNextAlternative" not in enabled()
    menu.aboutToHide.emit()
    send(qtbot, pane, "a long one")
    qtbot.waitUntil(lambda: pane.busy, timeout=5000)
    busy = enabled()
    assert "actionStop" in busy and not busy & {"actionRegenerate", "actionEditLast", "actionDeletePair"}
    menu.aboutToHide.emit()
    w.findChild(QAction, "actionStop").trigger()
    wait_idle(qtbot, pane)
