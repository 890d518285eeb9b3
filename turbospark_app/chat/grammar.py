"""Grammars for constrained decoding, through llguidance (the engine llama.cpp, vLLM and SGLang use).

`engine.constraint` owns the protocol; this module implements it:

- `guidance_tokenizer(tokenizer)`: llguidance's `LLTokenizer` built from OUR tokenizer, token for
  token: every id's `token_bytes(id)`, control tokens as llguidance's special form (0xFF + their
  vocabulary text, so no grammar text can spell them) and every end-of-generation id as its EOS.
  So a mask bit i always means our token i. Built once per tokenizer (~0.1 s for 49k tokens).
- `compile_grammar(grammar, tokenizer)`: a checked `GrammarSpec` (JSON schema, regex, Lark, or a
  grammar already in llguidance's JSON form), or `GrammarError` naming what it cannot compile:
  for a JSON schema, the JSON pointer of the deepest sub-schema that fails on its own
  (`#/properties/when/format`), found by compiling the children one by one.
- `GrammarSpec.start()`: one run's `GuidanceConstraint` (an `LLMatcher`): the mask is llguidance's
  bitmask (one bit per token, numpy int32 words) unpacked into a boolean row and applied with
  `np.where` into a float32 copy: the hot path never leaves float32.
"""

from __future__ import annotations

import json
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import llguidance
import numpy as np
from llguidance.numpy import allocate_token_bitmask, fill_next_token_bitmask

from ..engine.errors import EngineError

_NEG_INF = np.float32(-np.inf)
CONTROL = 3  # GGUF token type of control tokens (model.text.tokenizer)
# Separators as json.dumps writes them: what small models were trained on; no free whitespace
# (flexible whitespace lets a greedy model pad a reply with newlines until its budget is gone).
JSON_OPTIONS: dict[str, Any] = {"whitespace_flexible": False, "item_separator": ", ",
                                "key_separator": ": "}


