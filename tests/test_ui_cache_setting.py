"""Settings › Weight cache: the size against the budget, the budget control, Clear Cache."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from tiny_gguf import write_tiny_gguf
from turbospark_app.model.reference.weights import load_weights
from turbospark_app.model.weight_cache import budget, store
from turbospark_app.ui.generation_settings import DEFAULTS
from turbospark_app.ui.settings_dialog import SettingsDialog


@pytest.fixture
def cached(tmp_path: Path, isolated_dirs) -> Path:
    cache = isolated_dirs["cache"]
    for name, seed in (("alpha", 0), ("beta", 1)):
        write_tiny_gguf(tmp_path / f"{name}.gguf", seed=seed)
        load_weights(tmp_path / f"{name}.gguf", cache)
    gc.collect()
    return cache


def _dialog(qtbot, cache: Path) -> SettingsDialog:
    d = SettingsDialog(dict(DEFAULTS), None, cache_root=cache)
    qtbot.addWidget(d)
    return d


def test_it_shows_what_the_cache_holds_against_the_budget(qtbot, cached: Path) -> None:
    d = _dialog(qtbot, cached)
    box = d.cache_box
    total = store.total_size(cached)
    assert box.usage_label.text().startswith(f"{total / 2**20:.1f} MiB of ")
    assert "(default budget)" in box.usage_label.text()
    text = box.details.toPlainText()
    assert "alpha  [" in text and "beta  [" in text and "f32" in text
    assert box.default_check.isChecked() and not box.budget_spin.isEnabled()


def test_ok_saves_a_budget_and_trims_the_cache_to_it(qtbot, cached: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    trimmed: list[Path] = []
    monkeypatch.setattr(store, "enforce_budget", lambda root, budget=None: trimmed.append(root) or [])
    d = _dialog(qtbot, cached)
    d.cache_box.default_check.setChecked(False)
    assert d.cache_box.budget_spin.isEnabled()
    d.cache_box.budget_spin.setValue(3.5)
    qtbot.mouseClick(d.ok_button, Qt.MouseButton.LeftButton)
    assert budget.budget_setting() == int(3.5 * 2**30) and trimmed == [cached]
    again = _dialog(qtbot, cached)
    assert not again.cache_box.default_check.isChecked()
    assert again.cache_box.budget_spin.value() == 3.5 and "(your budget)" in again.cache_box.usage_label.text()
    again.cache_box.default_check.setChecked(True)
    again.accept()
    assert budget.budget_setting() is None


def test_cancel_leaves_the_budget_alone(qtbot, cached: Path) -> None:
    d = _dialog(qtbot, cached)
    d.cache_box.default_check.setChecked(False)
    d.cache_box.budget_spin.setValue(2.0)
    d.reject()
    assert budget.budget_setting() is None


def test_clear_cache_empties_it_now_but_keeps_the_model_in_use(qtbot, cached: Path,
                                                                tmp_path: Path) -> None:
    _, held = load_weights(tmp_path / "beta.gguf", cached)
    d = _dialog(qtbot, cached)
    qtbot.mouseClick(d.cache_box.clear_button, Qt.MouseButton.LeftButton)
    assert [m.model for m in store.list_models(cached)] == ["beta"]
    assert "Freed" in d.cache_box.result_label.text() and "kept 1 in use" in d.cache_box.result_label.text()
    assert "alpha" not in d.cache_box.details.toPlainText()
    assert held.wqkv is not None


def test_the_session_policy_is_saved_on_ok_and_trims_saved_sessions(qtbot, tmp_path: Path,
                                                                    isolated_dirs) -> None:
    from turbospark_app.model.compact.forward import CompactLlamaModel

    cache = isolated_dirs["cache"]
    write_tiny_gguf(tmp_path / "m.gguf")
    budget.set_session_policy("current")
    CompactLlamaModel.load(tmp_path / "m.gguf", cache, "int8")
    gc.collect()
    assert list((cache / "weights").glob("*/ort-*"))
    d = _dialog(qtbot, cache)
    combo = d.cache_box.sessions_combo
    assert combo.currentData() == "current" and combo.itemData(0) == "none"  # (the default first)
    combo.setCurrentIndex(combo.findData("none"))
    d.accept()
    assert budget.session_policy() == "none" and not list((cache / "weights").glob("*/ort-*"))


def test_clear_missing_models_frees_only_those_whose_gguf_is_gone(qtbot, cached: Path,
                                                                  tmp_path: Path) -> None:
    d = _dialog(qtbot, cached)
    assert not d.cache_box.clear_missing_button.isEnabled()  # both GGUFs are where they were
    assert not d.cache_box.missing_label.isVisibleTo(d)
    (tmp_path / "alpha.gguf").unlink()
    d.cache_box.refresh()
    assert d.cache_box.clear_missing_button.isEnabled()
    assert d.cache_box.missing_label.isVisibleTo(d) and "1 model (" in d.cache_box.missing_label.text()
    assert "its GGUF is gone" in d.cache_box.details.toPlainText()
    qtbot.mouseClick(d.cache_box.clear_missing_button, Qt.MouseButton.LeftButton)
    assert [m.model for m in store.list_models(cached)] == ["beta"]
    assert "Freed" in d.cache_box.result_label.text()
    assert not d.cache_box.clear_missing_button.isEnabled()
