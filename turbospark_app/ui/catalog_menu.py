"""The Models menu: Find Models… (Ctrl+Shift+M: Hugging Face, ui.dialogs.catalog) and My Models
(ui.dialogs.my_models). A downloaded model is opened as File › Open Model… opens one (checked first,
then switched to); its progress shows in the status bar while it runs."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QLabel

from ..catalog import library
from .dialogs.catalog import FindModelsDialog
from .dialogs.my_models import MyModelsDialog


class ModelsMenu(QObject):
    """Owns the two dialogs (made on first use: nothing touches the Hub before)."""

    def __init__(self, window: Any) -> None:
        super().__init__(window)
        self.window = window
        self.find_dialog: FindModelsDialog | None = None
        self.my_models: MyModelsDialog | None = None
        self.status_label: QLabel | None = None
        bar = window.menuBar()
        menu = window.menuBar().addMenu("&Models")
        after_file = bar.actions()[1] if len(bar.actions()) > 2 else None
        if after_file is not None:  # File, Models, Conversation, ...
            bar.insertMenu(after_file, menu)
        self.menu = menu
        self.find_action = QAction("&Find Models…", window)
        self.find_action.setObjectName("actionFindModels")
        self.find_action.setShortcut(QKeySequence("Ctrl+Shift+M"))
        self.find_action.triggered.connect(self.open_find)
        self.my_action = QAction("&My Models", window)
        self.my_action.setObjectName("actionMyModels")
        self.my_action.triggered.connect(self.open_my_models)
        menu.addAction(self.find_action)
        menu.addAction(self.my_action)

    def _current(self) -> str | None:
        current = getattr(self.window.models, "current", None)
        return current.path if current is not None else None

    def open_model(self, path: str) -> None:
        """Open a model from the catalog: checked, then switched to (as Open Model does)."""
        if self.window.model_factory is None:
            self.window._warn("Open Model", "This window was started with a fixed engine; it cannot load model files.")
            return
        library.mark_used(path)
        self.window.model_opener.open_path(path)
        if self.my_models is not None:
            self.my_models.refresh()

    def open_find(self) -> None:
        """Models › Find Models…"""
        if self.find_dialog is None:
            self.find_dialog = FindModelsDialog(self.window, self.open_model)
            self.find_dialog.statusText.connect(self._status)
        self.find_dialog.show()
        self.find_dialog.raise_()
        self.find_dialog.activateWindow()
        self.find_dialog.search_edit.setFocus()

    def resume(self, repo_id: str, quant: str) -> None:
        """An incomplete download from My Models: Find Models on its repo and quantization
        (Download there resumes it)."""
        self.open_find()
        assert self.find_dialog is not None
        self.find_dialog.search_edit.setText(f"{repo_id}:{quant}")
        self.find_dialog.open_repo(repo_id, quant)

    def open_my_models(self) -> None:
        """Models › My Models"""
        if self.my_models is None:
            self.my_models = MyModelsDialog(self.window, self.open_model, self._current, self.open_find,
                                            resume=self.resume)
        else:
            self.my_models.refresh()
        self.my_models.show()
        self.my_models.raise_()

    def _status(self, text: str) -> None:
        """A download's progress in the status bar, in an item of its own (a status message
        would hide the model's name while it runs); gone when it ends."""
        if self.status_label is None:
            self.status_label = QLabel(self.window.status)
            self.status_label.setObjectName("downloadStatus")
            self.status_label.setMaximumWidth(460)
            self.window.status.insertPermanentWidget(0, self.status_label)
        # "Downloading owner/repo:Q: 38% · 37.7 of 98.4 MB · ..." -> "↓ repo:Q 38% · ...": short,
        # so the model's name beside it keeps its room
        head, _, rest = text.removeprefix("Downloading ").partition(": ")
        self.status_label.setText(f"↓ {head.rsplit('/', 1)[-1]} {rest}" if rest else text)
        self.status_label.setToolTip(text)
        self.status_label.setVisible(bool(text))

    def shutdown(self) -> None:
        if self.find_dialog is not None:
            self.find_dialog.shutdown()
