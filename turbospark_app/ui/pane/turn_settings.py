"""The pane's quick settings form (max new tokens, temperature, rate cap, system prompt).

Every other setting is edited in the Settings dialog (settings_dialog.py); both read and write
the same values (generation_settings.py), stored as JSON in the conversation's `settings`
column, with defaults from QSettings. `values()` returns only the keys this form edits: the
pane merges them over the conversation's other settings.
"""

from __future__ import annotations

from typing import Any, Mapping

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QDoubleSpinBox,
    QFormLayout,
    QLineEdit,
    QSpinBox,
    QWidget,
)

# The one mapping of stored values to TurnSettings (also used by the Settings dialog); kept
# importable from here for the pane and older callers.
from ..prefs.generation import DEFAULTS, merged, to_turn_settings

__all__ = ["DEFAULTS", "TurnSettingsForm", "merged", "to_turn_settings"]


class TurnSettingsForm(QWidget):
    """Max new tokens, temperature, a decode-rate cap (for pacing QA) and the system prompt."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        form = QFormLayout(self)
        form.setContentsMargins(12, 10, 12, 10)
        self.max_new = QSpinBox(minimum=1, maximum=32768, singleStep=64)
        self.max_new.setObjectName("maxNewTokens")
        self.temperature = QDoubleSpinBox(minimum=0.0, maximum=2.0, singleStep=0.1, decimals=2)
        self.temperature.setObjectName("temperature")
        self.temperature.setToolTip("0 = greedy (always the most likely token)")
        self.cap = QDoubleSpinBox(minimum=0.0, maximum=1000.0, singleStep=1.0, decimals=1)
        self.cap.setObjectName("maxTokensPerSec")
        self.cap.setSpecialValueText("no cap")
        self.cap.setSuffix(" tok/s")
        self.cap.setToolTip("Pace the reply: at most this many tokens per second (0 = no cap)")
        self.system_prompt = QLineEdit()
        self.system_prompt.setObjectName("systemPrompt")
        self.system_prompt.setPlaceholderText("the model's default")
        self.system_prompt.setMinimumWidth(260)
        form.addRow("Max new tokens", self.max_new)
        form.addRow("Temperature", self.temperature)
        form.addRow("Rate cap", self.cap)
        form.addRow("System prompt", self.system_prompt)
        for w in (self.max_new, self.temperature, self.cap):
            w.valueChanged.connect(self.changed)
        self.system_prompt.editingFinished.connect(self.changed)

    def set_values(self, values: Mapping[str, Any], system_prompt: str | None) -> None:
        """Show these settings (no `changed` signal)."""
        v = merged(values)
        widgets = (self.max_new, self.temperature, self.cap, self.system_prompt)
        for w in widgets:
            w.blockSignals(True)
        self.max_new.setValue(v["max_new_tokens"])
        self.temperature.setValue(v["temperature"])
        self.cap.setValue(v["max_tokens_per_sec"])
        self.system_prompt.setText(system_prompt or "")
        for w in widgets:
            w.blockSignals(False)

    def values(self) -> dict[str, Any]:
        """The settings this form edits (without the system prompt)."""
        return {
            "max_new_tokens": self.max_new.value(),
            "temperature": round(self.temperature.value(), 2),
            "max_tokens_per_sec": round(self.cap.value(), 1),
        }

    def system_prompt_text(self) -> str | None:
        """The system prompt, None when empty (the template's default)."""
        text = self.system_prompt.text().strip()
        return text or None
