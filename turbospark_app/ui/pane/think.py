"""A pane's Think toggle (mixed into ConversationPane): reasoning on or off for the conversation,
where the loaded model's chat template has a switch for it (`chat.formats.thinking_switch`:
Qwen3, SmolLM3, GLM, Command R7B and DeepSeek R1's `enable_thinking`, Granite 3.3's `thinking`).

The choice is the conversation's `thinking` setting (saved with its other settings; None until the
user picks: the template's own default), sent to the template as that variable from the next
turn (`generation_settings.to_turn_settings`). The toggle is hidden for a template without a
switch and in raw completion (no template at all).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QHBoxLayout, QToolButton

from ...chat.formats import thinking_switch

TIP_ON = ("Think: the model reasons before it answers (shown collapsed above the reply). "
          "Remembered for this conversation.")
TIP_OFF = "Think is off: the model answers at once, without reasoning first. Remembered for this conversation."


class PaneThink:
    """The Think half of ConversationPane: it provides `_settings`, the bridge and the store."""

    _settings: dict[str, Any]
    _bridge: Any

    def _build_think_toggle(self, row: QHBoxLayout) -> None:
        self.think_toggle = QToolButton(self)  # type: ignore[arg-type]
        self.think_toggle.setObjectName("thinkToggle")
        self.think_toggle.setText("Think")
        self.think_toggle.setCheckable(True)
        self.think_toggle.setAutoRaise(True)
        self.think_toggle.toggled.connect(self.set_thinking)
        row.addWidget(self.think_toggle)
        self._update_think_toggle()

    @property
    def thinking_switch(self) -> tuple[str, bool] | None:
        """The loaded template's thinking switch (variable, default), or None."""
        return thinking_switch((self._bridge.model_info or {}).get("chat_template"))

    @property
    def thinking(self) -> bool | None:
        """Whether the next turn reasons: the conversation's choice, else the template's default;
        None when the template has no switch."""
        switch = self.thinking_switch
        if switch is None:
            return None
        chosen = self._settings.get("thinking")
        return switch[1] if chosen is None else bool(chosen)

    def set_thinking(self, on: bool) -> bool:
        """Reasoning on or off for this conversation (saved at once; from the next turn)."""
        previous = self._settings.get("thinking")
        self._settings = {**self._settings, "thinking": bool(on)}
        if not self._store_settings(self.conversation.system_prompt):  # type: ignore[attr-defined]
            self._settings = {**self._settings, "thinking": previous}  # (said in the pane)
        self._update_think_toggle()
        return self._settings.get("thinking") == bool(on)

    def _update_think_toggle(self) -> None:
        """Shown where the template has a switch (not in raw completion); checked as it stands."""
        state = self.thinking
        self.think_toggle.setVisible(state is not None and not self.raw_mode)  # type: ignore[attr-defined]
        blocked = self.think_toggle.blockSignals(True)  # showing the state is not a user's toggle
        self.think_toggle.setChecked(bool(state))
        self.think_toggle.blockSignals(blocked)
        self.think_toggle.setToolTip(TIP_ON if state else TIP_OFF)
