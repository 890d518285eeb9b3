"""Each family's tool-call format and reasoning markers, as llama.cpp's common/chat parsers read
them, and which a chat template uses (`detect_format`, from the template's source, in the order
llama.cpp's `common_chat_templates_apply` checks them: the most specific markers first).

| format | calls look like | families |
| --- | --- | --- |
| hermes | `<tool_call>{"name": .., "arguments": {..}}</tool_call>` | Qwen2.5, Qwen3, Hermes 2 Pro / 3, SmolLM3 |
| qwen3_coder | `<tool_call><function=NAME><parameter=K>V</parameter></function></tool_call>` | Qwen3-Coder, Nemotron 3 |
| glm | `<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>` | GLM 4.5-4.7 |
| llama3 | `{"name": .., "parameters": {..}}` (optionally after `<\\|python_tag\\|>`) | Llama 3.1-3.3 |
| mistral_nemo | `[TOOL_CALLS][{"name": .., "arguments": {..}, "id": ..}]` | Mistral Nemo, Mistral 7B v0.3 |
| mistral | `[TOOL_CALLS]NAME[ARGS]{..}` | Magistral, Devstral, Mistral Small 3.2, Ministral 3 |
| deepseek | `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME` + a json fence | DeepSeek R1 (and V3.1's NAME<｜tool▁sep｜>{..}) |
| kimi | `<\\|tool_call_begin\\|>functions.NAME:0<\\|tool_call_argument_begin\\|>{..}` | Kimi K2 |
| command_r7b | `<\\|START_ACTION\\|>[{"tool_name": .., "parameters": {..}}]<\\|END_ACTION\\|>` | Command R7B |
| json_list | `<\\|tool_call\\|>[{"name": .., "arguments": {..}}]` | Granite 3.x, Phi-4-mini |
| firefunction | ` functools[{"name": .., "arguments": {..}}]` | FireFunction v2 |
| forced | `{"name": .., "arguments": {..}}` or a list of them | a call the grammar forces (any model) |
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from dataclasses import dataclass
from typing import Any, Callable

from .base import RawCall, ReplyParser

_DECODER = json.JSONDecoder()


def _json_at(text: str, at: int) -> tuple[Any, int] | None:
    """The JSON value starting at `at` (after whitespace) and where it ends; None if incomplete."""
    while at < len(text) and text[at] in " \t\r\n":
        at += 1
    try:
        return _DECODER.raw_decode(text, at)
    except json.JSONDecodeError:
        return None


def _args(value: Any) -> str:
    """Arguments as JSON text (a string given by the model is kept when it is JSON)."""
    if isinstance(value, str):
        try:
            json.loads(value)
            return value
        except json.JSONDecodeError:
            return json.dumps(value, ensure_ascii=False)
    return json.dumps({} if value is None else value, ensure_ascii=False)


def _call(obj: Any, name_key: str = "name", args_keys: tuple[str, ...] = ("arguments", "parameters")
          ) -> RawCall | None:
    """A call from a JSON object ({"name", "arguments"} or OpenAI's {"function": {...}})."""
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("function"), dict):
        obj = {**obj["function"], "id": obj.get("id")}
    name = obj.get(name_key)
    if not isinstance(name, str) or not name:
        return None
    args = next((obj[k] for k in args_keys if k in obj), {})
    given = obj.get("id") or obj.get("tool_call_id")
    return name, _args(args), str(given) if given not in (None, "") else None


def _value(text: str) -> Any:
    """An XML-style parameter value: JSON when it is, else the text."""
    text = text.strip("\n")
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


@dataclass(frozen=True)
class ToolFormat:
    """One family's format: where a tool-call section starts, and how it parses."""

    name: str
    starts: tuple[str, ...]
    parse_fn: Callable[[str, bool], "list[RawCall] | None"]
    bare_json: bool = False  # a reply that opens with `{` may be a call (Llama 3.x)
    id_style: str = "openai"  # the ids of calls the model gives none (`base.new_call_id`)

    def parse(self, section: str, final: bool) -> list[RawCall] | None:
        return self.parse_fn(section, final)


def _blocks(section: str, open_: str, close: str, final: bool) -> list[str]:
    """The bodies between `open_` ... `close`; an unclosed last body only when `final`."""
    out, at = [], 0
    while True:
        start = section.find(open_, at)
        if start < 0:
            return out
        end = section.find(close, start + len(open_))
        if end < 0:
            if final:
                out.append(section[start + len(open_):])
            return out
        out.append(section[start + len(open_):end])
        at = end + len(close)


def _parse_hermes(section: str, final: bool) -> list[RawCall] | None:
    calls = []
    for body in _blocks(section, "<tool_call>", "</tool_call>", final):
        found = _json_at(body, 0)
        call = _call(found[0]) if found else None
        if call is None:
            return None if final else calls
        calls.append(call)
    return calls


_FUNCTION = re.compile(r"<function=([^>\n]+)>(.*?)(?:</function>|$)", re.S)
_PARAMETER = re.compile(r"<parameter=([^>\n]+)>(.*?)</parameter>", re.S)


