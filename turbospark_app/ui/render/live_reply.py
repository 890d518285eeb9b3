"""The streaming reply in the transcript: its text drawn as it comes, a chunk at a time.

Deltas are kept and written to the document once per event-loop turn (one insert however many
tokens the hand-over brought; the view scrolls once). The reply's text is cut into chunks
(`markup.split_chunks`: fenced blocks, and Markdown cut where a new block starts after a blank
line); each chunk that no later text can change (`markup.settled_chunks`) replaces its plain
text with its rendering as soon as it settles — a paragraph when the next one begins, a code
block (with its Copy button) when its fence closes — once its code is lexed and its formulas are
made on the worker threads (`rich_text.chunk_ready`), at most `SETTLE_SECONDS` of that a turn.
Only the chunk still being written stays plain (its code lines coloured by `StreamColours`).
The finished reply's rendering (`Transcript.end_reply`) keeps every chunk drawn that is one of
its own and draws the rest: the last chunk, not the whole reply, in the frame where it ends.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

from PySide6.QtCore import QObject, QTimer
from PySide6.QtGui import QPalette, QTextCharFormat, QTextCursor, QTextDocument

from .code_blocks import StreamColours
from .markup import Piece, settled_chunks
from .rich_text import RichState, chunk_ready, fresh_block, insert_chunk, prefetch_math

SETTLE_SECONDS = 0.004  # drawing settled chunks, per 60 Hz frame, for every pane together...
FRAME_SECONDS = 0.016  # ...(two panes streaming one reply settle the same chunk at once)
WAIT_SECONDS = 5.0  # a chunk whose code or formulas are still not made then is drawn anyway
# (making them here: ziamath's first import alone takes ~0.7 s, which the worker may be doing)


class _Frame:
    """The chunk drawing done in the current frame, by every transcript (GUI thread only)."""

    start = float("-inf")
    spent = 0.0

    @classmethod
    def left(cls, now: float) -> float:
        """Seconds of drawing left in the frame holding `now` (a new frame: all of them)."""
        if now - cls.start >= FRAME_SECONDS:
            cls.start, cls.spent = now, 0.0
        return SETTLE_SECONDS - cls.spent


class Host(Protocol):
    """What the live reply needs of its transcript."""

    def document(self) -> QTextDocument: ...
    def palette(self) -> QPalette: ...
    def devicePixelRatioF(self) -> float: ...  # noqa: N802 (Qt's name)
    def small_format(self) -> QTextCharFormat: ...
    def plain_format(self) -> QTextCharFormat: ...
    def math_px(self) -> float: ...
    def follow(self) -> bool: ...
    def scroll_to_end(self) -> None: ...


@dataclass
class Drawn:
    """A settled chunk drawn in the document: [start, end) holds its rendering."""

    chunk: Piece
    start: int
    end: int


class LiveReply:
    """See the module docstring. One per transcript; `start` for each streaming reply."""

    def __init__(self, host: Host, rich: RichState, owner: QObject) -> None:
        """`owner` (the transcript widget): the timers die with it, never firing on a view gone."""
        self.host = host
        self._owner = owner
        self.rich = rich
        self.colours = StreamColours(host.document())
        self.drawn: list[Drawn] = []
        self.parts: list[str] = []  # the deltas (joined into one by `text`)
        self.active = False
        self._pending: list[str] = []  # deltas not yet in the document
        self._scheduled = False
        self._retry_timer = QTimer(owner)
        self._retry_timer.setSingleShot(True)
        self._retry_timer.timeout.connect(self.flush)
        self._cursor: QTextCursor | None = None
        self.body_start = 0
        self.tail = 0  # where the plain text still being written begins
        self._drawn_chars = 0  # how much of the reply's text the drawn chunks hold
        self._checked = 0  # the text's length when settled chunks were last looked for
        self._waiting_since: float | None = None  # a settled chunk waits for its code or formulas
        self._again = False  # settled chunks were left for the next turn
        self._math_scanned = 0

    def start(self, cursor: QTextCursor) -> None:
        """A reply begins at `cursor` (an empty body paragraph at the document's end)."""
        self.active = True
        self.drawn, self.parts, self._pending = [], [], []
        self._cursor = cursor
        self.body_start = self.tail = cursor.position()
        self._drawn_chars = self._checked = self._math_scanned = 0
        self._waiting_since, self._again = None, False
        self.colours.reset(self.tail)

    def stop(self) -> None:
        """No reply streams any more (ended, or taken off)."""
        self.active = False
        self._retry_timer.stop()
        self._cursor = None
        self.parts, self._pending = [], []
        self.colours.reset(-1)

    def text(self) -> str:
        """The reply's text so far (the deltas joined once: `flush` and `_settle` ask every turn)."""
        if len(self.parts) > 1:
            self.parts = ["".join(self.parts)]
        return self.parts[0] if self.parts else ""

    def add(self, delta: str) -> None:
        """A delta: written at the next event-loop turn (`flush`)."""
        self.parts.append(delta)
        self._pending.append(delta)
        if not self._scheduled:
            self._scheduled = True
            QTimer.singleShot(0, self._owner, self.flush)

    def _retry(self, seconds: float) -> None:
        """Settle again in `seconds` even if no delta comes (a chunk waited for its code or
        formulas, or for the next frame's drawing time)."""
        if not self._retry_timer.isActive():
            self._retry_timer.start(max(1, round(seconds * 1000)))

    def write_pending(self) -> None:
        """The deltas not yet written, into the document now (one insert at the end)."""
        if self._pending and self._cursor is not None:
            self._cursor.insertText("".join(self._pending), self.host.plain_format())
            self._pending = []

    def flush(self) -> None:
        """Once per event-loop turn: write the deltas that came, colour the code lines finished,
        draw the chunks that settled, and send the formulas of finished paragraphs ahead."""
        self._scheduled = False
        if not self.active:
            return
        follow = self.host.follow()
        self.write_pending()
        palette = self.host.palette()
        self.colours.update(palette)
        if self.colours.fence is None:  # (inside an open fence nothing can settle)
            self._settle(palette)
        text = self.text()
        end = text.rfind("\n\n")
        if end > self._math_scanned:
            prefetch_math(text[self._math_scanned:end], palette, self.host.math_px())
            self._math_scanned = end
        if follow:
            self.host.scroll_to_end()

    def _settle(self, palette: QPalette) -> None:
        text = self.text()
        if not self._again and "\n" not in text[self._checked:]:
            return  # a chunk settles only when a line ends
        self._checked, self._again = len(text), False
        now = time.perf_counter()
        left = _Frame.left(now)
        if left <= 0:  # the frame's drawing is spent (another pane's chunk): the next frame
            self._again = True
            self._retry(_Frame.start + FRAME_SECONDS - now)
            return
        px = self.host.math_px()
        deadline = now + left
        drew = False
        for chunk in settled_chunks(text[self._drawn_chars:]):
            if not chunk_ready(chunk, palette, px):
                now = time.monotonic()
                if self._waiting_since is None:
                    self._waiting_since = now
                if now - self._waiting_since < WAIT_SECONDS:
                    self._again = True
                    break
            self._waiting_since = None
            self._draw(chunk, text)
            drew = True
            if time.perf_counter() > deadline:
                self._again = True  # the rest next frame
                break
        _Frame.spent += time.perf_counter() - now
        if self._again:
            self._retry(FRAME_SECONDS if drew else 0.05)
        if drew:
            self.colours.reset(self.tail)
            self.colours.update(palette)

    def _draw(self, chunk: Piece, text: str) -> None:
        """`chunk` (the first chunk of the plain tail) drawn in place of its plain text."""
        document = self.host.document()
        cursor = QTextCursor(document)
        cursor.setPosition(self.tail)
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.beginEditBlock()
        cursor.removeSelectedText()
        start = cursor.position()
        insert_chunk(document, cursor, chunk, self.host.palette(), self.rich,
                     self.host.small_format(), self.host.math_px(), self.host.devicePixelRatioF())
        self.drawn.append(Drawn(chunk, start, cursor.position()))
        self._drawn_chars += len(chunk.raw)
        fresh_block(cursor)  # as the finished reply's next chunk would find it
        self.tail = cursor.position()
        rest = text[self._drawn_chars:]
        if rest:
            cursor.insertText(rest, self.host.plain_format())
        cursor.endEditBlock()
        self._cursor = cursor
