"""Saved conversations: SQLite in the per-user data folder (WAL, one transaction per write).

Messages form a tree (see `tree`): each has a parent, and the active child of each group
of siblings is the branch on screen; the other siblings are kept alternatives (Regenerate)
and branches (Edit and resend). A reply row is created, empty and "interrupted", when its turn
is submitted (with the user message, in one transaction); while it streams, a
`checkpoint.ReplyCheckpointer` rewrites its text on another connection at most every second or
32 tokens; the finished reply replaces it with its final stop reason. So a crash or kill -9
loses at most the last checkpoint interval, and the reply reopens as "interrupted".
`Store` itself is used from the GUI thread only (sqlite3's same-thread check enforces it).

A message is a list of typed parts (`parts`: text, reasoning, tool call, tool result, image,
attachment): its last text part is `content` / `token_ids`, the parts before it the `parts`
column (schema 4; NULL, as in every older row, means the message is one text part).

An unreadable store (not a database, corrupt pages, a schema from a newer version) raises
`StoreError`; `open_store_or_recover` moves the bad file aside and starts a fresh one so the
app keeps running, and says what it did.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from .parts import TEXT, Part, parts_from_json, parts_json
from .reply_stats import INTERRUPTED
from .tree import active_path
from .tree_edits import activate, delete_exchange, delete_one

if TYPE_CHECKING:
    from .checkpoint import ReplyCheckpointer

SCHEMA_VERSION = 4
STORE_FILENAME = "conversations.sqlite3"
DEFAULT_TITLE = "New conversation"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id            TEXT PRIMARY KEY,
    title         TEXT NOT NULL,
    created       REAL NOT NULL,
    updated       REAL NOT NULL,
    system_prompt TEXT,
    settings      TEXT NOT NULL DEFAULT '{}',
    raw_completion INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS messages (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role            TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
    content         TEXT NOT NULL,
    token_ids       TEXT,
    stats           TEXT,
    stop_reason     TEXT,
    created         REAL NOT NULL,
    parent_id       INTEGER,
    active          INTEGER NOT NULL DEFAULT 1,
    parts           TEXT
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, id);
-- Where a conversation's replies come from (no row: "This computer"); remote/endpoints.py.
CREATE TABLE IF NOT EXISTS conversation_sources (
    conversation_id TEXT PRIMARY KEY REFERENCES conversations(id) ON DELETE CASCADE,
    endpoint_id     TEXT NOT NULL,
    model           TEXT NOT NULL
);
"""
# Schema 1 -> 2: the tree columns; each message's parent is the one before it.
_MIGRATE_1 = """
ALTER TABLE messages ADD COLUMN parent_id INTEGER;
ALTER TABLE messages ADD COLUMN active INTEGER NOT NULL DEFAULT 1;
UPDATE messages SET parent_id = (SELECT MAX(p.id) FROM messages p
    WHERE p.conversation_id = messages.conversation_id AND p.id < messages.id);
"""
# Schema 2 -> 3: raw completion mode per conversation (off for every conversation saved before).
_MIGRATE_2 = "ALTER TABLE conversations ADD COLUMN raw_completion INTEGER NOT NULL DEFAULT 0;"
# Schema 3 -> 4: a message's parts before its text (NULL: it is one text part, as before).
_MIGRATE_3 = "ALTER TABLE messages ADD COLUMN parts TEXT;"
_MIGRATIONS = {1: _MIGRATE_1 + _MIGRATE_2 + _MIGRATE_3, 2: _MIGRATE_2 + _MIGRATE_3,
               3: _MIGRATE_3}  # from each old version, in order
_CONVERSATION_COLUMNS = "id, title, created, updated, system_prompt, settings, raw_completion"
_COLUMNS = ("id, conversation_id, role, content, token_ids, stats, stop_reason, created, parent_id, "
            "active, parts")


class StoreError(Exception):
    """The store cannot be opened or read."""