class GrammarError(EngineError):
    """A grammar (or JSON schema) llguidance cannot compile; `path` names the part (a JSON
    pointer into the schema, "#" for the whole), `param` the request field it came from."""

    def __init__(self, message: str, path: str = "#", param: str | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.param = param


def vocab_size_of(tokenizer: Any) -> int:
    """The tokenizer's vocabulary size (`vocab_size`, or a test double's `VOCAB_SIZE`)."""
    return int(getattr(tokenizer, "vocab_size", None) or getattr(tokenizer, "VOCAB_SIZE"))


class _Wrapped:
    """What `llguidance.LLTokenizer` reads of a Python tokenizer (its TokenizerWrapper shape)."""

    is_tokenizer_wrapper = True

    def __init__(self, tokenizer: Any) -> None:
        n = vocab_size_of(tokenizer)
        eog = sorted(set(tokenizer.eog_ids) | set(tokenizer.eos_ids) | set(tokenizer.end_of_turn_ids))
        stops = set(eog) | set(tokenizer.tool_call_ids)
        spec = getattr(tokenizer, "spec", None)
        types = getattr(spec, "token_types", None)
        names = getattr(spec, "tokens", None)
        self.tokens: list[bytes] = []
        self.special_token_ids: list[int] = []
        for i in range(n):
            data = tokenizer.token_bytes(i)
            control = i in stops or (types is not None and types[i] == CONTROL)
            if control:
                name = names[i] if names is not None else f"<special_{i}>"
                data = b"\xff" + name.encode("utf-8")
                self.special_token_ids.append(i)
            self.tokens.append(data)
        self.eos_token_id = eog[0] if eog else n - 1
        self.bos_token_id = getattr(tokenizer, "bos_id", None)
        self.eog = eog
        self._tokenizer = tokenizer

    def __call__(self, text: str | bytes) -> list[int]:
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        try:
            return list(self._tokenizer.encode(text, parse_special=False))
        except TypeError:  # a tokenizer without the keyword (test doubles)
            return list(self._tokenizer.encode(text))


_TOKENIZERS: "weakref.WeakKeyDictionary[Any, llguidance.LLTokenizer]" = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def guidance_tokenizer(tokenizer: Any) -> llguidance.LLTokenizer:
    """llguidance's tokenizer for ours (cached per tokenizer object; any thread)."""
    with _LOCK:
        found = _TOKENIZERS.get(tokenizer)
        if found is None:
            wrapped = _Wrapped(tokenizer)
            found = llguidance.LLTokenizer(wrapped, n_vocab=len(wrapped.tokens), eos_token=wrapped.eog or None)
            _TOKENIZERS[tokenizer] = found
        return found


# -- grammars --------------------------------------------------------------------------------


# A number the schema leaves unbounded is written with at most 15 integer digits and 6 decimals
# (llama.cpp's JSON grammar bounds them too, to 16): a greedy small model otherwise fills its whole
# budget with one number ("1111..."). Only narrows: every value written still validates.
NUMBER_BOUND = 10**15 - 1
NUMBER_STEP = 1e-6
_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


# An object schema that lists its `properties` and says nothing of others is closed, as llama.cpp's
# JSON grammar reads it (common/json-schema.cpp): JSON Schema would allow any extra key, and a
# small model then keeps inventing keys ("type", "properties", ...) until its budget runs out, so
# a tool call comes back cut short. `{"type": "object"}` alone still takes any object; parts of an
# `allOf` (or `then` / `else` / `dependentSchemas`, or beside a `$ref`) stay open, as closing each
# would refuse the others' keys. Under `not` and `if` nothing changes: narrowing there widens.
_OPENING = ("additionalProperties", "patternProperties", "unevaluatedProperties", "allOf", "$ref")
_VALUES = ("enum", "const", "default", "examples", "not", "if")  # kept as written
_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")  # name -> schema
_BESIDE = ("allOf", "then", "else", "dependentSchemas")  # apply to the same object as their parent


def bounded_schema(schema: Any, *, close: bool = True) -> Any:
    """`schema` with every unbounded integer / number given the bounds above, and every object
    that lists its properties closed to others unless it says otherwise (a copy). Only narrows:
    whatever it accepts, the original schema accepts."""
    if isinstance(schema, list):
        return [bounded_schema(s, close=close) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for k, v in schema.items():
        if k in _VALUES:
            out[k] = v
        elif k in _MAPS and isinstance(v, dict):
            out[k] = {name: bounded_schema(sub, close=k not in _BESIDE) for name, sub in v.items()}
        else:
            out[k] = bounded_schema(v, close=k not in _BESIDE)
    kinds = out.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if ("integer" in kinds or "number" in kinds) and not any(b in out for b in _BOUNDS):
        out["minimum"], out["maximum"] = -NUMBER_BOUND, NUMBER_BOUND
    if "number" in kinds and "integer" not in kinds and "multipleOf" not in out:
        out["multipleOf"] = NUMBER_STEP
    if close and isinstance(out.get("properties"), dict) and not any(k in out for k in _OPENING):
        out["additionalProperties"] = False
    return out


def json_schema_grammar(schema: Any) -> str:
    """The llguidance grammar of a JSON schema (`True` / `{}`: any JSON value)."""
    return llguidance.LLMatcher.grammar_from_json_schema(bounded_schema(schema), defaults=JSON_OPTIONS)


def json_object_grammar() -> str:
    """Any JSON object (response_format json_object)."""
    return json_schema_grammar({"type": "object"})


def regex_grammar(pattern: str) -> str:
    """Text that matches `pattern` whole."""
    return llguidance.LLMatcher.grammar_from_regex(pattern)


def lark_grammar(lark: str) -> str:
    """A Lark grammar (llguidance's dialect: `%json{...}` may embed a schema)."""
    return llguidance.LLMatcher.grammar_from_lark(lark)


@dataclass(frozen=True)
class GrammarSpec:
    """A compiled, checked grammar for one tokenizer; `start()` per run (engine.ConstraintSpec)."""

    grammar: str
    tokenizer: llguidance.LLTokenizer
    vocab_size: int

    def start(self) -> "GuidanceConstraint":
        return GuidanceConstraint(llguidance.LLMatcher(self.tokenizer, self.grammar, log_level=0),
                                  self.vocab_size)


def compile_grammar(grammar: str, tokenizer: Any, *, param: str | None = None) -> GrammarSpec:
    """Check `grammar` against `tokenizer`'s vocabulary; GrammarError when it does not compile."""
    lltok = guidance_tokenizer(tokenizer)
    failed, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar, lltok)
    if failed:
        raise GrammarError(f"the grammar does not compile: {_first(messages)}", "#", param)
    return GrammarSpec(grammar, lltok, vocab_size_of(tokenizer))


def compile_json_schema(schema: Any, tokenizer: Any, *, param: str | None = None,
                        label: str = "the JSON schema") -> GrammarSpec:
    """`compile_grammar` of a JSON schema; the error names the sub-schema that fails (a JSON
    pointer), e.g. "the JSON schema cannot be compiled at #/properties/when: Unknown format: x"."""
    if not isinstance(schema, (dict, bool)):
        raise GrammarError(f"{label} must be a JSON object (got {type(schema).__name__})", "#", param)
    lltok = guidance_tokenizer(tokenizer)
    error = _schema_error(schema, lltok)
    if error is not None:
        path = locate_schema_error(schema, lltok)
        raise GrammarError(f"{label} cannot be compiled at {path}: {error}", path, param)
    return GrammarSpec(json_schema_grammar(schema), lltok, vocab_size_of(tokenizer))


def _first(messages: Sequence[str]) -> str:
    return (messages[0] if messages else "unknown error").strip()


def _schema_error(schema: Any, lltok: llguidance.LLTokenizer) -> str | None:
    try:
        grammar = json_schema_grammar(schema)
    except (ValueError, TypeError) as e:
        return str(e)
    failed, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar, lltok)
    return _first(messages) if failed else None


