"""A message is a list of typed parts (schema 4): old rows read as one text part, an agent
reply's steps survive a reopen and come back as the prompt's assistant / tool messages."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from turbospark_app.conversations.actions import prompt_messages
from turbospark_app.conversations.parts import TEXT, TOOL_CALL, TOOL_RESULT, Part
from turbospark_app.conversations.store import SCHEMA_VERSION, Store

STEP = [Part(TEXT, '<tool_call>{"name": "t__add"}</tool_call>', (5, 6, 7)),
        Part(TOOL_CALL, call_id="c1", name="t__add", arguments='{"a": 1}', meta={"approval": "once"}),
        Part(TOOL_RESULT, "2", call_id="c1", name="t__add", meta={"is_error": False, "seconds": 0.01})]


def test_a_schema_3_store_is_migrated_and_its_rows_read_as_one_text_part(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite3"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE conversations (id TEXT PRIMARY KEY, title TEXT NOT NULL, created REAL NOT NULL,
            updated REAL NOT NULL, system_prompt TEXT, settings TEXT NOT NULL DEFAULT '{}',
            raw_completion INTEGER NOT NULL DEFAULT 0);
        CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, conversation_id TEXT NOT NULL,
            role TEXT NOT NULL, content TEXT NOT NULL, token_ids TEXT, stats TEXT, stop_reason TEXT,
            created REAL NOT NULL, parent_id INTEGER, active INTEGER NOT NULL DEFAULT 1);
        INSERT INTO conversations VALUES ('c', 't', 1, 1, NULL, '{}', 0);
        INSERT INTO messages VALUES (1, 'c', 'user', 'hi', NULL, NULL, NULL, 1, NULL, 1);
        INSERT INTO messages VALUES (2, 'c', 'assistant', 'hello', '[1, 2]', NULL, 'eos', 2, 1, 1);
        PRAGMA user_version = 3;""")
    db.close()
    store = Store(path)
    user, reply = store.messages("c")
    assert SCHEMA_VERSION == 4 and store._db.execute("PRAGMA user_version").fetchone()[0] == 4
    assert reply.parts == () and reply.all_parts == (Part(TEXT, "hello", (1, 2)),)
    assert user.all_parts == (Part(TEXT, "hi"),)
    store.close()


def test_an_agent_reply_keeps_its_steps_across_a_reopen_and_expands_for_the_prompt(tmp_path: Path) -> None:
    store = Store(tmp_path / "c.sqlite3")
    conv = store.create_conversation()
    _, reply = store.start_turn(conv.id, None, "1+1?")
    store.update_reply(reply.id, "It is 2.", token_ids=[8, 9], stats={"model_id": "m"},
                       stop_reason="end_of_turn", parts=STEP)
    store.close()
    store = Store(tmp_path / "c.sqlite3")
    user, again = store.messages(conv.id)
    assert again.parts == tuple(STEP) and again.content == "It is 2."
    assert [p.kind for p in again.all_parts] == [TEXT, TOOL_CALL, TOOL_RESULT, TEXT]
    msgs = prompt_messages([user, again], "m")
    assert [(m.role, m.content, m.token_ids) for m in msgs] == [
        ("user", "1+1?", None), ("assistant", STEP[0].text, (5, 6, 7)), ("tool", "2", None),
        ("assistant", "It is 2.", (8, 9))]
    assert msgs[2].tool_call_id == "c1" and msgs[2].name == "t__add"
    # Another model's ids are another vocabulary: none go along, the steps' included.
    assert all(m.token_ids is None for m in prompt_messages([user, again], "other"))
    # A later update that leaves parts alone keeps them (the checkpoint path).
    store.update_reply(again.id, "It is 2!", token_ids=None, stats=None, stop_reason="eos")
    assert store.message(again.id).parts == tuple(STEP)
    store.close()


def test_unknown_kinds_are_refused() -> None:
    with pytest.raises(ValueError):
        Part("video")


def test_the_markdown_export_has_the_calls_and_results(tmp_path: Path) -> None:
    from turbospark_app.conversations.export import conversation_json, conversation_markdown

    store = Store(tmp_path / "c.sqlite3")
    conv = store.create_conversation("Sums")
    _, reply = store.start_turn(conv.id, None, "1+1?")
    store.update_reply(reply.id, "It is 2.", token_ids=None, stats=None, stop_reason="end_of_turn", parts=STEP)
    md = conversation_markdown(store, conv.id)
    assert '**Tool call** `t__add` (once):\n\n```json\n{\n  "a": 1\n}\n```' in md
    assert "**Tool result** `t__add` (10 ms):\n\n```\n2\n```" in md
    assert md.index("Tool result") < md.index("It is 2.")
    assert "<tool_call>" not in md
    doc = conversation_json(store, conv.id)
    reply_json = [m for m in doc["messages"] if m["role"] == "assistant"][0]
    assert [p["kind"] for p in reply_json["parts"]] == [TEXT, TOOL_CALL, TOOL_RESULT]
    store.close()
