"""Chunks of at most `target` tokens (the embedder's tokens), split where the text breaks best:
at headings, then paragraphs, then sentences, then words; consecutive chunks share an overlap of
whole sentences. A chunk never spans two pages (its page is what a citation names).

The default target is 256 tokens, not 500: all-MiniLM-L6-v2 was trained on at most 256 word
pieces (sentence-transformers cuts its input there), and on the test corpus 480-token chunks
drowned a one-sentence fact in its neighbours' text (cosine rank 40+ where BM25 had it first).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable

from .pages import Page

CountTokens = Callable[[str], int]

TARGET_TOKENS = 256
OVERLAP_TOKENS = 40

_HEADING = re.compile(r"^(#{1,6} |[^\n]{1,80}\n(?:=+|-+)$)", re.M)
_PARAGRAPH = re.compile(r"\n\s*\n")
_SENTENCE = re.compile(r"(?<=[.!?。])\s+(?=\S)|\n")
_WORD = re.compile(r"\s+")


@dataclass(frozen=True)
class Chunk:
    ord: int  # position in its document
    page: int | None
    char_start: int  # offsets into the page's text
    char_end: int
    text: str
    n_tokens: int


def _spans(text: str, pattern: re.Pattern[str], start: int, end: int) -> list[tuple[int, int]]:
    """[start, end) cut at every match of `pattern` (the separators dropped), empty parts skipped."""
    out, pos = [], start
    for m in pattern.finditer(text, start, end):
        if m.start() > pos:
            out.append((pos, m.start()))
        pos = max(pos, m.end())
    if end > pos:
        out.append((pos, end))
    return [(a, b) for a, b in out if text[a:b].strip()]


def _sections(text: str) -> list[tuple[int, int]]:
    starts = sorted({0, *(m.start() for m in _HEADING.finditer(text))})
    bounds = [*starts[1:], len(text)]
    return [(a, b) for a, b in zip(starts, bounds) if text[a:b].strip()]


def _pieces(text: str, span: tuple[int, int], count: CountTokens, limit: int,
            levels: tuple[re.Pattern[str], ...]) -> list[tuple[int, int, int]]:
    """(start, end, tokens) pieces of `span`, each ≤ `limit` tokens, cut at the coarsest level
    that makes them fit (the last level, words, always does)."""
    n = count(text[span[0]:span[1]])
    if n <= limit or not levels:
        return [(span[0], span[1], n)]
    out: list[tuple[int, int, int]] = []
    parts = _spans(text, levels[0], *span)
    if len(parts) <= 1 and len(levels) > 1:
        return _pieces(text, span, count, limit, levels[1:])
    if len(parts) <= 1:  # one unbreakable word run: cut by characters
        a, b = span
        step = max(1, (b - a) * limit // max(n, 1))
        return [(i, min(i + step, b), count(text[i:min(i + step, b)])) for i in range(a, b, step)]
    for part in parts:
        out.extend(_pieces(text, part, count, limit, levels[1:]))
    return out


def chunk_pages(pages: Iterable[Page], count: CountTokens, *, target: int = TARGET_TOKENS,
                overlap: int = OVERLAP_TOKENS) -> list[Chunk]:
    """The chunks of a document's pages. `count(text)` is the embedder's token count of a text
    (without its special tokens)."""
    chunks: list[Chunk] = []
    for page in pages:
        text = page.text
        for section in _sections(text):
            pieces = _pieces(text, section, count, target, (_PARAGRAPH, _SENTENCE, _WORD))
            # the last piece's closing sentences start the next chunk (the overlap)
            current: list[tuple[int, int, int]] = []
            used = 0

            def flush() -> None:
                a, b = current[0][0], current[-1][1]
                chunks.append(Chunk(len(chunks), page.number, a, b, text[a:b].strip(), used))

            for piece in pieces:
                if current and used + piece[2] > target:
                    flush()
                    tail: list[tuple[int, int, int]] = []
                    kept = 0
                    last = current[-1]
                    for a, b in reversed(_spans(text, _SENTENCE, last[0], last[1]) if overlap else []):
                        n = count(text[a:b])
                        if kept + n > overlap or kept + n + piece[2] > target:
                            break
                        tail.insert(0, (a, b, n))
                        kept += n
                    current, used = tail, kept
                current.append(piece)
                used += piece[2]
            if current:
                flush()
    return chunks
