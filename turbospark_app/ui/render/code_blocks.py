"""Code in the transcript.

A finished reply's fenced block: a header line (the language, and a Copy link: href
ts:code:<n>) over the code in the system's fixed-pitch font, coloured by Pygments (`highlight`),
one paragraph per line with line wrapping off (a long line scrolls the transcript sideways
instead of folding), all on a tinted ground. Its paragraphs carry the block's id (CODE_ID; the
transcript keeps the exact code by id, for Copy and Copy Code Block). They sit in the document's
root frame, not a frame of their own: Qt lays the root frame out lazily (what is visible first),
a nested frame all at once (~120 ms for 2,000 lines).

While a block is being written it is plain text; `StreamColours` colours the lines inside its open
fences as they are written: once per event-loop turn it looks at the paragraphs from the first
one not yet complete to the end; a line is lexed once, when it is complete (the line still being
written is in the fixed font on the code ground), whatever the reply's length, and never again.
When a fence closes, the whole block is lexed on a worker thread (`highlight.TOKENS.prefetch`),
and the block is drawn as a finished one (header, colours, Copy) once that is done
(`live_reply`), while the reply goes on.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Iterator

from PySide6.QtCore import QTimer

from PySide6.QtGui import (
    QColor,
    QFont,
    QFontDatabase,
    QPalette,
    QTextBlockFormat,
    QTextCharFormat,
    QTextBlock,
    QTextCursor,
    QTextDocument,
    QTextFormat,
    QTextLayout,
)

from .highlight import TOKENS, guess_language, language_label, lexer_for, line_runs, merge_runs, token_format, token_runs
from .markup import fence_closes, fence_open
from ..theme import palette_is_dark

CODE_ID = QTextFormat.Property.UserProperty + 43  # on a code block's paragraphs: its index
SYNC_CHARS = 6000  # a block up to this size is lexed at once (~25 ms for Python); bigger: sliced
SLICE_SECONDS = 0.004  # colouring work per event-loop turn (a 60 Hz frame is 16.7 ms)...
_OPEN_END = 1 << 20  # a format range reaching past the end of a line still being written
SLICE_TOKENS = 512  # ...and tokens: each coloured line is laid out again when the slice ends


def mix(palette: QPalette, amount: float, towards: QPalette.ColorRole = QPalette.ColorRole.Text,
        base: QPalette.ColorRole = QPalette.ColorRole.Base) -> QColor:
    """A palette colour `amount` of the way to another: code boxes follow light and dark."""
    a, b = palette.color(base), palette.color(towards)
    return QColor.fromRgbF(*(x * (1 - amount) + y * amount for x, y in
                             ((a.redF(), b.redF()), (a.greenF(), b.greenF()), (a.blueF(), b.blueF()))))


def mono_format(palette: QPalette) -> QTextCharFormat:
    """The system's fixed-pitch font (family + monospace hint) in the text colour."""
    mono = _fixed_font()
    fmt = QTextCharFormat()
    fmt.setFontFamilies([mono.family()])
    fmt.setFontFixedPitch(True)
    fmt.setFontStyleHint(QFont.StyleHint.Monospace)
    fmt.setForeground(palette.color(QPalette.ColorRole.Text))
    return fmt


@lru_cache(maxsize=1)
def _fixed_font() -> QFont:
    return QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)


def insert_code_block(cursor: QTextCursor, code: str, lang: str, palette: QPalette, code_id: int,
                      small: QTextCharFormat, queue: "ColourQueue | None" = None) -> None:
    """The block at `cursor` (module docstring), which stands in an empty paragraph; leaves the
    cursor at the end of its last line. A big block not lexed before goes in plain and is
    coloured by `queue` a slice at a time."""
    lang = lang or guess_language(code)
    header = QTextBlockFormat()
    header.setBackground(mix(palette, 0.10))
    header.setTopMargin(8)
    header.setTextIndent(4)
    header.setProperty(CODE_ID, code_id)
    cursor.setBlockFormat(header)
    cursor.insertText(f" {language_label(lang) or 'code'}    ", small)
    link = QTextCharFormat(small)
    link.setAnchor(True)
    link.setAnchorHref(f"ts:code:{code_id}")
    link.setForeground(palette.color(QPalette.ColorRole.Link))
    link.setBackground(mix(palette, 0.2))  # a small button on the header's ground
    cursor.insertText("\u2002Copy\u2002", link)
    line = QTextBlockFormat(header)
    line.setTopMargin(0)
    line.setBackground(mix(palette, 0.045))
    line.setNonBreakableLines(True)  # sideways scroll, never a folded line
    line.setTextIndent(8)  # one line a paragraph: an inner left padding
    base = mono_format(palette)
    cursor.insertBlock(line, base)
    dark = palette_is_dark(palette)
    if queue is not None and len(code) > SYNC_CHARS:
        queue.add(cursor.position(), lang, code, dark)
        cursor.insertText(code, base)  # one paragraph a line, each in the line format
    else:
        _insert_runs(cursor, lang, code, line, base, dark)
    end = cursor.blockFormat()
    end.setBottomMargin(8)  # room under the box (a margin is not painted)
    cursor.setBlockFormat(end)


