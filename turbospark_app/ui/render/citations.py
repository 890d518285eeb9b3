"""Where a reply cites its numbered sources: `[n]` (and `[1, 2]`, `[1][3]`), for the chips the
transcript draws over them. Pure (no Qt): offsets into the text it is given. A number that is
not one of the reply's sources (a list index, a year) is left alone, and so is anything in
inline code.
"""

from __future__ import annotations

import re

_GROUP = re.compile(r"\[(\d{1,3}(?:\s*,\s*\d{1,3})*)\]")
_CODE = re.compile(r"`+[^`]*`+")


def citation_spans(text: str, count: int) -> list[tuple[int, int, int]]:
    """(start, end, n) of each cited number in `text`, n in 1..count; `[1, 2]` gives one span
    per number (the digits), `[3]` one span over the brackets."""
    if count <= 0 or "[" not in text:
        return []
    code = [m.span() for m in _CODE.finditer(text)]
    out: list[tuple[int, int, int]] = []
    for m in _GROUP.finditer(text):
        if any(a <= m.start() < b for a, b in code):
            continue
        numbers = [(int(d.group()), d.start(), d.end()) for d in re.finditer(r"\d+", m.group(1))]
        if not all(1 <= n <= count for n, _, _ in numbers):
            continue
        base = m.start(1)
        if len(numbers) == 1:
            out.append((m.start(), m.end(), numbers[0][0]))
        else:
            out.extend((base + a, base + b, n) for n, a, b in numbers)
    return out
