"""Runs one admitted request as an engine job and writes its response, stream or not.

Whatever ends the handler (the client gone: aiohttp's handler_cancellation cancels the task
at once, also mid-prefill and for non-stream requests; a write error; a client that stopped
reading for `stall_timeout`; the server stopping), the `finally:` cancels the job, so the
engine drops it within one forward step, or before it starts when it is still queued.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from ..chat.api import TurnSettings
from ..chat.structured import StructuredPlan
from ..engine.progress import StopReason
from ..service.events import Failed, Finished, PromptRequest, Tail, Token
from .errors import ApiError
from .jobs import ApiJob, JobBoard
from .params import ApiParams
from .reply_wire import delta_json, message_json, reader_for, reply_finish
from .wire import DONE, PING, Envelope, chat_logprobs, finish_reason, legacy_logprobs, sse


CAP_HEADER = "X-TurboSpark-Cap"
STREAM_WRITE_BUFFER = 16 * 1024
STALL_POLL_SECONDS = 0.05


class ClientStalled(Exception):
    """The client has not read anything for `stall_timeout` seconds."""


@dataclass(frozen=True)
class Admitted:
    """A request that passed every check: its prompt ids, settings and envelope."""

    params: ApiParams
    prompt_ids: tuple[int, ...]
    prompt_text: str  # for echo
    settings: TurnSettings
    builder: Any
    envelope: Envelope
    plan: StructuredPlan = StructuredPlan()


@dataclass(frozen=True)
class Timing:
    ping_interval: float
    stall_timeout: float


def _cancel_reason(request: web.Request, stopping: bool) -> str:
    transport = request.transport
    if transport is None or transport.is_closing():
        return "client_disconnected"
    return "server_stopped" if stopping else "task_cancelled"


async def respond(request: web.Request, board: JobBoard, admitted: Admitted, timing: Timing,
                  stopping: Any) -> web.StreamResponse:
    """Submit the job and answer; `stopping()` tells a server stop from a lost client."""
    p = admitted.params
    job = board.submit(
        PromptRequest(admitted.prompt_ids, admitted.settings, admitted.builder, p.pin),
        response_id=admitted.envelope.id, endpoint=p.kind, stream=p.stream,
    )
    reason = "handler_ended"
    try:
        if p.stream:
            return await _stream(request, board, job, admitted, timing)
        return await _whole(job, admitted)
    except asyncio.CancelledError:
        reason = _cancel_reason(request, stopping())
        raise
    finally:
        if not job.over:
            board.cancel(job, reason)


def _cut(job: ApiJob, finished: Finished) -> ApiError | None:
    """The error that ends a reply stopped on the server's side while its client still waits
    (the server stopping): not a finish_reason "stop", which would pass a cut reply off as a
    whole one. None for a reply that ended by itself."""
    if finished.result.reason is not StopReason.CANCELLED:
        return None
    why = "the server stopped" if job.cancel_reason == "server_stopped" else "it was stopped on the server"
    n = len(finished.generated_ids)
    return ApiError(503, f"the reply was cut after {n} token{'s' * (n != 1)}: {why}",
                    type="server_error", code=job.cancel_reason or "cancelled")


def _delta(admitted: Admitted, text: str, tokens: list[Token], chat_delta: dict[str, Any] | None = None
           ) -> dict[str, Any] | None:
    """One chunk (None when there is nothing to say); a chat reply's delta comes read
    (`chat_delta`: content, reasoning_content, tool_calls)."""
    env, p = admitted.envelope, admitted.params
    said = bool(chat_delta) if chat_delta is not None else bool(text)
    if not said and not (p.logprobs and tokens):
        return None
    logprobs = None
    if p.logprobs and tokens:
        tb = admitted.builder.token_bytes
        logprobs = chat_logprobs(tokens, tb) if p.kind == "chat" else legacy_logprobs(tokens, tb, 0)
    if p.kind == "chat":
        delta: dict[str, Any] | str = chat_delta if chat_delta is not None else {"content": text}
    else:
        delta = text
    return env.chunk(delta, None, logprobs, p.include_usage)


async def _stream(request: web.Request, board: JobBoard, job: ApiJob, admitted: Admitted,
                  timing: Timing) -> web.StreamResponse:
    """The SSE response. A write that fails or stalls ends it quietly (the job is cancelled
    with that reason; aiohttp would log a handler exception as a server error)."""
    resp = web.StreamResponse(headers={
        "Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no",
        **cap_header(admitted.params),
    })
    await resp.prepare(request)
    try:
        await _write_stream(request, resp, job, admitted, timing)
    except ClientStalled:
        board.cancel(job, "client_stalled")
        if request.transport is not None:
            request.transport.abort()
    except ConnectionError:
        board.cancel(job, "write_error")
    return resp


async def _write_stream(request: web.Request, resp: web.StreamResponse, job: ApiJob,
                        admitted: Admitted, timing: Timing) -> None:
    env, p = admitted.envelope, admitted.params
    transport = request.transport
    sock = None if transport is None else transport.get_extra_info("socket")
    if sock is not None:
        # A token stream needs little buffering: bounded kernel buffers make a client that
        # stopped reading show up as a write backlog within a few dozen KiB.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, STREAM_WRITE_BUFFER)

    async def write(data: bytes) -> None:
        await resp.write(data)
        # aiohttp only drains every 64 KiB; watch the backlog ourselves (public API).
        deadline = None
        while transport is not None and transport.get_write_buffer_size() > STREAM_WRITE_BUFFER:
            if transport.is_closing():
                raise ConnectionResetError("the client closed the connection")
            now = asyncio.get_running_loop().time()
            deadline = deadline or now + timing.stall_timeout
            if now >= deadline:
                raise ClientStalled()
            await asyncio.sleep(STALL_POLL_SECONDS)

    first: dict[str, Any] | str = {"role": "assistant", "content": ""} if p.kind == "chat" else (
        admitted.prompt_text if p.echo else "")
    await write(sse(env.chunk(first, None, None, p.include_usage)))
    reader = reader_for(admitted)
    while True:
        try:
            event = await asyncio.wait_for(job.events.get(), timing.ping_interval)
        except TimeoutError:
            await write(PING)  # keeps long prefills observable (and probes the socket)
            continue
        batch = [event]
        while not job.events.empty() and not isinstance(batch[-1], (Finished, Failed)):
            batch.append(job.events.get_nowait())  # a client behind gets one write, not many
        out = bytearray()
        for ev in batch:
            if isinstance(ev, Token):
                read = None if reader is None else delta_json(reader.feed_token(ev.id, ev.delta, ev.at))
                chunk = _delta(admitted, ev.delta, [ev], read)
            elif isinstance(ev, Tail):
                read = None if reader is None else delta_json(reader.feed_text(ev.text))
                chunk = _delta(admitted, ev.text, [], read)
            elif isinstance(ev, Finished) and (cut := _cut(job, ev)) is not None:
                out += sse(cut.body()) + DONE  # the client keeps what came, and learns it is cut
                chunk = None
            elif isinstance(ev, Finished):
                if reader is not None and (rest := delta_json(reader.finish())):
                    out += sse(env.chunk(rest, None, None, p.include_usage))
                finish = reply_finish(reader, ev.result.reason, finish_reason(ev.result.reason, p.kind))
                out += sse(env.chunk({} if p.kind == "chat" else "", finish, None, p.include_usage))
                if p.include_usage:
                    out += sse(env.usage_chunk(ev))
                out += DONE
                chunk = None
            elif isinstance(ev, Failed):
                out += sse(ApiError(500, ev.message, type="server_error", code=ev.kind).body())
                out += DONE
                chunk = None
            else:
                chunk = None
            if chunk is not None:
                out += sse(chunk)
        if out:
            await write(bytes(out))
        if isinstance(batch[-1], (Finished, Failed)):
            await resp.write_eof()
            return


async def _whole(job: ApiJob, admitted: Admitted) -> web.Response:
    env, p = admitted.envelope, admitted.params
    tokens: list[Token] = []
    while True:
        event = await job.events.get()
        if isinstance(event, Token):
            tokens.append(event)
        elif isinstance(event, Finished):
            cut = _cut(job, event)
            if cut is not None:
                raise cut
            break
        elif isinstance(event, Failed):
            status = 503 if event.kind in ("engine", "backend_unavailable") else 500
            raise ApiError(status, event.message, type="server_error", code=event.kind)
    text = (admitted.prompt_text if p.echo else "") + event.text
    logprobs = None
    if p.logprobs:
        tb = admitted.builder.token_bytes
        logprobs = (chat_logprobs(tokens, tb) if p.kind == "chat"
                    else legacy_logprobs(tokens, tb, len(admitted.prompt_text) if p.echo else 0))
    body = env.final(text, event, logprobs)
    reader = reader_for(admitted)
    if reader is not None:
        for t in tokens:
            reader.feed_token(t.id, t.delta, t.at)
        tail = event.text[len("".join(t.delta for t in tokens)):]  # the sink's released tail
        reader.feed_text(tail)
        reader.finish()
        choice = body["choices"][0]
        choice["message"] = message_json(reader)
        choice["finish_reason"] = reply_finish(reader, event.result.reason, choice["finish_reason"])
    return web.json_response(body, headers=cap_header(p))


def cap_header(p: ApiParams) -> dict[str, str]:
    """`X-TurboSpark-Cap: <tok/s>` when the request's rate cap is applied (clients say so)."""
    return {CAP_HEADER: f"{p.rate_cap:g}"} if p.rate_cap else {}
