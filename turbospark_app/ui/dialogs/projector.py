"""Choosing a model's vision projector (mmproj): a step of File › Open Model… and Model Info's
"Projector…" button.

The choices: Automatic (the `mmproj*.gguf` beside the model whose width matches it, what a plain
Open Model does), each projector file beside the model with what its header says (fits, or
"projects to 768, the model's width is 576"), another file anywhere, or None (text only). The
dialog only chooses: the model is then loaded with the choice, and a projector llama.cpp refuses
leaves it open for text with a message (model_switch). Open Model asks on its own when the
folder holds projector files and the automatic choice is not clear: none of them fits, or more
than one does (the peers' commonest "images silently do nothing").

`projector_facts` runs in Open Model's check thread (it reads the files' headers).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import (
    QButtonGroup,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QLabel,
    QRadioButton,
    QVBoxLayout,
    QWidget,
)

AUTO, OFF = "auto", "off"
MMPROJ_FILTER = "Projector files (mmproj*.gguf *.gguf);;All files (*)"
_REMEMBERED = "vision/projectors"  # QSettings: {model path: chosen projector path or "off"}


def projector_facts(model_path: str | Path, n_embd: int) -> list[dict[str, Any]]:
    """The projector files beside the model, each as {path, name, width, kind, problem}."""
    from ...model.llamacpp.vision import projectors_beside

    try:
        found = projectors_beside(Path(model_path), n_embd)
    except OSError:  # a folder that cannot be listed: no projector files to offer
        return []
    return [{"path": str(f.path), "name": f.path.name, "width": f.width, "kind": f.kind,
             "problem": f.problem} for f in found]


def needs_choice(facts: Mapping[str, Any]) -> bool:
    """Open Model asks which projector: files are beside the model and none, or several, fit."""
    found = facts.get("projectors") or []
    fitting = [p for p in found if not p.get("problem")]
    return bool(found) and len(fitting) != 1


def choose_projector_file(parent: QWidget | None, start: str) -> str | None:
    """The native open-file dialog for a projector; None when cancelled."""
    path, _ = QFileDialog.getOpenFileName(parent, "Choose a Vision Projector", start, MMPROJ_FILTER)
    return path or None


def remembered_projector(settings: QSettings, model_path: str | Path) -> str | None:
    """The projector chosen for this model before ("off", a path), None: never chosen."""
    table = settings.value(_REMEMBERED, {}) or {}
    value = table.get(str(model_path)) if isinstance(table, dict) else None
    return value if isinstance(value, str) and value else None


def remember_projector(settings: QSettings, model_path: str | Path, choice: str) -> None:
    """Keep the choice for this model ("auto" forgets it: the folder decides again)."""
    table = settings.value(_REMEMBERED, {}) or {}
    table = dict(table) if isinstance(table, dict) else {}
    if choice == AUTO:
        table.pop(str(model_path), None)
    else:
        table[str(model_path)] = choice
    settings.setValue(_REMEMBERED, table)


def _line(p: Mapping[str, Any]) -> str:
    if p.get("problem"):
        return f"{p['name']} — does not fit: {p['problem']}"
    return f"{p['name']} — fits ({p.get('kind', '?')}, width {p.get('width')})"


class ProjectorDialog(QDialog):
    """Which projector `model_name` opens with; `choice()` after it is accepted: "auto",
    "off" or a file's path."""

    def __init__(self, model_path: str, facts: Mapping[str, Any], parent: QWidget | None = None,
                 current: str | None = None,
                 choose_file: Callable[[QWidget | None, str], str | None] = choose_projector_file) -> None:
        super().__init__(parent)
        self.setObjectName("projectorDialog")
        self.setWindowTitle("Vision Projector")
        self._model_path = model_path
        self._choose_file = choose_file
        self._other: str | None = None
        found = list(facts.get("projectors") or [])
        fitting = [p for p in found if not p.get("problem")]
        name = Path(model_path).name
        if not found:
            intro = (f"No projector file (mmproj*.gguf) is beside {name}. A vision model needs "
                     "its projector to take images; without one it opens for text.")
        elif not fitting:
            intro = (f"The projector files beside {name} do not fit it (a projector must output the "
                     "model's width). Choose the right one, or open it for text only.")
        elif len(fitting) > 1:
            intro = f"Several projector files beside {name} fit it. Which one is its own?"
        else:
            intro = f"Which vision projector should {name} open with?"
        layout = QVBoxLayout(self)
        text = QLabel(intro, self)
        text.setWordWrap(True)
        text.setObjectName("projectorIntro")
        layout.addWidget(text)
        self.group = QButtonGroup(self)
        auto_text = ("Automatic: " + (fitting[0]["name"] if len(fitting) == 1 else
                                       f"the first that fits, {fitting[0]['name']}" if fitting else
                                       "none fits, the model opens for text"))
        self.buttons: dict[str, QRadioButton] = {}
        self._add(AUTO, auto_text, layout)
        for p in found:
            self._add(p["path"], _line(p), layout)
        self._add(OFF, "None: text only (images are refused)", layout)
        self.other_button = QRadioButton("Another file…", self)
        self.other_button.setObjectName("projectorOther")
        self.group.addButton(self.other_button)
        layout.addWidget(self.other_button)
        self.other_button.clicked.connect(self._pick_other)
        chosen = current if current in self.buttons else AUTO
        if current and current not in self.buttons and current not in (AUTO, OFF):
            self._other = current
            self.other_button.setText(f"Another file: {Path(current).name}")
            self.other_button.setChecked(True)
        else:
            self.buttons[chosen].setChecked(True)
        box = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel, self)
        box.accepted.connect(self.accept)
        box.rejected.connect(self.reject)
        layout.addWidget(box)

    def _add(self, key: str, text: str, layout: QVBoxLayout) -> None:
        button = QRadioButton(text, self)
        button.setObjectName(f"projector:{key}")
        self.group.addButton(button)
        self.buttons[key] = button
        layout.addWidget(button)

    def _pick_other(self) -> None:
        path = self._choose_file(self, str(Path(self._model_path).parent))
        if path:
            self._other = path
            self.other_button.setText(f"Another file: {Path(path).name}")
        elif self._other is None:  # nothing picked: back to the automatic choice
            self.buttons[AUTO].setChecked(True)

    def choice(self) -> str:
        """"auto", "off" or the chosen projector's path."""
        if self.other_button.isChecked() and self._other:
            return self._other
        for key, button in self.buttons.items():
            if button.isChecked():
                return key
        return AUTO
