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

import re
from functools import lru_cache
from dataclasses import dataclass
from typing import Callable

from .base import CallsRead, ReplyParser
from .call_parsers import (
    json_list_after,
    parse_deepseek,
    parse_forced,
    parse_glm,
    parse_hermes,
    parse_kimi,
    parse_llama3,
    parse_mistral,
    parse_qwen3_coder,
)


@dataclass(frozen=True)
class ToolFormat:
    """One family's format: where a tool-call section starts, and how it parses."""

    name: str
    starts: tuple[str, ...]
    parse_fn: Callable[[str, bool], CallsRead]
    bare_json: bool = False  # a reply that opens with `{` may be a call (Llama 3.x)
    id_style: str = "openai"  # the ids of calls the model gives none (`base.new_call_id`)

    def parse(self, section: str, final: bool) -> CallsRead:
        return self.parse_fn(section, final)


FORMATS: dict[str, ToolFormat] = {f.name: f for f in (
    ToolFormat("hermes", ("<tool_call>",), parse_hermes),
    ToolFormat("qwen3_coder", ("<tool_call>",), parse_qwen3_coder),
    ToolFormat("glm", ("<tool_call>",), parse_glm),
    ToolFormat("llama3", ("<|python_tag|>",), parse_llama3, bare_json=True),
    ToolFormat("mistral_nemo", ("[TOOL_CALLS]",), json_list_after("[TOOL_CALLS]"), id_style="mistral"),
    ToolFormat("mistral", ("[TOOL_CALLS]",), parse_mistral, id_style="mistral"),
    ToolFormat("deepseek", ("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>"), parse_deepseek),
    ToolFormat("kimi", ("<|tool_calls_section_begin|>", "<|tool_call_begin|>"), parse_kimi),
    ToolFormat("command_r7b", ("<|START_ACTION|>",),
               json_list_after("<|START_ACTION|>", "<|END_ACTION|>", "tool_name", ("parameters",))),
    ToolFormat("json_list", ("<|tool_call|>",), json_list_after("<|tool_call|>", "<|/tool_call|>")),
    ToolFormat("firefunction", ("functools[",), json_list_after("functools")),
    ToolFormat("forced", (), parse_forced, bare_json=True),
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