def _insert_runs(cursor: QTextCursor, lang: str, code: str, line: QTextBlockFormat, base: QTextCharFormat,
                 dark: bool) -> None:
    formats: dict[Any, QTextCharFormat] = {}
    for ttype, text in token_runs(lang, code):
        fmt = formats.get(ttype)
        if fmt is None:
            fmt = QTextCharFormat(base)
            fmt.merge(token_format(ttype, dark))
            formats[ttype] = fmt
        parts = text.split("\n")
        for n, part in enumerate(parts):
            if n:
                cursor.insertBlock(line, base)
            if part:
                cursor.insertText(part, fmt)


def code_block_id(block: QTextBlock) -> int | None:
    """The id of the code block `block` belongs to (its header or a line), or None."""
    value = block.blockFormat().property(CODE_ID) if block.isValid() else None
    return value if isinstance(value, int) else None


def code_block_text(document: QTextDocument, position: int, codes: list[str]) -> str | None:
    """The exact code of the code block holding `position`, or None (`codes`: by id)."""
    ident = code_block_id(document.findBlock(position))
    return codes[ident] if ident is not None and 0 <= ident < len(codes) else None


class StreamColours:
    """Colours fenced code in the streaming reply (module docstring) as QTextLayout formats of
    the paragraphs a delta changed (the document's text and formats are not edited: the
    reply's plain text is replaced by its rendering at the end anyway)."""

    def __init__(self, document: QTextDocument) -> None:
        self.document = document
        self.lexed_lines = 0
        self._palette_key = -1
        self._formats: dict[Any, QTextCharFormat] = {}
        self._base = QTextCharFormat()
        self._fence = QTextCharFormat()
        self._dark = False
        self.reset(-1)

    def reset(self, start: int) -> None:
        """A reply's text starts at `start` (-1: none streams)."""
        self.line_start = start  # the first paragraph not yet complete
        self._open_line: tuple[int, str] = (-1, "")  # the last paragraph's number and kind, as formatted
        self._code_lines: list[str] = []  # the open fence's finished lines
        self.fence: tuple[str, str] | None = None  # (run, language) open at that paragraph

    def update(self, palette: QPalette) -> None:
        """Colour the paragraphs from the first incomplete one to the end. A finished line is
        lexed once; the line still being written gets one format reaching past its end (the
        fixed font on the code ground, or the fence's) when it starts, and is lexed when it
        ends: most turns lex nothing."""
        if self.line_start < 0:
            return
        block = self.document.findBlock(self.line_start)
        while block.isValid():
            text = block.text()
            last = not block.next().isValid()
            kind = "text"
            if self.fence is None:
                opened = fence_open(text)
                if opened is not None:
                    kind = "fence"
                    if not last:
                        self.fence = (opened[0], opened[2])
                        self._code_lines = []
            elif fence_closes(text, self.fence[0]):
                kind = "fence"
                if not last:
                    if self.fence[1] and self._code_lines:  # the block is whole: lex it ahead
                        TOKENS.prefetch(self.fence[1], "\n".join(self._code_lines))
                    self.fence = None
            else:
                kind = "code"
            if last:
                if (block.blockNumber(), kind) != self._open_line:
                    self._open_line = (block.blockNumber(), kind)
                    fmt = self._palette_formats(palette)[kind]
                    self._apply(block, [] if fmt is None else [_range(0, _OPEN_END, fmt)])
                break
            if kind == "code":
                self._code_lines.append(text)
                self._apply(block, self._code_ranges(text, self.fence[1] if self.fence else "", palette))
            else:
                fmt = self._palette_formats(palette)[kind]
                self._apply(block, [] if fmt is None else [_range(0, len(text), fmt)])
            block = block.next()
            self.line_start = block.position()

    def _apply(self, block: QTextBlock, ranges: list[QTextLayout.FormatRange]) -> None:
        if ranges or block.layout().formats():
            block.layout().setFormats(ranges)
            self.document.markContentsDirty(block.position(), block.length())

    def _palette_formats(self, palette: QPalette) -> dict[str, QTextCharFormat | None]:
        key = palette.cacheKey()
        if key != self._palette_key:  # the merged formats of this palette, made once
            self._palette_key, self._formats = key, {}
            self._base = mono_format(palette)
            self._base.setBackground(mix(palette, 0.045))
            self._dark = palette_is_dark(palette)
            self._fence = _fence_format(palette)
        return {"text": None, "fence": self._fence, "code": self._base}

    def _code_ranges(self, text: str, lang: str, palette: QPalette) -> list[QTextLayout.FormatRange]:
        self.lexed_lines += 1
        self._palette_formats(palette)
        out = [_range(0, len(text), self._base)]
        at = 0
        for ttype, value in line_runs(lang, text):
            fmt = self._formats.get(ttype)
            if fmt is None:
                fmt = QTextCharFormat(self._base)
                fmt.merge(token_format(ttype, self._dark))
                self._formats[ttype] = fmt
            out.append(_range(at, len(value), fmt))
            at += len(value)
        return out