_CHILD_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_CHILD_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_CHILD_ONE = ("items", "additionalProperties", "not", "if", "then", "else", "contains",
              "propertyNames", "unevaluatedProperties", "unevaluatedItems")


def _children(schema: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    for key in _CHILD_MAPS:
        value = schema.get(key)
        if isinstance(value, dict):
            for name, child in value.items():
                yield f"{key}/{_escape(name)}", child
    for key in _CHILD_LISTS:
        value = schema.get(key)
        if isinstance(value, list):
            for i, child in enumerate(value):
                yield f"{key}/{i}", child
    for key in _CHILD_ONE:
        value = schema.get(key)
        if isinstance(value, (dict, bool)):
            yield key, value


def _escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def locate_schema_error(schema: Any, lltok: llguidance.LLTokenizer) -> str:
    """The JSON pointer of the deepest sub-schema of `schema` that fails to compile by itself
    (its root's definitions kept, so a `$ref` still resolves); "#" when only the whole fails."""
    defs = {k: schema[k] for k in ("$defs", "definitions") if isinstance(schema, dict) and k in schema}
    path, node = "#", schema
    while isinstance(node, dict):
        for sub, child in _children(node):
            if sub.startswith(("$defs/", "definitions/")) and node is not schema:
                continue
            probe = {**defs, **child} if isinstance(child, dict) else child
            if isinstance(child, (dict, bool)) and _schema_error(probe, lltok) is not None:
                path, node = f"{path}/{sub}", child
                break
        else:
            return path
    return path


# -- one run ---------------------------------------------------------------------------------


class GuidanceConstraint:
    """One run's matcher (implements engine.constraint.Constraint)."""

    def __init__(self, matcher: llguidance.LLMatcher, vocab_size: int) -> None:
        self._matcher = matcher
        self._n = vocab_size
        self._words = allocate_token_bitmask(1, vocab_size)
        self._bytes = self._words.view(np.uint8)

    @property
    def finished(self) -> bool:
        return self._matcher.is_stopped()

    @property
    def error(self) -> str:
        """The matcher's error ("" when none)."""
        return self._matcher.get_error()

    def allowed(self) -> np.ndarray:
        """The boolean row of the tokens allowed now."""
        fill_next_token_bitmask(self._matcher, self._words)
        bits = np.unpackbits(self._bytes, bitorder="little", count=self._n)
        return bits.view(np.bool_)

    def mask(self, logits: np.ndarray) -> np.ndarray:
        x = np.asarray(logits, dtype=np.float32)
        allowed = self.allowed()
        n = min(x.shape[0], self._n)
        out = np.full(x.shape[0], _NEG_INF, dtype=np.float32)
        np.copyto(out[:n], x[:n], where=allowed[:n])
        return out

    def accept(self, token: int) -> None:
        # A refused token (never sampled: it was masked) leaves the matcher in its error state;
        # its mask then allows only the end of generation, so the reply ends.
        self._matcher.consume_token(int(token))

    def valid_prefix(self, tokens: Sequence[int]) -> int:
        return int(self._matcher.validate_tokens([int(t) for t in tokens]))


def schema_text(schema: Any) -> str:
    """A schema as compact JSON (for prompts and error messages)."""
    return json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
