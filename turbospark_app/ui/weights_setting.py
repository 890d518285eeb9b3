"""The Weights setting: compact (the GGUF's blocks, default) or the float32 reference.

Stored app-wide in QSettings (`engine/weights`). The `--weights` flag and $TURBOSPARK_WEIGHTS
win over it (model.weights_choice); while one does, the Settings dialog shows the control
disabled, its tooltip naming the flag or variable. A change made in the dialog reloads the
current model in the new mode (ui.model_switch); the setting is stored once that load succeeds.
"""

from __future__ import annotations

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QComboBox, QLabel, QWidget

from ..model.weights_choice import DEFAULT_WEIGHTS, WEIGHT_MODES, WEIGHTS_FLAG, WeightsChoice, choose_weights
from .settings import read_json, write_json

WEIGHTS_KEY = "engine/weights"
WEIGHT_LABELS = {
    "compact": "Compact (GGUF blocks, default)",
    "f32": "Float32 reference (about 5x the memory, slower decode)",
}
WEIGHT_NAMES = {"compact": "compact", "f32": "float32"}  # in sentences
WEIGHTS_TIP = ("How the model's weights are held in memory. Compact keeps the GGUF's 4/8-bit blocks "
               "(about the file's size, fastest decode). Float32 is the reference implementation: "
               "every weight expanded to 32 bits, about 5x the memory and a slower decode; for checking "
               "results or as a fallback. Changing it reloads the model.")


def load_weights_setting(settings: QSettings) -> str:
    """The stored weight mode ("compact" when unset or unreadable)."""
    value = read_json(settings, WEIGHTS_KEY, DEFAULT_WEIGHTS)
    return value if value in WEIGHT_MODES else DEFAULT_WEIGHTS


def save_weights_setting(settings: QSettings, mode: str) -> None:
    """Store the weight mode (used by every later load)."""
    if mode not in WEIGHT_MODES:
        raise ValueError(f"unknown weight mode {mode!r}")
    write_json(settings, WEIGHTS_KEY, mode)
    settings.sync()


def current_weights(settings: QSettings, flag: str | None = None) -> WeightsChoice:
    """What the next load uses: `flag` (--weights) > $TURBOSPARK_WEIGHTS > the setting.
    Raises WeightsChoiceError for a bad environment value (the app refuses to start on one)."""
    return choose_weights(flag, load_weights_setting(settings))


class WeightsField:
    """The dialog's Weights combo box and the note under it (owned by the dialog)."""

    def __init__(self, choice: WeightsChoice, loaded: str | None, parent: QWidget) -> None:
        """`choice`: the current one; `loaded`: the loaded model's mode (None: no model loaded,
        the change applies at the next load)."""
        self.choice = choice
        self.loaded = loaded
        self.combo = QComboBox(parent)
        self.combo.setObjectName("weights")
        for mode in WEIGHT_MODES:
            self.combo.addItem(WEIGHT_LABELS[mode], mode)
        self.combo.setCurrentIndex(self.combo.findData(choice.mode))
        self.note = QLabel(parent)
        self.note.setObjectName("weightsNote")
        self.note.setWordWrap(True)
        if choice.overridden:
            self.combo.setEnabled(False)
            how = "the --weights flag" if choice.source == WEIGHTS_FLAG else f"the {choice.source} environment variable"
            self.combo.setToolTip(f"Set to {choice.mode} by {how}, which wins over this setting. "
                                  f"Start TurboSpark without it to choose here.")
            self.note.setText(f"Set by {choice.source}={choice.mode}, which wins over this setting.")
        else:
            self.combo.setToolTip(WEIGHTS_TIP)
        self.combo.currentIndexChanged.connect(self._update_note)
        self._update_note()

    def mode(self) -> str:
        """The mode picked."""
        return str(self.combo.currentData())

    def changed(self) -> bool:
        """The user picked another mode than the current one (never while overridden)."""
        return not self.choice.overridden and self.mode() != self.choice.mode

    def _update_note(self) -> None:
        if self.choice.overridden:
            self.note.setVisible(True)
            return
        if not self.changed():
            self.note.setVisible(False)
            return
        name = WEIGHT_NAMES[self.mode()]
        if self.loaded is None:
            text = f"The next model load uses {name} weights."
        else:
            text = (f"OK reloads the model with {name} weights (a few seconds; replies being "
                    "generated are stopped first, conversations stay).")
        self.note.setText(text)
        self.note.setVisible(True)
