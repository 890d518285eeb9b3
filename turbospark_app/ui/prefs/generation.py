"""Generation settings as stored values: defaults, parsing with messages, and TurnSettings.

ONE mapping for every place that edits or uses settings (the pane's quick form, the Settings
dialog, the QSettings defaults, a conversation's `settings` column):

    max_new_tokens      int, 1 .. 32768      reply budget (and prompt + budget <= context)
    temperature         float, 0 .. 2        0 = greedy
    top_k               int, >= 0            0 = off
    top_p               float, (0, 1]        1 = off
    min_p               float, [0, 1)        0 = off
    repetition_penalty  float, (0, 10]       1 = off
    seed                int >= 0 or None     None = fresh randomness every turn
    stop_strings        list[str]            the reply ends before any of them
    max_tokens_per_sec  float, 0 .. 1000     0 = no cap (thermal / memory may still pace)
    chunked_prefill     bool                 False = the prompt is fed token by token
    chunk_size          int, 1 .. 4096       prompt tokens per forward pass when chunked
    thinking            bool or None         the pane's Think toggle; None = the template's default
    tools               dict or None         the pane's Tools button: {"servers": [names], "choice":
                                             "auto" | "required"}; None = no tools
    tool_step_limit     int, 1 .. 100        tool steps per message before the loop is ended
    collections         list[str]            the pane's Collections button: the document
                                             collections its turns answer from ([] = none)

Defaults follow llama.cpp's sampler chain (top-k 40, top-p 0.95, min-p 0.05, no repetition
penalty). Stored values that no longer parse (a hand-edited INI, an older app) fall back to the
default instead of failing a turn.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

from ...chat.api import TurnSettings
from ...engine.config import GenerationConfig, RateConfig, Shaping

DEFAULTS: dict[str, Any] = {
    "max_new_tokens": 512,
    "temperature": 0.7,
    "top_k": 40,
    "top_p": 0.95,
    "min_p": 0.05,
    "repetition_penalty": 1.1,  # as LM Studio and Ollama: tiny models loop without it
    "seed": None,
    "stop_strings": [],
    "max_tokens_per_sec": 0.0,
    "chunked_prefill": True,
    "chunk_size": 512,
    "thinking": None,
    "tools": None,
    "tool_step_limit": 10,
    "collections": [],
}
MAX_RATE = 1000.0
MAX_STOP_STRINGS = 16
MAX_STOP_LENGTH = 200
MAX_SEED = 2**63 - 1
SESSION_SLOTS_RANGE = (1, 16)


class Invalid(ValueError):
    """A value that cannot be used; the message is shown next to the field."""


def _number(value: Any, kind: type, what: str) -> Any:
    if isinstance(value, bool):
        raise Invalid(f"{what} must be a number")
    if isinstance(value, str):
        text = value.strip()
        if not text:
            raise Invalid(f"{what} is required")
        try:
            value = int(text) if kind is int else float(text)
        except ValueError:
            raise Invalid(f"{what} must be {'a whole number' if kind is int else 'a number'}, "
                          f"not “{text}”") from None
    if kind is int:
        if isinstance(value, float):
            if not value.is_integer():
                raise Invalid(f"{what} must be a whole number")
            value = int(value)
        if not isinstance(value, int):
            raise Invalid(f"{what} must be a whole number")
        return value
    if not isinstance(value, (int, float)) or not math.isfinite(float(value)):
        raise Invalid(f"{what} must be a finite number")
    return float(value)


def _bound_text(lo: float | None, hi: float | None, lo_open: bool, hi_open: bool) -> str:
    """"between 0 and 5", "above 0 and at most 1", "at least 1"."""
    low = None if lo is None else (f"above {lo:g}" if lo_open else f"at least {lo:g}")
    high = None if hi is None else (f"below {hi:g}" if hi_open else f"at most {hi:g}")
    if lo is not None and hi is not None and not lo_open and not hi_open:
        return f"between {lo:g} and {hi:g}"
    return " and ".join(part for part in (low, high) if part)


def _ranged(kind: type, what: str, lo: float | None, hi: float | None, *, lo_open: bool = False,
            hi_open: bool = False, hint: str = "") -> Callable[[Any], Any]:
    """A parser for a number within bounds; its message says the bounds and what they mean."""
    def parse(value: Any) -> Any:
        v = _number(value, kind, what)
        too_low = lo is not None and (v <= lo if lo_open else v < lo)
        too_high = hi is not None and (v >= hi if hi_open else v > hi)
        if too_low or too_high:
            bounds = _bound_text(lo, hi, lo_open, hi_open)
            raise Invalid(f"{what} must be {bounds}" + (f" ({hint})" if hint else ""))
        return v
    return parse


def parse_seed(value: Any) -> int | None:
    """Blank / None = random; else a whole number 0 .. 2^63-1."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    v = _number(value, int, "Seed")
    if not 0 <= v <= MAX_SEED:
        raise Invalid("Seed must be a whole number from 0 (leave it blank for a random seed)")
    return v


