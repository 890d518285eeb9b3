"""Where UI layout and defaults live: QSettings (organization "TurboSpark").

Normally the platform's native store (a plist on macOS). When `TURBOSPARK_DATA_DIR` is set
(tests, QA sandboxes, screenshots) an INI file in that folder is used instead, so nothing
leaks into the real user's settings.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from PySide6.QtCore import QSettings

ORGANIZATION = "TurboSpark"
APPLICATION = "TurboSpark"
SETTINGS_FILENAME = "settings.ini"


def app_settings() -> QSettings:
    """The app's QSettings (see the module docstring)."""
    override = os.environ.get("TURBOSPARK_DATA_DIR", "").strip()
    if override:
        folder = Path(override).expanduser()
        folder.mkdir(parents=True, exist_ok=True)
        return QSettings(str(folder / SETTINGS_FILENAME), QSettings.Format.IniFormat)
    return QSettings(ORGANIZATION, APPLICATION)


def read_json(settings: QSettings, key: str, default: Any) -> Any:
    """A JSON value stored as a string; `default` when missing or unreadable."""
    raw = settings.value(key)
    if not isinstance(raw, str) or not raw:
        return default
    try:
        return json.loads(raw)
    except ValueError:
        return default


def write_json(settings: QSettings, key: str, value: Any) -> None:
    """Store a JSON value as a string (INI and plist alike keep it verbatim)."""
    settings.setValue(key, json.dumps(value))
