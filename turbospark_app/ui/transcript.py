"""The transcript view: user and assistant messages in one QTextDocument.

Streaming cost: while a reply streams, each delta is inserted as plain text at the end of the
document through one QTextCursor: O(delta), and the document layout only re-lays out the last
paragraph. Nothing before the reply is touched. When the reply ends, its range (and only its
range) is replaced by the Markdown rendering (Qt's own importer: `insertMarkdown`), with code
in the system's fixed-pitch font, and a small stats line is appended.

Colours come from the widget's palette at render time (never hard-coded), and the whole
transcript is re-rendered on a palette change, so light and dark mode both read well.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontDatabase,
    QPalette,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextFormat,
    QTextFrameFormat,
)
from PySide6.QtWidgets import QFrame, QTextBrowser, QWidget

ROLE_NAMES = {"user": "You", "assistant": "Assistant", "system": "System"}
ERROR_HUE = QColor(220, 50, 47)  # mixed into the palette's colours, never used as is


@dataclass
class Entry:
    """One rendered item. `kind`: "message" or "error"."""

    role: str
    text: str
    footer: str = ""
    kind: str = "message"
    stopped: bool = False


class Transcript(QTextBrowser):
    """See the module docstring. Positions recorded by `mark()` stay valid because the
    transcript only ever changes at its end."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("transcript")
        self.setOpenExternalLinks(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextBrowserInteraction | Qt.TextInteractionFlag.TextSelectableByKeyboard
        )
        self.document().setDocumentMargin(16)
        self.setPlaceholderText("No messages yet. Type below and press Enter: the model runs on this computer.")
        self._entries: list[Entry] = []
        self._streaming: Entry | None = None
        self._stream_cursor: QTextCursor | None = None
        self._body_start = 0  # where the streaming reply's text begins
        self._stream_parts: list[str] = []

    # -- queries ---------------------------------------------------------------------------

    @property
    def entries(self) -> list[Entry]:
        """What is shown, in order (a streaming reply last, its text empty until `end_reply`;
        `streamed_text()` has the text so far)."""
        return list(self._entries)

    @property
    def is_streaming(self) -> bool:
        """True between `begin_reply` and `end_reply`."""
        return self._streaming is not None

    def mark(self) -> tuple[int, int]:
        """A restore point for `truncate`: (document position, entry count)."""
        return self._end_position(), len(self._entries)

    # -- building --------------------------------------------------------------------------

    def set_entries(self, entries: list[Entry]) -> None:
        """Replace everything (load, palette change). The only full render."""
        self.document().clear()
        self._entries = []
        self._streaming = None
        self._stream_cursor = None
        for entry in entries:
            self._append_entry(entry)
        self._scroll_to_end()

    def append_message(self, role: str, text: str, footer: str = "", *, stopped: bool = False) -> None:
        """Append a finished message (user text verbatim, assistant text as Markdown)."""
        at_end = self._at_end()
        self._append_entry(Entry(role, text, footer, stopped=stopped))
        if at_end:
            self._scroll_to_end()

    def append_error(self, message: str) -> None:
        """Append an inline error block."""
        at_end = self._at_end()
        self._append_entry(Entry("error", message, kind="error"))
        if at_end:
            self._scroll_to_end()

    def begin_reply(self) -> None:
        """Start streaming an assistant reply (header now, text as it comes)."""
        assert self._streaming is None, "a reply is already streaming"
        at_end = self._at_end()
        entry = Entry("assistant", "")
        self._entries.append(entry)
        self._streaming = entry
        self._stream_parts = []
        cursor = self._end_cursor()
        self._insert_header(cursor, "assistant")
        cursor.insertBlock(self._body_block_format(), self._plain_format())
        self._body_start = cursor.position()
        self._stream_cursor = cursor
        if at_end:
            self._scroll_to_end()

    def append_delta(self, delta: str) -> None:
        """Append streamed text: one plain-text insert at the end of the document (nothing above
        is touched; Qt re-lays out only the last paragraph, so the cost grows with that paragraph,
        never with the transcript — see benchmarks/bench_transcript.py)."""
        if not delta:
            return
        assert self._streaming is not None and self._stream_cursor is not None
        at_end = self._at_end()
        self._stream_parts.append(delta)
        self._stream_cursor.insertText(delta)
        if at_end:
            self._scroll_to_end()

    def streamed_text(self) -> str:
        """The streaming reply's text so far."""
        return "".join(self._stream_parts)

    def end_reply(self, text: str, footer: str, *, stopped: bool = False) -> None:
        """Replace the streamed plain text with the Markdown rendering of `text` + the footer."""
        assert self._streaming is not None
        at_end = self._at_end()
        entry = self._streaming
        entry.text, entry.footer, entry.stopped = text, footer, stopped
        cursor = QTextCursor(self.document())
        cursor.setPosition(self._body_start)
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.beginEditBlock()
        cursor.removeSelectedText()
        self._insert_body(cursor, entry)
        cursor.endEditBlock()
        self._streaming = None
        self._stream_cursor = None
        self._stream_parts = []
        if at_end:
            self._scroll_to_end()

    def truncate(self, mark: tuple[int, int]) -> None:
        """Remove everything after `mark` (a failed turn: its user message and partial reply)."""
        position, count = mark
        cursor = QTextCursor(self.document())
        cursor.setPosition(min(position, self._end_position()))
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        del self._entries[count:]
        if self._streaming is not None and self._streaming not in self._entries:
            self._streaming = None
            self._stream_cursor = None
            self._stream_parts = []

    # -- rendering -------------------------------------------------------------------------

    def _append_entry(self, entry: Entry) -> None:
        self._entries.append(entry)
        cursor = self._end_cursor()
        cursor.beginEditBlock()
        self._insert_header(cursor, entry.role if entry.kind == "message" else "error")
        if entry.kind == "error" or entry.role != "assistant":
            self._insert_boxed(cursor, entry)
        else:
            cursor.insertBlock(self._body_block_format(), self._plain_format())
            self._insert_body(cursor, entry)
        cursor.endEditBlock()

    def _insert_header(self, cursor: QTextCursor, role: str) -> None:
        """The role line. Reuses the empty block the document ends with (a fresh document,
        or the block Qt keeps after a frame), so no blank line creeps in."""
        block = QTextBlockFormat()
        block.setTopMargin(0 if self.document().isEmpty() else 14)
        block.setBottomMargin(3)
        fmt = QTextCharFormat()
        fmt.setFontWeight(QFont.Weight.Bold)
        if role == "assistant":
            fmt.setForeground(self.palette().color(QPalette.ColorRole.Highlight))
        elif role == "error":
            fmt.setForeground(self._tint(0.75, ERROR_HUE, QPalette.ColorRole.Text))
        if cursor.block().length() <= 1:
            cursor.setBlockFormat(block)
            cursor.setBlockCharFormat(fmt)
        else:
            cursor.insertBlock(block, fmt)
        label = ROLE_NAMES.get(role, "Error" if role == "error" else role.title())
        cursor.insertText(label, fmt)

    def _insert_boxed(self, cursor: QTextCursor, entry: Entry) -> None:
        """User text (verbatim) or an error, in a padded frame with a palette-derived tint."""
        frame = QTextFrameFormat()
        frame.setPadding(8)
        frame.setTopMargin(2)
        frame.setBottomMargin(4)  # the block Qt keeps after a frame ignores its own top margin
        frame.setBorder(0)
        if entry.kind == "error":
            frame.setBackground(self._tint(0.12, ERROR_HUE))
            frame.setBorder(1)
            frame.setBorderBrush(self._tint(0.45, ERROR_HUE))
            frame.setBorderStyle(QTextFrameFormat.BorderStyle.BorderStyle_Solid)
        else:
            frame.setBackground(self._tint(0.10, self.palette().color(QPalette.ColorRole.Highlight)))
        cursor.insertFrame(frame)
        for i, line in enumerate(entry.text.split("\n")):
            if i:
                cursor.insertBlock(QTextBlockFormat(), self._plain_format())
            cursor.insertText(line, self._plain_format())
        cursor.movePosition(QTextCursor.MoveOperation.End)  # out of the frame

    def _body_block_format(self) -> QTextBlockFormat:
        block = QTextBlockFormat()
        block.setTopMargin(2)
        return block

    def _plain_format(self) -> QTextCharFormat:
        fmt = QTextCharFormat()
        fmt.setForeground(self.palette().color(QPalette.ColorRole.Text))
        return fmt

    def _tint(self, amount: float, accent: QColor, towards: QPalette.ColorRole = QPalette.ColorRole.Base) -> QColor:
        """`accent` mixed into a palette colour: follows light and dark mode."""
        base = self.palette().color(towards)
        return QColor.fromRgbF(
            base.redF() * (1 - amount) + accent.redF() * amount,
            base.greenF() * (1 - amount) + accent.greenF() * amount,
            base.blueF() * (1 - amount) + accent.blueF() * amount,
        )

    def _insert_body(self, cursor: QTextCursor, entry: Entry) -> None:
        """An assistant reply's body at `cursor` (an empty body block): Markdown, then stats."""
        start = cursor.position()
        if entry.text.strip():
            cursor.insertMarkdown(entry.text, QTextDocument.MarkdownFeature.MarkdownDialectGitHub)
        else:
            italic = self._plain_format()
            italic.setFontItalic(True)
            italic.setForeground(self.palette().color(QPalette.ColorRole.PlaceholderText))
            cursor.insertText(
                "(stopped before any text was generated)" if entry.stopped else "(no text)", italic
            )
        self._style_code(start, cursor.position())
        if entry.footer:
            self._insert_footer(cursor, entry.footer, entry.stopped)

    def _insert_footer(self, cursor: QTextCursor, text: str, stopped: bool) -> None:
        block = QTextBlockFormat()
        block.setTopMargin(4)
        fmt = QTextCharFormat()
        fmt.setForeground(self.palette().color(QPalette.ColorRole.PlaceholderText))
        font = QFont(self.font())
        font.setPointSizeF(max(7.0, font.pointSizeF() * 0.85))
        fmt.setFont(font)
        cursor.insertBlock(block, fmt)
        if stopped:
            badge = QTextCharFormat(fmt)
            badge.setFontWeight(QFont.Weight.Bold)
            cursor.insertText("■ stopped  ", badge)
        cursor.insertText(text, fmt)

    def _style_code(self, start: int, end: int) -> None:
        """Fixed-pitch font and a subtle background for code blocks and inline code."""
        mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        code_bg = self.palette().color(QPalette.ColorRole.AlternateBase)
        block = self.document().findBlock(start)
        while block.isValid() and block.position() < end:
            fmt = block.blockFormat()
            if fmt.hasProperty(QTextFormat.Property.BlockCodeFence) or fmt.hasProperty(
                QTextFormat.Property.BlockCodeLanguage
            ):
                fmt.setBackground(code_bg)
                fmt.setLeftMargin(8)
                fmt.setRightMargin(8)
                c = QTextCursor(block)
                c.setBlockFormat(fmt)
                c.movePosition(QTextCursor.MoveOperation.EndOfBlock, QTextCursor.MoveMode.KeepAnchor)
                mf = QTextCharFormat()
                mf.setFontFamilies([mono.family()])
                mf.setFontFixedPitch(True)
                c.mergeCharFormat(mf)
            else:
                it = block.begin()
                while not it.atEnd():
                    frag = it.fragment()
                    if frag.isValid() and frag.charFormat().fontFixedPitch():
                        c = QTextCursor(self.document())
                        c.setPosition(frag.position())
                        c.setPosition(frag.position() + frag.length(), QTextCursor.MoveMode.KeepAnchor)
                        mf = QTextCharFormat()
                        mf.setFontFamilies([mono.family()])
                        mf.setBackground(code_bg)
                        c.mergeCharFormat(mf)
                    it += 1
            block = block.next()

    # -- helpers ---------------------------------------------------------------------------

    def _end_position(self) -> int:
        return max(0, self.document().characterCount() - 1)

    def _end_cursor(self) -> QTextCursor:
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        return cursor

    def _at_end(self) -> bool:
        bar = self.verticalScrollBar()
        return bar.value() >= bar.maximum() - 8

    def _scroll_to_end(self) -> None:
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt override)
        """Re-render on a palette change (light/dark switch): colours are baked in."""
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange and self._entries:
            streaming = self._streaming
            parts = list(self._stream_parts)
            done = [e for e in self._entries if e is not streaming]
            self.set_entries(done)
            if streaming is not None:
                self.begin_reply()
                for part in parts:
                    self.append_delta(part)
