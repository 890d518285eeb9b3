"""The HTTP side of a remote engine: aiohttp requests to an OpenAI-compatible server.

`RemoteStream` is one streamed chat completion: `await stream.open()` sends the request
(retrying 429 / 503 a bounded number of times, honouring `Retry-After`), then
`async for chunk in stream` yields parsed `ChunkInfo`s until `[DONE]`, a finish reason followed
by the end of the body, or an error. `stream.close()` closes the response at once (Stop): the
socket is shut, which is how every server learns the client is gone.
"""

from __future__ import annotations

import asyncio
import email.utils
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable, Mapping

from yarl import URL

from ..host.lazy_import import lazy_module
from .errors import RemoteError, connection_error, http_error
from .sse import ChunkInfo, SSEDecoder, StreamFormatError, error_message, interpret

aiohttp = lazy_module("aiohttp")  # loaded by the first request (host/lazy_import.py)

RETRY_STATUSES = (429, 503)


def api_base(base_url: str) -> str:
    """`http://host:8080` -> `http://host:8080/v1`; a URL with a path is kept as given
    (`http://host/v1`, `https://gw.example/openai/v1`)."""
    url = base_url.strip().rstrip("/")
    if not url:
        raise RemoteError("bad_request", "The endpoint has no base URL.")
    if "://" not in url:
        url = "http://" + url
    parsed = URL(url)
    if not parsed.host:
        raise RemoteError("bad_request", f"Not a valid base URL: {base_url!r}")
    return url + "/v1" if parsed.path in ("", "/") else url


@dataclass(frozen=True)
class Timeouts:
    """Seconds. `read`: longest silence inside a response (a hanging stream ends after it)."""

    connect: float = 10.0
    read: float = 120.0

    def client_timeout(self) -> aiohttp.ClientTimeout:
        return aiohttp.ClientTimeout(total=None, connect=self.connect, sock_read=self.read)


@dataclass(frozen=True)
class RetryPolicy:
    """429 / 503 are retried up to `attempts` times; the wait is the server's `Retry-After`
    (or `backoff * 2**n` without one), and a wait longer than `max_wait` is not waited for."""

    attempts: int = 3
    backoff: float = 0.5
    max_wait: float = 30.0


