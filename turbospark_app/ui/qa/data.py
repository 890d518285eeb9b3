"""What the QA panel plots and counts, kept apart from the widgets (pure Python, no Qt).

    Cadence     one point per Token event: the rolling rate of the turn being followed (k
                tokens / the time they took), over the tokens of the last RATE_WINDOW_S seconds
                but at least RATE_WINDOW_TOKENS gaps: smooth at 80 tok/s, quick at 2.5 tok/s.
                Between turns the line drops to 0 (nothing is generated), so two turns are
                never joined by a slope that no token made
    Cap         a step line: the ceiling the engine applies, `stepped_cap(user cap, thermal,
                memory)`, re-evaluated whenever the followed turn or a reading changes
    Levels      the thermal level and memory pressure as ladder steps (0..3, see
                engine.power), each a step line
    Stops       one record per stopped turn: when, in which phase, after how many tokens,
                and the Stop-to-ended latency the engine measured
    Counters    reused prefix tokens (last turn and in total) and slot evictions
    Logs        for the QA evidence export: every token (time, turn, rolling rate, the cap and
                levels in force) and every turn (prompt, reuse, new tokens, eviction, ending)

Times are seconds on the caller's clock (the panel uses time.monotonic() minus its start).
Every series keeps at most MAX_POINTS points: a long QA session must not grow without bound.
"""

from __future__ import annotations

import collections
import statistics
from dataclasses import dataclass, field
from typing import Any

from ...engine.power import MemoryPressure, ThermalLevel
from .power_controls import active_cap, memory_from_name, thermal_from_name

RATE_WINDOW_TOKENS = 4
RATE_WINDOW_S = 0.5
MAX_POINTS = 20_000

Point = tuple[float, float]


def level_step(thermal: ThermalLevel | None, memory: MemoryPressure | None) -> tuple[float | None, float | None]:
    """The ladder step of each reading (None = unavailable)."""
    return (None if thermal is None else float(thermal.step),
            None if memory is None else float(memory.step))


@dataclass
class StopRecord:
    """One stopped turn."""

    at: float  # seconds on the panel's clock
    conversation_id: str
    phase: str  # "queued" | "prefill" | "decode"
    new_tokens: int
    latency: float | None  # seconds from Stop to the turn's end (engine-measured)


@dataclass(frozen=True)
class TokenRecord:
    """One token as the panel saw it."""

    at: float
    request_id: int
    conversation_id: str
    index: int
    rate: float | None  # the rolling rate plotted for it (None: first of its turn / not followed)
    cap: float | None  # the ceiling in force (None = uncapped)
    thermal: str  # level names ("unavailable" when there is no reading)
    memory: str


@dataclass(frozen=True)
class TurnRecord:
    """One ended turn's figures."""

    at: float
    request_id: int
    conversation_id: str
    started: bool
    prompt_tokens: int
    reused_prefix_tokens: int
    new_tokens: int
    slot_evicted: bool
    stop_reason: str
    stop_latency: float | None