@dataclass(frozen=True)
class Conversation:
    """One saved conversation (timestamps are Unix seconds). `raw`: its turns run as raw
    completion (the pane's toggle; a model without a chat template runs raw regardless)."""

    id: str
    title: str
    created: float
    updated: float
    system_prompt: str | None
    settings: dict[str, Any]
    raw: bool = False


@dataclass(frozen=True)
class StoredMessage:
    """One saved message. `token_ids` are an assistant reply's generated ids (KV reuse);
    `parent_id` / `active` place it in the conversation's tree (see `tree`); `parts` are
    its parts before `content` (an agent reply's steps, see `parts`)."""

    id: int
    conversation_id: str
    role: str
    content: str
    token_ids: tuple[int, ...] | None
    stats: dict[str, Any] | None
    stop_reason: str | None
    created: float
    parent_id: int | None = None
    active: bool = True
    parts: tuple[Part, ...] = ()

    @property
    def all_parts(self) -> tuple[Part, ...]:
        """Every part: the leading ones and the text (`content`, `token_ids`)."""
        return (*self.parts, Part(TEXT, self.content, self.token_ids))


def default_store_path() -> Path:
    """`<per-user data folder>/conversations.sqlite3` (TURBOSPARK_DATA_DIR overrides the folder)."""
    from ..host.folders import data_dir

    return data_dir() / STORE_FILENAME