def parse_cap(value: Any) -> float:
    """Blank / 0 = no cap; else tokens per second in (0, 1000]."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return 0.0
    v = _number(value, float, "The tokens/sec cap")
    if v < 0 or v > MAX_RATE:
        raise Invalid(f"The tokens/sec cap must be between 0 and {MAX_RATE:g} (0 or blank = no cap)")
    return v


def unescape(line: str) -> str:
    r"""`\n`, `\t` and `\\` in a stop-string line (so a stop string can hold a line break)."""
    out, i = [], 0
    while i < len(line):
        ch = line[i]
        if ch == "\\" and i + 1 < len(line) and line[i + 1] in "nt\\":
            out.append({"n": "\n", "t": "\t", "\\": "\\"}[line[i + 1]])
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def escape(text: str) -> str:
    """The inverse of `unescape`, for showing a stored stop string on one line."""
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")


def parse_stop_strings(value: Any) -> list[str]:
    """One per line (a str) or a list; blank lines are skipped; `\\n` is a line break."""
    if isinstance(value, str):
        lines = [unescape(line) for line in value.split("\n") if line.strip()]
    elif isinstance(value, (list, tuple)) and all(isinstance(s, str) for s in value):
        lines = [s for s in value if s]
    else:
        raise Invalid("Stop strings must be text, one per line")
    for n, s in enumerate(lines, 1):
        if len(s) > MAX_STOP_LENGTH:
            raise Invalid(f"Stop string {n} is longer than {MAX_STOP_LENGTH} characters")
    if len(lines) > MAX_STOP_STRINGS:
        raise Invalid(f"At most {MAX_STOP_STRINGS} stop strings (there are {len(lines)})")
    return list(dict.fromkeys(lines))  # duplicates add nothing


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise Invalid("must be true or false")


def parse_thinking(value: Any) -> bool | None:
    """None = as the chat template says; else reasoning on or off."""
    return None if value is None else _bool(value)


def parse_tools(value: Any) -> dict[str, Any] | None:
    """The pane's tools: which servers, and whether the first step must call one."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise Invalid("must be an object")
    servers = value.get("servers") or []
    if not isinstance(servers, list) or not all(isinstance(s, str) for s in servers):
        raise Invalid("servers must be a list of names")
    choice = value.get("choice", "auto")
    if choice not in ("auto", "required"):
        raise Invalid("choice must be auto or required")
    return {"servers": sorted(set(servers)), "choice": choice}


def parse_collections(value: Any) -> list[str]:
    """The pane's collections: names."""
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise Invalid("must be a list of collection names")
    return sorted(set(value))


