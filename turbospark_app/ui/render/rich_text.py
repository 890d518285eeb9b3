"""A finished reply drawn into the transcript's document: Markdown as GitHub draws it (Qt's
importer, GitHub dialect: tables, lists, quotes, links), fenced code as framed, coloured blocks
with a Copy link (`code_blocks`), and LaTeX math as images (`math_render`).

Each piece of the reply (`markup.split_fences`, `markup.split_math`) is inserted in order.
Math becomes an image reference `![math](tsmath:<n>)` inside the Markdown (so it sits in its
paragraph, list item or table cell) whose image is a document resource; a formula that does not
render is left as its source, in a code span. The formula's LaTeX is kept per image, for Copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from PySide6.QtCore import QMimeData, Qt, QUrl
from PySide6.QtGui import (
    QPalette,
    QTextBlock,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextDocumentFragment,
    QTextFormat,
    QTextFrameFormat,
    QTextLength,
    QTextTable,
    QTextTableFormat,
)

from .code_blocks import SYNC_CHARS, ColourQueue, code_block_id, insert_code_block, mix, mono_format
from .highlight import TOKENS, guess_language, guessed
from ..formatting import with_line_breaks
from .markup import Piece, split_chunks, split_fences, split_math, split_quotes
from .math import MATH, MathImage

MATH_SCHEME = "tsmath"
OBJECT = "\ufffc"  # the character an image stands on
_QUOTE_LEVEL = QTextFormat.Property.BlockQuoteLevel


@dataclass
class RichState:
    """What the rendered replies keep for Copy: each code block's text (by the n of its
    ts:code:<n> link) and each formula's LaTeX (by its image name)."""

    colours: ColourQueue | None = None  # colours big code blocks a slice at a time
    codes: list[str] = field(default_factory=list)
    formulas: dict[str, tuple[str, bool]] = field(default_factory=dict)
    images: dict[str, MathImage] = field(default_factory=dict)

    def clear(self) -> None:
        self.codes.clear()
        self.formulas.clear()
        self.images.clear()
        if self.colours is not None:
            self.colours.clear()


def insert_rich(document: QTextDocument, cursor: QTextCursor, text: str, palette: QPalette,
                state: RichState, small: QTextCharFormat, px: float, dpr: float) -> None:
    """`text` (Markdown with fences and math) at `cursor`, which stands in an empty block: its
    chunks (`markup.split_chunks`) one after another, as `insert_chunk` draws each."""
    for chunk in split_chunks(text):
        insert_chunk(document, cursor, chunk, palette, state, small, px, dpr)


def insert_chunk(document: QTextDocument, cursor: QTextCursor, chunk: Piece, palette: QPalette,
                 state: RichState, small: QTextCharFormat, px: float, dpr: float) -> None:
    """One chunk of a reply at `cursor`: a streaming reply's finished chunks are drawn as they
    settle, each exactly as the finished reply draws it."""
    if chunk.kind == "code" and chunk.lang.lower() == "math" and chunk.body.strip():
        fresh_block(cursor)  # GitHub's ```math block: a display formula
        markdown = _with_math(document, f"$$\n{chunk.body}\n$$", palette, state, px, dpr)
        _insert_markdown(document, cursor, markdown.strip("\n"), palette, state)
        return
    if chunk.kind == "code":
        fresh_block(cursor)
        state.codes.append(chunk.body)
        insert_code_block(cursor, chunk.body, chunk.lang, palette, len(state.codes) - 1, small,
                          state.colours)
        return
    for part in split_quotes(chunk.raw):
        if not part.raw.strip():
            continue
        fresh_block(cursor)
        if part.kind == "quote":
            _insert_quote(document, cursor, part.body, palette, state, small, px, dpr)
        else:
            markdown = _with_math(document, part.raw, palette, state, px, dpr)
            _insert_markdown(document, cursor, with_line_breaks(markdown.strip("\n")), palette, state)


