"""An app-wide load option in QSettings (the Weights and Kernels settings) and its control in
the Settings dialog.

The option's `--flag` and environment variable win over the stored value
(model.load_choice); while one does, the control is disabled, its tooltip naming the flag or
variable. A change made in the dialog reloads the current model (ui.services.model_switch), which stores
the value once that load succeeds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QComboBox, QLabel, QWidget

from ...model.choice.common import ChoiceSpec, LoadChoice
from .store import read_json, write_json


@dataclass(frozen=True)
class LoadSetting:
    """One option: where it is stored, its modes' labels (combo box) and names (in sentences:
    "reloads the model with {name} {what}"), and the control's tooltip."""

    key: str  # QSettings key
    spec: ChoiceSpec
    what: str  # "weights", "kernels"
    labels: Mapping[str, str]
    names: Mapping[str, str]
    tip: str

    def load(self, settings: QSettings) -> str:
        """The stored mode (the default when unset or unreadable)."""
        value = read_json(settings, self.key, self.spec.default)
        return value if value in self.spec.modes else self.spec.default

    def save(self, settings: QSettings, mode: str) -> None:
        """Store the mode (used by every later load)."""
        if mode not in self.spec.modes:
            raise ValueError(f"unknown {self.spec.noun} {mode!r}")
        write_json(settings, self.key, mode)
        settings.sync()

    def current(self, settings: QSettings, flag: str | None = None) -> LoadChoice:
        """What the next load uses: `flag` > the environment variable > the setting > default.
        Raises LoadChoiceError for a bad environment value (the app refuses to start on one)."""
        return self.spec.choose(flag, self.load(settings))


class ChoiceField:
    """The dialog's combo box for one LoadSetting and the note under it (owned by the dialog)."""

    def __init__(self, setting: LoadSetting, choice: LoadChoice, model_loaded: bool, parent: QWidget) -> None:
        """`choice`: the current one; `model_loaded`: False when no model is loaded (the change
        applies at the next load)."""
        self.setting = setting
        self.choice = choice
        self.model_loaded = model_loaded
        self.combo = QComboBox(parent)
        self.combo.setObjectName(setting.what)
        for mode, label in setting.labels.items():  # (in the labels' order)
            self.combo.addItem(label, mode)
        self.combo.setCurrentIndex(self.combo.findData(choice.mode))
        self.note = QLabel(parent)
        self.note.setObjectName(f"{setting.what}Note")
        self.note.setWordWrap(True)
        if choice.overridden:
            self.combo.setEnabled(False)
            flag = setting.spec.flag
            how = f"the {flag} flag" if choice.source == flag else f"the {choice.source} environment variable"
            self.combo.setToolTip(f"Set to {choice.mode} by {how}, which wins over this setting. "
                                  f"Start TurboSpark without it to choose here.")
        else:
            self.combo.setToolTip(setting.tip)
        self.combo.currentIndexChanged.connect(self.update_note)
        self.update_note()

    def mode(self) -> str:
        """The mode picked."""
        return str(self.combo.currentData())

    def changed(self) -> bool:
        """The user picked another mode than the current one (never while overridden)."""
        return not self.choice.overridden and self.mode() != self.choice.mode

    def note_text(self) -> str | None:
        """The note under the control; None hides it."""
        if self.choice.overridden:
            return f"Set by {self.choice.source}={self.choice.mode}, which wins over this setting."
        if not self.changed():
            return None
        name = f"{self.setting.names[self.mode()]} {self.setting.what}"
        if not self.model_loaded:
            return f"The next model load uses {name}."
        return (f"OK reloads the model with {name} (a few seconds; replies being "
                "generated are stopped first, conversations stay).")

    def update_note(self) -> None:
        text = self.note_text()
        self.note.setText(text or "")
        self.note.setVisible(text is not None)


class NoReloadField(ChoiceField):
    """A ChoiceField for a setting the next reply takes up without a reload (Speculation,
    Stream gap)."""

    def note_text(self) -> str | None:
        if self.choice.overridden or not self.changed():
            return super().note_text()
        return "The next reply uses it (no reload)."
