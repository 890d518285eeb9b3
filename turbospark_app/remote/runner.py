"""Remote turns: a TurnRequest streamed from an OpenAI-compatible server, reported with the SAME
events the local engine thread emits (Started, Token, Finished, Failed, plus Retrying), so a
pane has one code path for both.

Everything runs on the asyncio loop the caller runs (qasync's in the app, so on the GUI
thread); listeners are called on that loop. `submit` returns a request id (negative, so it never
collides with the engine thread's ids); `cancel` closes the response at once (Stop) and the turn
ends as StopReason.CANCELLED with the click-to-closed latency as its stop latency.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..engine.progress import RawDecodeResult, StopReason
from ..host.lazy_import import lazy_module
from ..service.events import Failed, Finished, Retrying, Started, Token, TurnRequest, TurnStats
from .client import RemoteStream, RetryPolicy, Target, Timeouts
from .errors import RemoteError
from .sse import Usage

aiohttp = lazy_module("aiohttp")  # loaded by the first request (host/lazy_import.py)

Listener = Callable[[Any], None]

# TurboSpark servers (issue 10) read the user's tok/s cap from this request field and say so
# with the response header below; other servers ignore the unknown field.
CAP_FIELD = "max_tokens_per_sec"
CAP_HEADER = "X-TurboSpark-Cap"

_FINISH = {"stop": StopReason.END_OF_TURN, "length": StopReason.MAX_TOKENS,
           "tool_calls": StopReason.TOOL_CALLS, "function_call": StopReason.TOOL_CALLS}
_ids = itertools.count(-1, -1)


def _content(m: Any) -> Any:
    """A message's content: its text, or OpenAI's content parts when it carries images (each
    a `data:` PNG `image_url` part, before the text, as the local engine shows them)."""
    images = getattr(m, "images", ())
    if not images:
        return m.content
    parts: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": img.data_url()}} for img in images]
    return parts + ([{"type": "text", "text": m.content}] if m.content else [])


def chat_body(request: TurnRequest, model: str) -> dict[str, Any]:
    """The /v1/chat/completions body for a turn: messages, sampling, stop strings, the cap."""
    settings = request.settings
    gen = settings.generation
    shaping = gen.shaping
    messages: list[dict[str, Any]] = []
    if settings.system_prompt:
        messages.append({"role": "system", "content": settings.system_prompt})
    messages += [{"role": m.role, "content": _content(m)} for m in request.messages]
    body: dict[str, Any] = {
        "model": model,  # dropped below when empty (llama-server and TurboSpark serve one model)
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": gen.max_new_tokens,
        "temperature": shaping.temperature,
        "top_p": shaping.top_p,
    }
    if not model:
        del body["model"]
    if shaping.seed is not None:
        body["seed"] = shaping.seed
    if gen.stop_strings:
        body["stop"] = list(gen.stop_strings)[:4]
    # Not OpenAI, but llama-server and vLLM read them and the others ignore them.
    if shaping.top_k > 0:
        body["top_k"] = shaping.top_k
    if shaping.min_p > 0:
        body["min_p"] = shaping.min_p
    if shaping.repetition_penalty != 1.0:
        body["repeat_penalty"] = body["repetition_penalty"] = shaping.repetition_penalty
    if gen.rate.max_tokens_per_sec:
        body[CAP_FIELD] = gen.rate.max_tokens_per_sec
    if getattr(request, "continue_final", False):
        # vLLM's names (TurboSpark's server reads them too): the last assistant message is left
        # open and the reply continues it.
        body["continue_final_message"] = True
        body["add_generation_prompt"] = False
    return body


@dataclass(eq=False)
class RemoteJob:
    """One remote turn's state (loop thread only)."""

    request_id: int
    request: TurnRequest
    target: Target
    listener: Listener
    submitted_at: float
    stream: RemoteStream | None = None
    task: asyncio.Task[None] | None = None
    started_at: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    cancel_at: float | None = None
    parts: list[str] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None


