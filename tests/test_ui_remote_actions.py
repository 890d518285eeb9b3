"""Regenerate, Edit and resend and Export on a conversation that runs on a remote endpoint:
the conversation logic is the store's, so the remote turn runner serves it unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import remote_fakes as fakes
from test_ui_remote import loop, remote_window, server  # noqa: F401  (fixtures)
from ui_fakes import send, wait_idle

from turbospark_app.ui.conversation_menu import export_current

ANSWER = "".join(fakes.WORDS)


def test_regenerate_edit_and_export_on_a_remote_conversation(ui, qtbot, server, loop, tmp_path: Path) -> None:  # noqa: F811
    w, pane, _ = remote_window(ui, server, loop)
    send(qtbot, pane, "first")
    wait_idle(qtbot, pane)
    send(qtbot, pane, "second")
    wait_idle(qtbot, pane)
    assert pane.regenerate()
    wait_idle(qtbot, pane)
    # The server got the conversation up to the last user message, without the old reply.
    assert [m["content"] for m in server.requests[-1]["messages"] if m["role"] != "system"] == \
        ["first", ANSWER, "second"]
    last = w.store.messages(pane.conversation_id)[-1]
    assert pane.tree.variant(last) == (2, 2) and last.stats["source"] == "remote"
    first_user = w.store.messages(pane.conversation_id)[0]
    assert pane.begin_edit(first_user.id)
    pane.input.setPlainText("first, edited")
    pane.send()
    wait_idle(qtbot, pane)
    assert [m["content"] for m in server.requests[-1]["messages"] if m["role"] != "system"] == ["first, edited"]
    assert [m.content for m in w.store.messages(pane.conversation_id)] == ["first, edited", ANSWER]
    assert pane.tree.variant(w.store.messages(pane.conversation_id)[0]) == (2, 2)
    doc = json.loads(Path(export_current(w, "json", str(tmp_path / "remote.json"))).read_text())
    assert len(doc["messages"]) == 7 and len(doc["branch_on_screen"]) == 2
    assert all(m["figures"]["source"] == "remote" for m in doc["messages"] if m["role"] == "assistant")


def test_continue_is_offered_on_a_remote_conversation_only_when_the_engine_supports_it(
        ui, qtbot, server, loop) -> None:  # noqa: F811
    server.default = fakes.make_endless(server.state, interval=0.02)
    w, pane, _ = remote_window(ui, server, loop)
    send(qtbot, pane, "go")
    qtbot.waitUntil(lambda: len(pane.transcript.streamed_text()) > 10, timeout=5000)
    pane.stop()
    wait_idle(qtbot, pane)
    assert w.store.messages(pane.conversation_id)[-1].stop_reason == "cancelled"
    assert not pane.continue_button.isEnabled() and not pane.continue_reply()
    assert pane.regenerate_button.isEnabled()
    assert "not available on this server" in pane.continue_button.toolTip()
    pane.engine.set_server_kind("vllm")  # a server known to continue an open final message
    assert pane.continue_button.isEnabled()
    before = w.store.messages(pane.conversation_id)[-1]
    assert pane.continue_reply()
    qtbot.waitUntil(lambda: len(pane.transcript.streamed_text()) > len(before.content) + 10, timeout=5000)
    pane.stop()
    wait_idle(qtbot, pane)
    after = w.store.messages(pane.conversation_id)[-1]
    assert after.id == before.id and after.content.startswith(before.content) and len(after.content) > len(before.content)
    assert server.requests[-1]["continue_final_message"] is True
    assert server.requests[-1]["messages"][-1]["role"] == "assistant"
