"""Models › Find Models… (Ctrl+Shift+M): search Hugging Face for GGUF models, see each
quantization's size and whether it fits this machine before a byte is downloaded, download it
(progress, speed, time left, Cancel; a restart resumes), and open it.

Every network call runs in a worker thread (ui.services.catalog_worker); the dialog only shows results.
Nothing contacts the Hub until the user searches (or pastes a repo id / URL and presses Enter).
The dialog is kept by the window once opened, so a download goes on when it is closed; its
progress is in the status bar too (`statusText`).
"""

from __future__ import annotations

from typing import Any, Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QDialog,
    QHBoxLayout,
    QHeaderView,
    QInputDialog,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ...catalog import config, download, estimate, hub, inspect, names
from ..services.catalog_worker import DownloadTask, HubTask, progress_text
from ..formatting import bytes_label

SORT_LABELS = (("Most downloaded", "downloads"), ("Recently updated", "recent"), ("Most liked", "likes"))
VERDICT_COLOURS = {estimate.FITS: "#2e7d32", estimate.TIGHT: "#b26a00", estimate.WONT_FIT: "#c62828"}


def _params(n: int | None) -> str:
    if not n:
        return "? params"
    return f"{n / 1e9:.1f}B params" if n >= 1e9 else f"{n / 1e6:.0f}M params"


