"""The store's message tree: alternatives, kept branches, the branch on screen, deletes, and
the schema 1 -> 2 migration."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from turbospark_app.conversations.actions import ConversationTree, can_continue, combine_stats, partial_stats
from turbospark_app.conversations.store import INTERRUPTED, SCHEMA_VERSION, STORE_FILENAME, Store


@pytest.fixture
def store(tmp_path: Path):
    s = Store(tmp_path / STORE_FILENAME)
    yield s
    s.close()


def contents(store: Store, cid: str) -> list[str]:
    return [m.content for m in store.messages(cid)]


def finish(store: Store, reply_id: int, text: str, reason: str = "end_of_turn") -> None:
    store.update_reply(reply_id, text, token_ids=None, stats={"new_tokens": 1}, stop_reason=reason)


def test_a_turn_starts_with_an_interrupted_empty_reply_in_one_transaction(store: Store) -> None:
    c = store.create_conversation()
    user, reply = store.start_turn(c.id, None, "hi")
    assert user is not None and reply.parent_id == user.id and user.parent_id is None
    assert (reply.content, reply.stop_reason) == ("", INTERRUPTED)
    assert [m.id for m in store.messages(c.id)] == [user.id, reply.id]


def test_regenerate_keeps_alternatives_and_the_next_turn_follows_the_one_on_screen(store: Store) -> None:
    c = store.create_conversation()
    u, a1 = store.start_turn(c.id, None, "q")
    finish(store, a1.id, "first")
    tree = ConversationTree(store, c.id)
    plan = tree.plan_regenerate()
    assert plan is not None and [m.id for m in plan.history] == [u.id] and plan.replaces == a1.id
    _, a2 = store.start_turn(c.id, plan.parent_id)
    finish(store, a2.id, "second")
    tree.reload()
    assert contents(store, c.id) == ["q", "second"] and tree.variant(tree.last) == (2, 2)
    assert tree.switch(a2.id, -1) and contents(store, c.id) == ["q", "first"]
    assert not tree.switch(a1.id, -1)  # already the first
    # The next turn continues from the alternative on screen ("first").
    plan = tree.plan_send("more")
    assert [m.content for m in plan.history] == ["q", "first"] and plan.parent_id == a1.id
    store.start_turn(c.id, plan.parent_id, "more")
    assert contents(store, c.id) == ["q", "first", "more", ""]
    tree.switch(a1.id, +1)  # back to "second": its branch has no later turns
    assert contents(store, c.id) == ["q", "second"]


def test_edit_moves_the_later_turns_to_a_kept_branch(store: Store) -> None:
    c = store.create_conversation()
    u1, a1 = store.start_turn(c.id, None, "one")
    u2, a2 = store.start_turn(c.id, a1.id, "two")
    u3, a3 = store.start_turn(c.id, a2.id, "three")
    tree = ConversationTree(store, c.id)
    plan = tree.plan_edit(u2.id, "TWO")
    assert plan is not None and [m.id for m in plan.history] == [u1.id, a1.id] and plan.replaces == u2.id
    e2, b2 = store.start_turn(c.id, plan.parent_id, plan.user_text)
    assert contents(store, c.id) == ["one", "", "TWO", ""]
    tree.reload()
    assert tree.variant(e2) == (2, 2)
    tree.switch(e2.id, -1)
    assert [m.id for m in store.messages(c.id)] == [u1.id, a1.id, u2.id, a2.id, u3.id, a3.id]


def test_delete_a_pair_keeps_the_turns_after_it(store: Store) -> None:
    c = store.create_conversation()
    u1, a1 = store.start_turn(c.id, None, "one")
    u2, a2 = store.start_turn(c.id, a1.id, "two")
    _, alt = store.start_turn(c.id, u2.id)  # an alternative reply to "two"
    store.select_message(a2.id)
    u3, a3 = store.start_turn(c.id, a2.id, "three")
    store.delete_exchange(u2.id)
    ids = [m.id for m in store.messages(c.id)]
    assert ids == [u1.id, a1.id, u3.id, a3.id]
    assert store.message(alt.id) is None  # the pair's alternatives went with it
    store.delete_exchange(u1.id)  # the first pair: the rest becomes the start
    assert [m.id for m in store.messages(c.id)] == [u3.id, a3.id]


def test_deleting_the_shown_alternative_shows_another(store: Store) -> None:
    c = store.create_conversation()
    u, a1 = store.start_turn(c.id, None, "q")
    _, a2 = store.start_turn(c.id, u.id)
    store.delete_message(a2.id)
    assert [m.id for m in store.messages(c.id)] == [u.id, a1.id]


def test_schema_1_is_migrated_in_order(tmp_path: Path) -> None:
    path = tmp_path / STORE_FILENAME
    db = sqlite3.connect(str(path))
    db.executescript("""
        CREATE TABLE conversations (id TEXT PRIMARY KEY, title TEXT NOT NULL, created REAL NOT NULL,
            updated REAL NOT NULL, system_prompt TEXT, settings TEXT NOT NULL DEFAULT '{}');
        CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, conversation_id TEXT NOT NULL,
            role TEXT NOT NULL, content TEXT NOT NULL, token_ids TEXT, stats TEXT, stop_reason TEXT,
            created REAL NOT NULL);
        INSERT INTO conversations VALUES ('a', 'A', 1, 1, NULL, '{}'), ('b', 'B', 1, 1, NULL, '{}');
        INSERT INTO messages (conversation_id, role, content, created) VALUES
            ('a', 'user', 'a1', 1), ('b', 'user', 'b1', 1), ('a', 'assistant', 'a2', 2),
            ('b', 'assistant', 'b2', 2), ('a', 'user', 'a3', 3);
        PRAGMA user_version = 1;
    """)
    db.close()
    s = Store(path)
    try:
        assert contents(s, "a") == ["a1", "a2", "a3"] and contents(s, "b") == ["b1", "b2"]
        assert s._db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        s.add_message("a", "assistant", "a4")
        assert contents(s, "a")[-1] == "a4"
    finally:
        s.close()


def test_continue_is_offered_for_replies_that_ended_early() -> None:
    from turbospark_app.conversations.store import StoredMessage

    def reply(reason: str | None, text: str = "partial") -> StoredMessage:
        return StoredMessage(1, "c", "assistant", text, None, None, reason, 0.0)

    assert all(can_continue(reply(r)) for r in ("cancelled", "max_tokens", INTERRUPTED))
    assert not can_continue(reply("end_of_turn")) and not can_continue(reply("cancelled", ""))


def test_continued_figures_add_up_honestly() -> None:
    first = {"prompt_tokens": 20, "reused_prefix_tokens": 0, "new_tokens": 10, "decode_seconds": 1.0,
             "prefill_seconds": 0.5, "time_to_first_token": 0.6, "stop_reason": "cancelled", "started": True}
    second = {"prompt_tokens": 30, "reused_prefix_tokens": 29, "new_tokens": 30, "decode_seconds": 1.0,
              "prefill_seconds": 0.01, "time_to_first_token": 0.05, "stop_reason": "end_of_turn", "started": True}
    out = combine_stats(first, second)
    assert out["new_tokens"] == 40 and out["decode_seconds"] == 2.0
    assert out["decode_tokens_per_sec"] == 20.0  # 40 tokens / 2 s, not the mean of 10 and 30
    assert out["time_to_first_token"] == 0.6 and out["reused_prefix_tokens"] == 29
    assert out["stop_reason"] == "end_of_turn" and len(out["runs"]) == 2
    # A run cut off by a crash counts its saved tokens but has no timing.
    crashed = partial_stats(first, 5, "m")
    again = combine_stats(crashed, second)
    assert again["new_tokens"] == 45 and again["decode_tokens_per_sec"] == 20.0 and len(again["runs"]) == 3


def test_an_empty_interrupted_reply_is_answered_afresh_not_kept(store: Store) -> None:
    c = store.create_conversation()
    u, empty = store.start_turn(c.id, None, "q")  # the app died before the first token
    tree = ConversationTree(store, c.id)
    assert tree.plan_continue() is None
    plan = tree.plan_regenerate()
    assert plan is not None and plan.discard == empty.id and plan.replaces is None
    _, fresh = store.start_turn(c.id, plan.parent_id, discard=plan.discard)
    tree.reload()
    assert [m.id for m in tree.all] == [u.id, fresh.id] and tree.variant(fresh) == (1, 1)