def _insert_quote(document: QTextDocument, cursor: QTextCursor, body: str, palette: QPalette,
                  state: RichState, small: QTextCharFormat, px: float, dpr: float) -> None:
    """A quote as GitHub draws it: a bar on the left, the text (whatever it holds: code, math,
    lists) in a muted colour. A one-cell table, as only a table cell has a border on one side."""
    table_format = QTextTableFormat()
    table_format.setBorder(0)
    table_format.setBorderCollapse(True)
    table_format.setCellPadding(0)
    table_format.setCellSpacing(0)
    table_format.setTopMargin(4)
    table_format.setBottomMargin(4)
    table_format.setWidth(QTextLength(QTextLength.Type.PercentageLength, 100))
    table = cursor.insertTable(1, 1, table_format)
    cell = table.cellAt(0, 0)
    cell_format = cell.format().toTableCellFormat()
    cell_format.setLeftBorder(3)
    cell_format.setLeftBorderBrush(mix(palette, 0.3))
    cell_format.setLeftBorderStyle(QTextFrameFormat.BorderStyle.BorderStyle_Solid)
    cell_format.setTopBorder(0)
    cell_format.setRightBorder(0)
    cell_format.setBottomBorder(0)
    cell_format.setLeftPadding(10)
    cell.setFormat(cell_format)
    inner = cell.firstCursorPosition()
    insert_rich(document, inner, body, palette, state, small, px, dpr)
    muted = QTextCharFormat()
    muted.setForeground(palette.color(QPalette.ColorRole.PlaceholderText))
    block = document.findBlock(cell.firstPosition())
    while block.isValid() and block.position() <= cell.lastPosition():
        if code_block_id(block) is None:  # code keeps its colours
            it = block.begin()
            while not it.atEnd():
                frag = it.fragment()
                it += 1
                fmt = frag.charFormat()
                if frag.isValid() and not fmt.isAnchor() and not fmt.isImageFormat():
                    c = QTextCursor(document)
                    c.setPosition(frag.position())
                    c.setPosition(frag.position() + frag.length(), QTextCursor.MoveMode.KeepAnchor)
                    c.mergeCharFormat(muted)
        block = block.next()
    cursor.setPosition(table.lastPosition() + 1)


def prefetch_math(text: str, palette: QPalette, px: float) -> int:
    """Start making the SVGs of the formulas in `text` (finished paragraphs of a streaming
    reply) on the math worker thread; returns how many were sent. A chunk that starts inside a
    code fence may send a `$…$` of code too: wasted work on the worker, nothing shown."""
    color = palette.color(QPalette.ColorRole.Text).name()
    sent = 0
    for piece in split_fences(text):
        if piece.kind == "text":
            for m in split_math(piece.raw):
                if m.kind == "math":
                    MATH.prefetch(m.body, display=m.display, color=color, px=px)
                    sent += 1
    return sent


def chunk_ready(chunk: Piece, palette: QPalette, px: float) -> bool:
    """True when drawing `chunk` needs no Pygments or ziamath on the GUI thread (its code lexed,
    its formulas made); otherwise that work is sent to the worker threads (once) and False."""
    if chunk.kind == "code" and chunk.lang.lower() != "math":
        if len(chunk.body) > SYNC_CHARS:
            return True  # drawn plain and coloured a slice at a time (ColourQueue)
        if not chunk.lang:
            if guessed(chunk.body) and TOKENS.has(guess_language(chunk.body), chunk.body):
                return True
            TOKENS.prefetch_guess(chunk.body)
            return False
        if TOKENS.has(chunk.lang, chunk.body):
            return True
        TOKENS.prefetch(chunk.lang, chunk.body)
        return False
    text = f"$$\n{chunk.body}\n$$" if chunk.kind == "code" else chunk.raw
    color = palette.color(QPalette.ColorRole.Text).name()
    ready = True
    for m in split_math(text):
        if m.kind == "math" and not MATH.ready(m.body, display=m.display, color=color, px=px):
            MATH.prefetch(m.body, display=m.display, color=color, px=px)
            ready = False
    return ready


def fresh_block(cursor: QTextCursor) -> None:
    """A new paragraph for the next chunk, unless the cursor stands in an empty one."""
    if cursor.block().length() > 1:
        cursor.insertBlock(QTextBlockFormat())


