"""How each family's tool-call section reads (as llama.cpp's common/chat parsers read them):
the calls that are complete, and the call being written — its name once known and its
arguments so far, so they stream as the model writes them (OpenAI's `function.arguments`
fragments). The finished call's arguments always begin with what was streamed: for a JSON
format they are the model's own text of the arguments value, for an XML-parameter format
(Qwen3-Coder, GLM) the parameters so far written as JSON, less the closing brace."""

from __future__ import annotations

import json
import re
from typing import Any, Callable

from .base import CallsRead, OpenCall, RawCall
from .json_scan import (
    ObjectScan,
    args_prefix,
    args_text,
    json_span,
    scan_items,
    scan_object,
    skip_ws,
)

ARGS_KEYS = ("arguments", "parameters")
NOT_CALLS = CallsRead(None)


def _not_calls(final: bool, calls: list[RawCall]) -> CallsRead:
    """What an unreadable part means: no calls at the end; the calls so far while streaming."""
    return NOT_CALLS if final else CallsRead(calls)


# -- a call as a JSON object ---------------------------------------------------------------------

def _given_id(scan: ObjectScan) -> str | None:
    """The call id the model wrote ("id", Command R7B's "tool_call_id"), if it did yet."""
    given = (scan.members.get("id") or scan.members.get("tool_call_id") or (None,))[0]
    return str(given) if given not in (None, "") else None


def _scan_call(text: str, scan: ObjectScan, name_key: str, args_keys: tuple[str, ...]) -> RawCall | None:
    """The call in an object's complete members ({"name", "arguments"} or OpenAI's nested
    {"function": {...}}); None when it has no name."""
    m = scan.members
    given_id = _given_id(scan)
    if "function" in m and isinstance(m["function"][0], dict):
        inner = scan_object(text, m["function"][1])
        call = _scan_call(text, inner, name_key, args_keys) if inner else None
        return None if call is None else (call[0], call[1], given_id or call[2])
    name = m.get(name_key)
    if name is None or not isinstance(name[0], str) or not name[0]:
        return None
    args = next((m[k] for k in args_keys if k in m), None)
    arguments = "{}" if args is None else args_text(text, args[1], args[2], args[0])
    return name[0], arguments, given_id


def object_call(text: str, at: int, name_key: str = "name",
                args_keys: tuple[str, ...] = ARGS_KEYS) -> tuple[RawCall | None, int] | None:
    """(the call, the object's end) of the complete object at `at`; None while it is unclosed
    (or not an object). The call is None when the object is no call."""
    scan = scan_object(text, at)
    if scan is None or scan.end is None:
        return None
    return _scan_call(text, scan, name_key, args_keys), scan.end


def object_open_call(text: str, at: int, name_key: str = "name",
                     args_keys: tuple[str, ...] = ARGS_KEYS) -> OpenCall | None:
    """(name, arguments so far) of a call object still being written, once its name is complete
    and its arguments member has begun; None before that (or when it is no call)."""
    scan = scan_object(text, at)
    if scan is None or scan.end is not None:
        return None
    m = scan.members
    if scan.open_key == "function":
        inner = object_open_call(text, scan.open_at, name_key, args_keys)
        return None if inner is None else (inner[0], inner[1], _given_id(scan) or inner[2])
    if "function" in m:  # the nested call is written; the outer object goes on (an "id")
        call = _scan_call(text, scan, name_key, args_keys)
        return None if call is None else (call[0], call[1] if call[1][:1] in "{[" else "", call[2])
    name = m.get(name_key)
    if name is None or not isinstance(name[0], str) or not name[0]:
        return None
    done = next((m[k] for k in args_keys if k in m), None)
    if done is not None:
        return name[0], text[done[1]:done[2]] if isinstance(done[0], (dict, list)) else "", _given_id(scan)
    if scan.open_key in args_keys:
        return name[0], args_prefix(text, scan.open_at) or "", _given_id(scan)
    return None


