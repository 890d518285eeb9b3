"""Constrained decoding in the step loop: the mask (hand-built logits), the grammar's end stopping
the reply, speculation cutting drafts to the grammar and verifying rows in order, batched steps
each masked by their own stream's grammar, and a property test: whatever the logits, a
constrained reply that ends parses and validates."""

from __future__ import annotations

import json
import re
from typing import Sequence

import jsonschema
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from fakes import ByteTokenizer, Call, ScriptedProducer, drain
from turbospark_app.chat.grammar import compile_json_schema, compile_grammar, regex_grammar
from turbospark_app.engine import GenerationConfig, LookupSpeculation, Shaping, StopReason, make_sampler
from turbospark_app.engine.selection import ConstrainedSampler, constrained
from turbospark_app.engine.progress import DecodeStep, TokenProgress
from turbospark_app.engine.raw_completion import stream_raw_completion
from turbospark_app.engine.raw_completion_chunked import stream_raw_completion_chunked

TOK = ByteTokenizer()
V = ByteTokenizer.VOCAB_SIZE
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}, "ok": {"type": "boolean"}},
          "required": ["n", "ok"], "additionalProperties": False}


def reply_of(items: Sequence[object]) -> str:
    return "".join(i.delta for i in items if isinstance(i, TokenProgress))


def test_the_mask_keeps_float32_and_only_the_allowed_tokens() -> None:
    spec = compile_grammar(regex_grammar("ab|ac"), TOK)
    c = spec.start()
    logits = np.arange(V, dtype=np.float32)
    out = c.mask(logits)
    assert out.dtype == np.float32 and out is not logits
    assert np.isfinite(out).nonzero()[0].tolist() == [ord("a")]
    assert logits[5] == 5.0  # the producer's buffer is never written
    c.accept(ord("a"))
    assert np.isfinite(c.mask(logits)).nonzero()[0].tolist() == [ord("b"), ord("c")]
    assert c.valid_prefix([ord("c"), ord("x")]) == 1 and not c.finished  # (state unchanged)
    c.accept(ord("c"))
    assert c.finished
    ends = set(np.isfinite(c.mask(logits)).nonzero()[0].tolist())
    assert ends and ends <= set(TOK.eog_ids)


def test_the_sampler_masks_before_its_filters_and_advances_with_its_token() -> None:
    spec = compile_grammar(regex_grammar("[0-9]+"), TOK)
    # The highest logit ('z') is refused: greedy, top-k 1 and sampling all pick a digit.
    logits = np.zeros(V, np.float32)
    logits[ord("z")], logits[ord("7")] = 50.0, 30.0
    for shaping in (Shaping(), Shaping(temperature=1.0, top_k=1), Shaping(temperature=0.8, seed=1)):
        sampler = constrained(make_sampler(shaping), spec)
        assert isinstance(sampler, ConstrainedSampler)
        assert sampler(logits, []) == ord("7")
    assert constrained(make_sampler(Shaping()), None)(logits, []) == ord("z")


def _run(producer, prompt, config, **kw):
    stream = stream_raw_completion_chunked(producer, TOK, prompt, config, 4096, V, chunk_size=8, **kw)
    return drain(stream)


def test_a_constrained_reply_ends_when_its_grammar_does() -> None:
    spec = compile_json_schema(SCHEMA, TOK)
    want = '{"n": 42, "ok": true}'
    # The script spells the JSON, then keeps offering 'x' (never allowed): the grammar's end
    # leaves only end-of-generation ids, so the reply stops there, as END_OF_TURN.
    prompt = list(b"json: ")
    script = {len(prompt) - 1 + i: b for i, b in enumerate(want.encode())}
    producer = ScriptedProducer(V, script, default=ord("x"))
    items, result = _run(producer, prompt, GenerationConfig(max_new_tokens=200, constraint=spec))
    assert reply_of(items) == want
    assert result.reason is StopReason.END_OF_TURN
    assert json.loads(reply_of(items)) == {"n": 42, "ok": True}