PARSERS: dict[str, Callable[[Any], Any]] = {
    # Bounds shared with the pane's quick form (its spin boxes would clamp anything wider).
    "max_new_tokens": _ranged(int, "Max new tokens", 1, 32768),
    "temperature": _ranged(float, "Temperature", 0.0, 2.0, hint="0 = always the most likely token"),
    "top_k": _ranged(int, "Top-k", 0, None, hint="0 = off"),
    "top_p": _ranged(float, "Top-p", 0.0, 1.0, lo_open=True, hint="1 = off"),
    "min_p": _ranged(float, "Min-p", 0.0, 1.0, hi_open=True, hint="0 = off"),
    "repetition_penalty": _ranged(float, "Repetition penalty", 0.0, 10.0, lo_open=True, hint="1 = off"),
    "seed": parse_seed,
    "stop_strings": parse_stop_strings,
    "max_tokens_per_sec": parse_cap,
    "chunked_prefill": _bool,
    "chunk_size": _ranged(int, "Chunk size", 1, 4096),
    "thinking": parse_thinking,
    "tools": parse_tools,
    "tool_step_limit": _ranged(int, "Tool steps", 1, 100, hint="tool calls per message before the loop ends"),
    "collections": parse_collections,
}
parse_session_slots = _ranged(int, "Session slots", *SESSION_SLOTS_RANGE,
                              hint="conversations whose KV cache is kept in memory")
CACHE_RAM_RANGE = (0, 65536)
parse_cache_ram = _ranged(int, "Conversations in RAM", *CACHE_RAM_RANGE,
                          hint="MB for conversations whose slot was taken; 0 = none kept")


def validate(values: Mapping[str, Any], max_context: int | None = None) -> dict[str, str]:
    """Messages for every invalid key of `values` (empty = all good). Cross-field: the reply
    budget must leave room for a prompt in the model's context."""
    errors: dict[str, str] = {}
    for key, parse in PARSERS.items():
        if key in values:
            try:
                parse(values[key])
            except Invalid as e:
                errors[key] = str(e)
    if "max_new_tokens" not in errors and max_context and "max_new_tokens" in values:
        if PARSERS["max_new_tokens"](values["max_new_tokens"]) >= max_context:
            errors["max_new_tokens"] = (f"Max new tokens must be below the model's context of "
                                        f"{max_context} tokens (the prompt needs room too)")
    return errors


NONE_MEANS = ("seed", "thinking")  # keys whose None is a value (random seed, template default)


def merged(values: Mapping[str, Any] | None, defaults: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every key: from `values` if it parses, else from `defaults` if it parses, else DEFAULTS."""
    out = dict(DEFAULTS)
    for source in (defaults or {}, values or {}):
        for key, parse in PARSERS.items():
            if key in source and (source[key] is not None or key in NONE_MEANS):
                try:
                    out[key] = parse(source[key])
                except Invalid:
                    pass  # an unreadable stored value: keep the fallback
    return out


def to_turn_settings(values: Mapping[str, Any], system_prompt: str | None,
                     thinking_switch: tuple[str, bool] | None = None) -> TurnSettings:
    """The TurnSettings for a turn with these settings (the backend adds its pacing probes).
    `thinking_switch`: the loaded template's (`chat.formats.thinking_switch`), which the
    `thinking` value sets (left to the template when None)."""
    v = merged(values)
    switch = () if thinking_switch is None or v["thinking"] is None else ((thinking_switch[0], v["thinking"]),)
    cap = v["max_tokens_per_sec"]
    return TurnSettings(
        generation=GenerationConfig(
            max_new_tokens=v["max_new_tokens"],
            shaping=Shaping(
                temperature=v["temperature"],
                top_k=v["top_k"],
                top_p=v["top_p"],
                min_p=v["min_p"],
                repetition_penalty=v["repetition_penalty"],
                seed=v["seed"],
            ),
            stop_strings=tuple(v["stop_strings"]),
            rate=RateConfig(max_tokens_per_sec=cap if cap > 0 else None),
        ),
        system_prompt=(system_prompt or None),
        chunked_prefill=v["chunked_prefill"],
        chunk_size=v["chunk_size"],
        template_vars=switch,
    )