def _parse_qwen3_coder(section: str, final: bool) -> list[RawCall] | None:
    calls: list[RawCall] = []
    for body in _blocks(section, "<tool_call>", "</tool_call>", final):
        m = _FUNCTION.search(body)
        if m is None:
            return None if final else calls
        params = {k.strip(): _value(v) for k, v in _PARAMETER.findall(m.group(2))}
        calls.append((m.group(1).strip(), json.dumps(params, ensure_ascii=False), None))
    return calls


_GLM_ARG = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.S)


def _parse_glm(section: str, final: bool) -> list[RawCall] | None:
    calls: list[RawCall] = []
    for body in _blocks(section, "<tool_call>", "</tool_call>", final):
        name = body.split("<arg_key>", 1)[0].strip()
        if not name:
            return None if final else calls
        params = {k.strip(): _value(v) for k, v in _GLM_ARG.findall(body)}
        calls.append((name, json.dumps(params, ensure_ascii=False), None))
    return calls


def _json_sequence(text: str, final: bool, separators: str = " \t\r\n;") -> list[Any] | None:
    """Successive JSON values (Llama 3.x may write several calls one after another)."""
    values, at = [], 0
    while True:
        while at < len(text) and text[at] in separators:
            at += 1
        if at >= len(text):
            return values
        found = _json_at(text, at)
        if found is None:
            return None if final else values
        values.append(found[0])
        at = found[1]


def _parse_llama3(section: str, final: bool) -> list[RawCall] | None:
    text = section.replace("<|python_tag|>", "", 1)
    values = _json_sequence(text, final)
    if values is None:
        return None
    calls = [_call(v) for v in values]
    if any(c is None for c in calls):
        return None
    return [c for c in calls if c is not None]


def _json_list_after(marker: str, end: str | None = None, name_key: str = "name",
                     args_keys: tuple[str, ...] = ("arguments", "parameters")
                     ) -> Callable[[str, bool], "list[RawCall] | None"]:
    """A format whose section is `marker` then a JSON list of calls (or one call object)."""

    def parse(section: str, final: bool) -> list[RawCall] | None:
        calls: list[RawCall] = []
        at = 0
        while (start := section.find(marker, at)) >= 0:
            found = _json_at(section, start + len(marker))
            if found is None:
                return None if final else calls
            items = found[0] if isinstance(found[0], list) else [found[0]]
            for item in items:
                call = _call(item, name_key, args_keys)
                if call is None:
                    return None
                calls.append(call)
            at = found[1]
            if end is not None and section.startswith(end, at):
                at += len(end)
        return calls

    return parse


def _parse_mistral(section: str, final: bool) -> list[RawCall] | None:
    calls: list[RawCall] = []
    for body in section.split("[TOOL_CALLS]")[1:]:
        name, sep, rest = body.partition("[ARGS]")
        if not sep:
            return None if final else calls
        name = name.split("[CALL_ID]")[0].strip()
        found = _json_at(rest, 0)
        if found is None or not name:
            return None if final else calls
        calls.append((name, _args(found[0]), None))
    return calls


_DS_CALL = re.compile(r"<｜tool▁call▁begin｜>(?:(\w+)<｜tool▁sep｜>([^\n<]+)\n```(?:json)?\n(.*?)\n```"
                      r"|([^<\n]+?)<｜tool▁sep｜>(.*?))<｜tool▁call▁end｜>", re.S)


def _parse_deepseek(section: str, final: bool) -> list[RawCall] | None:
    calls: list[RawCall] = []
    for m in _DS_CALL.finditer(section):
        name = (m.group(2) or m.group(4) or "").strip()
        found = _json_at(m.group(3) if m.group(2) else m.group(5), 0)
        if not name or found is None:
            return None
        calls.append((name, _args(found[0]), None))
    return calls if calls or not final else None


_KIMI = re.compile(r"<\|tool_call_begin\|>\s*(?:functions\.)?([^:<\s]+)(?::(\d+))?\s*"
                   r"<\|tool_call_argument_begin\|>(.*?)<\|tool_call_end\|>", re.S)


def _parse_kimi(section: str, final: bool) -> list[RawCall] | None:
    calls: list[RawCall] = []
    for m in _KIMI.finditer(section):
        found = _json_at(m.group(3), 0)
        if found is None:
            return None
        calls.append((m.group(1), _args(found[0]), None))
    return calls if calls or not final else None


def _parse_forced(section: str, final: bool) -> list[RawCall] | None:
    found = _json_at(section, 0)
    if found is None:
        return None if final else []
    items = found[0] if isinstance(found[0], list) else [found[0]]
    calls = [_call(i) for i in items]
    return None if any(c is None for c in calls) else [c for c in calls if c is not None]


