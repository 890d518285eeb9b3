"""The Kernels setting: how the compact engine computes (exact prompt / int8 / exact everywhere).

Stored app-wide in QSettings (`engine/kernels`). The `--kernels` flag and $TURBOSPARK_KERNELS
win over it (model.kernels_choice); while one does, the Settings dialog shows the control
disabled, its tooltip naming the flag or variable. The float32 weights have no kernel mode: the
control is disabled while Weights is float32. A change made in the dialog reloads the current
model (ui.model_switch); the setting is stored once that load succeeds. Read and store it with
`KERNELS_SETTING.load/save/current` (ui.load_setting).
"""

from __future__ import annotations

from PySide6.QtWidgets import QWidget

from ..model.choice.kernels import KERNELS, KernelsChoice
from .load_setting import ChoiceField, LoadSetting

KERNELS_KEY = "engine/kernels"
KERNEL_LABELS = {
    "exact-prompt": "Exact prompt (default)",
    "int8": "Fast (int8, like llama.cpp)",
    "exact": "Exact everywhere (slowest, reproducible)",
}
KERNEL_NAMES = {"exact-prompt": "exact-prompt", "exact": "exact", "int8": "int8"}  # in sentences
KERNEL_TRADEOFFS = {
    "exact-prompt": "The prompt is computed exactly; replies use int8 activations like llama.cpp "
                    "(near llama.cpp's speed, answers match the reference).",
    "int8": "int8 activations everywhere, as llama.cpp: the fastest, results differ slightly "
            "from the float32 reference.",
    "exact": "Every token computed exactly: Regenerate at temperature 0 repeats a reply bit for "
             "bit; the slowest replies.",
}
KERNELS_TIP = ("How the compact weights are multiplied. Exact prompt (default): float32-exact results "
               "for the prompt, int8 activations for the reply. Fast: llama.cpp's int8 numerics for "
               "every token, the quickest. Exact everywhere: every token exact and reproducible, the "
               "slowest. Changing it reloads the model.")
F32_NOTE = "Kernels apply to compact weights; the float32 reference has none."
KERNELS_SETTING = LoadSetting(KERNELS_KEY, KERNELS, "kernels", KERNEL_LABELS, KERNEL_NAMES, KERNELS_TIP)


class KernelsField(ChoiceField):
    """The dialog's Kernels combo box and its note: the picked mode's trade-off, and what OK does.
    Follows the Weights control (`follow_weights`): disabled while float32 is picked there."""

    def __init__(self, choice: KernelsChoice, model_loaded: bool, weights: str, parent: QWidget) -> None:
        """`choice`: the current one; `weights`: the weight mode picked in the dialog."""
        self.weights = weights
        super().__init__(KERNELS_SETTING, choice, model_loaded, parent)
        self.follow_weights(weights)

    def follow_weights(self, weights: str) -> None:
        """The Weights control shows `weights`: kernels only apply to compact ones."""
        self.weights = weights
        self.combo.setEnabled(not self.choice.overridden and weights == "compact")
        self.update_note()

    def changed(self) -> bool:
        return self.weights == "compact" and super().changed()

    def note_text(self) -> str | None:
        if self.weights != "compact":
            return F32_NOTE
        lines = [super().note_text(), KERNEL_TRADEOFFS[self.mode()]]
        return "\n".join(line for line in lines if line)
