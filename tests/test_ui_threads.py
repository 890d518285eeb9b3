"""The Threads setting, end to end: the choice and its precedence (--threads > $TURBOSPARK_THREADS >
the setting > the performance cores), QSettings, the Settings dialog, and the reload that makes
llama.cpp's context with the new count (stored once the model runs with it). A tiny GGUF with a
tokenizer is loaded for real."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings

from real_window import engine_context, pick_settings, real_window, tiny_chat, wait_for_model  # noqa: F401 (fixture)
from turbospark_app.model.choice.threads import ThreadsChoice, choose_threads, performance_cores
from turbospark_app.ui.prefs.dialog import SettingsDialog
from turbospark_app.ui.prefs.threads import THREADS_SETTING, current_threads


def test_flag_beats_environment_beats_setting_beats_the_cores() -> None:
    env = {"TURBOSPARK_THREADS": "1"}
    assert choose_threads(1, "auto", {}) == ThreadsChoice(1, "1", "--threads")
    assert choose_threads(None, "auto", env) == ThreadsChoice(1, "1", "TURBOSPARK_THREADS")
    assert choose_threads(None, "1", {}) == ThreadsChoice(1, "1", "setting")
    assert choose_threads(None, None, {}) == ThreadsChoice(performance_cores(), "auto", "default")
    assert choose_threads(None, "junk", {}).source == "default"
    assert choose_threads(None, None, env).overridden and not choose_threads(None, "1", {}).overridden
    assert 1 <= performance_cores() <= (os.cpu_count() or 1)


def test_the_setting_is_stored_and_junk_reads_as_auto(tmp_path: Path) -> None:
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    assert THREADS_SETTING.load(settings) == "auto"
    THREADS_SETTING.save(settings, "1")
    again = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)  # a restart
    assert current_threads(again) == ThreadsChoice(1, "1", "setting")
    again.setValue("engine/threads", '"lots"')
    assert THREADS_SETTING.load(again) == "auto"
    with pytest.raises(ValueError):
        THREADS_SETTING.save(again, "0")


def test_dialog_offers_auto_and_each_count_and_says_what_ok_does(qtbot) -> None:
    d = SettingsDialog({}, None, threads=ThreadsChoice(performance_cores(), "auto", "setting"))
    qtbot.addWidget(d)
    field = d.threads_field
    labels = [field.combo.itemText(i) for i in range(field.combo.count())]
    assert labels[0].startswith("Auto (") and "performance core" in labels[0]
    assert labels[1:] == [str(n) for n in range(1, (os.cpu_count() or 1) + 1)]
    assert d.load_changes() == {} and field.note.isHidden()
    field.combo.setCurrentIndex(field.combo.findData("1"))
    assert d.load_changes() == {"threads": "1"}
    assert "OK reloads the model with 1 threads" in field.note.text()


def test_an_override_disables_the_control_and_names_it(qtbot) -> None:
    d = SettingsDialog({}, None, threads=ThreadsChoice(1, "1", "TURBOSPARK_THREADS"))
    qtbot.addWidget(d)
    assert not d.threads_field.combo.isEnabled()
    assert "TURBOSPARK_THREADS" in d.threads_field.combo.toolTip()
    assert d.load_changes() == {}


def test_a_change_reloads_the_model_with_the_new_count_and_is_then_stored(ui, qtbot, tiny_chat: Path) -> None:
    w = real_window(ui, tiny_chat)
    assert w.bridge.backend_state == "ready", w.bridge.backend_error
    assert engine_context(w).threads == performance_cores()
    assert w.bridge.model_info["runs_on"].endswith(f"· {performance_cores()} thread"
                                                   + ("s" if performance_cores() != 1 else ""))
    pick_settings(w, threads="1")
    wait_for_model(qtbot, w, threads=1)
    assert engine_context(w).threads == 1 and w.bridge.model_info["runs_on"].endswith("· 1 thread")
    assert THREADS_SETTING.load(ui.settings()) == "1"  # stored once it ran with it
