"""JSON read as far as it is written: where values start and end in the text, so a tool call's
arguments can go out as the model writes them (the raw text of the arguments value, which is
also what the finished call carries: every streamed piece is a prefix of it).

The C decoder (`json.JSONDecoder.raw_decode`) reads every complete value; only the structure
around the value being written (an object's members, a list's items) is walked here."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

_DECODER = json.JSONDecoder()
WHITESPACE = " \t\r\n"


def skip_ws(text: str, at: int) -> int:
    """The first position at or after `at` that is not JSON whitespace."""
    n = len(text)
    while at < n and text[at] in WHITESPACE:
        at += 1
    return at


def json_span(text: str, at: int) -> tuple[Any, int, int] | None:
    """(value, start, end) of the complete JSON value at `at` (after whitespace); None when it
    is incomplete or not JSON. A number that reaches the end of the text may still grow: None."""
    start = skip_ws(text, at)
    try:
        value, end = _DECODER.raw_decode(text, start)
    except json.JSONDecodeError:
        return None
    if end >= len(text) and isinstance(value, (int, float)) and not isinstance(value, bool):
        return None
    return value, start, end


def args_text(text: str, start: int, end: int, value: Any) -> str:
    """A call's arguments as JSON text: the model's own text for an object or a list, the string
    it gave when that is JSON, else the value written as JSON."""
    if isinstance(value, (dict, list)):
        return text[start:end]
    if isinstance(value, str):
        try:
            json.loads(value)
            return value
        except json.JSONDecodeError:
            return json.dumps(value, ensure_ascii=False)
    return json.dumps({} if value is None else value, ensure_ascii=False)


def args_prefix(text: str, at: int) -> str | None:
    """The arguments written so far from `at`: the text of an object or list being written (all
    of it, once closed), None for anything else (a string or a scalar goes out when complete)."""
    start = skip_ws(text, at)
    if start >= len(text) or text[start] not in "{[":
        return None
    span = json_span(text, start)
    return text[start:span[2]] if span else text[start:]


@dataclass
class ObjectScan:
    """A JSON object as far as it is written: its complete members (value, start, end), the
    member being written (its key and where its value starts), and its end once closed."""

    members: dict[str, tuple[Any, int, int]] = field(default_factory=dict)
    open_key: str | None = None
    open_at: int = 0
    end: int | None = None


def scan_object(text: str, at: int) -> ObjectScan | None:
    """The object at `at` (after whitespace) as far as it goes; None when the text there is not
    an object (or breaks JSON where it is already written)."""
    i = skip_ws(text, at)
    n = len(text)
    if i >= n:
        return ObjectScan()
    if text[i] != "{":
        return None
    scan, i, first = ObjectScan(), i + 1, True
    while True:
        i = skip_ws(text, i)
        if i >= n:
            return scan
        if text[i] == "}":
            scan.end = i + 1
            return scan
        if not first:
            if text[i] != ",":
                return None
            i = skip_ws(text, i + 1)
            if i >= n:
                return scan
        if text[i] != '"':
            return None
        try:
            key, i = _DECODER.raw_decode(text, i)
        except json.JSONDecodeError:
            return scan  # the key is being written
        i = skip_ws(text, i)
        if i >= n:
            return scan
        if text[i] != ":":
            return None
        i = skip_ws(text, i + 1)
        span = json_span(text, i)
        if span is None:
            scan.open_key, scan.open_at = key, i
            return scan
        scan.members[key] = span
        i, first = span[2], False


def scan_items(text: str, at: int) -> tuple[list[int], int | None, int | None] | None:
    """A JSON list at `at` as far as it goes: (where each complete item starts, where the item
    being written starts or None, the list's end once closed or None); None when not a list."""
    i = skip_ws(text, at)
    n = len(text)
    if i >= n:
        return [], None, None
    if text[i] != "[":
        return None
    starts: list[int] = []
    i = i + 1
    while True:
        i = skip_ws(text, i)
        if i >= n:
            return starts, None, None
        if text[i] == "]":
            return starts, None, i + 1
        if starts:
            if text[i] != ",":
                return None
            i = skip_ws(text, i + 1)
            if i >= n:
                return starts, None, None
        span = json_span(text, i)
        if span is None:
            return starts, i, None
        starts.append(i)
        i = span[2]
