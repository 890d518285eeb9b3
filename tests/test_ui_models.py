"""Models: a GGUF is checked before switching, problems are explained, the info view."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtWidgets import QMessageBox, QWidget

from tiny_gguf import LAYER_TYPES, write_tiny_gguf
from turbospark_app.ui.model_dialogs import (
    ModelInfoDialog,
    ModelOpener,
    check_model_file,
    explain_model_error,
    info_rows,
)


@pytest.fixture(scope="module")
def good_tiny(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("m") / "tiny.gguf"
    write_tiny_gguf(path)
    return path


def problem(path: Path) -> tuple[str, str]:
    with pytest.raises(Exception) as info:
        check_model_file(path)
    return explain_model_error(info.value)


def test_not_a_gguf(tmp_path: Path) -> None:
    path = tmp_path / "notes.gguf"
    path.write_text("just some text, not a model")
    title, text = problem(path)
    assert title == "This is not a GGUF model" and "bad magic" in text and ".gguf" in text


def test_truncated(good_tiny: Path, tmp_path: Path) -> None:
    path = tmp_path / "cut.gguf"
    path.write_bytes(good_tiny.read_bytes()[: good_tiny.stat().st_size // 2])
    title, text = problem(path)
    assert title == "The model file is incomplete" and "Download the file again" in text


def test_unsupported_architecture(tmp_path: Path) -> None:
    path = tmp_path / "gpt2.gguf"
    write_tiny_gguf(path, arch="gpt2")
    title, text = problem(path)
    assert title == "This model's architecture is not supported"
    assert "'gpt2'" in text and "llama and qwen2" in text


def test_unsupported_tensor_type(tmp_path: Path) -> None:
    path = tmp_path / "q2k.gguf"
    write_tiny_gguf(path, layer_types=[dict(LAYER_TYPES[0], ffn_down="Q2_K"), LAYER_TYPES[1]])
    title, text = problem(path)
    assert title == "This quantization is not supported" and "Q2_K" in text and "Q4_K" in text


def test_missing_file_and_missing_tokenizer(good_tiny: Path, tmp_path: Path) -> None:
    assert problem(tmp_path / "gone.gguf")[0] == "The file cannot be read"
    # The tiny test model has weights but no vocabulary: the engine could not chat with it.
    title, text = problem(good_tiny)
    assert title == "The model's tokenizer cannot be used" and "no tokenizer" in text


def test_the_real_model_passes_with_its_facts(default_model_path: Path) -> None:
    facts = check_model_file(default_model_path)
    assert facts["architecture"] == "llama" and facts["quantization"] == "Q4_1"
    assert facts["context_length"] == 8192 and facts["file_size_bytes"] == default_model_path.stat().st_size
    assert "<|im_start|>" in facts["chat_template"] and not facts["chat_template_is_fallback"]


def test_info_view_rows_and_template() -> None:
    info = {"name": "SmolLM2", "path": "/m/s.gguf", "architecture": "llama", "n_params": 134_515_008,
            "quantization": "Q4_1", "context_length": 8192, "max_context": 2048, "n_layers": 30, "dim": 576,
            "n_heads": 9, "n_kv_heads": 3, "vocab_size": 49152, "file_size_bytes": 98_362_432,
            "load_seconds": 1.234, "chat_template": "{{ messages }}", "chat_template_is_fallback": False}
    rows = dict(info_rows(info))
    assert rows["Parameters"] == "134.5 M (134,515,008)" and rows["Quantization"] == "Q4_1"
    assert rows["Context length"] == "8,192 tokens (this app uses 2,048)"
    assert rows["File size"] == "94 MB (98,362,432 bytes)" and rows["Loaded in"] == "1.23 s"
    assert rows["Shape"] == "30 layers · width 576 · 9 heads (3 KV)"
    sparse = dict(info_rows({"name": "fake-model"}))
    assert sparse["Name"] == "fake-model" and sparse["Architecture"] == "–"


def test_info_dialog_shows_the_template_text(qtbot) -> None:
    d = ModelInfoDialog({"name": "m", "chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}",
                         "chat_template_is_fallback": True})
    qtbot.addWidget(d)
    assert d.template.toPlainText().startswith("{% for m in messages %}") and d.template.isReadOnly()
    assert d.values["Name"].text() == "m"


class _Parent(QWidget):
    pass


def test_opener_switches_only_to_a_checked_file(qtbot, tmp_path: Path, good_tiny: Path) -> None:
    parent = _Parent()
    qtbot.addWidget(parent)
    switched: list[tuple[str, dict]] = []
    opener = ModelOpener(parent, lambda path, facts: switched.append((path, facts)),
                         check=lambda p: {"path": p, "architecture": "llama"},
                         choose=lambda _parent, _start: str(good_tiny))
    with qtbot.waitSignal(opener.checked, timeout=5000) as sig:
        opener.open_dialog()
    assert sig.args == [str(good_tiny), True] and switched == [(str(good_tiny), {"path": str(good_tiny),
                                                                                  "architecture": "llama"})]


def test_opener_explains_a_bad_file_and_does_not_switch(qtbot, tmp_path: Path) -> None:
    parent = _Parent()
    qtbot.addWidget(parent)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF")  # the magic and nothing else
    switched: list = []
    opener = ModelOpener(parent, lambda path, facts: switched.append(path))
    with qtbot.waitSignal(opener.checked, timeout=5000) as sig:
        opener.open_path(str(bad))
    assert sig.args == [str(bad), False] and switched == [] and not opener.checking
    box = parent.findChild(QMessageBox, "modelErrorBox")
    assert box is not None and box.isVisible()
    assert box.text() == opener.last_error[0] and "bad.gguf" in box.informativeText()
    assert box.text() == "The model file is incomplete"  # the header ends after the magic
