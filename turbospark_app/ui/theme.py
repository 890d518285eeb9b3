"""Light and dark, following the system.

Qt 6.5+ reports the system's scheme in `QStyleHints.colorScheme()` and re-palettes native
styles (macOS, Windows 11, GNOME through the platform theme) by itself. Widgets here draw only
with palette roles, never fixed colours, so both schemes work. Two things need help:

* QtCharts has its own themes: `is_dark()` picks ChartThemeDark / ChartThemeLight (qa_panel).
* Some platforms report a scheme but leave a style (e.g. Fusion under a bare X server or
  "offscreen") on its light palette. `follow_system_scheme(app)` then derives a dark palette
  from Fusion's so the app is not stuck light on a dark desktop; it re-applies when the system
  switches.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication


def system_scheme() -> Qt.ColorScheme:
    """What the system asks for (Unknown when the platform does not say)."""
    return QGuiApplication.styleHints().colorScheme()


def palette_is_dark(palette: QPalette) -> bool:
    """True when the palette's window colour is dark (the ground truth of what is drawn)."""
    return palette.color(QPalette.ColorRole.Window).lightness() < 128


def is_dark() -> bool:
    """Dark mode: the system says so, or (when it does not say) the palette is dark."""
    scheme = system_scheme()
    if scheme == Qt.ColorScheme.Dark:
        return True
    if scheme == Qt.ColorScheme.Light:
        return False
    return palette_is_dark(QGuiApplication.palette())


def dark_palette(base: QPalette) -> QPalette:
    """A dark palette derived from `base` by inverting lightness (hues kept, links readable)."""
    pal = QPalette(base)
    for group in (QPalette.ColorGroup.Active, QPalette.ColorGroup.Inactive, QPalette.ColorGroup.Disabled):
        for role in (
            QPalette.ColorRole.Window, QPalette.ColorRole.WindowText, QPalette.ColorRole.Base,
            QPalette.ColorRole.AlternateBase, QPalette.ColorRole.Text, QPalette.ColorRole.Button,
            QPalette.ColorRole.ButtonText, QPalette.ColorRole.ToolTipBase, QPalette.ColorRole.ToolTipText,
            QPalette.ColorRole.PlaceholderText, QPalette.ColorRole.Light, QPalette.ColorRole.Midlight,
            QPalette.ColorRole.Mid, QPalette.ColorRole.Dark, QPalette.ColorRole.Shadow,
        ):
            c = base.color(group, role)
            h, s, lightness, a = c.getHsl()
            pal.setColor(group, role, QColor.fromHsl(max(h, 0), s, 255 - lightness, a))
        link = base.color(group, QPalette.ColorRole.Link).lighter(170)
        pal.setColor(group, QPalette.ColorRole.Link, link)
    return pal


class _Follower:
    """Keeps the app's palette in step with the system scheme (see the module docstring)."""

    def __init__(self, app: QApplication) -> None:
        self.app = app
        self.light = QPalette(app.palette())
        self.applied_dark = False

    def apply(self) -> None:
        want_dark = system_scheme() == Qt.ColorScheme.Dark
        if want_dark and not palette_is_dark(self.app.palette()):
            self.app.setPalette(dark_palette(self.light))
            self.applied_dark = True
        elif not want_dark and self.applied_dark:
            self.app.setPalette(self.light)
            self.applied_dark = False


def follow_system_scheme(app: QApplication) -> _Follower:
    """Apply the system scheme now and on every change; returns the follower (keep it)."""
    follower = _Follower(app)
    follower.apply()
    app.styleHints().colorSchemeChanged.connect(lambda *_: follower.apply())
    return follower