def test_the_model_is_steered_where_it_strays() -> None:
    spec = compile_json_schema({"type": "object", "properties": {"a": {"enum": ["yes", "no"]}},
                                "required": ["a"], "additionalProperties": False}, TOK)
    # A producer that only ever offers 'q': greedy under the mask must still write valid JSON.
    rng = np.random.default_rng(3)

    def script(position: int) -> np.ndarray:
        v = rng.normal(size=V).astype(np.float32)
        v[ord("q")] = 30.0
        return v

    producer = ScriptedProducer(V, script)
    items, result = _run(producer, list(b"go"), GenerationConfig(max_new_tokens=100, constraint=spec))
    assert json.loads(reply_of(items))["a"] in ("yes", "no")
    assert result.reason is StopReason.END_OF_TURN


class RowsProducer(ScriptedProducer):
    """Verifies drafts: row i of a pass is the script's logits at position + i."""

    batchable = False

    def produce_rows(self, tokens: Sequence[int], position: int, rows_out: np.ndarray) -> None:
        self.calls.append(Call("produce_rows", tuple(tokens), position, True, self._now()))
        self._feed(tokens, position)
        for i in range(len(tokens)):
            rows_out[i] = self.logits_at(position + i)

    def trim(self, n: int) -> None:
        self.calls.append(Call("trim", None, n))
        del self.kv[n:]


def test_speculation_drafts_only_what_the_grammar_accepts_and_keeps_the_reply() -> None:
    # The prompt holds the answer twice, so prompt lookup drafts its continuation: the drafts
    # past the grammar's end ('}' then ' tail') are cut before the pass, never fed.
    want = '{"n": 7, "ok": false}'
    prompt = list(f"copy {want} tail, again {want} tail: ".encode())
    spec = compile_json_schema(SCHEMA, TOK)
    script = {len(prompt) - 1 + i: b for i, b in enumerate(want.encode())}
    plain = ScriptedProducer(V, dict(script), default=ord(" "))
    _, plain_result = _run(plain, prompt, GenerationConfig(max_new_tokens=64, constraint=spec))
    spec_producer = RowsProducer(V, dict(script), default=ord(" "))
    items, result = _run(spec_producer, prompt, GenerationConfig(max_new_tokens=64, constraint=spec),
                         speculation=LookupSpeculation(ngram_min=1, ngram_max=3))
    assert reply_of(items) == want
    assert result.reason is StopReason.END_OF_TURN
    assert result.drafted_tokens > 0 and result.accepted_tokens > 0
    fed = [t for c in spec_producer.calls if c.method == "produce_rows" for t in c.token]
    assert b" tail" not in bytes(t for t in fed if t < 256)  # cut by the grammar, never verified
    assert result.kv_backed_token_ids == plain_result.kv_backed_token_ids


def test_batched_steps_each_use_their_own_streams_grammar() -> None:
    class Batchable(ScriptedProducer):
        batchable = True

    specs = [compile_grammar(regex_grammar("[a-c]{4}"), TOK), compile_grammar(regex_grammar("[x-z]{4}"), TOK)]
    streams, producers = [], []
    for spec in specs:
        p = Batchable(V, lambda pos: np.linspace(0, 1, V, dtype=np.float32))  # argmax: the last id
        producers.append(p)
        streams.append(stream_raw_completion(p, TOK, list(b"hi"), GenerationConfig(
            max_new_tokens=10, constraint=spec), 4096, V))
    texts = ["", ""]
    done = [False, False]
    replies: list[object] = [None, None]
    while not all(done):  # one "round": each stream's DecodeStep run by the driver, as batching does
        for i, s in enumerate(streams):
            if done[i]:
                continue
            try:
                ev = s.send(replies[i])
            except StopIteration:
                done[i] = True
                continue
            replies[i] = None
            if isinstance(ev, DecodeStep):
                ev.producer.produce(ev.token, ev.position, ev.logits)
                replies[i] = True
            elif isinstance(ev, TokenProgress):
                texts[i] += ev.delta
    assert texts == ["cccc", "zzzz"]


KEYS = st.sampled_from(["a", "b", "name", "x1"])
LEAF = st.sampled_from([{"type": "integer"}, {"type": "boolean"}, {"enum": ["red", "green", 3]},
                        {"type": "string", "maxLength": 5}, {"type": "string", "pattern": "^[a-f]{2,4}$"},
                        {"type": "number"}, {"type": "null"}])
