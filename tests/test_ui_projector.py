"""Choosing a vision projector when opening a model (ui/dialogs/projector.py, model_dialogs'
projector step, model_switch): the projector files beside a model as their headers tell, the step
shown when the automatic choice is not clear (or asked for), the choice carried to the load, a
refused projector said in a message with the model open for text, a working choice remembered;
and the window's factory handing the choice to the real engine (the synthetic pair, and a
projector of the wrong width)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtWidgets import QLabel, QWidget

from turbospark_app.ui.dialogs.models import ModelInfoDialog, ModelOpener
from turbospark_app.ui.dialogs.projector import (
    ProjectorDialog,
    needs_choice,
    remember_projector,
    remembered_projector,
)

from vision_assets import synthetic_mmproj


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory, default_model_path: Path) -> Path:
    """The default model (a link), its synthetic projector, and one for a 640-wide model."""
    d = tmp_path_factory.mktemp("vision-folder")
    (d / default_model_path.name).symlink_to(default_model_path)
    synthetic_mmproj.write_mmproj(d / "mmproj-right.gguf", 576, "mlp")
    synthetic_mmproj.write_mmproj(d / "mmproj-wrong.gguf", 640, "mlp")
    return d


def _fact(name: str, problem: str = "") -> dict[str, Any]:
    return {"path": f"/m/{name}", "name": name, "width": 576, "kind": "mlp", "problem": problem}


def test_the_step_is_needed_only_when_the_automatic_choice_is_unclear() -> None:
    assert not needs_choice({})  # a text model: no projector files, nothing to ask
    assert not needs_choice({"projectors": [_fact("mmproj-a.gguf")]})
    assert not needs_choice({"projectors": [_fact("mmproj-a.gguf"), _fact("mmproj-b.gguf", "projects to 640")]})
    assert needs_choice({"projectors": [_fact("mmproj-b.gguf", "projects to 640, the model's width is 576")]})
    assert needs_choice({"projectors": [_fact("mmproj-a.gguf"), _fact("mmproj-c.gguf")]})


def test_open_model_lists_the_projectors_beside_the_model_with_their_fit(folder: Path, default_model_path: Path) -> None:
    from turbospark_app.ui.dialogs.models import check_model_file

    facts = check_model_file(folder / default_model_path.name)
    by_name = {p["name"]: p for p in facts["projectors"]}
    assert set(by_name) == {"mmproj-right.gguf", "mmproj-wrong.gguf"}
    assert by_name["mmproj-right.gguf"]["problem"] == "" and by_name["mmproj-right.gguf"]["width"] == 576
    assert by_name["mmproj-wrong.gguf"]["problem"] == "projects to 640, the model's width is 576"
    assert not needs_choice(facts)  # exactly one fits: Automatic takes it, no question


class _Parent(QWidget):
    pass


def _opener(qtbot, facts: dict[str, Any], switched: list, choose_file=None) -> tuple[ModelOpener, QWidget]:
    parent = _Parent()
    qtbot.addWidget(parent)
    opener = ModelOpener(parent, lambda path, f: switched.append((path, f)),
                         check=lambda p: {"path": p, **facts},
                         choose=lambda _parent, _start: "/m/model.gguf")
    return opener, parent


def test_a_folder_whose_projectors_do_not_fit_asks_and_the_choice_goes_to_the_load(qtbot) -> None:
    switched: list = []
    facts = {"projectors": [_fact("mmproj-wrong.gguf", "projects to 640, the model's width is 576")]}
    opener, _ = _opener(qtbot, facts, switched)
    opener.open_dialog()
    qtbot.waitUntil(lambda: opener.projector_dialog is not None, timeout=5000)
    dialog = opener.projector_dialog
    assert dialog.isVisible() and "do not fit" in dialog.findChild(QLabel, "projectorIntro").text()
    assert "projects to 640" in dialog.buttons["/m/mmproj-wrong.gguf"].text()
    assert "none fits" in dialog.buttons["auto"].text() and dialog.buttons["auto"].isChecked()
    assert switched == []  # nothing loads before the answer
    dialog.buttons["off"].setChecked(True)
    with qtbot.waitSignal(opener.checked, timeout=5000) as sig:
        dialog.accept()
    assert sig.args == ["/m/model.gguf", True]
    assert switched[0][1]["load_options"] == {"mmproj": "off"}


def test_cancelling_the_step_opens_nothing(qtbot) -> None:
    switched: list = []
    opener, _ = _opener(qtbot, {"projectors": [_fact("mmproj-a.gguf"), _fact("mmproj-b.gguf")]}, switched)
    opener.open_dialog()
    qtbot.waitUntil(lambda: opener.projector_dialog is not None, timeout=5000)
    assert "Several projector files" in opener.projector_dialog.findChild(QLabel, "projectorIntro").text()
    with qtbot.waitSignal(opener.checked, timeout=5000) as sig:
        opener.projector_dialog.reject()
    assert sig.args == ["/m/model.gguf", False] and switched == []


def test_a_clear_folder_opens_at_once_unless_the_step_is_asked_for(qtbot) -> None:
    switched: list = []
    opener, _ = _opener(qtbot, {"projectors": [_fact("mmproj-a.gguf")]}, switched)
    with qtbot.waitSignal(opener.checked, timeout=5000):
        opener.open_dialog()
    assert opener.projector_dialog is None and "load_options" not in switched[0][1]
    # File › Open Model with Projector…: the step, and "Another file…" anywhere on disk
    picked = []
    opener.open_dialog(ask_projector=True)
    qtbot.waitUntil(lambda: opener.projector_dialog is not None, timeout=5000)
    dialog = opener.projector_dialog
    dialog._choose_file = lambda _parent, start: picked.append(start) or "/elsewhere/mmproj-x.gguf"
    dialog.other_button.click()
    assert picked == ["/m"] and "mmproj-x.gguf" in dialog.other_button.text()
    assert dialog.choice() == "/elsewhere/mmproj-x.gguf"
    with qtbot.waitSignal(opener.checked, timeout=5000):
        dialog.accept()
    assert switched[-1][1]["load_options"] == {"mmproj": "/elsewhere/mmproj-x.gguf"}


def test_the_dialog_starts_on_the_current_choice(qtbot) -> None:
    facts = {"projectors": [_fact("mmproj-a.gguf")]}
    d = ProjectorDialog("/m/model.gguf", facts, current="off")
    qtbot.addWidget(d)
    assert d.choice() == "off"
    d = ProjectorDialog("/m/model.gguf", facts, current="/far/mmproj-z.gguf")
    qtbot.addWidget(d)
    assert d.choice() == "/far/mmproj-z.gguf" and "mmproj-z.gguf" in d.other_button.text()


def test_a_choice_is_remembered_per_model(ui) -> None:
    settings = ui.settings()
    assert remembered_projector(settings, "/m/a.gguf") is None
    remember_projector(settings, "/m/a.gguf", "/m/mmproj-a.gguf")
    remember_projector(settings, "/m/b.gguf", "off")
    assert remembered_projector(settings, "/m/a.gguf") == "/m/mmproj-a.gguf"
    assert remembered_projector(settings, "/m/b.gguf") == "off"
    remember_projector(settings, "/m/a.gguf", "auto")  # Automatic: the folder decides again
    assert remembered_projector(settings, "/m/a.gguf") is None


# -- in the window (fake engines): the outcome of a load with a chosen projector ------------------

def _vision_backend(name: str, vision: bool, label: str):
    from qa_fakes import RecordingBackend

    class VisionBackend(RecordingBackend):
        def model_info(self) -> dict[str, Any]:
            return {**super().model_info(), "vision": vision, "vision_label": label}

    return VisionBackend(model_name=name)


def _window_opening(ui, loads, mmproj: str) -> tuple[Any, list[tuple[str, Any]]]:
    """A window over a text model whose factory loads `loads` (recording what it was asked),
    told to open /m/vlm.gguf with the projector `mmproj`."""
    from qa_fakes import issue6_window
    from ui_fakes import fake_factory

    asked: list[tuple[str, Any]] = []

    def model_factory(path: str, mmproj: str | None = None, **_: Any):
        asked.append((path, mmproj))
        return fake_factory(loads)

    w = issue6_window(ui, _vision_backend("first", False, "no (no projector)"), model_factory=model_factory)
    w.model_opener._check = lambda p: {"path": p}
    w.model_opener.open_path("/m/vlm.gguf", mmproj=mmproj)
    return w, asked


def test_a_refused_projector_is_a_message_and_the_model_is_open_for_text(ui, qtbot) -> None:
    from ui_fakes import send, wait_idle

    refused = _vision_backend("vlm", False, "no (the projector mmproj-wrong.gguf does not fit vlm "
                                            "(llama.cpp: mismatch between text model (n_embd = 576) and mmproj (n_embd = 640)))")
    w, asked = _window_opening(ui, refused, "/m/mmproj-wrong.gguf")
    qtbot.waitUntil(lambda: w.models.projector_box is not None, timeout=5000)
    box = w.models.projector_box
    assert asked == [("/m/vlm.gguf", "/m/mmproj-wrong.gguf")]
    assert box.isVisible() and box.text() == "The projector mmproj-wrong.gguf cannot be used with vlm.gguf"
    assert "n_embd = 640" in box.informativeText() and "open for text" in box.informativeText()
    assert remembered_projector(ui.settings(), "/m/vlm.gguf") is None  # a refused choice is not kept
    pane = w.area.current_pane()
    send(qtbot, pane, "hello")  # the model runs for text
    wait_idle(qtbot, pane)
    assert pane.messages[-1].role == "assistant" and pane.messages[-1].content


def test_a_working_choice_is_remembered_and_used_for_the_next_load(ui, qtbot) -> None:
    works = _vision_backend("vlm", True, "yes (mmproj-right.gguf, mlp)")
    w, asked = _window_opening(ui, works, "/m/mmproj-right.gguf")
    qtbot.waitUntil(lambda: w.bridge.model_info.get("name") == "vlm", timeout=5000)
    assert w.models.projector_box is None
    assert remembered_projector(ui.settings(), "/m/vlm.gguf") == "/m/mmproj-right.gguf"
    w.switch_model("/m/first.gguf")  # another model, then back: the choice comes with it
    qtbot.waitUntil(lambda: len(asked) == 2 and w.bridge.backend_state == "ready", timeout=5000)
    w.switch_model("/m/vlm.gguf")
    qtbot.waitUntil(lambda: len(asked) == 3, timeout=5000)
    assert asked == [("/m/vlm.gguf", "/m/mmproj-right.gguf"), ("/m/first.gguf", None),
                     ("/m/vlm.gguf", "/m/mmproj-right.gguf")]


def test_model_info_has_a_projector_button_that_asks_for_the_loaded_model(ui, qtbot) -> None:
    from qa_fakes import issue6_window
    from ui_fakes import fake_factory

    backend = _vision_backend("vlm", True, "yes (mmproj-right.gguf, mlp)")
    w = issue6_window(ui, backend, model_factory=lambda path, **_: fake_factory(backend))
    w.model_opener._check = lambda p: {"path": p, "projectors": [_fact("mmproj-right.gguf")]}
    w.findChild(type(w.open_model_action), "actionModelInfo").trigger()
    dialog = w.findChild(ModelInfoDialog)
    assert dialog.values["Vision"].text() == "yes (mmproj-right.gguf, mlp)"
    button = dialog.findChild(QWidget, "projectorButton")
    assert button is not None
    button.click()
    qtbot.waitUntil(lambda: w.model_opener.projector_dialog is not None, timeout=5000)
    assert w.model_opener.projector_dialog.buttons["/m/mmproj-right.gguf"].text().startswith("mmproj-right.gguf — fits")


# -- the window's factory over the real engine: the synthetic pair and a mismatched projector ----

@pytest.mark.real_model
def test_the_window_factory_loads_the_chosen_projector_or_opens_for_text(ui, folder: Path,
                                                                          default_model_path: Path) -> None:
    from turbospark_app.ui.app import app_model_factory

    factory = app_model_factory(ui.settings(), max_context=512)
    model = str(folder / default_model_path.name)
    right = factory(model, mmproj=str(folder / "mmproj-right.gguf"))()
    try:
        info = right.model_info()
        assert info["vision"] is True and info["vision_label"].startswith("yes (mmproj-right.gguf")
    finally:
        right.close()
    wrong = factory(model, mmproj=str(folder / "mmproj-wrong.gguf"))()
    try:
        info = wrong.model_info()
        assert info["vision"] is False and "mmproj-wrong.gguf does not fit" in info["vision_label"]
        assert not wrong.has_vision  # open for text (the engine tests run its turns)
    finally:
        wrong.close()
    off = factory(model, mmproj="off")()
    try:
        assert off.model_info()["vision_label"] == "no (image input is off)"
    finally:
        off.close()


@pytest.mark.real_model
def test_in_the_window_a_mismatched_projector_opens_the_real_model_for_text(ui, qtbot, folder: Path,
                                                                            default_model_path: Path) -> None:
    """End to end: Open Model with the wrong projector (its step, "Another file…") loads the real
    model on the engine thread; the message gives llama.cpp's reason; the pane still answers."""
    from qa_fakes import issue6_window
    from ui_fakes import send, wait_idle

    from turbospark_app.ui.app import app_model_factory

    w = issue6_window(ui, _vision_backend("first", False, "no (no projector)"),
                      model_factory=app_model_factory(ui.settings(), max_context=2048))
    model = str(folder / default_model_path.name)
    w.model_opener.open_path(model, ask_projector=True)
    qtbot.waitUntil(lambda: w.model_opener.projector_dialog is not None, timeout=60000)
    dialog = w.model_opener.projector_dialog
    assert dialog.buttons[str(folder / "mmproj-right.gguf")].text().startswith("mmproj-right.gguf — fits")
    dialog._choose_file = lambda _parent, _start: str(folder / "mmproj-wrong.gguf")
    dialog.other_button.click()
    dialog.accept()
    qtbot.waitUntil(lambda: w.models.projector_box is not None, timeout=120000)
    assert "mmproj-wrong.gguf" in w.models.projector_box.text()
    assert "mismatch" in w.models.projector_box.informativeText()  # llama.cpp's own words
    assert w.bridge.model_info["vision"] is False
    pane = w.area.current_pane()
    send(qtbot, pane, "Hello")
    wait_idle(qtbot, pane, timeout=120000)
    assert pane.messages[-1].role == "assistant" and pane.messages[-1].content
