"""Saved endpoints, their keys (keychain or a user-only file) and the per-conversation source."""

from __future__ import annotations

import stat

from test_ui_api_key import MemoryKeyring
from turbospark_app.remote.endpoints import Endpoint, EndpointBook, endpoint_keys
from turbospark_app.conversations.store import Store


def test_endpoints_round_trip_and_keys_go_to_a_user_only_file(tmp_path) -> None:
    book = EndpointBook(tmp_path, use_keyring=False)
    assert book.endpoints() == []
    saved = book.save([(Endpoint("gpu box", "http://gpu:8000", "llama-70b"), "sk-1"),
                       (Endpoint("ollama", "localhost:11434"), None)])
    assert all(e.id for e in saved) and len({e.id for e in saved}) == 2
    again = EndpointBook(tmp_path, use_keyring=False)
    assert again.endpoints() == saved
    assert again.keys.get(saved[0].id) == "sk-1" and again.keys.get(saved[1].id) == ""
    assert "sk-1" not in (tmp_path / "endpoints.json").read_text()
    mode = stat.S_IMODE((tmp_path / "endpoint-keys.json").stat().st_mode)
    assert mode == 0o600
    assert "readable by you only" in again.keys.location and str(tmp_path) in again.keys.location
    target = again.target(saved[0].id)
    assert target is not None and (target.model, target.api_key, target.name) == ("llama-70b", "sk-1", "gpu box")
    assert again.target(saved[0].id, "other").model == "other"
    # Renamed: the key stays (filed by id); removed: the key is forgotten.
    again.save([(Endpoint("renamed", saved[0].base_url, "m", saved[0].id), None)])
    assert again.keys.get(saved[0].id) == "sk-1"
    again.save([])
    assert again.keys.get(saved[0].id) == "" and again.target(saved[0].id) is None


def test_keys_use_the_keychain_when_there_is_one(tmp_path) -> None:
    keys = endpoint_keys(tmp_path, use_keyring=False)
    ring = MemoryKeyring()
    keys._keyring = ring  # what usable_keyring() returns on a machine with a keychain
    keys.set("abc", "sk-2")
    assert ring.items == {("TurboSpark", "endpoint:abc"): "sk-2"}
    assert keys.get("abc") == "sk-2" and not (tmp_path / "endpoint-keys.json").exists()
    assert "keychain" in keys.location
    keys.set("abc", "")
    assert ring.items == {}


def test_this_machine_has_no_keychain_so_the_file_is_used(tmp_path) -> None:
    # The CI machine runs keyring's fail backend: the app must notice it and say so.
    keys = endpoint_keys(tmp_path)
    assert not keys.in_keychain or "keychain" in keys.location


def test_unreadable_endpoints_file_reads_as_none_and_says_why(tmp_path) -> None:
    (tmp_path / "endpoints.json").write_text("{not json")
    book = EndpointBook(tmp_path, use_keyring=False)
    assert book.endpoints() == [] and book.error and "endpoints.json" in book.error


def test_model_source_is_remembered_per_conversation(tmp_path) -> None:
    store = Store(tmp_path / "s.sqlite3")
    a, b = store.create_conversation(), store.create_conversation()
    assert store.model_source(a.id) is None
    store.set_model_source(a.id, ("ep1", "llama-70b"))
    store.set_model_source(b.id, ("ep2", "qwen"))
    store.set_model_source(b.id, None)
    store.close()
    store = Store(tmp_path / "s.sqlite3")
    assert store.model_source(a.id) == ("ep1", "llama-70b") and store.model_source(b.id) is None
    store.delete_conversation(a.id)
    assert store.model_source(a.id) is None
    store.close()