class Store:
    """The conversation store. Open with `Store(path)`; close with `close()`."""

    def __init__(self, path: Path) -> None:
        """Open (creating if needed) the store at `path`; raises StoreError when unreadable."""
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            # isolation_level=None: we issue BEGIN/COMMIT ourselves (see _tx).
            self._db = sqlite3.connect(str(self.path), isolation_level=None, timeout=5.0)
        except sqlite3.Error as e:
            raise StoreError(f"cannot open {self.path}: {e}") from e
        try:
            self._db.execute("PRAGMA foreign_keys = ON")
            check = self._db.execute("PRAGMA quick_check").fetchone()
            if check is None or check[0] != "ok":
                raise StoreError(f"{self.path} is damaged: {check[0] if check else 'no answer'}")
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path} was written by a newer TurboSpark (schema {version}, "
                    f"this one reads {SCHEMA_VERSION})"
                )
            mode = self._db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            self.journal_mode = str(mode).lower()
            self._db.execute("PRAGMA synchronous = NORMAL")  # durable at checkpoints; WAL-safe
            # One script = one transaction: a half-created (or half-migrated) schema is never left.
            migrate = _MIGRATIONS.get(version, "")
            self._db.executescript(
                f"BEGIN IMMEDIATE; {_SCHEMA} {migrate} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
            )
            self._check_tables()
        except StoreError:
            self._db.close()
            raise
        except sqlite3.Error as e:
            self._db.close()
            raise StoreError(f"{self.path} is not a readable conversation store: {e}") from e
        self._checkpointer: ReplyCheckpointer | None = None

    def _check_tables(self) -> None:
        expected = {
            "conversations": {"id", "title", "created", "updated", "system_prompt", "settings",
                              "raw_completion"},
            "messages": {"id", "conversation_id", "role", "content", "token_ids", "stats",
                         "stop_reason", "created", "parent_id", "active", "parts"},
        }
        for table, columns in expected.items():
            have = {row[1] for row in self._db.execute(f"PRAGMA table_info({table})")}
            if not columns <= have:
                raise StoreError(f"{self.path}: table {table} lacks {sorted(columns - have)}")

    class _Tx:
        def __init__(self, db: sqlite3.Connection) -> None:
            self.db = db

        def __enter__(self) -> sqlite3.Connection:
            self.db.execute("BEGIN IMMEDIATE")
            return self.db

        def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
            self.db.execute("ROLLBACK" if exc_type else "COMMIT")

    def _tx(self) -> "Store._Tx":
        """One write transaction: all of it or none of it."""
        return Store._Tx(self._db)

    def close(self) -> None:
        """Close the database (checkpoints the WAL) and the checkpoint writer."""
        if self._checkpointer is not None:
            self._checkpointer.close()
            self._checkpointer = None
        self._db.close()

    def checkpointer(self) -> "ReplyCheckpointer":
        """The writer that saves streaming replies off the GUI thread (started on first use)."""
        if self._checkpointer is None:
            from .checkpoint import ReplyCheckpointer

            self._checkpointer = ReplyCheckpointer(self.path)
        return self._checkpointer

    # -- conversations ---------------------------------------------------------------------

    def create_conversation(
        self,
        title: str = DEFAULT_TITLE,
        *,
        system_prompt: str | None = None,
        settings: dict[str, Any] | None = None,
        raw: bool = False,
    ) -> Conversation:
        """A new empty conversation (`raw`: in raw completion mode)."""
        now = time.time()
        conv = Conversation(uuid.uuid4().hex, title, now, now, system_prompt, dict(settings or {}), raw)
        with self._tx() as db:
            db.execute(
                f"INSERT INTO conversations ({_CONVERSATION_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (conv.id, conv.title, conv.created, conv.updated, conv.system_prompt,
                 json.dumps(conv.settings), int(raw)),
            )
        return conv

    def conversations(self) -> list[Conversation]:
        """Every conversation, most recently updated first."""
        rows = self._db.execute(
            f"SELECT {_CONVERSATION_COLUMNS} FROM conversations "
            "ORDER BY updated DESC, created DESC"
        )
        return [self._conversation(row) for row in rows]

    def conversation(self, conversation_id: str) -> Conversation | None:
        """One conversation, or None when it does not exist."""
        row = self._db.execute(
            f"SELECT {_CONVERSATION_COLUMNS} FROM conversations "
            "WHERE id = ?",
            (conversation_id,),
        ).fetchone()
        return None if row is None else self._conversation(row)

    @staticmethod
    def _conversation(row: Sequence[Any]) -> Conversation:
        return Conversation(row[0], row[1], row[2], row[3], row[4], json.loads(row[5] or "{}"),
                            bool(row[6]))

    def rename_conversation(self, conversation_id: str, title: str) -> None:
        """Set a conversation's title."""
        with self._tx() as db:
            db.execute("UPDATE conversations SET title = ? WHERE id = ?", (title, conversation_id))

    def update_conversation(
        self,
        conversation_id: str,
        *,
        system_prompt: str | None = None,
        settings: dict[str, Any] | None = None,
    ) -> None:
        """Replace a conversation's system prompt and settings."""
        with self._tx() as db:
            db.execute(
                "UPDATE conversations SET system_prompt = ?, settings = ? WHERE id = ?",
                (system_prompt, json.dumps(settings or {}), conversation_id),
            )

    def set_raw_mode(self, conversation_id: str, raw: bool) -> None:
        """Remember whether the conversation runs as raw completion (the pane's toggle)."""
        with self._tx() as db:
            db.execute("UPDATE conversations SET raw_completion = ? WHERE id = ?",
                       (int(raw), conversation_id))

    def delete_conversation(self, conversation_id: str) -> None:
        """Delete a conversation and its messages."""
        with self._tx() as db:
            db.execute("DELETE FROM messages WHERE conversation_id = ?", (conversation_id,))
            db.execute("DELETE FROM conversation_sources WHERE conversation_id = ?", (conversation_id,))
            db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))

    def model_source(self, conversation_id: str) -> tuple[str, str] | None:
        """(endpoint id, model) when the conversation runs on a remote endpoint; None for
        "This computer"."""
        row = self._db.execute(
            "SELECT endpoint_id, model FROM conversation_sources WHERE conversation_id = ?",
            (conversation_id,),
        ).fetchone()
        return None if row is None else (row[0], row[1])

    def set_model_source(self, conversation_id: str, source: tuple[str, str] | None) -> None:
        """Remember where the conversation's replies come from (None: this computer)."""
        with self._tx() as db:
            db.execute("DELETE FROM conversation_sources WHERE conversation_id = ?", (conversation_id,))
            if source is not None:
                db.execute("INSERT INTO conversation_sources VALUES (?, ?, ?)",
                           (conversation_id, source[0], source[1]))

    # -- messages --------------------------------------------------------------------------

    def add_message(
        self,
        conversation_id: str,
        role: str,
        content: str,
        *,
        token_ids: Sequence[int] | None = None,
        stats: dict[str, Any] | None = None,
        stop_reason: str | None = None,
        parent_id: int | None | object = ...,
    ) -> StoredMessage:
        """Add a message, in one transaction, as the active child of `parent_id` (by default
        the last message of the branch on screen: an append)."""
        with self._tx() as db:
            if parent_id is ...:
                path = active_path(self._rows(db, conversation_id))
                parent_id = path[-1].id if path else None
            return self._insert(db, conversation_id, role, content, parent_id,  # type: ignore[arg-type]
                                token_ids, stats, stop_reason)

    def start_turn(
        self, conversation_id: str, parent_id: int | None, user_text: str | None = None,
        *, discard: int | None = None, user_parts: Sequence[Part] = (),
    ) -> tuple[StoredMessage | None, StoredMessage]:
        """One transaction: the user message (when given) under `parent_id`, and under it (or
        under `parent_id`) an empty reply marked INTERRUPTED until its turn ends. Both become
        the branch on screen; their former siblings are kept as alternatives. `discard`: a
        message deleted in the same transaction (an empty reply a crash left). `user_parts`:
        the user message's parts before its text (images, attachments)."""
        with self._tx() as db:
            if discard is not None:
                delete_one(db, discard)
            user = None
            if user_text is not None:
                user = self._insert(db, conversation_id, "user", user_text, parent_id, parts=user_parts)
                parent_id = user.id
            reply = self._insert(db, conversation_id, "assistant", "", parent_id,
                                 stop_reason=INTERRUPTED)
        return user, reply

    def update_reply(
        self,
        message_id: int,
        content: str,
        *,
        token_ids: Sequence[int] | None,
        stats: dict[str, Any] | None,
        stop_reason: str | None,
        parts: Sequence[Part] | None = None,
    ) -> StoredMessage:
        """Replace a reply's text, ids, figures and stop reason (its turn ended, or resumes);
        `parts`: its parts before the text (an agent turn's steps), kept as they are when None."""
        now = time.time()
        with self._tx() as db:
            db.execute(
                "UPDATE messages SET content = ?, token_ids = ?, stats = ?, stop_reason = ? WHERE id = ?",
                (content, _ids_json(token_ids), None if stats is None else json.dumps(stats),
                 stop_reason, message_id),
            )
            if parts is not None:
                db.execute("UPDATE messages SET parts = ? WHERE id = ?", (parts_json(parts), message_id))
            db.execute("UPDATE conversations SET updated = ? WHERE id = "
                       "(SELECT conversation_id FROM messages WHERE id = ?)", (now, message_id))
        message = self.message(message_id)
        if message is None:
            raise sqlite3.OperationalError(f"message {message_id} is gone")
        return message

    def select_message(self, message_id: int) -> None:
        """Put `message_id` (and the branch under it) on screen instead of its siblings."""
        with self._tx() as db:
            activate(db, message_id)

    def delete_message(self, message_id: int) -> None:
        """Delete one message; its children move up to its parent (a user message whose reply
        failed goes back to the input box)."""
        with self._tx() as db:
            delete_one(db, message_id)

    def delete_exchange(self, user_id: int) -> None:
        """Delete a message pair: the user message and its replies (alternatives included, with
        any branch under an alternative not on screen); the turns after the reply on screen move
        up to the user message's place."""
        with self._tx() as db:
            delete_exchange(db, user_id, lambda cid: self._rows(db, cid))

    def delete_messages(self, message_ids: Sequence[int]) -> None:
        """Delete several messages in one transaction (the oldest turns dropped to fit the
        context go together or not at all): a user message goes with its replies."""
        with self._tx() as db:
            gone: set[int] = set()
            for mid in message_ids:
                if int(mid) in gone:
                    continue
                row = db.execute("SELECT role, conversation_id FROM messages WHERE id = ?", (int(mid),)).fetchone()
                if row is None:
                    continue
                before = {m.id for m in self._rows(db, row[1])}
                if row[0] == "user":
                    delete_exchange(db, int(mid), lambda cid: self._rows(db, cid))
                else:
                    delete_one(db, int(mid))
                gone |= before - {m.id for m in self._rows(db, row[1])}

    def messages(self, conversation_id: str) -> list[StoredMessage]:
        """The branch on screen, in order."""
        return active_path(self._rows(self._db, conversation_id))

    def all_messages(self, conversation_id: str) -> list[StoredMessage]:
        """Every message of the conversation (alternatives and kept branches too), by id."""
        return self._rows(self._db, conversation_id)

    def message(self, message_id: int) -> StoredMessage | None:
        """One message, or None."""
        row = self._db.execute(f"SELECT {_COLUMNS} FROM messages WHERE id = ?", (message_id,)).fetchone()
        return None if row is None else _message(row)

    # -- message internals (inside a transaction) -------------------------------------------

    @staticmethod
    def _rows(db: sqlite3.Connection, conversation_id: str) -> list[StoredMessage]:
        rows = db.execute(f"SELECT {_COLUMNS} FROM messages WHERE conversation_id = ? ORDER BY id",
                          (conversation_id,))
        return [_message(row) for row in rows]

    @staticmethod
    def _insert(
        db: sqlite3.Connection, conversation_id: str, role: str, content: str, parent_id: int | None,
        token_ids: Sequence[int] | None = None, stats: dict[str, Any] | None = None,
        stop_reason: str | None = None, parts: Sequence[Part] = (),
    ) -> StoredMessage:
        now = time.time()
        db.execute("UPDATE messages SET active = 0 WHERE conversation_id = ? AND parent_id IS ?",
                   (conversation_id, parent_id))
        cur = db.execute(
            "INSERT INTO messages (conversation_id, role, content, token_ids, stats, stop_reason, "
            "created, parent_id, active, parts) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, ?)",
            (conversation_id, role, content, _ids_json(token_ids),
             None if stats is None else json.dumps(stats), stop_reason, now, parent_id, parts_json(parts)),
        )
        db.execute("UPDATE conversations SET updated = ? WHERE id = ?", (now, conversation_id))
        return StoredMessage(
            int(cur.lastrowid or 0), conversation_id, role, content,
            None if token_ids is None else tuple(int(t) for t in token_ids),
            stats, stop_reason, now, parent_id, True, tuple(parts),
        )

