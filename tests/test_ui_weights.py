"""The Weights setting (compact / f32), end to end: QSettings, the Settings dialog, the reload on
the engine thread, the environment variable and flag that override it, the CLI, and a failed
load that puts the previous model back. Real loads use a tiny GGUF with a tokenizer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QMessageBox

from real_window import engine_model, pick_settings, real_window, spy_loads, tiny_chat, wait_for_model  # noqa: F401 (fixture)
from turbospark_app.model.choice.weights import WeightsChoice, WeightsChoiceError, choose_weights
from turbospark_app.ui.settings_dialog import SettingsDialog
from turbospark_app.ui.weights_setting import current_weights, load_weights_setting, save_weights_setting


def pick_weights(w: Any, mode: str) -> SettingsDialog:
    """Conversation › Settings…, choose `mode` under Weights, press OK."""
    return pick_settings(w, weights=mode)


def wait_loaded(qtbot: Any, w: Any, kind: str) -> None:
    wait_for_model(qtbot, w, weights_kind=kind)


# -- the choice ----------------------------------------------------------------------------------


def test_flag_beats_environment_beats_setting_beats_compact() -> None:
    env = {"TURBOSPARK_WEIGHTS": "f32"}
    assert choose_weights("compact", "f32", env) == WeightsChoice("compact", "--weights")
    assert choose_weights(None, "compact", env) == WeightsChoice("f32", "TURBOSPARK_WEIGHTS")
    assert choose_weights(None, "f32", {}) == WeightsChoice("f32", "setting")
    assert choose_weights(None, None, {"TURBOSPARK_WEIGHTS": "  "}) == WeightsChoice("compact", "default")
    assert choose_weights(None, "garbage", {}) == WeightsChoice("compact", "default")
    assert choose_weights(None, "f32", env).overridden and not choose_weights(None, "f32", {}).overridden
    with pytest.raises(WeightsChoiceError, match="TURBOSPARK_WEIGHTS='int3'.*compact or f32"):
        choose_weights(None, "f32", {"TURBOSPARK_WEIGHTS": "int3"})


def test_the_setting_is_stored_and_junk_reads_as_compact(tmp_path: Path) -> None:
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    assert load_weights_setting(settings) == "compact"
    save_weights_setting(settings, "f32")
    again = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)  # a restart
    assert load_weights_setting(again) == "f32"
    again.setValue("engine/weights", '"int3"')
    assert load_weights_setting(again) == "compact"
    with pytest.raises(ValueError):
        save_weights_setting(again, "q4")


# -- the dialog ----------------------------------------------------------------------------------


def test_dialog_offers_both_modes_and_says_what_ok_does(qtbot) -> None:
    d = SettingsDialog({}, None, weights=WeightsChoice("compact", "setting"), loaded_weights="compact")
    qtbot.addWidget(d)
    field = d.weights_field
    assert [field.combo.itemText(i) for i in range(field.combo.count())] == [
        "Compact (GGUF blocks, default)", "Float32 reference (about 5x the memory, slower decode)"]
    assert field.combo.isEnabled() and field.note.isHidden() and d.weights_change() is None
    field.combo.setCurrentIndex(field.combo.findData("f32"))
    assert d.weights_change() == "f32" and not field.note.isHidden()
    assert "reloads the model with float32 weights" in field.note.text()
    idle = SettingsDialog({}, None, weights=WeightsChoice("compact", "default"), loaded_weights=None)
    qtbot.addWidget(idle)
    idle.weights_field.combo.setCurrentIndex(1)
    assert "next model load" in idle.weights_field.note.text()


@pytest.mark.parametrize(("flag", "named"), [(None, "TURBOSPARK_WEIGHTS environment variable"),
                                             ("compact", "--weights flag")])
def test_an_override_disables_the_control_and_names_itself(qtbot, tmp_path: Path, monkeypatch,
                                                           flag: str | None, named: str) -> None:
    monkeypatch.setenv("TURBOSPARK_WEIGHTS", "f32")
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    save_weights_setting(settings, "compact")
    choice = current_weights(settings, flag)
    d = SettingsDialog({}, None, weights=choice, loaded_weights=choice.mode)
    qtbot.addWidget(d)
    combo = d.weights_field.combo
    assert not combo.isEnabled() and combo.currentData() == (flag or "f32")
    assert named in combo.toolTip() and not d.weights_field.note.isHidden()
    assert d.weights_change() is None


# -- in the window: the engine reloads ------------------------------------------------------------


def test_choosing_f32_reloads_the_engines_model_and_is_remembered(ui, qtbot, tiny_chat: Path) -> None:
    from turbospark_app.model.reference.forward import LlamaModel
    from turbospark_app.model.compact.forward import CompactLlamaModel
    from turbospark_app.ui.model_dialogs import info_rows

    w = real_window(ui, tiny_chat)
    assert isinstance(engine_model(w), CompactLlamaModel) and w.status.text("model").endswith(
        "weights: compact · kernels: exact-prompt")
    pane = w.area.current_pane()
    pane.input.setPlainText("draft kept across the reload")
    pick_weights(w, "f32")
    wait_loaded(qtbot, w, "f32")
    model = engine_model(w)
    assert isinstance(model, LlamaModel) and model.weights_kind == "f32"
    assert w.status.text("model").endswith("weights: f32")
    assert dict(info_rows(w.bridge.model_info))["Weights"].startswith("weights: f32 (float32 reference) · ")
    assert load_weights_setting(ui.settings()) == "f32"
    assert pane.input.toPlainText() == "draft kept across the reload"
    w.close()

    again = real_window(ui, tiny_chat)  # a restart: the setting decides the first load
    assert isinstance(engine_model(again), LlamaModel) and engine_model(again).weights_kind == "f32"
    pick_weights(again, "compact")
    wait_loaded(qtbot, again, "compact")
    assert isinstance(engine_model(again), CompactLlamaModel)
    assert load_weights_setting(ui.settings()) == "compact"


def test_a_failed_load_in_the_new_mode_puts_the_previous_model_back(ui, qtbot, tiny_chat: Path) -> None:
    from turbospark_app.model.compact.forward import CompactLlamaModel

    def refuse_f32(factory: Any) -> Any:
        def model_factory(path: str, chat_template: str | None = None, weights: str | None = None) -> Any:
            if weights == "f32":
                def load() -> Any:
                    raise MemoryError("float32 weights need 4.4 GB, 1.2 GB free")
                return load
            return factory(path, chat_template, weights)
        return model_factory

    w = real_window(ui, tiny_chat, wrap=refuse_f32)
    first = engine_model(w)
    pick_weights(w, "f32")
    qtbot.waitUntil(lambda: w.models.failure_box is not None, timeout=30000)
    box = w.models.failure_box
    assert box.isVisible() and box.text() == "tiny-chat.gguf could not be loaded with float32 weights"
    assert "4.4 GB" in box.informativeText() and "stays compact" in box.informativeText()
    wait_loaded(qtbot, w, "compact")
    assert isinstance(engine_model(w), CompactLlamaModel) and engine_model(w) is not first
    assert load_weights_setting(ui.settings()) == "compact"
    assert not [b for b in w.findChildren(QMessageBox, "warningBox") if b.isVisible()]  # one message only


def test_the_environment_variable_wins_in_the_window(ui, qtbot, tiny_chat: Path, monkeypatch) -> None:
    from turbospark_app.model.reference.forward import LlamaModel

    save_weights_setting(ui.settings(), "compact")
    monkeypatch.setenv("TURBOSPARK_WEIGHTS", "f32")
    w = real_window(ui, tiny_chat)
    assert isinstance(engine_model(w), LlamaModel) and w.bridge.model_info["weights_kind"] == "f32"
    w.open_settings()
    combo = w.settings_dialog.weights_field.combo
    assert not combo.isEnabled() and "TURBOSPARK_WEIGHTS" in combo.toolTip()
    w.settings_dialog.reject()


# -- the CLI -------------------------------------------------------------------------------------


def test_chat_loads_in_the_flags_mode(tiny_chat: Path, monkeypatch, capsys) -> None:
    from turbospark_app.cli.main import main

    loaded = spy_loads(monkeypatch)
    monkeypatch.setenv("TURBOSPARK_WEIGHTS", "compact")  # the flag wins over it
    assert main(["chat", "--model", str(tiny_chat), "--weights", "f32", "--prompt", "hi", "--max-new", "2"]) == 0
    assert [b.model.weights_kind for b in loaded] == ["f32"]
    # (A bad TURBOSPARK_WEIGHTS is refused before loading: test_ui_kernels, for both variables.)