def _list_or_object(text: str, at: int, final: bool, name_key: str = "name",
                    args_keys: tuple[str, ...] = ARGS_KEYS) -> tuple[CallsRead, int | None]:
    """Calls written as one object or a list of them at `at`: what is read, and where the
    object or list ends (None while it is open)."""
    i = skip_ws(text, at)
    if i < len(text) and text[i] == "{":
        whole = object_call(text, i, name_key, args_keys)
        if whole is None:
            if final:
                return NOT_CALLS, None
            return CallsRead([], object_open_call(text, i, name_key, args_keys)), None
        call, end = whole
        return (CallsRead([call]) if call else NOT_CALLS), end
    items = scan_items(text, i)
    if items is None or (final and items[2] is None):
        return NOT_CALLS, None
    starts, open_at, end = items
    calls: list[RawCall] = []
    for start in starts:
        found = object_call(text, start, name_key, args_keys)
        if found is None or found[0] is None:
            return NOT_CALLS, None
        calls.append(found[0])
    opened = None if open_at is None else object_open_call(text, open_at, name_key, args_keys)
    return CallsRead(calls, opened), end


# -- the formats ---------------------------------------------------------------------------------

def _blocks(section: str, open_: str, close: str) -> tuple[list[str], str | None]:
    """The closed bodies between `open_` ... `close`, and the body of an unclosed last one."""
    out, at = [], 0
    while True:
        start = section.find(open_, at)
        if start < 0:
            return out, None
        end = section.find(close, start + len(open_))
        if end < 0:
            return out, section[start + len(open_):]
        out.append(section[start + len(open_):end])
        at = end + len(close)


def parse_hermes(section: str, final: bool) -> CallsRead:
    closed, rest = _blocks(section, "<tool_call>", "</tool_call>")
    bodies = closed + ([rest] if final and rest is not None else [])
    calls: list[RawCall] = []
    for body in bodies:
        found = object_call(body, 0)
        if found is None or found[0] is None:
            return _not_calls(final, calls)
        calls.append(found[0])
    opened = None if final or rest is None else object_open_call(rest, 0)
    return CallsRead(calls, opened)


_FUNCTION = re.compile(r"<function=([^>\n]+)>(.*?)(?:</function>|$)", re.S)
_PARAMETER = re.compile(r"<parameter=([^>\n]+)>(.*?)</parameter>", re.S)
_GLM_ARG = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.S)


def _value(text: str) -> Any:
    """An XML-style parameter value: JSON when it is, else the text."""
    text = text.strip("\n")
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _params_json(pairs: list[tuple[str, str]], closed: bool) -> str:
    """Parameters as JSON, the first of a repeated key kept (so a longer list only appends);
    less the closing brace while the call is open."""
    params: dict[str, Any] = {}
    for k, v in pairs:
        params.setdefault(k.strip(), _value(v))
    text = json.dumps(params, ensure_ascii=False)
    return text if closed else text[:-1]


def parse_qwen3_coder(section: str, final: bool) -> CallsRead:
    closed, rest = _blocks(section, "<tool_call>", "</tool_call>")
    calls: list[RawCall] = []
    for body in closed + ([rest] if final and rest is not None else []):
        m = _FUNCTION.search(body)
        if m is None:
            return _not_calls(final, calls)
        calls.append((m.group(1).strip(), _params_json(_PARAMETER.findall(m.group(2)), True), None))
    opened = None
    if not final and rest is not None and (m := _FUNCTION.search(rest)) is not None:
        opened = (m.group(1).strip(), _params_json(_PARAMETER.findall(m.group(2)), False), None)
    return CallsRead(calls, opened)


def parse_glm(section: str, final: bool) -> CallsRead:
    closed, rest = _blocks(section, "<tool_call>", "</tool_call>")
    calls: list[RawCall] = []
    for body in closed + ([rest] if final and rest is not None else []):
        name = body.split("<arg_key>", 1)[0].strip()
        if not name:
            return _not_calls(final, calls)
        calls.append((name, _params_json(_GLM_ARG.findall(body), True), None))
    opened = None
    if not final and rest is not None and "<arg_key>" in rest:  # the name ends where the first key opens
        name = rest.split("<arg_key>", 1)[0].strip()
        opened = (name, _params_json(_GLM_ARG.findall(rest), False), None) if name else None
    return CallsRead(calls, opened)


def parse_llama3(section: str, final: bool) -> CallsRead:
    """Successive call objects (Llama 3.x may write several), optionally after <|python_tag|>."""
    text = section.replace("<|python_tag|>", "", 1)
    calls: list[RawCall] = []
    at = 0
    while True:
        while at < len(text) and text[at] in " \t\r\n;":
            at += 1
        if at >= len(text):
            return CallsRead(calls)
        found = object_call(text, at)
        if found is None:
            if final or scan_object(text, at) is None:
                return NOT_CALLS
            return CallsRead(calls, object_open_call(text, at))
        if found[0] is None:
            return NOT_CALLS
        calls.append(found[0])
        at = found[1]


