"""Saved endpoints (name, base URL, default model) and their API keys.

The list is JSON in the per-user config folder (`endpoints.json`), shared by the app and the
CLI. Keys never go into that file: they live in the OS keychain through `keyring` when a real
backend exists; without one they go to `endpoint-keys.json` beside it, readable by the user
only (turbospark_app.host.keystore, shared with the local API's key).
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from ..host.keystore import KeyStore, default_folder
from .client import Target

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


def endpoint_keys(folder: Path, *, use_keyring: bool = True) -> KeyStore:
    """The endpoints' API keys by endpoint id: keychain entries "endpoint:<id>", else
    `endpoint-keys.json` in `folder`."""
    return KeyStore(folder, KEYS_FILE, prefix="endpoint:", use_keyring=use_keyring)


class EndpointBook:
    """The saved endpoints and their keys."""

    def __init__(self, folder: Path | None = None, *, use_keyring: bool = True) -> None:
        folder = default_folder() if folder is None else folder
        self.folder = folder
        self.path = folder / ENDPOINTS_FILE
        self.keys = endpoint_keys(folder, use_keyring=use_keyring)
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
