"""Any GGUF in the window: Open Model on a file llama.cpp does not run says so (the line `model
info` prints, the file's metadata in the details) and the model that runs stays; Help › Model
Info shows the full metadata of the loaded file or of any other, with llama.cpp's verdict."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtWidgets import QMessageBox, QPushButton, QWidget

from foreign_gguf import write_foreign_gguf
from tiny_gguf import write_tiny_gguf
from turbospark_app.ui.dialogs.gguf_info import FileDescriber, GGUFInfoDialog
from turbospark_app.ui.dialogs.models import ModelInfoDialog


@pytest.fixture(scope="module")
def mamba(tmp_path_factory) -> Path:
    return write_foreign_gguf(tmp_path_factory.mktemp("m") / "mamba-130m.gguf", "mamba")


@pytest.fixture(scope="module")
def unknown(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("u") / "brand-new.gguf"
    write_tiny_gguf(path, arch="brand-new-arch")
    return path


UNKNOWN = "unknown model architecture: 'brand-new-arch'"


def test_open_model_on_an_unsupported_architecture_keeps_the_model_running(ui, qtbot, unknown: Path) -> None:
    from qa_fakes import RecordingBackend, issue6_window
    from ui_fakes import send, wait_idle

    from turbospark_app.ui.dialogs.first_run import MODEL_PATH_KEY

    first = RecordingBackend(replies=("still here",), model_name="first")
    loaded: list[str] = []
    w = issue6_window(ui, first, model_factory=lambda path, **_: loaded.append(path))
    remembered = ui.settings().value(MODEL_PATH_KEY)
    w.model_opener._choose = lambda _parent, _start: str(unknown)
    with qtbot.waitSignal(w.model_opener.checked, timeout=10000) as sig:
        w.findChild(type(w.open_model_action), "actionOpenModel").trigger()  # the real check
    assert sig.args == [str(unknown), False] and loaded == []
    box = w.findChild(QMessageBox, "modelErrorBox")
    assert box is not None and box.isVisible() and box.text() == "This model's architecture is not supported"
    assert UNKNOWN in box.informativeText() and "brand-new.gguf" in box.informativeText()
    assert "keeps running" in box.informativeText()
    details = box.detailedText().splitlines()
    assert "Architecture: brand-new-arch" in details and "Embedding width: 256" in details
    assert details[-1] == f"llama.cpp cannot run this file: {UNKNOWN}"
    # The model that ran before still runs, and stays the one remembered for the next start.
    assert w.bridge.backend_state == "ready" and w.bridge.model_info["name"] == "first"
    assert ui.settings().value(MODEL_PATH_KEY) == remembered
    pane = w.area.current_pane()
    send(qtbot, pane, "are you there?")
    wait_idle(qtbot, pane)
    assert pane.messages[-1].content == "still here"


def _button(dialog: QWidget, name: str) -> QPushButton | None:
    return dialog.findChild(QPushButton, name)


def test_model_info_shows_any_other_gguf(ui, qtbot, mamba: Path) -> None:
    from qa_fakes import RecordingBackend, issue6_window

    w = issue6_window(ui, RecordingBackend(model_name="infomodel"))
    w.findChild(type(w.open_model_action), "actionModelInfo").trigger()
    info = w.findChild(ModelInfoDialog)
    assert _button(info, "fileMetadataButton") is None  # /models/infomodel.gguf: no such file here
    describer = FileDescriber.for_window(w)
    assert info.describer is describer
    describer._choose = lambda _parent, _start: str(mamba)
    with qtbot.waitSignal(describer.described, timeout=10000) as sig:
        _button(info, "otherGgufButton").click()
    assert sig.args == [str(mamba), True]
    dialog = describer.dialog
    assert isinstance(dialog, GGUFInfoDialog) and dialog.isVisible()
    assert dialog.values["Architecture"].text() == "mamba" and dialog.values["Layers"].text() == "2"
    assert dialog.values["mamba.ssm.conv_kernel"].text() == "4"
    assert dialog.values["Tokenizer"].text() == "gpt2 (pre: smollm)"
    assert dialog.verdict.text().startswith("llama.cpp cannot run this file: ")
    assert "not found" in dialog.verdict.text()


def test_file_metadata_of_the_loaded_file(qtbot, tmp_path: Path) -> None:
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path)
    parent = QWidget()
    qtbot.addWidget(parent)
    describer = FileDescriber.for_window(parent)
    info = ModelInfoDialog({"name": "tiny", "path": str(path)}, parent, describer=describer)
    with qtbot.waitSignal(describer.described, timeout=10000):
        _button(info, "fileMetadataButton").click()
    dialog = describer.dialog
    assert dialog.values["Quantization"].text() == "Q8_0" and dialog.values["KV heads"].text() == "2"
    assert dialog.verdict.text().startswith("Runs with llama.cpp (llama ")
    assert FileDescriber.for_window(parent) is describer  # one per window


def test_a_file_whose_header_cannot_be_read_is_explained(qtbot, tmp_path: Path, mamba: Path) -> None:
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(mamba.read_bytes()[:200])
    parent = QWidget()
    qtbot.addWidget(parent)
    describer = FileDescriber.for_window(parent)
    with qtbot.waitSignal(describer.described, timeout=10000) as sig:
        describer.describe_path(str(cut))
    assert sig.args == [str(cut), False] and describer.dialog is None
    box = describer.error_box
    assert box.isVisible() and box.text() == "The model file is incomplete" and "truncated" in box.informativeText()


def test_the_architecture_is_judged_before_words_in_its_name(tmp_path: Path) -> None:
    from turbospark_app.ui.dialogs.models import check_model_file, explain_model_error

    path = tmp_path / "odd.gguf"
    write_tiny_gguf(path, arch="not-truncated")  # "truncated" would read as a cut download
    with pytest.raises(Exception) as info:
        check_model_file(path)
    title, text = explain_model_error(info.value)
    assert title == "This model's architecture is not supported"
    assert text.startswith("unknown model architecture: 'not-truncated'")