class FindModelsDialog(QDialog):
    """The Hugging Face catalog; `open_model(path)` is called with a downloaded model's path."""

    statusText = Signal(str)  # download progress for the window's status bar ("" when over)

    def __init__(self, parent: QWidget | None, open_model: Callable[[str], None]) -> None:
        super().__init__(parent)
        self.setObjectName("findModelsDialog")
        self.setWindowTitle("Find Models")
        self.resize(980, 600)
        self._open_model = open_model
        self._tasks: set[HubTask] = set()
        self._report: inspect.RepoReport | None = None
        self._fits: dict[str, estimate.Fit | None] = {}
        self._exact: dict[str, inspect.RepoReport] = {}  # a quantization's own header, once read
        self.download_task: DownloadTask | None = None
        self.last_error = ""

        self.search_edit = QLineEdit(self)
        self.search_edit.setObjectName("catalogSearch")
        self.search_edit.setPlaceholderText("Search Hugging Face GGUF models, or paste a repo id or URL")
        self.search_edit.returnPressed.connect(self.search)
        self.sort = QComboBox(self)
        self.sort.setObjectName("catalogSort")
        for label, key in SORT_LABELS:
            self.sort.addItem(label, key)
        self.sort.currentIndexChanged.connect(lambda _i: self.search() if self.search_edit.text().strip() else None)
        search_button = QPushButton("Search", self)
        search_button.setObjectName("catalogSearchButton")
        search_button.clicked.connect(self.search)
        top = QHBoxLayout()
        top.addWidget(self.search_edit, 1)
        top.addWidget(self.sort)
        top.addWidget(search_button)

        self.repos = QListWidget(self)
        self.repos.setObjectName("catalogRepos")
        self.repos.currentItemChanged.connect(lambda item, _prev: self._repo_chosen(item))

        right = QWidget(self)
        self.repo_info = QLabel("Search for a model, e.g. “qwen3 gguf” or “llama 3.2 1b”.", right)
        self.repo_info.setObjectName("catalogRepoInfo")
        self.repo_info.setWordWrap(True)
        self.repo_info.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.context = QSpinBox(right)
        self.context.setObjectName("catalogContext")
        self.context.setRange(512, 1 << 20)
        self.context.setSingleStep(4096)
        self.context.setValue(4096)
        self.context.setSuffix(" tokens")
        self.context.valueChanged.connect(lambda _v: self._fill_files())
        ctx_row = QHBoxLayout()
        ctx_row.addWidget(QLabel("Context:", right))
        ctx_row.addWidget(self.context)
        ctx_row.addStretch(1)
        self.files = QTableWidget(0, 3, right)
        self.files.setObjectName("catalogFiles")
        self.files.setHorizontalHeaderLabels(["Quantization", "Size", "This machine"])
        header = self.files.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        self.files.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.files.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.files.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.files.verticalHeader().setVisible(False)
        self.files.itemSelectionChanged.connect(self._file_chosen)
        self.details = QLabel("", right)
        self.details.setObjectName("catalogFitDetails")
        self.details.setWordWrap(True)
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        col = QVBoxLayout(right)
        col.setContentsMargins(0, 0, 0, 0)
        col.addWidget(self.repo_info)
        col.addLayout(ctx_row)
        col.addWidget(self.files, 1)
        col.addWidget(self.details)

        split = QSplitter(Qt.Orientation.Horizontal, self)
        split.addWidget(self.repos)
        split.addWidget(right)
        split.setStretchFactor(1, 1)
        split.setSizes([340, 640])

        self.progress = QProgressBar(self)
        self.progress.setObjectName("catalogProgress")
        self.progress.setRange(0, 1000)
        self.progress.hide()
        self.progress_label = QLabel("", self)
        self.progress_label.setObjectName("catalogProgressText")
        self.progress_label.setWordWrap(True)  # a long path must not widen the dialog
        self.progress_label.setMinimumWidth(1)
        self.download_button = QPushButton("Download", self)
        self.download_button.setObjectName("catalogDownload")
        self.download_button.setEnabled(False)
        self.download_button.clicked.connect(self.start_download)
        self.cancel_button = QPushButton("Cancel Download", self)
        self.cancel_button.setObjectName("catalogCancel")
        self.cancel_button.hide()
        self.cancel_button.clicked.connect(self.cancel_download)
        token = QPushButton("Hub Token…", self)
        token.setObjectName("catalogToken")
        token.clicked.connect(self.ask_token)
        close = QPushButton("Close", self)
        close.clicked.connect(self.close)
        bottom = QHBoxLayout()
        bottom.addWidget(self.progress, 1)
        bottom.addWidget(self.progress_label, 1)
        bottom.addWidget(token)
        bottom.addWidget(self.cancel_button)
        bottom.addWidget(self.download_button)
        bottom.addWidget(close)

        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(split, 1)
        layout.addLayout(bottom)

    # -- workers ------------------------------------------------------------------------------

    def _run(self, fn: Callable[[], Any], then: Callable[[Any], None], what: str) -> None:
        task = HubTask(fn, self)
        self._tasks.add(task)

        def done(result: Any, exc: Any) -> None:
            self._tasks.discard(task)
            task.wait()
            task.deleteLater()
            if exc is not None:
                self.last_error = str(exc)
                self.repo_info.setText(f"<span style='color:#c62828'>{what}: {exc}</span>")
                return
            then(result)

        task.done.connect(done)
        task.start()

    @property
    def busy(self) -> bool:
        """A search or listing is in flight."""
        return bool(self._tasks)

    # -- search and browse --------------------------------------------------------------------

    def search(self) -> None:
        """Search (or open a pasted repo id / URL) in a worker."""
        text = self.search_edit.text().strip()
        ref = names.parse_repo_ref(text)
        if ref is not None:
            self.open_repo(ref.repo_id, ref.quant, ref.revision)
            return
        sort = self.sort.currentData()
        self.repo_info.setText(f"Searching Hugging Face for “{text}”…")
        self._run(lambda: hub.search(text, sort=sort, limit=40), self._show_hits, "Search failed")

    def _show_hits(self, hits: list[hub.RepoSummary]) -> None:
        self.repos.clear()
        for h in hits:
            facts = h.facts
            line2 = " · ".join(x for x in (facts.architecture or "", _params(facts.parameters) if facts.parameters else "",
                                           f"{h.downloads:,} downloads") if x)
            item = QListWidgetItem(f"{h.repo_id}\n{line2}")
            item.setData(Qt.ItemDataRole.UserRole, h.repo_id)
            self.repos.addItem(item)
        self.repo_info.setText(f"{len(hits)} GGUF repos." if hits else "No GGUF model repo matches.")

    def _repo_chosen(self, item: QListWidgetItem | None) -> None:
        if item is not None:
            self.open_repo(item.data(Qt.ItemDataRole.UserRole))

    def open_repo(self, repo_id: str, quant: str | None = None, revision: str | None = None) -> None:
        """List `repo_id`'s files and size up its model (header read) in a worker."""
        self.repo_info.setText(f"Reading {repo_id}…")
        self.files.setRowCount(0)
        self.details.setText("")
        self.download_button.setEnabled(False)

        def load() -> inspect.RepoReport:
            return inspect.inspect_repo(hub.repo_listing(repo_id, revision))

        self._run(load, lambda report: self._show_repo(report, quant), f"Could not read {repo_id}")

    def _show_repo(self, report: inspect.RepoReport, quant: str | None = None) -> None:
        self._report = report
        self._fits.clear()
        self._exact = {report.shape_file: report} if report.shape_file else {}
        lst = report.listing
        ctx = f"context {report.context_length:,}" if report.context_length else "context ?"
        source = "the Hub's GGUF metadata" if report.source == "hub" else "the file's header (first MBs)"
        text = (f"<b>{lst.repo_id}</b><br>{report.architecture or '?'} · {_params(report.parameters)} · "
                f"{ctx} <span style='color:gray'>(from {source})</span>")
        if lst.mmproj:
            text += "<br>Vision/audio projector: downloaded with the model and kept beside it."
        if not report.runnable:
            text += f"<br><span style='color:#c62828'><b>llama.cpp cannot run this model:</b> {report.problem}</span>"
        if report.note:
            text += f"<br><span style='color:#b26a00'>{report.note}</span>"
        self.repo_info.setText(text)
        if report.shape is not None and report.context_length:
            self.context.blockSignals(True)
            self.context.setValue(min(self.context.value(), report.context_length) or 4096)
            self.context.blockSignals(False)
        self._fill_files()
        row = 0
        if quant:
            row = next((i for i, g in enumerate(lst.groups) if lst.group(quant) is g), 0)
        else:  # the largest that fits, else the smallest
            fits = [i for i, g in enumerate(lst.groups)
                    if (fit := self._fit(g)) is not None and fit.verdict == estimate.FITS]
            row = fits[-1] if fits else 0
        self.files.selectRow(row)

    def _fit(self, group: hub.QuantGroup) -> estimate.Fit | None:
        if self._report is None or not self._report.runnable:
            return None
        key = f"{group.first.path}@{self.context.value()}"
        if key not in self._fits:
            report = self._exact.get(group.first.path, self._report)
            self._fits[key] = inspect.fit(report, group, self.context.value())
        return self._fits[key]

    def _fill_files(self) -> None:
        report = self._report
        if report is None:
            return
        selected = self.selected_group()
        self.files.setRowCount(0)
        for group in report.listing.groups:
            row = self.files.rowCount()
            self.files.insertRow(row)
            have = self._local_path(report, group) is not None
            label = group.quant + (" ✓ downloaded" if have else "") + ("" if group.complete else " (incomplete)")
            self.files.setItem(row, 0, QTableWidgetItem(label))
            size = QTableWidgetItem(bytes_label(group.size))
            size.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            self.files.setItem(row, 1, size)
            fit = self._fit(group)
            if not report.runnable:
                verdict = QTableWidgetItem("cannot run")
            elif fit is None:
                verdict = QTableWidgetItem("unknown (header unreadable)")
            else:
                verdict = QTableWidgetItem(f"{fit.verdict} — needs {estimate.gb(fit.need.total)}")
                verdict.setForeground(QColor(VERDICT_COLOURS[fit.verdict]))
                verdict.setToolTip("\n".join(fit.lines()))
            self.files.setItem(row, 2, verdict)
        if selected is not None:
            self.files.selectRow(report.listing.groups.index(selected))

    def selected_group(self) -> hub.QuantGroup | None:
        """The quantization picked in the table."""
        rows = self.files.selectionModel().selectedRows() if self.files.selectionModel() else []
        if self._report is None or not rows:
            return None
        return self._report.listing.groups[rows[0].row()]

    def _file_chosen(self) -> None:
        group = self.selected_group()
        report = self._report
        running = self.download_task is not None
        self.download_button.setEnabled(bool(group and report and report.runnable and not running))
        job = download.plan(report.listing, group, config.models_folder()) if group and report else None
        left = download.bytes_left(job) if job is not None else 0
        here, partly = job is not None and left == 0, job is not None and 0 < left < job.total
        self.download_button.setText("Open" if here else "Resume Download" if partly else "Download")
        if group is None or report is None:
            self.details.setText("")
            return
        if report.runnable and report.shape is not None and group.first.path not in self._exact:
            self._read_header_of(report, group)  # the exact figures of this very file
        fit = self._fit(group)
        lines = [f"<b>{group.quant}</b> · {len(group.files)} file{'s' if len(group.files) > 1 else ''}"]
        proj = report.listing.projector_for(group)
        if proj is not None:
            lines.append(f"with {proj.name} ({bytes_label(proj.size)})")
        if fit is not None:
            lines.append(f"<b>{fit.verdict}</b> — " + " · ".join(fit.lines()))
        self.details.setText("<br>".join(lines))

    def _read_header_of(self, report: inspect.RepoReport, group: hub.QuantGroup) -> None:
        """Read `group`'s own header in a worker; its fit then replaces the estimate by name."""
        self._exact[group.first.path] = report  # asked once; the real one replaces it

        def read() -> inspect.RepoReport:
            return inspect.inspect_repo(report.listing, group)

        def done(exact: inspect.RepoReport) -> None:
            if self._report is None or self._report.listing is not report.listing:
                return  # another repo is shown now
            if exact.shape is not None:
                self._exact[group.first.path] = exact
                self._fits = {k: v for k, v in self._fits.items() if not k.startswith(group.first.path + "@")}
                self._fill_files()
                self._file_chosen()

        self._run(read, done, f"Could not read {group.first.name}")

    # -- download -----------------------------------------------------------------------------

    @staticmethod
    def _local_path(report: inspect.RepoReport, group: hub.QuantGroup) -> str | None:
        """The quantization's file when it is downloaded and verified already."""
        job = download.plan(report.listing, group, config.models_folder())
        return str(job.model_path) if download.bytes_left(job) == 0 else None

    def start_download(self) -> None:
        """Download the picked quantization (after a question when it won't fit); Open when it
        is here already."""
        group, report = self.selected_group(), self._report
        if group is None or report is None or self.download_task is not None:
            return
        here = self._local_path(report, group)
        if here is not None:
            self._open_model(here)
            return
        fit = self._fit(group)
        if fit is not None and fit.verdict == estimate.WONT_FIT:
            box = QMessageBox(QMessageBox.Icon.Warning, "Find Models",
                              f"{group.quant} needs {estimate.gb(fit.need.total)}: more than this machine "
                              f"has free ({estimate.gb(fit.machine.room)}).",
                              QMessageBox.StandardButton.Cancel, self)
            box.setObjectName("wontFitBox")
            box.setInformativeText("\n".join(fit.lines()))
            anyway = box.addButton("Download Anyway", QMessageBox.ButtonRole.AcceptRole)
            anyway.clicked.connect(lambda: self._start(report, group))
            box.open()
            return
        self._start(report, group)

    def _start(self, report: inspect.RepoReport, group: hub.QuantGroup) -> None:
        job = download.plan(report.listing, group, config.models_folder())
        task = DownloadTask(job, self)
        self.download_task = task
        task.progress.connect(self._progress)
        task.finished_with.connect(self._finished)
        self.download_button.setEnabled(False)
        self.cancel_button.show()
        self.progress.setValue(0)
        self.progress.show()
        left = download.bytes_left(job)
        resumed = f" (resuming: {bytes_label(job.total - left)} already here)" if 0 < left < job.total else ""
        self.progress_label.setText(f"Downloading {report.listing.repo_id}:{group.quant}{resumed}…")
        task.start()

    def _progress(self, p: download.Progress) -> None:
        self.progress.setValue(int(1000 * p.fraction))
        text = progress_text(p)
        self.progress_label.setText(text)
        task = self.download_task
        name = f"{task.job.repo_id}:{task.job.quant}" if task else ""
        self.statusText.emit(f"Downloading {name}: {text}")

    def _finished(self, path: Any, exc: Any) -> None:
        task, self.download_task = self.download_task, None
        if task is not None:
            task.wait()
            task.deleteLater()
        self.cancel_button.hide()
        self.progress.hide()
        self._file_chosen()
        self.statusText.emit("")
        if exc is not None:
            self.last_error = str(exc)
            cancelled = isinstance(exc, download.DownloadCancelled)
            self.progress_label.setText(str(exc) if cancelled else f"<span style='color:#c62828'>{exc}</span>")
            return
        self.progress_label.setText(f"Downloaded to {path}")
        self._fill_files()
        self._open_model(str(path))

    def cancel_download(self) -> None:
        """Stop the download (kept for a resume)."""
        if self.download_task is not None:
            self.download_task.cancel()
            self.progress_label.setText("Cancelling…")

    def ask_token(self) -> None:
        """Hub Token…: an optional token for gated repos, kept in the keychain."""
        store = config.token_store()
        text, ok = QInputDialog.getText(
            self, "Hugging Face Token",
            f"A token for gated repos (kept in {store.location}). Empty: no token is sent.",
            QLineEdit.EchoMode.Password, "")
        if ok:
            store.set(config.TOKEN_NAME, text.strip())

    def shutdown(self) -> None:
        """Before the window closes: stop a download, wait for the workers."""
        if self.download_task is not None:
            self.download_task.cancel()
            self.download_task.wait(5000)
        for task in list(self._tasks):
            task.wait(5000)
