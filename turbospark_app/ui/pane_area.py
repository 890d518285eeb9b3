"""The central area: groups of conversation tabs side by side in a splitter.

    Split right     a new group to the right; the current pane moves into it (or, when it
                    is its group's only tab, the next conversation opens there)
    Unsplit         every pane back into the first group
    Move pane       the current pane to the next group

A pane is moved by reparenting the same widget, so a turn streaming into it goes on. A group
that loses its last tab disappears (one group always remains). `layout_state()` /
`restore_layout()` round-trip the open conversations, their grouping and the splitter sizes.
"""

from __future__ import annotations

from typing import Any, Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication, QSplitter, QTabWidget, QWidget

from .pane.conversation_pane import ConversationPane

PaneFactory = Callable[[str], "ConversationPane | None"]


class PaneGroup(QTabWidget):
    """One column of conversation tabs."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("paneGroup")
        self.setTabsClosable(True)
        self.setMovable(True)
        self.setDocumentMode(True)
        self.setElideMode(Qt.TextElideMode.ElideRight)
        self.setUsesScrollButtons(True)

    def panes(self) -> list[ConversationPane]:
        """The panes in tab order."""
        return [self.widget(i) for i in range(self.count())]  # type: ignore[misc]


class PaneArea(QSplitter):
    """See the module docstring."""

    currentPaneChanged = Signal(object)  # ConversationPane | None
    layoutChanged = Signal()

    def __init__(self, make_pane: PaneFactory, parent: QWidget | None = None) -> None:
        super().__init__(Qt.Orientation.Horizontal, parent)
        self.setObjectName("paneArea")
        self.setChildrenCollapsible(False)
        self.setHandleWidth(6)
        self._make_pane = make_pane
        self._current: PaneGroup = self._add_group()
        QApplication.instance().focusChanged.connect(self._focus_changed)  # type: ignore[union-attr]

    # -- queries ---------------------------------------------------------------------------

    def groups(self) -> list[PaneGroup]:
        """The groups, left to right."""
        return [self.widget(i) for i in range(self.count()) if isinstance(self.widget(i), PaneGroup)]

    def panes(self) -> list[ConversationPane]:
        """Every open pane."""
        return [p for g in self.groups() for p in g.panes()]

    def find(self, conversation_id: str) -> tuple[PaneGroup, int] | None:
        """Where a conversation is open."""
        for group in self.groups():
            for i, pane in enumerate(group.panes()):
                if pane.conversation_id == conversation_id:
                    return group, i
        return None

    def current_group(self) -> PaneGroup:
        """The group the user worked in last."""
        if self._current not in self.groups():
            self._current = self.groups()[0]
        return self._current

    def current_pane(self) -> ConversationPane | None:
        """The current tab of the current group."""
        pane = self.current_group().currentWidget()
        return pane if isinstance(pane, ConversationPane) else None

    # -- operations ------------------------------------------------------------------------

    def open(self, conversation_id: str, group: PaneGroup | None = None, *, focus: bool = True) -> ConversationPane | None:
        """Show a conversation: focus its tab if open, else open it in `group` (default: the
        current group)."""
        found = self.find(conversation_id)
        if found is not None:
            g, i = found
            g.setCurrentIndex(i)
            self._set_current(g)
            pane = g.widget(i)
        else:
            pane = self._make_pane(conversation_id)
            if pane is None:
                return None
            g = group or self.current_group()
            self._add_tab(g, pane)
            self._set_current(g)
            self.layoutChanged.emit()
        if focus:
            pane.setFocus()
        return pane  # type: ignore[return-value]

    def close_pane(self, pane: ConversationPane, *, discard: bool = False) -> None:
        """Close a pane: a running turn is stopped and its reply still saved, unless
        `discard` (the conversation is being deleted)."""
        found = self.find(pane.conversation_id)
        if found is None:
            return
        group, index = found
        group.removeTab(index)
        pane.hide()
        pane.setParent(self.window())  # keep it alive until its turn ends
        if discard:
            pane.discard()
        else:
            pane.dispose()
        self._prune()
        self.layoutChanged.emit()
        self.currentPaneChanged.emit(self.current_pane())

    def close_conversation(self, conversation_id: str) -> None:
        """Close the pane of a conversation, if it is open."""
        found = self.find(conversation_id)
        if found is not None:
            self.close_pane(found[0].widget(found[1]))  # type: ignore[arg-type]

    def split_right(self, next_conversation: Callable[[], str | None] | None = None) -> None:
        """A new group right of the current one (see the module docstring)."""
        source = self.current_group()
        target = self._add_group(self.indexOf(source) + 1)
        pane = self.current_pane()
        if pane is not None and source.count() > 1:
            self._move(pane, target)
        else:
            cid = next_conversation() if next_conversation else None
            if cid is None or self.open(cid, target) is None:
                self._prune()
                return
        self._set_current(target)
        self._even_sizes()
        self.layoutChanged.emit()

    def unsplit(self) -> None:
        """Every pane into the first group."""
        groups = self.groups()
        first = groups[0]
        current = self.current_pane()
        for group in groups[1:]:
            for pane in group.panes():
                self._move(pane, first)
        self._prune()
        if current is not None:
            first.setCurrentWidget(current)
        self._set_current(first)
        self.layoutChanged.emit()

    def move_current_to_next_group(self) -> None:
        """Move the current pane one group to the right (wrapping); splits when alone."""
        pane = self.current_pane()
        if pane is None:
            return
        groups = self.groups()
        if len(groups) == 1:
            if groups[0].count() > 1:
                self.split_right()
            return
        target = groups[(groups.index(self.current_group()) + 1) % len(groups)]
        self._move(pane, target)
        self._prune()
        self._set_current(target)
        pane.setFocus()
        self.layoutChanged.emit()

    def set_tab_title(self, conversation_id: str, title: str) -> None:
        """Show a conversation's new title on its tab."""
        found = self.find(conversation_id)
        if found is not None:
            group, index = found
            group.setTabText(index, self._tab_text(title))
            group.setTabToolTip(index, title)

    def set_tab_busy(self, conversation_id: str, icon: QIcon) -> None:
        """Show or clear a tab's running-turn icon."""
        found = self.find(conversation_id)
        if found is not None:
            found[0].setTabIcon(found[1], icon)

    # -- persistence -----------------------------------------------------------------------

    def layout_state(self) -> dict[str, Any]:
        """The open conversations per group, each group's current tab, sizes, active group."""
        groups = self.groups()
        return {
            "groups": [
                {"conversations": [p.conversation_id for p in g.panes()], "current": g.currentIndex()}
                for g in groups
            ],
            "sizes": self.sizes(),
            "active": groups.index(self.current_group()),
        }

    def restore_layout(self, state: dict[str, Any]) -> None:
        """Reopen what `layout_state` saved; conversations that no longer exist are skipped."""
        specs = [g for g in state.get("groups", []) if isinstance(g, dict)]
        for n, spec in enumerate(specs):
            group = self.groups()[0] if n == 0 else self._add_group()
            for cid in spec.get("conversations", []):
                if isinstance(cid, str) and self.find(cid) is None:
                    pane = self._make_pane(cid)
                    if pane is not None:
                        self._add_tab(group, pane)
            current = spec.get("current", 0)
            if isinstance(current, int) and 0 <= current < group.count():
                group.setCurrentIndex(current)
        self._prune()
        groups = self.groups()
        active = state.get("active", 0)
        self._set_current(groups[active] if isinstance(active, int) and 0 <= active < len(groups) else groups[0])
        sizes = state.get("sizes")
        if isinstance(sizes, list) and len(sizes) == len(groups) and all(isinstance(s, int) for s in sizes):
            self.setSizes(sizes)
        else:
            self._even_sizes()

    # -- internals -------------------------------------------------------------------------

    @staticmethod
    def _tab_text(title: str) -> str:
        return title if len(title) <= 28 else title[:27] + "…"

    def _add_group(self, index: int | None = None) -> PaneGroup:
        group = PaneGroup(self)
        group.tabCloseRequested.connect(lambda i, g=group: self.close_pane(g.widget(i)))
        group.currentChanged.connect(lambda _i, g=group: self._group_tab_changed(g))
        group.tabBarClicked.connect(lambda _i, g=group: self._set_current(g))
        if index is None:
            self.addWidget(group)
        else:
            self.insertWidget(index, group)
        return group

    def _add_tab(self, group: PaneGroup, pane: ConversationPane) -> None:
        index = group.addTab(pane, self._tab_text(pane.conversation.title))
        group.setTabToolTip(index, pane.conversation.title)
        group.setCurrentIndex(index)

    def _move(self, pane: ConversationPane, target: PaneGroup) -> None:
        found = self.find(pane.conversation_id)
        if found is None or found[0] is target:
            return
        source, index = found
        icon = source.tabIcon(index)
        source.removeTab(index)
        self._add_tab(target, pane)
        target.setTabIcon(target.indexOf(pane), icon)

    def _prune(self) -> None:
        """Drop empty groups (keep one)."""
        for group in self.groups():
            if group.count() == 0 and len(self.groups()) > 1:
                if self._current is group:
                    self._current = next(g for g in self.groups() if g is not group)
                group.hide()
                group.setParent(None)
                group.deleteLater()

    def _even_sizes(self) -> None:
        n = len(self.groups())
        if n:
            total = max(self.width(), n * 200)
            self.setSizes([total // n] * n)

    def _set_current(self, group: PaneGroup) -> None:
        if group is not self._current:
            self._current = group
        self.currentPaneChanged.emit(self.current_pane())

    def _group_tab_changed(self, group: PaneGroup) -> None:
        if group is self._current:
            self.currentPaneChanged.emit(self.current_pane())

    def _focus_changed(self, _old: QWidget | None, new: QWidget | None) -> None:
        widget = new
        while widget is not None and widget is not self:
            if isinstance(widget, PaneGroup) and widget.parent() is self:
                if widget is not self._current:
                    self._set_current(widget)
                return
            widget = widget.parentWidget()
