"""A reply's text cut into what is drawn differently: Markdown, fenced code, and LaTeX math.
Pure functions (no Qt): every piece keeps its exact source characters in `raw`, so joining
the pieces gives the text back (nothing lost or doubled; tests/test_ui_markup.py checks it
with hypothesis).

Math is recognised in the forms models write: `$$…$$` and `\\[…\\]` (display), `\\(…\\)` and
`$…$` (inline). A single `$` is math only where it cannot be money, by Pandoc's rule: the
opening `$` has a non-space right after it, the closing `$` a non-space right before it and no
digit right after it, both on one line ("$5 and $10", "$5-$10" stay text). Nothing inside
inline code spans or fenced code is math, and `\\$` is a dollar sign.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Piece:
    """`kind`: "text" (Markdown), "code" (a fenced block), "quote" or "math"."""

    kind: str
    raw: str  # the exact source characters
    body: str = ""  # code: the code (fences and their indent removed); math: the LaTeX; quote: the text
    lang: str = ""  # code: the fence's language word ("" when none)
    display: bool = False  # math: a display formula ($$, \[)


_FENCE_CHARS = "`~"


def fence_open(line: str) -> tuple[str, int, str] | None:
    """(fence run, indent, language) when `line` opens a fenced block."""
    stripped = line.lstrip(" ")
    indent = len(line) - len(stripped)
    if not stripped or stripped[0] not in _FENCE_CHARS:
        return None
    ch = stripped[0]
    n = len(stripped) - len(stripped.lstrip(ch))
    if n < 3:
        return None
    info = stripped[n:].strip()
    if ch == "`" and "`" in info:  # CommonMark: a backtick fence's info has no backtick
        return None
    return ch * n, indent, (info.split() or [""])[0].lstrip(".{").rstrip("}")


def fence_closes(line: str, run: str) -> bool:
    """True when `line` closes a fence opened with `run` (``` or ~~~, 3 or more)."""
    if run[0] not in line[:8]:  # the common case, a code line, decided at once
        return False
    stripped = line.strip()
    return len(stripped) >= len(run) and stripped == run[0] * len(stripped)


def split_fences(text: str) -> list[Piece]:
    """Markdown text and fenced code blocks, in order. A fence left open (a reply still
    streaming, or stopped) runs to the end of the text."""
    pieces: list[Piece] = []
    lines = text.splitlines(keepends=True)
    buf: list[str] = []
    i = 0
    while i < len(lines):
        opened = fence_open(lines[i].rstrip("\r\n"))
        if opened is None:
            buf.append(lines[i])
            i += 1
            continue
        if buf:
            pieces.append(Piece("text", "".join(buf)))
            buf = []
        run, indent, lang = opened
        j = i + 1
        while j < len(lines) and not fence_closes(lines[j], run):
            j += 1
        inner = lines[i + 1:j]
        end = min(j + 1, len(lines))
        raw = "".join(lines[i:end])
        code = "".join(_dedent(line, indent) for line in inner)
        if code.endswith("\n"):
            code = code[:-2] if code.endswith("\r\n") else code[:-1]
        pieces.append(Piece("code", raw, code, lang))
        i = end
    if buf:
        pieces.append(Piece("text", "".join(buf)))
    return pieces


def _dedent(line: str, indent: int) -> str:
    k = 0
    while k < indent and k < len(line) and line[k] == " ":
        k += 1
    return line[k:]


_QUOTE = re.compile(r" {0,3}>")


def split_quotes(text: str) -> list[Piece]:
    """Markdown text (no fences) into "text" and "quote" pieces: a quote is a run of lines that
    start with `>` (after up to three spaces); its body is those lines without the marker (and
    one space after it). A line without the marker ends the quote (no lazy continuation)."""
    pieces: list[Piece] = []
    buf: list[str] = []
    quoting = False
    for line in text.splitlines(keepends=True):
        is_quote = _QUOTE.match(line) is not None
        if buf and is_quote != quoting:
            pieces.append(_quote_piece(buf) if quoting else Piece("text", "".join(buf)))
            buf = []
        quoting = is_quote
        buf.append(line)
    if buf:
        pieces.append(_quote_piece(buf) if quoting else Piece("text", "".join(buf)))
    return pieces


def _quote_piece(lines: list[str]) -> Piece:
    body = []
    for line in lines:
        rest = line[_QUOTE.match(line).end():]  # type: ignore[union-attr]
        body.append(rest[1:] if rest.startswith(" ") else rest)
    return Piece("quote", "".join(lines), "".join(body))


def split_math(text: str) -> list[Piece]:
    """Markdown text (no fences) into "text" and "math" pieces."""
    pieces: list[Piece] = []
    start = 0  # where the pending text piece begins
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == "`":
            i = _skip_code_span(text, i)
            continue
        if c == "\\" and i + 1 < n:
            nxt = text[i + 1]
            found = None
            if nxt == "(":
                found = _find_close(text, i + 2, "\\)")
                display = False
            elif nxt == "[":
                found = _find_close(text, i + 2, "\\]")
                display = True
            if found is not None:
                body = text[i + 2:found]
                if body.strip():
                    _push(pieces, text, start, i)
                    pieces.append(Piece("math", text[i:found + 2], body.strip(), display=display))
                    i = start = found + 2
                    continue
            i += 2  # an escape: the next character is literal (\$, \\, \`)
            continue
        if c == "$":
            if text.startswith("$$", i):
                found = _find_close(text, i + 2, "$$")
                if found is not None and text[i + 2:found].strip():
                    _push(pieces, text, start, i)
                    pieces.append(Piece("math", text[i:found + 2], text[i + 2:found].strip(), display=True))
                    i = start = found + 2
                    continue
                i += 2
                continue
            close = _single_dollar_close(text, i)
            if close is not None:
                _push(pieces, text, start, i)
                pieces.append(Piece("math", text[i:close + 1], text[i + 1:close]))
                i = start = close + 1
                continue
        i += 1
    _push(pieces, text, start, n)
    return pieces


def _push(pieces: list[Piece], text: str, start: int, end: int) -> None:
    if end > start:
        pieces.append(Piece("text", text[start:end]))


def _skip_code_span(text: str, i: int) -> int:
    """Past the code span opening at `i` (a run of backticks closed by a run of the same
    length), or past the run alone when it is not closed."""
    j = i
    while j < len(text) and text[j] == "`":
        j += 1
    run = j - i
    k = j
    while k < len(text):
        if text[k] != "`":
            k += 1
            continue
        m = k
        while m < len(text) and text[m] == "`":
            m += 1
        if m - k == run:
            return m
        k = m
    return j


def _find_close(text: str, i: int, closer: str) -> int | None:
    """Where `closer` starts, before any blank line (math does not run across paragraphs);
    None when absent."""
    k = i
    while k < len(text):
        if text.startswith(closer, k):
            return k
        if text.startswith("\n\n", k):
            return None
        if text[k] == "\\" and closer[0] != "\\":
            k += 2
            continue
        k += 1
    return None


def _single_dollar_close(text: str, i: int) -> int | None:
    """The closing `$` of an inline formula opening at `i`, by Pandoc's rule (module docstring)."""
    n = len(text)
    if i + 1 >= n or text[i + 1].isspace() or text[i + 1] == "$":
        return None
    if i > 0 and text[i - 1] == "$":
        return None
    k = i + 1
    while k < n:
        c = text[k]
        if c == "\n":
            return None
        if c == "\\":
            k += 2
            continue
        if c == "$":
            if text[k - 1].isspace() or (k + 1 < n and (text[k + 1].isdigit() or text[k + 1] == "$")):
                return None
            return k
        k += 1
    return None


_LIST_ITEM = re.compile(r"(?:[-*+]|\d{1,9}[.)])(?:[ \t]|$)")


def split_chunks(text: str) -> list[Piece]:
    """The reply as top-level blocks drawn one after another: each fenced block ("code"), and
    the Markdown between fences cut after a blank line where the next line starts a new block
    at the left margin ("text"). A list stays whole (an item after a blank line is the same
    list), and so does anything indented (a list item's continuation, indented code). Joining
    the pieces' `raw` gives `text` back.

    A chunk depends only on its own lines and the first line after it, so the chunks of a
    streaming reply are those of the finished reply, but the last (`settled_chunks`)."""
    out: list[Piece] = []
    for piece in split_fences(text):
        if piece.kind == "code":
            out.append(piece)
            continue
        lines = piece.raw.splitlines(keepends=True)
        start = 0  # the chunk's first line
        listed = False  # the chunk holds a list item at the margin
        blank = False  # the line before was blank
        for i, line in enumerate(lines):
            if not line.strip():
                blank = True
                continue
            starts = line[0] not in " \t"
            item = starts and _LIST_ITEM.match(line) is not None
            if blank and i > start and starts and not (item and listed):
                out.append(Piece("text", "".join(lines[start:i])))
                start, listed = i, False
            listed = listed or item
            blank = False
        if start < len(lines):
            out.append(Piece("text", "".join(lines[start:])))
    return out


def settled_chunks(text: str) -> list[Piece]:
    """The leading chunks of a reply still being written that no later text can change: every
    chunk but the last, once the next one's first line is complete, and a fenced block as soon
    as its closing fence's line is (the block's Copy then shows while the reply streams)."""
    chunks = split_chunks(text)
    out: list[Piece] = []
    for i, chunk in enumerate(chunks):
        if chunk.kind == "code" and chunk.raw.endswith("\n") and _closed(chunk):
            out.append(chunk)
            continue
        after = chunks[i + 1] if i + 1 < len(chunks) else None
        if after is None or "\n" not in after.raw:
            break
        out.append(chunk)
    return out


def _closed(chunk: Piece) -> bool:
    lines = chunk.raw.splitlines()
    if len(lines) < 2:
        return False
    opened = fence_open(lines[0])
    return opened is not None and fence_closes(lines[-1], opened[0])