def json_list_after(marker: str, end: str | None = None, name_key: str = "name",
                    args_keys: tuple[str, ...] = ARGS_KEYS) -> Callable[[str, bool], CallsRead]:
    """A format whose section is `marker` then a JSON list of calls (or one call object)."""

    def parse(section: str, final: bool) -> CallsRead:
        calls: list[RawCall] = []
        at = 0
        while (start := section.find(marker, at)) >= 0:
            read, stop = _list_or_object(section, start + len(marker), final, name_key, args_keys)
            if read.calls is None:
                return _not_calls(final, calls)
            calls += read.calls
            if stop is None:
                return CallsRead(calls, read.open)
            at = stop
            if end is not None and section.startswith(end, skip_ws(section, at)):
                at = skip_ws(section, at) + len(end)
        return CallsRead(calls)

    return parse


def parse_mistral(section: str, final: bool) -> CallsRead:
    """[TOOL_CALLS]NAME[ARGS]{..} (a [CALL_ID] may follow the name)."""
    calls: list[RawCall] = []
    bodies = section.split("[TOOL_CALLS]")[1:]
    for i, body in enumerate(bodies):
        name, sep, rest = body.partition("[ARGS]")
        name = name.split("[CALL_ID]")[0].strip()
        found = json_span(rest, 0) if sep else None
        if found is None or not name:
            if final or i < len(bodies) - 1:
                return _not_calls(final, calls)
            return CallsRead(calls, (name, args_prefix(rest, 0) or "", None) if sep and name else None)
        calls.append((name, args_text(rest, *found[1:], found[0]), None))
    return CallsRead(calls)


_DS_BEGIN, _DS_END = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>"
_DS_HEAD = re.compile(r"(?:(\w+)<｜tool▁sep｜>([^\n<]+)\n```(?:json)?\n|([^<\n]+?)<｜tool▁sep｜>)")


def _deepseek_call(body: str, closed: bool) -> tuple[RawCall | None, OpenCall | None]:
    """One call's body (after the begin marker): R1's `function<sep>NAME` + a json fence, or
    V3.1's `NAME<sep>{..}`."""
    head = _DS_HEAD.match(body)
    if head is None:
        return None, None
    name = (head.group(2) or head.group(3) or "").strip()
    if not name:
        return None, None
    rest = body[head.end():]
    if not closed:
        # V3.1's head also matches R1's `function<sep>` before its name's line ends: only its
        # arguments, once begun, say which it is.
        if head.group(3) and rest.lstrip()[:1] not in ("{", "["):
            return None, None
        return None, (name, args_prefix(rest, 0) or "", None)
    if head.group(2):
        rest = rest.rsplit("```", 1)[0] if "```" in rest else rest
    found = json_span(rest, 0)
    return (None if found is None else (name, args_text(rest, *found[1:], found[0]), None)), None


def parse_deepseek(section: str, final: bool) -> CallsRead:
    closed, rest = _blocks(section, _DS_BEGIN, _DS_END)
    calls: list[RawCall] = []
    for body in closed:
        call, _ = _deepseek_call(body, True)
        if call is None:
            return NOT_CALLS
        calls.append(call)
    if final:
        return CallsRead(calls) if calls else NOT_CALLS
    return CallsRead(calls, None if rest is None else _deepseek_call(rest, False)[1])


_KIMI_HEAD = re.compile(r"\s*(?:functions\.)?([^:<\s]+)(?::(\d+))?\s*<\|tool_call_argument_begin\|>")


def parse_kimi(section: str, final: bool) -> CallsRead:
    closed, rest = _blocks(section, "<|tool_call_begin|>", "<|tool_call_end|>")
    calls: list[RawCall] = []
    for body in closed:
        head = _KIMI_HEAD.match(body)
        found = None if head is None else json_span(body, head.end())
        if head is None or found is None:
            return NOT_CALLS
        calls.append((head.group(1), args_text(body, *found[1:], found[0]), None))
    if final:
        return CallsRead(calls) if calls else NOT_CALLS
    head = None if rest is None else _KIMI_HEAD.match(rest)
    opened = None if head is None or rest is None else (head.group(1), args_prefix(rest, head.end()) or "", None)
    return CallsRead(calls, opened)


def parse_forced(section: str, final: bool) -> CallsRead:
    """The call a grammar forces: one object or a list of them."""
    read, _ = _list_or_object(section, 0, final)
    return read