SCHEMAS = st.recursive(
    LEAF,
    lambda inner: st.one_of(
        st.builds(lambda items, n: {"type": "array", "items": items, "maxItems": n}, inner, st.integers(0, 3)),
        st.builds(lambda props, req: {"type": "object", "properties": props,
                                      "required": sorted(set(req) & set(props)),
                                      "additionalProperties": False},
                  st.dictionaries(KEYS, inner, min_size=1, max_size=3), st.lists(KEYS)),
    ),
    max_leaves=6,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=SCHEMAS, seed=st.integers(0, 2**32 - 1))
def test_property_any_accepted_sequence_of_a_constrained_reply_parses(schema, seed) -> None:
    # Random logits at every step, sampled at temperature 1: whatever tokens the mask lets
    # through, a reply that ends by itself is JSON valid under its schema.
    spec = compile_json_schema(schema, TOK)
    rng = np.random.default_rng(seed)
    producer = ScriptedProducer(V, lambda pos: rng.normal(scale=3.0, size=V).astype(np.float32))
    config = GenerationConfig(max_new_tokens=400, constraint=spec,
                              shaping=Shaping(temperature=1.0, seed=seed))
    items, result = _run(producer, list(b"go"), config)
    if result.reason is StopReason.MAX_TOKENS:
        return  # cut by the budget: no claim about a reply that did not end
    assert result.reason in (StopReason.END_OF_TURN, StopReason.EOS)  # an end-of-generation id
    jsonschema.validate(json.loads(reply_of(items)), schema)


@pytest.mark.parametrize("schema, path", [
    ({"type": "object", "properties": {"when": {"type": "string", "format": "weird"}}}, "#/properties/when"),
    ({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "strnig"}}}},
     "#/properties/a/items"),
    ({"anyOf": [{"type": "integer"}, {"type": "string", "pattern": "(("}]}, "#/anyOf/1"),
    ({"type": "object", "properties": {"a": {"$ref": "#/nope"}}}, "#/properties/a"),
])
def test_an_invalid_schema_names_the_part_that_fails(schema, path) -> None:
    from turbospark_app.chat.grammar import GrammarError

    with pytest.raises(GrammarError) as err:
        compile_json_schema(schema, TOK, param="response_format")
    assert err.value.path == path and path in str(err.value)


def test_a_ref_into_the_roots_definitions_still_compiles_when_located() -> None:
    schema = {"$defs": {"p": {"type": "integer"}}, "type": "object",
              "properties": {"a": {"$ref": "#/$defs/p"}, "b": {"type": "string", "format": "nope"}}}
    from turbospark_app.chat.grammar import GrammarError

    with pytest.raises(GrammarError) as err:
        compile_json_schema(schema, TOK)
    assert err.value.path == "#/properties/b"


def test_llguidance_tokenizer_agrees_with_ours_token_for_token(tmp_path) -> None:
    from tiny_gguf import TINY_SPECIALS, _byte_chars, write_tokenizer_gguf
    from turbospark_app.model.text.tokenizer import GGUFTokenizer

    tokens = [*TINY_SPECIALS, *_byte_chars(), "\u0120t", "he", "<tool_call>"]
    types = [3] * len(TINY_SPECIALS) + [1] * (len(tokens) - len(TINY_SPECIALS) - 1) + [4]
    path = write_tokenizer_gguf(tmp_path / "t.gguf", model="gpt2", pre="smollm", tokens=tokens,
                                types=types, merges=["\u0120 t", "h e"], ids={"eos": 2})
    ours = GGUFTokenizer.from_gguf(path, use_cache=False)
    _check_agreement(ours)


def _check_agreement(ours) -> None:
    from turbospark_app.chat.grammar import guidance_tokenizer

    theirs = guidance_tokenizer(ours)
    assert theirs.vocab_size == ours.vocab_size
    assert set(theirs.eos_tokens) == set(ours.eog_ids)
    control = [i for i, t in enumerate(ours.spec.token_types) if t == 3]
    for i in range(ours.vocab_size):
        if i in control:
            assert theirs.is_special_token(i), i
            assert theirs.decode_bytes([i]) == ours.spec.tokens[i].encode()
        elif ours.token_bytes(i).startswith(b"\xff"):
            # 0xFF never occurs in UTF-8 (llguidance's special marker): no grammar text needs it
            assert theirs.decode_bytes([i]) == b""
        else:
            assert theirs.decode_bytes([i]) == ours.token_bytes(i), i
    text = 'A {"name": "tool", "arguments": {"x": [1, 2.5, "é"]}}'
    assert theirs.tokenize_str(text) == ours.encode(text, parse_special=False)
    # A grammar's text never spells a control token, even when it writes the token's name.
    name = ours.spec.tokens[control[0]]
    c = compile_grammar(regex_grammar(re.escape(name)), ours).start()
    assert not np.isfinite(c.mask(np.zeros(ours.vocab_size, np.float32)))[control].any()


