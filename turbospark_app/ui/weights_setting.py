"""The Weights setting: compact (the GGUF's blocks, default) or the float32 reference.

Stored app-wide in QSettings (`engine/weights`). The `--weights` flag and $TURBOSPARK_WEIGHTS
win over it (model.weights_choice); while one does, the Settings dialog shows the control
disabled, its tooltip naming the flag or variable. A change made in the dialog reloads the
current model in the new mode (ui.model_switch); the setting is stored once that load succeeds.
"""

from __future__ import annotations

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QWidget

from ..model.choice.weights import WEIGHTS, WeightsChoice
from .load_setting import ChoiceField, LoadSetting

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
WEIGHTS_SETTING = LoadSetting(WEIGHTS_KEY, WEIGHTS, "weights", WEIGHT_LABELS, WEIGHT_NAMES, WEIGHTS_TIP)


def load_weights_setting(settings: QSettings) -> str:
    """The stored weight mode ("compact" when unset or unreadable)."""
    return WEIGHTS_SETTING.load(settings)


def save_weights_setting(settings: QSettings, mode: str) -> None:
    """Store the weight mode (used by every later load)."""
    WEIGHTS_SETTING.save(settings, mode)


def current_weights(settings: QSettings, flag: str | None = None) -> WeightsChoice:
    """What the next load uses: `flag` (--weights) > $TURBOSPARK_WEIGHTS > the setting.
    Raises WeightsChoiceError for a bad environment value (the app refuses to start on one)."""
    return WEIGHTS_SETTING.current(settings, flag)


class WeightsField(ChoiceField):
    """The dialog's Weights combo box and the note under it (owned by the dialog)."""

    def __init__(self, choice: WeightsChoice, loaded: str | None, parent: QWidget) -> None:
        """`choice`: the current one; `loaded`: the loaded model's mode (None: no model loaded,
        the change applies at the next load)."""
        super().__init__(WEIGHTS_SETTING, choice, loaded is not None, parent)
        self.loaded = loaded
