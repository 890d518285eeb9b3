"""The About box's versions, and light / dark following the system."""

from __future__ import annotations

import platform

import numpy
import PySide6
from PySide6.QtCore import Qt, qVersion
from PySide6.QtGui import QGuiApplication, QPalette

from turbospark_app import __version__
from turbospark_app.ui import theme
from turbospark_app.ui.dialogs.about import AboutDialog, versions, versions_text
from turbospark_app.ui.status_bar import model_label


def test_versions_name_every_component() -> None:
    info = {"name": "SmolLM2", "quantization": "Q4_1", "path": "/m/smol.gguf"}
    rows = dict(versions(info))
    assert rows["TurboSpark"] == __version__ and rows["Qt"] == qVersion()
    assert rows["PySide6"] == PySide6.__version__ and rows["numpy"] == numpy.__version__
    assert rows["Python"].startswith(platform.python_version())
    # The status bar's name for the model, and where it was loaded from.
    assert rows["Model"] == f"{model_label(info)} (/m/smol.gguf)" and "Q4_1" in rows["Model"]
    assert dict(versions(None))["Model"] == "not loaded"


def test_about_copies_the_versions(qtbot) -> None:
    d = AboutDialog({"name": "fake-model"})
    qtbot.addWidget(d)
    d.copy()
    text = QGuiApplication.clipboard().text()
    assert text == versions_text(d.rows) and f"Qt: {qVersion()}" in text and "Model: fake-model" in text


def test_dark_palette_inverts_lightness_and_keeps_text_readable(qapp) -> None:
    light = QGuiApplication.palette()
    dark = theme.dark_palette(light)
    assert not theme.palette_is_dark(light) and theme.palette_is_dark(dark)
    window, text = dark.color(QPalette.ColorRole.Window), dark.color(QPalette.ColorRole.WindowText)
    assert text.lightness() - window.lightness() > 100  # contrast survives


def test_follows_the_system_scheme_both_ways(qapp, monkeypatch) -> None:
    scheme = {"now": Qt.ColorScheme.Light}
    monkeypatch.setattr(theme, "system_scheme", lambda: scheme["now"])
    original = QPalette(qapp.palette())
    try:
        follower = theme.follow_system_scheme(qapp)
        assert not theme.palette_is_dark(qapp.palette()) and not theme.is_dark()
        scheme["now"] = Qt.ColorScheme.Dark
        follower.apply()
        assert theme.palette_is_dark(qapp.palette()) and theme.is_dark()
        scheme["now"] = Qt.ColorScheme.Light
        follower.apply()
        assert not theme.palette_is_dark(qapp.palette())
        scheme["now"] = Qt.ColorScheme.Unknown  # the platform does not say: the palette decides
        assert theme.is_dark() is False
    finally:
        qapp.setPalette(original)
