"""Every tool-call format and the reasoning split, driven through the engine: a scripted producer
emits a reply's token ids through the real tokenizer of a tiny family GGUF with the family's real
chat template; the reply parser is fed the streamed tokens one by one, as the API and the window
feed it, and must give the calls, the answer and the reasoning the reply holds."""

from __future__ import annotations

import json

import pytest

from family_gguf import family_tokenizer, template_source
from fakes import ScriptedProducer, drain
from turbospark_app.chat.formats import (
    ContentDelta,
    ReasoningDelta,
    ReplyParser,
    ReplyReader,
    ToolCallDelta,
    detect_format,
    parser_for,
)
from turbospark_app.engine import GenerationConfig, StopReason
from turbospark_app.engine.progress import TailProgress, TokenProgress
from turbospark_app.engine.raw_completion_chunked import stream_raw_completion_chunked

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}]
W1 = {"city": "Paris", "days": 2}
W2 = {"city": "Oslo"}

# family -> (reply text as the model writes it, expected answer, reasoning, calls)
CASES = {
    "qwen3": ('<think>\nThe user wants weather.\n</think>\n\nLet me check.\n<tool_call>\n'
              '{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>\n'
              '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>',
              "Let me check.", "The user wants weather.\n", [W1, W2]),
    "qwen3_coder": ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                    "<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>", "", "", [W1]),
    "llama3": ('{"name": "get_weather", "parameters": {"city": "Paris", "days": 2}}', "", "", [W1]),
    "mistral_nemo": ('[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}, '
                     '"id": "abc123XYZ"}, {"name": "get_weather", "arguments": {"city": "Oslo"}}]', "", "", [W1, W2]),
    "mistral": ('[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 2}[TOOL_CALLS]get_weather[ARGS]'
                '{"city": "Oslo"}', "", "", [W1, W2]),
    "ministral_reasoning": ('[THINK]Paris, two days.[/THINK]Checking.[TOOL_CALLS]get_weather[ARGS]'
                            '{"city": "Paris", "days": 2}', "Checking.", "Paris, two days.", [W1]),
    "deepseek_r1": ("Weather needed.\n</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"
                    'get_weather\n```json\n{"city": "Paris", "days": 2}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
                    "", "Weather needed.\n", [W1]),
    "kimi": ('<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>'
             '{"city": "Paris", "days": 2}<|tool_call_end|><|tool_calls_section_end|>', "", "", [W1]),
    "glm": ("<think>Look it up.</think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris"
            "</arg_value>\n<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>", "", "Look it up.", [W1]),
    "command_r7b": ('<|START_THINKING|>I will call it.<|END_THINKING|><|START_ACTION|>[{"tool_call_id": "0", '
                    '"tool_name": "get_weather", "parameters": {"city": "Paris", "days": 2}}]<|END_ACTION|>',
                    "", "I will call it.", [W1]),
    "granite": ('<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}]', "", "", [W1]),
}
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]


def _run_reply(tmp_path, family: str, reply: str, *, tools: bool = True):
    tok, template = family_tokenizer(tmp_path, family)
    # DeepSeek R1's generation prompt opens the reasoning block when thinking is on: the reply
    # starts inside it.
    thinking = {"enable_thinking": True} if family == "deepseek_r1" else {}
    prompt_text = template.render(MESSAGES, True, tools=TOOLS if tools else None, **thinking)
    prompt = tok.encode(prompt_text)
    ids = tok.encode(reply) + [min(tok.eog_ids)]
    producer = ScriptedProducer.for_reply(tok.vocab_size, len(prompt), ids)
    items, result = drain(stream_raw_completion_chunked(
        producer, tok, prompt, GenerationConfig(max_new_tokens=len(ids) + 4), 16384, tok.vocab_size, chunk_size=512))
    reader = ReplyReader(parser_for(template_source(family), prompt_text, tools=tools), tok)
    deltas = []
    for item in items:
        if isinstance(item, TokenProgress):
            deltas += reader.feed_token(item.id, item.delta, float(item.index))
        elif isinstance(item, TailProgress):
            deltas += reader.feed_text(item.text)
    deltas += reader.finish()
    return reader, deltas, result


@pytest.mark.parametrize("family", sorted(CASES))
def test_each_family_format_through_the_engine(tmp_path, family) -> None:
    reply, answer, reasoning, calls = CASES[family]
    reader, deltas, result = _run_reply(tmp_path, family, reply)
    # A family whose calls open with a tool-call token (`<tool_call>`, `[TOOL_CALLS]`) ends as
    # TOOL_CALLS in the engine already; the others by their end of turn (the API says tool_calls).
    tool_token = bool(set(reader.tokenizer.encode(reply)) & reader.tokenizer.tool_call_ids)
    if tool_token:
        assert result.reason is StopReason.TOOL_CALLS
    else:
        assert result.reason in (StopReason.END_OF_TURN, StopReason.EOS)
    got = reader.reply
    assert [c.name for c in got.tool_calls] == ["get_weather"] * len(calls)
    assert [json.loads(c.arguments) for c in got.tool_calls] == calls
    assert got.content.strip() == answer
    assert got.reasoning == reasoning
    # The deltas say the same, in order: each call streamed, its id and name first, then its
    # arguments in pieces that add up to the call's.
    assert "".join(d.text for d in deltas if isinstance(d, ContentDelta)) == got.content
    assert "".join(d.text for d in deltas if isinstance(d, ReasoningDelta)) == got.reasoning
    pieces = [d for d in deltas if isinstance(d, ToolCallDelta)]
    assert accumulate_calls(pieces) == [(c.id, c.name, c.arguments) for c in got.tool_calls]
    for index in range(len(calls)):
        own = [d for d in pieces if d.index == index]
        assert own[0].id and own[0].name == "get_weather" and all(d.id is None for d in own[1:])
        assert len(own) > 2, f"call {index} came in {len(own)} pieces, not streamed"
    assert len({c.id for c in got.tool_calls}) == len(calls)
    figures = reader.figures
    assert figures.answer_tokens + figures.reasoning_tokens == result.new_tokens - 1  # (the end token)
    assert (figures.reasoning_tokens > 0) == bool(reasoning)


