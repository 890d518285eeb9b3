"""Per-conversation generation settings: a compact form and its conversion to TurnSettings.

Stored as JSON in the conversation's `settings` column; defaults come from QSettings.
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

from ..chat.api import TurnSettings
from ..engine.config import GenerationConfig, RateConfig, Shaping

DEFAULTS: dict[str, Any] = {
    "max_new_tokens": 512,
    "temperature": 0.7,
    "top_p": 0.95,
    "max_tokens_per_sec": 0.0,  # 0 = no cap
}


def merged(values: Mapping[str, Any] | None, defaults: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Known keys only, each from `values`, else `defaults`, else DEFAULTS."""
    out = dict(DEFAULTS)
    for source in (defaults or {}, values or {}):
        for key in DEFAULTS:
            if key in source and source[key] is not None:
                out[key] = type(DEFAULTS[key])(source[key])
    return out


def to_turn_settings(values: Mapping[str, Any], system_prompt: str | None) -> TurnSettings:
    """The TurnSettings for a turn with these settings (the backend adds its pacing probes)."""
    v = merged(values)
    cap = v["max_tokens_per_sec"]
    return TurnSettings(
        generation=GenerationConfig(
            max_new_tokens=v["max_new_tokens"],
            shaping=Shaping(temperature=v["temperature"], top_p=v["top_p"] if v["temperature"] > 0 else 1.0),
            rate=RateConfig(max_tokens_per_sec=cap if cap > 0 else None),
        ),
        system_prompt=(system_prompt or None),
    )


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
        self._top_p = DEFAULTS["top_p"]
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
        self._top_p = v["top_p"]
        for w in widgets:
            w.blockSignals(False)

    def values(self) -> dict[str, Any]:
        """The settings shown (without the system prompt)."""
        return {
            "max_new_tokens": self.max_new.value(),
            "temperature": round(self.temperature.value(), 2),
            "top_p": self._top_p,
            "max_tokens_per_sec": round(self.cap.value(), 1),
        }

    def system_prompt_text(self) -> str | None:
        """The system prompt, None when empty (the template's default)."""
        text = self.system_prompt.text().strip()
        return text or None
