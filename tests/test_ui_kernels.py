"""The Kernels setting (exact-prompt / exact / int8), end to end: the choice and its precedence,
QSettings, the Settings dialog (and its tie to Weights), the reload on the engine thread, the
environment variable and flag that override it, the CLI, and a failed load that puts the
previous model back. Real loads use a tiny GGUF with a tokenizer."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QSettings

from real_window import engine_model, pick_settings, real_window, spy_loads, tiny_chat, wait_for_model  # noqa: F401 (fixture)
from turbospark_app.model.choice.kernels import KernelsChoice, KernelsChoiceError, choose_kernels
from turbospark_app.model.choice.weights import WeightsChoice
from turbospark_app.ui.kernels_setting import F32_NOTE, KERNEL_TRADEOFFS, KERNELS_SETTING
from turbospark_app.ui.settings_dialog import SettingsDialog

BAD_ENV = "TURBOSPARK_KERNELS='fast' is not a kernel mode (choose exact-prompt, exact or int8)"


# -- the choice ----------------------------------------------------------------------------------


def test_flag_beats_environment_beats_setting_beats_exact_prompt() -> None:
    env = {"TURBOSPARK_KERNELS": "int8"}
    assert choose_kernels("exact", "exact-prompt", env) == KernelsChoice("exact", "--kernels")
    assert choose_kernels(None, "exact", env) == KernelsChoice("int8", "TURBOSPARK_KERNELS")
    assert choose_kernels(None, "exact", {"TURBOSPARK_KERNELS": " INT8 "}).mode == "int8"
    assert choose_kernels(None, "exact", {}) == KernelsChoice("exact", "setting")
    assert choose_kernels(None, None, {"TURBOSPARK_KERNELS": " "}) == KernelsChoice("exact-prompt", "default")
    assert choose_kernels(None, "garbage", {}) == KernelsChoice("exact-prompt", "default")
    assert choose_kernels(None, "int8", env).overridden and not choose_kernels(None, "int8", {}).overridden
    with pytest.raises(KernelsChoiceError) as info:
        choose_kernels(None, "int8", {"TURBOSPARK_KERNELS": "fast"})
    assert str(info.value) == BAD_ENV


def test_the_choice_names_the_engines_own_modes_and_variable(monkeypatch) -> None:
    from turbospark_app.model.choice import kernels as kernels_choice
    from turbospark_app.model.compact import forward as llama_compact

    # The engine reads the choice module's variable and default (one definition of each).
    monkeypatch.delenv("TURBOSPARK_KERNELS", raising=False)
    assert kernels_choice.DEFAULT_KERNELS == llama_compact.kernel_mode(None)
    monkeypatch.setenv(kernels_choice.KERNELS_ENV, "int8")
    assert llama_compact.kernel_mode(None) == "int8"


def test_the_setting_is_stored_and_junk_reads_as_exact_prompt(tmp_path: Path) -> None:
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    assert KERNELS_SETTING.load(settings) == "exact-prompt"
    KERNELS_SETTING.save(settings, "int8")
    again = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)  # a restart
    assert KERNELS_SETTING.load(again) == "int8"
    again.setValue("engine/kernels", '"fast"')
    assert KERNELS_SETTING.load(again) == "exact-prompt"
    with pytest.raises(ValueError):
        KERNELS_SETTING.save(again, "fast")


# -- the dialog ----------------------------------------------------------------------------------


def test_dialog_offers_three_modes_with_their_trade_off_and_says_what_ok_does(qtbot) -> None:
    d = SettingsDialog({}, None, weights=WeightsChoice("compact", "setting"), loaded_weights="compact",
                       kernels=KernelsChoice("exact-prompt", "setting"))
    qtbot.addWidget(d)
    field = d.kernels_field
    assert [field.combo.itemText(i) for i in range(field.combo.count())] == [
        "Exact prompt (default)", "Fast (int8, like llama.cpp)", "Exact everywhere (slowest, reproducible)"]
    assert field.combo.isEnabled() and not field.note.isHidden()
    assert field.note.text() == KERNEL_TRADEOFFS["exact-prompt"] and d.load_changes() == {}
    field.combo.setCurrentIndex(field.combo.findData("int8"))
    assert d.kernels_change() == "int8" and d.load_changes() == {"kernels": "int8"}
    assert "reloads the model with int8 kernels" in field.note.text()
    assert field.note.text().endswith(KERNEL_TRADEOFFS["int8"])
    # Weights to float32: kernels no longer apply, whatever was picked.
    d.weights_field.combo.setCurrentIndex(d.weights_field.combo.findData("f32"))
    assert not field.combo.isEnabled() and field.note.text() == F32_NOTE
    assert d.load_changes() == {"weights": "f32"}
    d.weights_field.combo.setCurrentIndex(d.weights_field.combo.findData("compact"))
    assert field.combo.isEnabled() and d.load_changes() == {"kernels": "int8"}


def test_dialog_with_f32_weights_starts_with_kernels_disabled(qtbot) -> None:
    d = SettingsDialog({}, None, weights=WeightsChoice("f32", "setting"), loaded_weights="f32",
                       kernels=KernelsChoice("exact", "setting"))
    qtbot.addWidget(d)
    assert not d.kernels_field.combo.isEnabled() and d.kernels_field.note.text() == F32_NOTE
    d.weights_field.combo.setCurrentIndex(d.weights_field.combo.findData("compact"))
    d.kernels_field.combo.setCurrentIndex(d.kernels_field.combo.findData("int8"))
    assert d.load_changes() == {"weights": "compact", "kernels": "int8"}  # one reload for both


@pytest.mark.parametrize(("flag", "named"), [(None, "TURBOSPARK_KERNELS environment variable"),
                                             ("exact", "--kernels flag")])
def test_an_override_disables_the_control_and_names_itself(qtbot, tmp_path: Path, monkeypatch,
                                                           flag: str | None, named: str) -> None:
    monkeypatch.setenv("TURBOSPARK_KERNELS", "int8")
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    KERNELS_SETTING.save(settings, "exact-prompt")
    choice = KERNELS_SETTING.current(settings, flag)
    d = SettingsDialog({}, None, weights=WeightsChoice("compact", "default"), loaded_weights="compact",
                       kernels=choice)
    qtbot.addWidget(d)
    combo = d.kernels_field.combo
    assert not combo.isEnabled() and combo.currentData() == (flag or "int8")
    assert named in combo.toolTip() and d.kernels_field.note.text().startswith("Set by ")
    assert d.kernels_change() is None and d.load_changes() == {}


# -- in the window: the engine reloads ------------------------------------------------------------


def test_choosing_int8_reloads_the_engines_model_and_is_remembered(ui, qtbot, tiny_chat: Path) -> None:
    from turbospark_app.ui.model_dialogs import info_rows

    w = real_window(ui, tiny_chat)
    assert engine_model(w).kernels == "exact-prompt"
    assert w.status.text("model").endswith("weights: compact · kernels: exact-prompt")
    pane = w.area.current_pane()
    pane.input.setPlainText("draft kept across the reload")
    first = engine_model(w)
    pick_settings(w, kernels="int8")
    wait_for_model(qtbot, w, kernels="int8")
    assert engine_model(w) is not first and engine_model(w).kernels == "int8"
    assert w.status.text("model").endswith("weights: compact · kernels: int8")
    assert "kernels: int8" in dict(info_rows(w.bridge.model_info))["Weights"]
    assert KERNELS_SETTING.load(ui.settings()) == "int8"
    assert pane.input.toPlainText() == "draft kept across the reload"
    w.close()

    again = real_window(ui, tiny_chat)  # a restart: the setting decides the first load
    assert engine_model(again).kernels == "int8"
    pick_settings(again, weights="f32")  # float32 weights have no kernels: none shown
    wait_for_model(qtbot, again, weights_kind="f32")
    assert again.status.text("model").endswith("weights: f32")
    assert "kernels" not in dict(info_rows(again.bridge.model_info))["Weights"]
    assert KERNELS_SETTING.load(ui.settings()) == "int8"  # kept for compact weights
    again.open_settings()
    assert not again.settings_dialog.kernels_field.combo.isEnabled()
    again.settings_dialog.reject()


def test_a_failed_load_with_new_kernels_puts_the_previous_model_back(ui, qtbot, tiny_chat: Path) -> None:
    def refuse_exact(factory: Any) -> Any:
        def model_factory(path: str, **options: Any) -> Any:
            if options.get("kernels") == "exact":
                def load() -> Any:
                    raise RuntimeError("the exact split refused a tensor")
                return load
            return factory(path, **options)
        return model_factory

    w = real_window(ui, tiny_chat, wrap=refuse_exact)
    first = engine_model(w)
    pick_settings(w, kernels="exact")
    qtbot.waitUntil(lambda: w.models.failure_box is not None, timeout=30000)
    box = w.models.failure_box
    assert box.text() == "tiny-chat.gguf could not be loaded with exact kernels"
    assert "refused a tensor" in box.informativeText()
    assert "The Kernels setting stays exact-prompt." in box.informativeText()
    wait_for_model(qtbot, w, kernels="exact-prompt")
    assert engine_model(w) is not first and engine_model(w).kernels == "exact-prompt"
    assert KERNELS_SETTING.load(ui.settings()) == "exact-prompt"


def test_a_mode_the_model_did_not_run_in_is_not_remembered(ui, qtbot, tiny_chat: Path) -> None:
    # E.g. a model the compact engine cannot run falls back to float32 weights (no kernels).
    def ignore_kernels(factory: Any) -> Any:
        def model_factory(path: str, **options: Any) -> Any:
            return factory(path, **{**options, "kernels": "exact"})
        return model_factory

    w = real_window(ui, tiny_chat, wrap=ignore_kernels)
    assert engine_model(w).kernels == "exact"
    KERNELS_SETTING.save(ui.settings(), "exact")
    pick_settings(w, kernels="int8")
    qtbot.waitUntil(lambda: w.models.current is not None and w.models.current.options.get("kernels") == "int8",
                    timeout=30000)
    assert w.bridge.model_info["kernels"] == "exact" and KERNELS_SETTING.load(ui.settings()) == "exact"


@pytest.mark.parametrize(("env", "flag", "runs"), [("int8", None, "int8"), ("int8", "exact", "exact")])
def test_the_environment_variable_and_flag_win_in_the_window(ui, tiny_chat: Path, monkeypatch,
                                                              env: str, flag: str | None, runs: str) -> None:
    KERNELS_SETTING.save(ui.settings(), "exact-prompt")
    monkeypatch.setenv("TURBOSPARK_KERNELS", env)
    w = real_window(ui, tiny_chat, kernels_flag=flag)
    assert engine_model(w).kernels == runs and w.bridge.model_info["kernels"] == runs
    w.open_settings()
    combo = w.settings_dialog.kernels_field.combo
    assert not combo.isEnabled() and ("--kernels" if flag else "TURBOSPARK_KERNELS") in combo.toolTip()
    w.settings_dialog.reject()


# -- the CLI -------------------------------------------------------------------------------------


def test_chat_loads_with_the_flags_kernels(tiny_chat: Path, monkeypatch, capsys) -> None:
    from turbospark_app.cli.main import main

    loaded = spy_loads(monkeypatch)
    monkeypatch.setenv("TURBOSPARK_KERNELS", "exact")  # the flag wins over it
    assert main(["chat", "--model", str(tiny_chat), "--kernels", "int8", "--prompt", "hi", "--max-new", "2"]) == 0
    monkeypatch.setenv("TURBOSPARK_KERNELS", "int8")
    assert main(["chat", "--model", str(tiny_chat), "--prompt", "hi", "--max-new", "2"]) == 0
    assert [b.model.kernels for b in loaded] == ["int8", "int8"]


@pytest.mark.parametrize(("var", "value", "message"), [
    ("TURBOSPARK_KERNELS", "fast", BAD_ENV),
    ("TURBOSPARK_WEIGHTS", "int3", "TURBOSPARK_WEIGHTS='int3' is not a weight mode (choose compact or f32)"),
])
@pytest.mark.parametrize("command", [["chat", "--prompt", "hi"], ["serve", "--port", "0"], ["--self-test"]])
def test_a_bad_environment_value_is_refused_before_loading(monkeypatch, capsys, command: list[str],
                                                           var: str, value: str, message: str) -> None:
    import turbospark_app.cli.self_test as self_test
    from turbospark_app.cli.main import main

    monkeypatch.setattr(self_test, "run_self_test", lambda *a: pytest.fail("loaded despite the bad value"))
    monkeypatch.setenv(var, value)
    assert main([*command, "--model", "/nowhere/none.gguf"]) == (1 if command == ["--self-test"] else 2)
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_serve_says_the_modes_it_runs() -> None:
    from turbospark_app.cli.serve_command import _report
    from turbospark_app.service.events import BackendReady

    out = io.StringIO()
    with contextlib.redirect_stderr(out):
        _report(BackendReady({"file_name": "m.gguf", "weights_kind": "compact", "kernels": "int8"}, 2048, 0.4))
        _report(BackendReady({"file_name": "m.gguf", "weights_kind": "f32", "kernels": None}, 2048, 0.4))
    first, second = out.getvalue().splitlines()
    assert first == "turbospark: model ready: m.gguf (weights: compact · kernels: int8, 0.4 s, context 2048)"
    assert second == "turbospark: model ready: m.gguf (weights: f32, 0.4 s, context 2048)"