@pytest.mark.parametrize("family", sorted(CASES))
def test_a_family_template_is_detected_as_its_format(family) -> None:
    expect = {"ministral_reasoning": "mistral", "deepseek_r1": "deepseek", "granite": "json_list",
              "qwen3": "hermes"}.get(family, family)
    assert detect_format(template_source(family)).name == expect


def test_a_plain_reply_is_answer_only_and_a_broken_call_is_given_back_as_text(tmp_path) -> None:
    reader, deltas, _ = _run_reply(tmp_path, "qwen3", "Sunny, 21 degrees.")
    assert reader.reply.content == "Sunny, 21 degrees." and not reader.reply.tool_calls
    broken = 'Sure <tool_call>{"name": "get_weather", "argu'
    reader, _, _ = _run_reply(tmp_path, "qwen3", broken)
    assert not reader.reply.tool_calls
    assert reader.reply.content == broken  # nothing the model wrote is lost


def test_reasoning_without_tools_and_a_cut_reasoning_block(tmp_path) -> None:
    reader, _, _ = _run_reply(tmp_path, "qwen3", "<think>\nhmm\n</think>\n\nParis is sunny.", tools=False)
    assert (reader.reply.reasoning, reader.reply.content) == ("hmm\n", "Paris is sunny.")
    reader, _, _ = _run_reply(tmp_path, "qwen3", "<think>\nstill thinking about", tools=False)
    assert (reader.reply.reasoning, reader.reply.content) == ("still thinking about", "")


def test_a_marker_split_over_any_pieces_is_found(tmp_path) -> None:
    reply = CASES["qwen3"][0]
    whole = ReplyParser(detect_format(template_source("qwen3")), ("<think>", "</think>"))
    whole.feed(reply)
    whole.finish()
    for step in (1, 2, 3, 7):
        parser = ReplyParser(detect_format(template_source("qwen3")), ("<think>", "</think>"))
        for i in range(0, len(reply), step):
            parser.feed(reply[i:i + step])
        parser.finish()
        assert (parser.reply.content, parser.reply.reasoning) == (whole.reply.content, whole.reply.reasoning)
        assert [(c.name, c.arguments) for c in parser.reply.tool_calls] == \
            [(c.name, c.arguments) for c in whole.reply.tool_calls]


def accumulate_calls(pieces: list[ToolCallDelta]) -> list[tuple[str, str, str]]:
    """(id, name, arguments) per call, joined as OpenAI's clients join streamed deltas."""
    calls: dict[int, list[str]] = {}
    for d in pieces:
        entry = calls.setdefault(d.index, ["", "", ""])
        entry[0] += d.id or ""
        entry[1] += d.name or ""
        entry[2] += d.arguments
    assert sorted(calls) == list(range(len(calls)))
    return [tuple(calls[i]) for i in sorted(calls)]


def test_a_call_streams_its_name_then_its_arguments_as_they_are_written() -> None:
    parser = ReplyParser(detect_format(template_source("qwen3")), ("<think>", "</think>"))
    assert parser.feed('<tool_call>\n{"name": "get_weather", "argu') == []  # not a call yet
    start = parser.feed('ments": ')
    assert [(d.index, d.name, d.arguments) for d in start] == [(0, "get_weather", "")] and start[0].id
    assert [d.arguments for d in parser.feed('{"city": "Pa')] == ['{"city": "Pa']
    assert [(d.arguments, d.id, d.name) for d in parser.feed('ris"}')] == [('ris"}', None, None)]
    assert parser.feed("}\n</tool_call>") == []  # the arguments were all out already
    assert [(c.id, c.name, c.arguments) for c in parser.reply.tool_calls] == \
        [(start[0].id, "get_weather", '{"city": "Paris"}')]
    assert parser.feed("\n<tool_call>\n{") == []


def test_a_call_cut_short_keeps_what_was_streamed() -> None:
    parser = ReplyParser(detect_format(template_source("qwen3")), ("<think>", "</think>"))
    parser.feed('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par')
    assert parser.finish() == []
    assert [(c.name, c.arguments) for c in parser.reply.tool_calls] == [("get_weather", '{"city": "Par')]
    assert parser.reply.content == ""
