"""Code colours: Pygments tokens for a block (cached by language and code), and a Qt character
format per token type in a light or a dark Pygments style, picked from the palette.

The lexer is the fence's language, or a guess from the code when the fence names none (a
guess that Pygments is not sure of is plain text: no colours beat wrong ones).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from functools import lru_cache
from typing import Iterator

from pygments.lexer import Lexer
from pygments.lexers import get_lexer_by_name, guess_lexer
from pygments.lexers.special import TextLexer
from pygments.styles import get_style_by_name
from pygments.token import Token, _TokenType
from pygments.util import ClassNotFound
from PySide6.QtGui import QColor, QFont, QTextCharFormat

from ..services.ahead import AheadWorker

LIGHT_STYLE = "default"
DARK_STYLE = "github-dark"
_GUESS_CHARS = 4000  # guessing reads this much of a block (guess_lexer tries every lexer)
_CACHE_BLOCKS = 256

Run = tuple[_TokenType, str]


@lru_cache(maxsize=64)
def lexer_for(lang: str) -> Lexer:
    """The lexer of a fence's language word ("py", "bash", "C++"...); plain text when unknown."""
    try:
        return get_lexer_by_name(lang.lower(), stripnl=False, ensurenl=False) if lang else TextLexer()
    except ClassNotFound:
        return TextLexer()


_guesses: OrderedDict[str, str] = OrderedDict()  # the GUI and the lexer worker thread
_guesses_lock = threading.Lock()


def guess_language(code: str) -> str:
    """A language name for code whose fence names none ("" when Pygments is not sure); cached
    (Pygments tries every lexer: ~5 ms a block, ~0.7 s the first time, as it imports them)."""
    sample = code[:_GUESS_CHARS]
    with _guesses_lock:
        known = _guesses.get(sample)
    if known is None:
        known = _guess(sample)
        with _guesses_lock:
            _guesses[sample] = known
            if len(_guesses) > _CACHE_BLOCKS:
                _guesses.popitem(last=False)
    return known


def guessed(code: str) -> bool:
    """True when `guess_language(code)` is cached."""
    with _guesses_lock:
        return code[:_GUESS_CHARS] in _guesses


def _guess(sample: str) -> str:
    if len(sample.strip()) < 12:
        return ""
    try:
        lexer = guess_lexer(sample)
    except ClassNotFound:
        return ""
    if isinstance(lexer, TextLexer) or lexer.analyse_text(sample) < 0.3:
        return ""
    return (lexer.aliases or [lexer.name])[0]


def language_label(lang: str) -> str:
    """What the block's header says: the lexer's name ("Python", "Bash"), or the word given."""
    lexer = lexer_for(lang)
    return lang if isinstance(lexer, TextLexer) else lexer.name


class _TokenCache:
    """(language, code) -> token runs; least recently used blocks go first. Thread-safe: a
    streaming reply's finished blocks are lexed ahead on a worker thread (`prefetch`)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.items: OrderedDict[tuple[str, str], list[Run]] = OrderedDict()
        self.misses = 0
        self.prefetched = 0
        self._lock = threading.Lock()
        self._worker = AheadWorker("lexer")

    def get(self, lang: str, code: str) -> list[Run]:
        key = (lang, code)
        with self._lock:
            runs = self.items.get(key)
            if runs is not None:
                self.items.move_to_end(key)
                return runs
            self.misses += 1
        runs = list(merge_runs(lexer_for(lang).get_tokens_unprocessed(code)))
        self.put(lang, code, runs)
        return runs

    def has(self, lang: str, code: str) -> bool:
        """True when the block's runs are cached."""
        with self._lock:
            return (lang, code) in self.items

    def put(self, lang: str, code: str, runs: list[Run]) -> None:
        """Keep a block's runs (lexed elsewhere, e.g. a slice at a time)."""
        with self._lock:
            self.items[(lang, code)] = runs
            if len(self.items) > self.size:
                self.items.popitem(last=False)

    def prefetch(self, lang: str, code: str) -> None:
        """Lex a block on a worker thread (Pygments is pure Python: the GUI thread keeps
        painting), for the reply's final rendering to find its runs cached."""
        self._worker.submit((lang, code), lambda: self.has(lang, code), lambda: self._lex_ahead(lang, code))

    def prefetch_guess(self, code: str) -> None:
        """Guess a block's language and lex it, on the worker thread."""
        self._worker.submit(("?", code), lambda: guessed(code) and self.has(guess_language(code), code),
                            lambda: self._lex_ahead(guess_language(code), code))

    def _lex_ahead(self, lang: str, code: str) -> None:
        self.put(lang, code, list(merge_runs(lexer_for(lang).get_tokens_unprocessed(code))))
        with self._lock:
            self.prefetched += 1


def merge_runs(tokens: Iterator[tuple[int, _TokenType, str]]) -> Iterator[Run]:
    """Adjacent tokens of one type as one run (fewer inserts into the document)."""
    kind: _TokenType | None = None
    parts: list[str] = []
    for _, ttype, value in tokens:
        if ttype is not kind and parts:
            yield kind, "".join(parts)  # type: ignore[misc]
            parts = []
        kind = ttype
        parts.append(value)
    if parts:
        yield kind, "".join(parts)  # type: ignore[misc]


TOKENS = _TokenCache(_CACHE_BLOCKS)


def token_runs(lang: str, code: str) -> list[Run]:
    """The block's (token type, text) runs; "".join of the texts is `code`."""
    return TOKENS.get(lang, code)


def line_runs(lang: str, line: str) -> list[Run]:
    """One line's runs, not cached (a streaming line changes with every delta)."""
    return list(merge_runs(lexer_for(lang).get_tokens_unprocessed(line)))


@lru_cache(maxsize=4)
def _style_table(dark: bool) -> dict[_TokenType, dict]:
    style = get_style_by_name(DARK_STYLE if dark else LIGHT_STYLE)
    return {ttype: style.style_for_token(ttype) for ttype in style.styles}


_format_cache: dict[tuple[bool, _TokenType], QTextCharFormat] = {}


def token_format(ttype: _TokenType, dark: bool) -> QTextCharFormat:
    """The colour / weight / slant of a token type in the light or dark style (no font family:
    the caller merges it over its monospace format)."""
    key = (dark, ttype)
    fmt = _format_cache.get(key)
    if fmt is not None:
        return fmt
    table = _style_table(dark)
    t = ttype
    while t not in table and t is not Token:
        t = t.parent
    spec = table.get(t, {})
    fmt = QTextCharFormat()
    if spec.get("color"):
        fmt.setForeground(QColor("#" + spec["color"]))
    if spec.get("bold"):
        fmt.setFontWeight(QFont.Weight.Bold)
    if spec.get("italic"):
        fmt.setFontItalic(True)
    _format_cache[key] = fmt
    return fmt
