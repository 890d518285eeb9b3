"""Structured output through `turbospark serve` on the default model, with the official openai
client: random JSON schemas (the target: every reply validates), forced tool calls whose
arguments validate, tool results fed back, and the 400s (an invalid schema names its part; a
template without tools is named)."""

from __future__ import annotations

import json
import os
import random

import jsonschema
import openai
import pytest

from api_harness import api, openai_client  # noqa: F401 (the fixture)
from structured_schemas import random_schema

MODEL = "SmolLM2-135M-Instruct.Q4_1"
SCHEMA_RUNS = int(os.environ.get("TURBOSPARK_SCHEMA_RUNS", "200"))
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40},
                                                    "unit": {"enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "add", "parameters": {"type": "object", "properties": {"a": {"type": "integer"},
                                                                     "b": {"type": "integer"}},
                                      "required": ["a", "b"], "additionalProperties": False}}}]

pytestmark = pytest.mark.real_model


def _schema_reply(client, schema, stream: bool, seed: int) -> tuple[str, str]:
    kw = dict(model=MODEL, messages=[{"role": "user", "content": "Fill in this record with example data."}],
              response_format={"type": "json_schema", "json_schema": {"name": "record", "schema": schema,
                                                                      "strict": True}},
              max_tokens=600, temperature=0.7, seed=seed)
    if not stream:
        r = client.chat.completions.create(**kw)
        return r.choices[0].message.content, r.choices[0].finish_reason
    text, finish = "", None
    for chunk in client.chat.completions.create(stream=True, **kw):
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    return text, finish


@pytest.mark.slow
def test_random_json_schemas_all_validate_streamed_and_not(api) -> None:
    client = openai_client(api.servers[0])
    rng = random.Random(31)
    failures = []
    for i in range(SCHEMA_RUNS):
        schema = random_schema(rng)
        text, finish = _schema_reply(client, schema, stream=i % 2 == 1, seed=i)
        try:
            jsonschema.validate(json.loads(text), schema)
            assert finish == "stop"
        except (ValueError, AssertionError, jsonschema.ValidationError) as e:
            failures.append((i, schema, text, finish, str(e)[:200]))
    assert failures == [], f"{len(failures)} of {SCHEMA_RUNS} failed: {failures[:3]}"


@pytest.mark.parametrize("stream", [False, True])
def test_a_named_tool_choice_returns_a_call_whose_arguments_validate(api, stream) -> None:
    client = openai_client(api.servers[0])
    kw = dict(model=MODEL, messages=[{"role": "user", "content": "What's the weather in Paris?"}],
              tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_weather"}}, max_tokens=120)
    if stream:
        calls: dict[int, dict] = {}
        finish = None
        for chunk in client.chat.completions.create(stream=True, **kw):
            for tc in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                entry = calls.setdefault(tc.index, {"id": tc.id, "name": "", "arguments": "", "pieces": 0})
                entry["pieces"] += 1
                entry["name"] += tc.function.name or ""
                entry["arguments"] += tc.function.arguments or ""
            if chunk.choices and chunk.choices[0].finish_reason:
                finish = chunk.choices[0].finish_reason
        got = list(calls.values())
        assert got and got[0]["pieces"] > 2  # the real model's arguments streamed as it wrote them
    else:
        r = client.chat.completions.create(**kw)
        finish = r.choices[0].finish_reason
        assert r.choices[0].message.content is None
        got = [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
               for c in r.choices[0].message.tool_calls]
    assert finish == "tool_calls" and len(got) == 1 and got[0]["name"] == "get_weather"
    assert got[0]["id"].startswith("call_")
    jsonschema.validate(json.loads(got[0]["arguments"]), TOOLS[0]["function"]["parameters"])


def test_required_calls_and_a_tool_result_fed_back(api) -> None:
    client = openai_client(api.servers[0])
    messages = [{"role": "user", "content": "Add 2 and 3."}]
    r = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS, tool_choice="required",
                                       max_tokens=200, temperature=0)
    calls = r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "tool_calls" and calls
    for call in calls:
        params = next(t for t in TOOLS if t["function"]["name"] == call.function.name)["function"]["parameters"]
        jsonschema.validate(json.loads(call.function.arguments), params)
    # The call and its result go back through the template; the model answers in text.
    messages += [r.choices[0].message.model_dump(exclude_none=True),
                 *({"role": "tool", "tool_call_id": c.id, "content": "5"} for c in calls)]
    again = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=20, temperature=0)
    assert again.choices[0].message.content and not again.choices[0].message.tool_calls


def test_json_object_on_completions_and_chat(api) -> None:
    client = openai_client(api.servers[0])
    r = client.completions.create(model=MODEL, prompt="A JSON object describing a cat:", max_tokens=120,
                                  extra_body={"response_format": {"type": "json_object"}}, temperature=0)
    assert isinstance(json.loads(r.choices[0].text), dict)
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "A cat as JSON."}],
                                       response_format={"type": "json_object"}, max_tokens=120, temperature=0)
    assert isinstance(json.loads(r.choices[0].message.content), dict)


@pytest.mark.parametrize("kw, param, words", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"when": {"type": "string", "format": "nonsense"}}}}}},
     "response_format", ["#/properties/when", "nonsense"]),
    ({"tools": TOOLS}, "tools", ["Smollm2 135M", "does not support tools"]),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"type": "strnig"}}}}}], "tool_choice": "required"},
     "tools", ["tools[0].function.parameters", "#/properties/x", "strnig"]),
])
def test_what_cannot_be_served_is_a_400_that_says_why(api, kw, param, words) -> None:
    client = openai_client(api.servers[0])
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=5, **kw)
    body = err.value.body
    assert body["param"] == param
    for word in words:
        assert word in body["message"]