def _ids_json(token_ids: Sequence[int] | None) -> str | None:
    return None if token_ids is None else json.dumps([int(t) for t in token_ids])


def _message(row: Sequence[Any]) -> StoredMessage:
    return StoredMessage(
        row[0], row[1], row[2], row[3],
        None if row[4] is None else tuple(json.loads(row[4])),
        None if row[5] is None else json.loads(row[5]),
        row[6], row[7], row[8], bool(row[9]), parts_from_json(row[10]),
    )

def open_store_or_recover(path: Path) -> tuple[Store, Path | None]:
    """Open the store at `path`; when it is unreadable, move it (and its -wal/-shm files)
    aside to `<name>.unreadable-<timestamp>` and open a fresh one.

    Returns (store, where the bad file went or None). Raises StoreError only when even a
    fresh store cannot be created (e.g. the folder is read-only).
    """
    try:
        return Store(path), None
    except StoreError:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        aside = path.with_name(f"{path.name}.unreadable-{stamp}")
        n = 1
        while aside.exists():
            aside = path.with_name(f"{path.name}.unreadable-{stamp}-{n}")
            n += 1
        if path.exists():
            path.rename(aside)
        for suffix in ("-wal", "-shm"):
            extra = path.with_name(path.name + suffix)
            if extra.exists():
                extra.rename(aside.with_name(aside.name + suffix))
        return Store(path), aside
