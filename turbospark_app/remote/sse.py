"""A tolerant Server-Sent Events parser for OpenAI-style chat streams.

Servers differ (see shared research, "Chat, stream"): llama-server ends with `data: [DONE]`
without the blank line, vLLM sends a usage chunk whose `choices` is null or empty, first chunks
carry `content: null`, keep-alive comments (`: ping`) come and go, an `{"error": ...}` event
may arrive after the 200 headers, and `[DONE]` may never come (the connection just closes).

Two layers: `SSEDecoder` turns bytes into event data strings (no JSON), `interpret` turns one
data string into a small frozen `ChunkInfo`. Both are pure and incremental.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

DONE = "[DONE]"
_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")
_LINE = re.compile(rb"\r\n|\n|\r")


class SSEDecoder:
    """Bytes in, event data out. Lines starting with ':' are comments (pings); several
    `data:` lines of one event are joined with '\\n' (the SSE rule)."""

    def __init__(self) -> None:
        self._buffer = b""
        self.comments = 0  # keep-alive comments seen (figures / tests)

    def feed(self, data: bytes) -> Iterator[str]:
        """The data of every event completed by `data`."""
        self._buffer += data
        while True:
            match = _EVENT_END.search(self._buffer)
            if match is None:
                break
            block, self._buffer = self._buffer[: match.start()], self._buffer[match.end():]
            payload = self._event_data(block)
            if payload is not None:
                yield payload

    def close(self) -> Iterator[str]:
        """The stream ended: an event left without its blank line still counts
        (llama-server's last `data: [DONE]`)."""
        block, self._buffer = self._buffer, b""
        if block.strip():
            payload = self._event_data(block)
            if payload is not None:
                yield payload

    def _event_data(self, block: bytes) -> str | None:
        lines: list[str] = []
        for raw in _LINE.split(block):
            if raw.startswith(b":"):
                self.comments += 1
                continue
            field, _, value = raw.partition(b":")
            if field == b"data":
                lines.append(value[1:].decode("utf-8", "replace") if value.startswith(b" ")
                             else value.decode("utf-8", "replace"))
        return "\n".join(lines) if lines else None


@dataclass(frozen=True, slots=True)
class Usage:
    """What a server said about the request's tokens. None = not reported."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens
    cache_n: int | None = None  # llama.cpp timings.cache_n
    server_prompt_ms: float | None = None  # llama.cpp timings.prompt_ms
    server_predicted_per_second: float | None = None  # llama.cpp timings.predicted_per_second

    def merged(self, other: "Usage") -> "Usage":
        """`other`'s reported fields win; unreported ones keep this one's."""
        return Usage(*(b if b is not None else a for a, b in zip(_fields(self), _fields(other))))

    @property
    def reused_tokens(self) -> int | None:
        """Reused prompt tokens: `cached_tokens` when given, else llama.cpp's `cache_n`."""
        return self.cached_tokens if self.cached_tokens is not None else self.cache_n

    @property
    def reuse_source(self) -> str:
        """Where `reused_tokens` came from ("" = the server did not say)."""
        if self.cached_tokens is not None:
            return "cached_tokens"
        return "timings.cache_n" if self.cache_n is not None else ""


def _fields(u: Usage) -> tuple[Any, ...]:
    return (u.prompt_tokens, u.completion_tokens, u.cached_tokens, u.cache_n,
            u.server_prompt_ms, u.server_predicted_per_second)


@dataclass(frozen=True, slots=True)
class ChunkInfo:
    """One parsed stream event. `done`: the `[DONE]` sentinel. `error`: an error event's
    message (the stream failed after its 200 headers)."""

    content: str = ""
    finish_reason: str | None = None
    usage: Usage | None = None
    done: bool = False
    error: str | None = None
    error_code: str | None = None
    model: str | None = None


class StreamFormatError(ValueError):
    """An event that is not JSON (or not an object): the server does not speak the protocol."""


def interpret(data: str) -> ChunkInfo:
    """One event's data -> ChunkInfo. Tolerates null/missing `choices`, `delta`, `content`."""
    text = data.strip()
    if text.startswith(DONE):
        return ChunkInfo(done=True)
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise StreamFormatError(f"not a JSON event: {text[:80]!r}") from e
    if not isinstance(obj, Mapping):
        raise StreamFormatError(f"not a JSON object: {text[:80]!r}")
    if obj.get("error") is not None:
        message, code = error_message(obj)
        return ChunkInfo(error=message, error_code=code)
    content: list[str] = []
    finish: str | None = None
    for choice in obj.get("choices") or ():
        if not isinstance(choice, Mapping):
            continue
        delta = choice.get("delta") or choice.get("message") or {}
        piece = delta.get("content") if isinstance(delta, Mapping) else None
        if piece is None:
            piece = choice.get("text")  # /v1/completions chunks
        if isinstance(piece, str):
            content.append(piece)
        finish = choice.get("finish_reason") or finish
    model = obj.get("model") if isinstance(obj.get("model"), str) else None
    return ChunkInfo("".join(content), finish, usage_of(obj), model=model)


def usage_of(obj: Mapping[str, Any]) -> Usage | None:
    """`usage` (with `prompt_tokens_details.cached_tokens`) and llama.cpp `timings`, or None
    when the object reports neither."""
    usage = obj.get("usage") if isinstance(obj.get("usage"), Mapping) else None
    timings = obj.get("timings") if isinstance(obj.get("timings"), Mapping) else None
    if usage is None and timings is None:
        return None
    usage = usage or {}
    timings = timings or {}
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
    return Usage(
        prompt_tokens=_int(usage.get("prompt_tokens")),
        completion_tokens=_int(usage.get("completion_tokens")),
        cached_tokens=_int(cached),
        cache_n=_int(timings.get("cache_n")),
        server_prompt_ms=_float(timings.get("prompt_ms")),
        server_predicted_per_second=_float(timings.get("predicted_per_second")),
    )


def error_message(obj: Any) -> tuple[str, str | None]:
    """(message, code) from an OpenAI-style error body, nested or flat (old vLLM), or from
    whatever JSON / text came."""
    if isinstance(obj, Mapping):
        err = obj.get("error", obj)
        if isinstance(err, Mapping):
            message = err.get("message") or err.get("detail") or json.dumps(err)[:300]
            code = err.get("code") if err.get("code") is not None else err.get("type")
            return str(message), None if code is None else str(code)
        if isinstance(err, str):
            return err, None
    return str(obj)[:300], None


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
