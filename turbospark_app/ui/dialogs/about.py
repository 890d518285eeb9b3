"""Help > About TurboSpark: what this build is, with every version a bug report needs."""

from __future__ import annotations

import platform
import sys
from typing import Any, Mapping

from PySide6.QtCore import qVersion
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QPushButton, QVBoxLayout, QWidget

from ..status_bar import model_label


def _package_version(name: str) -> str:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:  # not installed (a frozen app may lack metadata): say so
        return "not found"


def versions(model_info: Mapping[str, Any] | None = None) -> list[tuple[str, str]]:
    """(component, version) rows: the app, Python, Qt, PySide6, numpy, gguf, the model."""
    from ... import __version__

    import numpy
    import PySide6

    model = "not loaded"
    if model_info:
        model = model_label(dict(model_info))
        path = model_info.get("path") or model_info.get("file")
        if path:
            model += f" ({path})"
    return [
        ("TurboSpark", __version__),
        ("Python", f"{platform.python_version()} ({platform.python_implementation()}, {sys.platform})"),
        ("Qt", qVersion()),
        ("PySide6", PySide6.__version__),
        ("numpy", numpy.__version__),
        ("gguf", _package_version("gguf")),
        ("Model", model),
    ]


def versions_text(rows: list[tuple[str, str]]) -> str:
    """The rows as plain text (what Copy puts on the clipboard)."""
    return "\n".join(f"{name}: {value}" for name, value in rows)


class AboutDialog(QDialog):
    """See the module docstring."""

    def __init__(self, model_info: Mapping[str, Any] | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("aboutDialog")
        self.setWindowTitle("About TurboSpark")
        self.rows = versions(model_info)
        title = QLabel("<h2>TurboSpark</h2><p>A language model on your own machine, and an honest view "
                       "of what the engine is doing.</p>", self)
        title.setWordWrap(True)
        table = "".join(f"<tr><td><b>{name}</b>&nbsp;&nbsp;</td><td>{value}</td></tr>" for name, value in self.rows)
        self.details = QLabel(f"<table>{table}</table>", self)
        self.details.setObjectName("aboutVersions")
        self.details.setWordWrap(True)
        self.details.setTextInteractionFlags(self.details.textInteractionFlags()
                                             | self.details.textInteractionFlags().TextSelectableByMouse)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        copy = QPushButton("Copy Versions", self)
        copy.setObjectName("copyVersions")
        copy.setToolTip("Copy these versions for a bug report")
        copy.clicked.connect(self.copy)
        buttons.addButton(copy, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(title)
        layout.addWidget(self.details)
        layout.addWidget(buttons)

    def copy(self) -> None:
        """Put the versions on the clipboard."""
        QGuiApplication.clipboard().setText(versions_text(self.rows))
