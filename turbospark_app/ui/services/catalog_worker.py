"""The catalog's network work off the GUI thread: a `HubTask` runs one call (a search, a repo
listing, a header read) in a QThread; a `DownloadTask` runs a download, its progress and end
arriving as queued signals. The worker threads never touch a widget; Cancel sets a flag the
download polls every MiB."""

from __future__ import annotations

import threading
from typing import Any, Callable

from PySide6.QtCore import QObject, QThread, Signal

from ...catalog import download


class HubTask(QThread):
    """`fn()` in a worker; `done(result, exception)` on the GUI thread (one of them is None)."""

    done = Signal(object, object)

    def __init__(self, fn: Callable[[], Any], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._fn = fn

    def run(self) -> None:  # noqa: D102 (QThread override)
        try:
            result = self._fn()
        except Exception as exc:  # every failure is said in the dialog
            self.done.emit(None, exc)
        else:
            self.done.emit(result, None)


class DownloadTask(QThread):
    """One download job; `progress(Progress)` while it runs, `finished_with(path, error)` at the
    end (error: None, or the DownloadError / HubError, DownloadCancelled on Cancel)."""

    progress = Signal(object)
    finished_with = Signal(object, object)

    def __init__(self, job: download.DownloadJob, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.job = job
        self._cancel = threading.Event()

    def cancel(self) -> None:
        """Stop at the next MiB; what was fetched is kept for a resume."""
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def run(self) -> None:  # noqa: D102 (QThread override)
        try:
            path = download.run(self.job, on_progress=self.progress.emit, cancel=self._cancel.is_set)
        except Exception as exc:
            self.finished_with.emit(None, exc)
        else:
            self.finished_with.emit(path, None)


def progress_text(p: download.Progress) -> str:
    """"45% · 44.1 of 98.4 MB · 12.3 MB/s · 4 s left" (or verifying...)."""
    pct = int(100 * p.fraction)
    if p.phase == "verify":
        return f"Verifying {p.file} (sha256)… {pct}%"
    if p.phase == "done":
        return "Downloaded and verified"
    eta = ""
    if p.eta_s is not None:
        eta = f" · {p.eta_s:.0f} s left" if p.eta_s < 120 else f" · {p.eta_s / 60:.0f} min left"
    return f"{pct}% · {p.done / 1e6:.1f} of {p.total / 1e6:.1f} MB · {p.speed / 1e6:.1f} MB/s{eta}"