class RemoteRunner:
    """Streams remote turns on the running loop; one aiohttp ClientSession for all of them."""

    def __init__(self, *, timeouts: Timeouts = Timeouts(), retry: RetryPolicy = RetryPolicy(),
                 observer: Listener | None = None) -> None:
        """`observer(event)`: every event of every turn, after its listener (status bar, QA)."""
        self.timeouts = timeouts
        self.retry = retry
        self.observer = observer
        self._session: aiohttp.ClientSession | None = None
        self._jobs: dict[int, RemoteJob] = {}

    def session(self) -> aiohttp.ClientSession:
        """The shared ClientSession (created on first use, inside the running loop)."""
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    def submit(self, request: TurnRequest, listener: Listener, target: Target) -> int:
        """Start a turn on the running loop; `listener(event)` gets its events, the last one
        Finished or Failed. Returns the request id."""
        rid = next(_ids)
        job = RemoteJob(rid, request, target, listener, time.monotonic())
        self._jobs[rid] = job
        job.task = asyncio.get_event_loop().create_task(self._run(job))
        return rid

    def cancel(self, request_id: int) -> bool:
        """Stop: close the response now; the turn ends CANCELLED. False when not running."""
        job = self._jobs.get(request_id)
        if job is None or job.cancel_at is not None:
            return False
        job.cancel_at = time.monotonic()
        if job.stream is not None:
            job.stream.close()
        if job.task is not None:
            job.task.cancel()
        return True

    def stop_all_now(self) -> None:
        """Stop every turn and deliver its Finished (CANCELLED) before returning: the window is
        closing and the loop may not run again, but stopped replies must still be saved."""
        for job in list(self._jobs.values()):
            self.cancel(job.request_id)
            self._finish(job)

    def running(self) -> list[int]:
        """Ids of the turns not yet ended."""
        return list(self._jobs)

    async def aclose(self) -> None:
        """Stop every turn and close the session."""
        for rid in list(self._jobs):
            self.cancel(rid)
        tasks = [j.task for j in self._jobs.values() if j.task is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    # -- one turn --------------------------------------------------------------------------

    async def _run(self, job: RemoteJob) -> None:
        rid, cid = job.request_id, job.request.conversation_id
        stream = RemoteStream(
            self.session(), job.target, chat_body(job.request, job.target.model),
            timeouts=self.timeouts, retry=self.retry,
            on_wait=lambda attempt, seconds, status: self._emit(job, Retrying(rid, cid, attempt, seconds, status)),
        )
        job.stream = stream
        try:
            await stream.open()
            job.started_at = time.monotonic()
            self._emit(job, Started(rid, cid, 0))
            async for chunk in stream.chunks():
                if chunk.content:
                    now = time.monotonic()
                    if job.first_token_at is None:
                        job.first_token_at = now
                    job.last_token_at = now
                    self._emit(job, Token(rid, cid, len(job.parts), -1, chunk.content, at=time.monotonic()))
                    job.parts.append(chunk.content)
                if chunk.usage is not None:
                    job.usage = job.usage.merged(chunk.usage)
                job.finish_reason = chunk.finish_reason or job.finish_reason
        except asyncio.CancelledError:
            if job.cancel_at is None:
                stream.close()
                raise
        except RemoteError as e:
            if job.cancel_at is None:
                stream.close()
                self._fail(job, e)
                return
        finally:
            stream.close()
        self._finish(job)

    def _finish(self, job: RemoteJob) -> None:
        now = time.monotonic()
        reason = StopReason.CANCELLED if job.cancel_at is not None else \
            _FINISH.get(job.finish_reason or "stop", StopReason.END_OF_TURN)
        stats = self._stats(job, reason, now)
        result = RawDecodeResult(
            prompt_tokens=stats.prompt_tokens, new_tokens=stats.new_tokens,
            prefill_seconds=stats.prefill_seconds, decode_seconds=stats.decode_seconds, reason=reason,
            kv_position=0, reused_prefix_tokens=stats.reused_prefix_tokens,
        )
        text = "".join(job.parts)
        self._end(job, Finished(job.request_id, job.request.conversation_id, result, (), (), text, stats))

    def _fail(self, job: RemoteJob, error: RemoteError) -> None:
        text = "".join(job.parts)
        stats = self._stats(job, StopReason.CANCELLED, time.monotonic(), stop_reason=f"error: {error.kind}") \
            if text else None
        self._end(job, Failed(job.request_id, job.request.conversation_id, error.message, error.kind,
                              "RemoteError", partial=text, stats=stats))

    def _stats(self, job: RemoteJob, reason: StopReason, now: float, stop_reason: str = "") -> TurnStats:
        usage = job.usage
        chunks = len(job.parts)
        new = usage.completion_tokens if usage.completion_tokens is not None else chunks
        span = (job.last_token_at or 0.0) - (job.first_token_at or 0.0)
        ttft = None if job.first_token_at is None else job.first_token_at - job.submitted_at
        prompt = usage.prompt_tokens or 0
        reused = usage.reused_tokens or 0
        prefill_rate = 0.0
        if usage.server_prompt_ms:  # llama.cpp timings: the server's own prefill figure
            prefill_rate = max(0, prompt - reused) / (usage.server_prompt_ms / 1000)
        cap = ""
        if job.request.settings.generation.rate.max_tokens_per_sec:
            headers = job.stream.info.headers if job.stream is not None else {}
            cap = "applied by server" if any(k.lower() == CAP_HEADER.lower() for k in headers) \
                else "not applied (remote)"
        return TurnStats(
            prompt_tokens=prompt, reused_prefix_tokens=reused, new_tokens=new,
            stop_reason=stop_reason or reason.value, started=job.started_at is not None,
            queued_seconds=(job.started_at or now) - job.submitted_at,
            time_to_first_token=ttft,
            prefill_seconds=ttft or 0.0,
            decode_seconds=max(0.0, span),
            prefill_tokens_per_sec=prefill_rate,
            decode_tokens_per_sec=(new - 1) / span if new > 1 and span > 0 else 0.0,
            stop_latency=None if job.cancel_at is None else max(0.0, now - job.cancel_at),
            slot_evicted=False,
            source="remote", remote=f"{job.target.name or job.target.base_url} · {job.target.model}",
            usage_reported=usage.completion_tokens is not None,
            reuse_source=usage.reuse_source, cap=cap,
        )

    def _emit(self, job: RemoteJob, event: Any) -> None:
        job.listener(event)
        if self.observer is not None:
            self.observer(event)

    def _end(self, job: RemoteJob, event: Any) -> None:
        if self._jobs.pop(job.request_id, None) is not None:  # ended once (stop_all_now)
            self._emit(job, event)
