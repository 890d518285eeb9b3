"""The conversation store: round trips, WAL, transactions, and recovery from a bad file."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from turbospark_app.conversations.store import (
    DEFAULT_TITLE,
    SCHEMA_VERSION,
    STORE_FILENAME,
    Store,
    StoreError,
    default_store_path,
    open_store_or_recover,
)


@pytest.fixture
def store(tmp_path: Path):
    s = Store(tmp_path / STORE_FILENAME)
    yield s
    s.close()


def test_conversations_and_messages_round_trip(tmp_path: Path) -> None:
    path = tmp_path / STORE_FILENAME
    s = Store(path)
    assert s.journal_mode == "wal"
    a = s.create_conversation(system_prompt="Be brief.", settings={"max_new_tokens": 64})
    b = s.create_conversation("Second")
    assert a.title == DEFAULT_TITLE
    s.add_message(a.id, "user", "hello")
    s.add_message(a.id, "assistant", "hi **there**", token_ids=[5, 6, 7],
                  stats={"new_tokens": 3, "stop_latency": 0.01}, stop_reason="cancelled")
    s.rename_conversation(b.id, "Renamed")
    s.close()

    s = Store(path)  # a new connection sees everything
    convs = {c.id: c for c in s.conversations()}
    assert convs[a.id].system_prompt == "Be brief." and convs[a.id].settings == {"max_new_tokens": 64}
    assert convs[b.id].title == "Renamed"
    assert [c.id for c in s.conversations()][0] == a.id  # most recently updated first
    user, reply = s.messages(a.id)
    assert (user.role, user.content, user.token_ids, user.stop_reason) == ("user", "hello", None, None)
    assert reply.token_ids == (5, 6, 7) and reply.stats == {"new_tokens": 3, "stop_latency": 0.01}
    assert reply.stop_reason == "cancelled" and reply.created >= user.created
    s.close()


def test_delete_removes_messages(store: Store) -> None:
    c = store.create_conversation()
    m = store.add_message(c.id, "user", "one")
    store.add_message(c.id, "user", "two")
    store.delete_message(m.id)
    assert [x.content for x in store.messages(c.id)] == ["two"]
    store.delete_conversation(c.id)
    assert store.conversation(c.id) is None and store.messages(c.id) == []


def test_update_conversation_settings(store: Store) -> None:
    c = store.create_conversation()
    store.update_conversation(c.id, system_prompt="You are terse.", settings={"temperature": 0.7})
    again = store.conversation(c.id)
    assert again is not None
    assert again.system_prompt == "You are terse." and again.settings == {"temperature": 0.7}


def test_a_failed_write_leaves_nothing_behind(store: Store) -> None:
    c = store.create_conversation()
    with pytest.raises(sqlite3.IntegrityError):
        store.add_message(c.id, "robot", "not a role")  # CHECK constraint
    assert store.messages(c.id) == []
    # The transaction was rolled back: the store still takes writes.
    store.add_message(c.id, "user", "fine")
    assert len(store.messages(c.id)) == 1


def test_each_message_is_committed_at_once(tmp_path: Path) -> None:
    """A second connection (another process after a crash) sees every message written so far."""
    path = tmp_path / STORE_FILENAME
    s = Store(path)
    c = s.create_conversation()
    s.add_message(c.id, "user", "saved before the crash")
    other = sqlite3.connect(str(path))
    rows = other.execute("SELECT content FROM messages").fetchall()
    other.close()
    assert rows == [("saved before the crash",)]
    s.close()


def test_garbage_file_is_reported(tmp_path: Path) -> None:
    path = tmp_path / STORE_FILENAME
    path.write_bytes(b"this is not a database at all" * 200)
    with pytest.raises(StoreError, match="not a readable"):
        Store(path)


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / STORE_FILENAME
    db = sqlite3.connect(str(path))
    db.execute("PRAGMA user_version = 99")
    db.close()
    with pytest.raises(StoreError, match="newer"):
        Store(path)


def test_recover_moves_a_bad_store_aside(tmp_path: Path) -> None:
    path = tmp_path / STORE_FILENAME
    path.write_bytes(b"\x00garbage" * 1000)
    s, aside = open_store_or_recover(path)
    try:
        assert aside is not None and aside.exists() and aside.read_bytes().startswith(b"\x00garbage")
        assert "unreadable" in aside.name
        assert s.conversations() == []
        s.create_conversation("works")
    finally:
        s.close()
    s, aside = open_store_or_recover(path)  # the fresh store is fine next time
    assert aside is None and [c.title for c in s.conversations()] == ["works"]
    s.close()


def test_default_path_honours_the_data_dir_override(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TURBOSPARK_DATA_DIR", str(tmp_path / "data"))
    assert default_store_path() == tmp_path / "data" / STORE_FILENAME


def test_raw_mode_is_remembered_per_conversation_across_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / STORE_FILENAME
    s = Store(path)
    raw = s.create_conversation("raw one")
    chat = s.create_conversation("chat one")
    born_raw = s.create_conversation("born raw", raw=True)
    s.set_raw_mode(raw.id, True)
    s.close()
    s = Store(path)
    try:
        assert s.conversation(raw.id).raw and not s.conversation(chat.id).raw
        assert {c.title: c.raw for c in s.conversations()} == {"raw one": True, "chat one": False,
                                                                "born raw": True}
        assert born_raw.raw
        s.set_raw_mode(raw.id, False)
        assert not s.conversation(raw.id).raw
    finally:
        s.close()


def test_a_schema_2_store_opens_with_raw_mode_off(tmp_path: Path) -> None:
    path = tmp_path / STORE_FILENAME
    db = sqlite3.connect(str(path))
    db.executescript("""
        CREATE TABLE conversations (id TEXT PRIMARY KEY, title TEXT NOT NULL, created REAL NOT NULL,
            updated REAL NOT NULL, system_prompt TEXT, settings TEXT NOT NULL DEFAULT '{}');
        CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, conversation_id TEXT NOT NULL,
            role TEXT NOT NULL, content TEXT NOT NULL, token_ids TEXT, stats TEXT, stop_reason TEXT,
            created REAL NOT NULL, parent_id INTEGER, active INTEGER NOT NULL DEFAULT 1);
        INSERT INTO conversations VALUES ('a', 'A', 1, 1, 'sys', '{"temperature": 0.5}');
        INSERT INTO messages (conversation_id, role, content, created) VALUES ('a', 'user', 'hi', 1);
        PRAGMA user_version = 2;
    """)
    db.close()
    s = Store(path)
    try:
        assert s._db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        conv = s.conversation("a")
        assert conv is not None and not conv.raw and conv.system_prompt == "sys"
        assert conv.settings == {"temperature": 0.5} and [m.content for m in s.messages("a")] == ["hi"]
        s.set_raw_mode("a", True)
        assert s.conversation("a").raw
    finally:
        s.close()
