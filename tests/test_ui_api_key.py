"""The local API's key lives in the system keychain (through `keyring`), else in a user-only file;
a key that earlier versions left in QSettings in plain text is moved there at the first start."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Iterator

import keyring
import pytest
from keyring.backend import KeyringBackend
from keyring.errors import KeyringError, PasswordSetError
from PySide6.QtCore import QSettings

from turbospark_app.host.keystore import SERVICE, usable_keyring
from turbospark_app.server import ServerConfig
from turbospark_app.ui.services.api_server import (
    LOCAL_API_KEY_NAME,
    LOCAL_API_KEYS_FILE,
    ApiServerController,
    load_api_config,
    local_api_keys,
    save_api_config,
)
from turbospark_app.ui.prefs.store import read_json, write_json


class MemoryKeyring(KeyringBackend):
    """A keyring backend in memory: what a real keychain does, minus the OS."""

    priority = 5  # type: ignore[assignment]  # a real backend's rank (the fail backend's is 0)
    # Subclasses register themselves with keyring; not viable keeps keyring's own start-up
    # choice (and its chainer) from picking this test double for other tests.
    viable = False

    def __init__(self) -> None:
        super().__init__()
        self.items: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.items.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.items[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        del self.items[(service, username)]


class LockedKeyring(MemoryKeyring):
    """A keychain that refuses to store anything (locked, or the user said no)."""

    def set_password(self, service: str, username: str, password: str) -> None:
        raise PasswordSetError("the keychain is locked")


@pytest.fixture
def ring() -> Iterator[MemoryKeyring]:
    previous = keyring.get_keyring()
    backend = MemoryKeyring()
    keyring.set_keyring(backend)
    yield backend
    keyring.set_keyring(previous)


def _settings(tmp_path: Path) -> QSettings:
    return QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)


def _settings_text(settings: QSettings) -> str:
    settings.sync()
    return Path(settings.fileName()).read_text(encoding="utf-8")


def test_the_key_goes_to_the_keychain_not_to_qsettings(tmp_path: Path, ring: MemoryKeyring) -> None:
    assert usable_keyring() is ring
    keys = local_api_keys(tmp_path)
    assert keys.in_keychain and "keychain" in keys.location
    settings = _settings(tmp_path)
    save_api_config(settings, ServerConfig(host="0.0.0.0", port=9001, api_key="sk-secret"), keys)
    assert ring.items == {(SERVICE, LOCAL_API_KEY_NAME): "sk-secret"}
    assert "sk-secret" not in _settings_text(settings)
    assert "api_key" not in read_json(settings, "api/config", {})
    assert not (tmp_path / LOCAL_API_KEYS_FILE).exists()
    restored = load_api_config(_settings(tmp_path), local_api_keys(tmp_path))
    assert (restored.api_key, restored.host, restored.port) == ("sk-secret", "0.0.0.0", 9001)
    # No key any more: the keychain entry is deleted, not left behind.
    save_api_config(settings, ServerConfig(port=9001), keys)
    assert ring.items == {}
    assert load_api_config(settings, keys).api_key is None


def test_without_a_keychain_the_key_goes_to_a_user_only_file(tmp_path: Path) -> None:
    keys = local_api_keys(tmp_path, use_keyring=False)
    assert not keys.in_keychain and "readable by you only" in keys.location
    settings = _settings(tmp_path)
    save_api_config(settings, ServerConfig(port=9002, api_key="sk-file"), keys)
    key_file = tmp_path / LOCAL_API_KEYS_FILE
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert "sk-file" in key_file.read_text(encoding="utf-8")
    assert "sk-file" not in _settings_text(settings)
    assert load_api_config(settings, local_api_keys(tmp_path, use_keyring=False)).api_key == "sk-file"


def _legacy_settings(tmp_path: Path) -> QSettings:
    """What an earlier version left: the key in QSettings, in plain text."""
    settings = _settings(tmp_path)
    write_json(settings, "api/config", {"host": "0.0.0.0", "port": 9003, "api_key": "sk-old",
                                        "allowed_origins": ["http://localhost:3000"]})
    return settings


def test_a_key_left_in_qsettings_moves_to_the_keychain_at_the_first_start(
    tmp_path: Path, ring: MemoryKeyring
) -> None:
    settings = _legacy_settings(tmp_path)
    config = load_api_config(settings, local_api_keys(tmp_path))
    assert (config.api_key, config.host, config.port) == ("sk-old", "0.0.0.0", 9003)
    assert config.allowed_origins == ("http://localhost:3000",)
    assert ring.items == {(SERVICE, LOCAL_API_KEY_NAME): "sk-old"}
    assert "sk-old" not in _settings_text(settings)
    assert read_json(settings, "api/config", {}) == {
        "host": "0.0.0.0", "port": 9003, "allowed_origins": ["http://localhost:3000"]}
    # The second start reads it from the keychain alone.
    assert load_api_config(_settings(tmp_path), local_api_keys(tmp_path)).api_key == "sk-old"


def test_the_migration_to_the_file_fallback(tmp_path: Path) -> None:
    settings = _legacy_settings(tmp_path)
    keys = local_api_keys(tmp_path, use_keyring=False)
    assert load_api_config(settings, keys).api_key == "sk-old"
    assert keys.get(LOCAL_API_KEY_NAME) == "sk-old"
    assert "sk-old" not in _settings_text(settings)


def test_a_keychain_that_refuses_the_key_loses_nothing(tmp_path: Path) -> None:
    previous = keyring.get_keyring()
    keyring.set_keyring(LockedKeyring())
    try:
        settings = _legacy_settings(tmp_path)
        keys = local_api_keys(tmp_path)
        assert keys.in_keychain
        # Migration: the key stays in QSettings (and in use) until the keychain takes it.
        assert load_api_config(settings, keys).api_key == "sk-old"
        assert "sk-old" in _settings_text(settings)
        # Saving a new key: refused with the keychain's error, the old settings untouched.
        with pytest.raises(KeyringError, match="locked"):
            save_api_config(settings, ServerConfig(port=9009, api_key="sk-new"), keys)
        assert read_json(settings, "api/config", {})["port"] == 9003
    finally:
        keyring.set_keyring(previous)


def test_the_controller_reads_and_writes_through_its_key_store(tmp_path: Path, qapp: object) -> None:
    settings = _legacy_settings(tmp_path)
    keys = local_api_keys(tmp_path, use_keyring=False)
    api = ApiServerController(engine=None, settings=settings, keys=keys)
    assert api.config.api_key == "sk-old" and "sk-old" not in _settings_text(settings)
    api.set_config(ServerConfig(port=9004, api_key="sk-new"))
    assert keys.get(LOCAL_API_KEY_NAME) == "sk-new" and "sk-new" not in _settings_text(settings)
    assert ApiServerController(None, _settings(tmp_path), keys=keys).config.api_key == "sk-new"
