"""The store's tree edits, inside a caller's transaction (SQL over `messages`; see `tree`).

    activate          put a message on screen instead of its siblings
    delete_one        delete a message; its children take its place
    delete_exchange   delete a user message and its replies; the turns after the reply on
                      screen take their place
Every edit leaves exactly one active sibling in each group it touched.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Callable, Sequence

from .tree import children_of, subtree_ids

RowsOf = Callable[[str], Sequence[Any]]  # conversation id -> its messages (StoredMessage-likes)


def activate(db: sqlite3.Connection, message_id: int) -> None:
    """`message_id` becomes the active one of its siblings."""
    row = db.execute("SELECT conversation_id, parent_id FROM messages WHERE id = ?", (message_id,)).fetchone()
    if row is None:
        return
    db.execute("UPDATE messages SET active = (id = ?) WHERE conversation_id = ? AND parent_id IS ?",
               (message_id, row[0], row[1]))


def delete_one(db: sqlite3.Connection, message_id: int) -> None:
    """Delete one message; its children move up to its parent."""
    row = db.execute("SELECT parent_id, active, conversation_id FROM messages WHERE id = ?",
                     (message_id,)).fetchone()
    if row is None:
        return
    parent, was_active, cid = row
    # Its children take its place; only the branch that was on screen stays on screen.
    db.execute("UPDATE messages SET parent_id = ?, active = active AND ? WHERE parent_id = ?",
               (parent, was_active, message_id))
    db.execute("DELETE FROM messages WHERE id = ?", (message_id,))
    ensure_active(db, cid, parent)


def delete_exchange(db: sqlite3.Connection, user_id: int, rows_of: RowsOf) -> None:
    """Delete a user message, the reply on screen and any other reply's whole subtree."""
    row = db.execute("SELECT conversation_id, parent_id, active FROM messages WHERE id = ?",
                     (user_id,)).fetchone()
    if row is None:
        return
    cid, parent, was_active = row
    kids = children_of(rows_of(cid))
    replies = kids.get(user_id, [])
    shown = [m for m in replies if m.active][-1:] or replies[-1:]
    # The turns after the reply on screen move up to the user message's place.
    for reply in shown:
        db.execute("UPDATE messages SET parent_id = ?, active = active AND ? WHERE parent_id = ?",
                   (parent, was_active, reply.id))
    doomed = [user_id] + [m.id for m in shown]
    doomed += [i for m in replies if m not in shown for i in subtree_ids(m.id, kids)]
    db.executemany("DELETE FROM messages WHERE id = ?", [(i,) for i in doomed])
    ensure_active(db, cid, parent)


def ensure_active(db: sqlite3.Connection, conversation_id: str, parent_id: int | None) -> None:
    """Some sibling of the group stays on screen (the newest, when the active one went)."""
    ids = [r[0] for r in db.execute(
        "SELECT id FROM messages WHERE conversation_id = ? AND parent_id IS ? AND active = 1",
        (conversation_id, parent_id))]
    if not ids:
        db.execute(
            "UPDATE messages SET active = 1 WHERE id = (SELECT MAX(id) FROM messages "
            "WHERE conversation_id = ? AND parent_id IS ?)", (conversation_id, parent_id))
