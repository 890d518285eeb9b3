"""Request bodies -> validated parameters (400 with `param` naming the field on any problem).

OpenAI's defaults apply (temperature 1, top_p 1, no penalties); our extensions are `top_k`,
`min_p`, `repeat_penalty` (or vLLM's `repetition_penalty`), `repeat_last_n`,
`max_tokens_per_sec` (a decode-rate cap), `conversation_id` (pins the request to a KV session
instead of choosing one by prefix) and vLLM's `continue_final_message` (the reply continues the
last, assistant, message).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..chat.api import ChatMessage
from ..chat.structured import StructuredRequest
from ..engine.config import Shaping
from .errors import ApiError, bad_request
from .images import image_url_of
from .params_structured import chat_template_kwargs, parse_message_extras, parse_structured

MAX_STOP_STRINGS = 4
MAX_TOP_LOGPROBS = 20  # chat; the legacy completions `logprobs` goes to 5
MAX_LEGACY_LOGPROBS = 5
MAX_LOGIT_BIAS = 1024  # entries of one request's logit_bias
_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant",
          "tool": "tool"}


@dataclass(frozen=True)
class ApiParams:
    """One validated chat or completions request."""

    kind: str  # "chat" | "completion"
    model: str | None = None
    messages: tuple[ChatMessage, ...] = ()
    prompt: str | tuple[int, ...] = ""
    stream: bool = False
    include_usage: bool = False
    max_tokens: int | None = None  # None: what the context leaves
    max_tokens_param: str = "max_tokens"
    shaping: Shaping = field(default_factory=Shaping)
    stop: tuple[str, ...] = ()
    rate_cap: float | None = None
    logprobs: bool = False
    top_logprobs: int = 0
    pin: str | None = None
    echo: bool = False
    continue_final: bool = False  # vLLM's continue_final_message: the reply continues the last message
    structured: StructuredRequest = field(default_factory=StructuredRequest)
    template_vars: tuple[tuple[str, Any], ...] = ()  # chat_template_kwargs


def _number(body: dict[str, Any], name: str, default: float, lo: float, hi: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise bad_request(f"'{name}' must be a number", name)
    if not lo <= value <= hi:
        raise bad_request(f"'{name}' must be between {lo:g} and {hi:g} (got {value})", name)
    return float(value)


def _integer(body: dict[str, Any], name: str, lo: int, hi: int | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_request(f"'{name}' must be an integer", name)
    if value < lo or (hi is not None and value > hi):
        bound = f"between {lo} and {hi}" if hi is not None else f">= {lo}"
        raise bad_request(f"'{name}' must be {bound} (got {value})", name)
    return value


def _flag(body: dict[str, Any], name: str) -> bool:
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise bad_request(f"'{name}' must be a boolean", name)
    return value


def _stop(body: dict[str, Any]) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise bad_request("'stop' must be a string or a list of strings", "stop")
    if len(stop) > MAX_STOP_STRINGS:
        raise bad_request(f"'stop' takes at most {MAX_STOP_STRINGS} strings", "stop")
    return tuple(s for s in stop if s)


def _logit_bias(body: dict[str, Any]) -> tuple[tuple[int, float], ...]:
    """OpenAI's {"token id": bias in [-100, 100]} map, as (id, bias) pairs (ids checked against
    the vocabulary once the model is known: `check_logit_bias`)."""
    value = body.get("logit_bias")
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise bad_request("'logit_bias' must be an object mapping token ids to biases", "logit_bias")
    if len(value) > MAX_LOGIT_BIAS:
        raise bad_request(f"'logit_bias' takes at most {MAX_LOGIT_BIAS} tokens", "logit_bias")
    pairs = []
    for key, bias in value.items():
        if not (isinstance(key, str) and key.isascii() and key.isdigit()):
            raise bad_request(f"logit_bias keys must be token ids (got {key!r})", "logit_bias")
        if isinstance(bias, bool) or not isinstance(bias, (int, float)) or not -100 <= bias <= 100:
            raise bad_request(f"logit_bias[{key!r}] must be a number between -100 and 100", "logit_bias")
        pairs.append((int(key), float(bias)))
    return tuple(pairs)


def _unsupported(body: dict[str, Any]) -> None:
    n = body.get("n")
    if n is not None and n != 1:
        raise bad_request("only n=1 is supported (one choice per request)", "n")
    if body.get("suffix") is not None:
        raise bad_request("suffix is not supported by this server", "suffix")
    best_of = body.get("best_of")
    if best_of is not None and best_of != 1:
        raise bad_request("only best_of=1 is supported", "best_of")


def _common(body: dict[str, Any]) -> dict[str, Any]:
    """The parameters chat and completions share."""
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    _unsupported(body)
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise bad_request("'model' must be a string", "model")
    stream = _flag(body, "stream")
    options = body.get("stream_options")
    if options is not None and not stream:
        raise bad_request("'stream_options' is only allowed with stream: true", "stream_options")
    if options is not None and not isinstance(options, dict):
        raise bad_request("'stream_options' must be an object", "stream_options")
    include_usage = bool(options and _flag(options, "include_usage"))
    max_param = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise bad_request("'seed' must be an integer", "seed")
    cap = body.get("max_tokens_per_sec")
    rate_cap = None if cap is None else _number(body, "max_tokens_per_sec", 0, 1e-6, 1e6)
    pin = body.get("conversation_id")
    if pin is not None and (not isinstance(pin, str) or not pin or len(pin) > 200):
        raise bad_request("'conversation_id' must be a non-empty string (<= 200 chars)", "conversation_id")
    shaping = Shaping(
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0) or 1e-9,  # 0: the top token only
        top_k=_integer(body, "top_k", 0) or 0,
        min_p=_number(body, "min_p", 0.0, 0.0, 0.999999),
        repetition_penalty=_number(body, "repeat_penalty" if "repeat_penalty" in body else "repetition_penalty",
                                   1.0, 1e-6, 10.0),
        presence_penalty=_number(body, "presence_penalty", 0.0, -2.0, 2.0),
        frequency_penalty=_number(body, "frequency_penalty", 0.0, -2.0, 2.0),
        penalty_last_n=_integer(body, "repeat_last_n", 0, 1 << 20) or Shaping.penalty_last_n,
        seed=None if seed is None else seed % (1 << 64),
        logit_bias=_logit_bias(body),
    )
    return dict(
        model=model, stream=stream, include_usage=include_usage,
        max_tokens=_integer(body, max_param, 1), max_tokens_param=max_param,
        shaping=shaping, stop=_stop(body), rate_cap=rate_cap, pin=pin,
    )


def _content(value: Any, index: int) -> tuple[str, tuple[str, ...]]:
    """A message's text, and the URLs of its image parts (OpenAI's `image_url` parts), checked
    for shape here; their bytes are read later (`images.resolve_images`), off the event loop."""
    param = f"messages[{index}].content"
    if value is None:
        return "", ()
    if isinstance(value, str):
        return value, ()
    if isinstance(value, list):
        parts, urls = [], []
        for k, part in enumerate(value):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text" and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif kind == "image_url":
                urls.append(image_url_of(part, f"{param}[{k}].image_url"))
            else:
                raise bad_request("content parts must be text or image_url parts", param)
        return "".join(parts), tuple(urls)
    raise bad_request("content must be a string or a list of text and image_url parts", param)


def parse_chat(body: Any) -> ApiParams:
    """A /v1/chat/completions body. Raises ApiError (400)."""
    common = _common(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty list", "messages")
    parsed = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in _ROLES:
            raise bad_request(f"messages[{i}].role must be one of {sorted(_ROLES)}", f"messages[{i}].role")
        text, urls = _content(m.get("content"), i)
        if urls and m["role"] != "user":
            raise bad_request("images go in user messages", f"messages[{i}].content")
        parsed.append(ChatMessage(_ROLES[m["role"]], text, images=urls,  # type: ignore[arg-type]
                                  **parse_message_extras(m, i)))
    if not any(m.content.strip() or m.tool_calls or m.images for m in parsed):
        raise bad_request("every message is empty", "messages", "empty_prompt")
    continue_final = _flag(body, "continue_final_message")
    if continue_final and parsed[-1].role != "assistant":
        raise bad_request("continue_final_message needs an assistant message last", "messages")
    logprobs = _flag(body, "logprobs")
    top = _integer(body, "top_logprobs", 0, MAX_TOP_LOGPROBS)
    if top is not None and not logprobs:
        raise bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs")
    return ApiParams(kind="chat", messages=tuple(parsed), logprobs=logprobs, top_logprobs=top or 0,
                     continue_final=continue_final, structured=parse_structured(body, chat=True),
                     template_vars=chat_template_kwargs(body), **common)


def _prompt(value: Any) -> str | tuple[int, ...]:
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], (str, list)):
        value = value[0]  # a batch of one
    if isinstance(value, str):
        if not value:
            raise bad_request("'prompt' is empty", "prompt", "empty_prompt")
        return value
    if isinstance(value, list) and value and all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        return tuple(value)
    if isinstance(value, list) and len(value) > 1:
        raise bad_request("one prompt per request (batches are not supported)", "prompt")
    raise bad_request("'prompt' must be a non-empty string or a list of token ids", "prompt")


def parse_completion(body: Any) -> ApiParams:
    """A /v1/completions body (raw prompt, no chat template). Raises ApiError (400)."""
    common = _common(body)
    logprobs = _integer(body, "logprobs", 0, MAX_LEGACY_LOGPROBS)
    return ApiParams(kind="completion", prompt=_prompt(body.get("prompt")),
                     logprobs=logprobs is not None, top_logprobs=logprobs or 0,
                     echo=_flag(body, "echo"), structured=parse_structured(body, chat=False), **common)


def check_logit_bias(shaping: Shaping, vocab_size: int) -> None:
    """logit_bias may only name tokens of the vocabulary."""
    bad = next((t for t, _ in shaping.logit_bias if t >= vocab_size), None)
    if bad is not None:
        raise ApiError(400, f"logit_bias names token {bad}, outside the vocabulary (0..{vocab_size - 1})",
                       param="logit_bias")


def check_token_ids(ids: tuple[int, ...], vocab_size: int) -> None:
    """A token-id prompt must stay inside the vocabulary."""
    bad = next((t for t in ids if not 0 <= t < vocab_size), None)
    if bad is not None:
        raise ApiError(400, f"token id {bad} is outside the vocabulary (0..{vocab_size - 1})",
                       param="prompt")