@pytest.mark.real_model
def test_llguidance_tokenizer_agrees_on_the_default_model(default_model_path) -> None:
    from turbospark_app.model.text.tokenizer import GGUFTokenizer

    _check_agreement(GGUFTokenizer.from_gguf(default_model_path))


def test_an_unbounded_number_cannot_fill_the_budget() -> None:
    # A producer that always prefers '1': the integer stops at 15 digits, the number at 6
    # decimals, so the object closes instead of running to max_tokens.
    spec = compile_json_schema({"type": "object", "properties": {"i": {"type": "integer"}, "x": {"type": "number"}},
                                "required": ["i", "x"], "additionalProperties": False}, TOK)

    def script(position: int) -> np.ndarray:
        v = np.zeros(V, np.float32)
        v[ord("1")], v[ord(".")] = 9.0, 5.0
        return v

    items, result = _run(ScriptedProducer(V, script), list(b"go"), GenerationConfig(max_new_tokens=300, constraint=spec))
    text = reply_of(items)
    json.loads(text)
    assert result.reason is StopReason.END_OF_TURN
    i, x = re.fullmatch(r'\{"i": (\d+), "x": ([\d.]+)\}', text).groups()
    assert len(i) == 15 and len(x.split(".")[1]) <= 6


def test_an_object_that_lists_its_properties_takes_no_others_unless_it_says_so() -> None:
    # A producer that prefers ', "' to '}': with the properties listed and nothing said of others
    # (as tools' parameter schemas usually are), the object closes after them (llama.cpp's reading);
    # JSON Schema's own default would let the model invent keys until its budget ran out.
    open_ended = {"type": "object", "properties": {"a": {"enum": ["yes"]}}, "required": ["a"]}

    def script(position: int) -> np.ndarray:
        v = np.zeros(V, np.float32)
        v[ord(",")], v[ord('"')], v[ord("z")], v[ord("}")] = 9.0, 8.0, 7.0, 1.0
        return v

    spec = compile_json_schema(open_ended, TOK)
    items, result = _run(ScriptedProducer(V, script), list(b"go"), GenerationConfig(max_new_tokens=80, constraint=spec))
    assert reply_of(items) == '{"a": "yes"}' and result.reason is StopReason.END_OF_TURN
    # Said open, it stays open: the model's extra key is allowed.
    spec = compile_json_schema({**open_ended, "additionalProperties": True}, TOK)
    items, _ = _run(ScriptedProducer(V, script), list(b"go"), GenerationConfig(max_new_tokens=80, constraint=spec))
    assert reply_of(items).startswith('{"a": "yes", "')


def test_closing_objects_leaves_any_object_all_of_parts_and_property_names_alone() -> None:
    from turbospark_app.chat.grammar import bounded_schema

    assert bounded_schema({"type": "object"}) == {"type": "object"}
    # Each part of an allOf lists only its own keys: closed, they would refuse each other's.
    both = bounded_schema({"allOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}]})
    assert all("additionalProperties" not in part for part in both["allOf"])
    jsonschema.validate({"a": 1, "b": 2}, both)
    cond = bounded_schema({"type": "object", "properties": {"a": {}}, "additionalProperties": True,
                           "if": {"properties": {"a": {"const": 1}}}, "then": {"properties": {"b": {}}},
                           "dependentSchemas": {"a": {"properties": {"c": {}}}}})
    jsonschema.validate({"a": 1, "b": 2, "c": 3}, cond)
    # Under `not`, a closed object would widen the schema: it is kept as written.
    never = {"not": {"type": "object", "properties": {"a": {}}}}
    assert bounded_schema(never) == never
    # A property named "properties" is a name, not a keyword; the schema under it is closed.
    named = bounded_schema({"type": "object", "properties": {"properties": {"type": "object",
                                                                          "properties": {"x": {}}}}})
    assert set(named["properties"]) == {"properties"} and named["additionalProperties"] is False
    assert named["properties"]["properties"]["additionalProperties"] is False
    jsonschema.validate({"properties": {"x": 1}}, named)
