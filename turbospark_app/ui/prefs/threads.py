"""The Threads setting: how many threads llama.cpp computes with (Auto = the performance cores).

Stored app-wide in QSettings (`engine/threads`). The `--threads` flag and $TURBOSPARK_THREADS
win over it (model.choice.threads); while one does, the Settings dialog shows the control
disabled. A change reloads the model (ui.services.model_switch): llama.cpp's context is made with it.
"""

from __future__ import annotations

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QWidget

from ...model.choice.threads import THREADS, ThreadsChoice, choose_threads, performance_cores
from .load import ChoiceField, LoadSetting

THREADS_KEY = "engine/threads"
THREADS_TIP = ("Threads llama.cpp computes with. Auto uses the performance cores: a thread on an "
               "efficiency core or a second thread of a core holds every other thread back at "
               "each step. With the model on the GPU they only run what stays on the CPU.")


def _labels() -> dict[str, str]:
    cores = performance_cores()
    return {mode: (f"Auto ({cores} performance core{'s' if cores != 1 else ''})" if mode == "auto"
                   else mode) for mode in THREADS.modes}


def _names() -> dict[str, str]:
    return {mode: ("automatic" if mode == "auto" else mode) for mode in THREADS.modes}


THREADS_SETTING = LoadSetting(THREADS_KEY, THREADS, "threads", _labels(), _names(), THREADS_TIP)


def current_threads(settings: QSettings, flag: int | None = None) -> ThreadsChoice:
    """What the next load uses: --threads > $TURBOSPARK_THREADS > the setting > auto."""
    return choose_threads(flag, THREADS_SETTING.load(settings))


class ThreadsField(ChoiceField):
    """The dialog's Threads combo box and its note."""

    def __init__(self, choice: ThreadsChoice, model_loaded: bool, parent: QWidget) -> None:
        from ...model.choice.common import LoadChoice

        super().__init__(THREADS_SETTING, LoadChoice(choice.mode, choice.source), model_loaded, parent)