def _with_math(document: QTextDocument, text: str, palette: QPalette, state: RichState,
               px: float, dpr: float) -> str:
    """The Markdown with each formula as an image reference (or its source in a code span)."""
    out: list[str] = []
    color = palette.color(QPalette.ColorRole.Text).name()
    for piece in split_math(text):
        if piece.kind != "math":
            out.append(piece.raw)
            continue
        image = MATH.render(piece.body, display=piece.display, color=color, px=px, dpr=dpr)
        if image is None:
            out.append(_code_span(piece.raw.replace("\n", " ")))
            continue
        name = f"{MATH_SCHEME}:{len(state.formulas)}{'d' if piece.display else ''}"
        state.formulas[name] = (piece.body, piece.display)
        state.images[name] = image
        document.addResource(QTextDocument.ResourceType.ImageResource, QUrl(name), image.image)
        ref = f"![math]({name})"
        out.append(f"\n\n{ref}\n\n" if piece.display and "\n" in piece.raw else ref)
    return "".join(out)


def _code_span(source: str) -> str:
    run = "`"
    while run in source:
        run += "`"
    pad = " " if source.startswith("`") or source.endswith("`") else ""
    return f"{run}{pad}{source}{pad}{run}"


def _insert_markdown(document: QTextDocument, cursor: QTextCursor, markdown: str, palette: QPalette,
                     state: RichState) -> None:
    """Qt's importer through a scratch document, then the first block's own format put back:
    inserted into an existing block, a fragment's first block takes that block's format, which
    drew a reply's first heading, quote or code line outside its box."""
    scratch = QTextDocument()
    scratch.setMarkdown(markdown, QTextDocument.MarkdownFeature.MarkdownDialectGitHub)
    for frame in scratch.rootFrame().childFrames():  # ruled here: inside the edit block that
        if isinstance(frame, QTextTable):  # inserts them, a cursor finds no table to style
            _style_table(frame, palette)
    first = scratch.begin()
    start = cursor.position()
    cursor.insertFragment(QTextDocumentFragment(scratch))
    if first.textList() is None and QTextCursor(first).currentTable() is None:
        fix = QTextCursor(document)
        fix.setPosition(start)
        fix.setBlockFormat(first.blockFormat())
    if first.textList() is not None or (first.length() == 1 and QTextCursor(first.next()).currentTable() is not None):
        _drop_empty_block(document, start)  # (a document begins with a paragraph: a table after it)
    _restyle(document, start, cursor.position(), palette, state)


def _drop_empty_block(document: QTextDocument, at: int) -> None:
    """A list or a table inserted into an empty paragraph goes after it, leaving a blank line
    (in the previous chunk's font: a heading's, say) that one Markdown text would not have:
    that paragraph is merged into the one before it (the list or table then starts at `at`)."""
    empty = document.findBlock(at)
    before = empty.previous()
    if (empty.length() != 1 or empty.textList() is not None or not before.isValid()
            or before.textList() is not None or before.position() + before.length() != at
            or document.characterAt(at - 1) != "\u2029"):  # (after a table: its frame's end)
        return
    c = QTextCursor(document)
    c.setPosition(at - 1)
    if c.currentTable() is not None or c.currentFrame() != QTextCursor(empty).currentFrame():
        return
    c.setPosition(at, QTextCursor.MoveMode.KeepAnchor)
    c.removeSelectedText()


def _restyle(document: QTextDocument, start: int, end: int, palette: QPalette, state: RichState) -> None:
    """Palette colours and GitHub's look for what Qt's importer made in [start, end): inline
    code in the fixed font on a tint, quotes muted and indented, formulas placed (tables are
    ruled in the scratch document, `_insert_markdown`)."""
    code_bg = mix(palette, 0.07)
    inline_code = mono_format(palette)
    inline_code.clearForeground()
    inline_code.setBackground(code_bg)
    muted = palette.color(QPalette.ColorRole.PlaceholderText)
    block = document.findBlock(start)
    while block.isValid() and block.position() < end:
        at = QTextCursor(block)
        if block.blockFormat().hasProperty(_QUOTE_LEVEL):
            fmt = block.blockFormat()
            fmt.setLeftMargin(14 * max(1, int(fmt.intProperty(_QUOTE_LEVEL))))
            at.setBlockFormat(fmt)
            at.movePosition(QTextCursor.MoveOperation.EndOfBlock, QTextCursor.MoveMode.KeepAnchor)
            grey = QTextCharFormat()
            grey.setForeground(muted)
            at.mergeCharFormat(grey)
        it = block.begin()
        while not it.atEnd():
            frag = it.fragment()
            it += 1
            if not frag.isValid():
                continue
            fmt = frag.charFormat()
            image = fmt.isImageFormat() and fmt.toImageFormat().name() in state.formulas
            if not (image or fmt.isAnchor() or fmt.fontFixedPitch()):
                continue  # plain text: nothing to restyle
            c = QTextCursor(document)
            c.setPosition(frag.position())
            c.setPosition(frag.position() + frag.length(), QTextCursor.MoveMode.KeepAnchor)
            if image:
                _place_formula(c, block, fmt.toImageFormat().name(), state)
            elif fmt.isAnchor():  # the importer takes the app's link colour, not this view's
                link = QTextCharFormat()
                link.setForeground(palette.color(QPalette.ColorRole.Link))
                c.mergeCharFormat(link)
            else:
                c.mergeCharFormat(inline_code)
        block = block.next()


