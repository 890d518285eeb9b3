"""Streamed tool calls, as a property: whatever arguments a call has and wherever the reply's text
is cut into pieces, every format's parser streams the call's id and name once, then argument
pieces that add up to the finished call's arguments, which are JSON equal to what was written."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turbospark_app.chat.formats import FORMATS, ReplyParser, ToolCallDelta
from turbospark_app.chat.formats.json_scan import args_prefix, json_span, scan_object

SCALARS = st.one_of(st.integers(-10**6, 10**6), st.booleans(), st.none(),
                    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text("abcxyz_", min_size=1, max_size=6), inner, max_size=3)),
    max_leaves=8)
ARGS = st.dictionaries(st.text("abcdefghij_", min_size=1, max_size=8), VALUES, max_size=4)
# XML-parameter formats carry each value as text: JSON values that survive the trip.
XML_ARGS = st.dictionaries(st.text("abcdefghij_", min_size=1, max_size=8),
                           st.one_of(st.integers(-999, 999), st.text("abc xyz,.", min_size=1, max_size=10)
                                     .filter(lambda t: t.strip() == t and not t.isdigit())), max_size=3)


def _dumps(value, compact: bool) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":") if compact else None)


def render(fmt: str, name: str, args: dict, compact: bool) -> str:
    """One call as the family's model writes it."""
    a = _dumps(args, compact)
    call = _dumps({"name": name, "arguments": args}, compact)
    if fmt in ("hermes", "forced"):
        return f"<tool_call>\n{call}\n</tool_call>" if fmt == "hermes" else call
    if fmt == "llama3":
        return _dumps({"name": name, "parameters": args}, compact)
    if fmt == "mistral_nemo":
        return f"[TOOL_CALLS][{call}]"
    if fmt == "mistral":
        return f"[TOOL_CALLS]{name}[ARGS]{a}"
    if fmt == "deepseek":
        return (f"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>{name}\n```json\n{a}\n```"
                "<｜tool▁call▁end｜><｜tool▁calls▁end｜>")
    if fmt == "kimi":
        return (f"<|tool_calls_section_begin|><|tool_call_begin|>functions.{name}:0"
                f"<|tool_call_argument_begin|>{a}<|tool_call_end|><|tool_calls_section_end|>")
    if fmt == "command_r7b":
        body = _dumps([{"tool_call_id": "0", "tool_name": name, "parameters": args}], compact)
        return f"<|START_ACTION|>{body}<|END_ACTION|>"
    if fmt == "json_list":
        return f"<|tool_call|>[{call}]"
    if fmt == "firefunction":
        return f" functools[{call}]"
    params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in args.items())
    if fmt == "qwen3_coder":
        return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"
    assert fmt == "glm"
    pairs = "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n" for k, v in args.items())
    return f"<tool_call>{name}\n{pairs}</tool_call>"


def _pieces(text: str, cuts: list[int]) -> list[str]:
    at = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    return [text[a:b] for a, b in zip(at, at[1:])]


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(fmt=st.sampled_from(sorted(FORMATS)), data=st.data(), compact=st.booleans(),
       cuts=st.lists(st.integers(0, 400), max_size=40), twice=st.booleans())
def test_streamed_pieces_add_up_to_the_call(fmt, data, compact, cuts, twice) -> None:
    args = data.draw(XML_ARGS if fmt in ("qwen3_coder", "glm") else ARGS)
    one = render(fmt, "get_weather", args, compact)
    # Two calls one after the other where the format writes them so (forced: one call).
    text = one + ("\n" + one if twice and fmt not in ("forced", "llama3") else "")
    parser = ReplyParser(FORMATS[fmt])
    deltas = []
    for piece in _pieces(text, cuts):
        deltas += parser.feed(piece)
    deltas += parser.finish()
    calls = parser.reply.tool_calls
    n = 2 if text != one else 1
    assert [c.name for c in calls] == ["get_weather"] * n
    assert all(json.loads(c.arguments) == args for c in calls)
    assert parser.reply.content == ""
    joined: dict[int, list] = {}
    for d in deltas:
        assert isinstance(d, ToolCallDelta)
        if d.index not in joined:
            assert d.id and d.name == "get_weather"
            joined[d.index] = [d.id, d.arguments]
        else:
            assert d.id is None and d.name is None
            joined[d.index][1] += d.arguments
    assert [tuple(joined[i]) for i in sorted(joined)] == [(c.id, c.arguments) for c in calls]


def test_an_object_read_as_far_as_it_is_written() -> None:
    text = '{"name": "f", "n": 12, "arguments": {"a": [1, "}"'
    scan = scan_object(text, 0)
    assert scan is not None and scan.end is None
    assert {k: v[0] for k, v in scan.members.items()} == {"name": "f", "n": 12}
    assert scan.open_key == "arguments" and text[scan.open_at] == "{"
    assert args_prefix(text, scan.open_at) == '{"a": [1, "}"'
    assert scan_object('{"a" 1}', 0) is None and scan_object("[1]", 0) is None
    # A number at the end of the text may still grow; a closed one may not.
    assert json_span('{"n": 1', 6) is None and json_span("12 ", 0) == (12, 0, 2)
