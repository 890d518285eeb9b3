"""The conversation list: filter box, New button, open / rename / delete.

Rename is inline (F2, or the context menu); delete asks the window (which confirms).
A conversation with a turn running shows a dot.
"""

from __future__ import annotations

import time

from PySide6.QtCore import QModelIndex, QPoint, QSortFilterProxyModel, Qt, Signal
from PySide6.QtGui import (
    QAction,
    QColor,
    QIcon,
    QKeySequence,
    QPainter,
    QPalette,
    QPixmap,
    QStandardItem,
    QStandardItemModel,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QLineEdit,
    QListView,
    QMenu,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from ..conversations.store import Conversation

ID_ROLE = Qt.ItemDataRole.UserRole + 1
UPDATED_ROLE = Qt.ItemDataRole.UserRole + 2
TITLE_ROLE = Qt.ItemDataRole.UserRole + 3  # the saved title (an emptied edit reverts to it)


def dot_icon(color: QColor, size: int = 10) -> QIcon:
    """A small filled circle: the "a turn is running" mark."""
    pix = QPixmap(size, size)
    pix.fill(Qt.GlobalColor.transparent)
    p = QPainter(pix)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    p.setPen(Qt.PenStyle.NoPen)
    p.setBrush(color)
    p.drawEllipse(1, 1, size - 2, size - 2)
    p.end()
    return QIcon(pix)


class Sidebar(QWidget):
    """See the module docstring."""

    openRequested = Signal(str)  # conversation id
    newRequested = Signal()
    renamed = Signal(str, str)  # conversation id, new title
    deleteRequested = Signal(str)  # conversation id

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("sidebar")
        self.filter = QLineEdit(self)
        self.filter.setObjectName("conversationFilter")
        self.filter.setPlaceholderText("Filter conversations")
        self.filter.setClearButtonEnabled(True)
        self.new_button = QPushButton("New", self)
        self.new_button.setObjectName("newConversationButton")
        self.new_button.setToolTip("New conversation (Ctrl+N)")
        self.new_button.clicked.connect(self.newRequested)

        self.model = QStandardItemModel(self)
        self.proxy = QSortFilterProxyModel(self)
        self.proxy.setSourceModel(self.model)
        self.proxy.setFilterCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.proxy.setSortRole(UPDATED_ROLE)
        self.proxy.setDynamicSortFilter(True)
        self.proxy.sort(0, Qt.SortOrder.DescendingOrder)
        self.filter.textChanged.connect(self.proxy.setFilterFixedString)

        self.view = QListView(self)
        self.view.setObjectName("conversationList")
        self.view.setModel(self.proxy)
        self.view.setUniformItemSizes(True)
        self.view.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.view.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.view.setWordWrap(False)
        self.view.setSpacing(1)
        self.view.setEditTriggers(QAbstractItemView.EditTrigger.EditKeyPressed)
        self.view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.view.activated.connect(self._activated)
        self.view.clicked.connect(self._activated)
        self.view.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.view.customContextMenuRequested.connect(self._context_menu)
        self.model.itemChanged.connect(self._item_changed)

        delete = QAction("Delete", self.view)
        delete.setShortcut(QKeySequence(QKeySequence.StandardKey.Delete))
        delete.setShortcutContext(Qt.ShortcutContext.WidgetShortcut)
        delete.triggered.connect(self._delete_current)
        self.view.addAction(delete)

        top = QHBoxLayout()
        top.setSpacing(6)
        top.addWidget(self.filter, 1)
        top.addWidget(self.new_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 4, 8)
        layout.setSpacing(6)
        layout.addLayout(top)
        layout.addWidget(self.view, 1)
        self._busy_icon = QIcon()
        self._refresh_icon()

    def _refresh_icon(self) -> None:
        self._busy_icon = dot_icon(self.palette().color(QPalette.ColorRole.Highlight))

    # -- content ---------------------------------------------------------------------------

    def set_conversations(self, conversations: list[Conversation]) -> None:
        """Show these conversations (replaces the list)."""
        self.model.blockSignals(True)
        self.model.clear()
        self.model.blockSignals(False)
        for conv in conversations:
            self.add_conversation(conv)

    def add_conversation(self, conv: Conversation) -> None:
        """Add one conversation (sorted by last update)."""
        item = QStandardItem(conv.title)
        item.setData(conv.id, ID_ROLE)
        item.setData(conv.updated, UPDATED_ROLE)
        item.setData(conv.title, TITLE_ROLE)
        item.setToolTip(f"{conv.title}\nlast used {time.strftime('%Y-%m-%d %H:%M', time.localtime(conv.updated))}")
        item.setEditable(True)
        self.model.blockSignals(True)
        self.model.appendRow(item)
        self.model.blockSignals(False)
        self.proxy.invalidate()

    def _item(self, conversation_id: str) -> QStandardItem | None:
        for row in range(self.model.rowCount()):
            item = self.model.item(row)
            if item is not None and item.data(ID_ROLE) == conversation_id:
                return item
        return None

    def conversation_ids(self) -> list[str]:
        """The ids shown (after filtering), top to bottom."""
        return [self.proxy.index(r, 0).data(ID_ROLE) for r in range(self.proxy.rowCount())]

    def title_of(self, conversation_id: str) -> str | None:
        """The title shown for a conversation."""
        item = self._item(conversation_id)
        return None if item is None else item.text()

    def set_title(self, conversation_id: str, title: str) -> None:
        """Show a new title (no `renamed` signal)."""
        item = self._item(conversation_id)
        if item is not None:
            self.model.blockSignals(True)
            item.setText(title)
            item.setData(title, TITLE_ROLE)
            self.model.blockSignals(False)
            self.view.viewport().update()

    def touch(self, conversation_id: str) -> None:
        """Move a conversation to the top (it was just used)."""
        item = self._item(conversation_id)
        if item is not None:
            self.model.blockSignals(True)
            item.setData(time.time(), UPDATED_ROLE)
            self.model.blockSignals(False)
            self.proxy.invalidate()

    def remove(self, conversation_id: str) -> None:
        """Remove a conversation from the list."""
        item = self._item(conversation_id)
        if item is not None:
            self.model.removeRow(item.row())

    def set_busy(self, conversation_id: str, busy: bool) -> None:
        """Show or hide the running-turn dot."""
        item = self._item(conversation_id)
        if item is not None:
            self.model.blockSignals(True)
            item.setIcon(self._busy_icon if busy else QIcon())
            self.model.blockSignals(False)
            self.view.viewport().update()

    def select(self, conversation_id: str) -> None:
        """Highlight a conversation (the pane with focus shows it)."""
        item = self._item(conversation_id)
        if item is not None:
            index = self.proxy.mapFromSource(item.index())
            if index.isValid():
                self.view.setCurrentIndex(index)

    def begin_rename(self, conversation_id: str) -> None:
        """Start inline editing of a title."""
        item = self._item(conversation_id)
        if item is not None:
            index = self.proxy.mapFromSource(item.index())
            self.view.setCurrentIndex(index)
            self.view.edit(index)

    # -- signals ---------------------------------------------------------------------------

    def _activated(self, index: QModelIndex) -> None:
        cid = index.data(ID_ROLE)
        if cid:
            self.openRequested.emit(cid)

    def _item_changed(self, item: QStandardItem) -> None:
        title = " ".join(item.text().split())
        if title == item.data(TITLE_ROLE):
            return  # an icon or sort-key change, or no change at all
        if not title:
            self.set_title(item.data(ID_ROLE), item.data(TITLE_ROLE))
            return
        self.set_title(item.data(ID_ROLE), title)
        self.renamed.emit(item.data(ID_ROLE), title)

    def _delete_current(self) -> None:
        cid = self.view.currentIndex().data(ID_ROLE)
        if cid:
            self.deleteRequested.emit(cid)

    def _context_menu(self, pos: QPoint) -> None:
        index = self.view.indexAt(pos)
        cid = index.data(ID_ROLE)
        menu = QMenu(self)
        if cid:
            menu.addAction("Open", lambda: self.openRequested.emit(cid))
            menu.addAction("Rename…", lambda: self.begin_rename(cid))
            menu.addSeparator()
            menu.addAction("Delete…", lambda: self.deleteRequested.emit(cid))
        else:
            menu.addAction("New conversation", self.newRequested.emit)
        menu.exec(self.view.viewport().mapToGlobal(pos))

    def changeEvent(self, event) -> None:  # type: ignore[no-untyped-def]  # noqa: N802
        """Keep the busy dot in the palette's highlight colour."""
        super().changeEvent(event)
        if event.type() == event.Type.PaletteChange:
            self._refresh_icon()