FORMATS: dict[str, ToolFormat] = {f.name: f for f in (
    ToolFormat("hermes", ("<tool_call>",), _parse_hermes),
    ToolFormat("qwen3_coder", ("<tool_call>",), _parse_qwen3_coder),
    ToolFormat("glm", ("<tool_call>",), _parse_glm),
    ToolFormat("llama3", ("<|python_tag|>",), _parse_llama3, bare_json=True),
    ToolFormat("mistral_nemo", ("[TOOL_CALLS]",), _json_list_after("[TOOL_CALLS]"), id_style="mistral"),
    ToolFormat("mistral", ("[TOOL_CALLS]",), _parse_mistral, id_style="mistral"),
    ToolFormat("deepseek", ("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>"), _parse_deepseek),
    ToolFormat("kimi", ("<|tool_calls_section_begin|>", "<|tool_call_begin|>"), _parse_kimi),
    ToolFormat("command_r7b", ("<|START_ACTION|>",),
               _json_list_after("<|START_ACTION|>", "<|END_ACTION|>", "tool_name", ("parameters",))),
    ToolFormat("json_list", ("<|tool_call|>",), _json_list_after("<|tool_call|>", "<|/tool_call|>")),
    ToolFormat("firefunction", ("functools[",),
               lambda s, final: _json_list_after("functools")(s, final)),
    ToolFormat("forced", (), _parse_forced, bare_json=True),
)}


def detect_format(source: str) -> ToolFormat | None:
    """The tool-call format a chat template's source writes, or None (no tool calls in it)."""
    checks: list[tuple[bool, str]] = [
        ("<|tool_calls_section_begin|>" in source, "kimi"),
        ("<arg_key>" in source, "glm"),
        ("<function=" in source and "<parameter=" in source, "qwen3_coder"),
        ("<|START_ACTION|>" in source, "command_r7b"),
        ("[TOOL_CALLS]" in source and "[ARGS]" in source, "mistral"),
        ("[TOOL_CALLS]" in source, "mistral_nemo"),
        ("tool▁call▁begin" in source, "deepseek"),
        ("functools[" in source, "firefunction"),
        ("<|tool_call|>" in source, "json_list"),
        ("<tool_call>" in source, "hermes"),
        ("<|python_tag|>" in source or ("ipython" in source and "parameters" in source), "llama3"),
    ]
    return next((FORMATS[name] for hit, name in checks if hit), None)


@dataclass(frozen=True)
class Reasoning:
    """A family's reasoning block markers."""

    open: str
    close: str


_REASONING = (
    ("<|START_THINKING|>", Reasoning("<|START_THINKING|>", "<|END_THINKING|>")),  # Command R7B
    ("[THINK]", Reasoning("[THINK]", "[/THINK]")),  # Magistral, Ministral 3 reasoning
    ("<seed:think>", Reasoning("<seed:think>", "</seed:think>")),  # Seed-OSS
)
THINK = Reasoning("<think>", "</think>")  # Qwen3, QwQ, DeepSeek R1, SmolLM3, Granite 3.3, GLM


def detect_reasoning(source: str | None) -> Reasoning:
    """The reasoning markers a template's family uses (`<think>` unless it names others)."""
    for marker, markers in _REASONING:
        if source and marker in source:
            return markers
    return THINK


# A template's thinking switch: the variable it reads (Qwen3, SmolLM3, GLM, Command R7B and
# llama.cpp's DeepSeek R1 templates: `enable_thinking`; Granite 3.3: `thinking`).
_SWITCHES = (("enable_thinking", re.compile(r"\benable_thinking\b")),
             ("thinking", re.compile(r"\{%-?\s*(?:el)?if\s+(?:not\s+)?thinking\b")))


@lru_cache(maxsize=8)
def thinking_switch(source: str | None) -> tuple[str, bool] | None:
    """(the template variable that turns reasoning on or off, its default) for a template that
    has one; None else (the model always or never reasons). The default is what the template
    does with the variable unset: Qwen3 reasons unless told not to, llama.cpp's DeepSeek R1
    template and Granite 3.3 only when told to (found by rendering a one-message prompt)."""
    from ...model.text.chat_template import ChatTemplate, TemplateError

    for name, pattern in _SWITCHES:
        if source and pattern.search(source):
            try:
                template = ChatTemplate(source)
                probe = [{"role": "user", "content": "Hi"}]
                unset = template.render(probe, True)
                default = unset == template.render(probe, True, **{name: True})
            except TemplateError:
                default = True
            return name, default
    return None


def forced_call_format() -> ToolFormat:
    """The format of a call the grammar forces (`tool_choice` required / named)."""
    return FORMATS["forced"]


def parser_for(source: str | None, prompt_text: str, *, tools: bool, forced: bool = False) -> ReplyParser:
    """The parser of one reply: the template's tool format (when the request has tools), its
    reasoning markers, and whether the prompt already opened the reasoning block (DeepSeek R1's
    generation prompt ends with `<think>`)."""
    fmt = forced_call_format() if forced else (detect_format(source or "") if tools else None)
    markers = detect_reasoning(source)
    tail = prompt_text.rstrip()
    opened = tail.endswith(markers.open)
    return ReplyParser(fmt, (markers.open, markers.close), thinking=opened)
