"""Secrets kept on this machine (API keys): the OS keychain through `keyring` when a real backend
exists (macOS Keychain, Windows Credential Locker, Secret Service / KWallet); without one, a JSON
file in the config folder created readable by the user only (0600). `KeyStore.location` says
which it is, so the app can tell the user. Used by the remote endpoints' keys and the local API's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

SERVICE = "TurboSpark"


def usable_keyring() -> Any | None:
    """The keyring backend when it is a real one (not the fail / null / chained-to-nothing one)."""
    try:
        import keyring
        from keyring.backends import fail

        backend = keyring.get_keyring()
    except Exception:  # noqa: BLE001 - a broken keyring install must not stop the app
        return None
    if isinstance(backend, fail.Keyring) or getattr(backend, "priority", 0) <= 0:
        return None
    if type(backend).__name__ in ("ChainerBackend",) and not getattr(backend, "backends", None):
        return None
    return backend


def default_folder() -> Path:
    """Where the app's own files (endpoints, fallback key files) live: the per-user config
    folder, or TURBOSPARK_DATA_DIR when that is set (tests and QA sandboxes, like the app's
    settings), so nothing leaks into the user's own."""
    override = os.environ.get("TURBOSPARK_DATA_DIR", "").strip()
    if override:
        return Path(override).expanduser()
    from .folders import config_dir

    return config_dir()


class KeyStore:
    """Secrets by name: in the keychain as (SERVICE, prefix + name), else in `folder/file_name`."""

    def __init__(self, folder: Path, file_name: str, *, prefix: str = "",
                 use_keyring: bool = True) -> None:
        self.folder = folder
        self.path = folder / file_name
        self.prefix = prefix
        self._keyring = usable_keyring() if use_keyring else None

    @property
    def location(self) -> str:
        """Where keys are kept, in words for the user."""
        if self._keyring is not None:
            return f"the system keychain ({type(self._keyring).__module__.split('.')[-1]})"
        return f"{self.path} (no system keychain found; the file is readable by you only)"

    @property
    def in_keychain(self) -> bool:
        return self._keyring is not None

    def get(self, name: str) -> str:
        """The stored secret, "" when there is none."""
        if self._keyring is not None:
            return self._keyring.get_password(SERVICE, self.prefix + name) or ""
        return str(self._read().get(name, ""))

    def set(self, name: str, key: str) -> None:
        """Store (or, with an empty key, forget) a secret. Raises keyring's KeyringError or
        OSError when it cannot be stored."""
        if self._keyring is not None:
            if key:
                self._keyring.set_password(SERVICE, self.prefix + name, key)
            elif self._keyring.get_password(SERVICE, self.prefix + name) is not None:
                self._keyring.delete_password(SERVICE, self.prefix + name)
            return
        keys = self._read()
        if key:
            keys[name] = key
        elif name not in keys:
            return  # nothing to forget: no file written
        else:
            keys.pop(name)
        self._write(keys)

    def _read(self) -> dict[str, str]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _write(self, keys: dict[str, str]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        # Created 0600 (never world-readable, not even for a moment), then renamed over.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(keys, f)
        os.chmod(tmp, 0o600)
        os.replace(tmp, self.path)
