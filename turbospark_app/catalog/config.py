"""The catalog's two settings, shared by the window and the CLI: where downloaded models go
(default `<data dir>/models`, beside the default model; `TURBOSPARK_MODELS_DIR` overrides it)
and the optional Hugging Face token for gated repos (kept with the API keys: the keychain, or a
0600 file). A small JSON file in the app's folder holds the folder; the token never goes there."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..host import folders
from ..host.keystore import KeyStore, default_folder

MODELS_DIR_ENV = "TURBOSPARK_MODELS_DIR"
SETTINGS_FILE = "catalog.json"
TOKEN_NAME = "huggingface"
DEFAULT_ENDPOINT = "https://huggingface.co"


def _settings_path() -> Path:
    return default_folder() / SETTINGS_FILE


def _read() -> dict:
    try:
        data = json.loads(_settings_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def models_folder() -> Path:
    """Where downloads land: $TURBOSPARK_MODELS_DIR, else the setting, else `<data dir>/models`."""
    override = os.environ.get(MODELS_DIR_ENV, "").strip()
    chosen = override or str(_read().get("models_folder") or "")
    path = Path(chosen).expanduser() if chosen else folders.models_dir()
    path.mkdir(parents=True, exist_ok=True)
    return path


def set_models_folder(path: Path | None) -> None:
    """Change (None: back to the default) the models folder; files already there stay where
    they are (the old folder's models are still listed while they exist)."""
    data = _read()
    old = data.get("models_folder")
    if old and (path is None or str(path) != old):
        data.setdefault("previous_folders", [])
        if old not in data["previous_folders"]:
            data["previous_folders"].append(old)
    if path is None:
        data.pop("models_folder", None)
    else:
        Path(path).expanduser().mkdir(parents=True, exist_ok=True)
        data["models_folder"] = str(Path(path).expanduser())
    target = _settings_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
    os.replace(tmp, target)


def previous_folders() -> list[Path]:
    """Folders the models folder was moved away from (their models are still listed)."""
    return [Path(p) for p in _read().get("previous_folders", []) if isinstance(p, str)]


def hub_endpoint() -> str:
    """The Hub's address: $HF_ENDPOINT (a mirror, or the tests' stand-in), read at each call
    (huggingface_hub reads it once, at import)."""
    return (os.environ.get("HF_ENDPOINT", "").strip() or DEFAULT_ENDPOINT).rstrip("/")


def token_store() -> KeyStore:
    """Where the Hub token is kept (the same store as the API keys)."""
    return KeyStore(default_folder(), "hub-token.json", prefix="hub:")


def hub_token() -> str | None:
    """The stored Hub token, None when there is none (then no token is sent, not even one
    `hf auth login` left on this machine)."""
    try:
        return token_store().get(TOKEN_NAME) or None
    except Exception:  # noqa: BLE001 - a broken keychain means "no token", not a crash
        return None
