"""Switching the engine's model: File › Open Model… and the Threads setting (llama.cpp's context
is made with its thread count).

Both take the same path: the file is checked in a worker (model_dialogs.ModelOpener), the user
confirms when replies are being generated (they are stopped and kept as stopped), then the
engine thread loads the new backend (bridge.switch_backend closes the old one first, so two
models are never held at once). The GUI thread only builds the factory; the load runs there.

A load that fails after the checks (memory for the weights or the KV cache, llama.cpp refusing
the file...) must not leave the user without the model that worked: the previous model is
loaded again and a message says what failed. A Threads change is stored in QSettings only once
the model runs with it, so a setting that failed is not remembered for the next start.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from PySide6.QtCore import QObject, QSettings
from PySide6.QtWidgets import QMessageBox, QWidget

from ...model.choice.threads import ThreadsChoice
from ...service.engine_thread import BackendFactory
from .bridge import EngineBridge
from ..dialogs.first_run import remember_model
from ..prefs.load import LoadSetting
from ..dialogs.models import ModelOpener
from ..dialogs.projector import AUTO, OFF, remember_projector, remembered_projector
from ..prefs.dialog import load_session_slots
from ..prefs.kv_cache import CACHE_TYPE_K_SETTING, CACHE_TYPE_V_SETTING, current_cache_types
from ..prefs.threads import THREADS_SETTING, current_threads

# A GGUF path (and options: chat_template="chatml", threads="2") -> what loads it on the engine
# thread
ModelFactory = Callable[..., BackendFactory]
# The load options the settings decide, with what model_info reports for each once loaded
# (None: it reports nothing to compare, a load that succeeds ran with it)
LOAD_SETTINGS: dict[str, tuple[LoadSetting, str | None]] = {
    "threads": (THREADS_SETTING, None),
    "cache_type_k": (CACHE_TYPE_K_SETTING, None),
    "cache_type_v": (CACHE_TYPE_V_SETTING, None),
}


def describe_load(options: dict[str, Any]) -> str:
    """"2 threads": the load options a switch asks for, in a sentence."""
    return " and ".join(f"{setting.names[options[key]]} {setting.what}"
                        for key, (setting, _) in LOAD_SETTINGS.items() if options.get(key))


@dataclass(frozen=True)
class ModelTarget:
    """A model to run: its file and the factory's options (chat_template="chatml", threads=...)."""

    path: str
    options: dict[str, Any] = field(default_factory=dict)