@dataclass(frozen=True)
class Target:
    """Where a remote turn goes: the endpoint's API base, its key and the model id."""

    base_url: str
    model: str
    api_key: str = ""
    name: str = ""  # the endpoint's name (figures say where a reply came from)

    def headers(self) -> dict[str, str]:
        headers = {"Accept": "text/event-stream"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def url(self, path: str) -> str:
        return api_base(self.base_url) + path


@dataclass
class StreamInfo:
    """What the transport saw, for the figures."""

    attempts: int = 0
    waited_seconds: float = 0.0
    status: int | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    comments: int = 0  # SSE keep-alive comments
    saw_done: bool = False


def retry_after_seconds(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """`retry-after-ms`, or `Retry-After` as seconds or an HTTP date; None when absent or bad."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("Retry-After")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


async def read_error(response: aiohttp.ClientResponse) -> tuple[str, str | None]:
    """(message, code) of an error reply's body (JSON or text)."""
    try:
        body = await response.read()
    except (aiohttp.ClientError, asyncio.TimeoutError):
        return response.reason or f"HTTP {response.status}", None
    text = body.decode("utf-8", "replace").strip()
    try:
        import json

        return error_message(json.loads(text))
    except ValueError:
        return (text[:300] or response.reason or f"HTTP {response.status}"), None


Sleep = Callable[[float], Awaitable[Any]]
OnWait = Callable[[int, float, int], None]  # attempt, seconds, status


class RemoteStream:
    """One streamed chat completion; see the module docstring."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        target: Target,
        body: Mapping[str, Any],
        *,
        timeouts: Timeouts = Timeouts(),
        retry: RetryPolicy = RetryPolicy(),
        on_wait: OnWait | None = None,
    ) -> None:
        self._session = session
        self.target = target
        self.body = dict(body)
        self.timeouts = timeouts
        self.retry = retry
        self._on_wait = on_wait
        self.info = StreamInfo()
        self._response: aiohttp.ClientResponse | None = None
        self._closed = False
        self.url = target.url("/chat/completions")

    async def open(self) -> None:
        """Send the request; returns once the 200 headers are in. Raises RemoteError."""
        attempt = 0
        while True:
            attempt += 1
            self.info.attempts = attempt
            try:
                response = await self._session.post(
                    self.url, json=self.body, headers=self.target.headers(),
                    timeout=self.timeouts.client_timeout(),
                )
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
                raise self._error(e) from e
            self.info.status = response.status
            self.info.headers = dict(response.headers)
            if response.status == 200:
                self._response = response
                if self._closed:  # Stop came while the request was in flight
                    response.close()
                return
            message, code = await read_error(response)
            response.release()
            if response.status in RETRY_STATUSES and attempt <= self.retry.attempts:
                wait = retry_after_seconds(response.headers)
                wait = self.retry.backoff * 2 ** (attempt - 1) if wait is None else wait
                if wait <= self.retry.max_wait:
                    if self._on_wait is not None:
                        self._on_wait(attempt, wait, response.status)
                    self.info.waited_seconds += wait
                    await asyncio.sleep(wait)
                    continue
                message += f" (asked to retry after {wait:g} s, longer than {self.retry.max_wait:g} s)"
            raise http_error(response.status, message, code, self.url, self.target.model)

    async def chunks(self) -> AsyncIterator[ChunkInfo]:
        """Parsed events until the stream ends. Raises RemoteError (error event, dropped
        connection, timeout, garbage); a closed (stopped) stream just ends."""
        assert self._response is not None, "open() first"
        decoder = SSEDecoder()
        finished = False
        try:
            async for data in self._response.content.iter_any():
                for payload in decoder.feed(data):
                    chunk = self._checked(payload)
                    finished = finished or chunk.finish_reason is not None
                    yield chunk
                    if chunk.done:
                        return
            for payload in decoder.close():
                chunk = self._checked(payload)
                finished = finished or chunk.finish_reason is not None
                yield chunk
                if chunk.done:
                    return
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
            if self._closed:
                return
            raise self._error(e) from e
        finally:
            self.info.comments = decoder.comments
        if not finished and not self._closed:
            # No [DONE] and no finish reason: the server went away mid-reply.
            raise RemoteError("dropped", f"The stream from {self.url} ended before the reply did "
                              "(no finish reason, no [DONE]). The reply so far is kept.")

    def _checked(self, payload: str) -> ChunkInfo:
        try:
            chunk = interpret(payload)
        except StreamFormatError as e:
            raise RemoteError("protocol", f"The server at {self.url} sent something that is not an "
                              f"OpenAI stream: {e}") from e
        if chunk.error is not None:
            raise RemoteError("server", f"The server reported an error mid-reply: {chunk.error}. "
                              "The reply so far is kept.")
        self.info.saw_done = self.info.saw_done or chunk.done
        return chunk

    def close(self) -> None:
        """Close the response now (Stop). Safe at any time, from the loop's thread."""
        self._closed = True
        if self._response is not None:
            self._response.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def _error(self, exc: BaseException) -> RemoteError:
        return connection_error(exc, self.url, (self.timeouts.connect, self.timeouts.read))


async def model_entries(session: aiohttp.ClientSession, target: Target,
                        timeouts: Timeouts = Timeouts(connect=10.0, read=20.0)) -> list[dict[str, str]]:
    """`GET /v1/models`: {"id", "owned_by"} of every model the server offers. `owned_by` names
    the server kind for the ones we know ("turbospark", "vllm", "llamacpp"). Raises RemoteError."""
    url = target.url("/models")
    headers = {k: v for k, v in target.headers().items() if k != "Accept"}
    try:
        async with session.get(url, headers=headers, timeout=timeouts.client_timeout()) as response:
            if response.status != 200:
                message, code = await read_error(response)
                raise http_error(response.status, message, code, url, target.model)
            try:
                data = await response.json(content_type=None)
            except ValueError as e:
                raise RemoteError("protocol", f"{url} did not answer with JSON: {e}") from e
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
        raise connection_error(e, url, (timeouts.connect, timeouts.read)) from e
    items = data.get("data") if isinstance(data, Mapping) else data
    if not isinstance(items, list):
        raise RemoteError("protocol", f"{url} did not list models (no `data` array).")
    # Ollama's native /api/tags uses "name"/"model"; the /v1 list uses "id".
    return [{"id": str(m.get("id") or m.get("name") or m.get("model")), "owned_by": str(m.get("owned_by") or "")}
            for m in items if isinstance(m, Mapping)]


async def list_models(session: aiohttp.ClientSession, target: Target,
                      timeouts: Timeouts = Timeouts(connect=10.0, read=20.0)) -> list[str]:
    """The ids `GET /v1/models` lists (Test connection). Raises RemoteError."""
    return [m["id"] for m in await model_entries(session, target, timeouts)]
