"""Where a server's command is found. An app started from the macOS Dock or Finder gets a
short PATH (no /opt/homebrew/bin, no nvm): the peers' most common complaint is "spawn npx
ENOENT". So the login shell's PATH is read once (`$SHELL -ilc`, with a timeout) and searched
after the app's own; a command that is in neither says which PATH was searched.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

LOGIN_SHELL_TIMEOUT = 3.0
_MARK = "__TS_PATH__"


class CommandNotFound(FileNotFoundError):
    """A server's command is not an executable on the searched PATH."""

    def __init__(self, command: str, path: str) -> None:
        super().__init__(f"{command!r} not found in PATH={path}")
        self.command = command
        self.path = path


@lru_cache(maxsize=1)
def login_shell_path() -> str:
    """The PATH a login shell of the user sets up ("" when it cannot be read: Windows, no
    $SHELL, a shell that hangs past the timeout)."""
    shell = os.environ.get("SHELL")
    if sys.platform == "win32" or not shell:
        return ""
    try:
        out = subprocess.run([shell, "-ilc", f'printf "{_MARK}%s{_MARK}" "$PATH"'],
                             stdin=subprocess.DEVNULL, capture_output=True, text=True,
                             timeout=LOGIN_SHELL_TIMEOUT).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    parts = out.split(_MARK)  # the rc files may print banners around it
    return parts[1] if len(parts) >= 3 else ""


def search_path(login_path: str | None = None) -> str:
    """The app's PATH, then the login shell's folders it lacks."""
    seen: list[str] = []
    own = os.environ.get("PATH", "")
    extra = login_shell_path() if login_path is None else login_path
    for folder in [*own.split(os.pathsep), *extra.split(os.pathsep)]:
        if folder and folder not in seen:
            seen.append(folder)
    return os.pathsep.join(seen)


def resolve_command(command: str, path: str) -> str:
    """The command's absolute path: as given when it names a file, else the first match on
    `path`; CommandNotFound naming `path`."""
    if os.sep in command or (os.altsep and os.altsep in command):
        found = Path(command).expanduser()
        if found.is_file() and os.access(found, os.X_OK):
            return str(found)
        raise CommandNotFound(command, path)
    found_on_path = shutil.which(command, path=path)
    if found_on_path is None:
        raise CommandNotFound(command, path)
    return found_on_path
