"""Documents › Collections…: link a folder (or files) as a named collection, watch it index
(files done / total, chunks, time left), see each file's status and error, re-index, remove.

Each collection is a row; its files are its children, a file that could not be indexed in the
error colour with the reason ("encrypted", "not text", "too large", "the file is gone"...).
Indexing runs in the hub's background thread: this dialog only reads the store and the hub's
progress signals, so it can be closed and opened again while a collection indexes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QMessageBox,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ...documents.indexer import IndexProgress
from ...documents.service import decode_sources
from ...documents.store import DocumentRow
from ..services.docs_hub import DocsHub, progress_text

ERROR_HUE = QColor(220, 50, 47)


def document_status(d: DocumentRow) -> str:
    """`12 chunks · 3 pages · 2,930 tokens` or the error."""
    if d.status == "error":
        return d.error or "could not be indexed"
    parts = [f"{d.chunks} chunk{'s' if d.chunks != 1 else ''}"]
    if d.pages:
        parts.append(f"{d.pages} pages")
    parts.append(f"{d.tokens:,} tokens")
    return " · ".join(parts)


class CollectionsDialog(QDialog):
    """See the module docstring."""

    def __init__(self, hub: DocsHub, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("collectionsDialog")
        self.setWindowTitle("Collections")
        self.resize(760, 480)
        self.hub = hub
        self.tree = QTreeWidget(self)
        self.tree.setObjectName("collectionsTree")
        self.tree.setHeaderLabels(["Collection / file", "Status"])
        self.tree.setColumnWidth(0, 300)
        self.tree.itemSelectionChanged.connect(self._update_buttons)
        intro = QLabel("A collection links a folder or files. It is indexed in the background (a reply "
                       "that is generating goes first) and re-indexed when its files change. Choose which "
                       "collections a conversation uses with the pane's Collections button.", self)
        intro.setWordWrap(True)
        self.add_folder_button = QPushButton("Add Folder…", self)
        self.add_folder_button.clicked.connect(self._add_folder)
        self.add_files_button = QPushButton("Add Files…", self)
        self.add_files_button.clicked.connect(self._add_files)
        self.reindex_button = QPushButton("Re-index", self)
        self.reindex_button.setToolTip("Look at the files again: new and changed ones are indexed, "
                                       "unchanged ones skipped (size, time and content hash)")
        self.reindex_button.clicked.connect(self._reindex)
        self.remove_button = QPushButton("Remove", self)
        self.remove_button.setToolTip("Delete the collection's index (the files stay)")
        self.remove_button.clicked.connect(self._remove)
        buttons = QHBoxLayout()
        for b in (self.add_folder_button, self.add_files_button, self.reindex_button, self.remove_button):
            buttons.addWidget(b)
        buttons.addStretch(1)
        self.note = QLabel(self)
        self.note.setObjectName("collectionsNote")
        close = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        close.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addWidget(self.tree, 1)
        layout.addLayout(buttons)
        layout.addWidget(self.note)
        layout.addWidget(close)
        self._items: dict[str, QTreeWidgetItem] = {}
        hub.progress.connect(self._on_progress)
        hub.finished.connect(self._on_finished)
        hub.collectionsChanged.connect(self.refresh)
        self.refresh()

    # -- public (the buttons end here; tests call them) -----------------------------------------

    def add_collection(self, name: str, sources: Sequence[Path]) -> bool:
        """Link `sources` as collection `name` and start indexing it. False (said) when the name
        is taken or empty."""
        name = name.strip()
        if not name:
            return False
        if self.hub.taken(name):
            self.note.setText(f"A collection named “{name}” already exists: choose another name.")
            return False
        self.note.setText("")
        self.hub.add(name, sources)
        self.refresh()
        return True

    def selected_name(self) -> str | None:
        items = self.tree.selectedItems()
        if not items:
            return None
        item = items[0]
        while item.parent() is not None:
            item = item.parent()
        return str(item.data(0, Qt.ItemDataRole.UserRole))

    def refresh(self) -> None:
        """Rebuild the list from the store (and the hub's progress of each collection)."""
        if self.hub.closed:
            return
        keep = self.selected_name()
        open_ = {n for n, it in self._items.items() if it.isExpanded()}
        self.tree.clear()
        self._items = {}
        names = set()
        for coll in self.hub.store.collections():
            names.add(coll.name)
            item = self._collection_item(coll.name, coll.root or "")
            if not self._set_status(coll.name):  # indexing: the files written so far
                self._fill_files(item, self.hub.store.documents(coll.id))
            item.setExpanded(coll.name in open_ or coll.name == keep)
        for name in list(self.hub.service.progress) + self.hub.service.pending():
            if name not in names:  # queued before its first write
                self._collection_item(name, "")
                self._set_status(name)
        if keep in self._items:
            self._items[keep].setSelected(True)
        self._update_buttons()

    # -- rows ----------------------------------------------------------------------------------

    def _collection_item(self, name: str, root: str) -> QTreeWidgetItem:
        item = QTreeWidgetItem([name, ""])
        item.setData(0, Qt.ItemDataRole.UserRole, name)
        font = item.font(0)
        font.setBold(True)
        item.setFont(0, font)
        coll = self.hub.store.collection(name)
        where = ", ".join(str(p) for p in decode_sources(coll)) if coll is not None else root
        item.setToolTip(0, where)
        self.tree.addTopLevelItem(item)
        self._items[name] = item
        return item

    def _fill_files(self, item: QTreeWidgetItem, docs: Sequence[DocumentRow]) -> None:
        """The collection row's children: one per file, as the store has them now."""
        item.takeChildren()
        for d in docs:
            child = QTreeWidgetItem([Path(d.path).name, document_status(d)])
            child.setToolTip(0, d.path)
            child.setToolTip(1, document_status(d))
            if d.status == "error":
                child.setForeground(1, self._error_colour())
            item.addChild(child)

    def status_of(self, name: str) -> str:
        """What the collection's row says."""
        item = self._items.get(name)
        return item.text(1) if item is not None else ""

    def _set_status(self, name: str, p: IndexProgress | None = None) -> bool:
        """The row's status; for a collection not indexing, its files too, from the same read
        as its totals (the indexer writes on its own thread: two reads may differ). True when
        the files were filled."""
        item = self._items.get(name)
        if item is None:
            return False
        busy = self.hub.service.busy(name)
        p = p or self.hub.service.progress.get(name)
        coll = self.hub.store.collection(name)
        if busy:
            text = "indexing · " + (progress_text(p, True) or "starting")
            if p is not None and p.current:
                text += f" · {p.current}"
            gate = self.hub.service.gate
            if gate.generating and gate.mode == "pause":
                text += " · paused while a reply generates"
        else:
            docs = self.hub.store.documents(coll.id) if coll is not None else []
            self._fill_files(item, docs)  # (also when the index finished since the last refresh)
            errors = sum(1 for d in docs if d.status == "error")
            chunks = sum(d.chunks for d in docs)
            text = f"{len(docs)} files · {chunks:,} chunks" + (f" · {errors} error{'s' if errors != 1 else ''}"
                                                              if errors else "")
        item.setText(1, text)
        return not busy

    def _on_progress(self, name: str, p: object) -> None:
        if name not in self._items:
            self.refresh()
        self._set_status(name, p if isinstance(p, IndexProgress) else None)

    def _on_finished(self, name: str, _p: object, error: str) -> None:
        self.refresh()
        if error and error != "stopped" and name in self._items:
            self._items[name].setText(1, f"indexing failed: {error}")
            self._items[name].setForeground(1, self._error_colour())

    def _error_colour(self) -> QColor:
        text = self.palette().color(QPalette.ColorRole.Text)
        mix = 0.75
        return QColor.fromRgbF(text.redF() * (1 - mix) + ERROR_HUE.redF() * mix,
                               text.greenF() * (1 - mix) + ERROR_HUE.greenF() * mix,
                               text.blueF() * (1 - mix) + ERROR_HUE.blueF() * mix)

    def _update_buttons(self) -> None:
        chosen = self.selected_name() is not None
        self.reindex_button.setEnabled(chosen)
        self.remove_button.setEnabled(chosen)

    # -- buttons ---------------------------------------------------------------------------------

    def _ask_name(self, default: str) -> str | None:
        name, ok = QInputDialog.getText(self, "New collection", "Name:", text=default)
        return name if ok else None

    def _add_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Link a folder as a collection")
        if folder:
            name = self._ask_name(Path(folder).name)
            if name:
                self.add_collection(name, [Path(folder)])

    def _add_files(self) -> None:
        files, _ = QFileDialog.getOpenFileNames(
            self, "Link files as a collection", "",
            "Documents (*.pdf *.md *.markdown *.txt *.html *.htm *.py *.rst *.json);;All files (*)")
        if files:
            name = self._ask_name(Path(files[0]).stem)
            if name:
                self.add_collection(name, [Path(f) for f in files])

    def _reindex(self) -> None:
        name = self.selected_name()
        if name:
            self.hub.reindex(name)
            self._set_status(name)

    def _remove(self) -> None:
        name = self.selected_name()
        if name is None:
            return
        answer = QMessageBox.question(self, "Remove collection",
                                      f"Remove the collection “{name}” and its index? The files stay.")
        if answer == QMessageBox.StandardButton.Yes:
            self.hub.remove(name)
            item = self._items.pop(name, None)
            if item is not None:
                self.tree.takeTopLevelItem(self.tree.indexOfTopLevelItem(item))
