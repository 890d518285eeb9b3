"""Saving a reply while it streams, off the GUI thread: a crash loses at most one interval.

    CheckpointPolicy    when to save: the first token, then at most every `seconds` (1.0) or
                        every `tokens` (32) tokens, whichever comes first
    ReplyCheckpointer   a writer thread with its own SQLite connection (WAL lets it write while
                        the GUI's connection reads). `save()` only hands a snapshot over (the
                        newest per reply replaces an unwritten older one); each write is ONE
                        short transaction, an UPDATE of the reply row

The UPDATE only touches a row still marked INTERRUPTED, so a late checkpoint can never
overwrite a reply that has already been finished. `finish(message_id)` drops a queued
snapshot and waits for one being written, before the GUI writes the final reply.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from .reply_stats import INTERRUPTED, partial_stats

log = logging.getLogger(__name__)

CHECKPOINT_SECONDS = 1.0
CHECKPOINT_TOKENS = 32


@dataclass
class CheckpointPolicy:
    """Decides, per token, whether the reply is due for a checkpoint (cheap: two compares)."""

    seconds: float = CHECKPOINT_SECONDS
    tokens: int = CHECKPOINT_TOKENS
    clock: Callable[[], float] = time.monotonic
    _last_at: float | None = None
    _since: int = 0

    def due(self) -> bool:
        """Count one token; True when it is time to save (then the counters restart)."""
        self._since += 1
        now = self.clock()
        if self._last_at is None or self._since >= self.tokens or now - self._last_at >= self.seconds:
            self._last_at, self._since = now, 0
            return True
        return False


@dataclass(frozen=True)
class ReplySnapshot:
    """What a checkpoint writes: the reply's text and ids so far, and its figures so far."""

    message_id: int
    content: str
    token_ids: tuple[int, ...] | None
    stats: dict[str, Any] | None = None


@dataclass
class CheckpointCounters:
    """What the writer did (for the benchmark and the QA export)."""

    writes: int = 0
    skipped: int = 0  # replaced by a newer snapshot before it was written
    seconds: list[float] = field(default_factory=list)  # per write, on the writer thread


class ReplyCheckpointer:
    """See the module docstring. Thread-safe: `save` / `finish` / `close` from any thread."""

    def __init__(self, path: Path, *, busy_timeout: float = 5.0) -> None:
        self.path = Path(path)
        self._busy_timeout = busy_timeout
        self._cond = threading.Condition()
        self._pending: dict[int, ReplySnapshot] = {}
        self._writing: int | None = None
        self._closed = False
        self.counters = CheckpointCounters()
        self.errors: list[str] = []
        self._thread = threading.Thread(target=self._run, name="turbospark-checkpoint", daemon=True)
        self._thread.start()

    def save(self, snapshot: ReplySnapshot) -> None:
        """Queue `snapshot` (returns at once; a newer one for the same reply replaces it)."""
        with self._cond:
            if self._closed:
                return
            if snapshot.message_id in self._pending:
                self.counters.skipped += 1
            self._pending[snapshot.message_id] = snapshot
            self._cond.notify_all()

    def finish(self, message_id: int, timeout: float = 5.0) -> None:
        """The reply is about to be written in full: forget its queued snapshot and wait for
        one being written now (a few ms at most)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._pending.pop(message_id, None)
            while self._writing == message_id and time.monotonic() < deadline:
                self._cond.wait(deadline - time.monotonic())

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything queued is written (tests, shutdown). True when it was."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while (self._pending or self._writing is not None) and time.monotonic() < deadline:
                self._cond.wait(max(0.0, deadline - time.monotonic()))
            return not self._pending and self._writing is None

    def close(self) -> None:
        """Write what is queued, then stop the thread."""
        self.flush()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(5.0)

    # -- writer thread ---------------------------------------------------------------------

    def _run(self) -> None:
        db = sqlite3.connect(str(self.path), isolation_level=None, timeout=self._busy_timeout)
        try:
            db.execute("PRAGMA synchronous = NORMAL")
            while True:
                with self._cond:
                    while not self._pending and not self._closed:
                        self._cond.wait()
                    if not self._pending:
                        return
                    message_id = next(iter(self._pending))
                    snapshot = self._pending.pop(message_id)
                    self._writing = message_id
                try:
                    start = time.perf_counter()
                    write_snapshot(db, snapshot)
                    self.counters.seconds.append(time.perf_counter() - start)
                    self.counters.writes += 1
                except sqlite3.Error as e:  # the final save still happens on the GUI side
                    log.warning("checkpoint of reply %s failed: %s", message_id, e)
                    self.errors.append(str(e))
                finally:
                    with self._cond:
                        self._writing = None
                        self._cond.notify_all()
        finally:
            db.close()


def write_snapshot(db: sqlite3.Connection, snapshot: ReplySnapshot) -> None:
    """ONE short transaction: the reply row's text, ids and figures (only while INTERRUPTED)."""
    ids = None if snapshot.token_ids is None else json.dumps(list(snapshot.token_ids))
    stats = None if snapshot.stats is None else json.dumps(snapshot.stats)
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute(
            "UPDATE messages SET content = ?, token_ids = ?, stats = ? WHERE id = ? AND stop_reason = ?",
            (snapshot.content, ids, stats, snapshot.message_id, INTERRUPTED),
        )
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


class ReplyRecorder:
    """One streaming reply's checkpoints: fed every token (cheap), it hands a snapshot to the
    checkpointer when the policy says so. `prefix` / `prefix_ids`: a continued reply's
    earlier text and ids (None ids: the reply will be re-tokenized, so none are saved)."""

    def __init__(
        self,
        checkpointer: ReplyCheckpointer,
        message_id: int,
        *,
        prefix: str = "",
        prefix_ids: Sequence[int] | None = (),
        previous_stats: dict[str, Any] | None = None,
        model_id: str = "",
        policy: CheckpointPolicy | None = None,
    ) -> None:
        self.checkpointer = checkpointer
        self.message_id = message_id
        self.prefix = prefix
        self.prefix_ids = None if prefix_ids is None else tuple(prefix_ids)
        self.previous_stats = previous_stats
        self.model_id = model_id
        self.policy = policy or CheckpointPolicy()
        self.parts: list[str] = []
        self.ids: list[int] = []
        self.saves = 0

    def token(self, delta: str, token_id: int) -> bool:
        """One streamed token; True when a checkpoint was handed over."""
        self.parts.append(delta)
        self.ids.append(token_id)
        if self.policy.due():
            self.save()
            return True
        return False

    def tail(self, text: str) -> None:
        """Text released at the end of a run (no id of its own)."""
        self.parts.append(text)

    def snapshot(self) -> ReplySnapshot:
        """The reply as it stands."""
        ids = None if self.prefix_ids is None else self.prefix_ids + tuple(self.ids)
        stats = partial_stats(self.previous_stats, len(self.ids), self.model_id)
        return ReplySnapshot(self.message_id, self.prefix + "".join(self.parts), ids, stats)

    def save(self) -> None:
        """Hand the current snapshot to the writer thread (returns at once)."""
        self.checkpointer.save(self.snapshot())
        self.saves += 1

    def finish(self) -> None:
        """The turn ended: no checkpoint of it may land after the final write."""
        self.checkpointer.finish(self.message_id)
