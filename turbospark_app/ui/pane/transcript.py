"""The transcript view: user and assistant messages in one QTextDocument.

Streaming cost: while a reply streams (`live_reply`), the deltas that came are inserted as
plain text at the end of the document once per event-loop turn, and Qt re-lays out only the last
paragraph; nothing before the reply is touched. Each chunk of the reply that settles (a
paragraph once the next begins, a code block once its fence closes) is drawn in place of its
plain text then (`rich_text`: Markdown, coloured code blocks with a Copy link, math), so when
the reply ends only its last chunk is left to draw, and a small stats line is appended.

Colours come from the widget's palette at render time (never hard-coded), and the whole
transcript is re-rendered on a palette change, so light and dark mode both read well.

Message actions: under each saved message a small line of links (`‹ 2/3 ›` between kept
alternatives, Copy, Edit, Delete...; hrefs `ts:<action>:<message id>`), and the same actions
in the context menu, plus "Copy Code Block" inside a code block (`transcript_actions`). Copy is
done here (the Markdown source of the entry); every other action is emitted as `actionRequested`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import (
    QColor,
    QFont,
    QPalette,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextFrameFormat,
)
from PySide6.QtWidgets import QFrame, QTextBrowser, QWidget

from ...conversations.roles import ROLE_NAMES, role_names
from ..render.code_blocks import ColourQueue, code_block_text
from ..render.message_media import insert_media
from ..render.reply_parts import insert_reasoning, insert_tool_cards
from ..render.live_reply import LiveReply
from ..render.markup import split_chunks
from ..render.rich_text import RichState, insert_chunk, insert_rich
from ..render.sources_view import insert_sources, mark_citations
from .transcript_actions import TranscriptActions

ACTION_LABELS = {
    "copy": "Copy", "edit": "Edit", "delete": "Delete", "regenerate": "Regenerate",
    "continue": "Continue",
}
ERROR_HUE = QColor(220, 50, 47)  # mixed into the palette's colours, never used as is


@dataclass
class Entry:
    """One rendered item. `kind`: "message" or "error"."""

    role: str
    text: str
    footer: str = ""
    kind: str = "message"
    stopped: bool = False
    message_id: int | None = None  # the stored message (None: not saved, e.g. an error)
    variant: tuple[int, int] = (1, 1)  # (position, count) among its alternatives
    actions: tuple[str, ...] = ()  # the links under it (see ACTION_LABELS)
    badge: str = ""  # "interrupted" | "token limit" ("stopped" comes from `stopped`)
    # A reply split by its family's markers (ui.render.reply_parts): None = not split, show `text`
    answer: str | None = None
    reasoning: str = ""
    reasoning_label: str = ""
    reasoning_open: bool = False
    tool_calls: tuple[tuple[str, str], ...] = ()
    # An agent reply's results, one per call ("" = none): "✓ 0.12 s\n<text>" (reply_parts)
    tool_results: tuple[str, ...] = ()
    # A user message's images and attachments (ui.render.message_media.MediaItem), under its text
    media: tuple[Any, ...] = ()
    # A reply that used documents (ui.render.sources_view): its sources' dicts and their figures
    sources: tuple[dict, ...] = ()
    sources_figures: str = ""


class Transcript(TranscriptActions, QTextBrowser):
    """See the module docstring. Positions recorded by `mark()` stay valid because the
    transcript only ever changes at its end."""

    actionRequested = Signal(str, int)  # action name, message id
    imageRequested = Signal(int, int)  # message id, which of its images (a thumbnail's click)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("transcript")
        self.setOpenLinks(False)  # ts: links are ours; web links go to the browser
        self.anchorClicked.connect(self._anchor_clicked)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextBrowserInteraction | Qt.TextInteractionFlag.TextSelectableByKeyboard
        )
        self.document().setDocumentMargin(16)
        self.setPlaceholderText("No messages yet. Type below and press Enter: the model runs on this computer.")
        self._entries: list[Entry] = []
        self._role_names = ROLE_NAMES  # raw completion's names after set_raw_labels(True)
        self._spans: list[tuple[int, int]] = []  # each entry's document range
        self._streaming: Entry | None = None
        self.document().setUndoRedoEnabled(False)  # read-only: no undo history to keep
        self._rich = RichState(ColourQueue(self.document()))  # code and formulas, for Copy
        self._live = LiveReply(self, self._rich, self)  # the streaming reply
        self._colours = self._live.colours  # code colours while a reply streams
        self.live_actions: Callable[[int], tuple[str, ...]] | None = None  # e.g. Regenerate on the last reply

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

    def mark_before_last(self) -> tuple[int, int]:
        """A restore point just before the last entry (a reply about to be regenerated or
        continued is taken off and streamed again)."""
        if not self._spans:
            return self.mark()
        return self._spans[-1][0], len(self._entries) - 1

    def entry_at(self, position: int) -> Entry | None:
        """The entry whose range holds document `position`."""
        for entry, (start, end) in zip(self._entries, self._spans):
            if start <= position <= end:
                return entry
        return None

    def entry_for_message(self, message_id: int) -> Entry | None:
        """The entry showing the stored message `message_id`."""
        return next((e for e in self._entries if e.message_id == message_id), None)

    def code_block_at(self, position: int) -> str | None:
        """The text of the fenced code block holding `position`, or None."""
        return code_block_text(self.document(), position, self._rich.codes)

    # -- building --------------------------------------------------------------------------

    def set_raw_labels(self, raw: bool) -> None:
        """Head entries "Text" / "Continuation" (raw completion: no roles) or "You" / "Assistant";
        re-rendered at once unless a reply is streaming (then from the next entry on)."""
        names = role_names(raw)
        if names is self._role_names:
            return
        self._role_names = names
        if self._streaming is None and self._entries:
            self.set_entries(list(self._entries))

    def set_entries(self, entries: list[Entry]) -> None:
        """Replace everything (load, palette change). The only full render."""
        self.document().clear()
        self._rich.clear()
        self._entries = []
        self._spans = []
        self._streaming = None
        self._live.stop()
        for entry in entries:
            self._append_entry(entry)
        self.scroll_to_end()

    def append_message(self, role: str, text: str, footer: str = "", *, stopped: bool = False,
                       meta: Entry | None = None) -> None:
        """Append a finished message (user text verbatim, assistant text as Markdown); `meta`
        gives its stored id, alternatives and action links."""
        at_end = self._at_end()
        entry = Entry(role, text, footer, stopped=stopped)
        if meta is not None:
            entry.message_id, entry.variant = meta.message_id, meta.variant
            entry.actions, entry.badge = meta.actions, meta.badge
            entry.answer, entry.reasoning, entry.tool_calls = meta.answer, meta.reasoning, meta.tool_calls
            entry.reasoning_label, entry.tool_results = meta.reasoning_label, meta.tool_results
            entry.media = meta.media
            entry.sources, entry.sources_figures = meta.sources, meta.sources_figures
        self._append_entry(entry)
        if at_end:
            self.scroll_to_end()

    def append_error(self, message: str) -> None:
        """Append an inline error block."""
        at_end = self._at_end()
        self._append_entry(Entry("error", message, kind="error"))
        if at_end:
            self.scroll_to_end()

    def begin_reply(self) -> None:
        """Start streaming an assistant reply (header now, text as it comes)."""
        assert self._streaming is None, "a reply is already streaming"
        at_end = self._at_end()
        entry = Entry("assistant", "")
        self._spans.append((self._end_position(), self._end_position()))
        self._entries.append(entry)
        self._streaming = entry
        cursor = self._end_cursor()
        self._insert_header(cursor, "assistant")
        cursor.insertBlock(self._body_block_format(), self.plain_format())
        self._live.start(cursor)
        if at_end:
            self.scroll_to_end()

    def append_delta(self, delta: str) -> None:
        """Append streamed text: written at the end of the document at the next event-loop turn,
        with every other delta that came meanwhile (`live_reply`; nothing above is touched, and
        Qt re-lays out only the last paragraph — see benchmarks/bench_transcript.py)."""
        if not delta:
            return
        assert self._streaming is not None
        self._live.add(delta)

    def flush_stream(self) -> None:
        """Do now what the next event-loop turn would: write the deltas that came, draw the
        chunks that settled (tests, benchmarks)."""
        self._live.flush()

    def finish_colours(self) -> None:
        """Colour every code block still waiting for its colours now (export, tests)."""
        if self._rich.colours is not None:
            self._rich.colours.finish()

    def formula_svgs(self) -> dict[str, str]:
        """Each shown formula's SVG, by its image name (HTML export)."""
        return {name: image.svg for name, image in self._rich.images.items()}

    def streamed_text(self) -> str:
        """The streaming reply's text so far."""
        return self._live.text()

    def end_reply(self, text: str, footer: str, *, stopped: bool = False, meta: Entry | None = None) -> None:
        """Replace the streamed plain text with the Markdown rendering of `text` + the footer
        (+ the action links of `meta`, the saved message's id, alternatives and badge)."""
        assert self._streaming is not None
        at_end = self._at_end()
        entry = self._streaming
        if meta is not None:
            entry.message_id, entry.variant = meta.message_id, meta.variant
            entry.actions, entry.badge = meta.actions, meta.badge
            entry.answer, entry.reasoning, entry.tool_calls = meta.answer, meta.reasoning, meta.tool_calls
            entry.reasoning_label, entry.tool_results = meta.reasoning_label, meta.tool_results
            entry.sources, entry.sources_figures = meta.sources, meta.sources_figures
        entry.text, entry.footer, entry.stopped = text, footer, stopped
        self._live.write_pending()
        live = self._live
        shown = entry.text if entry.answer is None else entry.answer
        final = split_chunks(shown) if shown.strip() and not (entry.reasoning or entry.tool_calls) else []
        keep = 0  # the chunks drawn while streaming that are the finished reply's
        while keep < min(len(live.drawn), len(final)) and live.drawn[keep].chunk.raw == final[keep].raw:
            keep += 1
        cursor = QTextCursor(self.document())
        if keep == 0:
            cursor.setPosition(live.body_start)
        elif keep < len(final):
            cursor.setPosition(live.drawn[keep].start if keep < len(live.drawn) else live.tail)
        else:
            cursor.setPosition(live.drawn[keep - 1].end)
        live.stop()
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.beginEditBlock()
        if self._rich.colours is not None:
            self._rich.colours.drop_from(cursor.selectionStart())
        cursor.removeSelectedText()
        if keep == 0:
            cursor.setBlockFormat(self._body_block_format())
            self._insert_body(cursor, entry)
        else:
            if keep < len(live.drawn):
                cursor.setBlockFormat(QTextBlockFormat())
            for chunk in final[keep:]:
                insert_chunk(self.document(), cursor, chunk, self.palette(), self._rich, self.small_format(),
                             self.math_px(), self.devicePixelRatioF())
            mark_citations(self, live.body_start, cursor.position(), entry)
            self._insert_after(cursor, entry)
        cursor.endEditBlock()
        self._spans[-1] = (self._spans[-1][0], self._end_position())
        self._streaming = None
        if at_end:
            self.scroll_to_end()

    def truncate(self, mark: tuple[int, int]) -> None:
        """Remove everything after `mark` (a failed turn: its user message and partial reply)."""
        position, count = mark
        cursor = QTextCursor(self.document())
        cursor.setPosition(min(position, self._end_position()))
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        del self._entries[count:]
        del self._spans[count:]
        if self._rich.colours is not None:
            self._rich.colours.drop_from(position)
        if self._streaming is not None and self._streaming not in self._entries:
            self._live.stop()
            self._streaming = None

    # -- rendering -------------------------------------------------------------------------

    def _append_entry(self, entry: Entry) -> None:
        start = self._end_position()
        self._entries.append(entry)
        cursor = self._end_cursor()
        cursor.beginEditBlock()
        self._insert_header(cursor, entry.role if entry.kind == "message" else "error")
        if entry.kind == "error" or entry.role != "assistant":
            self._insert_boxed(cursor, entry)
            if entry.kind == "message" and (entry.actions or entry.variant[1] > 1):
                cursor.setBlockFormat(QTextBlockFormat())
                self._insert_actions(cursor, entry, new_block=False)
        else:
            cursor.insertBlock(self._body_block_format(), self.plain_format())
            self._insert_body(cursor, entry)
        cursor.endEditBlock()
        self._spans.append((start, self._end_position()))

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
        label = self._role_names.get(role, "Error" if role == "error" else role.title())
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
                cursor.insertBlock(QTextBlockFormat(), self.plain_format())
            cursor.insertText(line, self.plain_format())
        if entry.media:
            insert_media(self.document(), cursor, entry, self.small_format(),
                         self.palette().color(QPalette.ColorRole.Link))
        cursor.movePosition(QTextCursor.MoveOperation.End)  # out of the frame

    def _body_block_format(self) -> QTextBlockFormat:
        block = QTextBlockFormat()
        block.setTopMargin(2)
        return block

    def plain_format(self) -> QTextCharFormat:
        """Reply text in the palette's text colour."""
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
        if entry.reasoning:
            insert_reasoning(self, cursor, entry)
        shown = entry.text if entry.answer is None else entry.answer
        if shown.strip() or entry.tool_calls:
            if entry.tool_results:  # an agent reply: the calls and results, then the answer
                insert_tool_cards(self, cursor, entry)
                cursor.insertBlock(self._body_block_format(), self.plain_format())
            start = cursor.position()
            insert_rich(self.document(), cursor, shown, self.palette(), self._rich, self.small_format(),
                        self.math_px(), self.devicePixelRatioF())
            mark_citations(self, start, cursor.position(), entry)
            if not entry.tool_results:
                insert_tool_cards(self, cursor, entry)
        else:
            self._insert_placeholder(cursor, entry)
        self._insert_after(cursor, entry)

    def _insert_placeholder(self, cursor: QTextCursor, entry: Entry) -> None:
        italic = self.plain_format()
        italic.setFontItalic(True)
        italic.setForeground(self.palette().color(QPalette.ColorRole.PlaceholderText))
        cursor.insertText("(stopped before any text was generated)" if entry.stopped else "(no text)", italic)

    def _insert_after(self, cursor: QTextCursor, entry: Entry) -> None:
        """Under a reply: its Sources (when it used documents), stats line and action links."""
        if entry.sources:
            insert_sources(self, cursor, entry)
        if entry.footer or entry.badge:
            self._insert_footer(cursor, entry.footer, "stopped" if entry.stopped else entry.badge)
        if entry.actions or entry.variant[1] > 1:
            self._insert_actions(cursor, entry)

    def small_format(self) -> QTextCharFormat:
        """The stats line's and code headers' small, muted text."""
        fmt = QTextCharFormat()
        fmt.setForeground(self.palette().color(QPalette.ColorRole.PlaceholderText))
        font = QFont(self.font())
        font.setPointSizeF(max(7.0, font.pointSizeF() * 0.85))
        fmt.setFont(font)
        return fmt

    def _insert_actions(self, cursor: QTextCursor, entry: Entry, *, new_block: bool = True) -> None:
        """`‹ 2/3 ›  Copy · Edit · Delete` as links (hrefs ts:<action>:<message id>)."""
        fmt = self.small_format()
        if new_block:
            block = QTextBlockFormat()
            block.setTopMargin(2)
            cursor.insertBlock(block, fmt)

        def link(action: str, label: str, big: bool = False) -> None:
            a = QTextCharFormat(fmt)
            if big:  # the ‹ › arrows: a full-size bold glyph is an easier target than a small one
                a.setFont(self.font())
                a.setFontWeight(QFont.Weight.Bold)
            a.setAnchor(True)
            a.setAnchorHref(f"ts:{action}:{entry.message_id}")
            a.setForeground(self.palette().color(QPalette.ColorRole.Link))
            cursor.insertText(label, a)

        if entry.variant[1] > 1:
            link("prev", " ‹ ", big=True)
            cursor.insertText(f"{entry.variant[0]}/{entry.variant[1]}", fmt)
            link("next", " › ", big=True)
            cursor.insertText("   ", fmt)
        for i, action in enumerate(entry.actions):
            if i:
                cursor.insertText(" · ", fmt)
            link(action, ACTION_LABELS.get(action, action))

    def _insert_footer(self, cursor: QTextCursor, text: str, badge: str) -> None:
        block = QTextBlockFormat()
        block.setTopMargin(4)
        fmt = self.small_format()
        cursor.insertBlock(block, fmt)
        if badge:
            bold = QTextCharFormat(fmt)
            bold.setFontWeight(QFont.Weight.Bold)
            if badge == "interrupted":
                bold.setForeground(self._tint(0.8, ERROR_HUE, QPalette.ColorRole.Text))
            cursor.insertText(f"■ {badge}  ", bold)
        cursor.insertText(text, fmt)

    # -- helpers ---------------------------------------------------------------------------

    def follow(self) -> bool:
        """True when the view shows the transcript's end (streaming then keeps it in view)."""
        return self._at_end()

    def math_px(self) -> float:
        """The formulas' font size."""
        info = self.fontInfo()
        return float(info.pixelSize() or 14)

    def _end_position(self) -> int:
        return max(0, self.document().characterCount() - 1)

    def _end_cursor(self) -> QTextCursor:
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        return cursor

    def _at_end(self) -> bool:
        bar = self.verticalScrollBar()
        return bar.value() >= bar.maximum() - 8

    def scroll_to_end(self) -> None:
        """Show the end of the transcript (also for a turn the user just started: their message
        and the reply streaming below it); streaming then follows until they scroll up."""
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt override)
        """Re-render on a palette change (light/dark switch): colours are baked in."""
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange and self._entries:
            streaming = self._streaming
            parts = self._live.text()
            done = [e for e in self._entries if e is not streaming]
            self.set_entries(done)
            if streaming is not None:
                self.begin_reply()
                self.append_delta(parts)

