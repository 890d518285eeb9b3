"""The default window as a new user meets it (#21): 1280x820, View › Split Right, the QA panel
open, a reply in each pane. Every control and status text in the panes is readable (whole, or
elided with the whole text in its tooltip) and the transcripts keep a usable height."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtWidgets import QAbstractButton, QComboBox, QLabel, QWidget
from ui_fakes import FakeBackend, send, wait_idle

from turbospark_app.ui.pane.conversation_pane import ConversationPane
from turbospark_app.ui.elided_label import ElidedLabel
from turbospark_app.ui.main_window import DEFAULT_SIZE

MIN_TRANSCRIPT_HEIGHT = 200


def cut_widgets(root: QWidget) -> list[str]:
    """Visible labels, buttons and combo boxes under `root` narrower than their text needs
    (an ElidedLabel may be narrower when its tooltip holds the whole text)."""
    cut = []
    kinds = (QLabel, QAbstractButton, QComboBox)
    for widget in root.findChildren(QWidget):
        if not isinstance(widget, kinds) or not widget.isVisible() or widget.window() is not root.window():
            continue
        if isinstance(widget, QLabel) and (widget.wordWrap() or not widget.text()):
            continue
        if isinstance(widget, ElidedLabel) and widget.elided:
            if widget.text() not in widget.toolTip():
                cut.append(f"{widget.objectName()}: elided without its text in the tooltip")
            continue
        needed = widget.sizeHint().width()
        if widget.width() < needed:
            text = widget.currentText() if isinstance(widget, QComboBox) else widget.text()
            cut.append(f"{type(widget).__name__} {widget.objectName() or text!r}: "
                       f"{widget.width()} px < {needed} px for {text!r}")
    return cut


def _default_window_two_panes_and_qa(ui: Any, qtbot: Any) -> tuple[Any, list[ConversationPane]]:
    backend = FakeBackend(replies=("Paris is the capital of France.",), max_context=8192)
    w = ui.window(backend)
    w.resize(*DEFAULT_SIZE)
    left = w.area.current_pane()
    send(qtbot, left, "What is the capital of France?")
    wait_idle(qtbot, left)
    w.findChild(type(w.open_model_action), "actionSplitRight").trigger()
    right = w.area.current_pane()
    send(qtbot, right, "Name three colours.")
    wait_idle(qtbot, right)
    w.findChild(type(w.open_model_action), "actionQAPanel").trigger()
    qtbot.waitUntil(lambda: w.qa_panel.isVisible())
    qtbot.wait(50)  # the dock's height is settled on the next turn of the event loop
    assert (w.width(), w.height()) == DEFAULT_SIZE
    return w, [left, right]


def test_two_panes_and_the_qa_panel_fit_the_default_window(ui, qtbot) -> None:
    w, panes = _default_window_two_panes_and_qa(ui, qtbot)
    for pane in panes:
        assert pane.isVisible() and pane.state == "done"
        assert pane.state_label.text().startswith("Done · ")
        assert pane.context_meter.label.text().endswith(" / 8,192 tok")
        assert cut_widgets(pane) == [], pane.conversation_id
        assert pane.transcript.height() >= MIN_TRANSCRIPT_HEIGHT, pane.transcript.height()
    # The QA panel keeps room for its chart.
    assert w.qa_panel.height() >= w.qa_panel.minimumSizeHint().height()
    assert w.qa_panel.view.height() >= w.qa_panel.view.minimumHeight()


def test_narrow_panes_put_their_buttons_on_a_second_row(ui, qtbot) -> None:
    w, (left, right) = _default_window_two_panes_and_qa(ui, qtbot)
    assert left.wrapped and right.wrapped  # ~500 px each: too narrow for one row
    w.area.unsplit()
    qtbot.waitUntil(lambda: len(w.area.groups()) == 1)
    pane = w.area.current_pane()
    qtbot.waitUntil(lambda: not pane.wrapped)  # the whole width: one row again
    assert cut_widgets(pane) == []


def test_an_elided_state_keeps_its_text_in_the_tooltip(qtbot) -> None:
    label = ElidedLabel()
    qtbot.addWidget(label)
    label.setToolTip("what the state means")
    label.setText("Done · 111.7 tok/s · stop max_tokens · reused 96 of 120 prompt tokens")
    label.resize(60, 20)
    label.show()
    assert label.elided and label.toolTip() == f"{label.text()}\n\nwhat the state means"  # both
    assert label.text().startswith("Done · 111.7")  # text() stays whole
    label.resize(label.sizeHint().width() + 10, 20)
    assert not label.elided and label.toolTip() == "what the state means"
    assert label.minimumSizeHint().width() < label.sizeHint().width()


def test_the_fit_check_notices_a_cut_label(qtbot) -> None:
    """cut_widgets is a real check: a label squeezed below its text is reported."""
    box = QWidget()
    qtbot.addWidget(box)
    label = QLabel("This computer · Done · 36.6 tok/s", box)
    label.setObjectName("squeezed")
    box.show()
    label.resize(40, 20)
    assert cut_widgets(box) and "squeezed" in cut_widgets(box)[0]


def test_the_settings_dialog_fits(ui, qtbot, isolated_dirs, tmp_path: Path) -> None:
    """Conversation › Settings… in the default window: no label or choice cut, with the Threads
    note in its longest state (a change that reloads the model)."""
    w = ui.window(FakeBackend())
    w.resize(*DEFAULT_SIZE)
    w.show()
    w.open_settings()
    dialog = w.settings_dialog
    qtbot.waitUntil(dialog.isVisible, timeout=3000)
    combo = dialog.threads_field.combo
    combo.setCurrentIndex(combo.count() - 1 if combo.currentIndex() == 0 else 0)
    qtbot.waitUntil(dialog.threads_field.note.isVisible, timeout=3000)
    assert cut_widgets(dialog) == []
    # tall enough for its wrapped notes at its width (under Xvfb a wrapped note was squeezed once)
    layout = dialog.layout()
    assert dialog.height() >= layout.totalHeightForWidth(dialog.width())
    dialog.reject()


def test_the_status_bar_fits_the_default_window_with_the_api_running(ui, qtbot) -> None:
    """Every status item keeps its text at the default size with the local API's item shown and
    the longest figures in place; only the model's name may give up width, with its whole text
    in the tooltip (it clipped "API :8080 · 1 active" to "API :8080 · 1 act" under Xvfb)."""
    w, _ = _default_window_two_panes_and_qa(ui, qtbot)
    status = w.status
    api = status.findChild(QLabel, "status_api")
    api.setText("API :8080 · 12 active")
    api.show()  # as while the API runs
    status.labels["model"].setText("SmolLM2-135M-Instruct · Q4_1 · llama.cpp · CPU AVX2 · 16 threads")
    status.labels["reuse"].setText("reused 12,345/12,400 tok · slot evicted")
    status.labels["decode"].setText("decode 123.4 tok/s live · batch 4")
    qtbot.wait(50)
    assert api.isVisible() and cut_widgets(status) == []
    assert status.width() <= w.width()
