"""Switching the engine's model: File › Open Model… and the Weights setting (compact / f32).

Both take the same path: the file is checked in a worker (model_dialogs.ModelOpener), the user
confirms when replies are being generated (they are stopped and kept as stopped), then the
engine thread loads the new backend (bridge.switch_backend closes the old one first, so two
models are never held at once). The GUI thread only builds the factory; the load runs there.

A load that fails after the checks (memory for float32 weights, a kernel that refuses a
tensor...) must not leave the user without the model that worked: the previous model is loaded
again and a message says what failed. A weights change is stored in QSettings only once the
model runs in the new mode, so a refused mode is not remembered for the next start.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from PySide6.QtCore import QObject, QSettings
from PySide6.QtWidgets import QMessageBox, QWidget

from ..model.weights_choice import WeightsChoice
from ..service.engine_thread import BackendFactory
from .bridge import EngineBridge
from .first_run import remember_model
from .model_dialogs import ModelOpener
from .settings_dialog import load_session_slots
from .weights_setting import WEIGHT_NAMES, current_weights, save_weights_setting

# A GGUF path (and options: chat_template="chatml", weights="f32") -> what loads it on the engine thread
ModelFactory = Callable[..., BackendFactory]


@dataclass(frozen=True)
class ModelTarget:
    """A model to run: its file and the factory's options (chat_template="chatml", weights=...)."""

    path: str
    options: dict[str, Any] = field(default_factory=dict)
    weights_kind: str | None = None  # the mode it ran in, once loaded


class ModelSwitcher(QObject):
    """See the module docstring. `busy_panes()` lists the panes generating a reply now."""

    def __init__(self, window: QWidget, bridge: EngineBridge, settings: QSettings,
                 model_factory: ModelFactory | None, busy_panes: Callable[[], list[Any]],
                 weights_flag: str | None = None) -> None:
        super().__init__(window)
        self._window = window
        self._bridge = bridge
        self._settings = settings
        self.model_factory = model_factory
        self._busy_panes = busy_panes
        self.weights_flag = weights_flag
        self.opener = ModelOpener(window, self.switch_model)
        self.current: ModelTarget | None = None  # what the engine runs (or last ran)
        self._pending: ModelTarget | None = None  # asked for, not loaded yet
        self._restoring = False  # the pending load puts the previous model back
        self.failure_box: QMessageBox | None = None

    def weights(self) -> WeightsChoice:
        """The weight choice the next load uses (flag > environment > setting)."""
        return current_weights(self._settings, self.weights_flag)

    # -- asking for a switch ----------------------------------------------------------------

    def open_dialog(self) -> None:
        """File › Open Model…: pick a GGUF; it is checked before the engine switches to it."""
        current = self._bridge.model_info.get("path")
        self.opener.open_dialog(str(Path(current).parent) if current else "")

    def change_weights(self, mode: str) -> None:
        """The Weights setting changed: reload the current model in `mode` (checked first, like
        Open Model). With no model to reload, store it: the next load uses it."""
        target = self._pending or self.current
        if self.model_factory is None or target is None:
            save_weights_setting(self._settings, mode)
            return
        if not self.opener.open_path(target.path, chat_template=target.options.get("chat_template"), weights=mode):
            save_weights_setting(self._settings, mode)  # an Open Model check is running: it loads in `mode`

    def switch_model(self, path: str, facts: dict[str, Any] | None = None) -> None:
        """Load the (checked) GGUF at `path`. Running replies are stopped first and saved as
        stopped; conversations keep their text; the new model gets fresh KV sessions and never
        sees the old model's token ids (see model_dialogs). Remembered for the next start."""
        if self.model_factory is None:
            return
        facts = facts or {}
        options = {key: facts[fact] for key, fact in (("chat_template", "chat_template_choice"),
                                                       ("weights", "weights_choice")) if facts.get(fact)}
        busy = self._busy_panes()
        if busy:
            replies = f"{len(busy)} repl{'ies' if len(busy) > 1 else 'y'} being generated will be stopped"
            if "weights" in options and self.current is not None and self.current.path == path:
                question = f"Reload {Path(path).name} with {WEIGHT_NAMES[options['weights']]} weights?"
            else:
                question = f"Switch to {Path(path).name}?"
            box = QMessageBox(QMessageBox.Icon.Question, "Open Model", f"{question} {replies} (and kept as stopped).",
                              QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel, self._window)
            box.setObjectName("switchModelBox")
            box.accepted.connect(lambda: self._switch_now(ModelTarget(path, options)))
            box.open()
            return
        self._switch_now(ModelTarget(path, options))

    def _switch_now(self, target: ModelTarget) -> None:
        assert self.model_factory is not None
        self._pending = target
        self._bridge.switch_backend(self.model_factory(target.path, **target.options),
                                    max_active=load_session_slots(self._settings))
        remember_model(self._settings, target.path)

    # -- the outcome ------------------------------------------------------------------------

    def backend_state_changed(self, state: str) -> bool:
        """Follow a load's outcome. True when this told the user itself: a failed switch is
        being undone (the window shows no other message)."""
        info = self._bridge.model_info
        if state == "ready":
            loaded, self._pending, self._restoring = self._pending, None, False
            kind = info.get("weights_kind")
            if loaded is not None:
                self.current = ModelTarget(loaded.path, loaded.options, kind)
                weights = loaded.options.get("weights")
                if weights and (kind is None or kind == weights):
                    save_weights_setting(self._settings, weights)
            elif self.current is None and info.get("path"):
                self.current = ModelTarget(str(info["path"]), {}, kind)  # the model loaded at start
            return False
        if state != "failed":
            return False
        failed, self._pending = self._pending, None
        previous = self.current
        if failed is None or previous is None or self._restoring or self.model_factory is None:
            self._restoring = False
            return False
        self._explain_failure(failed, previous, self._bridge.backend_error or "unknown error")
        self._restoring = True
        # The previous model's own options, minus a weights mode it was asked in: the setting
        # (unchanged by the failed attempt) says the mode it ran in.
        self._switch_now(ModelTarget(previous.path, {k: v for k, v in previous.options.items() if k != "weights"}))
        return True

    def _explain_failure(self, failed: ModelTarget, previous: ModelTarget, error: str) -> None:
        weights = failed.options.get("weights")
        name = Path(failed.path).name
        what = f"{name} could not be loaded" + (f" with {WEIGHT_NAMES[weights]} weights" if weights else "")
        back = Path(previous.path).name
        mode = self.weights().mode  # the setting, unchanged by the failed attempt (or the override)
        text = (f"{what}:\n{error}\n\nThe model you had, {back} ({WEIGHT_NAMES[mode]} weights), "
                "is being loaded again. Your conversations are unchanged.")
        if weights:
            text += f" The Weights setting stays {WEIGHT_NAMES[mode]}."
        box = QMessageBox(QMessageBox.Icon.Warning, "Model", what, QMessageBox.StandardButton.Ok, self._window)
        box.setObjectName("switchFailedBox")
        box.setInformativeText(text)
        self.failure_box = box
        box.open()