@dataclass
class QAData:
    """See the module docstring."""

    cadence: collections.deque[Point] = field(default_factory=lambda: collections.deque(maxlen=MAX_POINTS))
    cap: collections.deque[Point] = field(default_factory=lambda: collections.deque(maxlen=MAX_POINTS))
    thermal: collections.deque[Point] = field(default_factory=lambda: collections.deque(maxlen=MAX_POINTS))
    memory: collections.deque[Point] = field(default_factory=lambda: collections.deque(maxlen=MAX_POINTS))
    stops: list[StopRecord] = field(default_factory=list)
    token_log: collections.deque[TokenRecord] = field(default_factory=lambda: collections.deque(maxlen=MAX_POINTS))
    turn_log: collections.deque[TurnRecord] = field(default_factory=lambda: collections.deque(maxlen=MAX_POINTS))
    turns: int = 0
    evictions: int = 0
    last_reused: tuple[int, int] | None = None  # (reused, prompt) of the last started turn
    reused_total: int = 0
    prompt_total: int = 0
    followed: int | None = None  # the request whose cadence is plotted
    user_cap: float | None = None  # the followed turn's own cap (None = uncapped)
    thermal_level: ThermalLevel | None = None
    memory_level: MemoryPressure | None = None
    latest: float = 0.0  # the newest time any series has reached
    _times: dict[int, collections.deque[float]] = field(default_factory=dict)
    _running: list[int] = field(default_factory=list)
    _caps: dict[int, float | None] = field(default_factory=dict)
    _in_run: bool = False  # the cadence line is up (the followed turn has plotted a rate)

    # -- inputs ----------------------------------------------------------------------------

    def started(self, request_id: int, user_cap: float | None, now: float) -> None:
        """A turn started: it becomes the followed one (the newest turn is the one the tester
        is looking at)."""
        self._running.append(request_id)
        self._caps[request_id] = user_cap if user_cap and user_cap > 0 else None
        self._times[request_id] = collections.deque(maxlen=512)
        self._follow(request_id, now)

    def token(self, request_id: int, now: float, conversation_id: str = "", index: int = -1) -> float | None:
        """A token of `request_id` arrived at `now`; returns the rolling rate plotted for it
        (None for the first token of a turn, or for a turn that is not followed)."""
        rate = self._token(request_id, now)
        self.token_log.append(TokenRecord(now, request_id, conversation_id, index, rate, self.current_cap(),
                                          _name(self.thermal_level), _name(self.memory_level)))
        return rate

    def _token(self, request_id: int, now: float) -> float | None:
        times = self._times.get(request_id)
        if times is None:  # a turn started before the panel existed
            self.started(request_id, None, now)
            times = self._times[request_id]
        times.append(now)
        while len(times) > RATE_WINDOW_TOKENS + 1 and now - times[1] >= RATE_WINDOW_S:
            times.popleft()
        if request_id != self.followed or len(times) < 2 or times[-1] <= times[0]:
            return None
        if not self._in_run:  # the line rises from 0 where this turn's tokens begin
            self._add(self.cadence, times[0], 0.0)
            self._in_run = True
        rate = (len(times) - 1) / (times[-1] - times[0])
        self._add(self.cadence, now, rate)
        return rate

    def ended(self, request_id: int, stats: Any, conversation_id: str, now: float) -> None:
        """A turn ended (Finished: `stats` is its TurnStats; Failed: None)."""
        if request_id in self._running:
            self._running.remove(request_id)
        self._times.pop(request_id, None)
        self._caps.pop(request_id, None)
        if stats is not None:
            self._count(stats, conversation_id, now)
            self.turn_log.append(TurnRecord(
                now, request_id, conversation_id, bool(stats.started), stats.prompt_tokens,
                stats.reused_prefix_tokens, stats.new_tokens, bool(stats.slot_evicted),
                stats.stop_reason, stats.stop_latency))
        if request_id == self.followed:
            self.followed = None
            if self._in_run:  # nothing more comes from it: down to 0
                self._add(self.cadence, now, 0.0)
                self._in_run = False
            if self._running:  # go on with the newest turn still running
                self._follow(self._running[-1], now)

    def levels(self, thermal: str | None, memory: str | None, now: float) -> bool:
        """A system_info reading (level names, None = unavailable). Returns True when either
        level changed (the cap line steps with it)."""
        t, m = thermal_from_name(thermal), memory_from_name(memory)
        changed = (t, m) != (self.thermal_level, self.memory_level) or not self.thermal
        self.thermal_level, self.memory_level = t, m
        t_step, m_step = level_step(t, m)
        self._step(self.thermal, now, t_step)
        self._step(self.memory, now, m_step)
        if changed:
            self._step(self.cap, now, self.current_cap())
        return changed

    def tick(self, now: float) -> None:
        """Extend the step lines to `now` (so a level held for a while is drawn as held)."""
        for series in (self.thermal, self.memory, self.cap):
            if series:
                value = series[-1][1]
                if len(series) >= 2 and series[-2][1] == value:
                    series[-1] = (now, value)  # extend the flat run in place
                else:
                    self._add(series, now, value)
        self.latest = max(self.latest, now)

    # -- outputs ---------------------------------------------------------------------------

    def current_cap(self) -> float | None:
        """The ceiling in force for the followed turn now; None = uncapped (drawn off the
        axis, like an unavailable level)."""
        return active_cap(self.user_cap, self.thermal_level, self.memory_level)

    def stop_summary(self) -> str:
        """"3 stops · median 12 ms · max 31 ms"."""
        latencies = [s.latency for s in self.stops if s.latency is not None]
        if not latencies:
            return f"{len(self.stops)} stops" if self.stops else "no stops yet"
        return (f"{len(self.stops)} stop{'s' if len(self.stops) != 1 else ''} · "
                f"median {statistics.median(latencies) * 1000:.0f} ms · max {max(latencies) * 1000:.0f} ms")

    def clear(self, now: float) -> None:
        """Forget the plot and the counters (running turns stay followed)."""
        for series in (self.cadence, self.cap, self.thermal, self.memory):
            series.clear()
        self.stops.clear()
        self.token_log.clear()
        self.turn_log.clear()
        self.turns = self.evictions = self.reused_total = self.prompt_total = 0
        self.last_reused = None
        self.latest = now
        t_step, m_step = level_step(self.thermal_level, self.memory_level)
        self._step(self.thermal, now, t_step)
        self._step(self.memory, now, m_step)
        self._step(self.cap, now, self.current_cap())

    # -- internals -------------------------------------------------------------------------

    def _follow(self, request_id: int, now: float) -> None:
        if self._in_run:  # the previously followed turn is no longer plotted
            self._add(self.cadence, now, 0.0)
            self._in_run = False
        self.followed = request_id
        self.user_cap = self._caps.get(request_id)
        self._step(self.cap, now, self.current_cap())

    def _count(self, stats: Any, conversation_id: str, now: float) -> None:
        if stats.started:
            self.turns += 1
            self.evictions += int(bool(stats.slot_evicted))
            self.last_reused = (stats.reused_prefix_tokens, stats.prompt_tokens)
            self.reused_total += stats.reused_prefix_tokens
            self.prompt_total += stats.prompt_tokens
        if stats.stop_reason == "cancelled":
            phase = "queued" if not stats.started else ("prefill" if stats.new_tokens == 0 else "decode")
            self.stops.append(StopRecord(now, conversation_id, phase, stats.new_tokens, stats.stop_latency))

    def _add(self, series: collections.deque[Point], t: float, value: float) -> None:
        series.append((t, value))
        self.latest = max(self.latest, t)

    def _step(self, series: collections.deque[Point], t: float, value: float | None) -> None:
        """Append a step: hold the previous value up to `t`, then jump (None = a gap, drawn
        at -1 below the axis so "unavailable" is not mistaken for step 0)."""
        v = -1.0 if value is None else value
        if series and series[-1][1] != v:
            self._add(series, t, series[-1][1])
        if not series or series[-1] != (t, v):
            self._add(series, t, v)


def _name(level: ThermalLevel | MemoryPressure | None) -> str:
    return "unavailable" if level is None else level.name.lower()
