"""Structured output for one request: a JSON-schema reply, tools, and which call is forced.

`plan_structured(request, template, tokenizer)` turns the API's `response_format`, `tools`,
`tool_choice` and `parallel_tool_calls` into what the turn needs: the template variables
(`tools`, rendered by the model's own template), the grammar (`chat.grammar`: the schema's, or a
forced call's JSON), and how the reply is read (`chat.formats`). Errors are `StructuredError`s
naming the request field (`param`) and, for a template without tool support, the template.

A forced call (`tool_choice` "required" or a named function) is constrained to
`{"name": <function>, "arguments": <its parameters' schema>}` (a list of them for "required"
with parallel calls): the grammar does the work, so it needs no template support; a template
that knows tools still gets them, one that does not gets a system line naming the function.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..engine.errors import EngineError
from .grammar import GrammarError, GrammarSpec, compile_json_schema, json_object_grammar, compile_grammar


class StructuredError(EngineError):
    """A request's structured-output fields cannot be served; `param` names the field."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class StructuredRequest:
    """The validated fields (server.params builds it)."""

    response_format: str = "text"  # "text" | "json_object" | "json_schema"
    schema: Any = None  # json_schema's schema
    tools: tuple[dict[str, Any], ...] = ()  # OpenAI tool objects (type function)
    tool_choice: str = "auto"  # "none" | "auto" | "required" | "function"
    forced_name: str | None = None  # tool_choice {"type": "function", "function": {"name"}}
    parallel: bool = True

    @property
    def forced(self) -> bool:
        return bool(self.tools) and self.tool_choice in ("required", "function")

    @property
    def active(self) -> bool:
        return self.response_format != "text" or bool(self.tools)


@dataclass(frozen=True)
class StructuredPlan:
    """What the turn needs: template variables, the grammar, how the reply is parsed."""

    template_vars: dict[str, Any] = field(default_factory=dict)
    constraint: GrammarSpec | None = None
    tools: bool = False  # parse the template family's tool calls (tool_choice auto)
    forced: bool = False  # parse the forced call's JSON
    system_note: str | None = None  # for a template without tools, naming the forced function


_PROBE_TOOL = {"type": "function", "function": {
    "name": "ts_probe_tool_7f3a", "description": "probe",
    "parameters": {"type": "object", "properties": {"x": {"type": "string"}}}}}


def supports_tools(template: Any) -> bool:
    """Whether the template renders a `tools` list (a probe tool's name shows in its output)."""
    cached = getattr(template, "_ts_supports_tools", None)
    if cached is not None:
        return bool(cached)
    try:
        text = template.render([{"role": "user", "content": "hi"}], True, tools=[_PROBE_TOOL])
        found = "ts_probe_tool_7f3a" in text
    except EngineError:
        found = False
    try:
        setattr(template, "_ts_supports_tools", found)
    except AttributeError:
        pass
    return found


def template_label(template: Any) -> str:
    """How errors name a template ("the model's chat template (SmolLM2 135M)")."""
    return str(getattr(template, "label", "the chat template"))


def _call_schema(tool: dict[str, Any]) -> dict[str, Any]:
    fn = tool["function"]
    params = fn.get("parameters") or {"type": "object"}
    return {"type": "object", "properties": {"name": {"const": fn["name"]}, "arguments": params},
            "required": ["name", "arguments"], "additionalProperties": False}


def _forced_schema(request: StructuredRequest) -> dict[str, Any]:
    tools = [t for t in request.tools if request.forced_name in (None, t["function"]["name"])]
    one = _call_schema(tools[0]) if len(tools) == 1 else {"anyOf": [_call_schema(t) for t in tools]}
    if request.tool_choice == "required" and request.parallel:
        return {"type": "array", "items": one, "minItems": 1}
    return one


def plan_structured(request: StructuredRequest, template: Any, tokenizer: Any) -> StructuredPlan:
    """The plan of one request (see the module docstring); StructuredError / GrammarError."""
    if request.tools and request.tool_choice != "none" and request.response_format != "text":
        raise StructuredError("response_format cannot be combined with tools unless tool_choice is 'none'",
                              "response_format")
    tools_ok = template is not None and bool(request.tools) and supports_tools(template)
    variables: dict[str, Any] = {"tools": list(request.tools)} if tools_ok else {}
    if request.tools and request.tool_choice == "auto" and not tools_ok:
        raise StructuredError(
            f"{template_label(template)} does not support tools (it never renders a `tools` list), so "
            "the model cannot be offered them; tool_choice 'required' or a named function works "
            "without template support (the call is constrained to its JSON)", "tools")
    if request.forced:
        try:
            spec = compile_json_schema(_forced_schema(request), tokenizer, param="tools",
                                       label="the tools' parameters schema")
        except GrammarError as e:
            raise _named_tool_error(e, request) from None
        note = None
        if not tools_ok:
            names = [t["function"]["name"] for t in request.tools
                     if request.forced_name in (None, t["function"]["name"])]
            note = ("Answer with a call of " + " or ".join(names) + ", as JSON: "
                    + json.dumps([{"name": t["function"]["name"], "parameters": t["function"].get("parameters")}
                                  for t in request.tools if t["function"]["name"] in names]))
        return StructuredPlan(variables, spec, forced=True, system_note=note)
    if request.response_format == "json_schema":
        spec = compile_json_schema(request.schema, tokenizer, param="response_format")
        return StructuredPlan(variables, spec)
    if request.response_format == "json_object":
        return StructuredPlan(variables, compile_grammar(json_object_grammar(), tokenizer, param="response_format"))
    return StructuredPlan(variables, None, tools=bool(request.tools) and request.tool_choice == "auto")


def _named_tool_error(e: GrammarError, request: StructuredRequest) -> GrammarError:
    """A forced call's schema error, said about the tool's parameters (tools[i].function.parameters)."""
    path = e.path
    for i, tool in enumerate(request.tools):
        name = tool["function"]["name"]
        for prefix in ("#/properties/arguments", f"#/anyOf/{i}/properties/arguments",
                       "#/items/properties/arguments", f"#/items/anyOf/{i}/properties/arguments"):
            if path == prefix or path.startswith(prefix + "/"):
                where = "#" + path[len(prefix):]
                if prefix.endswith("arguments") and (f"/anyOf/{i}/" in prefix or len(request.tools) == 1
                                                     or request.forced_name == name):
                    reason = str(e).split(": ", 1)[-1]
                    return GrammarError(f"tools[{i}].function.parameters ({name}) cannot be compiled at "
                                        f"{where}: {reason}", where, "tools")
    return e
