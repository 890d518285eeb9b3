"""An aiohttp fake of OpenAI-compatible servers, replaying llama-server-, vLLM- and Ollama-style
streams with their quirks (see shared research, "Chat, stream"), plus failures: 503 +
Retry-After, 401, 404, an error event mid-stream, a dropped connection, a hanging stream and an
endless slow stream (for Stop). Each POST takes the next queued scenario (else `default`).

Runs on its own thread with its own loop, on a real 127.0.0.1 socket, so the client under test
can live on any loop (plain asyncio or qasync).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any, Awaitable, Callable

from aiohttp import web

Scenario = Callable[[web.Request, dict], Awaitable[web.StreamResponse]]
WORDS = ["Hello", " there", ",", " how", " can", " I", " help", "?"]


def chunk(content: Any = None, *, role: bool = False, finish: str | None = None, **extra: Any) -> dict:
    delta: dict[str, Any] = {}
    if role:
        delta["role"] = "assistant"
    if content is not None or role:
        delta["content"] = content
    body = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "fake",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    body.update(extra)
    return body


async def _start_sse(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    return response


async def _send(response: web.StreamResponse, obj: Any, end: bytes = b"\n\n") -> None:
    payload = obj if isinstance(obj, str) else json.dumps(obj)
    await response.write(b"data: " + payload.encode() + end)


async def llama_server(request: web.Request, body: dict) -> web.StreamResponse:
    """content:null first chunk, `timings.cache_n`, `[DONE]` without the blank line."""
    r = await _start_sse(request)
    await _send(r, chunk(None, role=True))
    for w in WORDS:
        await _send(r, chunk(w))
    usage = {"prompt_tokens": 40, "completion_tokens": len(WORDS), "total_tokens": 40 + len(WORDS)}
    timings = {"cache_n": 32, "prompt_n": 8, "prompt_ms": 16.0, "predicted_n": len(WORDS),
               "predicted_per_second": 50.0}
    await _send(r, chunk(finish="stop", usage=usage, timings=timings))
    await r.write(b"data: [DONE]")  # no trailing blank line
    return r


async def vllm(request: web.Request, body: dict) -> web.StreamResponse:
    """usage chunk with `choices: null`, cached_tokens in prompt_tokens_details, CRLF framing."""
    r = await _start_sse(request)
    await _send(r, chunk("", role=True, usage=None), b"\r\n\r\n")
    for w in WORDS:
        await _send(r, chunk(w, usage=None), b"\r\n\r\n")
    await _send(r, chunk(finish="length", usage=None), b"\r\n\r\n")
    usage = {"prompt_tokens": 50, "completion_tokens": len(WORDS), "total_tokens": 50 + len(WORDS),
             "prompt_tokens_details": {"cached_tokens": 48}}
    await _send(r, {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "fake",
                    "choices": None, "usage": usage}, b"\r\n\r\n")
    await _send(r, "[DONE]", b"\r\n\r\n")
    return r


async def ollama(request: web.Request, body: dict) -> web.StreamResponse:
    """`: ping` comments, a finish chunk with an empty delta, usage without cache details, and
    events split across writes."""
    r = await _start_sse(request)
    await r.write(b": ping\n\n")
    await _send(r, chunk("", role=True))
    for i, w in enumerate(WORDS):
        raw = b"data: " + json.dumps(chunk(w)).encode() + b"\n\n"
        await r.write(raw[:7])  # an event split mid-JSON
        await asyncio.sleep(0.001)
        await r.write(raw[7:])
        if i == 3:
            await r.write(b": keep-alive\n\n")
    await _send(r, chunk(finish="stop"))
    usage = {"prompt_tokens": 30, "completion_tokens": len(WORDS), "total_tokens": 30 + len(WORDS)}
    await _send(r, {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "fake",
                    "choices": [], "usage": usage})
    await _send(r, "[DONE]")
    return r


async def no_done(request: web.Request, body: dict) -> web.StreamResponse:
    """A finish reason, then the connection closes: no `[DONE]` at all."""
    r = await _start_sse(request)
    for w in WORDS[:3]:
        await _send(r, chunk(w))
    await _send(r, chunk(finish="stop"))
    return r


async def error_midstream(request: web.Request, body: dict) -> web.StreamResponse:
    r = await _start_sse(request)
    for w in WORDS[:3]:
        await _send(r, chunk(w))
    await _send(r, {"error": {"message": "CUDA out of memory", "type": "server_error", "code": 500}})
    return r


async def dropped(request: web.Request, body: dict) -> web.StreamResponse:
    """Three tokens, then the server process 'dies': the socket closes with no finish."""
    r = await _start_sse(request)
    for w in WORDS[:3]:
        await _send(r, chunk(w))
    await asyncio.sleep(0.05)
    assert request.transport is not None
    request.transport.close()
    return r


def make_hang(state: dict) -> Scenario:
    async def hang(request: web.Request, body: dict) -> web.StreamResponse:
        """Two tokens, then silence with the connection open."""
        r = await _start_sse(request)
        for w in WORDS[:2]:
            await _send(r, chunk(w))
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            state["hang_closed_at"] = time.monotonic()
            raise
        return r
    return hang


def make_endless(state: dict, interval: float = 0.03) -> Scenario:
    async def endless(request: web.Request, body: dict) -> web.StreamResponse:
        """A token every `interval` until the client goes away (recorded for Stop tests)."""
        r = await _start_sse(request)
        state["endless_started"] = time.monotonic()
        try:
            i = 0
            while True:
                await _send(r, chunk(f" w{i}"))
                i += 1
                await asyncio.sleep(interval)
        except (asyncio.CancelledError, ConnectionError) as e:
            state["client_gone_at"] = time.monotonic()
            state["client_gone_how"] = type(e).__name__
            raise
    return endless


def busy(retry_after: str | None = "1", status: int = 503) -> Scenario:
    async def busy_reply(request: web.Request, body: dict) -> web.StreamResponse:
        headers = {"Retry-After": retry_after} if retry_after is not None else {}
        return web.json_response({"error": {"message": "server busy, please try again.",
                                            "type": "unavailable_error", "code": status}},
                                 status=status, headers=headers)
    return busy_reply


def status_reply(status: int, message: str, code: str | None = None) -> Scenario:
    async def reply(request: web.Request, body: dict) -> web.StreamResponse:
        return web.json_response({"error": {"message": message, "type": "invalid_request_error",
                                            "code": code}}, status=status)
    return reply


class FakeServer:
    """See the module docstring. `requests`: every chat body received; `state`: what the
    scenarios recorded (disconnect times)."""

    def __init__(self, models: tuple[str, ...] = ("fake-7b", "fake-70b"), api_key: str | None = None) -> None:
        self.models = models
        self.api_key = api_key
        self.queue: list[Scenario] = []
        self.default: Scenario = llama_server
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.state: dict = {}
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "FakeServer":
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def _authorized(self, request: web.Request) -> bool:
        return self.api_key is None or request.headers.get("Authorization") == f"Bearer {self.api_key}"

    async def _models(self, request: web.Request) -> web.StreamResponse:
        if not self._authorized(request):
            return await status_reply(401, "Invalid API Key")(request, {})
        return web.json_response({"object": "list", "data": [
            {"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in self.models]})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        if not self._authorized(request):
            return await status_reply(401, "Invalid API Key")(request, body)
        if body.get("model") not in self.models:
            return await status_reply(404, f"model '{body.get('model')}' not found", "model_not_found")(request, body)
        scenario = self.queue.pop(0) if self.queue else self.default
        return await scenario(request, body)
