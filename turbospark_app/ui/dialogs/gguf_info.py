"""The metadata of any GGUF in the window: Help › Model Info's "File Metadata…" (the loaded file)
and "Another GGUF…" (any file, whatever its architecture), and the details of Open Model's
"not supported" box. The rows and the verdict line are `model.gguf.describe`'s, the same
`turbospark model info FILE` prints; the header is read in a worker thread (a 7B file's vocabulary
takes a second or two), so the window never freezes on it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QMessageBox,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from .models import _CheckThread, choose_model_file, explain_model_error

if TYPE_CHECKING:
    from ...model.gguf.describe import GGUFDescription


def describe_file(path: str) -> "GGUFDescription":
    """`describe_gguf` (imported here: the window starts without numpy). Raises ModelFileError."""
    from ...model.gguf.describe import describe_gguf

    return describe_gguf(path)


class GGUFInfoDialog(QDialog):
    """One GGUF's metadata (any architecture) and whether TurboSpark runs it."""

    def __init__(self, description: "GGUFDescription", parent: QWidget | None = None) -> None:
        from ...model.gguf.describe import description_rows, verdict_line

        super().__init__(parent)
        self.setObjectName("ggufInfoDialog")
        self.setWindowTitle(f"GGUF Metadata: {description.path.name}")
        self.setMinimumSize(560, 420)
        self.verdict = QLabel(verdict_line(description), self)
        self.verdict.setObjectName("ggufVerdict")
        self.verdict.setWordWrap(True)
        bold = QFont(self.verdict.font())
        bold.setBold(True)
        self.verdict.setFont(bold)
        body = QWidget(self)
        form = QFormLayout(body)
        self.values: dict[str, QLabel] = {}
        for row in description_rows(description):
            value = QLabel(row.text, body)
            value.setWordWrap(True)
            value.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            self.values[row.label] = value
            form.addRow(row.label, value)
        scroll = QScrollArea(self)  # an architecture may have dozens of its own keys
        scroll.setWidgetResizable(True)
        scroll.setWidget(body)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.verdict)
        layout.addWidget(scroll, 1)
        layout.addWidget(buttons)


class FileDescriber(QObject):
    """Pick a GGUF (or take a path) → describe it in a worker → `GGUFInfoDialog`, or a box saying
    why the header cannot be read. One per window (`for_window`): it outlives Model Info."""

    described = Signal(str, bool)  # path, readable

    def __init__(self, parent: QWidget, *, describe: Callable[[str], Any] = describe_file,
                 choose: Callable[[QWidget | None, str], str | None] = choose_model_file) -> None:
        super().__init__(parent)
        self._parent = parent
        self._describe = describe
        self._choose = choose
        self._thread: _CheckThread | None = None
        self.dialog: GGUFInfoDialog | None = None  # the last shown
        self.error_box: QMessageBox | None = None

    @classmethod
    def for_window(cls, window: QWidget) -> "FileDescriber":
        """The window's describer, made on first use."""
        found = window.findChild(cls, "fileDescriber", Qt.FindChildOption.FindDirectChildrenOnly)
        if found is None:
            found = cls(window)
            found.setObjectName("fileDescriber")
        return found

    def open_dialog(self, start: str = "") -> None:
        """Ask for any GGUF, then `describe_path` it."""
        path = self._choose(self._parent, start)
        if path:
            self.describe_path(path)

    def describe_path(self, path: str) -> bool:
        """Describe `path` in a worker thread; False while another file is being read."""
        if self._thread is not None:
            return False
        self._thread = _CheckThread(path, self._describe, self)
        self._thread.done.connect(self._done)
        self._thread.start()
        return True

    def _done(self, path: str, description: Any, exc: BaseException | None) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.wait()
            thread.deleteLater()
        if exc is not None or description is None:
            title, text = explain_model_error(exc or RuntimeError("no description"))
            box = QMessageBox(QMessageBox.Icon.Warning, "GGUF Metadata", title, QMessageBox.StandardButton.Ok,
                              self._parent)
            box.setObjectName("describeErrorBox")
            box.setInformativeText(text)
            self.error_box = box
            box.open()
            self.described.emit(path, False)
            return
        self.dialog = GGUFInfoDialog(description, self._parent)
        self.dialog.open()
        self.described.emit(path, True)
