"""Pacing: the Pacer, the slept wait, the stepped_cap ladder, and pacing inside a run
(all against a fake clock, never wall time)."""

from __future__ import annotations

import itertools
import math
from typing import Any, Iterator

import pytest
from fakes import ByteTokenizer, FakeClock, ScriptedProducer, drain

from turbospark_app.engine import (
    THERMAL_POLL_TOKENS,
    GenerationConfig,
    MemoryPressure,
    PaceWait,
    Pacer,
    RateConfig,
    StopReason,
    TailProgress,
    ThermalLevel,
    TokenProgress,
    run_raw_completion,
    run_raw_completion_cancellable,
    run_raw_completion_chunked,
    stepped_cap,
    stream_raw_completion,
)
from turbospark_app.engine.pacing import PACE_SLICE_SECONDS, wait_until

TOK = ByteTokenizer()
V = TOK.VOCAB_SIZE
REPLY = TOK.encode("abcdefghijklmnopqrstuvwxyz0123456789")


# -- Pacer ------------------------------------------------------------------------------
def test_uncapped_pacer_never_waits() -> None:
    pacer = Pacer(None, 0.0)
    for _ in range(5):
        pacer.note_token()
        assert pacer.due_in(0.0) is None


def test_pacer_spaces_tokens_by_one_over_the_cap() -> None:
    pacer = Pacer(4.0, 10.0)
    pacer.note_token()
    assert pacer.due_in(10.0) == pytest.approx(0.25)
    assert pacer.due_in(10.25) is None  # released on time
    pacer.note_token()
    assert pacer.due_in(10.3) == pytest.approx(0.2)  # due at 10.5


def test_a_stall_earns_no_burst_credit() -> None:
    pacer = Pacer(10.0, 0.0)
    pacer.note_token()
    assert pacer.due_in(5.0) is None  # a slow forward pass: long overdue
    pacer.note_token()
    assert pacer.due_in(5.0) == pytest.approx(0.1)  # still spaced from the late release


def test_apply_cap_takes_effect_on_the_token_just_noted() -> None:
    pacer = Pacer(10.0, 0.0)
    for t in (0.1, 0.2):
        pacer.note_token()
        assert pacer.due_in(t - 0.1) == pytest.approx(0.1)
    pacer.note_token()  # the third token; the previous went at 0.2
    pacer.apply_cap(2.0, 0.2)
    assert pacer.cap == 2.0
    assert pacer.due_in(0.2) == pytest.approx(0.5)  # 0.2 + 1/2, not re-judged from 0


def test_apply_cap_to_none_and_back() -> None:
    pacer = Pacer(10.0, 0.0)
    pacer.note_token()
    pacer.apply_cap(None, 0.0)
    assert pacer.due_in(0.0) is None
    pacer.apply_cap(5.0, 1.0)
    pacer.note_token()
    assert pacer.due_in(1.0) == pytest.approx(0.2)


@pytest.mark.parametrize("cap", [0.0, -1.0, math.inf, math.nan])
def test_pacer_rejects_a_cap_that_is_not_positive_and_finite(cap: float) -> None:
    with pytest.raises(ValueError):
        Pacer(cap, 0.0)


# -- the slept wait ---------------------------------------------------------------------
def test_wait_until_sleeps_in_short_slices_until_the_deadline() -> None:
    fc = FakeClock(0.0)
    wait_until(0.1, fc.clock, fc.sleep, lambda: False)
    assert fc.now >= 0.1 - 1e-12
    assert max(fc.sleeps) <= PACE_SLICE_SECONDS <= 0.02
    assert sum(fc.sleeps) == pytest.approx(0.1)


def test_wait_until_stops_as_soon_as_cancel_is_true() -> None:
    fc = FakeClock(0.0)
    wait_until(1.0, fc.clock, fc.sleep, lambda: len(fc.sleeps) >= 3)
    assert len(fc.sleeps) == 3
    wait_until(1.0, fc.clock, fc.sleep, lambda: True)
    assert len(fc.sleeps) == 3


