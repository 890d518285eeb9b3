"""The Speculation setting: whether a reply decoding alone drafts tokens by prompt lookup.

Stored app-wide in QSettings (`engine/speculation`). The `--speculation` flag and
$TURBOSPARK_SPECULATION win over it (model.choice.speculation); while one does, the Settings
dialog shows the control disabled. Unlike Weights and Kernels it reloads nothing: the window's
next reply uses the new value (the engine bridge stamps it on every pane's turn); the API
server inside the window keeps the value its model was loaded with until the next load.
"""

from __future__ import annotations

from PySide6.QtWidgets import QWidget

from ...model.choice.speculation import SPECULATION, SpeculationChoice
from .load import LoadSetting, NoReloadField

SPECULATION_KEY = "engine/speculation"
SPECULATION_LABELS = {"off": "Off (one token per pass)", "lookup": "Prompt lookup"}
SPECULATION_NAMES = {"off": "off", "lookup": "prompt lookup"}
SPECULATION_TIP = ("Prompt lookup: while a reply decodes alone, its next tokens are guessed by "
                   "finding its last words in the prompt or the reply so far, and several are "
                   "checked in one pass. Much faster when the reply quotes or edits the prompt "
                   "(code edits, summaries with quotes, answers from a pasted document); about "
                   "the same otherwise. Off while other replies are decoding.")
SPECULATION_SETTING = LoadSetting(SPECULATION_KEY, SPECULATION, "speculation", SPECULATION_LABELS,
                                  SPECULATION_NAMES, SPECULATION_TIP)


class SpeculationField(NoReloadField):
    """The dialog's Speculation combo box; its note says when a change applies."""

    def __init__(self, choice: SpeculationChoice, parent: QWidget) -> None:
        super().__init__(SPECULATION_SETTING, choice, True, parent)
