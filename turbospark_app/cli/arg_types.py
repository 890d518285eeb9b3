"""argparse type functions (every flag is checked when parsed, with the accepted range in the
error) and the console's line reader: what the local and the remote `chat` share.

argparse turns an `ArgumentTypeError` into one line naming the flag:
`turbospark chat: error: argument --chunk-size: must be an integer >= 1 (got '0')`.
"""

from __future__ import annotations

import argparse
import math
from typing import Callable, Iterable


def _finite(text: str) -> float:
    value = float(text)  # ValueError -> the caller's message
    if not math.isfinite(value):
        raise ValueError(text)
    return value


def int_at_least(low: int) -> Callable[[str], int]:
    """An integer flag that must be >= low."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low} (got {text!r})")
        return value

    return parse


def int_in(low: int, high: int) -> Callable[[str], int]:
    """An integer flag in [low, high]."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be an integer in {low}..{high} (got {text!r})")
        return value

    return parse


def float_in(low: float, high: float | None = None, *, low_open: bool = False,
             high_open: bool = False) -> Callable[[str], float]:
    """A finite float flag in [low, high] (either end open when asked; high None = no bound)."""
    if high is None:
        accepted = f"a finite number {'>' if low_open else '>='} {low:g}"
    else:
        accepted = f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"

    def parse(text: str) -> float:
        try:
            value = _finite(text)
        except ValueError:
            value = None
        ok = value is not None and (value > low if low_open else value >= low)
        if ok and high is not None:
            ok = value < high if high_open else value <= high
        if not ok:
            raise argparse.ArgumentTypeError(f"must be {accepted} (got {text!r})")
        return float(value)

    return parse


def non_empty(text: str) -> str:
    """A text flag that must not be empty (e.g. a stop string)."""
    if not text:
        raise argparse.ArgumentTypeError("must be a non-empty text (got '')")
    return text


def read_lines(read: Callable[[str], str] = input) -> Iterable[str]:
    """The interactive chat's user lines, until end of input; `read(prompt)` reads one."""
    while True:
        try:
            yield read("> ")
        except EOFError:
            return