# -- stepped_cap ladder -----------------------------------------------------------------
CAPS = [None, 1.0, 12.0, 100.0]


def as_number(cap: float | None) -> float:
    return math.inf if cap is None else cap


def test_stepped_cap_documented_values() -> None:
    assert stepped_cap(20.0, ThermalLevel.NOMINAL, MemoryPressure.NORMAL) == 20.0
    assert stepped_cap(20.0, ThermalLevel.FAIR, MemoryPressure.NORMAL) == 15.0
    assert stepped_cap(20.0, ThermalLevel.SERIOUS, MemoryPressure.NORMAL) == 10.0
    assert stepped_cap(20.0, ThermalLevel.CRITICAL, MemoryPressure.NORMAL) == 5.0
    # No user cap: a hot machine is still slowed, from the uncapped base.
    assert stepped_cap(None, ThermalLevel.SERIOUS, MemoryPressure.NORMAL) == 15.0


def test_stepped_cap_is_none_only_when_nothing_applies() -> None:
    for cap, t, m in itertools.product(CAPS, ThermalLevel, MemoryPressure):
        nothing = cap is None and t is ThermalLevel.NOMINAL and m is MemoryPressure.NORMAL
        assert (stepped_cap(cap, t, m) is None) == nothing


def test_stepped_cap_is_monotone_and_never_above_the_user_cap() -> None:
    for cap in CAPS:
        for m in MemoryPressure:
            caps = [as_number(stepped_cap(cap, t, m)) for t in ThermalLevel]
            assert caps == sorted(caps, reverse=True)
        for t in ThermalLevel:
            caps = [as_number(stepped_cap(cap, t, m)) for m in MemoryPressure]
            assert caps == sorted(caps, reverse=True)
        for t, m in itertools.product(ThermalLevel, MemoryPressure):
            assert as_number(stepped_cap(cap, t, m)) <= as_number(cap)


def test_stepped_cap_most_restrictive_wins_and_ceilings_are_shared() -> None:
    for cap, t, m in itertools.product(CAPS, ThermalLevel, MemoryPressure):
        alone = min(as_number(stepped_cap(cap, t, MemoryPressure.NORMAL)),
                    as_number(stepped_cap(cap, ThermalLevel.NOMINAL, m)))
        assert as_number(stepped_cap(cap, t, m)) == alone
    for cap in CAPS:
        assert stepped_cap(cap, ThermalLevel.SERIOUS, MemoryPressure.NORMAL) == stepped_cap(cap, ThermalLevel.NOMINAL, MemoryPressure.WARNING)
        assert stepped_cap(cap, ThermalLevel.CRITICAL, MemoryPressure.NORMAL) == stepped_cap(cap, ThermalLevel.NOMINAL, MemoryPressure.CRITICAL)


# -- pacing inside a run ----------------------------------------------------------------
def paced_run(rate: RateConfig, fc: FakeClock, max_new: int, **kw: Any) -> tuple[Any, ScriptedProducer, list[Any]]:
    producer = ScriptedProducer.for_reply(V, 1, REPLY, clock=fc.clock)
    events: list[Any] = []
    cfg = GenerationConfig(max_new_tokens=max_new, rate=rate, **kw)
    result = run_raw_completion(producer, TOK, [1], cfg, 512, V, events.append)
    return result, producer, events


def decode_times(producer: ScriptedProducer) -> list[float]:
    return [c.at for c in producer.feeds()[1:]]  # type: ignore[misc]


def gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in zip(times, times[1:])]


def test_an_inactive_rate_config_does_no_pacing_work() -> None:
    def boom(*_: object) -> float:
        raise AssertionError("an inactive rate config must not touch the clock or sleep")

    rate = RateConfig(clock=boom, sleep=boom)
    assert not rate.is_active()
    producer = ScriptedProducer.for_reply(V, 1, REPLY)
    items, result = drain(stream_raw_completion(producer, TOK, [1], GenerationConfig(max_new_tokens=10, rate=rate), 64, V))
    assert result.new_tokens == 10 and not any(isinstance(i, PaceWait) for i in items)
    assert result.peak_memory_pressure is MemoryPressure.NORMAL


