"""The Qt desktop UI. Entry point: `turbospark_app.ui.app.run_app`."""

from .qt_compat import shield_singletons

# Before any widget exists: PySide6 6.12 on CPython 3.11 leaks references to None / True on
# every void call and emit, which aborts a long streaming session (see qt_compat).
shield_singletons()
