"""One turn's scheduler state in the engine thread, the figures reported when it ends, and the
live readings merged into the system_info snapshot."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generator, Sequence

import psutil

from ..chat.api import PreparedTurn
from ..engine.progress import RawDecodeResult
from .events import API_SESSION_PREFIX, AnyRequest, TurnStats


@dataclass(eq=False)
class Job:
    """One request's scheduler state. Mutable fields are guarded by the engine's Condition,
    except `cancelled`, a single bool the cancel predicate reads without the lock."""

    request_id: int
    request: AnyRequest
    submitted_at: float
    cancelled: bool = False
    cancel_at: float | None = None
    turn: PreparedTurn | None = None
    stream: Generator[Any, None, RawDecodeResult] | None = None
    ready_at: float = 0.0  # a parked (paced) job is not stepped before this
    announced: bool = False  # its Queued event was emitted
    started_at: float | None = None
    first_token_at: float | None = None
    generated_ids: list[int] = field(default_factory=list)
    text_parts: list[str] = field(default_factory=list)
    session_id: str | None = None  # a PromptRequest's KV session, chosen at start
    pending: Any = None  # a DecodeStep / PrefillStep waiting for the round's batched pass (batching.py)
    chunk_ran: bool = False  # its last PrefillStep ran in the round's pass: offer the next
    reply: Any = None  # what the stream gets back at its next step (True: its step ran batched)
    round_done: int = -1  # the last round in which it ran a prefill chunk

    @property
    def conversation_id(self) -> str:
        return self.session_id or self.request.conversation_id


def api_session(backend: Any, job: Job, request: Any, active: Sequence[Job]) -> str:
    """An unpinned API request's KV session: the idle API session sharing the longest prompt
    prefix, else a fresh one. Not one another running request took (slots are checked out
    lazily): this one would wait for that whole reply instead of decoding beside it."""
    fresh = f"{API_SESSION_PREFIX}{job.request_id}"
    session = backend.pick_session(request.prompt_ids, API_SESSION_PREFIX, fresh)
    if any(j.conversation_id == session for j in active if j is not job):
        return fresh
    return str(session)


def turn_stats(job: Job, result: RawDecodeResult, now: float) -> TurnStats:
    """A finished turn's figures, timed from its submission (queue time included)."""
    started = job.started_at is not None
    return TurnStats(
        prompt_tokens=result.prompt_tokens,
        reused_prefix_tokens=result.reused_prefix_tokens,
        new_tokens=result.new_tokens,
        stop_reason=result.reason.value,
        started=started,
        queued_seconds=(job.started_at if started else now) - job.submitted_at,
        time_to_first_token=(
            None if job.first_token_at is None else job.first_token_at - job.submitted_at
        ),
        prefill_seconds=result.prefill_seconds,
        decode_seconds=result.decode_seconds,
        prefill_tokens_per_sec=result.prefill_tokens_per_sec,
        decode_tokens_per_sec=result.decode_tokens_per_sec,
        stop_latency=None if job.cancel_at is None else max(0.0, now - job.cancel_at),
        slot_evicted=result.session_slot_evicted,
        drafted_tokens=result.drafted_tokens,
        accepted_tokens=result.accepted_tokens,
        restored_tokens=result.restored_tokens,
        image_tokens=result.image_tokens,
        image_encode_seconds=result.image_encode_seconds,
    )


def add_live_readings(info: dict[str, Any], monitors: Any, process: psutil.Process) -> None:
    """Merge readings taken NOW on the caller's thread into a system_info snapshot: the
    thermal / memory monitors' levels when given, else this process's memory and CPU."""
    if monitors is not None:
        from ..readings.system_info import system_info as live_document

        thermal, memory = monitors
        info.update(live_document(
            model=info.get("model"), sessions=list(info.get("sessions") or []),
            last_turn=info.get("last_turn"), thermal=thermal, memory=memory,
        ))
        return
    try:
        mem = process.memory_info()
        proc = info.setdefault("process", {})
        proc["rss_bytes"] = mem.rss
        proc["cpu_percent"] = process.cpu_percent(None)
        info.setdefault("system", {})["available_memory_bytes"] = psutil.virtual_memory().available
    except psutil.Error as e:  # a reading gone missing is shown, not raised
        info.setdefault("process", {})["error"] = str(e)
