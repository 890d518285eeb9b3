"""Keyboard: new conversation, close pane, stop, focus input, next / previous pane, QA panel,
Settings, About (typed as a user types them, through Qt's shortcut handling)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QApplication

from qa_fakes import RecordingBackend, issue6_window
from turbospark_app.ui.dialogs.about import AboutDialog
from turbospark_app.ui.navigation import cycle_pane
from ui_fakes import send, wait_idle

CTRL = Qt.KeyboardModifier.ControlModifier
SHIFT = Qt.KeyboardModifier.ShiftModifier


def window(ui, qtbot, **kw):
    w = issue6_window(ui, RecordingBackend(**kw))
    w.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is w, timeout=3000)
    return w


def test_new_and_close_pane(ui, qtbot) -> None:
    w = window(ui, qtbot)
    first = w.area.current_pane()
    qtbot.keyClick(first.input, Qt.Key.Key_N, CTRL)
    second = w.area.current_pane()
    assert second is not first and len(w.area.panes()) == 2 and second.input.hasFocus()
    qtbot.keyClick(second.input, Qt.Key.Key_W, CTRL)
    assert w.area.panes() == [first]
    # Every platform binding, not only the first one Qt lists (Close: Ctrl+F4 AND Ctrl+W).
    close = w.findChild(type(w.open_model_action), "actionClosePane")
    assert QKeySequence("Ctrl+W") in close.shortcuts() and QKeySequence("Ctrl+F4") in close.shortcuts()
    assert QKeySequence("Ctrl+Q") in w.findChild(type(close), "actionQuit").shortcuts()


def test_esc_stops_and_ctrl_l_focuses_the_input(ui, qtbot) -> None:
    w = window(ui, qtbot, replies=(" ".join(f"w{i}" for i in range(500)),), step_delay=0.005)
    pane = w.area.current_pane()
    send(qtbot, pane, "go")
    qtbot.waitUntil(lambda: pane.state == "generating", timeout=5000)
    pane.transcript.setFocus()
    qtbot.keyClick(pane.transcript, Qt.Key.Key_Escape)
    wait_idle(qtbot, pane)
    assert pane.state == "stopped"
    assert not pane.input.hasFocus()
    qtbot.keyClick(pane.transcript, Qt.Key.Key_L, CTRL)
    assert pane.input.hasFocus()


def test_ctrl_tab_walks_every_pane_across_groups(ui, qtbot) -> None:
    w = window(ui, qtbot)
    a = w.area.current_pane()
    b = w.new_conversation()
    w.split_right()  # b moves into a second group
    c = w.new_conversation()  # opens in the second group, after b
    order = w.area.panes()
    assert order == [a, b, c] and len(w.area.groups()) == 2
    seen = [w.area.current_pane()]
    for _ in range(3):
        qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_Tab, CTRL)
        seen.append(w.area.current_pane())
    assert seen == [c, a, b, c]  # wraps around, crossing groups both ways
    qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_Backtab, CTRL | SHIFT)
    assert w.area.current_pane() is b and b.input.hasFocus()
    qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_PageDown, CTRL)
    assert w.area.current_pane() is c


def test_cycle_pane_with_one_pane_stays(ui, qtbot) -> None:
    w = window(ui, qtbot)
    only = w.area.current_pane()
    assert cycle_pane(w.area, 1) is only and cycle_pane(w.area, -1) is only


def test_qa_panel_settings_and_about_from_the_keyboard_and_menus(ui, qtbot) -> None:
    w = window(ui, qtbot)
    pane = w.area.current_pane()
    assert not w.qa_panel.isVisible()
    qtbot.keyClick(pane.input, Qt.Key.Key_Q, CTRL | SHIFT)
    assert w.qa_panel.isVisible()
    qtbot.keyClick(pane.input, Qt.Key.Key_Comma, CTRL)
    assert w.settings_dialog is not None and w.settings_dialog.isVisible()
    w.settings_dialog.reject()
    w.findChild(type(w.open_model_action), "actionAbout").trigger()
    about = w.findChild(AboutDialog)
    assert about is not None and about.isVisible()
    assert dict(about.rows)["Model"].startswith("fake-model")
    # The QA panel's visibility is part of the saved layout.
    ui.close(w)
    again = issue6_window(ui, RecordingBackend())
    assert again.qa_panel.isVisible()