class ModelSwitcher(QObject):
    """See the module docstring. `busy_panes()` lists the panes generating a reply now."""

    def __init__(self, window: QWidget, bridge: EngineBridge, settings: QSettings,
                 model_factory: ModelFactory | None, busy_panes: Callable[[], list[Any]],
                 threads_flag: int | None = None) -> None:
        super().__init__(window)
        self._window = window
        self._bridge = bridge
        self._settings = settings
        self.model_factory = model_factory
        self._busy_panes = busy_panes
        self.threads_flag = threads_flag
        self.cache_flags: tuple[str | None, str | None] = (None, None)  # --cache-type-k / -v
        self.opener = ModelOpener(window, self.switch_model)
        self.current: ModelTarget | None = None  # what the engine runs (or last ran)
        self._pending: ModelTarget | None = None  # asked for, not loaded yet
        self._restoring = False  # the pending load puts the previous model back
        self.failure_box: QMessageBox | None = None
        self.projector_box: QMessageBox | None = None  # the last "projector refused" message

    def threads(self) -> ThreadsChoice:
        """The thread choice the next load uses (flag > environment > setting > auto)."""
        return current_threads(self._settings, self.threads_flag)

    def cache_types(self) -> tuple[Any, Any]:
        """The K and V cache type choices the next load uses (flag > environment > setting)."""
        return current_cache_types(self._settings, *self.cache_flags)

    def _save(self, options: dict[str, Any]) -> None:
        for key, (setting, _) in LOAD_SETTINGS.items():
            if options.get(key):
                setting.save(self._settings, options[key])

    # -- asking for a switch ----------------------------------------------------------------

    def open_dialog(self, ask_projector: bool = False) -> None:
        """File › Open Model…: pick a GGUF; it is checked before the engine switches to it
        (`ask_projector`: then which vision projector, ui.dialogs.projector)."""
        current = self._bridge.model_info.get("path")
        self.opener.open_dialog(str(Path(current).parent) if current else "", ask_projector)

    def change_load(self, options: dict[str, str]) -> None:
        """A load setting changed ({"threads": "2"}):
        reload the current model with them (checked first, like Open Model). With no model to
        reload, store them: the next load uses them."""
        target = self._pending or self.current
        if self.model_factory is None or target is None:
            self._save(options)
            return
        if not self.opener.open_path(target.path, chat_template=target.options.get("chat_template"), load=options,
                                     mmproj=target.options.get("mmproj", AUTO)):
            self._save(options)  # an Open Model check is running: it loads with them

    def choose_projector(self) -> None:
        """Model Info › Projector…: reload the model with another vision projector (asked in
        the projector step; checked and confirmed like Open Model)."""
        target = self._pending or self.current
        if self.model_factory is None or target is None:
            return
        self.opener.open_path(target.path, chat_template=target.options.get("chat_template"),
                              load={k: v for k, v in target.options.items() if k in LOAD_SETTINGS},
                              ask_projector=True, current_projector=target.options.get("mmproj"))

    def switch_model(self, path: str, facts: dict[str, Any] | None = None) -> None:
        """Load the (checked) GGUF at `path`. Running replies are stopped first and saved as
        stopped; conversations keep their text; the new model gets fresh KV sessions and never
        sees the old model's token ids (see model_dialogs). Remembered for the next start."""
        if self.model_factory is None:
            return
        facts = facts or {}
        options = {"chat_template": facts["chat_template_choice"]} if facts.get("chat_template_choice") else {}
        options.update(facts.get("load_options") or {})
        if "mmproj" not in options:  # the projector chosen for this model before, if any
            remembered = remembered_projector(self._settings, path)
            if remembered:
                options["mmproj"] = remembered
        busy = self._busy_panes()
        if busy:
            replies = f"{len(busy)} repl{'ies' if len(busy) > 1 else 'y'} being generated will be stopped"
            load = describe_load(options)
            if load and self.current is not None and self.current.path == path:
                question = f"Reload {Path(path).name} with {load}?"
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
        from ...catalog.library import mark_used

        mark_used(Path(target.path))  # My Models' "last used"

    # -- the outcome ------------------------------------------------------------------------

    def backend_state_changed(self, state: str) -> bool:
        """Follow a load's outcome. True when this told the user itself: a failed switch is
        being undone (the window shows no other message)."""
        info = self._bridge.model_info
        if state == "ready":
            loaded, self._pending, self._restoring = self._pending, None, False
            if loaded is not None:
                self.current = ModelTarget(loaded.path, loaded.options)
                self._projector_outcome(loaded, info)
                # Stored once the model runs in the mode asked for (model_info tells, if it can).
                self._save({key: mode for key, mode in loaded.options.items() if key in LOAD_SETTINGS
                            and (LOAD_SETTINGS[key][1] is None
                                 or info.get(str(LOAD_SETTINGS[key][1]), mode) == mode)})
            elif self.current is None and info.get("path"):  # the model loaded at start
                remembered = remembered_projector(self._settings, str(info["path"]))
                self.current = ModelTarget(str(info["path"]), {"mmproj": remembered} if remembered else {})
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
        # The previous model's own options, minus the load modes it was asked in: the settings
        # (unchanged by the failed attempt) say the modes it ran in.
        self._switch_now(ModelTarget(previous.path, {k: v for k, v in previous.options.items()
                                                     if k not in LOAD_SETTINGS}))
        return True

    def _projector_outcome(self, loaded: ModelTarget, info: dict[str, Any]) -> None:
        """Remember a projector choice that worked; say so when the chosen file was refused
        (the model is open for text: conversations work, images are refused)."""
        choice = loaded.options.get("mmproj")
        if not choice:
            return
        if choice in (AUTO, OFF) or info.get("vision"):
            remember_projector(self._settings, loaded.path, choice)
            return
        name = Path(loaded.path).name
        box = QMessageBox(QMessageBox.Icon.Warning, "Vision Projector",
                          f"The projector {Path(choice).name} cannot be used with {name}",
                          QMessageBox.StandardButton.Ok, self._window)
        box.setObjectName("projectorRefusedBox")
        why = str(info.get("vision_label") or "no (no reason given)")
        why = why[4:-1] if why.startswith("no (") and why.endswith(")") else why
        box.setInformativeText(f"{why}.\n\n{name} is open for text: conversations work, images are "
                               "refused. Choose its own projector with Help › Model Info › Projector….")
        self.projector_box = box
        box.open()

    def _explain_failure(self, failed: ModelTarget, previous: ModelTarget, error: str) -> None:
        asked = describe_load(failed.options)
        name = Path(failed.path).name
        what = f"{name} could not be loaded" + (f" with {asked}" if asked else "")
        back = Path(previous.path).name
        # The settings, unchanged by the failed attempt (or the overrides)
        k, v = self.cache_types()
        now = {"threads": self.threads().mode, "cache_type_k": k.mode, "cache_type_v": v.mode}
        text = (f"{what}:\n{error}\n\nThe model you had, {back}, is being loaded again. "
                "Your conversations are unchanged.")
        for key, (setting, _) in LOAD_SETTINGS.items():
            if failed.options.get(key):
                text += f" The {setting.what[:1].upper()}{setting.what[1:]} setting stays {setting.names[now[key]]}."
        box = QMessageBox(QMessageBox.Icon.Warning, "Model", what, QMessageBox.StandardButton.Ok, self._window)
        box.setObjectName("switchFailedBox")
        box.setInformativeText(text)
        self.failure_box = box
        box.open()