def _place_formula(c: QTextCursor, block: QTextBlock, name: str, state: RichState) -> None:
    """A display formula alone in its paragraph is centred; an inline one sits on the line's
    middle. Its tooltip is its LaTeX."""
    fmt = c.charFormat().toImageFormat()
    fmt.setToolTip(state.formulas[name][0])
    if state.formulas[name][1] and block.text().strip() == OBJECT:
        bf = block.blockFormat()
        bf.setAlignment(Qt.AlignmentFlag.AlignHCenter)
        bf.setTopMargin(6)
        bf.setBottomMargin(6)
        QTextCursor(block).setBlockFormat(bf)
    else:
        fmt.setVerticalAlignment(QTextCharFormat.VerticalAlignment.AlignMiddle)
    c.setCharFormat(fmt)


def _style_table(table: QTextTable, palette: QPalette) -> None:
    fmt = table.format()
    fmt.setBorder(1)
    fmt.setBorderBrush(mix(palette, 0.25))
    fmt.setBorderStyle(QTextTableFormat.BorderStyle.BorderStyle_Solid)
    fmt.setBorderCollapse(True)
    fmt.setCellPadding(5)
    fmt.setCellSpacing(0)
    fmt.setWidth(QTextLength(QTextLength.Type.VariableLength, 0))
    fmt.setTopMargin(6)  # (the paragraph or code box above: its bottom margin is not kept)
    fmt.setBottomMargin(6)
    table.setFormat(fmt)
    header = mix(palette, 0.06)
    for col in range(table.columns()):
        cell = table.cellAt(0, col)
        cf = cell.format()
        cf.setBackground(header)
        cell.setFormat(cf)


def formula_at(document: QTextDocument, position: int, state: RichState) -> str | None:
    """The LaTeX of the formula image at `position` (or just before it), or None."""
    for p in (position, position - 1):
        if 0 <= p < document.characterCount() - 1 and document.characterAt(p) == OBJECT:
            c = QTextCursor(document)
            c.setPosition(p + 1)
            name = c.charFormat().toImageFormat().name() if c.charFormat().isImageFormat() else ""
            if name in state.formulas:
                return state.formulas[name][0]
    return None


def selection_mime(cursor: QTextCursor, state: RichState) -> QMimeData:
    """The selection as text with each formula as its LaTeX source ($…$ / $$…$$)."""
    document = cursor.document()
    start, end = cursor.selectionStart(), cursor.selectionEnd()
    parts: list[str] = []
    block = document.findBlock(start)
    while block.isValid() and block.position() < end:
        if parts:
            parts.append("\n")
        it = block.begin()
        while not it.atEnd():
            frag = it.fragment()
            it += 1
            a, b = max(start, frag.position()), min(end, frag.position() + frag.length())
            if b <= a:
                continue
            fmt = frag.charFormat()
            name = fmt.toImageFormat().name() if fmt.isImageFormat() else ""
            if name in state.formulas:
                source, display = state.formulas[name]
                parts.append(f"$${source}$$" if display else f"${source}$")
            else:
                parts.append(frag.text()[a - frag.position():b - frag.position()])
        block = block.next()
    mime = QMimeData()
    mime.setText("".join(parts).replace("\u2029", "\n").replace("\u2028", "\n"))
    return mime
