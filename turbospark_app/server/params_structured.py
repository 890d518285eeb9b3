"""The structured-output fields of a request: response_format, tools, tool_choice,
parallel_tool_calls, chat_template_kwargs, and the tool-use parts of messages (an assistant's
tool_calls, a tool result's tool_call_id). Every problem is a 400 naming the field."""

from __future__ import annotations

import json
from typing import Any

from ..chat.structured import StructuredRequest
from .errors import bad_request

MAX_TOOLS = 128
_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")


def _response_format(body: dict[str, Any]) -> tuple[str, Any]:
    fmt = body.get("response_format")
    if fmt is None:
        return "text", None
    if not isinstance(fmt, dict) or fmt.get("type") not in ("text", "json_object", "json_schema"):
        raise bad_request("response_format.type must be 'text', 'json_object' or 'json_schema'",
                          "response_format")
    if fmt["type"] != "json_schema":
        return fmt["type"], None
    spec = fmt.get("json_schema")
    if not isinstance(spec, dict):
        raise bad_request("response_format json_schema needs a 'json_schema' object "
                          "({\"name\": ..., \"schema\": {...}, \"strict\": true})", "response_format")
    name = spec.get("name")
    if name is not None and not isinstance(name, str):
        raise bad_request("response_format.json_schema.name must be a string", "response_format")
    schema = spec.get("schema", {})
    if not isinstance(schema, (dict, bool)):
        raise bad_request("response_format.json_schema.schema must be a JSON schema (an object)",
                          "response_format")
    return "json_schema", schema


def _tools(body: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    tools = body.get("tools")
    if tools is None or tools == []:
        return ()
    if not isinstance(tools, list):
        raise bad_request("'tools' must be a list of tools", "tools")
    if len(tools) > MAX_TOOLS:
        raise bad_request(f"'tools' takes at most {MAX_TOOLS} tools", "tools")
    out, names = [], set()
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type", "function") != "function" or not isinstance(fn, dict):
            raise bad_request(f"tools[{i}] must be {{\"type\": \"function\", \"function\": {{...}}}}", "tools")
        name = fn.get("name")
        if not isinstance(name, str) or not name or not set(name) <= _NAME_CHARS or len(name) > 64:
            raise bad_request(f"tools[{i}].function.name must be 1-64 letters, digits, '_', '-' or '.'", "tools")
        if name in names:
            raise bad_request(f"tools[{i}].function.name '{name}' is given twice", "tools")
        names.add(name)
        params = fn.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise bad_request(f"tools[{i}].function.parameters must be a JSON schema (an object)", "tools")
        desc = fn.get("description")
        if desc is not None and not isinstance(desc, str):
            raise bad_request(f"tools[{i}].function.description must be a string", "tools")
        clean = {"name": name, "parameters": params or {"type": "object", "properties": {}}}
        if desc is not None:
            clean["description"] = desc
        out.append({"type": "function", "function": clean})
    return tuple(out)


def _tool_choice(body: dict[str, Any], tools: tuple[dict[str, Any], ...]) -> tuple[str, str | None]:
    choice = body.get("tool_choice")
    if choice is None:
        return ("auto" if tools else "none"), None
    if choice in ("none", "auto", "required"):
        if choice != "none" and not tools:
            raise bad_request(f"tool_choice '{choice}' needs 'tools'", "tool_choice")
        return choice, None
    fn = choice.get("function") if isinstance(choice, dict) else None
    if not isinstance(choice, dict) or choice.get("type") != "function" or not isinstance(fn, dict):
        raise bad_request("tool_choice must be 'none', 'auto', 'required' or "
                          "{\"type\": \"function\", \"function\": {\"name\": ...}}", "tool_choice")
    name = fn.get("name")
    if name not in {t["function"]["name"] for t in tools}:
        raise bad_request(f"tool_choice names the function {name!r}, which is not in 'tools'", "tool_choice")
    return "function", name


def parse_structured(body: dict[str, Any], *, chat: bool) -> StructuredRequest:
    """The structured-output fields (tools only on chat)."""
    kind, schema = _response_format(body)
    if not chat:
        for field in ("tools", "tool_choice"):
            if body.get(field) is not None:
                raise bad_request(f"'{field}' is a chat completions field (POST /v1/chat/completions)", field)
        return StructuredRequest(kind, schema)
    tools = _tools(body)
    choice, name = _tool_choice(body, tools)
    parallel = body.get("parallel_tool_calls", True)
    if not isinstance(parallel, bool):
        raise bad_request("'parallel_tool_calls' must be a boolean", "parallel_tool_calls")
    return StructuredRequest(kind, schema, tools, choice, name, parallel)


def chat_template_kwargs(body: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """vLLM's / llama-server's `chat_template_kwargs` (e.g. {"enable_thinking": false})."""
    value = body.get("chat_template_kwargs")
    if value is None:
        return ()
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise bad_request("'chat_template_kwargs' must be an object", "chat_template_kwargs")
    reserved = {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"} & set(value)
    if reserved:
        raise bad_request(f"chat_template_kwargs cannot set {sorted(reserved)}", "chat_template_kwargs")
    return tuple(sorted(value.items()))


def parse_message_extras(m: dict[str, Any], i: int) -> dict[str, Any]:
    """ChatMessage keywords for a message's tool-use parts (assistant tool_calls, a tool result)."""
    out: dict[str, Any] = {}
    role = m.get("role")
    calls = m.get("tool_calls")
    if calls is not None:
        if role != "assistant" or not isinstance(calls, list):
            raise bad_request(f"messages[{i}].tool_calls must be a list on an assistant message",
                              f"messages[{i}].tool_calls")
        parsed = []
        for j, call in enumerate(calls):
            fn = call.get("function") if isinstance(call, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                raise bad_request(f"messages[{i}].tool_calls[{j}] must have function.name",
                                  f"messages[{i}].tool_calls")
            args = fn.get("arguments", "{}")
            if not isinstance(args, str):
                args = json.dumps(args, ensure_ascii=False)
            parsed.append({"id": str(call.get("id") or f"call_{i}_{j}"), "type": "function",
                           "function": {"name": fn["name"], "arguments": args}})
        out["tool_calls"] = tuple(parsed)
    if role == "tool":
        call_id = m.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise bad_request(f"messages[{i}] (role tool) needs 'tool_call_id'", f"messages[{i}].tool_call_id")
        out["tool_call_id"] = call_id
    name = m.get("name")
    if isinstance(name, str) and role == "tool":
        out["name"] = name
    reasoning = m.get("reasoning_content")
    if isinstance(reasoning, str) and role == "assistant" and reasoning:
        out["reasoning"] = reasoning
    return out
