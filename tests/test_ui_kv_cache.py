"""The KV cache settings in the window: Conversation › Settings… › Engine offers K and V types; a
change reloads the model with them (stored once it runs with them), the QA panel and the context
meter show the KV bytes; a type the model cannot take is refused with a message and the model it
had loads again. Tiny GGUFs with a tokenizer are loaded for real."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QMessageBox

from real_window import engine_context, pick_settings, real_window, tiny_chat, wait_for_model  # noqa: F401 (fixture)
from tiny_gguf import write_tiny_gguf
from turbospark_app.model.choice.common import LoadChoice
from turbospark_app.model.choice.kv_cache import KVCacheTypes
from turbospark_app.ui.pane.context import ContextMeter
from turbospark_app.ui.prefs.kv_cache import CACHE_TYPE_K_SETTING, CACHE_TYPE_V_SETTING
from turbospark_app.ui.qa.engine import kv_cache_text
from turbospark_app.ui.prefs.dialog import SettingsDialog


def _pick_kv(w, **modes: str) -> None:
    w.open_settings()
    dialog = w.settings_dialog
    for key, mode in modes.items():
        combo = dialog.kv_fields[key].combo
        assert combo.isEnabled()
        combo.setCurrentIndex(combo.findData(mode))
    assert dialog.load_changes() == modes
    dialog.ok_button.click()


def test_dialog_offers_the_types_and_an_override_disables_one(qtbot) -> None:
    d = SettingsDialog({}, None, kv_cache=(LoadChoice("f16", "default"),
                                           LoadChoice("q8_0", "TURBOSPARK_CACHE_TYPE_V")))
    qtbot.addWidget(d)
    k, v = d.kv_fields["cache_type_k"], d.kv_fields["cache_type_v"]
    assert [k.combo.itemData(i) for i in range(k.combo.count())] == ["f16", "q8_0", "q4_0"]
    assert not v.combo.isEnabled() and "TURBOSPARK_CACHE_TYPE_V" in v.combo.toolTip()
    assert d.load_changes() == {}
    k.combo.setCurrentIndex(k.combo.findData("q4_0"))
    assert d.load_changes() == {"cache_type_k": "q4_0"}
    assert "OK reloads the model with q4_0 KV cache keys" in k.note.text()


def test_the_qa_text_and_the_meter_show_the_kv_bytes(qtbot) -> None:
    info = {"model": {"kv_cache": {"label": "q8_0", "flash_attention": True, "bytes": 4096 * 12_240},
                      "kv_bytes_per_token": 12_240, "max_context": 4096},
            "sessions": [{"kv_bytes": 100 * 12_240}, {"kv_bytes": 0}]}
    assert kv_cache_text(info) == ("q8_0 (flash attention) · 12 KB/token · 48 MB for 4,096 tokens · "
                                   "1 MB held now")
    assert kv_cache_text({}) == "no model loaded"
    meter = ContextMeter()
    qtbot.addWidget(meter)
    meter.model_info = lambda: info["model"]
    meter.set_usage(2000, 4096)
    assert meter.label.text() == "2,000 / 4,096 tok · 23 MB KV"
    assert "Its KV cache (q8_0, 12 KB a token): 23 MB of 48 MB." in meter.toolTip()


def test_a_change_reloads_with_the_types_and_is_stored(ui, qtbot, tiny_chat: Path) -> None:
    w = real_window(ui, tiny_chat)
    assert w.bridge.backend_state == "ready", w.bridge.backend_error
    f16 = w.bridge.model_info["kv_bytes_per_token"]
    _pick_kv(w, cache_type_k="q8_0", cache_type_v="q8_0")
    qtbot.waitUntil(lambda: w.bridge.backend_state == "ready"
                    and w.bridge.model_info.get("kv_cache", {}).get("label") == "q8_0", timeout=30000)
    assert engine_context(w).cache_types == KVCacheTypes("q8_0", "q8_0")
    assert w.bridge.model_info["kv_bytes_per_token"] / f16 == 0.53125
    assert (CACHE_TYPE_K_SETTING.load(ui.settings()), CACHE_TYPE_V_SETTING.load(ui.settings())) == ("q8_0", "q8_0")
    w.qa_panel.poll()
    assert w.qa_panel.kv_label.text().startswith("q8_0 (flash attention) · ")


def test_a_type_the_model_cannot_take_is_refused_and_the_model_comes_back(ui, qtbot, tmp_path: Path,
                                                                        monkeypatch) -> None:
    monkeypatch.delenv("TURBOSPARK_THREADS", raising=False)
    monkeypatch.setenv("TURBOSPARK_CACHE_DIR", str(tmp_path / "cache"))
    odd = tmp_path / "heads48.gguf"
    write_tiny_gguf(odd, head_dim=48, tokenizer={})
    w = real_window(ui, odd)
    assert w.bridge.backend_state == "ready", w.bridge.backend_error
    _pick_kv(w, cache_type_v="q8_0")
    qtbot.waitUntil(lambda: w.models.failure_box is not None, timeout=30000)
    box = w.models.failure_box
    assert box.text() == "heads48.gguf could not be loaded with q8_0 KV cache values"
    assert "the V cache cannot be q8_0 for this model" in box.informativeText()
    assert "The KV cache values setting stays f16." in box.informativeText()
    wait_for_model(qtbot, w)
    assert engine_context(w).cache_types == KVCacheTypes()
    assert CACHE_TYPE_V_SETTING.load(ui.settings()) == "f16"
    assert not [b for b in w.findChildren(QMessageBox, "warningBox") if b.isVisible()]
