"""Keyboard navigation between panes, and the shortcuts for it.

Next / previous pane walks every open pane in reading order (groups left to right, tabs left
to right) and wraps, so with a split view Ctrl+Tab goes on into the next group instead of
cycling one group's tabs only. Shortcuts come from Qt's platform lists where one exists: on
macOS Qt's "Ctrl" is the Command key, and Command+Tab belongs to the system, so NextChild
gives the platform's own choice there.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtGui import QKeySequence


def next_pane_keys() -> list[QKeySequence]:
    """Ctrl+Tab (the platform's "next child") and Ctrl+PgDown."""
    return _unique(QKeySequence.keyBindings(QKeySequence.StandardKey.NextChild) + [QKeySequence("Ctrl+PgDown")])


def previous_pane_keys() -> list[QKeySequence]:
    """Ctrl+Shift+Tab (the platform's "previous child") and Ctrl+PgUp."""
    return _unique(QKeySequence.keyBindings(QKeySequence.StandardKey.PreviousChild) + [QKeySequence("Ctrl+PgUp")])


def _unique(keys: list[QKeySequence]) -> list[QKeySequence]:
    seen: list[QKeySequence] = []
    for key in keys:
        if not key.isEmpty() and key not in seen:
            seen.append(key)
    return seen


def cycle_pane(area: Any, step: int) -> Any:
    """Show and focus the pane `step` places after the current one (PaneArea order); returns
    it, or None when no pane is open."""
    panes = area.panes()
    if not panes:
        return None
    current = area.current_pane()
    index = panes.index(current) if current in panes else -1
    target = panes[(index + step) % len(panes)]
    area.open(target.conversation_id)  # selects its tab, makes its group current, focuses it
    return target


def focus_input(area: Any) -> bool:
    """Put the keyboard focus in the current pane's message input."""
    pane = area.current_pane()
    if pane is None:
        return False
    pane.input.setFocus()
    return True
