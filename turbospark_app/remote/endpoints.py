"""Saved endpoints (name, base URL, default model) and their API keys.

The list is JSON in the per-user config folder (`endpoints.json`), shared by the app and the
CLI. Keys never go into that file: they live in the OS keychain through `keyring` when a real
backend exists (macOS Keychain, Windows Credential Locker, Secret Service / KWallet); without
one they go to `endpoint-keys.json` beside it, created readable by the user only (0600), and
`KeyStore.location` says which it is so the app can tell the user.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from .client import Target

SERVICE = "TurboSpark"
ENDPOINTS_FILE = "endpoints.json"
KEYS_FILE = "endpoint-keys.json"


@dataclass(frozen=True)
class Endpoint:
    """One remote server. `id` is stable across renames (keys are filed under it)."""

    name: str
    base_url: str
    default_model: str = ""
    id: str = ""

    def with_id(self) -> "Endpoint":
        return self if self.id else replace(self, id=uuid.uuid4().hex)

    def target(self, api_key: str = "", model: str | None = None) -> Target:
        """Where a turn goes with this endpoint (its default model unless `model`)."""
        return Target(self.base_url, model or self.default_model, api_key, self.name)


def _usable_keyring() -> Any | None:
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


class KeyStore:
    """API keys by endpoint id: the OS keychain, else a user-only file (see module docstring)."""

    def __init__(self, folder: Path, *, use_keyring: bool = True) -> None:
        self.folder = folder
        self._keyring = _usable_keyring() if use_keyring else None
        self.path = folder / KEYS_FILE

    @property
    def location(self) -> str:
        """Where keys are kept, in words for the user."""
        if self._keyring is not None:
            return f"the system keychain ({type(self._keyring).__module__.split('.')[-1]})"
        return f"{self.path} (no system keychain found; the file is readable by you only)"

    @property
    def in_keychain(self) -> bool:
        return self._keyring is not None

    def get(self, endpoint_id: str) -> str:
        if self._keyring is not None:
            return self._keyring.get_password(SERVICE, f"endpoint:{endpoint_id}") or ""
        return str(self._read().get(endpoint_id, ""))

    def set(self, endpoint_id: str, key: str) -> None:
        """Store (or, with an empty key, forget) an endpoint's key."""
        if self._keyring is not None:
            name = f"endpoint:{endpoint_id}"
            if key:
                self._keyring.set_password(SERVICE, name, key)
            elif self._keyring.get_password(SERVICE, name) is not None:
                self._keyring.delete_password(SERVICE, name)
            return
        keys = self._read()
        if key:
            keys[endpoint_id] = key
        else:
            keys.pop(endpoint_id, None)
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


def default_folder() -> Path:
    """Where endpoints live: the per-user config folder, or TURBOSPARK_DATA_DIR when that is set
    (tests and QA sandboxes, like the app's settings), so nothing leaks into the user's own."""
    override = os.environ.get("TURBOSPARK_DATA_DIR", "").strip()
    if override:
        return Path(override).expanduser()
    from ..host.folders import config_dir

    return config_dir()


class EndpointBook:
    """The saved endpoints and their keys."""

    def __init__(self, folder: Path | None = None, *, use_keyring: bool = True) -> None:
        folder = default_folder() if folder is None else folder
        self.folder = folder
        self.path = folder / ENDPOINTS_FILE
        self.keys = KeyStore(folder, use_keyring=use_keyring)
        self.error: str | None = None  # why the saved list could not be read, if it could not

    def endpoints(self) -> list[Endpoint]:
        """The saved endpoints, in order (an unreadable file reads as none, and says why)."""
        self.error = None
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as e:
            self.error = f"{self.path} could not be read: {e}"
            return []
        out = []
        for item in data if isinstance(data, list) else []:
            if isinstance(item, dict) and item.get("base_url") and item.get("id"):
                out.append(Endpoint(str(item.get("name") or item["base_url"]), str(item["base_url"]),
                                    str(item.get("default_model") or ""), str(item["id"])))
        return out

    def get(self, endpoint_id: str) -> Endpoint | None:
        return next((e for e in self.endpoints() if e.id == endpoint_id), None)

    def save(self, entries: list[tuple[Endpoint, str | None]]) -> list[Endpoint]:
        """Replace the list with (endpoint, key) pairs: new endpoints get an id, a key of None
        leaves the stored one as it is, "" forgets it; endpoints no longer listed lose their
        keys. Returns the saved endpoints."""
        saved = [e.with_id() for e, _ in entries]
        gone = {e.id for e in self.endpoints()} - {e.id for e in saved}
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps([asdict(e) for e in saved], indent=2), encoding="utf-8")
        os.replace(tmp, self.path)
        for endpoint_id in gone:
            self.keys.set(endpoint_id, "")
        for endpoint, (_, key) in zip(saved, entries):
            if key is not None:
                self.keys.set(endpoint.id, key)
        return saved

    def target(self, endpoint_id: str, model: str | None = None) -> Target | None:
        """The Target for a saved endpoint (with its key), or None when it is gone."""
        endpoint = self.get(endpoint_id)
        return None if endpoint is None else endpoint.target(self.keys.get(endpoint_id), model)