def _range(start: int, length: int, fmt: QTextCharFormat) -> QTextLayout.FormatRange:
    r = QTextLayout.FormatRange()
    r.start, r.length, r.format = start, length, fmt
    return r


def _fence_format(palette: QPalette) -> QTextCharFormat:
    fmt = mono_format(palette)
    fmt.setForeground(palette.color(QPalette.ColorRole.PlaceholderText))
    return fmt


@dataclass
class _Job:
    start: int  # document position of the code's first character
    lang: str
    code: str
    dark: bool
    tokens: Iterator[tuple[int, Any, str]]
    seen: list[tuple[int, Any, str]] | None = field(default_factory=list)  # None: runs were cached


class ColourQueue:
    """Colours big code blocks after they are drawn: Pygments' token stream (or the cached
    runs of a block lexed before) is pulled for at most SLICE_SECONDS per event-loop turn, and
    each token's colour merged into the document
    (a code offset is a document offset: a line break is one position, as "\n" is one
    character). A finished block's runs go in the token cache, so drawing it again (a palette
    change, a reopened conversation) is immediate."""

    def __init__(self, document: QTextDocument) -> None:
        self.document = document
        self.jobs: deque[_Job] = deque()
        # Owned by the document, so Qt destroys it with the document on the GUI thread. Owned
        # by this Python object (kept alive by its own timeout connection), only Python's cyclic
        # GC would free it, on whichever thread collected; a timer cannot be stopped from
        # another thread.
        self.timer = QTimer(document)
        self.timer.setInterval(0)
        self.timer.timeout.connect(self._tick)
        self.slices = 0

    def add(self, start: int, lang: str, code: str, dark: bool) -> None:
        """Colour `code`, drawn plain at `start`, from the next event-loop turn on."""
        if TOKENS.has(lang, code):
            job = _Job(start, lang, code, dark, _offsets(token_runs(lang, code)), None)
        else:
            job = _Job(start, lang, code, dark, lexer_for(lang).get_tokens_unprocessed(code))
        self.jobs.append(job)
        self.timer.start()

    def clear(self) -> None:
        """Forget every job (the document was cleared)."""
        self.jobs.clear()
        self.timer.stop()

    def drop_from(self, position: int) -> None:
        """Forget the jobs of blocks at or after `position` (that part was removed)."""
        self.jobs = deque(j for j in self.jobs if j.start < position)
        if not self.jobs:
            self.timer.stop()

    def finish(self) -> None:
        """Colour everything now (export, tests)."""
        while self.jobs:
            self._tick(budget=3600.0, tokens=1 << 62)

    def _tick(self, budget: float = SLICE_SECONDS, tokens: int = SLICE_TOKENS) -> None:
        deadline = time.perf_counter() + budget
        self.slices += 1
        cursor = QTextCursor(self.document)
        cursor.beginEditBlock()
        while self.jobs and time.perf_counter() < deadline and tokens > 0:
            job = self.jobs[0]
            tokens -= 64
            for _ in range(64):
                token = next(job.tokens, None)
                if token is None:
                    if job.seen is not None:
                        TOKENS.put(job.lang, job.code, list(merge_runs(iter(job.seen))))
                    self.jobs.popleft()
                    break
                if job.seen is not None:
                    job.seen.append(token)
                at, ttype, value = token
                fmt = token_format(ttype, job.dark)
                if value and not fmt.isEmpty():
                    cursor.setPosition(job.start + at)
                    cursor.setPosition(job.start + at + len(value), QTextCursor.MoveMode.KeepAnchor)
                    cursor.mergeCharFormat(fmt)
        cursor.endEditBlock()
        if not self.jobs:
            self.timer.stop()


def _offsets(runs: list[Any]) -> Iterator[tuple[int, Any, str]]:
    at = 0
    for ttype, text in runs:
        yield at, ttype, text
        at += len(text)
