"""Code in a rendered reply: the fixed-pitch styling, and the text of one fenced block."""

from __future__ import annotations

from PySide6.QtGui import (
    QFont,
    QFontDatabase,
    QPalette,
    QTextBlock,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextFormat,
)


def is_code(block: QTextBlock) -> bool:
    """A block of a fenced code block (Qt's Markdown importer marks them)."""
    if not block.isValid():
        return False
    fmt = block.blockFormat()
    return fmt.hasProperty(QTextFormat.Property.BlockCodeFence) or fmt.hasProperty(
        QTextFormat.Property.BlockCodeLanguage)


def code_block_text(document: QTextDocument, position: int) -> str | None:
    """The text of the fenced code block holding `position`, or None."""
    block = document.findBlock(position)
    if not is_code(block):
        return None
    while is_code(block.previous()):
        block = block.previous()
    lines = []
    while is_code(block):
        lines.append(block.text())
        block = block.next()
    return "\n".join(lines)


def style_code(document: QTextDocument, start: int, end: int, palette: QPalette) -> None:
    """The system's fixed-pitch font (family + monospace hint) and a subtle background for
    the code blocks and inline code in [start, end)."""
    mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
    code_bg = palette.color(QPalette.ColorRole.AlternateBase)
    block = document.findBlock(start)
    while block.isValid() and block.position() < end:
        if is_code(block):
            fmt = block.blockFormat()
            fmt.setBackground(code_bg)
            fmt.setLeftMargin(8)
            fmt.setRightMargin(8)
            c = QTextCursor(block)
            c.setBlockFormat(fmt)
            c.movePosition(QTextCursor.MoveOperation.EndOfBlock, QTextCursor.MoveMode.KeepAnchor)
            mf = QTextCharFormat()
            mf.setFontFamilies([mono.family()])
            mf.setFontFixedPitch(True)
            mf.setFontStyleHint(QFont.StyleHint.Monospace)
            c.mergeCharFormat(mf)
        else:
            it = block.begin()
            while not it.atEnd():
                frag = it.fragment()
                if frag.isValid() and frag.charFormat().fontFixedPitch():
                    c = QTextCursor(document)
                    c.setPosition(frag.position())
                    c.setPosition(frag.position() + frag.length(), QTextCursor.MoveMode.KeepAnchor)
                    mf = QTextCharFormat()
                    mf.setFontFamilies([mono.family()])
                    mf.setFontStyleHint(QFont.StyleHint.Monospace)
                    mf.setBackground(code_bg)
                    c.mergeCharFormat(mf)
                it += 1
        block = block.next()
