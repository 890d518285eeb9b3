"""Models › My Models: the models on this machine (catalog.library): the models folder's
downloads, the default model, GGUFs added from elsewhere; size, last used; Open, Reveal in the
file manager, Delete (asks first), Add File…, and the models folder (a setting)."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Callable

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMessageBox,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ...catalog import config, library
from ..formatting import bytes_label
from .models import GGUF_FILTER


def reveal(path: Path) -> None:
    """Show `path` in Finder (selected) or open its folder in the file manager."""
    if sys.platform == "darwin":
        subprocess.Popen(["open", "-R", str(path)])
    else:
        QDesktopServices.openUrl(QUrl.fromLocalFile(str(path.parent)))


class MyModelsDialog(QDialog):
    """The models list; `open_model(path)` opens one (checked first, as Open Model does)."""

    def __init__(self, parent: QWidget | None, open_model: Callable[[str], None],
                 current: Callable[[], str | None], find: Callable[[], None],
                 reveal_fn: Callable[[Path], None] = reveal,
                 resume: Callable[[str, str], None] | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("myModelsDialog")
        self.setWindowTitle("My Models")
        self.resize(900, 420)
        self._open_model, self._current, self._reveal = open_model, current, reveal_fn
        self._resume = resume
        self.models: list[library.LocalModel] = []
        self.partials: list[library.PartialDownload] = []  # listed after the models
        self.confirm: QMessageBox | None = None
        self.folder_label = QLabel(self)
        self.folder_label.setObjectName("myModelsFolderLabel")
        self.folder_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.table = QTableWidget(0, 4, self)
        self.table.setObjectName("myModelsTable")
        self.table.setHorizontalHeaderLabels(["Model", "Size", "Last used", "Where"])
        self.table.horizontalHeader().setSectionResizeMode(3, QHeaderView.ResizeMode.Stretch)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.doubleClicked.connect(lambda _i: self.open_selected())
        buttons = QHBoxLayout()
        for text, name, slot in (("Open", "myModelsOpen", self.open_selected),
                                 ("Reveal", "myModelsReveal", self.reveal_selected),
                                 ("Delete…", "myModelsDelete", self.delete_selected),
                                 ("Add File…", "myModelsAdd", self.add_file),
                                 ("Models Folder…", "myModelsFolder", self.choose_folder),
                                 ("Find Models…", "myModelsFind", find)):
            b = QPushButton(text, self)
            b.setObjectName(name)
            b.clicked.connect(slot)
            buttons.addWidget(b)
        buttons.addStretch(1)
        close = QPushButton("Close", self)
        close.clicked.connect(self.close)
        buttons.addWidget(close)
        layout = QVBoxLayout(self)
        layout.addWidget(self.folder_label)
        layout.addWidget(self.table, 1)
        layout.addLayout(buttons)
        self.refresh()

    def refresh(self) -> None:
        """Read the folder(s) and the index again."""
        self.folder_label.setText(f"Models folder: {config.models_folder()}")
        self.models = library.list_models()
        current = self._current()
        self.table.setRowCount(0)
        for m in self.models:
            row = self.table.rowCount()
            self.table.insertRow(row)
            name = m.name + ("  (open now)" if current and Path(current) == m.path else "")
            name += "  + projector" if m.mmproj else ""
            when = datetime.fromtimestamp(m.last_used).strftime("%Y-%m-%d %H:%M") if m.last_used else "never"
            size = QTableWidgetItem(bytes_label(m.size))
            size.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            for col, item in enumerate((QTableWidgetItem(name), size, QTableWidgetItem(when),
                                        QTableWidgetItem(str(m.path)))):
                self.table.setItem(row, col, item)
        self.partials = library.partial_downloads()
        for d in self.partials:
            row = self.table.rowCount()
            self.table.insertRow(row)
            pct = f"{100 * d.have / d.size:.0f}%" if d.size else "?"
            for col, text in enumerate((f"{d.name}  (incomplete: Open resumes it)",
                                        f"{bytes_label(d.have)} of {bytes_label(d.size)} ({pct})", "–",
                                        str(d.path))):
                self.table.setItem(row, col, QTableWidgetItem(text))
        self.table.resizeColumnsToContents()
        if self.models or self.partials:
            self.table.selectRow(0)

    def selected(self) -> library.LocalModel | None:
        """The model picked (None for an incomplete download)."""
        rows = self.table.selectionModel().selectedRows()
        return self.models[rows[0].row()] if rows and rows[0].row() < len(self.models) else None

    def selected_partial(self) -> library.PartialDownload | None:
        rows = self.table.selectionModel().selectedRows()
        i = rows[0].row() - len(self.models) if rows else -1
        return self.partials[i] if 0 <= i < len(self.partials) else None

    def open_selected(self) -> None:
        m, d = self.selected(), self.selected_partial()
        if m is not None:
            self._open_model(str(m.path))
        elif d is not None and self._resume is not None:
            self._resume(d.repo, d.quant)  # Find Models on that repo and quantization

    def reveal_selected(self) -> None:
        m, d = self.selected(), self.selected_partial()
        if m is not None or d is not None:
            self._reveal(m.path if m is not None else d.part)

    def delete_selected(self) -> None:
        """Ask, then delete the model's files (an added file is only taken off the list), or
        what an incomplete download fetched."""
        m = self.selected()
        d = self.selected_partial()
        if m is None and d is not None:
            box = QMessageBox(QMessageBox.Icon.Question, "My Models",
                              f"Delete the incomplete download of {d.name} ({bytes_label(d.have)})? "
                              "Downloading it again starts over.",
                              QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel, self)
            box.setObjectName("deleteModelBox")
            box.setDefaultButton(QMessageBox.StandardButton.Cancel)
            box.accepted.connect(lambda: (library.discard_partial(d), self.refresh()))
            self.confirm = box
            box.open()
            return
        if m is None:
            return
        if m.added and not str(m.path).startswith(str(config.models_folder())):
            what = f"Remove {m.name} from the list? The file stays where it is:\n{m.path}"
        else:
            files = "\n".join(str(p) for p in m.files)
            what = f"Delete {m.name} ({bytes_label(m.size)})? These files are deleted:\n{files}"
        current = self._current()
        if current and Path(current) == m.path:
            what += "\n\nIt is the model open now: it stays loaded until another one is opened."
        box = QMessageBox(QMessageBox.Icon.Question, "My Models", what,
                          QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel, self)
        box.setObjectName("deleteModelBox")
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        box.accepted.connect(lambda: self._delete(m))
        self.confirm = box
        box.open()

    def _delete(self, m: library.LocalModel) -> None:
        try:
            library.delete(m)
        except OSError as exc:
            QMessageBox.warning(self, "My Models", f"Could not delete {m.name}: {exc}")
        self.refresh()

    def add_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Add a GGUF to My Models", "", GGUF_FILTER)
        if path:
            library.add_file(Path(path))
            self.refresh()

    def choose_folder(self) -> None:
        """Models Folder…: where downloads go (models already downloaded stay listed)."""
        folder = QFileDialog.getExistingDirectory(self, "Models Folder", str(config.models_folder()))
        if folder:
            config.set_models_folder(Path(folder))
            self.refresh()