def test_tokens_are_spaced_to_the_cap() -> None:
    fc = FakeClock(100.0)
    result, producer, _ = paced_run(RateConfig(max_tokens_per_sec=10.0, clock=fc.clock, sleep=fc.sleep), fc, 12)
    times = decode_times(producer)
    assert len(times) == 11  # the 12th token is never fed
    assert times[0] == pytest.approx(100.1, abs=1e-9)
    assert gaps(times) == pytest.approx([0.1] * 10, abs=1e-9)
    assert max(fc.sleeps) <= 0.02 + 1e-12
    assert result.peak_memory_pressure is MemoryPressure.NORMAL  # a cap alone reads no probe


def test_the_last_token_pays_no_wait() -> None:
    fc = FakeClock()
    rate = RateConfig(max_tokens_per_sec=10.0, clock=fc.clock, sleep=fc.sleep)
    producer = ScriptedProducer.for_reply(V, 1, REPLY)
    items, _ = drain(stream_raw_completion(producer, TOK, [1], GenerationConfig(max_new_tokens=3, rate=rate), 64, V))
    waits = [i for i in items if isinstance(i, PaceWait)]
    assert [w.until for w in waits] == pytest.approx([100.1, 100.2])
    # Each wait sits between a token's progress and the forward pass that feeds it.
    kinds = [type(i).__name__ for i in items if not type(i).__name__.startswith("Prefill")]
    assert kinds == ["TokenProgress", "PaceWait", "TokenProgress", "PaceWait", "TokenProgress"]


def counting_probe(values: list[Any], log: list[int], producer_ref: list[ScriptedProducer]) -> Any:
    it: Iterator[Any] = itertools.chain(values, itertools.repeat(values[-1]))

    def probe() -> Any:
        log.append(len(producer_ref[0].feeds()) - 1 if producer_ref else -1)
        return next(it)

    return probe


@pytest.mark.parametrize(("max_new", "reads"), [(20, 3), (25, 4), (8, 1), (9, 2)])
def test_probes_are_read_at_decode_start_and_every_poll_interval(max_new: int, reads: int) -> None:
    assert THERMAL_POLL_TOKENS == 8
    fc = FakeClock()
    thermal: list[int] = []
    memory: list[int] = []
    ref: list[ScriptedProducer] = []
    rate = RateConfig(thermal_probe=counting_probe([ThermalLevel.NOMINAL], thermal, ref),
                      memory_probe=counting_probe([MemoryPressure.NORMAL], memory, ref),
                      clock=fc.clock, sleep=fc.sleep)
    producer = ScriptedProducer.for_reply(V, 1, REPLY)
    ref.append(producer)
    run_raw_completion(producer, TOK, [1], GenerationConfig(max_new_tokens=max_new, rate=rate), 512, V)
    # Read before the first decode feed, then after every 8th token (7, 15, 23 fed so far).
    assert thermal == [0, 7, 15, 23][:reads] and memory == thermal


def test_the_cap_steps_down_mid_run_when_the_machine_heats_up() -> None:
    fc = FakeClock(100.0)
    thermal = iter([ThermalLevel.NOMINAL] + [ThermalLevel.SERIOUS] * 10)
    rate = RateConfig(max_tokens_per_sec=10.0, thermal_probe=lambda: next(thermal), clock=fc.clock, sleep=fc.sleep)
    _, producer, _ = paced_run(rate, fc, 14)
    g = gaps(decode_times(producer))
    # Tokens 1..7 fed 0.1 s apart; from the 8th (the poll) on, 0.2 s apart (10 -> 5 tok/s).
    assert g[:6] == pytest.approx([0.1] * 6, abs=1e-9)
    assert g[6:] == pytest.approx([0.2] * 6, abs=1e-9)


