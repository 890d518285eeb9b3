"""The window's documents: the hub (`docs_hub`), the Documents menu (Collections…, Re-index
All) before Help, and the QA panel's "Last retrieval" table: the last turn's ranked chunks with
both scores (cosine and BM25, each with its rank) and the fused (reciprocal rank) score.
Every collection is looked at again a few seconds after the window opens (files changed while
the app was closed are re-indexed; unchanged ones cost a stat), and when its files change
(`collection_watch`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QHeaderView, QSizePolicy, QTableWidget, QTableWidgetItem

from ..documents.sources import Prepared
from .services.collection_watch import CollectionWatch
from .services.docs_hub import DocsHub

RECHECK_AFTER_MS = 4000
COLUMNS = ["#", "file", "page", "fused", "cosine", "cos rank", "BM25", "BM25 rank"]


class RetrievalTable(QTableWidget):
    """The last query's ranked chunks (QA panel)."""

    def __init__(self, parent: Any = None) -> None:
        super().__init__(0, len(COLUMNS), parent)
        self.setObjectName("retrievalTable")
        self.setHorizontalHeaderLabels(COLUMNS)
        self.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.verticalHeader().setVisible(False)
        self.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        # It takes the room the panel has and asks for none: the panes above keep theirs
        # (tests/test_ui_fit.py: two panes and the QA panel in the default window).
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Ignored)
        self.query = ""

    def show_prepared(self, prepared: Prepared) -> None:
        rows = [h for result in prepared.search for h in result.hits]
        self.setRowCount(len(rows))
        for r, h in enumerate(rows):
            cells = [str(r + 1), Path(h.chunk.path).name, "" if h.chunk.page is None else str(h.chunk.page),
                     f"{h.score:.4f}", "" if h.cosine is None else f"{h.cosine:.3f}",
                     "" if h.cosine_rank is None else str(h.cosine_rank),
                     "" if h.bm25 is None else f"{h.bm25:.2f}", "" if h.bm25_rank is None else str(h.bm25_rank)]
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(" ".join(h.chunk.text.split())[:600] if c == 1 else text)
                self.setItem(r, c, item)
        self.setToolTip(f"{len(rows)} chunks · retrieval {prepared.seconds * 1000:.0f} ms")


def install_documents(window: Any, hub: DocsHub | None = None) -> DocsHub:
    """Give `window` its hub, the Documents menu and the QA panel's table."""
    hub = hub or DocsHub(window.bridge, parent=window)
    bar = window.menuBar()
    menu = bar.addMenu("&Documents")
    help_action = next((a for a in bar.actions() if a.text().replace("&", "") == "Help"), None)
    if help_action is not None:  # before Help, as every platform's menus go
        bar.insertMenu(help_action, menu)
    window._action(menu, "&Collections…", lambda: open_collections(window, hub), None, "actionCollections")
    window._action(menu, "&Re-index All Collections", hub.reindex, None, "actionReindexAll")
    window.documents_menu = menu
    table = RetrievalTable()
    window.qa_panel.add_section("Last retrieval (ranked chunks)", table)
    hub.searched.connect(table.show_prepared)
    window.retrieval_table = table
    QTimer.singleShot(RECHECK_AFTER_MS, window, hub.reindex)
    window.collection_watch = CollectionWatch(hub, window)  # a changed file: re-indexed
    return hub


def open_collections(window: Any, hub: DocsHub) -> None:
    """Documents › Collections… (one dialog; raised when already open)."""
    from .dialogs.collections import CollectionsDialog

    dialog = getattr(window, "_collections_dialog", None)
    if dialog is None:
        dialog = CollectionsDialog(hub, window)
        window._collections_dialog = dialog
    dialog.show()
    dialog.raise_()
    dialog.activateWindow()
