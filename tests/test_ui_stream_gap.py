"""The Stream gap setting in the window (Conversation › Settings… › Engine): the longest pause a
prompt arriving beside running replies may put in them. A change reloads nothing: the next turn
carries it to the backend's chunk budget; it is stored, the window loads its backend with it, and
$TURBOSPARK_MAX_STREAM_GAP_MS wins over it (the control disabled). A tiny GGUF is loaded for real."""

from __future__ import annotations

from pathlib import Path

import pytest

from real_window import pick_settings, real_window, tiny_chat  # noqa: F401 (fixture)
from ui_fakes import send, wait_idle
from turbospark_app.engine.chunk_budget import TARGET_GAP_SECONDS, target_gap_for
from turbospark_app.model.choice.common import LoadChoice, LoadChoiceError
from turbospark_app.ui.prefs.dialog import SettingsDialog
from turbospark_app.ui.prefs.stream_gap import STREAM_GAP_SETTING


def _budget(w):  # type: ignore[no-untyped-def]
    return w.bridge.engine._backend.chunk_budget


def test_a_change_applies_to_the_next_turn_without_a_reload_and_is_stored(
        ui, qtbot, tiny_chat: Path, monkeypatch) -> None:
    monkeypatch.delenv("TURBOSPARK_MAX_STREAM_GAP_MS", raising=False)
    w = real_window(ui, tiny_chat)
    assert w.bridge.backend_state == "ready", w.bridge.backend_error
    backend = w.bridge.engine._backend
    assert _budget(w).target_gap_seconds == TARGET_GAP_SECONDS
    dialog = pick_settings(w, stream_gap="1000")
    assert "The next reply uses it (no reload)." in dialog.stream_gap_field.note.text()
    assert STREAM_GAP_SETTING.load(ui.settings()) == "1000"
    assert w.bridge.max_stream_gap_ms == 1000.0
    assert _budget(w).target_gap_seconds == TARGET_GAP_SECONDS  # nothing until a turn carries it
    pane = w.area.current_pane()
    send(qtbot, pane, "Hi")
    wait_idle(qtbot, pane, timeout=30000)
    assert w.bridge.engine._backend is backend  # not reloaded
    assert _budget(w).target_gap_seconds == target_gap_for(1000) == pytest.approx(0.96)

    # A window opened later loads its backend with the stored gap (the API server's turns).
    again = real_window(ui, tiny_chat)
    assert again.bridge.backend_state == "ready", again.bridge.backend_error
    assert _budget(again).target_gap_seconds == pytest.approx(0.96)
    assert again.bridge.max_stream_gap_ms == 1000.0


def test_the_variable_wins_and_disables_the_control(ui, qtbot, monkeypatch) -> None:
    settings = ui.settings()
    STREAM_GAP_SETTING.save(settings, "500")
    assert STREAM_GAP_SETTING.current(settings, environ={}) == LoadChoice("500", "setting")
    choice = STREAM_GAP_SETTING.current(settings, environ={"TURBOSPARK_MAX_STREAM_GAP_MS": "400"})
    assert choice == LoadChoice("400", "TURBOSPARK_MAX_STREAM_GAP_MS") and choice.overridden
    with pytest.raises(LoadChoiceError, match="TURBOSPARK_MAX_STREAM_GAP_MS must be a number"):
        STREAM_GAP_SETTING.current(settings, environ={"TURBOSPARK_MAX_STREAM_GAP_MS": "fast"})
    with pytest.raises(ValueError, match="unknown stream gap"):
        STREAM_GAP_SETTING.save(settings, "400")  # the dialog offers its presets only

    d = SettingsDialog({}, None, stream_gap=choice)
    qtbot.addWidget(d)
    field = d.stream_gap_field
    assert not field.combo.isEnabled() and "TURBOSPARK_MAX_STREAM_GAP_MS" in field.combo.toolTip()
    assert field.combo.currentText() == "400 ms" and d.stream_gap_change() is None
    assert field.note.text() == "Set by TURBOSPARK_MAX_STREAM_GAP_MS=400, which wins over this setting."

    d = SettingsDialog({}, None, stream_gap=LoadChoice("250", "default"))
    qtbot.addWidget(d)
    combo = d.stream_gap_field.combo
    assert [combo.itemData(i) for i in range(combo.count())] == ["250", "500", "1000"]
    assert d.stream_gap_change() is None and d.stream_gap_field.note.isHidden()
    combo.setCurrentIndex(combo.findData("500"))
    assert d.stream_gap_change() == "500"


class _NoCollector:
    def __init__(self, parent: object) -> None:
        pass

    def start(self) -> None:
        pass


def test_the_app_refuses_to_start_on_a_bad_variable(qtbot, tmp_path: Path, monkeypatch) -> None:
    import argparse

    from turbospark_app.ui import app

    said = []
    monkeypatch.setattr(app, "configure_application", lambda a: None)
    monkeypatch.setattr(app, "follow_system_scheme", lambda a: None)
    monkeypatch.setattr(app, "GuiThreadCollector", _NoCollector)  # (this process's gc stays as it is)
    monkeypatch.setattr(app.QMessageBox, "critical", lambda parent, title, text: said.append(text))
    monkeypatch.setattr(app, "build_window", lambda *a, **k: pytest.fail("a window was built"))
    monkeypatch.setenv("TURBOSPARK_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("TURBOSPARK_MAX_STREAM_GAP_MS", "-5")
    assert app.run_app(argparse.Namespace()) == 2
    assert said == ["TURBOSPARK_MAX_STREAM_GAP_MS must be a number of milliseconds > 0 (got '-5')"]
    import gc

    assert gc.isenabled()