def test_memory_pressure_paces_an_uncapped_run_and_its_peak_is_reported() -> None:
    fc = FakeClock(100.0)
    readings = iter([MemoryPressure.WARNING, MemoryPressure.CRITICAL, MemoryPressure.WARNING, MemoryPressure.NORMAL])
    rate = RateConfig(memory_probe=lambda: next(readings), clock=fc.clock, sleep=fc.sleep)
    result, producer, _ = paced_run(rate, fc, 25)
    assert result.peak_memory_pressure is MemoryPressure.CRITICAL
    assert gaps(decode_times(producer))[:6] == pytest.approx([1 / 15] * 6, abs=1e-9)  # 0.5 x 30


def test_the_reading_at_decode_start_counts_toward_the_peak() -> None:
    fc = FakeClock(100.0)
    readings = iter([MemoryPressure.WARNING] + [MemoryPressure.NORMAL] * 5)
    rate = RateConfig(memory_probe=lambda: next(readings), clock=fc.clock, sleep=fc.sleep)
    result, _, _ = paced_run(rate, fc, 12)
    assert result.peak_memory_pressure is MemoryPressure.WARNING


def test_a_probe_at_rest_with_no_cap_never_waits() -> None:
    fc = FakeClock(100.0)
    rate = RateConfig(thermal_probe=lambda: ThermalLevel.NOMINAL, clock=fc.clock, sleep=fc.sleep)
    result, _, _ = paced_run(rate, fc, 10)
    assert fc.sleeps == [] and result.new_tokens == 10


# -- cancel during a pacing wait --------------------------------------------------------
def test_a_stop_during_a_pacing_wait_ends_the_run_at_once() -> None:
    fc = FakeClock(100.0)
    rate = RateConfig(max_tokens_per_sec=10.0, clock=fc.clock, sleep=fc.sleep)
    producer = ScriptedProducer.for_reply(V, 1, TOK.encode("<en"), clock=fc.clock)
    events: list[Any] = []
    cfg = GenerationConfig(max_new_tokens=20, rate=rate, stop_strings=("<end>",))
    result = run_raw_completion_cancellable(producer, TOK, [1], cfg, 64, V, lambda: len(fc.sleeps) >= 2, events.append)
    assert result.reason is StopReason.CANCELLED
    assert len(fc.sleeps) == 2  # the wait ended right away, not after 0.1 s
    assert len(producer.feeds()) == 1  # no forward pass after the Stop
    assert events[-2:] == [TokenProgress(0, ord("<"), ""), TailProgress("<")]
    assert result.new_tokens == 1 and result.kv_backed_token_ids == [1] == producer.kv


def test_the_stream_checks_cancel_after_a_pace_wait_before_producing() -> None:
    fc = FakeClock(100.0)
    rate = RateConfig(max_tokens_per_sec=10.0, clock=fc.clock, sleep=fc.sleep)
    producer = ScriptedProducer.for_reply(V, 1, REPLY)
    stop = [False]
    stream = stream_raw_completion(producer, TOK, [1], GenerationConfig(max_new_tokens=9, rate=rate), 64, V, lambda: stop[0])
    items = []
    for item in stream:
        items.append(item)
        if isinstance(item, PaceWait):
            stop[0] = True  # pressed Stop while a scheduler held the wait
    assert len(producer.feeds()) == 1 and sum(isinstance(i, PaceWait) for i in items) == 1


def test_chunked_runs_are_paced_too() -> None:
    fc = FakeClock(100.0)
    rate = RateConfig(max_tokens_per_sec=5.0, clock=fc.clock, sleep=fc.sleep)
    producer = ScriptedProducer.for_reply(V, 3, REPLY, clock=fc.clock)
    run_raw_completion_chunked(producer, TOK, [1, 2, 3], GenerationConfig(max_new_tokens=5, rate=rate), 64, V, chunk_size=2)
    times = [c.at for c in producer.calls if c.method == "produce"]
    assert len(times) == 4 and gaps(times) == pytest.approx([0.2] * 3, abs=1e-9)  # type: ignore[arg-type]
