"""pytest-qt: tools in the window. A scripted producer (the qwen3 family's real tokenizer and
template) makes two rounds of calls and then answers; the calls go to a real stdio MCP server
(the SDK's MCPServer, written by the test) on the app's qasync loop, after clicks on the
approval cards; the results show on the cards and in the transcript, and survive a restart."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from family_backend import FamilyLoopBackend
from mcp_servers import calc_config
from test_ui_remote import loop  # noqa: F401 (the qasync loop fixture)
from ui_fakes import send, wait_idle
from turbospark_app.conversations.parts import TEXT, TOOL_CALL, TOOL_RESULT
from turbospark_app.tools.agent import STOPPED
from turbospark_app.tools.approval import Approvals
from turbospark_app.ui.services.tools_service import ToolsService, set_tools_service


def call(name: str, **args: object) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


@pytest.fixture
def service(tmp_path: Path, qtbot):
    (tmp_path / "mcp.json").write_text(calc_config(tmp_path), "utf-8")
    s = ToolsService(tmp_path / "mcp.json", Approvals(tmp_path / "approvals.json"))
    set_tools_service(s)
    yield s
    import asyncio

    asyncio.get_event_loop().run_until_complete(s.stop_all()) if not asyncio.get_event_loop().is_running() \
        else asyncio.ensure_future(s.stop_all())
    qtbot.waitUntil(lambda: all(v.state in ("stopped", "failed") for v in s.hub.servers.values()), timeout=15000)
    set_tools_service(None)


def cards(pane) -> list:
    return list(pane._agent.cards) if pane._agent is not None else []


def test_two_rounds_of_calls_approved_by_clicks_then_the_answer(loop, ui, qtbot, tmp_path, service) -> None:
    backend = FamilyLoopBackend(tmp_path, "qwen3", (
        call("calc__add", a=2, b=3) + "\n" + call("calc__mul", a=4, b=5),
        call("calc__mul", a=5, b=20), "The answer is 100."), chunk_size=64)
    w = ui.window(backend)
    pane = w.area.current_pane()
    pane.set_tool_servers(["calc"])
    assert pane.tools_button.text() == "Tools (1)"
    send(qtbot, pane, "(2+3)*20?")
    qtbot.waitUntil(lambda: len(cards(pane)) == 2, timeout=20000)
    first, second = cards(pane)
    assert first.args.text() == '{\n  "a": 2,\n  "b": 3\n}' and "add" in first.findChildren(type(first.status))[0].text()
    assert pane.busy and pane.send_button.text() == "Stop"
    qtbot.mouseClick(first.allow_once, Qt.MouseButton.LeftButton)
    qtbot.mouseClick(second.always, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: first.result.isVisible() and second.result.isVisible(), timeout=10000)
    assert json.loads(first.result.text())["sum"] == 5 and second.result.text() == "20"
    assert first.status.text().startswith("done in ")
    qtbot.waitUntil(lambda: len(cards(pane)) == 3 or not pane.busy, timeout=10000)
    # The second round's call is always allowed now: it runs without a click.
    wait_idle(qtbot, pane, timeout=20000)
    reply = pane.tree.path[-1]
    assert reply.content == "The answer is 100."
    assert [p.kind for p in reply.parts] == [TEXT, TOOL_CALL, TOOL_CALL, TOOL_RESULT, TOOL_RESULT,
                                             TEXT, TOOL_CALL, TOOL_RESULT]
    assert [p.meta["approval"] for p in reply.parts if p.kind == TOOL_CALL] == ["once", "always", "auto"]
    text = pane.transcript.toPlainText()
    assert text.count("⚙ calc__") == 3 and "→ ✓" in text and "The answer is 100." in text
    assert not pane.cards_box.isVisible()
    # The next prompt of the loop held the previous one as its prefix (KV reuse by construction).
    p1, p2, p3 = backend.prompt_ids[:3]
    assert p2[: len(p1)] == p1 and p3[: len(p2)] == p2
    # Restart: the calls and results are read back from the store.
    ui.close(w)
    again = ui.window(FamilyLoopBackend(tmp_path, "qwen3", ("ok",)))
    pane = again.area.current_pane()
    assert pane.tool_servers() == ["calc"]  # the conversation's tools are remembered
    from turbospark_app.ui.prefs.generation import DEFAULTS

    pane.apply_settings({**DEFAULTS, "tool_step_limit": 3}, None)  # the Settings dialog's OK
    assert pane.tool_servers() == ["calc"] and pane.settings_values["tool_step_limit"] == 3
    shown = pane.transcript.toPlainText()
    assert shown.count("⚙ calc__") == 3 and '"sum": 5' in shown and "The answer is 100." in shown


def test_stop_while_a_tool_runs_ends_the_loop_at_once(loop, ui, qtbot, tmp_path, service) -> None:
    backend = FamilyLoopBackend(tmp_path, "qwen3", (call("calc__wait", seconds=30), "never"), chunk_size=64)
    w = ui.window(backend)
    pane = w.area.current_pane()
    pane.set_tool_servers(["calc"])
    send(qtbot, pane, "wait")
    qtbot.waitUntil(lambda: len(cards(pane)) == 1, timeout=20000)
    card = cards(pane)[0]
    qtbot.mouseClick(card.allow_once, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "running" in card.status.text(), timeout=5000)
    qtbot.wait(300)
    start = time.perf_counter()
    pane.stop()
    qtbot.waitUntil(lambda: not pane.busy, timeout=2000)
    assert time.perf_counter() - start < 0.1 + 0.2  # (the offscreen event loop's own latency)
    reply = pane.tree.path[-1]
    assert reply.stop_reason == "cancelled"
    assert [p.text for p in reply.parts if p.kind == TOOL_RESULT] == [STOPPED]
    assert service.hub.servers["calc"].state == "ready"  # not killed; other panes unaffected


def test_the_servers_dialog_refuses_a_bad_file_naming_the_line(loop, ui, qtbot, tmp_path, service) -> None:
    from turbospark_app.ui.dialogs.mcp import McpServersDialog

    dialog = McpServersDialog(service)
    qtbot.addWidget(dialog)
    before = service.path.read_text("utf-8")
    dialog.editor.setPlainText('{\n  "mcpServers": {\n    "x": {"args": [1]}\n  }\n}')
    assert not dialog.save()
    assert "line 3" in dialog.message.text() and service.path.read_text("utf-8") == before
    top = dialog.tree.topLevelItem(0)
    assert top.text(0) == "calc"
    top.setCheckState(0, Qt.CheckState.Unchecked)  # the server's switch
    assert json.loads(service.path.read_text("utf-8"))["mcpServers"]["calc"]["disabled"] is True
    qtbot.waitUntil(lambda: dialog.tree.topLevelItem(0).text(1) == "off", timeout=2000)


def test_a_step_that_overflows_after_a_result_keeps_the_calls(loop, ui, qtbot, tmp_path, service) -> None:
    service.approvals.remember(service.hub.servers["calc"].entry.identity, "big")
    backend = FamilyLoopBackend(tmp_path, "qwen3", (call("calc__big"), "never"), chunk_size=64, max_context=7000)
    w = ui.window(backend)
    pane = w.area.current_pane()
    pane.set_tool_servers(["calc"])
    send(qtbot, pane, "big")
    wait_idle(qtbot, pane, timeout=30000)
    user, reply = pane.tree.path[-2:]
    assert user.content == "big" and reply.stop_reason == "error"
    big = [p for p in reply.parts if p.kind == TOOL_RESULT][0]
    assert big.meta["truncated"] and "of 1048576 characters" in big.text
    assert "could not go on after the tool results" in pane.transcript.toPlainText()
    assert pane.input.toPlainText() == ""  # nothing was undone: the message stays in the conversation
